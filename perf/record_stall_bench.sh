#!/usr/bin/env bash
# record_stall_bench.sh — what a disk's stalls cost a recording, by the
# recorder's batch-buffer memory (--buffer-bytes) and its syncing in steps
# (--write-behind): a publisher on CPU 0 writes --count 64-byte records at
# --rate into a ring of --capacity slots, recorded with an fsync per
# segment; each --write-behind value with each --buffers value in turn,
# alternating for --rounds, so none gets the quieter disk. Prints, per
# run, the records lost to laps (gaps), the most the recording lagged the
# ring's writer, and the buffer memory the recorder made.
# Usage: perf/record_stall_bench.sh [--build DIR] [--dir DIR] [--capacity N]
#        [--rate N] [--count N] [--rounds N] [--buffers "4Mi 64Mi"]
#        [--write-behind "0 8Mi"]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
base=/var/tmp
capacity=256Ki
rate=2M
count=20000000
rounds=2
buffers="4Mi 64Mi"
behinds="8Mi"
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    --capacity) capacity=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --buffers) buffers=$2; shift 2 ;;
    --write-behind) behinds=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--dir DIR] [--capacity N] [--rate N] [--count N] [--rounds N] [--buffers LIST] [--write-behind LIST]" >&2; exit 2 ;;
  esac
done
source "$top/perf/lib.sh"
perf_ringfire "$0"
work=$(mktemp -d "$base/rf-stall-bench.XXXXXX")
ring=rf-stall-bench-$$
rec=
cleanup() {
  [[ -n $rec ]] && kill "$rec" 2>/dev/null && wait "$rec" 2>/dev/null
  "$rf" remove "$ring" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

echo "ring $capacity slots of 64 B, $count records at $rate/s, fsync per segment, $rounds rounds"
for round in $(seq 1 "$rounds"); do
  for wb in $behinds; do
  for bb in $buffers; do
    "$rf" create "$ring" --capacity "$capacity" --slot-size 64 >/dev/null || exit 1
    rm -rf "$work/a"
    "$rf" record "$ring" --dir "$work/a" --fsync segment --buffer-bytes "$bb" --write-behind "$wb" >"$work/rec.out" 2>&1 &
    rec=$!
    sleep 0.5
    taskset -c 0 "$rf" publish "$ring" --count "$count" --rate "$rate" --quiet --unchecked >"$work/pub.out" 2>&1
    sleep 1
    kill "$rec"; wait "$rec" 2>/dev/null; rec=
    lag=$(awk '{for (i = 1; i <= NF; i++) if ($i == "lag") {v = $(i + 1) + 0; if (v > m) m = v}} END {print m + 0}' "$work/rec.out")
    record_last "$work/rec.out"
    echo "round $round, --write-behind $wb --buffer-bytes $bb: recorded ${rec_records:-?} of $count, gaps (lost) ${rec_gaps:-?} ${rec_lost:-?}, most lag $lag, buffers made ${rec_mib:-?} MiB"
    "$rf" remove "$ring" >/dev/null
  done
  done
done
