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
#   perf/py_mux_bench.sh --paths "zmq mux mux-memif"  mux-memif: the mux's channels on DPDK
#                                         net_memif (control on the kernel; ZeroMQ has no such path)
#   perf/py_mux_bench.sh --frontends "1 2 4"  one engine feeding Y frontend processes (all on
#                                         CPU 0, the streams split among them): sockets and CPU per token
#   perf/py_mux_bench.sh --loop uvloop   both frontends on uvloop (python3-uvloop) instead of asyncio's own loop
#   perf/py_mux_bench.sh --link-mtu 9000  the lab's links at 9000 bytes (jumbo frames, as
#                                         inference clusters run): the mux's datagrams 8972
# Results: DIR/py.json (one object per run) and a table on stdout.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build-test}
py=/usr/bin/python3  # Debian's: the module is built for it
streams="300 4096" tokens=200 rate=50 out=perf/figures/py stall=0 cancel=0 paths="zmq mux" link_mtu=1500 loop=asyncio frontends=1
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
    --frontends) frontends=$2; shift 2 ;;
    *) echo "usage: $0 [--streams \"N...\"] [--tokens T] [--rate STEPS] [--stall K] [--cancel K] [--paths \"zmq mux\"] [--link-mtu BYTES] [--loop asyncio|uvloop] [--frontends \"Y...\"] [--out DIR]" >&2; exit 2 ;;
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

# one PATH STREAMS Y: Y consumers (frontends) on h1, the streams split among
# them, then a producer (the engine) on h2 feeding them all; the reports
# into the results.
one() {
  local label=$1 x=$2 y=$3 path=$1 port=$((7600 + RANDOM % 50 * 8)) extra=() cextra=() pextra=()
  if [[ $path == mux-single ]]; then extra=(--no-udp-runs); path=mux; fi
  if [[ $path == mux-memif ]]; then
    have_memif || { echo "$label: this build has no DPDK (skipped)"; return; }
    ((y == 1)) || { echo "$label: one frontend only (a memif pair)"; return; }
    local sock="$logs/memif.sock"
    rm -f "$sock"
    cextra=(--dpdk-eal "$(eal 0 server "$sock")" --dpdk-ip 198.18.1.1)
    pextra=(--dpdk-eal "$(eal 1 client "$sock")" --dpdk-ip 198.18.1.2)
    path=mux
  fi
  local peers=() files=() cpids=() f
  for ((f = 0; f < y; f++)); do
    rm -f "$logs/h.$f"
    bg 1 "$logs/$label-$x-$y.c$f" taskset -c 0 $py "$top/perf/py_mux_bench.py" --role consumer --path "$path" \
      --listen "198.18.0.1:$((port + f))" --streams "$((x / y))" --tokens "$tokens" --handles "$logs/h.$f" \
      --stall "$stall" --cancel "$cancel" --mtu "$mtu" --loop "$loop" "${extra[@]}" "${cextra[@]}"
    cpids+=("${LAB_PIDS[-1]}")
    peers+=("198.18.0.1:$((port + f))")
    files+=("$logs/h.$f")
  done
  for f in "${files[@]}"; do
    wait_for 30 test -s "$f" || { echo "$label: no handles: $(cat "$logs/$label-$x-$y".c* | tail -5)"; return; }
  done
  on 2 taskset -c 1 $py "$top/perf/py_mux_bench.py" --role producer --path "$path" --listen 198.18.0.2:0 \
    --peer "$(IFS=,; echo "${peers[*]}")" --tokens "$tokens" --rate "$rate" --handles "$(IFS=,; echo "${files[*]}")" \
    --mtu "$mtu" "${extra[@]}" "${pextra[@]}" >"$logs/$label-$x-$y.p" 2>&1
  wait "${cpids[@]}"
  $py - "$label" "$x" "$y" "$logs/$label-$x-$y.p" "$logs/$label-$x-$y".c* >>"$results" <<'PY'
import json, sys
path, x, y, p, cs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
def last(f):
    lines = [l for l in open(f) if l.startswith('{')]
    return json.loads(lines[-1]) if lines else {"error": open(f).read()[-400:]}
fronts = [last(c) for c in cs]
bad = [c for c in fronts if "error" in c]
if bad:
    merged = bad[0]
else:  # the frontends together: CPU per token over all their tokens; the worst one's latency
    tokens = sum(c["tokens"] for c in fronts)
    merged = dict(fronts[0])
    merged.update(tokens=tokens, ok=all(c["ok"] for c in fronts),
                  cpu_ns_per_token=sum(c["cpu_ns_per_token"] * c["tokens"] for c in fronts) / max(1, tokens),
                  latency_us={q: max(c["latency_us"][q] for c in fronts) for q in ("p50", "p99", "p999")},
                  peak_rss_kib=sum(c["peak_rss_kib"] for c in fronts),
                  stalled_held=sum(c.get("stalled_held", 0) for c in fronts))
print(json.dumps({"path": path, "streams": int(x), "frontends": int(y), "consumer": merged, "producer": last(p)}))
PY
}

