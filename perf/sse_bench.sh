#!/usr/bin/env bash
# sse_bench.sh — the SSE frontend (python3 -m ringfire.frontend, h1) fed by
# a decode loop (python3 -m ringfire.engine_sim, h2) with N concurrent
# streaming HTTP clients (aiohttp, tests/lab/sse_clients.py, h3), every
# token checked; the same frontend over the mux and over the per-stream
# path (--no-mux), one run each, the same clients, rate and tokens.
# Reports tokens/s and per-token latency (the engine's send to the
# client's read), and the frontend's and engine's CPU per token.
#
#   perf/sse_bench.sh [--clients 1000] [--tokens 60] [--rate 20] [--out DIR]
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build-test}
py=/usr/bin/python3
clients=1000 tokens=60 rate=20 out=perf/figures/sse
while (($#)); do
  case $1 in
    --clients) clients=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--clients N] [--tokens T] [--rate STEPS] [--out DIR]" >&2; exit 2 ;;
  esac
done
[[ -f $build/python/ringfire/__init__.py ]] || { echo "sse_bench: no ringfire package in $build/python (build first)" >&2; exit 2; }
source "$top/tests/lab/lib.sh"
lab_up 3
lab_logs ssebench
mkdir -p "$out"
results=$out/sse.json
: >"$results"
export PYTHONPATH=$build/python

# cpu_ms PID: the process's CPU so far (user + system), in ms.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000 / hz}' "/proc/$1/stat"; }

one() {
  local name=$1 mode=$2 n0=${#LAB_PIDS[@]}
  bg 2 "$logs/$name.engine" taskset -c 1 $py -m ringfire.engine_sim --control 198.18.0.2:7600 --http 198.18.0.2:8100 --rate "$rate" $mode
  local epid=${LAB_PIDS[-1]}
  bg 1 "$logs/$name.frontend" taskset -c 0 $py -m ringfire.frontend --control 198.18.0.1:7600 --http 198.18.0.1:8000 \
    --engine http://198.18.0.2:8100 $mode
  local fpid=${LAB_PIDS[-1]}
  wait_for 20 on 3 curl -s -o /dev/null http://198.18.0.2:8100/stats || echo "$name: no engine"
  wait_for 20 on 3 curl -s -o /dev/null http://198.18.0.1:8000/stats || echo "$name: no frontend"
  # `ip netns exec` and taskset exec the program: the PIDs are the Python processes'.
  local fcpu0 ecpu0
  fcpu0=$(cpu_ms "$fpid")
  ecpu0=$(cpu_ms "$epid")
  on 3 $py "$top/tests/lab/sse_clients.py" http://198.18.0.1:8000/v1/completions --requests "$clients" --tokens "$tokens" \
    --timeout 300 >"$logs/$name.clients" 2>&1
  local fcpu1 ecpu1
  fcpu1=$(cpu_ms "$fpid")
  ecpu1=$(cpu_ms "$epid")
  on 3 curl -s http://198.18.0.1:8000/stats >"$logs/$name.fstats"
  $py - "$name" "$logs/$name.clients" "$logs/$name.fstats" "$fcpu0" "$fcpu1" "$ecpu0" "$ecpu1" >>"$results" <<'PY'
import json, sys
name, c, f, f0, f1, e0, e1 = sys.argv[1:]
lines = [l for l in open(c) if l.startswith("{")]
r = json.loads(lines[-1]) if lines else {"error": open(c).read()[-300:]}
fs = json.load(open(f))
tok = max(1, r.get("tokens", 0))
r.update(run=name, frontend_cpu_ns_per_token=(float(f1) - float(f0)) * 1e6 / tok,
         engine_cpu_ns_per_token=(float(e1) - float(e0)) * 1e6 / tok,
         per_stream=fs["node"]["per_stream_in"])
print(json.dumps(r))
PY
  stop_since "$n0"
}

one mux ""
one per-stream --no-mux

$py - "$results" "$clients" "$tokens" "$rate" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{sys.argv[2]} concurrent clients, {sys.argv[3]} tokens each, {sys.argv[4]} decode steps/s")
print(f"{'run':11} {'whole':>6} {'bad':>4} {'tokens/s':>9} {'p50 us':>8} {'p99 us':>8} {'frontend cpu ns/tok':>19} {'engine':>7}")
by = {}
for r in rows:
    if "error" in r:
        print(f"{r['run']:11} failed: {r['error'][-200:]}"); continue
    by[r["run"]] = r
    print(f"{r['run']:11} {r['completed']:6} {r['bad']:4} {r['tokens_per_s']:9.0f} {r['latency_us']['p50']:8.0f} {r['latency_us']['p99']:8.0f} "
          f"{r['frontend_cpu_ns_per_token']:19.0f} {r['engine_cpu_ns_per_token']:7.0f}")
if "mux" in by and "per-stream" in by:
    m, p = by["mux"], by["per-stream"]
    print(f"mux / per-stream: tokens/s {m['tokens_per_s'] / p['tokens_per_s']:.2f}x, p99 {m['latency_us']['p99'] / p['latency_us']['p99']:.2f}x, "
          f"frontend cpu {m['frontend_cpu_ns_per_token'] / p['frontend_cpu_ns_per_token']:.2f}x, "
          f"engine cpu {m['engine_cpu_ns_per_token'] / p['engine_cpu_ns_per_token']:.2f}x")
PY
