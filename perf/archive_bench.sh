#!/usr/bin/env bash
# archive_bench.sh — what recording costs and how fast an archive answers,
# every figure against the disk's own in one run:
#   dd       the reference: 2 GiB written with O_DIRECT, 1 MiB blocks;
#   fixed    a 64-byte ring published at --rate (default 5 M records/s) for
#            --seconds, recorded with fsync every segment: records taken,
#            gaps (laps) taken — keeping up means none;
#   blob     1 KiB blob records published at --blob-share of dd's
#            bandwidth (default 0.75) for --seconds, recorded the same way:
#            bytes/s written over the last half (the first lap of a fresh
#            arena pays the machine's first-touch cost; see perf/README.md)
#            and its ratio to dd; gaps after the first half;
#   lookup   archive_lookup at 1 GB and 100 GB (sparse files): files and
#            batches one lookup touches, and its time, warm and cold.
# The publisher runs on CPU 0; the recorder is not pinned (its writing
# thread mostly waits on the disk). Leaves nothing behind but --json.
# Usage: perf/archive_bench.sh [--build DIR] [--dir DIR] [--rate N]
#        [--seconds S] [--blob-share F] [--no-lookup] [--json FILE]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
base=/var/tmp
rate=5000000
seconds=10
share=0.75
lookup=1
json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --blob-share) share=$2; shift 2 ;;
    --no-lookup) lookup=0; shift ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--dir DIR] [--rate N] [--seconds S] [--blob-share F] [--no-lookup] [--json FILE]" >&2; exit 2 ;;
  esac
done
rf=$build/cli/ringfire
work=$(mktemp -d "$base/rf-archive-bench.XXXXXX")
fixed=rf-abench-fixed-$$
blob=rf-abench-blob-$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  "$rf" remove "$fixed" >/dev/null 2>&1
  "$rf" remove "$blob" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# dd's bandwidth in bytes/s.
dd_out=$(dd if=/dev/zero of="$work/dd" bs=1M count=2048 oflag=direct 2>&1 | tail -1)
rm -f "$work/dd"
dd_s=$(sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p' <<<"$dd_out")
dd_bps=$(awk -v s="$dd_s" 'BEGIN {print int(2147483648 / s)}')
echo "dd O_DIRECT: $dd_out"

# record_run RING RATE PUBLISH_ARGS...: records RING into a new archive
# while publishing; leaves the recorder's per-second lines in $work/rec.out.
record_run() {
  local ring=$1 r=$2
  shift 2
  rm -rf "$work/a"
  "$rf" record "$ring" --dir "$work/a" --from latest --fsync segment --duration "$((seconds + 2))s" \
    >"$work/rec.out" 2>&1 &
  local rec=$!
  pids+=("$rec")
  sleep 0.5
  taskset -c 0 "$rf" publish "$ring" --rate "$r" --duration "${seconds}s" --quiet --unchecked "$@" >"$work/pub.out" 2>&1
  wait "$rec"
}
"$rf" create "$fixed" --capacity 4Mi --slot-size 64 >/dev/null
record_run "$fixed" "$rate"
published=$(sed -n 's/.*published \([0-9]*\) records.*/\1/p' "$work/pub.out")
last=$(tail -1 "$work/rec.out")
f_records=$(sed -n 's/.*lag [0-9]*, \([0-9]*\) records.*/\1/p' <<<"$last")
f_gaps=$(sed -n 's/.* \([0-9]*\) gaps (\([0-9]*\) lost).*/\1/p' <<<"$last")
f_lost=$(sed -n 's/.* gaps (\([0-9]*\) lost).*/\1/p' <<<"$last")
echo "fixed 64 B at $rate/s for ${seconds}s: published $published, recorded $f_records, $f_gaps gaps ($f_lost lost)"
"$rf" remove "$fixed" >/dev/null

"$rf" create "$blob" --blob --capacity 1Mi --arena 256Mi >/dev/null
blob_rate=$(awk -v b="$dd_bps" -v f="$share" 'BEGIN {print int(b * f / 1040)}')
record_run "$blob" "$blob_rate" --min-size 1024 --max-size 1024
half=$((seconds / 2))
mapfile -t lines < <(grep " rec/s" "$work/rec.out" | grep -v done)
n=${#lines[@]}
first_half=${lines[$((half - 1))]}
last_full=${lines[$((n - 1))]}
b0=$(sed -n 's/.* \([0-9]*\) bytes,.*/\1/p' <<<"$first_half")
b1=$(sed -n 's/.* \([0-9]*\) bytes,.*/\1/p' <<<"$last_full")
lost0=$(sed -n 's/.* gaps (\([0-9]*\) lost).*/\1/p' <<<"$first_half")
lost1=$(sed -n 's/.* gaps (\([0-9]*\) lost).*/\1/p' <<<"$last_full")
secs=$((n - half))
b_bps=$(awk -v a="$b0" -v b="$b1" -v s="$secs" 'BEGIN {print int((b - a) / s)}')
ratio=$(awk -v a="$b_bps" -v d="$dd_bps" 'BEGIN {printf "%.2f", a / d}')
echo "blob 1 KiB at $blob_rate/s ($share x dd): recorder wrote $b_bps B/s over the last $secs s = ${ratio}x dd; lost after warm-up: $((lost1 - lost0))"

l1= l100=
if ((lookup)); then
  mkdir -p "$work/l1" "$work/l100"
  l1=$("$build/perf/archive_lookup" "$work/l1" 1 2000)
  rm -rf "$work/l1"
  l100=$("$build/perf/archive_lookup" "$work/l100" 100 2000)
  rm -rf "$work/l100"
  echo "lookup 1 GB: $l1"
  echo "lookup 100 GB: $l100"
fi

if [[ -n $json ]]; then
  cat >"$json" <<EOF
{"dd_bytes_per_s": $dd_bps,
 "fixed": {"rate": $rate, "seconds": $seconds, "published": ${published:-0}, "recorded": ${f_records:-0}, "gaps": ${f_gaps:-0}, "lost": ${f_lost:-0}},
 "blob": {"rate": $blob_rate, "bytes_per_s": $b_bps, "ratio_to_dd": $ratio, "lost_after_warmup": $((lost1 - lost0))},
 "lookup_1gb": ${l1:-null},
 "lookup_100gb": ${l100:-null}}
EOF
fi
