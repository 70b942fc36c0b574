#!/usr/bin/env bash
# mirror_bench.sh — the ring-mirroring harnesses in the namespace lab, all
# writing JSON into one results directory, then perf/plot.py for the SVGs.
#
#   perf/mirror_bench.sh [--backend kernel[,dpdk]] [--out DIR] [--quick]
#
# With several backends, each runs in turn in the same lab and the same
# invocation (one backend's processes stopped before the next starts), so
# the figures compare as ratios measured in one run.
#
# stages    a publisher on h1 at 10 k records/s; push -> read measured at once
#           on the source ring, a mirror on h1, and mirrors on h2 and h3.
# pingpong  h1 publishes ring A (one record every 100 us); h2 mirrors it,
#           echoes every record into ring B, serves B; h1 mirrors B and
#           measures the round trip: two network hops, four ring hand-offs.
# stress    the same loop open-loop at fixed rates, then flat out; delivered %
#           and round trip per rate; the highest rate with every record echoed.
#
# Processes on h1 are pinned to CPU 0, on h2/h3 to CPU 1, and poll with
# sched_yield between empty polls: on a 2-core machine several spinning
# processes per core would otherwise take turns once per scheduler tick.
# The dpdk backend drives each host's veth through DPDK's net_af_packet vdev
# (--no-huge); serve and mirror processes get --backend dpdk --iface eth0.
set -u
backend=kernel
out=""
quick=0
while (($#)); do
  case $1 in
    --backend) backend=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "usage: $0 [--backend kernel[,dpdk]] [--out DIR] [--quick]" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a backends <<<"$backend"
for b in "${backends[@]}"; do
  [[ $b == kernel || $b == dpdk ]] || { echo "mirror_bench: unknown backend '$b' (kernel, dpdk)" >&2; exit 2; }
done
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
ninja -C "$build" cli/ringfire perf/echo perf/stage_reader >/dev/null || exit 2
rf=$build/cli/ringfire
echo_bin=$build/perf/echo
stage=$build/perf/stage_reader
out=${out:-$top/perf/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
source "$top/tests/lab/lib.sh"
lab_up 3
logs=$out/logs
mkdir -p "$logs"
idle=(--idle yield)
h1() { on 1 taskset -c 0 "$@"; }
bg1() { local log=$1; shift; bg 1 "$log" taskset -c 0 "$@"; }
bg2() { local log=$1; shift; bg 2 "$log" taskset -c 1 "$@"; }
bg3() { local log=$1; shift; bg 3 "$log" taskset -c 1 "$@"; }
connected() { wait_for 5 grep -q "^mirror: 198" "$1" || { echo "mirror_bench: $1 did not connect" >&2; exit 1; }; }
started() { wait_for 5 grep -q "^serve: " "$1" || { echo "mirror_bench: $1 did not start" >&2; exit 1; }; }

run_backend() {
  local backend=$1 p0=$2 g=$3
  local bflags=()
  [[ $backend == dpdk ]] && bflags=(--backend dpdk --iface eth0)
  local first_pid=${#LAB_PIDS[@]}
  echo "== stages ($backend)"
  A=$(ring_name ${backend}-a)
  "$rf" create "$A" --capacity 262144 --slot-size 64 >/dev/null
  bg1 "$logs/$backend-serve-a" "$rf" serve "${bflags[@]}" "$A" --listen 198.18.0.1:$((p0)) --multicast 239.255.$g.10:$((p0 + 1)) --iface eth0 "${idle[@]}" --quiet
  started "$logs/$backend-serve-a"
  # A DPDK port does not loop its own transmissions back to its host (nor
  # does a NIC): on a DPDK source host, readers read the ring itself.
  local hosts=(1 2 3)
  [[ $backend == dpdk ]] && hosts=(2 3)
  for h in "${hosts[@]}"; do
    bg$h "$logs/$backend-mirror-a$h" "$rf" mirror "${bflags[@]}" 198.18.0.1:$((p0)) "$(ring_name ${backend}-a$h)" "${idle[@]}" --quiet
    connected "$logs/$backend-mirror-a$h"
  done
  bg1 "$logs/$backend-st-src" "$stage" "$A" --name $backend-source --json "$out/stages-$backend-1-source.json" --idle yield
  [[ $backend == kernel ]] && bg1 "$logs/$backend-st-1" "$stage" "$(ring_name ${backend}-a1)" --name $backend-same-host --json "$out/stages-$backend-2-same-host.json" --idle yield
  bg2 "$logs/$backend-st-2" "$stage" "$(ring_name ${backend}-a2)" --name $backend-h2 --json "$out/stages-$backend-3-h2.json" --idle yield
  bg3 "$logs/$backend-st-3" "$stage" "$(ring_name ${backend}-a3)" --name $backend-h3 --json "$out/stages-$backend-4-h3.json" --idle yield
  stage_pids=("${LAB_PIDS[@]: -$((${#hosts[@]} + 1))}")
  sleep 0.5
  secs=$((quick ? 2 : 5))
  h1 "$rf" publish "$A" --rate 10k --duration ${secs}s --idle yield --quiet
  for p in "${stage_pids[@]}"; do wait "$p"; done
  for f in "$out"/stages-$backend-*.json; do cat "$f"; done

  echo "== pingpong and stress ($backend)"
  B=$(ring_name ${backend}-b)
  "$rf" create "$B" --capacity 262144 --slot-size 64 >/dev/null
  P=$(ring_name ${backend}-p)   # the ping side's fresh ring
  "$rf" create "$P" --capacity 262144 --slot-size 64 >/dev/null
  bg1 "$logs/$backend-serve-p" "$rf" serve "${bflags[@]}" "$P" --listen 198.18.0.1:$((p0 + 2)) --multicast 239.255.$g.12:$((p0 + 3)) --iface eth0 "${idle[@]}" --quiet
  started "$logs/$backend-serve-p"
  bg2 "$logs/$backend-mirror-p" "$rf" mirror "${bflags[@]}" 198.18.0.1:$((p0 + 2)) "$(ring_name ${backend}-p2)" "${idle[@]}" --quiet
  connected "$logs/$backend-mirror-p"
  bg2 "$logs/$backend-serve-b" "$rf" serve "${bflags[@]}" "$B" --listen 198.18.0.2:$((p0 + 4)) --multicast 239.255.$g.11:$((p0 + 5)) --iface eth0 "${idle[@]}" --quiet
  started "$logs/$backend-serve-b"
  bg1 "$logs/$backend-mirror-b" "$rf" mirror "${bflags[@]}" 198.18.0.2:$((p0 + 4)) "$(ring_name ${backend}-b1)" "${idle[@]}" --quiet
  connected "$logs/$backend-mirror-b"
  bg2 "$logs/$backend-pong" "$echo_bin" pong "$(ring_name ${backend}-p2)" "$B" --idle yield
  sleep 0.5
  n=$((quick ? 5000 : 20000))
  h1 "$echo_bin" ping "$P" "$(ring_name ${backend}-b1)" --rate 10000 --count $n --idle yield \
    --json "$out/pingpong-$backend.json" || echo "mirror_bench: pingpong reported errors"
  sed -i "s/^{/{\"backend\": \"$backend\", /" "$out/pingpong-$backend.json"

  rates=(1000 10000 50000 100000 200000 400000 700000 1000000)
  ((quick)) && rates=(1000 50000 200000)
  best=0
  for r in "${rates[@]}"; do
    count=$((r * (quick ? 1 : 3)))
    ((count > 1000000)) && count=1000000
    f="$out/stress-$backend-$r.json"
    h1 "$echo_bin" ping "$P" "$(ring_name ${backend}-b1)" --rate "$r" --count "$count" --idle yield --json "$f"
    sed -i "s/^{/{\"backend\": \"$backend\", /" "$f"
    grep -q '"delivered_pct": 100[,.]' "$f" && best=$r
  done
  # Flat out: ping publishes as fast as it can; what comes back, and how fast.
  f="$out/stress-$backend-flat.json"
  h1 "$echo_bin" ping "$P" "$(ring_name ${backend}-b1)" --rate 0 --count 1000000 --idle yield --json "$f"
  sed -i "s/^{/{\"backend\": \"$backend\", /" "$f"
  echo "stress ($backend): highest zero-loss rate tried: $best records/s"
  echo "{\"backend\": \"$backend\", \"highest_zero_loss_rate\": $best}" > "$out/summary-$backend.json"
  # Stop this backend's processes before the next one is measured.
  for p in "${LAB_PIDS[@]:$first_pid}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${LAB_PIDS[@]:$first_pid}"; do wait "$p" 2>/dev/null; done
}

i=0
for b in "${backends[@]}"; do
  run_backend "$b" $((7400 + 100 * i)) $((i + 1))
  i=$((i + 1))
done
python3 "$top/perf/plot.py" "$out"
echo "results and plots in $out"
