#!/usr/bin/env bash
# mux_bench.sh — the stream multiplexer against the per-stream TCP path, in
# the namespace lab, every figure from one run: `ringfire mux-consume` on
# h1 (CPU 0), `ringfire mux-produce` on h2 (CPU 1), the same streams, tokens
# and token size each time; only the path changes.
#
#   perf/mux_bench.sh [--streams N] [--tokens T] [--flat-tokens T] [--rate STEPS] [--size B] [--out DIR]
#   perf/mux_bench.sh --sweep "1 8 64 256 1024 4096" [--tokens T] [--rate STEPS] [--size B]
#   perf/mux_bench.sh --frontends "1 2 4" --sweep "64 256"   (Y frontends, unpinned)
# --extra "OPTS": given to every mux-consume and mux-produce (e.g. "--idle spin");
# --memif-at "X...": the sweep's X values with a memif run too (default 64).
# --mux-extra "OPTS": to the mux runs only (e.g. "--idle yield": the data
# plane's workers on dedicated cores; the per-stream path has none in use).
#
# --sweep: X streams to one frontend for each X, paced (the issue's V5
# sweep at Y = 1): per-stream vs mux (kernel), plus mux on memif when
# built with DPDK; records per flush (the batching ratio: tokens written
# per flush_batch), CPU per token (the producer's also by thread: its
# decode loop, the node's conductor, the data-plane worker), peak RSS and
# fds, latency and TTFT; and the pacing floor (perf/pace_floor: the paced
# loop with nothing in it, its CPU a step over X).
#
# paced    --rate decode steps per second (default 50: a token per stream
#          every 20 ms, an LLM's decode rate): per-token latency p50/p99/p99.9,
#          time to first token, CPU per token on each side, records per batch.
# flat     no pacing: tokens per second until every stream finishes, from
#          the first send to the last arrival. --flat-tokens a stream
#          (default 2,000): at 200 the mux's flat run is ~20 ms, most of it
#          its first lap (each process's first touch of its heap and batch
#          buffers), not the rate a server streaming for hours sees.
# Paths: per-stream (--no-mux, kernel TCP, one connection per stream), mux
# on the kernel backend, mux on DPDK net_memif (when built with DPDK).
# Results: DIR/mux.json (one object per run) and a table on stdout.
set -u
rf=${RF:-build/cli/ringfire}
pace_floor=$(dirname "$(dirname "$rf")")/perf/pace_floor  # beside the binary, in its build
streams=300 tokens=200 flat_tokens=2000 rate=50 size=16 out=perf/figures/mux sweep="" frontends="" extra="" mux_extra="" memif_at="64"
while (($#)); do
  case $1 in
    --streams) streams=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --flat-tokens) flat_tokens=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --sweep) sweep=$2; shift 2 ;;
    --frontends) frontends=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    --mux-extra) mux_extra=$2; shift 2 ;;
    --memif-at) memif_at=$2; shift 2 ;;
    *) echo "usage: $0 [--streams N | --sweep \"X...\"] [--tokens T] [--flat-tokens T] [--rate STEPS] [--size B] [--out DIR]" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/../tests/lab/lib.sh"
lab_up 5  # h2 produces; h1, h3, h4, h5 consume (the frontends)
lab_logs muxbench
mkdir -p "$out"
# One results file per mode, truncated only by its own mode.
results=$out/mux.json
[[ -n $sweep ]] && results=$out/sweep.json
[[ -n $frontends ]] && results=$out/frontends.json
: >"$results"

# one NAME MODE(paced|flat) CONSUMER_OPTS PRODUCER_OPTS [STREAMS]
one() {
  local name=$1 mode=$2 copts=$3 popts=$4 streams=${5:-$streams} pace="" tokens=$tokens
  [[ $mode == paced ]] && pace="--rate $rate"
  [[ $mode == flat ]] && tokens=$flat_tokens
  rm -f "$logs/h"
  eval "bg 1 \"\$logs/$name.$mode.c\" taskset -c 0 \"\$rf\" mux-consume 198.18.0.1:7600 \"\$logs/h\" --streams $streams --tokens $tokens --size $size --json --timeout 120 $copts $extra"
  local cpid=${LAB_PIDS[-1]}
  wait_for 20 test -s "$logs/h" || { echo "$name: no handles: $(cat "$logs/$name.$mode.c")"; return; }
  eval "on 2 taskset -c 1 \"\$rf\" mux-produce 198.18.0.2:7600 198.18.0.1:7600 \"\$logs/h\" --tokens $tokens --size $size --json $pace $popts $extra" >"$logs/$name.$mode.p" 2>&1
  wait "$cpid"
  python3 - "$name" "$mode" "$logs/$name.$mode.c" "$logs/$name.$mode.p" "$streams" >>"$results" <<'PY'
import json, sys
name, mode, c, p, x = sys.argv[1:]
def last(f):
    lines = [l for l in open(f) if l.startswith('{')]
    return json.loads(lines[-1]) if lines else {"error": open(f).read()[-300:]}
print(json.dumps({"run": name, "mode": mode, "streams": int(x), "consumer": last(c), "producer": last(p)}))
PY
}

