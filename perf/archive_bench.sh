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
#   replay   a TCP mirror from the oldest record of a 10 M-record archive
#            (64 B): records/s; then a unicast mirror from the archive's
#            first record into a live 1 M records/s stream: seconds until it
#            is at lag 0, and the most it lags after;
#            With --against BUILD, the TCP replay runs four times, served by
#            this build's ringfire and BUILD's in turn (ours first), and
#            prints each and the ratio of the medians (ours ÷ theirs);
#   lookup   archive_lookup at 1 GB and 100 GB (sparse files): files and
#            batches one lookup touches, and its time, warm and cold.
# The publisher runs on CPU 0; the recorder is not pinned (its writing
# thread mostly waits on the disk). Leaves nothing behind but --json.
# Usage: perf/archive_bench.sh [--build DIR] [--dir DIR] [--rate N]
#        [--seconds S] [--blob-share F] [--no-replay] [--no-lookup] [--against BUILD]
#        [--replay-only] [--json FILE]   (root)
# --replay-only: the replay phase alone (no dd, fixed, blob or lookup).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
base=/var/tmp
rate=5000000
seconds=10
share=0.75
lookup=1
replay=1
against=
against_json=
replay_only=0
json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --blob-share) share=$2; shift 2 ;;
    --no-lookup) lookup=0; shift ;;
    --no-replay) replay=0; shift ;;
    --against) against=$2; shift 2 ;;
    --replay-only) replay_only=1 lookup=0; shift ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--dir DIR] [--rate N] [--seconds S] [--blob-share F] [--no-replay] [--no-lookup] [--against BUILD] [--replay-only] [--json FILE]" >&2; exit 2 ;;
  esac
done
source "$top/perf/lib.sh"
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

if ((!replay_only)); then
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
record_last "$work/rec.out"
f_records=$rec_records f_gaps=$rec_gaps f_lost=$rec_lost
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
fi  # replay_only

