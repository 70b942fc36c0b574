#!/usr/bin/env bash
# demo.sh — the main job on a fresh machine (root): installs packages,
# builds, then starts a four-host lab (network namespaces on a bridge) with
# a source ring on h1 served over UDP multicast and unicast, a multicast
# mirror on h2, a unicast mirror on h3 with 5 % of its datagrams dropped on
# purpose, a kernel-bypass multicast mirror on h4 (DPDK, net_af_xdp with
# ringfire's XDP program; the kernel keeps the control TCP), and a local
# reader on h1. Publishes for a few seconds, shows the
# live stats, then proves every mirror holds the source's records byte for
# byte. Then the stream multiplexer: 300 token streams checked end to end,
# and an OpenAI-style SSE frontend (python3 -m ringfire.frontend) on h1
# fed by a decode loop on h2, answering `curl -N` from h3. Removes
# namespaces, rings and processes on every exit path.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

bash deploy/setup.sh
if [[ ! -d build ]]; then meson setup build >/dev/null; fi
# The command and the Python package (build/python: PYTHONPATH=build/python).
ninja -C build cli/ringfire "python/ringfire/_ringfire$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" >/dev/null
rf=$top/build/cli/ringfire

set +e
source tests/lab/lib.sh
lab_up 4
lab_logs demo
echo "== lab: h1 198.18.0.1 (source), h2 .2, h3 .3, h4 .4 (DPDK), one bridge"

src=$(ring_name md)
"$rf" create "$src" --capacity 262144 --slot-size 64 --schema 0x51
bg 1 "$logs/serve" "$rf" serve "$src" --listen 198.18.0.1:7400 --multicast 239.255.0.1:7401 \
  --udp 7402 --iface eth0
wait_for 5 grep -q "^serve: " "$logs/serve"
m2=$(ring_name md-h2)
m3=$(ring_name md-h3)
bg 2 "$logs/m2" "$rf" mirror 198.18.0.1:7400 "$m2" --schema 0x51
bg 3 "$logs/m3" "$rf" mirror 198.18.0.1:7400 "$m3" --unicast --loss 50 --seed 7
m4=$(ring_name md-h4)
bg 4 "$logs/m4" "$rf" mirror 198.18.0.1:7400 "$m4" --schema 0x51 --backend dpdk --pmd af_xdp --iface eth0
wait_for 5 grep -q "^mirror: 198" "$logs/m2"
wait_for 5 grep -q "^mirror: 198" "$logs/m3"
wait_for 10 grep -q "^mirror: 198" "$logs/m4" || { echo "the DPDK mirror did not start:"; grep -v TELEMETRY "$logs/m4"; }
bg 1 "$logs/local" "$rf" tail "$src" --name strategy --idle-exit 1s --quiet
local_reader=${LAB_PIDS[-1]}
head -n 1 "$logs/serve"
head -n 1 "$logs/m2"
head -n 1 "$logs/m3"
grep "^mirror: 198" "$logs/m4"

echo "== publishing 100,000 records/s for 4 s on h1"
on 1 "$rf" publish "$src" --rate 100k --duration 4s --quiet &
pub=$!
sleep 2.5
echo "-- live, once a second (source, multicast mirror, unicast mirror with 5% loss, DPDK mirror):"
tail -n 1 "$logs/serve"
tail -n 1 "$logs/m2"
tail -n 1 "$logs/m3"
tail -n 1 "$logs/m4"
echo "-- the mirror ring on h3, as its readers see it:"
"$rf" stat "$m3" | sed -n '1,2p;6,7p'
echo "-- every session on this host, as \`ringfire top\` shows it live (here: one view):"
"$rf" top --once --interval 1200ms  # over one publish of every process (they publish once a second)
wait "$pub"
wait "$local_reader"
sleep 0.5

echo "== verification"
for m in "$m2" "$m3" "$m4"; do
  "$rf" tail "$m" --from oldest --idle-exit 300ms --quiet
  "$rf" compare "$src" "$m" --exact
done
echo "-- the local reader on h1:"
cat "$logs/local"
echo "-- h3's repair work:"
tail -n 1 "$logs/m3"
echo "== the stream multiplexer: 300 token streams from a producer node on h2 to anchors on h1"
rm -f "$logs/handles"
on 1 "$rf" mux-consume 198.18.0.1:7600 "$logs/handles" --streams 300 --tokens 100 --json >"$logs/mux-c" 2>&1 &
consumer=$!
wait_for 10 test -s "$logs/handles"
on 2 "$rf" mux-produce 198.18.0.2:7600 198.18.0.1:7600 "$logs/handles" --tokens 100 --rate 50 --json >"$logs/mux-p" 2>&1
wait "$consumer" || echo "demo: the mux check failed: $(tail -n 2 "$logs/mux-c")"
grep '^{' "$logs/mux-c" | tail -n 1 >"$logs/mux.json"
python3 - "$logs/mux.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
print(f"-- {c['tokens']} tokens, every stream in order and finished: {c['finished']}/{c['streams']}; "
      f"{c['records_per_batch']:.0f} tokens per batch; per-token latency p50 {c['latency_us']['p50']:.0f} us, "
      f"p99 {c['latency_us']['p99']:.0f} us at 50 decode steps/s")
PY

echo "== an SSE token server: python3 -m ringfire.frontend on h1, fed over the mux by a decode loop on h2"
export PYTHONPATH=$top/build/python
bg 2 "$logs/engine" /usr/bin/python3 -m ringfire.engine_sim --control 198.18.0.2:7610 --http 198.18.0.2:8100 --rate 20
bg 1 "$logs/frontend" /usr/bin/python3 -m ringfire.frontend --control 198.18.0.1:7610 --http 198.18.0.1:8000 \
  --engine http://198.18.0.2:8100
wait_for 20 on 3 curl -s -o /dev/null http://198.18.0.2:8100/stats || echo "demo: the engine did not start: $(tail -n 3 "$logs/engine")"
wait_for 20 on 3 curl -s -o /dev/null http://198.18.0.1:8000/stats || echo "demo: the frontend did not start: $(tail -n 3 "$logs/frontend")"
echo "-- from h3: curl -N -X POST http://198.18.0.1:8000/v1/completions -d '{\"prompt\": \"hi\", \"max_tokens\": 6, \"stream\": true}'"
on 3 curl -sN -X POST http://198.18.0.1:8000/v1/completions -d '{"prompt": "hi", "max_tokens": 6, "stream": true}' | grep -v '^$'

echo "== done: every mirror holds every record under its source sequence, byte for byte."
echo "   Live: \`ringfire top\` (every session on the host); a daemon's Prometheus endpoint:"
echo "   \`metrics = \"ADDR:PORT\"\` in a \`ringfire run\` config (deploy/configs/source.toml), or --metrics on serve/mirror."