# eal CORE ROLE SOCKET: a Python node's EAL arguments for one end of the memif pair.
eal() { echo "-l $1 --no-huge -m 256 --no-pci --no-shconf --file-prefix ${LAB_PREFIX}py$2$RANDOM --vdev net_memif0,role=$2,socket=$3,socket-abstract=no"; }
have_memif() { $py -c "import ringfire, sys; sys.exit(0 if ringfire.has_dpdk else 1)"; }

for x in $streams; do
  for y in $frontends; do
    for path in $paths; do one "$path" "$x" "$y"; done
  done
done

$py - "$results" "$tokens" "$rate" "$stall" "$cancel" "$loop" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"tokens {sys.argv[2]} a stream, {sys.argv[3]} decode steps/s; stalled clients {sys.argv[4]}, cancelled {sys.argv[5]}; loop {sys.argv[6]}")
print(f"{'X':>5} {'Y':>2} {'path':10} {'ok':3} {'tokens':>8} {'cpu ns/tok c':>12} {'p':>7} {'p50 us':>8} {'p99 us':>8} {'rss MiB c':>9} {'stalled held':>12} {'stopped at':>10} {'tcp/udp p':>9}")
by = {}
for r in rows:
    c, p = r["consumer"], r["producer"]
    y = r.get("frontends", 1)
    if "error" in c or "error" in p:
        print(f"{r['streams']:5} {y:2} {r['path']:10} failed: {(c.get('error') or p.get('error', '')).strip()[-200:]}")
        continue
    by[(r["streams"], y, r["path"])] = (c, p)
    stop = p.get("stopped_at") or []
    print(f"{r['streams']:5} {y:2} {r['path']:10} {'yes' if c['ok'] else 'NO':3} {c['tokens']:8} {c['cpu_ns_per_token']:12.0f} {p['cpu_ns_per_token']:7.0f} "
          f"{c['latency_us']['p50']:8.0f} {c['latency_us']['p99']:8.0f} {c['peak_rss_kib']/1024:9.1f} {c.get('stalled_held', 0):12} "
          f"{(max(stop) if stop else '-') if r['path'].startswith('mux') else 'never':>10} {str(p.get('tcp', '-')) + '/' + str(p.get('udp', '-')):>9}")
def ratios(x, y, a, b, label):
    """one line: path a's figures over path b's, at x streams and y frontends."""
    if (x, y, a) not in by or (x, y, b) not in by:
        return
    (bc, bp), (ac, ap) = by[(x, y, b)], by[(x, y, a)]
    r = lambda u, v: u / v if v else float("nan")
    print(f"{x:5} {y:2} {label}: consumer cpu {r(ac['cpu_ns_per_token'], bc['cpu_ns_per_token']):.2f}x, producer cpu "
          f"{r(ap['cpu_ns_per_token'], bp['cpu_ns_per_token']):.2f}x, p50 {r(ac['latency_us']['p50'], bc['latency_us']['p50']):.2f}x, "
          f"p99 {r(ac['latency_us']['p99'], bc['latency_us']['p99']):.2f}x")
print("by thread, CPU ns per token / times it ran per step (producer; consumer):")
for (x, y, path), (c, p) in sorted(by.items()):
    t = lambda d: ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(d.get("threads", {}).items(), key=lambda kv: -kv[1][0]))
    print(f"{x:5} {y:2} {path:10} {t(p)}; {t(c)}")
for x, y in sorted({k[:2] for k in by}):
    ratios(x, y, "mux", "zmq", "mux / zmq")
    ratios(x, y, "mux", "mux-single", "mux / mux-single (UDP runs on / off)")
    ratios(x, y, "mux-memif", "zmq", "mux on memif / zmq")
    ratios(x, y, "mux-memif", "mux", "mux on memif / mux on the kernel")
PY
