#!/usr/bin/env bash
# scale_bench.sh — one daemon, many sessions: h1's `ringfire run` serves N
# small rings (one port, one worker), h2's mirrors all N (one port, one
# worker), every mirror dropping --loss per mille of its datagrams (seeded:
# NAKs and repairs on every session). Reported: each daemon's memory
# (VmRSS, RssAnon) and CPU idle (no publisher) and while N publishers write
# --count records each at --rate records/s; then every mirror is compared
# record by record with its source. Kernel backend.
# --one-source: h1 serves ONE ring to N mirrors (one serve, its conductor
# holding N connections): the mirrors in daemons of at most 500 sessions
# each (a port worker's limit is 512), on h2, h3, ...; one publisher
# writes --count records at --rate; every mirror compared with the source.
# --health DURATION: each mirror's HEALTH interval (default 100ms).
# Usage: perf/scale_bench.sh [--build DIR] [--sessions N] [--one-source]
#        [--health DURATION] [--count N] [--rate N] [--loss PERMILLE]
#        [--capacity N] [--json FILE]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
n=256
count=10000
rate=1000
loss=10
capacity=16384
json=
one=0
health=100ms
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --one-source) one=1; shift ;;
    --health) health=$2; shift 2 ;;
    --sessions) n=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --loss) loss=$2; shift 2 ;;
    --capacity) capacity=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--sessions N] [--one-source] [--health DURATION] [--count N] [--rate N] [--loss PERMILLE] [--capacity N] [--json FILE]" >&2; exit 2 ;;
  esac
