#!/usr/bin/env bash
# exception_lab_test.sh — a host whose data interface belongs to DPDK (as a
# NIC bound to vfio-pci would): h2's link d1 has no kernel address and is
# driven by net_af_xdp with ringfire's address 198.18.1.2 of its own. Every
# frame that is not ringfire's goes to an exception tap, x0, which holds
# that address for the kernel, and what the kernel sends through x0 goes out
# of the port. So, with nothing else joining h1 and h2:
#   1. h1 pings 198.18.1.2 (ICMP and ARP both ways through the tap);
#   2. a kernel mirror on h1 reaches the DPDK source's TCP control plane
#      through the tap, and gets DATA by UDP straight from the port: an
#      exact copy;
#   3. without --exception-tap, the same address does not answer ping.
# Skips (77) where the build has no DPDK or no XDP steering program.
# Usage: exception_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
require_dpdk
lab_up 2
lab_logs exc
ip link add "${LAB_PREFIX}d1a" netns "$(host 1)" type veth peer name "${LAB_PREFIX}d1b" netns "$(host 2)"
on 1 ip link set "${LAB_PREFIX}d1a" name d1
on 2 ip link set "${LAB_PREFIX}d1b" name d1
on 1 ip addr add 198.18.1.1/24 dev d1
for h in 1 2; do on $h ip link set d1 up; done
wait_for 5 link_up 1 d1 || fail "link d1 is down"
# The exception tap, made persistent beforehand so that its address is the
# operator's configuration, there before ringfire starts and after it ends.
on 2 ip tuntap add dev x0 mode tap multi_queue
on 2 ip addr add 198.18.1.2/24 dev x0
on 2 ip link set x0 up

log "without --exception-tap: the DPDK port does not answer ping for its address"
src=$(ring_name src)
"$rf" create "$src" --capacity 262144 >/dev/null
bg 2 "$logs/plain" taskset -c 1 "$rf" serve "$src" --listen 198.18.1.2:7400 --udp 7402 --idle yield \
  --backend dpdk --pmd af_xdp --iface d1 --dpdk-ip 198.18.1.2
wait_for 15 grep -q "^serve: " "$logs/plain" || fail "serve did not start: $(cat "$logs/plain")"
on 1 ping -c 2 -W 1 -q 198.18.1.2 >/dev/null 2>&1 && fail "198.18.1.2 answered ping with no exception port"
stop_since 0
on 1 ip neigh flush dev d1

log "with --exception-tap x0: ping, then a kernel mirror on h1 through the tap's TCP"
bg 2 "$logs/serve" taskset -c 1 "$rf" serve "$src" --listen 198.18.1.2:7400 --udp 7402 --idle yield \
  --backend dpdk --pmd af_xdp --iface d1 --dpdk-ip 198.18.1.2 --exception-tap x0
wait_for 15 grep -q "^serve: " "$logs/serve" || fail "serve did not start: $(cat "$logs/serve")"
serve_pid=${LAB_PIDS[-1]}
out=$(on 1 ping -c 3 -W 2 198.18.1.2 2>&1) || fail "198.18.1.2 does not answer ping through the exception tap: $out"
m=$(ring_name m)
bg 1 "$logs/m" taskset -c 0 "$rf" mirror 198.18.1.2:7400 "$m" --from oldest --unicast --idle yield
wait_for 15 grep -q "^mirror: 198.18.1.2.*unicast from 198.18.1.2:7402" "$logs/m" ||
  fail "the mirror did not reach the source through the tap: $(grep -v TELEMETRY "$logs/m" | head -3)"
sleep 0.5
publish_and_check 2 "$src" 50000 50000 "$logs" m
by_udp "$logs/m" || fail "the mirror's DATA did not come by UDP from the port: $(tail -n 1 "$logs/m")"
stop_pid "$serve_pid"
line=$(grep "^serve: port:" "$logs/serve")
grep -Eq " [1-9][0-9]* to the exception port" <<<"$line" || fail "nothing went to the exception port: $line"
grep -Eq "\([1-9][0-9]* from the exception port" <<<"$line" || fail "nothing came from the exception port: $line"
grep -q " 0 malformed" <<<"$line" || fail "malformed frames: $line"
on 2 ip link show x0 >/dev/null 2>&1 || fail "the persistent tap x0 was removed on exit"

if (( fails )); then
  echo "exception_lab_test: $fails failed"
  for f in "$logs"/*; do echo "== $f"; grep -v TELEMETRY "$f" | tail -n 3; done
  exit 1
fi
echo "exception_lab_test: all passed"
