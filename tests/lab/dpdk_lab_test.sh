#!/usr/bin/env bash
# dpdk_lab_test.sh — the DPDK backend in the namespace lab, on each host's
# veth through PMD (net_af_packet or net_af_xdp), --no-huge: a kernel source
# serving DPDK mirrors (multicast, and unicast through 5% injected loss +
# reordering; a source restart; a link flap), and a DPDK source serving
# kernel mirrors and a DPDK mirror at once, whose DATA on the wire is the
# kernel source's, header for header and byte for byte (capture_udp.py).
# Every mirror must be a byte-for-byte copy. With af_xdp, ringfire's
# XDP program keeps the control TCP (and all else) with the kernel: on h1
# and h2 the DPDK port shares the kernel's address (only its UDP port is
# steered), on h3 it has an address of its own (198.18.0.103).
# Skips (77) where the build has no DPDK.
# Usage: dpdk_lab_test.sh PATH/TO/ringfire af_packet|af_xdp
set -u
rf=$1
pmd=${2:-af_packet}
source "$(dirname "$0")/lib.sh"
# dpdk HOST: the DPDK options for a process on that host.
dpdk() {
  echo "--backend dpdk --iface eth0 --pmd $pmd"
  [[ $pmd == af_xdp && $1 == 3 ]] && echo "--dpdk-ip 198.18.0.103"
}
# A build without DPDK refuses --backend dpdk before anything else happens;
# one with it fails on the deliberately bad EAL flag instead.
require_dpdk
lab_up 3
lab_logs dpdk
# IGMP snooping on, with fast leave on h2's and h3's bridge ports: the
# bridge's group table then shows what a bypass port's own IGMPv3 reports
# said (the bridge still floods groups while no querier is heard).
ip -n "${LAB_PREFIX}br" link set br0 type bridge mcast_snooping 1
for h in 2 3; do ip -n "${LAB_PREFIX}br" link set "${LAB_PREFIX}p$h" type bridge_slave fastleave on; done
# in_mdb GROUP HOST: the bridge has HOST's port as a member of GROUP.
in_mdb() { ip netns exec "${LAB_PREFIX}br" bridge mdb show | grep -qE "port ${LAB_PREFIX}p$2 grp ${1//./\\.}( |$)"; }

log "kernel source on h1; DPDK mirrors on h2 (multicast) and h3 (unicast, 5% loss + reordering)"
src=$(ring_name src)
"$rf" create "$src" --capacity 262144 >/dev/null
bg 1 "$logs/serve" "$rf" serve "$src" --listen 198.18.0.1:7400 --multicast 239.255.0.1:7401 \
  --udp 7402 --iface eth0
wait_for 5 grep -q "^serve: " "$logs/serve" || fail "serve did not start: $(cat "$logs/serve")"
m2=$(ring_name m2); m3=$(ring_name m3)
bg 2 "$logs/m2" "$rf" mirror 198.18.0.1:7400 "$m2" --from oldest $(dpdk 2)
h1_mac=$(on 1 cat /sys/class/net/eth0/address)
bg 3 "$logs/m3" "$rf" mirror 198.18.0.1:7400 "$m3" --from oldest --unicast $(dpdk 3) \
  --neighbor "198.18.0.1=$h1_mac" --loss 50 --reorder 30 --seed 5
for m in m2 m3; do
  wait_for 10 grep -q "^mirror: 198" "$logs/$m" || fail "$m did not start: $(cat "$logs/$m")"
done
wait_for 5 in_mdb 239.255.0.1 2 ||
  fail "the bridge did not learn m2's group from its IGMPv3 report: $(ip netns exec "${LAB_PREFIX}br" bridge mdb show)"
sleep 0.5
publish_and_check 1 "$src" 60000 60000 "$logs" m2 m3
grep -q "(dpdk net_" "$logs/m2" || fail "m2 is not on the DPDK backend: $(grep '^mirror: 198' "$logs/m2")"
by_udp "$logs/m2" || fail "m2's DATA did not come by UDP: $(tail -n 1 "$logs/m2")"