sock="$logs/memif.sock"
eal() { echo "-l $1 --no-huge -m 256 --no-pci --no-shconf --file-prefix ${LAB_PREFIX}$2$RANDOM --vdev net_memif0,role=$2,socket=$sock,socket-abstract=no"; }
# many NAME X Y OPTS: X streams from h2 to Y frontends (h1, h3, h4, h5), X/Y each, paced.
many() {
  local name=$1 x=$2 y=$3 opts=$4 hosts=(1 3 4 5) pairs=() cpids=() i
  for ((i = 0; i < y; i++)); do
    local h=${hosts[$i]}
    rm -f "$logs/h$h"
    eval "bg $h \"\$logs/$name.c$h\" \"\$rf\" mux-consume 198.18.0.$h:7600 \"\$logs/h$h\" --streams $((x / y)) --tokens $tokens --size $size --json --timeout 120 $opts $extra"
    cpids+=("${LAB_PIDS[-1]}")
    pairs+=("198.18.0.$h:7600" "$logs/h$h")
  done
  for ((i = 0; i < y; i++)); do wait_for 20 test -s "$logs/h${hosts[$i]}" || echo "$name: no handles on h${hosts[$i]}"; done
  eval "on 2 \"\$rf\" mux-produce 198.18.0.2:7600 ${pairs[*]} --tokens $tokens --size $size --json --rate $rate $opts $extra" >"$logs/$name.p" 2>&1
  for p in "${cpids[@]}"; do wait "$p"; done
  python3 - "$name" "$x" "$y" "$logs/$name.p" "${hosts[@]:0:$y}" >>"$results" <<'PY'
import json, sys
name, x, y, p, *hosts = sys.argv[1:]
log = sys.argv[4].rsplit("/", 1)[0]
def last(f):
    lines = [l for l in open(f) if l.startswith('{')]
    return json.loads(lines[-1]) if lines else {"error": open(f).read()[-300:]}
print(json.dumps({"run": name, "streams": int(x), "frontends": int(y), "producer": last(p),
                  "consumers": [last(f"{log}/{name}.c{h}") for h in hosts]}))
PY
}

if [[ -n $frontends ]]; then
  for y in $frontends; do
    for x in ${sweep:-64 256}; do
      many "per-stream" "$x" "$y" "--no-mux"
      many "mux-kernel" "$x" "$y" "$mux_extra"
    done
  done
  python3 - "$results" <<'PY'
import json, sys
print(f"{'Y':>2} {'X':>5} {'run':11} {'tokens':>7} {'rec/flush':>9} {'p50 us':>8} {'p99 us':>8} {'cpu ns/tok p':>12} {'fds p':>6} {'rss MiB p':>9}")
for l in open(sys.argv[1]):
    r = json.loads(l); p = r["producer"]; cs = r["consumers"]
    if "error" in p or any("error" in c for c in cs):
        print(f"{r['frontends']:2} {r['streams']:5} {r['run']:11} failed"); continue
    tokens = sum(c["tokens"] for c in cs)
    p50 = max(c["latency_us"]["p50"] for c in cs); p99 = max(c["latency_us"]["p99"] for c in cs)
    print(f"{r['frontends']:2} {r['streams']:5} {r['run']:11} {tokens:7} {p['records_per_flush']:9.1f} {p50:8.0f} {p99:8.0f} "
          f"{p['cpu_ns_per_token']:12.0f} {p['fds']:6} {p['peak_rss_kib']/1024:9.1f}")
PY
  exit 0
fi

