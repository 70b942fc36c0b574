#!/usr/bin/env bash
# spoof_lab_test.sh — the blind spoofer of PROTOCOL.md §1.8.1, in the lab.
# A kernel serve on h1 (a multicast group and a unicast port), a multicast
# mirror on h2 and a unicast mirror on h3, both from oldest, a publisher at
# 5,000 records/s. From h4 a raw socket writes IPv4 headers bearing the
# source's address and data port and sends, for every session byte 1-255,
# 20 DATA records ahead of the live sequence (4 s ahead: plausible, and
# there before the real ones), each a valid self-checking record whose
# filler is a marker: 5,100 datagrams at the group and 5,100 at the unicast
# mirror. Without a key the datagram tag stops every one (`bad-tag`); with
# one, the MAC (`bad-mac`). Either way each mirror holds every published
# record byte for byte (`compare --exact`, `tail` verified: an empty mirror
# cannot pass), the marker is nowhere in its ring, and each spoofed
# datagram was counted by its reason. Without a key, a HELLO that checks no
# tag (an older mirror) is served over TCP on the tagged group, and one that
# does learns the group's tag.
# Usage: spoof_lab_test.sh PATH/TO/ringfire   (root; exit 77 = skipped)
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
atk="python3 $(cd "$(dirname "$0")" && pwd)/attacker.py"
lab_up 4
lab_logs spoof

src=$(ring_name src)
"$rf" create "$src" --capacity 262144 --slot-size 64 >/dev/null
total=40000  # 16 s at 2.5 k/s
per_session=20
sweep=$((255 * per_session))

# counter LOG NAME: the last value of "NAME N" in a log (0 if none).
counter() { local v; v=$(mirror_stat "$1" "$2"); echo "${v:-0}"; }

