#!/usr/bin/env bash
# metrics_lab_test.sh — the daemons' /metrics scraped by a real Prometheus
# (Debian's): a source on h1 and two mirrors on h2 and h3 (`ringfire run`
# with `metrics = ...`, and h3 the `ringfire mirror` shorthand with --metrics); 20000 records published; then Prometheus' own
# query API must return the series with the values the daemons hold
# (records served and mirrored, lag 0, the active path, every target up),
# the exposition passes `promtool check metrics`, and strangers (another
# path, junk, a request that never ends or is too large, a crowd) get
# 404/400/413 or are cut by their bound while scrapes go on. The same
# Prometheus evaluates deploy/prometheus/ringfire-alerts.yml: nothing fires
# on the healthy lab, a stranger's datagrams fire the rejected alert.
# Usage: metrics_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
command -v prometheus >/dev/null && command -v promtool >/dev/null ||
  lab_skip "no prometheus/promtool (apt-get install prometheus)"
lab_up 3
lab_logs metrics
fails=0
src=$(ring_name src)
"$rf" create "$src" --capacity 65536 >/dev/null
printf 'ctl = "%s/h1.sock"\nquiet = true\nmetrics = "198.18.0.1:9464"\n[[port]]\nname = "eth0"\niface = "eth0"\n[[serve]]\nname = "md"\nring = "%s"\nlisten = "198.18.0.1:7400"\nmulticast = "239.255.6.1:7401"\nfrom = "oldest"\n' \
  "$logs" "$src" >"$logs/h1.toml"
printf 'ctl = "%s/h2.sock"\nquiet = true\nmetrics = "198.18.0.2:9464"\n[[port]]\nname = "eth0"\niface = "eth0"\n[[mirror]]\nname = "md"\nsource = "198.18.0.1:7400"\nring = "%s"\nfrom = "oldest"\n' \
  "$logs" "$(ring_name m2)" >"$logs/h2.toml"
for h in 1 2; do
  bg $h "$logs/h$h" "$rf" run "$logs/h$h.toml"
  wait_for 10 grep -q "^run: metrics on http://198.18.0.$h:9464/metrics" "$logs/h$h" || fail "h$h: no metrics line: $(tail -n 3 "$logs/h$h")"