# replay: a TCP mirror from the oldest record of an archive of 10 M
# 64-byte records (the ring holds the last 1 M): records/s until it has them
# all; then a unicast mirror joining a live 1 M records/s stream from the
# archive's first record: when it reaches lag 0, and the most it lags after.
replay_rate= merge_s= merge_after=
if ((replay)); then
  rsrc=rf-abench-replay-$$
  pids_before=${#pids[@]}
  "$rf" create "$rsrc" --capacity 1Mi --slot-size 64 >/dev/null
  rm -rf "$work/r"
  "$rf" record "$rsrc" --dir "$work/r" --fsync never --quiet >"$work/rrec.out" 2>&1 &
  pids+=($!)
  sleep 0.5
  taskset -c 0 "$rf" publish "$rsrc" --count 10000000 --rate 2M --quiet --unchecked >/dev/null
  sleep 1
  # What the recorder itself lost (its gaps: replayed as GAPs, exactly).
  read -r rlost rgaps < <("$rf" tail --archive "$work/r" --quiet 2>&1 | sed -n 's/.*verified, \([0-9]*\) lost in \([0-9]*\) gaps.*/\1 \2/p')
  # replay_tcp BIN PORT: a serve (BIN) of the archive, and a TCP mirror
  # from its oldest record: sets rate (records/s until it has all 10 M)
  # and secs. The serve stops after; the merge below starts its own.
  replay_tcp() {
    local bin=$1 port=$2 sp mp t0 t1
    "$bin" serve "$rsrc" --listen 127.0.0.1:$port --udp $((port + 300)) --archive "$work/r" \
      --archive-rate 4Gi --quiet >"$work/rserve.out" 2>&1 &
    sp=$!
    sleep 0.5
    t0=$(date +%s.%N)
    "$rf" mirror 127.0.0.1:$port "$rsrc-m" --tcp --from oldest >"$work/rmir.out" 2>&1 &
    mp=$!
    for _ in $(seq 1 600); do
      sleep 0.05
      grep -q "next seq 10000000" "$work/rmir.out" && break
    done
    t1=$(date +%s.%N)
    kill "$mp" "$sp" 2>/dev/null; wait "$mp" "$sp" 2>/dev/null
    "$rf" remove "$rsrc-m" >/dev/null 2>&1
    grep -q "next seq 10000000" "$work/rmir.out" || { rate=0; secs=never; return; }
    rate=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%d", 10000000 / (b - a)}')
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  }
  port=$((7600 + $$ % 300))
  replay_tcp "$rf" $port
  replay_rate=$rate
  echo "replay to a TCP mirror: 10000000 records (the archive: $rgaps gaps, $rlost records lost by its recorder) in $secs s = $replay_rate records/s (from the mirror's start, its connection included)"
  if [[ -n $against ]]; then
    ours=("$rate") theirs=()
    for who in theirs ours theirs; do
      port=$((port + 1))
      if [[ $who == ours ]]; then replay_tcp "$rf" $port; ours+=("$rate"); else replay_tcp "$against/cli/ringfire" $port; theirs+=("$rate"); fi
      echo "replay to a TCP mirror, served by $who ($([[ $who == ours ]] && echo "$build" || echo "$against")): $rate records/s"
    done
    python3 -c "import statistics,sys; o=[int(x) for x in sys.argv[1].split()]; t=[int(x) for x in sys.argv[2].split()]; mo, mt = statistics.median(o), statistics.median(t); print(f'replay, ours / theirs (medians of {len(o)} and {len(t)}): {mo:,.0f} / {mt:,.0f} records/s = {mo / mt:.2f}x' if mt else 'replay: theirs never finished')" "${ours[*]}" "${theirs[*]}"
    against_json="{\"build\": \"$against\", \"ours\": [$(IFS=,; echo "${ours[*]}")], \"theirs\": [$(IFS=,; echo "${theirs[*]}")]}"
  fi
  "$rf" serve "$rsrc" --listen 127.0.0.1:$((port + 1)) --udp $((port + 301)) --archive "$work/r" \
    --archive-rate 4Gi --quiet >"$work/rserve.out" 2>&1 &
  pids+=($!)
  port=$((port + 1))
  sleep 0.5
  # The merge: live at 1 M records/s; a unicast mirror from the oldest.
  taskset -c 0 "$rf" publish "$rsrc" --rate 1M --duration 14s --quiet --unchecked >/dev/null &
  pub=$!
  pids+=($pub)
  sleep 2
  "$rf" mirror 127.0.0.1:$port "$rsrc-u" --unicast --from oldest >"$work/umir.out" 2>&1 &
  mp=$!
  wait "$pub"
  sleep 1
  kill "$mp" 2>/dev/null; wait "$mp" 2>/dev/null
  "$rf" remove "$rsrc-u" >/dev/null 2>&1
  # What the recorder lost by now (it recorded the live phase too): the
  # merge's GAPs are the archive's losses it read through, so between the
  # two counts.
  rlost0=$rlost
  read -r rlost rgaps < <("$rf" tail --archive "$work/r" --quiet 2>&1 | sed -n 's/.*verified, \([0-9]*\) lost in \([0-9]*\) gaps.*/\1 \2/p')
  # Per-second lines: the first at lag 0 (caught up), and the most it lagged after.
  read -r merge_s merge_after ugap < <(awk '/^mirror: [0-9]+ rec\/s/ {
      n++; match($0, /lag [0-9]+/); lag = substr($0, RSTART + 4, RLENGTH - 4) + 0
      match($0, /GAP records [0-9]+/); g = substr($0, RSTART + 12, RLENGTH - 12) + 0
      if (first == 0 && lag == 0 && n > 1) first = n
      else if (first > 0 && lag > worst) worst = lag
    } END {print first, worst + 0, g + 0}' "$work/umir.out")
  echo "merge into a live 1 M records/s stream (unicast mirror from the archive's first record): lag 0 after ${merge_s:-never} s, at most ${merge_after:-?} records behind after that, ${ugap:-?} GAP records ($( ((${ugap:-0} >= ${rlost0:-0} && ${ugap:-0} <= ${rlost:-0})) && echo "within what the recorder lost: $rlost0 before the live phase, $rlost after" || echo "NOT within what the recorder lost: $rlost0 before the live phase, $rlost after"))"
  for p in "${pids[@]:$pids_before}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  "$rf" remove "$rsrc" >/dev/null 2>&1
fi

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
{"dd_bytes_per_s": ${dd_bps:-null},
 "fixed": $( ((replay_only)) && echo null || echo "{\"rate\": $rate, \"seconds\": $seconds, \"published\": ${published:-0}, \"recorded\": ${f_records:-0}, \"gaps\": ${f_gaps:-0}, \"lost\": ${f_lost:-0}}"),
 "blob": $( ((replay_only)) && echo null || echo "{\"rate\": $blob_rate, \"bytes_per_s\": $b_bps, \"ratio_to_dd\": $ratio, \"lost_after_warmup\": $((lost1 - lost0))}"),
 "replay": {"tcp_records_per_s": ${replay_rate:-null}, "against": ${against_json:-null}, "merge_lag0_after_s": ${merge_s:-null}, "merge_max_lag_after": ${merge_after:-null}, "merge_gap_records": ${ugap:-null}, "recorder_lost": ${rlost:-null}},
 "lookup_1gb": ${l1:-null},
 "lookup_100gb": ${l100:-null}}
EOF
fi
