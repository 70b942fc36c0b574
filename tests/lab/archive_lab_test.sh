#!/usr/bin/env bash
# archive_lab_test.sh — replay that merges into the live stream, in network
# namespaces: h1 records its 65,536-record ring (`ringfire record`) while
# 200,000 records are published (the ring laps three times), then serves
# it with --archive. Three mirrors join late, from the oldest record —
# multicast (h2), unicast (h3) and TCP (h2) — while another 30,000 records
# are published live: each gets the first 200,000 from the archive over its
# TCP connection and the rest as the live stream, and must end with every
# record 0..230,999 exactly once, in order, whole: each mirror ring is
# itself recorded (a hub archiving its mirror), and that archive is read
# back record by record (`tail --archive`: no gap, no hole, no torn or
# misplaced record). (The live records a UDP mirror holds back while the
# replay runs are written in one burst when it meets them: kept below the
# ring's capacity here, or the mirror ring's own readers are lapped.)
# Then a stranger's HELLOs for "oldest" beyond the
# source's replay cap wait, counted, while an honest mirror still streams.
# With BACKEND af_packet or af_xdp the source and the mirrors run on DPDK.
# Usage: archive_lab_test.sh PATH/TO/ringfire [kernel|af_packet|af_xdp]
#        (root; exit 77 = skipped)
set -u
rf=$1
backend=${2:-kernel}
source "$(dirname "$0")/lib.sh"
[[ $backend =~ ^(kernel|af_packet|af_xdp)$ ]] || { echo "usage: $0 RINGFIRE [kernel|af_packet|af_xdp]" >&2; exit 2; }
[[ $backend != kernel ]] && require_dpdk
lab_up 3
lab_logs archive
arcs=$(mktemp -d /tmp/rf-archive-lab.XXXXXX)
trap 'rm -rf "$arcs"; lab_down' EXIT

mb() {
  case $backend in
    kernel) echo "--iface eth0" ;;
    af_packet) echo "--backend dpdk --pmd af_packet --iface eth0" ;;
    af_xdp)
      local n
      n=$(($(cat "$logs/xdp-ifaces" 2>/dev/null || echo 0) + 1))
      echo "$n" >"$logs/xdp-ifaces"
      ip link add "${LAB_PREFIX}x$n" netns "$(host "$1")" type veth peer name "${LAB_PREFIX}y$n" netns "${LAB_PREFIX}br"
      ip -n "${LAB_PREFIX}br" link set "${LAB_PREFIX}y$n" master br0 up
      on "$1" ip link set "${LAB_PREFIX}x$n" name "x$n"
      on "$1" ip link set "x$n" up
      wait_for 5 link_up "$1" "x$n" || echo "archive_lab: x$n on h$1 has no carrier" >&2
      echo "--backend dpdk --pmd af_xdp --iface x$n --dpdk-ip 198.18.0.$((100 + n))" ;;
  esac
}

src=$(ring_name src)
"$rf" create "$src" --capacity 65536 --slot-size 64 >/dev/null
log "record $src on h1, publish 200000 records (the ring laps 3 times)"
bg 1 "$logs/record-src" "$rf" record "$src" --dir "$arcs/src" --segment-size 4Mi --fsync never
wait_for 5 grep -q "new archive" "$logs/record-src" || fail "record did not start: $(cat "$logs/record-src")"
on 1 "$rf" publish "$src" --count 200000 --rate 100k --quiet >/dev/null
wait_for 10 grep -q "recorded to 200000" "$logs/record-src" || sleep 2

log "serve it with --archive (replays at 4 MiB/s, two at once)"
bg 1 "$logs/serve" "$rf" serve $(mb 1) "$src" --listen 198.18.0.1:7500 --multicast 239.255.0.1:7501 --udp 7502 \
  --archive "$arcs/src" --archive-rate 4Mi --archive-replays 2
wait_for 5 grep -q "^serve: " "$logs/serve" || fail "serve did not start: $(cat "$logs/serve")"

# Each mirror ring exists (the source's geometry, sparse) before its
# mirror starts, so its own recorder reads it from the first record.
start_mirror() {  # NAME HOST MODE...
  local name=$1 h=$2 ring
  shift 2
  ring=$(ring_name "$name")
  "$rf" create "$ring" --capacity 65536 --slot-size 64 --sparse >/dev/null
  bg "$h" "$logs/record-$name" "$rf" record "$ring" --dir "$arcs/$name" --segment-size 4Mi --fsync never --from 0
  wait_for 5 grep -q "new archive" "$logs/record-$name" || fail "record $name did not start"
  bg "$h" "$logs/$name" "$rf" mirror $(mb "$h") 198.18.0.1:7500 "$ring" --from oldest "$@"
}
log "three late mirrors from the oldest record: multicast, unicast, TCP; 30000 more published live"
start_mirror mc 2
start_mirror uc 3 --unicast
start_mirror tc 2 --tcp
for m in mc uc tc; do
  wait_for 10 grep -q "^mirror: 198" "$logs/$m" || fail "$m did not connect: $(cat "$logs/$m")"
done
on 1 "$rf" publish "$src" --count 30000 --rate 5k --quiet >/dev/null
for m in mc uc tc; do
  wait_for 60 mirror_at "$logs/$m" 230000 || fail "$m did not reach 230000: $(tail -n 1 "$logs/$m")"
done
sleep 1
for m in mc uc tc; do
  out=$(grep -Eo "GAP records [0-9]+" "$logs/$m" | tail -1)
  [[ $out == "GAP records 0" ]] || fail "$m: $out"
done

log "a stranger asks for the oldest record from 4 connections: over the cap of 2, they wait"
python3 - <<'PY' &
import socket, struct, time
hello = struct.pack("<BBHIQ", 1, 0, 0, 16, 2**64 - 1) + struct.pack("<IHHQ", 0x524D4652, 1, 1 << 2, 0)
socks = []
for _ in range(4):
    s = socket.create_connection(("198.18.0.1", 7500))
    s.sendall(hello)
    socks.append(s)
time.sleep(3)  # they never read: their replays stall on their own connections
PY
stranger=$!
on 1 "$rf" publish "$src" --count 1000 --rate 10k --quiet >/dev/null
for m in mc uc tc; do
  wait_for 10 mirror_at "$logs/$m" 231000 || fail "$m stalled behind the stranger: $(tail -n 1 "$logs/$m")"
done
wait "$stranger"
out=$("$rf" stat "$src" 2>&1)
waits=$(awk '/serve.archive_waits/ {print $2}' <<<"$out")
replays=$(awk '/serve.archive_replays/ {print $2}' <<<"$out")
(( ${waits:-0} > 0 )) || fail "no replay waited for the cap: $(grep archive <<<"$out")"
(( ${replays:-0} >= 3 )) || fail "replays started: ${replays:-none}"

log "every mirror's own archive holds records 0..230999, each once, whole, in order"
for m in mc uc tc; do
  wait_for 10 grep -q "recorded to 231000" "$logs/record-$m" || true
done
stop_since 0
for m in mc uc tc; do
  out=$("$rf" tail --archive "$arcs/$m" 2>&1)
  want="tail: 231000 records verified, 0 lost in 0 gaps, 0 holes skipped, 0 torn, 0 misplaced, last seq 230999"
  [[ "$out" == "$want" ]] || fail "$m's archive: '$out', want '$want' ($("$rf" archive "$arcs/$m" | grep -m3 gap))"
done
lab_finish archive_lab "$logs/serve" "$logs/mc" "$logs/uc" "$logs/tc" "$logs/record-mc"