log "the source restarts: the DPDK mirrors reconnect through the port they have up, and resume"
stop_pid "${LAB_PIDS[0]}"
bg 1 "$logs/serve2" "$rf" serve "$src" --listen 198.18.0.1:7400 --multicast 239.255.0.1:7401 \
  --udp 7402 --iface eth0
wait_for 5 grep -q "^serve: " "$logs/serve2" || fail "serve did not restart: $(cat "$logs/serve2")"
reconnected() { (( $(grep -c "^mirror: 198" "$1") >= 2 )); }
for m in m2 m3; do
  wait_for 10 reconnected "$logs/$m" || fail "$m did not reconnect: $(grep -v TELEMETRY "$logs/$m" | tail -n 3)"
done
sleep 0.5
publish_and_check 1 "$src" 10000 70000 "$logs" m2 m3

log "link flap: h2's eth0 down for 1 s while the source publishes; the DPDK mirror repairs the outage"
naks_before=$(mirror_stat "$logs/m2" NAKs)
on 1 "$rf" publish "$src" --count 40000 --rate 20k --quiet >/dev/null &
publisher=$!
sleep 0.5
on 2 ip link set eth0 down
sleep 1
on 2 ip link set eth0 up
wait "$publisher"
wait_for 30 mirror_at "$logs/m2" 110000 || fail "m2 did not recover from the link flap: $(tail -n 1 "$logs/m2")"
check_copy "$src" "$m2" 110000
# The flap emptied the bridge's entries for h2's port; the DPDK port saw its
# link come back and announced its group again (not at the next minute's refresh).
wait_for 5 in_mdb 239.255.0.1 2 ||
  fail "m2's group was not announced again after the flap: $(ip netns exec "${LAB_PREFIX}br" bridge mdb show; grep 'port:' "$logs/m2")"
sleep 1.1
(( $(mirror_stat "$logs/m2" NAKs) > ${naks_before:-0} )) || fail "the flap lost nothing: the test did not test it"
# One XDP program per interface: free the veths for the next DPDK processes.
stop_pid "${LAB_PIDS[1]}"; stop_pid "${LAB_PIDS[2]}"
grep -q "mirror: port: .* 0 awaiting ARP" "$logs/m3" ||
  fail "m3 waited on ARP for a pinned --neighbor: $(grep 'port:' "$logs/m3")"
grep -q "mirror: port: .* not ours, 0 malformed," "$logs/m2" ||
  fail "m2 counted frames of a clean lab as malformed: $(grep 'port:' "$logs/m2")"
if [[ $pmd == af_xdp ]]; then
  for h in 2 3; do
    link=$(on "$h" ip link show eth0)
    # The link is there (an empty answer would pass an absence check), and it carries no XDP program.
    [[ $link == *"eth0"* ]] || fail "h$h: no eth0 to look at: '$link'"
    [[ $link == *xdp* ]] && fail "h$h: the stopped mirror left its XDP program on eth0"
  done
fi

log "DPDK source on h1; kernel multicast (h2) and unicast (h3) mirrors and a DPDK mirror (h3) at once"
dsrc=$(ring_name dsrc)
"$rf" create "$dsrc" --capacity 262144 >/dev/null
bg 1 "$logs/dserve" "$rf" serve "$dsrc" --listen 198.18.0.1:7500 --multicast 239.255.0.2:7501 \
  --udp 7502 $(dpdk 1)
wait_for 10 grep -q "^serve: " "$logs/dserve" || fail "DPDK serve did not start: $(cat "$logs/dserve")"
k2=$(ring_name k2); k3=$(ring_name k3); d3=$(ring_name d3)
bg 2 "$logs/k2" "$rf" mirror 198.18.0.1:7500 "$k2" --from oldest
bg 3 "$logs/k3" "$rf" mirror 198.18.0.1:7500 "$k3" --from oldest --unicast
bg 3 "$logs/d3" "$rf" mirror 198.18.0.1:7500 "$d3" --from oldest $(dpdk 3)
for m in k2 k3 d3; do
  wait_for 10 grep -q "^mirror: 198" "$logs/$m" || fail "$m did not start: $(cat "$logs/$m")"
