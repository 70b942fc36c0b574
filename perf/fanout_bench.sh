#!/usr/bin/env bash
# fanout_bench.sh — the port's cost per datagram and per added mirror, in
# one run (perf/port_tx_benchmark.cc): the kernel backend sending through a
# veth in a namespace of its own (16 unicast peers, neighbors pinned, the
# far end drops them: nothing leaves the namespace), and the DPDK port on net_null,
# each frame copied or duplicates shared. Pinned to CPU 1.
# Usage: perf/fanout_bench.sh [--build DIR] [--json FILE]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--json FILE]" >&2; exit 2 ;;
  esac
done
ns=rf-fan-$$
cleanup() { ip netns del "$ns" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
# A veth pair inside the namespace: the far end drops frames not for its MAC.
ip -n "$ns" link add d0 type veth peer name d1
ip -n "$ns" addr add 198.18.200.1/24 dev d0
ip -n "$ns" link set d1 up
ip -n "$ns" link set d0 up
for i in $(seq 2 17); do
  ip -n "$ns" neigh add "198.18.200.$i" lladdr "02:00:00:00:c8:$(printf %02x "$i")" dev d0 nud permanent
done
args=(--benchmark_min_time=0.5)
[[ -n $json ]] && args+=(--benchmark_out="$json" --benchmark_out_format=json)
ip netns exec "$ns" taskset -c 1 "$build/perf/port_tx_benchmark" "${args[@]}"
