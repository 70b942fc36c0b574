#!/usr/bin/env bash
# nat_lab_test.sh — a unicast mirror behind NAT, for real: n1 (198.19.0.2)
# sits behind a router namespace (h3) that masquerades it with nftables
# onto the LAN as 198.18.0.3; the source on h1 has no route to n1 at all,
# so DATA reaches the mirror only through the NAT mapping its PUNCH opened.
# The mirror is an exact copy. A PUNCH captured on the router's LAN side
# and replayed from another host (h2) redirects nothing. Then with a
# pre-shared key: the same captured PUNCH replayed from the router's own
# address on another port (as an on-path attacker could) is refused as a
# replay, and the stream stays with the mirror.
# Usage: nat_lab_test.sh PATH/TO/ringfire   (root; exit 77 = skipped)
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
atk="python3 $(cd "$(dirname "$0")" && pwd)/attacker.py"
command -v nft >/dev/null || lab_skip "nftables (nft) is missing"
lab_up 3
lab_logs nat

# n1 behind h3: a private link 198.19.0.0/24, h3 forwards and masquerades.
nat_host="${LAB_PREFIX}n1"
ip netns add "$nat_host"
LAB_HOSTS+=("$nat_host")
ip link add "${LAB_PREFIX}nr" netns "$(host 3)" type veth peer name "${LAB_PREFIX}nn" netns "$nat_host"
on 3 ip link set "${LAB_PREFIX}nr" name inside
on 3 ip addr add 198.19.0.1/24 dev inside
on 3 ip link set inside up
ip -n "$nat_host" link set lo up
ip -n "$nat_host" link set "${LAB_PREFIX}nn" name eth0
ip -n "$nat_host" addr add 198.19.0.2/24 dev eth0
ip -n "$nat_host" link set eth0 up
ip -n "$nat_host" route add default via 198.19.0.1
on 3 sysctl -qw net.ipv4.ip_forward=1
on 3 nft -f - <<'NFT' || lab_skip "nftables NAT is not available in this kernel"
table ip rfnat {
  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    oifname "eth0" ip saddr 198.19.0.0/24 masquerade
  }
}
NFT
nat() { ip netns exec "$nat_host" "$@"; }
wait_for 5 nat ping -c 1 -W 1 198.18.0.1 >/dev/null || fail "n1 cannot reach h1 through the NAT"
on 1 ping -c 1 -W 1 198.19.0.2 >/dev/null 2>&1 && fail "h1 reaches n1 directly: the test would prove nothing"

src=$(ring_name src)
"$rf" create "$src" --capacity 262144 --slot-size 64 >/dev/null

run_phase() {
  local phase=$1 p0=$2 first=${#LAB_PIDS[@]} psk_opt=()
  [[ $phase == psk ]] && psk_opt=(--psk-file "$logs/psk")
  log "[$phase] serve on h1 (unicast port $((p0 + 2))), a unicast mirror on n1 behind the NAT"
  bg 1 "$logs/serve-$phase" "$rf" serve "$src" --listen 198.18.0.1:$p0 --udp $((p0 + 2)) "${psk_opt[@]}"
  wait_for 5 grep -q "^serve: " "$logs/serve-$phase" || fail "[$phase] serve did not start"
  # Capture the first PUNCH as it leaves the router for the LAN.
  on 3 $atk sniff-punch eth0 $((p0 + 2)) "$logs/punch-$phase" >"$logs/sniff-$phase" 2>&1 &
  local sniffer=$!
  sleep 0.3
  local ring
  ring=$(ring_name "n1-$phase")
  ip netns exec "$nat_host" "$rf" mirror 198.18.0.1:$p0 "$ring" --unicast --from latest "${psk_opt[@]}" \
    >"$logs/m-$phase" 2>&1 &
  LAB_PIDS+=($!)
  wait_for 10 grep -q "^mirror: 198" "$logs/m-$phase" || fail "[$phase] the mirror did not connect: $(cat "$logs/m-$phase")"
  wait "$sniffer" || fail "[$phase] no PUNCH captured on the router: $(cat "$logs/sniff-$phase")"
  read -r nat_ip nat_port <"$logs/punch-$phase.from"
  [[ $nat_ip == 198.18.0.3 ]] || fail "[$phase] the PUNCH left the router as $nat_ip, not masqueraded"
  local start
  start=$("$rf" stat "$src" | awk '$1 == "write_seq" {print $2}')
  on 1 "$rf" publish "$src" --count 20000 --rate 20k --quiet >/dev/null &
  local pub=$!
  sleep 0.3
  log "[$phase] the captured PUNCH replayed from h2 redirects nothing"
  on 2 $atk replay "$logs/punch-$phase" 198.18.0.1:$((p0 + 2)) >"$logs/replay-h2-$phase"
  grep -q "received 0$" "$logs/replay-h2-$phase" || fail "[$phase] the replay from h2 got DATA: $(cat "$logs/replay-h2-$phase")"
  if [[ $phase == psk ]]; then
    log "[psk] ... nor from the router's own address on another port (an on-path replay)"
    sleep 1.5  # the mirror has sent newer PUNCHes (keep-alives) since
    on 3 $atk replay "$logs/punch-$phase" 198.18.0.1:$((p0 + 2)) 198.18.0.3 $((nat_port + 1)) >/dev/null
  fi
  wait "$pub"
  wait_for 15 mirror_at "$logs/m-$phase" $((start + 20000)) ||
    fail "[$phase] the mirror behind the NAT did not reach $((start + 20000)): $(tail -n 1 "$logs/m-$phase")"
  local out
  out=$("$rf" tail "$ring" --from oldest --idle-exit 300ms --quiet)
  [[ "$out" == "tail: 20000 records verified, 0 lost, "*" 0 torn, 0 misplaced"* ]] || fail "[$phase] $out"
  by_udp "$logs/m-$phase" || fail "[$phase] the DATA came by repair, not through the NAT: $(tail -n 1 "$logs/m-$phase")"
  sleep 1.2
  local refused
  refused=$(grep '^serve: refused' "$logs/serve-$phase" | tail -n 1)
  echo "   $refused"
  if [[ $phase == plain ]]; then
    [[ $refused == *"probed "[1-9]* ]] || fail "[plain] the replay from h2 was not counted as probed"
  else
    # Both replays are old PUNCHes under the key: refused as replays, from anywhere.
    [[ $refused == *"replayed "[2-9][0-9]* ]] || fail "[psk] the replays were not refused as replays"
    grep -q "authenticated" "$logs/m-$phase" || fail "[psk] the mirror did not authenticate: $(head -n 1 "$logs/m-$phase")"
  fi
  stop_since "$first"
}

run_phase plain 7400
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$logs/psk"
chmod 600 "$logs/psk"
run_phase psk 7500

lab_finish nat_lab_test "$logs"/serve-* "$logs"/m-*
