#!/usr/bin/env bash
# idle_cost.sh — what an idle serve and its mirrors cost, per process: a
# source on h1 and a multicast, a unicast and a TCP mirror on h2 (kernel backend,
# or DPDK with --backend af_xdp|af_packet), no records published, CPU time
# read from /proc over --seconds (default 10) after a settling second, for
# each idle strategy; the same at 10 k records/s. Then the wake-up latency each strategy costs: a
# stage_reader on the multicast and the TCP mirror's rings measures publish
# -> read for one record every 20 ms (the workers idle in between; the
# readers yield on CPU 0).
# Usage: perf/idle_cost.sh [--build DIR] [--backend kernel|af_packet|af_xdp]
#        [--modes backoff,yield,spin] [--seconds N] [--json FILE]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
backend=kernel
modes=backoff,yield,spin
seconds=10
json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--backend kernel|af_packet|af_xdp] [--modes LIST] [--seconds N] [--json FILE]" >&2; exit 2 ;;
  esac
done
rf=$build/cli/ringfire
stage=$build/perf/stage_reader
source "$top/perf/lib.sh"
lab_up 2
lab_logs idle
hz=$(getconf CLK_TCK)

flags() {  # flags HOST
  case $backend in
    kernel) echo "--iface eth0" ;;
    af_packet) echo "--backend dpdk --pmd af_packet --iface eth0" ;;
    af_xdp) echo "--backend dpdk --pmd af_xdp --iface eth0" ;;
  esac
}

results=()
for mode in ${modes//,/ }; do
  first=${#LAB_PIDS[@]}
  src=$(ring_name "src-$mode")
  "$rf" create "$src" --capacity 65536 >/dev/null
  bg 1 "$logs/serve-$mode" taskset -c 0 "$rf" serve $(flags 1) "$src" --listen 198.18.0.1:7400 \
    --multicast 239.255.0.1:7401 --udp 7402 --idle "$mode" --quiet
  sp=${LAB_PIDS[-1]}
  wait_for 5 grep -q "^serve: " "$logs/serve-$mode" || echo "serve did not start: $(cat "$logs/serve-$mode")"
  bg 2 "$logs/mm-$mode" taskset -c 1 "$rf" mirror $( [[ $backend == kernel ]] && echo "--iface eth0") \
    198.18.0.1:7400 "$(ring_name "mm-$mode")" --idle "$mode" --quiet
  mp=${LAB_PIDS[-1]}
  bg 2 "$logs/mu-$mode" taskset -c 1 "$rf" mirror 198.18.0.1:7400 "$(ring_name "mu-$mode")" --unicast \
    --idle "$mode" --quiet
  up=${LAB_PIDS[-1]}
  bg 2 "$logs/mt-$mode" taskset -c 1 "$rf" mirror 198.18.0.1:7400 "$(ring_name "mt-$mode")" --tcp \
    --idle "$mode" --quiet
  tp=${LAB_PIDS[-1]}
  sleep 1.5
  a=$(cpu_ticks "$sp"); b=$(cpu_ticks "$mp"); c=$(cpu_ticks "$up"); d=$(cpu_ticks "$tp")
  sleep "$seconds"
  a=$(( $(cpu_ticks "$sp") - a )); b=$(( $(cpu_ticks "$mp") - b )); c=$(( $(cpu_ticks "$up") - c ))
  d=$(( $(cpu_ticks "$tp") - d ))
  pct() { awk -v t="$1" -v hz="$hz" -v s="${2:-$seconds}" 'BEGIN {printf "%.1f", 100 * t / hz / s}'; }
  # At 10 k records/s: the same processes while a publisher on h1 writes
  # for --seconds (its own CPU not counted).
  a2=$(cpu_ticks "$sp"); b2=$(cpu_ticks "$mp"); c2=$(cpu_ticks "$up"); d2=$(cpu_ticks "$tp")
  t0=$(date +%s.%N)
  on 1 taskset -c 0 "$rf" publish "$src" --count $((10000 * seconds)) --rate 10k --quiet >/dev/null
  busy=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN {printf "%.2f", e - s}')
  a2=$(( $(cpu_ticks "$sp") - a2 )); b2=$(( $(cpu_ticks "$mp") - b2 )); c2=$(( $(cpu_ticks "$up") - c2 ))
  d2=$(( $(cpu_ticks "$tp") - d2 ))
  # Wake-up latency: one record every 20 ms into the idle pipeline.
  ip netns exec "$(host 2)" taskset -c 0 "$stage" "$(ring_name "mm-$mode")" --name "idle-$mode" --warmup 10 \
    --idle-exit-ms 1500 --idle yield --json "$logs/lat-$mode.json" >/dev/null 2>&1 &
  reader=$!
  ip netns exec "$(host 2)" taskset -c 0 "$stage" "$(ring_name "mt-$mode")" --name "idle-tcp-$mode" --warmup 10 \
    --idle-exit-ms 1500 --idle yield --json "$logs/lat-tcp-$mode.json" >/dev/null 2>&1 &
  treader=$!
  sleep 0.3
  on 1 "$rf" publish "$src" --count 110 --rate 50 --quiet >/dev/null
  wait "$reader" "$treader"
  lat() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(round(r["p50_ns"]/1000,1), round(r["p99_ns"]/1000,1))' "$1" 2>/dev/null || echo "? ?"; }
  p50=$(lat "$logs/lat-$mode.json")
  t50=$(lat "$logs/lat-tcp-$mode.json")
  echo "idle ($backend, --idle $mode): serve $(pct "$a") %, multicast mirror $(pct "$b") %, unicast mirror $(pct "$c") %, TCP mirror $(pct "$d") % of a core; wake-up publish->read p50/p99 ${p50% *} / ${p50#* } us (multicast), ${t50% *} / ${t50#* } us (TCP)"
  echo "10 k/s ($backend, --idle $mode, ${busy} s): serve $(pct "$a2" "$busy") %, multicast mirror $(pct "$b2" "$busy") %, unicast mirror $(pct "$c2" "$busy") %, TCP mirror $(pct "$d2" "$busy") % of a core"
  results+=("{\"backend\": \"$backend\", \"mode\": \"$mode\", \"serve_pct\": $(pct "$a"), \"multicast_mirror_pct\": $(pct "$b"), \"unicast_mirror_pct\": $(pct "$c"), \"tcp_mirror_pct\": $(pct "$d"), \"wake_p50_us\": ${p50% *}, \"wake_p99_us\": ${p50#* }, \"tcp_wake_p50_us\": ${t50% *}, \"tcp_wake_p99_us\": ${t50#* }, \"at_10k_pct\": [$(pct "$a2" "$busy"), $(pct "$b2" "$busy"), $(pct "$c2" "$busy"), $(pct "$d2" "$busy")]}")
  stop_since "$first"
done
if [[ -n $json ]]; then
  (IFS=,; echo "[${results[*]}]") > "$json"
fi
