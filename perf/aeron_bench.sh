#!/usr/bin/env bash
# aeron_bench.sh — Aeron on the same topology and pinning as ringfire's
# round-trip and rate harnesses (perf/mirror_bench.sh --harness engine,rate),
# for the issue's comparison: two namespaces on one direct veth d1
# (198.18.1.1 <-> 198.18.1.2), one Aeron C media driver per host (SHARED
# threading mode, its agent yielding: AERON_SHARED_IDLE_STRATEGY=yield),
# h1's driver and client pinned to CPU 0, h2's to CPU 1.
#   round trip  cping on h1 (ping to 198.18.1.2:20123) and cpong on h2 (pong
#               back to 198.18.1.1:20124), 64-byte messages, closed loop; p50
#               and p99 from cping's histogram.
#   one way     streaming_publisher on h1 to rate_subscriber on h2, 64-byte
#               messages; the subscriber's steadiest second. Aeron
#               retransmits what is lost, so every message arrives; the
#               figure is what got through.
# Aeron is not in Debian: --aeron names a directory holding aeronmd, cping,
# cpong, streaming_publisher and rate_subscriber built from Aeron's own
# sources (its C media driver and C samples). Nothing of Aeron is in this
# tree, and this script does not build it.
# Usage: perf/aeron_bench.sh --aeron DIR [--messages N] [--json FILE]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
aeron=
messages=200000
json=
while (($#)); do
  case $1 in
    --aeron) aeron=$2; shift 2 ;;
    --messages) messages=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 --aeron DIR [--messages N] [--json FILE]" >&2; exit 2 ;;
  esac
done
for b in aeronmd cping cpong streaming_publisher rate_subscriber; do
  [[ -x $aeron/$b ]] || { echo "aeron_bench: $aeron/$b is missing: --aeron names a directory of Aeron's C binaries" >&2; exit 2; }
done
source "$top/tests/lab/lib.sh"
lab_up 2
lab_logs aeron
direct_link 1 || { echo "aeron_bench: link d1 is down" >&2; exit 1; }
dir1=/dev/shm/${LAB_PREFIX}aeron-h1 dir2=/dev/shm/${LAB_PREFIX}aeron-h2
trap 'lab_rc=$?; rm -rf "$dir1" "$dir2"; [[ -n "${KEEP_LOGS:-}" ]] || rm -rf "$logs"; lab_down "$lab_rc"' EXIT
driver_env=(env AERON_THREADING_MODE=SHARED AERON_SHARED_IDLE_STRATEGY=yield AERON_DIR_DELETE_ON_START=1
  AERON_DIR_DELETE_ON_SHUTDOWN=1)
bg 1 "$logs/driver1" taskset -c 0 "${driver_env[@]}" AERON_DIR="$dir1" "$aeron/aeronmd"
bg 2 "$logs/driver2" taskset -c 1 "${driver_env[@]}" AERON_DIR="$dir2" "$aeron/aeronmd"
wait_for 10 test -e "$dir1/cnc.dat" || { echo "aeron_bench: h1's driver did not start: $(tail -n 3 "$logs/driver1")" >&2; exit 1; }
wait_for 10 test -e "$dir2/cnc.dat" || { echo "aeron_bench: h2's driver did not start: $(tail -n 3 "$logs/driver2")" >&2; exit 1; }

ping=aeron:udp?endpoint=198.18.1.2:20123
pong=aeron:udp?endpoint=198.18.1.1:20124
first=${#LAB_PIDS[@]}
bg 2 "$logs/cpong" taskset -c 1 stdbuf -oL "$aeron/cpong" -p "$dir2" -c "$ping" -C "$pong"
sleep 1
on 1 taskset -c 0 timeout 120 stdbuf -oL "$aeron/cping" -p "$dir1" -c "$ping" -C "$pong" -L 64 -m "$messages" -w 20000 \
  >"$logs/cping" 2>&1 || { echo "aeron_bench: cping failed: $(tail -n 3 "$logs/cping")" >&2; exit 1; }
stop_since "$first"
# hdr_histogram's percentile table: value (µs) and percentile per line.
read -r p50 p99 < <(python3 - "$logs/cping" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 2:
        try:
            rows.append((float(f[1]), float(f[0])))
        except ValueError:
            pass
def at(q):
    return next(v for p, v in rows if p >= q)
print(at(0.5), at(0.99))
PY
)
echo "aeron round trip: p50 $p50 us, p99 $p99 us (64-byte messages, $messages)"

first=${#LAB_PIDS[@]}
stream=aeron:udp?endpoint=198.18.1.2:20125
bg 2 "$logs/rate_subscriber" taskset -c 1 stdbuf -oL "$aeron/rate_subscriber" -p "$dir2" -c "$stream"
sleep 1
on 1 taskset -c 0 timeout 120 stdbuf -oL "$aeron/streaming_publisher" -p "$dir1" -c "$stream" -L 64 -m $((messages * 100)) \
  >"$logs/streaming_publisher" 2>&1 || { echo "aeron_bench: the publisher failed: $(tail -n 3 "$logs/streaming_publisher")" >&2; exit 1; }
sleep 1.5
stop_since "$first"
# rate_subscriber prints one line a second: "... msgs/sec, ... bytes/sec, ...".
rate=$(grep -Eo '[0-9.e+]+ msgs/sec' "$logs/rate_subscriber" | awk '{print $1}' | sort -g | tail -n 1)
[[ -n $rate ]] || { echo "aeron_bench: the subscriber reported no rate: $(tail -n 3 "$logs/rate_subscriber")" >&2; exit 1; }
# Its last line's running total: every message sent must have arrived.
total=$(grep -Eo 'totals [0-9]+ messages' "$logs/rate_subscriber" | tail -n 1 | awk '{print $2}')
(( ${total:-0} == messages * 100 )) ||
  { echo "aeron_bench: the subscriber got ${total:-0} of $((messages * 100)) messages" >&2; exit 1; }
echo "aeron one way: ${rate} messages/s at best (64-byte messages), all $total arrived"
if [[ -n $json ]]; then
  printf '{"harness": "aeron", "round_trip_p50_us": %s, "round_trip_p99_us": %s, "one_way_msgs_per_s": %s, "one_way_messages": %s, "messages": %s}\n' \
    "$p50" "$p99" "$rate" "$total" "$messages" >"$json"
fi