done
sleep 0.5
publish_and_check 1 "$dsrc" 60000 60000 "$logs" k2 k3 d3
for m in k2 k3 d3; do by_udp "$logs/$m" || fail "$m's DATA did not come by UDP: $(tail -n 1 "$logs/$m")"; done
# d3 is h3's only member of the group (k3 is unicast): its leave shows.
in_mdb 239.255.0.2 3 || fail "the bridge did not learn d3's group: $(ip netns exec "${LAB_PREFIX}br" bridge mdb show)"
stop_pid "${LAB_PIDS[-1]}"  # d3: frees h3's eth0
# d3's port left its group as it closed (an IGMPv3 leave; fast leave drops it at once).
wait_for 5 eval '! in_mdb 239.255.0.2 3' ||
  fail "d3 stopped but the bridge still has its group: $(ip netns exec "${LAB_PREFIX}br" bridge mdb show)"

log "on the wire, a DPDK source's DATA is the kernel source's: the same record, the same headers"
bg 1 "$logs/kserve" "$rf" serve "$dsrc" --listen 198.18.0.1:7510 --multicast 239.255.0.3:7511 --iface eth0
wait_for 5 grep -q "^serve: " "$logs/kserve" || fail "the kernel serve did not start: $(cat "$logs/kserve")"
on 2 python3 "$(dirname "$0")/capture_udp.py" eth0 239.255.0.2 7501 10 >"$logs/wire-dpdk" 2>"$logs/wire-dpdk.err" &
cap_dpdk=$!
on 2 python3 "$(dirname "$0")/capture_udp.py" eth0 239.255.0.3 7511 10 >"$logs/wire-kernel" 2>"$logs/wire-kernel.err" &
cap_kernel=$!
# Both captures bound before the one record goes (a loaded machine once started one too late).
wait_for 8 grep -q capturing "$logs/wire-dpdk.err" || fail "the DPDK capture did not start: $(cat "$logs/wire-dpdk.err")"
wait_for 8 grep -q capturing "$logs/wire-kernel.err" || fail "the kernel capture did not start: $(cat "$logs/wire-kernel.err")"
on 1 "$rf" publish "$dsrc" --count 1 --quiet >/dev/null
wait "$cap_dpdk" "$cap_kernel"
python3 - "$logs/wire-dpdk" "$logs/wire-kernel" <<'PY' || fail "the DPDK source's frame differs: $(cat "$logs/wire-dpdk") vs $(cat "$logs/wire-kernel")"
import json, sys
d, k = (json.load(open(f)) for f in sys.argv[1:3])
assert d.pop("eth_dst") == "01005e7f0002" and k.pop("eth_dst") == "01005e7f0003", "group MACs"
assert d.pop("udp_checksum") == "ok", "the DPDK checksum"
assert k.pop("udp_checksum") in ("ok", "partial"), "the kernel checksum"
want_tag = {"count_len_zero": True, "session_matches": True, "nonzero": True}
assert d["tag"] == want_tag and k["tag"] == want_tag, "each group datagram ends with a TAG frame"
assert d == k, "headers or payload"
PY
stop_pid "${LAB_PIDS[-1]}"

log "with two lcores the mirror's worker runs on the worker lcore (rte_eal_remote_launch)"
lc=$(ring_name lc)
bg 3 "$logs/lc" "$rf" mirror 198.18.0.1:7500 "$lc" --from oldest --backend dpdk \
  $([[ $pmd == af_xdp ]] && echo "--dpdk-ip 198.18.0.103") \
  --eal "-l 0,1 --no-huge -m 256 --no-pci --no-shconf --file-prefix ${LAB_PREFIX}lc --vdev net_${pmd}0,iface=eth0"
wait_for 10 grep -q "^mirror: worker on lcore 1" "$logs/lc" || fail "the worker is not on lcore 1: $(grep -v TELEMETRY "$logs/lc" | head -3)"
publish_and_check 1 "$dsrc" 1000 61001 "$logs" lc  # 61000 + the wire check's record

