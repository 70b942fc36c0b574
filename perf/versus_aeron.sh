#!/usr/bin/env bash
# versus_aeron.sh — ringfire and Aeron side by side in one command, on the
# same topology and pinning, alternating so that neither gets the quieter
# minute: round 1 runs ringfire then Aeron, round 2 Aeron then ringfire,
# and so on. ringfire: perf/mirror_bench.sh --harness engine,rate (the
# closed-loop round trip with one process per host and its pinger and
# echo beside it, and the one-way zero-loss rate, bisected to 5 %); Aeron:
# perf/aeron_bench.sh (cping/cpong closed loop, streaming_publisher to
# rate_subscriber). Prints every round and the medians, each ringfire
# figure as a ratio to Aeron's of the same round; JSON in --out.
# Aeron is not in Debian: --aeron names a directory of its C media driver
# and samples built outside this tree (perf/README.md says how).
# Usage: perf/versus_aeron.sh --aeron DIR [--backend kernel,af_xdp,memif]
#          [--rounds N] [--build DIR] [--out DIR] [--messages N] [--pace-us US]   (root)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
aeron= backends=kernel,af_xdp,memif rounds=2 build=$top/build-test out= messages=200000 pace=()
while (($#)); do
  case $1 in
    --aeron) aeron=$2; shift 2 ;;
    --backend) backends=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --messages) messages=$2; shift 2 ;;
    --pace-us) pace=(--pace-us "$2"); shift 2 ;;
    *) echo "usage: $0 --aeron DIR [--backend kernel,af_xdp,memif] [--rounds N] [--build DIR] [--out DIR] [--messages N] [--pace-us US]" >&2; exit 2 ;;
  esac
done
[[ -n $aeron ]] || { echo "versus_aeron: --aeron DIR is required (Aeron's C binaries)" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "versus_aeron: --rounds takes a count, not '$rounds'" >&2; exit 2; }
out=${out:-$(mktemp -d /tmp/rf-versus.XXXXXX)}
mkdir -p "$out"

run_ringfire() {
  bash "$top/perf/mirror_bench.sh" --backend "$backends" --harness engine,rate --ping-rate closed \
    --build "$build" --out "$1/ringfire" "${pace[@]}" > "$1/ringfire.log" 2>&1 ||
    { echo "versus_aeron: ringfire's harnesses failed: $(tail -n 3 "$1/ringfire.log")" >&2; exit 1; }
  grep -E "^rate .*highest|pingpong" "$1/ringfire.log" | head -n 12
}
run_aeron() {
  bash "$top/perf/aeron_bench.sh" --aeron "$aeron" --messages "$messages" --json "$1/aeron.json" > "$1/aeron.log" 2>&1 ||
    { echo "versus_aeron: Aeron's harness failed: $(tail -n 3 "$1/aeron.log")" >&2; exit 1; }
  grep "^aeron" "$1/aeron.log"
}

for ((i = 1; i <= rounds; i++)); do
  d=$out/round$i
  mkdir -p "$d"
  if ((i % 2)); then order=(ringfire aeron); else order=(aeron ringfire); fi
  echo "== round $i: ${order[0]} first"
  for who in "${order[@]}"; do "run_$who" "$d"; done
done

python3 - "$out" "$rounds" "$backends" <<'PY'
import json, os, statistics, sys
out, rounds, backends = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
rows = ["| round | Aeron round trip p50 | Aeron one way | " +
        " | ".join(f"{b}: round trip p50 (÷ Aeron) | {b}: one way zero loss (÷ Aeron)" for b in backends) + " |",
        "| --- | ---: | ---: | " + " | ".join("---: | ---:" for _ in backends) + " |"]
med = {"a_rt": [], "a_rate": []}
for i in range(1, rounds + 1):
    d = os.path.join(out, f"round{i}")
    a = load(os.path.join(d, "aeron.json"))
    if not a or not a.get("round_trip_p50_us") or not a.get("one_way_msgs_per_s"):
        print(f"round {i}: Aeron's figures are missing or zero: no ratios for it", file=sys.stderr)
        continue
    a_rt, a_rate = a["round_trip_p50_us"], a["one_way_msgs_per_s"]
    med["a_rt"].append(a_rt)
    med["a_rate"].append(a_rate)
    cells = []
    for b in backends:
        pp = load(os.path.join(d, "ringfire", f"engine-pingpong-{b}.json")) or {}
        rt = pp.get("p50_ns", 0) / 1000.0
        rate = (load(os.path.join(d, "ringfire", f"rate-{b}.json")) or {}).get("highest_zero_loss_rate", 0)
        med.setdefault(b + "rt", []).append(rt / a_rt if rt else None)
        med.setdefault(b + "rate", []).append(rate / a_rate if rate else None)
        cells.append(f"{rt:.1f} µs ({rt / a_rt:.2f}×)" if rt else "–")
        cells.append(f"{rate:,} ({rate / a_rate:.2f}×)" if rate else "–")
    rows.append(f"| {i} | {a_rt:.1f} µs | {a_rate:,.0f} | " + " | ".join(cells) + " |")
def m(v):
    v = [x for x in v if x]
    return statistics.median(v) if v else None
cells = []
for b in backends:
    for k in ("rt", "rate"):
        x = m(med.get(b + k, []))
        cells.append(f"{x:.2f}×" if x else "–")
if med["a_rt"]:
    rows.append(f"| median | {m(med['a_rt']):.1f} µs | {m(med['a_rate']):,.0f} | " + " | ".join(cells) + " |")
text = "\n".join(rows)
open(os.path.join(out, "versus.md"), "w").write(text + "\n")
print(text)
PY
echo "versus_aeron: results in $out"
