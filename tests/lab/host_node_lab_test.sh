#!/usr/bin/env bash
# host_node_lab_test.sh — one engine per host: a `ringfire run` config with
# a [[mirror]] and a [[node]] on the same port, run by one process on h1
# (`ringfire mux-consume --config`, the consumer on the config's node while
# its thread is the daemon's conductor). h2 serves a ring and runs a
# standalone producer. While both stream:
#   - the one process mirrors the ring (every record, byte for byte) and
#     consumes 40 streams (every token in order, each finished once);
#   - `ringfire ctl list` shows the node (its peer, its records) and the
#     node's channel as a session of the same engine, owned by the node;
#     `ctl remove` of that channel is refused, and changes nothing;
#   - /metrics has both the mirror's and the node's families (node="tokens");
#   - `ringfire top` shows the node beside the mirror;
# then config errors in a [[node]] name the file, the line and the key.
# Usage: host_node_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
lab_up 2
lab_logs host-node
src=$(ring_name src)
dst=$(ring_name dst)
"$rf" create "$src" --capacity 65536 >/dev/null

bg 2 "$logs/serve" "$rf" serve "$src" --listen 198.18.0.2:7400 --multicast 239.255.3.1:7401 --iface eth0 --from oldest
wait_for 10 grep -q "^serve: " "$logs/serve" || fail "no serve: $(cat "$logs/serve")"
cat >"$logs/h1.toml" <<EOF
ctl = "$logs/h1.sock"
metrics = "198.18.0.1:9471"
quiet = true
[[port]]
name = "eth0"
iface = "eth0"
[[mirror]]
name = "md"
source = "198.18.0.2:7400"
ring = "$dst"
from = "oldest"
[[node]]
name = "tokens"
listen = "198.18.0.1:7600"
flush = "manual"
EOF
"$rf" run "$logs/h1.toml" --check >"$logs/check" 2>&1 || fail "--check: $(cat "$logs/check")"
grep -q "1 ports, 1 sessions, 1 node: ok" "$logs/check" || fail "--check: $(cat "$logs/check")"

log "one process on h1: the mirror and the token consumer on one engine"
bg 1 "$logs/c" "$rf" mux-consume 198.18.0.1:7600 "$logs/handles" --streams 40 --tokens 600 --json --timeout 60 \
  --config "$logs/h1.toml"
cpid=${LAB_PIDS[-1]}
wait_for 20 test -s "$logs/handles" || fail "no handles: $(cat "$logs/c")"
grep -q "^run: node tokens on 198.18.0.1:7600, channels on port eth0" "$logs/c" || fail "no node line: $(head "$logs/c")"
bg 2 "$logs/p" "$rf" mux-produce 198.18.0.2:7600 198.18.0.1:7600 "$logs/handles" --tokens 600 --rate 50 --json
on 2 "$rf" publish "$src" --count 20000 --rate 10k --quiet >/dev/null &
pub=$!
wait_for 10 grep -q "streams attached" "$logs/p" || fail "the producer did not attach: $(cat "$logs/p")"
sleep 1.5  # early in its 12 s of steps: the checks below find both sides streaming

# ctl_json EXPR: a Python expression over `ctl list` (j: the answer, s: sessions by name, n: nodes by name).
ctl_json() {
  on 1 "$rf" ctl "$logs/h1.sock" list 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin); s = {e['name']: e for e in j['sessions']}; n = {e['name']: e for e in j.get('nodes', [])}
print($1)"
}
[[ $(ctl_json "n['tokens']['peers_in']") == 1 ]] || fail "ctl: the node has no peer: $(ctl_json "j.get('nodes')")"
[[ $(ctl_json "n['tokens']['records_in'] > 0") == True ]] || fail "ctl: the node's records do not move: $(ctl_json "n['tokens']")"
[[ $(ctl_json "s['md']['state']") == streaming ]] || fail "ctl: the mirror is not streaming: $(ctl_json "s.get('md')")"
channel=$(ctl_json "[k for k, e in s.items() if k.startswith('mux-in-')][0]")
[[ -n $channel && $(ctl_json "s['$channel']['kind']") == mirror ]] ||
  fail "ctl: the node's channel is not a session of the engine: $(ctl_json "list(s)")"