run_phase() {
  local phase=$1 p0=$2 first=${#LAB_PIDS[@]} psk_opt=()
  [[ $phase == psk ]] && psk_opt=(--psk-file "$logs/psk")
  local group=239.255.0.$((p0 % 200 + 1))
  log "[$phase] serve on h1 (group $group, unicast), a multicast mirror on h2, a unicast one on h3"
  bg 1 "$logs/serve-$phase" "$rf" serve "$src" --listen 198.18.0.1:$p0 --multicast "$group:$((p0 + 1))" \
    --udp $((p0 + 2)) --iface eth0 "${psk_opt[@]}"
  wait_for 5 grep -q "^serve: " "$logs/serve-$phase" || fail "[$phase] serve did not start: $(cat "$logs/serve-$phase")"
  bg 2 "$logs/m2-$phase" "$rf" mirror 198.18.0.1:$p0 "$(ring_name "m2-$phase")" --iface eth0 --from oldest "${psk_opt[@]}"
  bg 3 "$logs/m3-$phase" "$rf" mirror 198.18.0.1:$p0 "$(ring_name "m3-$phase")" --unicast --from oldest "${psk_opt[@]}"
  local m
  for m in m2 m3; do
    wait_for 10 grep -q "^mirror: 198" "$logs/$m-$phase" || fail "[$phase] $m did not connect: $(cat "$logs/$m-$phase")"
  done
  local want_how=tagged
  [[ $phase == psk ]] && want_how=authenticated
  for m in m2 m3; do
    grep -q "^mirror: 198.*, $want_how" "$logs/$m-$phase" || fail "[$phase] $m is not $want_how: $(grep '^mirror: 198' "$logs/$m-$phase")"
  done
  local uport
  uport=$(udp_port 3)
  [[ -n $uport ]] || fail "[$phase] cannot find the unicast mirror's port"

  if [[ $phase == plain ]]; then
    log "[plain] a HELLO that checks no tag is served over TCP on the tagged group; one that checks learns its tag"
    local old
    old=$(on 4 $atk session 198.18.0.1:$p0) || fail "[plain] no answer to an old HELLO"
    [[ $old == *" group 0.0.0.0 port 0 tag 0" ]] || fail "[plain] an untagged mirror was not served over TCP: $old"
  fi

  local start
  start=$("$rf" stat "$src" | awk '$1 == "write_seq" {print $2}')
  on 1 "$rf" publish "$src" --count "$total" --rate 2500 --quiet >/dev/null &
  local pub=$!
  sleep 1
  local now spoof_at
  now=$("$rf" stat "$src" | awk '$1 == "write_seq" {print $2}')
  # 8 s ahead at 2.5 k/s: within the mirrors' window, and before the real
  # records (at 5 k/s, 4 s ahead, a loaded CI machine's sweeps outran it)
  spoof_at=$((now + 20000))
  log "[$phase] h4 spoofs the source's address: $sweep DATA at the group and $sweep at the unicast mirror, sequences $spoof_at.."
  on 4 $atk spoof-sweep 198.18.0.1:$((p0 + 2)) "$group:$((p0 + 1))" "$spoof_at" "$per_session" >"$logs/sweep-g-$phase" ||
    fail "[$phase] the group sweep failed: $(cat "$logs/sweep-g-$phase")"
  on 4 $atk spoof-sweep 198.18.0.1:$((p0 + 2)) "198.18.0.3:$uport" "$spoof_at" "$per_session" >"$logs/sweep-u-$phase" ||
    fail "[$phase] the unicast sweep failed: $(cat "$logs/sweep-u-$phase")"
  grep -q "spoofed $sweep$" "$logs/sweep-g-$phase" "$logs/sweep-u-$phase" || fail "[$phase] the sweeps did not all go out"
  local late
  late=$("$rf" stat "$src" | awk '$1 == "write_seq" {print $2}')
  (( late < spoof_at )) || fail "[$phase] the publisher reached $spoof_at before the sweep ended: the test proves nothing"
  wait "$pub"

  log "[$phase] each mirror holds every published record byte for byte, no marker, each forgery counted"
  local want=$((start + total))
  for m in m2 m3; do
    wait_for 30 mirror_at "$logs/$m-$phase" "$want" || fail "[$phase] $m did not reach $want: $(tail -n 1 "$logs/$m-$phase")"
  done
  sleep 1.2  # a stats line
  for m in m2 m3; do
    local ring out
    ring=$(ring_name "$m-$phase")
    out=$("$rf" tail "$ring" --from oldest --idle-exit 300ms --quiet)
    [[ "$out" == "tail: $want records verified, 0 lost, "*" 0 torn, 0 misplaced"* ]] || fail "[$phase] $m: $out"  # from oldest: both phases' records
    "$rf" compare "$src" "$ring" --exact >"$logs/compare-$m-$phase" 2>&1 ||
      fail "[$phase] $m is not an exact copy: $(cat "$logs/compare-$m-$phase")"
    local marks
    marks=$(grep -ac RFSPOOF "/dev/shm/$ring")
    (( marks == 0 )) || fail "[$phase] the spoofer's marker is in $m's ring"
    echo "   $m: $(grep '^mirror: rejected' "$logs/$m-$phase" | tail -n 1)"
  done
  local reason=bad-tag other=bad-mac
  [[ $phase == psk ]] && reason=bad-mac other=bad-tag
  for m in m2 m3; do
    local l=$logs/$m-$phase
    (( $(counter "$l" "$reason") >= sweep )) || fail "[$phase] $m counted $(counter "$l" "$reason") $reason, not $sweep"
    (( $(counter "$l" wrong-session) + $(counter "$l" implausible) + $(counter "$l" "$other") == 0 )) ||
      fail "[$phase] a spoofed datagram got past the $reason check in $m: $(grep '^mirror: rejected' "$l" | tail -n 1)"
  done
  stop_since "$first"
}

run_phase plain 7600
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$logs/psk"
chmod 600 "$logs/psk"
run_phase psk 7700

lab_finish spoof_lab_test "$logs"/serve-* "$logs"/m?-*
