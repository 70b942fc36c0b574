#!/usr/bin/env bash
# chaos.sh — the mirroring chain under random failure for N minutes, then
# every ring verified. h1 serves a ring a publisher writes all along; h2
# mirrors it by multicast and serves its mirror again (a hub); h3 mirrors
# the source by unicast, h4 over TCP, and h4 mirrors the hub by unicast too.
# The UDP mirrors drop 5 % of what they receive. Every 1-3 s one thing goes
# wrong, at random (seeded): kill -9 of the source's serve, of a mirror, or
# of the hub, each restarted 0.2-2 s later; or a host's link down for
# 0.5-2 s. At the end the chaos stops, everything is up, the publisher
# stops, and every mirror must hold every record published, each verified
# (checksum, sequence) and byte for byte equal to the source's: the ring
# holds the whole run, so nothing may be lost to a GAP either. A recorder
# of the source ring (h1) is one of the roles killed -9 and restarted:
# its archive must hold every record published too, each once, no gap.
# Usage: perf/chaos.sh [--build DIR] [--minutes N] [--rate R] [--seed S] [--json FILE]   (root)
# Exit 0 only if every ring verified.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
minutes=5
rate=10000
seed=1
json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--minutes N] [--rate R] [--seed S] [--json FILE]" >&2; exit 2 ;;
  esac
done
source "$top/perf/lib.sh"
perf_ringfire chaos
lab_up 4
lab_logs chaos
RANDOM=$seed
seconds=$(awk -v m="$minutes" 'BEGIN {printf "%d", m * 60}')

# The ring holds the whole run (nothing laps, so nothing may gap).
want=$((rate * seconds * 5 / 4 + 100000))
capacity=1
while ((capacity < want)); do capacity=$((capacity * 2)); done
src=$(ring_name src)
"$rf" create "$src" --capacity "$capacity" --slot-size 64 >/dev/null

# Each role: the host it runs on and its command; started, killed and
# restarted by name. Mirrors ask for the oldest record: the first start
# gets everything (with "latest", a mirror that connects just after the
# publisher's first records would miss them), and a restart resumes where
# its ring ends (a mirror never asks again for what it holds).
declare -A host cmd pid starts kills
role() { host[$1]=$2; shift 2; local r=$1; shift; cmd[$r]="$*"; starts[$r]=0; kills[$r]=0; }
role serve 1 serve "$rf" serve "$src" --listen 198.18.0.1:7400 --multicast 239.255.0.1:7401 --udp 7402 --iface eth0 --quiet
role m2 2 m2 "$rf" mirror 198.18.0.1:7400 "$(ring_name m2)" --iface eth0 --from oldest --loss 50 --seed 2
role hub 2 hub "$rf" serve "$(ring_name m2)" --listen 198.18.0.2:7500 --udp 7502 --from oldest --quiet
role m3 3 m3 "$rf" mirror 198.18.0.1:7400 "$(ring_name m3)" --unicast --from oldest --loss 50 --seed 3
role mt 4 mt "$rf" mirror 198.18.0.1:7400 "$(ring_name mt)" --tcp --from oldest
role leaf 4 leaf "$rf" mirror 198.18.0.2:7500 "$(ring_name leaf)" --unicast --from oldest --loss 50 --seed 4
archive=$logs/archive
rm -rf "$archive"
role rec 1 rec "$rf" record "$src" --dir "$archive" --from oldest --segment-size 4Mi --linger 10ms
start() {
  local r=$1
  ip netns exec "$(host "${host[$r]}")" ${cmd[$r]} >>"$logs/$r" 2>&1 &
  pid[$r]=$!
  LAB_PIDS+=($!)
  starts[$r]=$((starts[$r] + 1))
}
kill9() {
  local r=$1
  kill -9 "${pid[$r]}" 2>/dev/null
  wait "${pid[$r]}" 2>/dev/null
  rm -f "/dev/shm/ringfire-${pid[$r]}.counters"  # what a killed process leaves
  kills[$r]=$((kills[$r] + 1))
}

start serve
wait_for 5 grep -q "^serve: " "$logs/serve" || { echo "chaos: serve did not start"; exit 1; }
start m2
wait_for 10 test -e "/dev/shm/$(ring_name m2)" || { echo "chaos: m2 did not start"; exit 1; }
for r in hub m3 mt rec; do start "$r"; done
sleep 1
start leaf
on 1 "$rf" publish "$src" --count $((rate * seconds)) --rate "$rate" --quiet >"$logs/publish" 2>&1 &
publisher=$!
LAB_PIDS+=($publisher)

