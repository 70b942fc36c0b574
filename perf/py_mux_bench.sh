#!/usr/bin/env bash
# py_mux_bench.sh — the mux from Python against what inference servers use
# today (one ZeroMQ socket, one msgpack message per decode step), in the
# namespace lab, every figure from one run: the frontend (consumer) on h1
# pinned to CPU 0, the engine (producer) on h2 pinned to CPU 1, the same
# streams, tokens, step rate and checks each time; only the path changes
# (perf/py_mux_bench.py says what each side does).
#
#   perf/py_mux_bench.sh [--streams "300 4096"] [--tokens T] [--rate STEPS] [--out DIR]
#   perf/py_mux_bench.sh --stall 1      one client that stops reading, beside the others
#   perf/py_mux_bench.sh --cancel 10    ten requests cancelled after 10 tokens
#   perf/py_mux_bench.sh --paths "zmq mux mux-single"  mux-single: the mux with one
#                                         send and one receive per datagram (no UDP GSO/GRO)
#   perf/py_mux_bench.sh --loop uvloop   both frontends on uvloop (python3-uvloop) instead of asyncio's own loop
#   perf/py_mux_bench.sh --link-mtu 9000  the lab's links at 9000 bytes (jumbo frames, as
#                                         inference clusters run): the mux's datagrams 8972
# Results: DIR/py.json (one object per run) and a table on stdout.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build-test}
py=/usr/bin/python3  # Debian's: the module is built for it
streams="300 4096" tokens=200 rate=50 out=perf/figures/py stall=0 cancel=0 paths="zmq mux" link_mtu=1500 loop=asyncio
while (($#)); do
  case $1 in
    --streams) streams=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --stall) stall=$2; shift 2 ;;
    --cancel) cancel=$2; shift 2 ;;
    --paths) paths=$2; shift 2 ;;
    --link-mtu) link_mtu=$2; shift 2 ;;
    --loop) loop=$2; shift 2 ;;
    *) echo "usage: $0 [--streams \"N...\"] [--tokens T] [--rate STEPS] [--stall K] [--cancel K] [--paths \"zmq mux\"] [--link-mtu BYTES] [--loop asyncio|uvloop] [--out DIR]" >&2; exit 2 ;;
  esac
done
[[ -f $build/python/ringfire/__init__.py ]] || { echo "py_mux_bench: no ringfire module in $build/python (build first)" >&2; exit 2; }
$py -c "import zmq, msgpack" 2>/dev/null || { echo "py_mux_bench: needs python3-zmq and python3-msgpack (deploy/setup.sh)" >&2; exit 2; }
source "$top/tests/lab/lib.sh"
lab_up 2
lab_logs pybench
if [[ $link_mtu != 1500 ]]; then
  for i in 1 2; do
    ip -n "${LAB_PREFIX}br" link set "${LAB_PREFIX}p$i" mtu "$link_mtu"
    on "$i" ip link set eth0 mtu "$link_mtu"
  done
fi
mtu=$((link_mtu - 28))  # the largest UDP payload on the link
mkdir -p "$out"
results=$out/py.json
: >"$results"
export PYTHONPATH=$build/python

# one PATH STREAMS: a consumer on h1, then a producer on h2; both reports into the results.
one() {
  local path=$1 x=$2 port=$((7600 + RANDOM % 100)) extra=()
  if [[ $path == mux-single ]]; then extra=(--no-udp-runs); path=mux; fi
  local label=$1
  rm -f "$logs/h"
  bg 1 "$logs/$label-$x.c" taskset -c 0 $py "$top/perf/py_mux_bench.py" --role consumer --path "$path" --listen "198.18.0.1:$port" \
    --streams "$x" --tokens "$tokens" --handles "$logs/h" --stall "$stall" --cancel "$cancel" --mtu "$mtu" --loop "$loop" "${extra[@]}"
  local cpid=${LAB_PIDS[-1]}
  wait_for 30 test -s "$logs/h" || { echo "$label: no handles: $(cat "$logs/$label-$x.c")"; return; }
  on 2 taskset -c 1 $py "$top/perf/py_mux_bench.py" --role producer --path "$path" --listen 198.18.0.2:0 \
    --peer "198.18.0.1:$port" --tokens "$tokens" --rate "$rate" --handles "$logs/h" --mtu "$mtu" "${extra[@]}" >"$logs/$label-$x.p" 2>&1
  wait "$cpid"
  $py - "$label" "$x" "$logs/$label-$x.c" "$logs/$label-$x.p" >>"$results" <<'PY'
import json, sys
path, x, c, p = sys.argv[1:]
def last(f):
    lines = [l for l in open(f) if l.startswith('{')]
    return json.loads(lines[-1]) if lines else {"error": open(f).read()[-400:]}
print(json.dumps({"path": path, "streams": int(x), "consumer": last(c), "producer": last(p)}))
PY
}

for x in $streams; do
  for path in $paths; do one "$path" "$x"; done
done

$py - "$results" "$tokens" "$rate" "$stall" "$cancel" "$loop" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"tokens {sys.argv[2]} a stream, {sys.argv[3]} decode steps/s; stalled clients {sys.argv[4]}, cancelled {sys.argv[5]}; loop {sys.argv[6]}")
print(f"{'X':>5} {'path':10} {'ok':3} {'tokens':>8} {'cpu ns/tok c':>12} {'p':>7} {'p50 us':>8} {'p99 us':>8} {'rss MiB c':>9} {'stalled held':>12} {'stopped at':>10}")
by = {}
for r in rows:
    c, p = r["consumer"], r["producer"]
    if "error" in c or "error" in p:
        print(f"{r['streams']:5} {r['path']:10} failed: {(c.get('error') or p.get('error', '')).strip()[-200:]}")
        continue
    by[(r["streams"], r["path"])] = (c, p)
    stop = p.get("stopped_at") or []
    print(f"{r['streams']:5} {r['path']:10} {'yes' if c['ok'] else 'NO':3} {c['tokens']:8} {c['cpu_ns_per_token']:12.0f} {p['cpu_ns_per_token']:7.0f} "
          f"{c['latency_us']['p50']:8.0f} {c['latency_us']['p99']:8.0f} {c['peak_rss_kib']/1024:9.1f} {c.get('stalled_held', 0):12} "
          f"{(max(stop) if stop else '-') if r['path'].startswith('mux') else 'never':>10}")
def ratios(x, a, b, label):
    """one line: path a's figures over path b's, at x streams."""
    if (x, a) not in by or (x, b) not in by:
        return
    (bc, bp), (ac, ap) = by[(x, b)], by[(x, a)]
    r = lambda u, v: u / v if v else float("nan")
    print(f"{x:5} {label}: consumer cpu {r(ac['cpu_ns_per_token'], bc['cpu_ns_per_token']):.2f}x, producer cpu "
          f"{r(ap['cpu_ns_per_token'], bp['cpu_ns_per_token']):.2f}x, p50 {r(ac['latency_us']['p50'], bc['latency_us']['p50']):.2f}x, "
          f"p99 {r(ac['latency_us']['p99'], bc['latency_us']['p99']):.2f}x")
for x in sorted({k[0] for k in by}):
    ratios(x, "mux", "zmq", "mux / zmq")
    ratios(x, "mux", "mux-single", "mux / mux-single (UDP runs on / off)")
PY
