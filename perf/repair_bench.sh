#!/usr/bin/env bash
# repair_bench.sh — what repair costs under heavy loss, and how fast a
# burst of scattered losses is repaired. Kernel backend, a source on h1,
# mirrors through the bridge. Each scenario runs once per variant so the
# figures are ratios from one run:
#
# heavy   a multicast mirror (h2) and a unicast mirror (h3), each dropping 20 %
#         of what it receives and reordering and duplicating 5 % (seeded);
#         --count records (default 500 k) published at 100 k/s. Reported per
#         mirror: duplicate records received / records published, NAKs,
#         TCP frames, how far behind it was when the publisher stopped, and
#         how long it took to catch up from there.
# burst   one multicast mirror dropping 30 % of what it receives; 20 k
#         records published flat out (a burst of scattered holes), then
#         nothing: the time from the publisher's end until the mirror holds
#         every record, and its NAKs.
#
# Variants: "multi" (this build: multi-range NAKs) and "single" (the mirror
# asks one range per NAK: --single-range-naks); with --old DIR also the
# binary built in DIR (an earlier ringfire) as "old".
# Usage: perf/repair_bench.sh [--build DIR] [--old DIR] [--count N] [--json FILE]  (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
old=
count=500000
json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--old DIR] [--count N] [--json FILE]" >&2; exit 2 ;;
  esac
done
rf=$build/cli/ringfire
source "$top/tests/lab/lib.sh"
lab_up 3
lab_logs repair

now_ms() { date +%s%3N; }
# ring_at RING: the ring's write_seq.
ring_at() { "$rf" stat "$1" 2>/dev/null | awk '$1 == "write_seq" {print $2; exit}'; }
# wait_ring RING N: poll every 10 ms until RING's write_seq reaches N (60 s at most).
wait_ring() {
  local i
  for ((i = 0; i < 6000; i++)); do
    (( $(ring_at "$1") >= $2 )) && return 0
    sleep 0.01
  done
  return 1
}
last_stat() { grep -Eo "$2 [0-9]+" "$1" | tail -n 1 | awk '{print $NF}'; }

results=()
variants=(multi single)
[[ -n $old ]] && variants+=(old)
port=7400
for v in "${variants[@]}"; do
  bin=$rf
  extra=()
  case $v in
    single) extra=(--single-range-naks) ;;
    old) bin=$old/cli/ringfire ;;
  esac
  # ---- heavy
  first=${#LAB_PIDS[@]}
  src=$(ring_name "h-$v")
  "$rf" create "$src" --capacity 4194304 --slot-size 64 >/dev/null
  bg 1 "$logs/serve-h-$v" "$bin" serve "$src" --listen 198.18.0.1:$port --multicast 239.255.0.1:$((port + 1)) \
    --udp $((port + 2)) --iface eth0 --idle yield
  wait_for 5 grep -q "^serve: " "$logs/serve-h-$v"
  faults=(--loss 200 --reorder 50 --dup-rate 50)
  bg 2 "$logs/mm-h-$v" "$bin" mirror 198.18.0.1:$port "$(ring_name "mm-$v")" --iface eth0 --from latest \
    "${faults[@]}" --seed 11 --idle yield "${extra[@]}"
  bg 3 "$logs/mu-h-$v" "$bin" mirror 198.18.0.1:$port "$(ring_name "mu-$v")" --unicast --from latest \
    "${faults[@]}" --seed 12 --idle yield "${extra[@]}"
  wait_for 10 grep -q "^mirror: 198" "$logs/mm-h-$v"
  wait_for 10 grep -q "^mirror: 198" "$logs/mu-h-$v"
  sleep 0.5
  on 1 "$rf" publish "$src" --count "$count" --rate 100k --quiet >/dev/null
  t0=$(now_ms)
  declare -A behind caught
  for m in mm mu; do behind[$m]=$((count - $(ring_at "$(ring_name "$m-$v")"))); done
  for m in mm mu; do
    if wait_ring "$(ring_name "$m-$v")" "$count"; then caught[$m]=$(( $(now_ms) - t0 )); else caught[$m]=-1; fi
  done
  sleep 1.2  # a stats line after the last record
  for m in mm mu; do
    ring=$(ring_name "$m-$v")
    log=$logs/$m-h-$v
    dup=$(last_stat "$log" dup); naks=$(last_stat "$log" NAKs); tcp=$(last_stat "$log" "TCP frames")
    ratio=$(awk -v d="$dup" -v c="$count" 'BEGIN {printf "%.3f", d / c}')
    out=$("$rf" compare "$src" "$ring" 2>&1 | tail -n 1)
    name=$([[ $m == mm ]] && echo multicast || echo unicast)
    echo "heavy ($v, $name): duplicates ${dup} = ${ratio}x published, NAKs ${naks}, TCP frames ${tcp}, ${behind[$m]} behind at the publisher's end, caught up ${caught[$m]} ms later; ${out}"
    results+=("{\"scenario\": \"heavy\", \"variant\": \"$v\", \"mirror\": \"$name\", \"published\": $count, \"duplicates\": $dup, \"dup_ratio\": $ratio, \"naks\": $naks, \"tcp_frames\": $tcp, \"behind_at_end\": ${behind[$m]}, \"catch_up_ms\": ${caught[$m]}}")
  done
  stop_since "$first"
  rm -f "/dev/shm/$src" /dev/shm/"$(ring_name "mm-$v")" /dev/shm/"$(ring_name "mu-$v")"
  port=$((port + 10))

  # ---- burst (five times: one burst is noisy)
  times=()
  nak_counts=()
  for rep in 1 2 3 4 5; do
    first=${#LAB_PIDS[@]}
    src=$(ring_name "b-$v-$rep")
    "$rf" create "$src" --capacity 4194304 --slot-size 64 >/dev/null
    bg 1 "$logs/serve-b-$v" "$bin" serve "$src" --listen 198.18.0.1:$port --multicast 239.255.0.2:$((port + 1)) \
      --iface eth0 --idle yield
    wait_for 5 grep -q "^serve: " "$logs/serve-b-$v"
    ring=$(ring_name "mb-$v-$rep")
    bg 2 "$logs/mb-$v" "$bin" mirror 198.18.0.1:$port "$ring" --iface eth0 --from latest --loss 300 --seed "$rep" \
      --idle yield "${extra[@]}"
    wait_for 10 grep -q "^mirror: 198" "$logs/mb-$v"
    sleep 0.5
    on 1 "$rf" publish "$src" --count 20000 --quiet >/dev/null
    t0=$(now_ms)
    if wait_ring "$ring" 20000; then times+=($(( $(now_ms) - t0 ))); else times+=(-1); fi
    sleep 1.2
    nak_counts+=("$(last_stat "$logs/mb-$v" NAKs)")
    stop_since "$first"
    rm -f "/dev/shm/$src" "/dev/shm/$ring"
    port=$((port + 10))
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
  echo "burst ($v): 20000 records flat out at 30 % loss: every record held ${median} ms (median; runs ${times[*]}) after the publisher's end; NAKs ${nak_counts[*]}"
  results+=("{\"scenario\": \"burst\", \"variant\": \"$v\", \"published\": 20000, \"repaired_ms_median\": $median, \"repaired_ms\": [$(IFS=,; echo "${times[*]}")], \"naks\": [$(IFS=,; echo "${nak_counts[*]}")]}")
done
if [[ -n $json ]]; then
  (IFS=,; echo "[${results[*]}]") > "$json"
fi