# On hugepages: af_xdp's pool (its UMEM) is 40 MiB, so it needs -m 128.
mem=$([[ $pmd == af_xdp ]] && echo 128 || echo 64)
free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
if (( free >= mem / 2 + 8 )); then
  log "with hugepages (--in-memory -m $mem, EAL arguments after --): a DPDK mirror whose memory is 2 MiB pages"
  bg 2 "$logs/hp" "$rf" mirror 198.18.0.1:7500 "$(ring_name hp)" --from oldest --backend dpdk \
    $([[ $pmd == af_xdp ]] && echo "--dpdk-ip 198.18.0.102") -- -l 0 --in-memory -m "$mem" --no-pci \
    --vdev "net_${pmd}0,iface=eth0"
  wait_for 15 grep -q "^mirror: 198" "$logs/hp" || fail "hp did not start: $(grep -v TELEMETRY "$logs/hp" | tail -3)"
  now_free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
  (( now_free < free )) || fail "hp took no hugepage ($free free before, $now_free now)"
  sleep 1.2
  tcp_before=$(mirror_stat "$logs/hp" "TCP records")
  # More datagrams than the pool has mbufs: every mbuf (every UMEM frame) cycles.
  publish_and_check 1 "$dsrc" 40000 101001 "$logs" hp
  sleep 1.2
  by_udp "$logs/hp" "$tcp_before" || fail "hp's DATA did not come by UDP: $(tail -n 1 "$logs/hp")"
  stop_pid "${LAB_PIDS[-1]}"  # hp: frees h2's eth0
else
  log "hugepages: skipped, $free free 2 MiB pages (tests/run.sh reserves 96)"
fi

if [[ $pmd == af_xdp ]]; then
  log "a killed af_xdp mirror leaves its XDP program: the next one says what to do, then starts"
  bg 2 "$logs/kx" "$rf" mirror 198.18.0.1:7500 "$(ring_name kx)" $(dpdk 2)
  wait_for 10 grep -q "^mirror: 198" "$logs/kx" || fail "kx did not start: $(grep -v TELEMETRY "$logs/kx")"
  kill -KILL "${LAB_PIDS[-1]}"; wait "${LAB_PIDS[-1]}" 2>/dev/null
  err=$(on 2 "$rf" mirror 198.18.0.1:7500 "$(ring_name ky)" $(dpdk 2) --once 2>&1 >/dev/null); rc=$?
  [[ $rc -eq 2 && "$err" == *"ringfire_steer"*"ip link set dev eth0 xdp off"* ]] || fail "stale XDP program: rc $rc, $err"
  on 2 ip link set dev eth0 xdp off
  rm -rf /var/run/dpdk/rf"${LAB_PIDS[-1]}"  # the killed process's runtime directory
  bg 2 "$logs/kz" "$rf" mirror 198.18.0.1:7500 "$(ring_name kz)" $(dpdk 2)
  wait_for 10 grep -q "^mirror: 198" "$logs/kz" || fail "kz did not start after xdp off: $(grep -v TELEMETRY "$logs/kz")"
fi

log "bad EAL arguments fail at start-up with a message"
err=$(on 2 "$rf" mirror 198.18.0.1:7500 "$(ring_name bad)" --backend dpdk --eal "--no-such-flag" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"EAL did not start"* ]] || fail "bad --eal: rc $rc, $err"
err=$(on 2 "$rf" mirror 198.18.0.1:7500 "$(ring_name bad)" $(dpdk 2) --neighbor 198.18.0.1=zz 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"is not IP=MAC"* ]] || fail "bad --neighbor: rc $rc, $err"
err=$(on 2 "$rf" serve "$dsrc" --listen 198.18.0.2:7600 --udp 7602 $(dpdk 2) --mtu 4000 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"do not fit"*"use --mtu"* ]] || fail "oversized --mtu: rc $rc, $err (serve: $(on 2 ip -d link show eth0 | grep -o "xdp.*" | head -1))"

if (( fails )); then
  echo "dpdk_lab_test: $fails failed"
  for f in "$logs"/*; do echo "== $f"; grep -v TELEMETRY "$f" | tail -n 2; done
  exit 1
fi
echo "dpdk_lab_test: all passed"