if [[ -n $sweep ]]; then
  for x in $sweep; do
    one "per-stream" paced "--no-mux" "--no-mux" "$x"
    one "mux-kernel" paced "" "" "$x"
    if have_dpdk && [[ " $memif_at " == *" $x "* ]]; then
      one "mux-memif" paced "--backend dpdk --dpdk-ip 198.18.1.1 --eal '$(eal 0 server)'" "--backend dpdk --dpdk-ip 198.18.1.2 --eal '$(eal 1 client)'" "$x"
    fi
    # The pacing floor: the same paced loop with nothing in it, on the
    # producer's host and CPU (perf/pace_floor.cc) — under every path's
    # producer CPU per token at this X.
    floor=$(on 2 taskset -c 1 "$pace_floor" --rate "$rate" --steps "$tokens" 2>/dev/null)
    [[ $floor == "{"*"}" ]] || floor=null  # not built here (RF from a build without benchmarks)
    echo "{\"run\": \"pace-floor\", \"mode\": \"paced\", \"streams\": $x, \"floor\": $floor}" >>"$results"
  done
  python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'X':>5} {'run':11} {'tokens':>8} {'rec/flush':>9} {'p50 us':>8} {'p99 us':>8} {'ttft p50':>8} {'cpu ns/tok p':>12} {'c':>7} {'rss MiB p':>9} {'c':>6} {'fds p':>6} {'c':>6}  p by thread: loop/node/worker")
for r in rows:
    if r["run"] == "pace-floor":  # the paced loop alone: its CPU a step over X tokens
        f = f"{r['floor']['cpu_ns_per_step'] / r['streams']:12.0f}" if r["floor"] else f"{'–':>12}"
        print(f"{r['streams']:5} {'pace-floor':11} {'':8} {'':9} {'':8} {'':8} {'':8} {f}")
        continue
    c, p = r["consumer"], r["producer"]
    if "error" in c or "error" in p:
        print(f"{r['streams']:5} {r['run']:11} failed: {(p.get('error') or c.get('error','')).strip()[-120:]}")
        continue
    print(f"{r['streams']:5} {r['run']:11} {c['tokens']:8} {p['records_per_flush']:9.1f} {c['latency_us']['p50']:8.0f} {c['latency_us']['p99']:8.0f} "
          f"{c['ttft_us']['p50']:8.0f} {p['cpu_ns_per_token']:12.0f} {c['cpu_ns_per_token']:7.0f} {p['peak_rss_kib']/1024:9.1f} {c['peak_rss_kib']/1024:6.1f} {p['fds']:6} {c['fds']:6}  "
          + "/".join(f"{p.get('cpu_ns_per_token_by_thread', {}).get(t, 0):.0f}" for t in ("ringfire", "rf-node", "rf-worker")))
PY
  exit 0
fi
for mode in paced flat; do
  one "per-stream" $mode "--no-mux" "--no-mux"
  one "mux-kernel" $mode "" ""
  if have_dpdk; then
    one "mux-memif" $mode "--backend dpdk --dpdk-ip 198.18.1.1 --eal '$(eal 0 server)'" "--backend dpdk --dpdk-ip 198.18.1.2 --eal '$(eal 1 client)'"
  fi
done

python3 - "$results" "$streams" "$tokens" "$rate" "$flat_tokens" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"streams {sys.argv[2]}; paced: {sys.argv[3]} tokens each, {sys.argv[4]} decode steps/s; flat: {sys.argv[5]} tokens each")
print(f"{'run':12} {'mode':6} {'tokens':>7} {'tok/s':>10} {'p50 us':>9} {'p99 us':>9} {'p99.9':>9} {'ttft p50':>9} {'cpu ns/tok c':>12} {'c 1st':>7} {'p':>8} {'rec/batch':>9}")
for r in rows:
    c, p = r["consumer"], r["producer"]
    # c 1st: the consumer's CPU from its first token (its attaches and channel set-up left out)
    print(f"{r['run']:12} {r['mode']:6} {c['tokens']:7} {c['tokens_per_s']:10.0f} {c['latency_us']['p50']:9.1f} {c['latency_us']['p99']:9.1f} "
          f"{c['latency_us']['p999']:9.1f} {c['ttft_us']['p50']:9.1f} {c['cpu_ns_per_token']:12.0f} {c.get('cpu_from_first_token_ns_per_token', 0):7.0f} "
          f"{p['cpu_ns_per_token']:8.0f} {c['records_per_batch']:9.1f}")
PY