declare -A flaps
roles=(serve m2 hub m3 mt leaf rec)
events=0
end=$((SECONDS + seconds))
echo "chaos: $minutes min, $rate records/s, seed $seed"
while ((SECONDS < end)); do
  sleep "$(awk -v r=$RANDOM 'BEGIN {printf "%.2f", 1 + 2 * r / 32767}')"
  ((SECONDS >= end)) && break
  events=$((events + 1))
  pause=$(awk -v r=$RANDOM 'BEGIN {printf "%.2f", 0.2 + 1.8 * r / 32767}')
  if ((RANDOM % 4 == 0)); then
    h=$((2 + RANDOM % 3))
    echo "chaos: $(date +%T) link of h$h down for ${pause}s"
    on "$h" ip link set eth0 down
    sleep "$pause"
    on "$h" ip link set eth0 up
    on "$h" ip route replace 224.0.0.0/4 dev eth0 2>/dev/null
    flaps[$h]=$((${flaps[$h]:-0} + 1))
  else
    r=${roles[$((RANDOM % ${#roles[@]}))]}
    echo "chaos: $(date +%T) kill -9 $r, back in ${pause}s"
    kill9 "$r"
    sleep "$pause"
    start "$r"
  fi
done
echo "chaos: done after $events events; letting the publisher finish"
wait "$publisher"
total=$("$rf" stat "$src" | awk '$1 == "write_seq" {print $2}')
ok=1
results=()
for r in m2 m3 mt leaf; do
  ring=$(ring_name "$r")
  # Every mirror catches up (the hub's leaf through the hub).
  for _ in $(seq 1 600); do
    at=$("$rf" stat "$ring" 2>/dev/null | awk '$1 == "write_seq" {print $2}')
    (( ${at:-0} >= total )) && break
    sleep 0.1
  done
  out=$("$rf" tail "$ring" --from oldest --idle-exit 300ms --quiet 2>&1)
  verified=$(echo "$out" | grep -Eo '^tail: [0-9]+' | awk '{print $2}')
  cmp=$("$rf" compare "$src" "$ring" --exact 2>&1); rc=$?
  status=ok
  if [[ $out != "tail: $total records verified, 0 lost, 0 holes skipped, 0 torn, 0 misplaced"* || $rc -ne 0 ]]; then
    status=FAILED
    ok=0
  fi
  echo "chaos: $r: ${verified:-0} of $total records verified, killed ${kills[$r]} times: $status"
  [[ $status == ok ]] || echo "chaos: $r: $out; $(echo "$cmp" | tr "\n" " ")"
  results+=("{\"mirror\": \"$r\", \"verified\": ${verified:-0}, \"published\": $total, \"kills\": ${kills[$r]}, \"ok\": $([[ $status == ok ]] && echo true || echo false)}")
done
# The recorder: its archive catches up, then holds every record, each
# once and whole, no gap (each kill -9 resumed at its last whole batch).
rec_out=""
for _ in $(seq 1 600); do
  rec_out=$("$rf" tail --archive "$archive" --idle-exit 100ms 2>&1)
  [[ $rec_out == "tail: $total records verified, 0 lost in 0 gaps"* ]] && break
  sleep 0.1
done
rec_status=ok
if [[ $rec_out != "tail: $total records verified, 0 lost in 0 gaps, 0 holes skipped, 0 torn, 0 misplaced, last seq $((total - 1))" ]]; then
  rec_status=FAILED
  ok=0
fi
echo "chaos: rec (the archive): $(echo "$rec_out" | head -n 1 | cut -c1-80), killed ${kills[rec]} times: $rec_status"
results+=("{\"recorder\": \"rec\", \"published\": $total, \"kills\": ${kills[rec]}, \"ok\": $([[ $rec_status == ok ]] && echo true || echo false)}")
echo "chaos: source killed ${kills[serve]} times, hub ${kills[hub]} times; link flaps h2 ${flaps[2]:-0}, h3 ${flaps[3]:-0}, h4 ${flaps[4]:-0}"
if [[ -n $json ]]; then
  printf '{"minutes": %s, "rate": %s, "seed": %s, "events": %s, "published": %s, "serve_kills": %s, "hub_kills": %s, "mirrors": [%s]}\n' \
    "$minutes" "$rate" "$seed" "$events" "$total" "${kills[serve]}" "${kills[hub]}" "$(IFS=,; echo "${results[*]}")" >"$json"
fi
if ((ok)); then
  echo "chaos: every ring is an exact copy"
  exit 0
fi
for r in "${roles[@]}"; do echo "== $r"; tail -n 3 "$logs/$r"; done
exit 1
