#!/usr/bin/env bash
# queues_bench.sh — a DPDK port of one queue pair against two (a worker
# each), in one run: two `ringfire run` daemons joined by net_memif, h1
# serving R rings by multicast, h2 mirroring them (its mirrors placed on
# the other queue from their serves when there are two, so every datagram
# is handed across: the costlier case). Each round publishes --rate
# records/s on every ring for --seconds (a publisher a ring, 64-byte
# records) and reports, per queue count: records mirrored a second from
# the first publish to the last mirror's catching up, whether every copy
# is exact, each daemon's CPU per record (its /proc ticks), and the frames
# handed across queues. Rounds alternate 1, 2, 1, 2 ... (--rounds pairs)
# so that neither gets the quieter minute. --aligned: h2's mirrors on the
# same queue as their serves (nothing handed across: each datagram lands
# on its session's queue).
#   perf/queues_bench.sh [--build DIR] [--rings R] [--rate N] [--seconds S] [--rounds K] [--aligned] [--json FILE]   (root)
set -u
build=build rings=2 rate=500000 seconds=4 rounds=2 json="" aligned=0
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rings) rings=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --aligned) aligned=1; shift ;;
    *) echo "usage: $0 [--build DIR] [--rings R] [--rate N] [--seconds S] [--rounds K] [--aligned] [--json FILE]" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/lib.sh"
perf_ringfire queues_bench
require_dpdk
lab_up 2
lab_logs queuesbench
count=$((rate * seconds))
results="$logs/results.jsonl"
: >"$results"

