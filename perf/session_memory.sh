#!/usr/bin/env bash
# session_memory.sh — what a serve and a mirror session hold in memory,
# beyond the ring: a source on h1 and one mirror on h2 (multicast, unicast
# or TCP mode, kernel backend), a 262,144 x 64-B ring, the mirror dropping
# --loss per mille of its datagrams (seeded: NAKs, repairs, hold-back).
# Anonymous memory (RssAnon, /proc/PID/status) of each process idle, at its
# peak while --count records are published at --rate, and after; the
# serve's mappings of its ring (one expected). Each process carries one
# session, so what it holds beyond an idle process's is the session's.
# Usage: perf/session_memory.sh [--build DIR] [--modes multicast,unicast,tcp]
#        [--rate N] [--count N] [--loss PERMILLE] [--json FILE]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
modes=multicast,unicast,tcp
rate=1000000
count=5000000
loss=10
json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --loss) loss=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--modes LIST] [--rate N] [--count N] [--loss PERMILLE] [--json FILE]" >&2; exit 2 ;;
  esac
done
rf=$build/cli/ringfire
source "$top/tests/lab/lib.sh"
lab_up 2
lab_logs memory

anon_kib() { awk '/^RssAnon/ {print $2}' "/proc/$1/status"; }
ring_maps() { grep -cE -- "/$2(\.creating\.[0-9]+ \(deleted\))?\$" "/proc/$1/maps"; }

results=()
port=7400
for mode in ${modes//,/ }; do
  first=${#LAB_PIDS[@]}
  src=$(ring_name "src-$mode")
  "$rf" create "$src" --capacity 262144 >/dev/null
  bg 1 "$logs/serve-$mode" taskset -c 0 "$rf" serve --iface eth0 "$src" --listen "198.18.0.1:$port" \
    --multicast "239.255.0.1:$((port + 1))" --udp "$((port + 2))" --quiet
  sp=${LAB_PIDS[-1]}
  wait_for 5 grep -q "^serve: " "$logs/serve-$mode" || echo "serve did not start: $(cat "$logs/serve-$mode")"
  case $mode in
    multicast) how="--iface eth0" ;;
    unicast) how="--unicast" ;;
    tcp) how="--tcp" ;;
  esac
  bg 2 "$logs/m-$mode" taskset -c 1 "$rf" mirror $how "198.18.0.1:$port" "$(ring_name "m-$mode")" \
    --loss "$loss" --seed 7
  mp=${LAB_PIDS[-1]}
  wait_for 10 grep -q "^mirror: 198" "$logs/m-$mode" || echo "mirror did not connect: $(cat "$logs/m-$mode")"
  sleep 1
  s_idle=$(anon_kib "$sp"); m_idle=$(anon_kib "$mp")
  on 1 taskset -c 0 "$rf" publish "$src" --count "$count" --rate "$rate" --quiet >/dev/null &
  pub=$!
  s_peak=$s_idle; m_peak=$m_idle
  while kill -0 "$pub" 2>/dev/null; do
    a=$(anon_kib "$sp"); b=$(anon_kib "$mp")
    ((a > s_peak)) && s_peak=$a
    ((b > m_peak)) && m_peak=$b
    sleep 0.1
  done
  wait_for 10 grep -q "next seq $count," <(tail -n 1 "$logs/m-$mode") 2>/dev/null
  sleep 1.5
  s_after=$(anon_kib "$sp"); m_after=$(anon_kib "$mp")
  maps=$(ring_maps "$sp" "$src")
  last=$(tail -n 1 "$logs/m-$mode")
  echo "$mode mirror, ${loss}‰ loss, $count records at $rate/s: serve RssAnon idle/peak/after $s_idle/$s_peak/$s_after KiB (ring mapped $maps time(s)); mirror $m_idle/$m_peak/$m_after KiB"
  echo "  mirror: ${last#mirror: }"
  results+=("{\"mode\": \"$mode\", \"loss_permille\": $loss, \"rate\": $rate, \"count\": $count, \"serve_anon_kib\": [$s_idle, $s_peak, $s_after], \"serve_ring_maps\": $maps, \"mirror_anon_kib\": [$m_idle, $m_peak, $m_after]}")
  stop_since "$first"
  port=$((port + 10))
done
if [[ -n $json ]]; then
  (IFS=,; echo "[${results[*]}]") > "$json"
fi