done
# h3: the one-session shorthand, with --metrics.
bg 3 "$logs/h3" "$rf" mirror 198.18.0.1:7400 "$(ring_name m3)" --from oldest --quiet --metrics 198.18.0.3:9464
wait_for 10 grep -q "^mirror: metrics on http://198.18.0.3:9464/metrics" "$logs/h3" || fail "h3: no metrics line: $(tail -n 3 "$logs/h3")"
# get HOST URL: the body of an HTTP GET from inside HOST.
get() { on "$1" python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" "$2"; }
mirrored() { get "$1" "http://198.18.0.$1:9464/metrics" | grep -q "^ringfire_mirror_records_total{.*} 20000$"; }
for h in 2 3; do wait_for 10 get $h "http://198.18.0.$h:9464/metrics" >/dev/null || fail "h$h's /metrics does not answer"; done
on 1 "$rf" publish "$src" --count 20000 --rate 100k --quiet >/dev/null
for h in 2 3; do wait_for 20 mirrored $h || fail "h$h did not reach 20000: $(get $h "http://198.18.0.$h:9464/metrics" | grep records_total)"; done

# The exposition, as promtool reads it.
for h in 1 2; do
  get $h "http://198.18.0.$h:9464/metrics" >"$logs/exposition-h$h"
  out=$(promtool check metrics <"$logs/exposition-h$h" 2>&1) || fail "promtool check metrics (h$h): $out"
done
grep -q '^ringfire_serve_records_total{session="md",ring="/dev/shm/'"$src"'"} 20000$' "$logs/exposition-h1" ||
  fail "h1's serve records: $(grep serve_records "$logs/exposition-h1")"
# A session added by ctl shows at the very next scrape (the body, shared
# for 100 ms, is built again): a scrape, the add, and a scrape at once.
"$rf" create "$(ring_name added)" --capacity 1024 >/dev/null
printf '[[serve]]\nname = "added"\nring = "%s"\nlisten = "198.18.0.1:7410"\n' "$(ring_name added)" >"$logs/added.toml"
added=$(on 1 python3 -c "
import subprocess, sys, urllib.request
scrape = lambda: urllib.request.urlopen('http://198.18.0.1:9464/metrics', timeout=5).read().decode()
scrape()
subprocess.run([sys.argv[1], 'ctl', sys.argv[2], 'add', sys.argv[3]], check=True, stdout=subprocess.DEVNULL)
print(scrape())" "$rf" "$logs/h1.sock" "$logs/added.toml" |
  grep -c '^ringfire_serve_records_total{session="added"')
[[ $added == 1 ]] || fail "a session added by ctl is not in the next scrape"
on 1 "$rf" ctl "$logs/h1.sock" remove added >/dev/null || fail "ctl remove added"
# A stranger: another path, and not HTTP at all.
code=$(on 2 python3 -c "
import urllib.request, urllib.error
try: urllib.request.urlopen('http://198.18.0.1:9464/other', timeout=5); print(200)
except urllib.error.HTTPError as e: print(e.code)")
[[ $code == 404 ]] || fail "GET /other: $code, want 404"
junk=$(on 2 python3 -c "
import socket; s = socket.create_connection(('198.18.0.1', 9464), 5); s.sendall(b'\x00\xffjunk\r\n\r\n'); print(s.recv(100).split(b' ')[1].decode())")
[[ $junk == 400 ]] || fail "junk: $junk, want 400"
# A hand-typed request (bare LF, as from nc) is answered, not cut at its deadline.
bare=$(on 2 python3 -c "
import socket; s = socket.create_connection(('198.18.0.1', 9464), 5); s.settimeout(4)
s.sendall(b'GET /metrics HTTP/1.0\\n\\n'); print(s.recv(100).split(b' ')[1].decode())" 2>&1)
[[ $bare == 200 ]] || fail "a bare-LF request: $bare, want 200 (cut at the deadline unanswered before)"
# Strangers who never finish, send too much, or crowd in: each is cut by
# its bound, and a scrape meanwhile is answered.
stranger=$(on 2 python3 -c "
import socket, time, urllib.request
slow = socket.create_connection(('198.18.0.1', 9464), 5)
slow.sendall(b'GET /metr')                       # never finishes its request
big = socket.create_connection(('198.18.0.1', 9464), 5)
big.sendall(b'GET /' + b'x' * 9000)              # past the 8 KiB bound
big_code = big.recv(100).split(b' ')[1].decode()
crowd = [socket.create_connection(('198.18.0.1', 9464), 5) for _ in range(20)]
import select
def gone(c):
    try:
        return c.recv(1) == b''
    except OSError:  # reset
        return True
# Past the 16-client cap a connection is closed at once; the admitted ones
# wait for the 2 s deadline. select() returns on the first close, so collect
# the closed ones over 1.2 s (well before the deadline) rather than one call.
closed_set, deadline = set(), time.time() + 1.2
while time.time() < deadline and len(closed_set) < 4:
    readable, _, _ = select.select([c for c in crowd if c not in closed_set], [], [], 0.1)
    closed_set.update(c for c in readable if gone(c))
closed = len(closed_set)
for c in crowd: c.close()
time.sleep(0.3)  # the server sees the crowd gone on its next turns
ok = b'ringfire_serve_records_total' in urllib.request.urlopen('http://198.18.0.1:9464/metrics', timeout=5).read()
slow.settimeout(4)
t = time.time(); cut = slow.recv(100) == b''; waited = time.time() - t
print(big_code, closed >= 4, ok, cut and waited < 3.5)" 2>&1)
[[ $stranger == "413 True True True" ]] || fail "strangers at /metrics (413, cap, served meanwhile, slow cut): $stranger"
# One address holding 20 connections that never send a request takes 4
# places of the 16: a scrape from elsewhere is answered while it holds them.
bg 2 "$logs/holder" python3 -c "
import socket, time
held = [socket.create_connection(('198.18.0.1', 9464), 5) for _ in range(20)]
time.sleep(1.5)"
sleep 0.5
code=$(on 3 curl -s -o /dev/null -w '%{http_code}' --max-time 1.5 http://198.18.0.1:9464/metrics)
[[ $code == 200 ]] || fail "a scrape while one address held 20 idle connections: HTTP $code, want 200"
wait "${LAB_PIDS[-1]}"

# A real Prometheus, in h1, scraping the three every second.
# It loads deploy/prometheus/ringfire-alerts.yml, evaluated every second
# and with each alert's `for` made 0s (a lab cannot wait minutes).
sed -E 's/^( *)for: .*/\1for: 0s/' "$(dirname "$0")/../../deploy/prometheus/ringfire-alerts.yml" >"$logs/alerts.yml"
cat >"$logs/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: ['$logs/alerts.yml']
scrape_configs:
  - job_name: ringfire
    static_configs:
      - targets: ['198.18.0.1:9464', '198.18.0.2:9464', '198.18.0.3:9464']
YML
bg 1 "$logs/prometheus" prometheus --config.file="$logs/prometheus.yml" --storage.tsdb.path="$logs/tsdb" \
  --web.listen-address=127.0.0.1:19090
# query EXPR: Prometheus' answer, as "labels=value" lines.
query() {
  on 1 python3 -c "
import json, sys, urllib.parse, urllib.request
u = 'http://127.0.0.1:19090/api/v1/query?query=' + urllib.parse.quote(sys.argv[1])
r = json.load(urllib.request.urlopen(u, timeout=5))
for s in r['data']['result']:
    m = s['metric']
    print(','.join(k + '=' + m[k] for k in sorted(m) if k not in ('__name__', 'job')) + '=' + s['value'][1])
" "$1" 2>/dev/null
}
ups() { [[ $(query 'sum(up{job="ringfire"})') == "=3" ]]; }
wait_for 30 ups || fail "Prometheus does not see three targets up: $(query 'up') $(tail -n 3 "$logs/prometheus")"
wait_for 10 [ "$(query 'count(ringfire_mirror_records_total == 20000)')" == "=2" ] ||
  fail "Prometheus: mirror records: $(query ringfire_mirror_records_total)"
[[ $(query 'ringfire_serve_records_total') == *"=20000" ]] || fail "Prometheus: serve records: $(query ringfire_serve_records_total)"
[[ $(query 'max(ringfire_mirror_lag_records)') == "=0" ]] || fail "Prometheus: lag: $(query ringfire_mirror_lag_records)"
[[ $(query 'count(ringfire_port_info{path="kernel"})') == "=3" ]] || fail "Prometheus: port paths: $(query ringfire_port_info)"
[[ $(query 'sum(ringfire_mirror_streaming)') == "=2" ]] || fail "Prometheus: streaming: $(query ringfire_mirror_streaming)"
# A multicast serve and LAN mirrors need no key: each session says so (0), none warns.
[[ $(query 'count(ringfire_session_unkeyed == 0)') == "=3" ]] || fail "Prometheus: unkeyed: $(query ringfire_session_unkeyed)"
[[ $(query 'sum(ringfire_mirror_rejected_total)') == "=0" ]] || fail "Prometheus: rejections: $(query ringfire_mirror_rejected_total)"
check_copy "$src" "$(ring_name m2)" 20000
check_copy "$src" "$(ring_name m3)" 20000

# The alerting rules over these live daemons: all three healthy, nothing
# fires; datagrams from a stranger on the group raise the rejected alert
# for each mirror, by reason, and nothing else.
# The rules were evaluated (an empty ALERTS before that proves nothing),
# over the series they read.
evaluated() {
  on 1 python3 -c "
import json, urllib.request
g = json.load(urllib.request.urlopen('http://127.0.0.1:19090/api/v1/rules', timeout=5))['data']['groups']
assert len(g) == 1 and len(g[0]['rules']) >= 17 and all(r['health'] == 'ok' for r in g[0]['rules'])
assert not g[0]['lastEvaluation'].startswith('0001')" 2>/dev/null
}
wait_for 10 evaluated || fail "Prometheus did not evaluate the alerting rules: $(tail -n 3 "$logs/prometheus")"
sleep 2  # two more evaluations over the scrapes after the records flowed
[[ $(query 'count(ALERTS)') == "" ]] || fail "alerts on a healthy lab: $(query ALERTS)"
[[ $(query 'count(up{job="ringfire"} == 1) and count(ringfire_mirror_streaming == 1) and count(ringfire_serve_slow_mirrors == 0)') != "" ]] ||
  fail "Prometheus has no live series to alert on: $(query up) $(query ringfire_serve_slow_mirrors)"
on 3 python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton('198.18.0.3'))
for _ in range(5): s.sendto(b'not the source' * 4, ('239.255.6.1', 7401))"
rejected() {
  [[ $(query 'ALERTS{alertname="RingfireRejectedDatagrams",alertstate="firing"}') == *"instance=198.18.0.2:9464,reason=wrong_sender,session=md,severity=ticket=1"* ]]
}
wait_for 15 rejected || fail "no RingfireRejectedDatagrams for h2 after a stranger's datagrams: $(query ALERTS) / $(query ringfire_mirror_rejected_total)"
[[ $(query 'count(ALERTS{alertname!="RingfireRejectedDatagrams"})') == "" ]] || fail "other alerts fired: $(query ALERTS)"
lab_finish metrics_lab_test "$logs/h1" "$logs/h2" "$logs/prometheus"
