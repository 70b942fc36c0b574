#!/usr/bin/env bash
# tap_lab_test.sh — DPDK on net_tap: a port that offers UDP checksum offload
# (TX, and checksum verdicts on RX), with the kernel of the
# same host on the other end of the tap as the peer, whose UDP stack drops
# any datagram with a wrong checksum (UdpInCsumErrors). Checks:
#   1. a DPDK source on a tap serves kernel mirrors, by multicast and by
#      unicast, with the checksums computed by the port: copies byte for
#      byte, DATA by UDP, 0 checksum errors;
#   2. a kernel source serves a DPDK mirror on a tap (RX checksum verdicts);
#   3. a payload the port cannot carry fails at start-up, naming the --mtu
#      to use, and leaves no tap behind.
# Skips (77) where the build has no DPDK.
# Usage: tap_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
require_dpdk
lab_up 1
lab_logs tap
# eal TAP: EAL arguments for a process whose port is a new tap, TAP.
eal() {
  echo "-l 0 --no-huge -m 256 --no-pci --no-shconf --file-prefix ${LAB_PREFIX}$1" \
    "--vdev net_tap0,iface=$1 --log-level=pmd.net.tap:crit"
}
# tap_up TAP NET: the kernel's side of the tap, 198.18.NET.1/24.
tap_up() {
  wait_for 10 on 1 ip link show "$1" >/dev/null 2>&1 || fail "the PMD did not create $1"
  on 1 ip addr add "198.18.$2.1/24" dev "$1"
  on 1 ip link set "$1" up
}
csum_errors() { on 1 nstat -az UdpInCsumErrors | awk '/UdpInCsumErrors/ {print $2}'; }
errors_before=$(csum_errors)

log "a DPDK source on tap ${LAB_PREFIX}a: kernel mirrors by multicast (through the tap) and by unicast"
src=$(ring_name src)
"$rf" create "$src" --capacity 262144 >/dev/null
bg 1 "$logs/serve" "$rf" serve "$src" --listen 198.18.0.1:7400 --multicast 239.255.0.7:7401 --udp 7402 \
  --backend dpdk --dpdk-ip 198.18.5.2 --eal "$(eal "${LAB_PREFIX}a")"
wait_for 10 grep -q "^serve: " "$logs/serve" || fail "serve did not start: $(cat "$logs/serve")"
serve_pid=${LAB_PIDS[-1]}
tap_up "${LAB_PREFIX}a" 5
m=$(ring_name m)
bg 1 "$logs/m" "$rf" mirror 198.18.0.1:7400 "$m" --from oldest --iface "${LAB_PREFIX}a"
u=$(ring_name u)
bg 1 "$logs/u" "$rf" mirror 198.18.0.1:7400 "$u" --from oldest --unicast
for l in m u; do
  wait_for 10 grep -q "^mirror: 198" "$logs/$l" || fail "mirror $l did not start: $(cat "$logs/$l")"
done
sleep 0.5
publish_and_check 1 "$src" 100000 100000 "$logs" m u
for l in m u; do by_udp "$logs/$l" || fail "mirror $l's DATA did not come by UDP: $(tail -n 1 "$logs/$l")"; done
stop_pid "$serve_pid"
grep -q "UDP checksums by the port" "$logs/serve" ||
  fail "net_tap offers UDP checksum offload, and the port did not use it: $(grep 'port:' "$logs/serve")"
[[ $(csum_errors) == "$errors_before" ]] ||
  fail "the kernel dropped datagrams with bad UDP checksums: $errors_before -> $(csum_errors)"
stop_since 0

log "a kernel source serves a DPDK mirror on tap ${LAB_PREFIX}b (RX checksum verdicts from the port)"
k=$(ring_name k)
"$rf" create "$k" --capacity 262144 >/dev/null
d=$(ring_name d)
bg 1 "$logs/kserve" "$rf" serve "$k" --listen 198.18.0.1:7410 --udp 7412
wait_for 10 grep -q "^serve: " "$logs/kserve" || fail "the kernel source did not start: $(cat "$logs/kserve")"
bg 1 "$logs/d" "$rf" mirror 198.18.0.1:7410 "$d" --from oldest --unicast --backend dpdk --dpdk-ip 198.18.6.2 \
  --eal "$(eal "${LAB_PREFIX}b")"
tap_up "${LAB_PREFIX}b" 6
wait_for 10 grep -q "^mirror: 198" "$logs/d" || fail "the DPDK mirror did not start: $(cat "$logs/d")"
sleep 1
publish_and_check 1 "$k" 50000 50000 "$logs" d
by_udp "$logs/d" || fail "the DPDK mirror's DATA did not come by UDP: $(tail -n 1 "$logs/d")"
stop_since 0
grep -q "0 malformed" "$logs/d" || fail "frames from the kernel were counted malformed: $(grep 'port:' "$logs/d")"

log "a payload the port cannot carry (--mtu 8972 on a tap of MTU 1500) fails at start-up, naming the --mtu to use"
j=$(ring_name j)
"$rf" create "$j" --capacity 16384 --slot-size 1024 >/dev/null
out=$(on 1 "$rf" serve "$j" --listen 198.18.0.1:7420 --udp 7422 --mtu 8972 --backend dpdk --dpdk-ip 198.18.7.2 \
  --eal "$(eal "${LAB_PREFIX}c")" 2>&1)
grep -q "use --mtu 1472 or less" <<<"$out" || fail "no actionable error for --mtu 8972: $(grep -v '^EAL' <<<"$out" | tail -n 2)"
on 1 ip link show "${LAB_PREFIX}c" >/dev/null 2>&1 && fail "the refused process left its tap behind"

if (( fails )); then
  echo "tap_lab_test: $fails failed"
  for f in "$logs"/*; do echo "== $f"; grep -v TELEMETRY "$f" | tail -n 3; done
  exit 1
fi
echo "tap_lab_test: all passed"
