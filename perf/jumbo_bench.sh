#!/usr/bin/env bash
# jumbo_bench.sh — jumbo frames on the kernel backend: a serve (CPU 0) and
# a multicast mirror (CPU 1) over a direct veth at MTU 9000, 64-byte
# records at --rate (default 1 M/s) for --seconds, once with 1472-byte
# datagrams and once with 8972 (the largest UDP payload a 9000-byte link
# carries), in one run: records per datagram, and each process's CPU per
# record. Every record is checked at the mirror.
# Usage: perf/jumbo_bench.sh [--build DIR] [--rate R] [--seconds S] [--json FILE]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build-test rate=1000000 seconds=4 json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--rate R] [--seconds S] [--json FILE]" >&2; exit 2 ;;
  esac
done
source "$top/perf/lib.sh"
perf_ringfire jumbo_bench
lab_up 2
lab_logs jumbo
direct_link 1 || { echo "jumbo_bench: link d1 is down" >&2; exit 1; }
for h in 1 2; do on $h ip link set d1 mtu 9000; done
count=$(awk -v r="$rate" -v s="$seconds" 'BEGIN {printf "%d", r * s}')  # --seconds may be fractional
rows=() results=()
port=7600
for mtu in 1472 8972; do
  src=$(ring_name "s$mtu") m=$(ring_name "m$mtu")
  "$rf" create "$src" --capacity 8388608 --slot-size 64 >/dev/null
  first=${#LAB_PIDS[@]}
  bg 1 "$logs/serve$mtu" taskset -c 0 "$rf" serve "$src" --listen 198.18.1.1:$port --multicast 239.255.9.1:$((port + 1)) \
    --iface d1 --mtu "$mtu" --quiet
  serve_pid=${LAB_PIDS[-1]}
  wait_for 5 grep -q "^serve: " "$logs/serve$mtu" || { echo "jumbo_bench: serve did not start: $(cat "$logs/serve$mtu")" >&2; exit 1; }
  bg 2 "$logs/mirror$mtu" taskset -c 1 "$rf" mirror 198.18.1.1:$port "$m" --from oldest
  mirror_pid=${LAB_PIDS[-1]}
  wait_for 10 grep -q "^mirror: 198" "$logs/mirror$mtu" || { echo "jumbo_bench: mirror did not start: $(cat "$logs/mirror$mtu")" >&2; exit 1; }
  sleep 1
  s0=$(cpu_ticks "$serve_pid") m0=$(cpu_ticks "$mirror_pid")
  dg0=$(mirror_stat "$logs/mirror$mtu" datagrams)
  res=$(on 1 taskset -c 0 "$rf" publish "$src" --count "$count" --rate "$rate" --idle yield 2>&1 | grep "^publish: published")
  wait_for 30 mirror_at "$logs/mirror$mtu" "$count" || { echo "jumbo_bench: the mirror did not catch up: $(tail -n 1 "$logs/mirror$mtu")" >&2; exit 1; }
  s1=$(cpu_ticks "$serve_pid") m1=$(cpu_ticks "$mirror_pid")
  sleep 1.1  # a stats line after the last record
  dg1=$(mirror_stat "$logs/mirror$mtu" datagrams)
  naks=$(mirror_stat "$logs/mirror$mtu" NAKs)
  out=$("$rf" tail "$m" --from oldest --idle-exit 300ms --quiet)
  [[ $out == "tail: $count records verified, 0 lost, 0 holes skipped, 0 torn, 0 misplaced"* ]] ||
    { echo "jumbo_bench: the mirror is not exact at --mtu $mtu: $out" >&2; exit 1; }
  got=$(grep -Eo '[0-9]+ rec/s' <<<"$res"); got=${got%% *}
  line=$(python3 - "$mtu" "$count" "$s0" "$s1" "$m0" "$m1" "${dg0:-0}" "${dg1:-0}" "$got" "${naks:-0}" <<'PY'
import json, os, sys
mtu, count, s0, s1, m0, m1, d0, d1, got, naks = map(int, sys.argv[1:])
tick = 1e9 / os.sysconf("SC_CLK_TCK")
r = {"mtu": mtu, "records": count, "published_per_s": got, "datagrams": d1 - d0,
     "records_per_datagram": round(count / max(d1 - d0, 1), 1),
     "serve_cpu_ns_per_record": round((s1 - s0) * tick / count, 1),
     "mirror_cpu_ns_per_record": round((m1 - m0) * tick / count, 1), "naks": naks}
print(json.dumps(r))
PY
)
  results+=("$line")
  echo "jumbo ($mtu): $line"
  stop_since "$first"
  rm -f "/dev/shm/$src" "/dev/shm/$m"
  port=$((port + 10))
done
python3 - "${results[@]}" <<'PY'
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
print("| UDP payload | records per datagram | serve CPU ns/record | mirror CPU ns/record | NAKs |")
print("| ---: | ---: | ---: | ---: | ---: |")
for r in (a, b):
    print(f"| {r['mtu']} | {r['records_per_datagram']} | {r['serve_cpu_ns_per_record']} | {r['mirror_cpu_ns_per_record']} | {r['naks']} |")
f = lambda k: f"{b[k] / a[k]:.2f}" if a[k] else "–"
print(f"| 8972 ÷ 1472 | {f('records_per_datagram')} | {f('serve_cpu_ns_per_record')} | {f('mirror_cpu_ns_per_record')} | |")
PY
[[ -n $json ]] && printf '%s\n' "${results[@]}" > "$json"
exit 0
