#!/usr/bin/env bash
# jumbo_lab_test.sh — jumbo frames on the kernel backend: a source on a
# 9000-byte link sending 8972-byte datagrams (the largest UDP payload such
# a link carries) to a multicast mirror and to a unicast mirror behind 5 %
# injected loss (whose NAKs are answered with jumbo repairs), both exact,
# their datagrams carrying far more records than a 1472-byte one holds.
# (The kernel fragments a datagram larger than its link's MTU: the engine
# lab's ladder lands such a port on it. The DPDK ports here refuse jumbo
# payloads at start-up: dpdk_lab, tap_lab.)
# Usage: jumbo_lab_test.sh PATH/TO/ringfire   (root; exit 77 = skipped)
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
lab_up 3
lab_logs jumbo
br="${LAB_PREFIX}br"
ip -n "$br" link set br0 mtu 9000
for h in 1 2 3; do
  ip -n "$br" link set "${LAB_PREFIX}p$h" mtu 9000
  on "$h" ip link set eth0 mtu 9000
done

log "a source at --mtu 8972 on a 9000-byte link: a multicast mirror (h2) and a unicast one behind 5% loss (h3)"
src=$(ring_name src)
"$rf" create "$src" --capacity 1048576 --slot-size 64 >/dev/null
bg 1 "$logs/serve" "$rf" serve "$src" --listen 198.18.0.1:7400 --multicast 239.255.0.9:7401 --udp 7402 \
  --iface eth0 --mtu 8972 --pace-us 250
wait_for 5 grep -q "^serve: " "$logs/serve" || fail "serve did not start: $(cat "$logs/serve")"
m2=$(ring_name m2); m3=$(ring_name m3)
bg 2 "$logs/m2" "$rf" mirror 198.18.0.1:7400 "$m2" --from oldest
bg 3 "$logs/m3" "$rf" mirror 198.18.0.1:7400 "$m3" --from oldest --unicast --loss 50 --seed 3
for m in m2 m3; do
  wait_for 10 grep -q "^mirror: 198" "$logs/$m" || fail "$m did not start: $(cat "$logs/$m")"
done
sleep 0.5
count=400000
on 1 "$rf" publish "$src" --count "$count" --rate 400k --quiet >/dev/null
for m in m2 m3; do
  wait_for 30 mirror_at "$logs/$m" "$count" || fail "$m did not catch up: $(tail -n 1 "$logs/$m")"
done
check_copy "$src" "$m2" "$count"
check_copy "$src" "$m3" "$count"
sleep 1.1  # a stats line after the last record
# A 1472-byte datagram holds 22 of these records, an 8972-byte one 135. At
# 400 k/s a 250 us pacing interval gathers ~100 (more when the worker wakes
# late), so jumbo datagrams carry twice 1472's most on average with room
# to spare; datagrams of 1472 bytes could not.
for m in m2 m3; do
  dg=$(mirror_stat "$logs/$m" datagrams)
  (( ${dg:-0} > 0 )) || fail "$m counted no datagram: $(tail -n 1 "$logs/$m")"
  (( ${dg:-0} > 0 && count / dg > 44 )) ||
    fail "$m: $count records in ${dg:-0} datagrams: not jumbo ($(tail -n 1 "$logs/$m"))"
done
# The clean path's DATA came by UDP (the lossy one's repairs may go by TCP).
by_udp "$logs/m2" || fail "m2's DATA did not come by UDP: $(tail -n 1 "$logs/m2")"
(( $(mirror_stat "$logs/m3" NAKs) > 0 )) || fail "m3 NAKed nothing behind 5% loss: the repair path was not tested"
stop_since 0

if (( fails )); then
  echo "jumbo_lab_test: $fails failed"
  for f in "$logs"/*; do echo "== $f"; grep -v TELEMETRY "$f" | tail -n 2; done
  exit 1
fi
echo "jumbo_lab_test: all passed"