ctl() { on "$1" "$rf" ctl "$logs/h$1.sock" list 2>/dev/null; }
# round QUEUES TAG: one measurement.
round() {
  local q=$1 tag=$2 i
  local sock="$logs/$tag.memif"
  {
    printf 'ctl = "%s/h1.sock"\nquiet = true\n[[port]]\nname = "d"\nbackend = "dpdk"\nip = "198.18.1.1"\nqueues = %s\n' "$logs" "$q"
    printf 'device = "net_memif0,role=server,socket=%s,socket-abstract=no"\n' "$sock"
    for i in $(seq 1 "$rings"); do
      "$rf" create "$(ring_name $tag-s$i)" --capacity 4Mi --slot-size 64 >/dev/null
      printf '[[serve]]\nname = "s%s"\nring = "%s"\nlisten = "198.18.0.1:%s"\nmulticast = "239.255.8.%s:%s"\n' \
        "$i" "$(ring_name $tag-s$i)" $((7800 + i)) "$i" $((7820 + i))
    done
  } >"$logs/$tag-h1.toml"
  {
    printf 'ctl = "%s/h2.sock"\nquiet = true\n[[port]]\nname = "d"\nbackend = "dpdk"\nip = "198.18.1.2"\nqueues = %s\n' "$logs" "$q"
    printf 'device = "net_memif0,role=client,socket=%s,socket-abstract=no"\n' "$sock"
    if ((!aligned)); then  # one session first: h2's mirrors then sit on the other queue from their serves
      "$rf" create "$(ring_name $tag-pad)" --capacity 1024 >/dev/null
      printf '[[serve]]\nname = "pad"\nring = "%s"\nlisten = "198.18.0.2:7899"\n' "$(ring_name $tag-pad)"
    fi
    for i in $(seq 1 "$rings"); do
      printf '[[mirror]]\nname = "m%s"\nsource = "198.18.0.1:%s"\nring = "%s"\nfrom = "oldest"\n' \
        "$i" $((7800 + i)) "$(ring_name $tag-m$i)"
    done
  } >"$logs/$tag-h2.toml"
  bg 1 "$logs/$tag-h1" "$rf" run "$logs/$tag-h1.toml"
  local d1=${LAB_PIDS[-1]}
  wait_for 20 grep -q "^run: 1 ports" "$logs/$tag-h1" || { echo "h1 did not start: $(tail -n 3 "$logs/$tag-h1")"; return 1; }
  bg 2 "$logs/$tag-h2" "$rf" run "$logs/$tag-h2.toml"
  local d2=${LAB_PIDS[-1]}
  wait_for 20 grep -q "^run: 1 ports" "$logs/$tag-h2" || { echo "h2 did not start: $(tail -n 3 "$logs/$tag-h2")"; return 1; }
  streaming() { [[ $(ctl 2 | python3 -c "import json,sys; print(sum(e.get('state') == 'streaming' for e in json.load(sys.stdin)['sessions']))") == "$rings" ]]; }
  wait_for 20 streaming || { echo "h2's mirrors are not streaming"; return 1; }
  local c1 c2 t0 t1 pubs=()
  c1=$(cpu_ticks "$d1") c2=$(cpu_ticks "$d2")
  t0=$(date +%s%N)
  for i in $(seq 1 "$rings"); do
    on 1 "$rf" publish "$(ring_name $tag-s$i)" --rate "$rate" --count "$count" --quiet --unchecked >/dev/null &
    pubs+=($!)
  done
  wait "${pubs[@]}"
  caught() { [[ $(ctl 2 | python3 -c "
import json, sys
s = {e['name']: e for e in json.load(sys.stdin)['sessions']}
print(min(s['m%d' % i].get('next_seq', 0) for i in range(1, $rings + 1)))") -ge $count ]]; }
  wait_for 120 caught || echo "round $tag: the mirrors did not catch up"
  t1=$(date +%s%N)
  local e1 e2 exact=true
  e1=$(cpu_ticks "$d1") e2=$(cpu_ticks "$d2")
  for i in $(seq 1 "$rings"); do
    "$rf" compare "$(ring_name $tag-s$i)" "$(ring_name $tag-m$i)" --exact >/dev/null || exact=false
  done
  local total=$((count * rings))
  python3 - "$q" "$tag" "$total" "$t0" "$t1" "$exact" "$(ticks_ns_per "$c1" "$e1" "$total")" \
    "$(ticks_ns_per "$c2" "$e2" "$total")" "$(ctl 2 | python3 -c "import json,sys; print(json.load(sys.stdin)['ports'][0]['counters'])")" \
    "$(ctl 2 | python3 -c "import json,sys; print(json.load(sys.stdin)['ports'][0]['drops'])")" >>"$results" <<'PY'
import json, re, sys
q, tag, total, t0, t1, exact, ns1, ns2, counters, drops = sys.argv[1:]
handed = sum(int(x) for x in re.findall(r"(\d+) handed to another queue", counters))
print(json.dumps({"queues": int(q), "round": tag, "records": int(total), "seconds": (int(t1) - int(t0)) / 1e9,
                  "records_per_s": int(total) / ((int(t1) - int(t0)) / 1e9), "exact": exact == "true",
                  "source_ns_per_record": float(ns1), "mirror_ns_per_record": float(ns2),
                  "handed_across": handed, "mirror_port_drops": int(drops)}))
PY
  stop_pid "$d2"
  stop_pid "$d1"
  for i in $(seq 1 "$rings"); do
    "$rf" remove "$(ring_name $tag-s$i)" >/dev/null 2>&1
    "$rf" remove "$(ring_name $tag-m$i)" >/dev/null 2>&1
  done
  "$rf" remove "$(ring_name $tag-pad)" >/dev/null 2>&1
  return 0
}

for r in $(seq 1 "$rounds"); do
  round 1 "q1r$r"
  round 2 "q2r$r"
done
[[ -n $json ]] && cp "$results" "$json"
python3 - "$results" "$rings" "$rate" "$seconds" "$aligned" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{sys.argv[2]} rings, {sys.argv[3]} records/s each for {sys.argv[4]} s, memif, 64-byte records{', aligned' if sys.argv[5] == '1' else ''}")
print(f"{'queues':>6} {'round':>6} {'records/s':>12} {'exact':>6} {'src ns/rec':>10} {'mirror ns/rec':>13} {'handed':>9} {'drops':>6}")
for r in rows:
    print(f"{r['queues']:6} {r['round']:>6} {r['records_per_s']:12.0f} {str(r['exact']):>6} {r['source_ns_per_record']:10.1f} "
          f"{r['mirror_ns_per_record']:13.1f} {r['handed_across']:9} {r['mirror_port_drops']:6}")
for q in (1, 2):
    rs = [r['records_per_s'] for r in rows if r['queues'] == q]
    if rs: print(f"median records/s, {q} queue(s): {statistics.median(rs):.0f}")
one = [r['records_per_s'] for r in rows if r['queues'] == 1]; two = [r['records_per_s'] for r in rows if r['queues'] == 2]
if one and two: print(f"two queues / one: {statistics.median(two) / statistics.median(one):.2f}x")
PY