out=$(on 1 "$rf" ctl "$logs/h1.sock" remove "$channel" 2>&1)
[[ $out == *"is a channel of the stream mux node"* ]] || fail "ctl remove of the node's channel: $out"
[[ $(ctl_json "'$channel' in s") == True ]] || fail "ctl remove took the node's channel"

on 2 python3 -c "import urllib.request; print(urllib.request.urlopen('http://198.18.0.1:9471/metrics', timeout=5).read().decode(), end='')" \
  >"$logs/prom" 2>&1 || fail "no scrape: $(head -n 3 "$logs/prom")"
got=$(awk '$1 == "ringfire_mux_records_received_total{node=\"tokens\"}" {print $2}' "$logs/prom")
[[ -n $got ]] && ((got > 0)) || fail "/metrics: no moving ringfire_mux_records_received_total{node=\"tokens\"}: $(grep ringfire_mux_records "$logs/prom")"
grep -q '^ringfire_mirror_records_total{session="md"' "$logs/prom" || fail "/metrics: no mirror md: $(grep -c . "$logs/prom") lines"
if command -v promtool >/dev/null; then
  promtool check metrics <"$logs/prom" >"$logs/promtool" 2>&1 || fail "promtool: $(head -n 3 "$logs/promtool")"
fi
"$rf" top --once --interval 1200ms >"$logs/top" 2>&1
grep -Eq "^[0-9]+ +mux +198.18.0.1:7600 +node tokens kernel +[1-9][0-9]* " "$logs/top" ||
  fail "top shows no moving node: $(cat "$logs/top")"

wait "$pub"
wait "$cpid" || fail "the consumer failed: $(tail -n 3 "$logs/c")"
r=$(grep '^{' "$logs/c" | tail -n 1)
python3 - "$r" <<'PY' || fail "consumer: $r"
import json, sys
r = json.loads(sys.argv[1])
ok = r["tokens"] == 40 * 600 and r["finished"] == 40 and r["out_of_order"] == 0 and r["dropped"] == 0 and r["short_streams"] == 0
sys.exit(0 if ok else 1)
PY
check_copy "$src" "$dst" 20000
grep -q "^run: stopped" "$logs/c" || fail "the daemon did not stop when the consumer was done: $(tail -n 3 "$logs/c")"

log "config errors in a [[node]]"
# bad KEY VALUE WANT: a [[node]] whose KEY = VALUE (its line 6) is refused,
# the message naming the file, that line, the table, the key and WANT.
bad() {
  local listen='listen = "198.18.0.1:7600"'
  [[ $1 == listen ]] && listen='ttl_is_not_here = 0'  # (a line of its own, taken out below)
  printf '[[port]]\nname = "p"\n[[node]]\nname = "n"\n%s\n%s = %s\n' "$listen" "$1" "$2" | grep -v ttl_is_not_here \
    >"$logs/bad.toml"
  out=$("$rf" run "$logs/bad.toml" --check 2>&1) && fail "$1 = $2 was taken"
  local line=6
  [[ $1 == listen ]] && line=5
  [[ $out == *"bad.toml:$line: [[node]] n, key '$1'"*"$3"* ]] || fail "$1 = $2: $out"
}
bad credit 0 "an integer from 1"
bad flush '"sometimes"' "auto, manual or linger"
bad port '"q"' "no [[port]] named 'q'"
bad channel-records 1000 "a power of two"
bad listen '"0.0.0.0:7600"' "the address peers reach"
bad colour '"blue"' "unknown key"
# With --config the node is the config's: an option that would shape it here is refused, not ignored.
out=$("$rf" mux-consume 198.18.0.1:7600 "$logs/h2" --config "$logs/h1.toml" --credit 4 2>&1) && fail "--credit with --config was taken"
[[ $out == *"--credit with --config"*"set it there"* ]] || fail "--credit with --config: $out"

lab_finish host_node_lab_test "$logs/c" "$logs/p" "$logs/serve"
