#!/usr/bin/env bash
# memif_lab_test.sh — two DPDK processes joined by net_memif (a shared-memory
# Ethernet link), the control connection on the hosts' kernel veths: a DPDK
# source (memif server) serving a DPDK mirror (memif client) by multicast
# through injected loss, reordering and duplication, then, with the source
# still up, a new mirror process by unicast (PUNCH to the source's data
# address, which MULTICAST announces). Data addresses 198.18.1.0/24 live only
# on the memif link. Every mirror must be a byte-for-byte copy. Skips (77)
# where the build has no DPDK.
# Usage: memif_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
require_dpdk
lab_up 2
lab_logs memif
sock="$logs/memif.sock"  # a file, not an abstract socket: the hosts are different namespaces
# eal CPU ROLE: EAL arguments for one end of the link.
eal() {
  echo "-l $1 --no-huge -m 256 --no-pci --no-shconf --file-prefix ${LAB_PREFIX}$2$RANDOM" \
    "--vdev net_memif0,role=$2,socket=$sock,socket-abstract=no"
}

log "DPDK source (memif server) on h1; DPDK mirror (memif client) on h2 by multicast, 3% loss, 2% reordering, 1% duplicates"
src=$(ring_name src)
"$rf" create "$src" --capacity 262144 >/dev/null
bg 1 "$logs/serve" "$rf" serve "$src" --listen 198.18.0.1:7400 --multicast 239.255.0.5:7401 --udp 7402 \
  --backend dpdk --dpdk-ip 198.18.1.1 --eal "$(eal 0 server)"
serve_pid=${LAB_PIDS[-1]}
wait_for 10 grep -q "^serve: " "$logs/serve" || fail "serve did not start: $(cat "$logs/serve")"
grep -q "unicast 198.18.1.1:7402" "$logs/serve" || fail "serve does not announce its data address: $(grep '^serve: ' "$logs/serve" | head -1)"
m=$(ring_name m)
bg 2 "$logs/m" "$rf" mirror 198.18.0.1:7400 "$m" --from oldest --backend dpdk --dpdk-ip 198.18.1.2 \
  --eal "$(eal 1 client)" --loss 30 --reorder 20 --dup-rate 10 --seed 9
wait_for 10 grep -q "^mirror: 198" "$logs/m" || fail "the mirror did not start: $(cat "$logs/m")"
sleep 0.5
on 1 "$rf" publish "$src" --count 100000 --rate 100k --quiet >/dev/null
wait_for 20 mirror_at "$logs/m" 100000 || fail "the multicast mirror did not catch up: $(tail -n 1 "$logs/m")"
check_copy "$src" "$m" 100000
grep -Eq "NAKs [1-9]" "$logs/m" || fail "no NAK under 3% injected loss: $(tail -n 1 "$logs/m")"
stop_pid "${LAB_PIDS[-1]}"

log "the same source, a new mirror process by unicast: it punches 198.18.1.1 over the memif link"
u=$(ring_name u)
bg 2 "$logs/u" "$rf" mirror 198.18.0.1:7400 "$u" --from oldest --unicast --backend dpdk \
  --dpdk-ip 198.18.1.2 --eal "$(eal 1 client)"
wait_for 10 grep -q "^mirror: 198.*unicast from 198.18.1.1:7402" "$logs/u" ||
  fail "the unicast mirror did not start or punches the wrong address: $(grep -v TELEMETRY "$logs/u" | head -3)"
# The first 100,000 records are history: they come over TCP (NAK repair).
wait_for 20 mirror_at "$logs/u" 100000 || fail "the unicast mirror did not catch up: $(tail -n 1 "$logs/u")"
sleep 1.2  # one more stats line
tcp_before=$(mirror_stat "$logs/u" "TCP records")
on 1 "$rf" publish "$src" --count 50000 --rate 100k --quiet >/dev/null
wait_for 20 mirror_at "$logs/u" 150000 || fail "the unicast mirror did not keep up: $(tail -n 1 "$logs/u")"
sleep 1.2
check_copy "$src" "$u" 150000
by_udp "$logs/u" "$tcp_before" || fail "the unicast mirror's DATA did not come over memif: $(tail -n 1 "$logs/u")"

log "the source's DATA frames left from the mbufs they were built in, and every mbuf came back"
stop_pid "$serve_pid"
port_line=$(grep "^serve: port: " "$logs/serve")
[[ $port_line =~ ([0-9]+)\ sent\ where\ they\ were\ built ]] && (( BASH_REMATCH[1] >= 1000 )) ||
  fail "fewer than 1,000 frames were sent from the mbuf they were built in: $port_line"
[[ $port_line =~ ([0-9]+)\ of\ ([0-9]+)\ mbufs\ free ]] && (( BASH_REMATCH[1] == BASH_REMATCH[2] )) ||
  fail "mbufs were not given back when the serve stopped: $port_line"

log "a memif socket path that names a file which is not a socket: the file is left alone"
# (The start-up sweep of a killed server's stale socket unlinked whatever
# the path named, a regular file too: helper-40.)
echo precious >"$logs/not-a-socket"
timeout 30 "$rf" serve "$src" --listen 198.18.0.1:7410 --backend dpdk \
  --dpdk-ip 198.18.1.1 --eal "$(sock="$logs/not-a-socket" eal 0 server)" >"$logs/notsock" 2>&1
[[ $(cat "$logs/not-a-socket" 2>/dev/null) == precious ]] || fail "a memif serve's start-up removed the regular file at its socket path"
if (( fails )); then
  echo "memif_lab_test: $fails failed"
  for f in "$logs"/*; do [[ -S $f ]] || { echo "== $f"; grep -v TELEMETRY "$f" | tail -n 3; }; done
  exit 1
fi
echo "memif_lab_test: all passed"