done
((n >= 1 && n <= 1000)) || { echo "--sessions: between 1 and 1000" >&2; exit 2; }
rf=$build/cli/ringfire
hz=$(getconf CLK_TCK)
# ticks PID: its CPU time in clock ticks; mem PID: VmRSS and RssAnon; pct TICKS SECONDS: % of a core.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
mem() { awk '/^VmRSS|^RssAnon/ {printf "%s %.1f MiB  ", $1, $2 / 1024}' "/proc/$1/status"; }
pct() { awk -v t="$1" -v hz="$hz" -v s="$2" 'BEGIN {printf "%.1f", 100 * t / hz / s}'; }
if ((one)); then
  source "$top/tests/lab/lib.sh"
  per=500
  k=$(( (n + per - 1) / per ))  # mirroring daemons
  lab_up $((1 + k))
  lab_logs scale1
  conf="$logs/conf"
  mkdir -p "$conf"
  src=$(ring_name src)
  "$rf" create "$src" --capacity "$capacity" >/dev/null
  {
    echo "ctl = \"$conf/h1.sock\""
    echo "quiet = true"
    printf '[[port]]\nname = "eth0"\niface = "eth0"\n'
    printf '[[serve]]\nname = "s"\nring = "%s"\nlisten = "198.18.0.1:10000"\nmulticast = "239.255.4.1:20000"\nfrom = "oldest"\nmax-connections = %d\n' \
      "$src" $((n + 16))
  } >"$conf/h1.toml"
  for d in $(seq 1 "$k"); do
    {
      echo "ctl = \"$conf/h$((d + 1)).sock\""
      echo "quiet = true"
      printf '[[port]]\nname = "eth0"\niface = "eth0"\n'
      for i in $(seq $(( (d - 1) * per + 1 )) $(( d * per < n ? d * per : n ))); do
        printf '[[mirror]]\nname = "m%d"\nsource = "198.18.0.1:10000"\nring = "%s"\nfrom = "oldest"\nloss = %d\nseed = %d\nhealth-interval = "%s"\n' \
          "$i" "$(ring_name m$i)" "$loss" "$i" "$health"
      done
    } >"$conf/h$((d + 1)).toml"
  done
  bg 1 "$logs/h1" taskset -c 0 "$rf" run "$conf/h1.toml"
  p1=${LAB_PIDS[-1]}
  wait_for 30 grep -q "^run: 1 ports, 1 sessions" "$logs/h1" || { echo "h1's daemon did not start: $(tail -n 5 "$logs/h1")"; lab_down 1; }
  mpids=()
  for d in $(seq 1 "$k"); do
    bg $((d + 1)) "$logs/h$((d + 1))" taskset -c 1 "$rf" run "$conf/h$((d + 1)).toml"
    mpids+=("${LAB_PIDS[-1]}")
  done
  # count JQ: the sum over the mirroring daemons of a python expression over each session e.
  count_of() {
    local d total=0 c
    for d in $(seq 1 "$k"); do
      c=$(on $((d + 1)) "$rf" ctl "$conf/h$((d + 1)).sock" list 2>/dev/null | python3 -c "
import json, sys
print(sum(int(bool($1)) for e in json.load(sys.stdin)['sessions']))" 2>/dev/null)
      total=$((total + ${c:-0}))
    done
    echo "$total"
  }
  start=$(date +%s.%N)
  streaming() { [[ $(count_of "e.get('state') == 'streaming'") == "$n" ]]; }
  wait_for 120 streaming || { echo "not every mirror streams: $(count_of "e.get('state') == 'streaming'") of $n"; lab_down 1; }
  echo "$n mirrors of one serve streaming after $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s"
  mirrors_seen=$(on 1 "$rf" ctl "$conf/h1.sock" list | python3 -c "
import json, sys
print([e for e in json.load(sys.stdin)['sessions'] if e.get('kind') == 'serve'][0]['mirrors'])")
  echo "the serve counts $mirrors_seen mirrors"
  sleep 2
  a=$(ticks "$p1")
  sleep 10
  idle1=$(pct $(( $(ticks "$p1") - a )) 10)
  echo "idle: the serving daemon (one conductor, $n connections, HEALTH every $health each) $idle1 % of a core ($(mem "$p1"))"
  mticks() { local t=0 p; for p in "${mpids[@]}"; do t=$((t + $(ticks "$p"))); done; echo "$t"; }
  a=$(ticks "$p1"); b=$(mticks)
  t0=$(date +%s.%N)
  on 1 "$rf" publish "$src" --count "$count" --rate "$rate" --quiet >/dev/null 2>&1
  reached() { [[ $(count_of "e.get('next_seq', 0) >= $count") == "$n" ]]; }
  wait_for 120 reached || echo "not every mirror reached $count: $(count_of "e.get('next_seq', 0) >= $count") of $n"
  secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN {printf "%.2f", e - s}')
  load1=$(pct $(( $(ticks "$p1") - a )) "$secs"); load2=$(pct $(( $(mticks) - b )) "$secs")
  echo "load: $count records at $rate/s to $n mirrors over $secs s: the serving daemon $load1 % of a core ($(mem "$p1")), the $k mirroring daemons $load2 % (all on cpu 1)"
  exact=0
  for i in $(seq 1 "$n"); do
    if "$rf" compare "$src" "$(ring_name m$i)" --exact >/dev/null 2>&1; then exact=$((exact + 1)); fi
  done
  naks=$(on 1 "$rf" ctl "$conf/h1.sock" list | python3 -c "
import json, sys
print([e for e in json.load(sys.stdin)['sessions'] if e.get('kind') == 'serve'][0]['naks'])")
  echo "exact copies: $exact of $n; the serve answered $naks NAKs"
  if [[ -n $json ]]; then
    echo "{\"one_source\": true, \"mirrors\": $n, \"count\": $count, \"rate\": $rate, \"loss_permille\": $loss, \"idle_pct\": $idle1, \"load_pct\": [$load1, $load2], \"exact\": $exact, \"naks\": $naks}" >"$json"
  fi
  stop_since 0
  ((exact == n))
  lab_down $?
fi
source "$top/tests/lab/lib.sh"
lab_up 2
lab_logs scale
conf="$logs/conf"
mkdir -p "$conf"

{
  echo "ctl = \"$conf/h1.sock\""
  echo "quiet = true"
  printf '[[port]]\nname = "eth0"\niface = "eth0"\n'
  for i in $(seq 1 "$n"); do
    "$rf" create "$(ring_name s$i)" --capacity "$capacity" >/dev/null
    printf '[[serve]]\nname = "s%d"\nring = "%s"\nlisten = "198.18.0.1:%d"\nmulticast = "239.255.%d.%d:%d"\nfrom = "oldest"\n' \
      "$i" "$(ring_name s$i)" $((10000 + i)) $((4 + i / 256)) $((i % 256)) $((20000 + i))
  done
} >"$conf/h1.toml"
{
  echo "ctl = \"$conf/h2.sock\""
  echo "quiet = true"
  printf '[[port]]\nname = "eth0"\niface = "eth0"\n'
  for i in $(seq 1 "$n"); do
    printf '[[mirror]]\nname = "m%d"\nsource = "198.18.0.1:%d"\nring = "%s"\nfrom = "oldest"\nloss = %d\nseed = %d\n' \
      "$i" $((10000 + i)) "$(ring_name m$i)" "$loss" "$i"
  done
} >"$conf/h2.toml"

bg 1 "$logs/h1" taskset -c 0 "$rf" run "$conf/h1.toml"
p1=${LAB_PIDS[-1]}
wait_for 30 grep -q "^run: 1 ports, $n sessions" "$logs/h1" || { echo "h1's daemon did not start: $(tail -n 5 "$logs/h1")"; lab_down 1; }
bg 2 "$logs/h2" taskset -c 1 "$rf" run "$conf/h2.toml"
p2=${LAB_PIDS[-1]}
wait_for 30 grep -q "^run: 1 ports, $n sessions" "$logs/h2" || { echo "h2's daemon did not start: $(tail -n 5 "$logs/h2")"; lab_down 1; }
streaming() {
  [[ $(on 2 "$rf" ctl "$conf/h2.sock" list 2>/dev/null | python3 -c "
import json, sys
print(sum(e.get('state') == 'streaming' for e in json.load(sys.stdin)['sessions']))") == "$n" ]]
}
start=$(date +%s.%N)
wait_for 60 streaming || { echo "not every mirror streams: $(on 2 "$rf" ctl "$conf/h2.sock" list | head -c 600)"; lab_down 1; }
echo "$n mirrors streaming after $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s"


sleep 2
a=$(ticks "$p1"); b=$(ticks "$p2")
sleep 10
idle1=$(pct $(( $(ticks "$p1") - a )) 10); idle2=$(pct $(( $(ticks "$p2") - b )) 10)
echo "idle: serving daemon $idle1 % of a core ($(mem "$p1")), mirroring daemon $idle2 % ($(mem "$p2"))"

a=$(ticks "$p1"); b=$(ticks "$p2")
t0=$(date +%s.%N)
pubs=()
for i in $(seq 1 "$n"); do
  on 1 "$rf" publish "$(ring_name s$i)" --count "$count" --rate "$rate" --quiet >/dev/null 2>&1 &
  pubs+=($!)
done
wait "${pubs[@]}"
mirrored() {
  [[ $(on 2 "$rf" ctl "$conf/h2.sock" list 2>/dev/null | python3 -c "
import json, sys
print(sum(e.get('next_seq', 0) >= $count for e in json.load(sys.stdin)['sessions']))") == "$n" ]]
}
wait_for 60 mirrored || echo "not every mirror reached $count"
secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN {printf "%.2f", e - s}')
load1=$(pct $(( $(ticks "$p1") - a )) "$secs"); load2=$(pct $(( $(ticks "$p2") - b )) "$secs")
echo "load: $n x $count records at $rate/s each over $secs s: serving daemon $load1 % of a core ($(mem "$p1")), mirroring daemon $load2 % ($(mem "$p2"))"

exact=0
for i in $(seq 1 "$n"); do
  if "$rf" compare "$(ring_name s$i)" "$(ring_name m$i)" --exact >/dev/null 2>&1; then exact=$((exact + 1)); fi
done
stats=$(on 2 "$rf" ctl "$conf/h2.sock" list | python3 -c "
import json, sys
s = json.load(sys.stdin)['sessions']
print(sum(e.get('naks', 0) for e in s), sum(e.get('fault_dropped', 0) for e in s), sum(e.get('gap_records', 0) for e in s))")
read -r naks dropped gaps <<<"$stats"
echo "exact copies: $exact of $n; the mirrors dropped $dropped datagrams (fault), sent $naks NAKs, took $gaps GAP records"
if [[ -n $json ]]; then
  echo "{\"sessions\": $n, \"count\": $count, \"rate\": $rate, \"loss_permille\": $loss, \"idle_pct\": [$idle1, $idle2], \"load_pct\": [$load1, $load2], \"exact\": $exact, \"naks\": $naks, \"fault_dropped\": $dropped, \"gap_records\": $gaps}" >"$json"
fi
stop_since 0
((exact == n))
lab_down $?
