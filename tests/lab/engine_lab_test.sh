#!/usr/bin/env bash
# engine_lab_test.sh — `ringfire run`: many sessions per process and port.
#   1. one daemon serving 16 rings on one port (each its own group and TCP
#      port) to daemons on two hosts; one of those mirrors 8 rings from 3
#      sources; a fault injected into one session moves no other's counters;
#   2. sessions added and removed through `ringfire ctl` while another
#      streams at 100 k records/s: the other loses nothing;
#   3. config errors name the file, the line and the key, at start-up.
# With a DPDK build, 4. a hub on one net_af_xdp interface: one process
# mirrors a ring from h1 and serves it again to h3 through the same port;
# 5. the fallback ladder: each rung made to fail lands on the next, saying
# why; `require` makes falling past it a start-up error.
# Every mirror must be a byte-for-byte copy.
# Usage: engine_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
lab_up 6
lab_logs engine
conf="$logs/conf"
mkdir -p "$conf"

# mirrored HOST SOCKET NAME COUNT: the daemon's session NAME has COUNT records.
mirrored() { [[ $(ctl_json "$1" "$2" "s['$3'].get('next_seq', 0)") -ge $4 ]]; }

log "1. h1 serves 16 rings from one daemon, one port; h2 and h3 mirror them, h3 also from h4 and h5"
{
  echo "ctl = \"$conf/h1.sock\""
  echo "quiet = true"
  echo "[[port]]"
  echo "name = \"eth0\""
  echo "iface = \"eth0\""
  for i in $(seq 1 16); do
    "$rf" create "$(ring_name s$i)" --capacity 65536 >/dev/null
    echo "[[serve]]"
    echo "name = \"s$i\""
    echo "ring = \"$(ring_name s$i)\""
    echo "listen = \"198.18.0.1:$((7600 + 2 * i))\""
    echo "multicast = \"239.255.1.$i:$((7601 + 2 * i))\""
    echo "from = \"oldest\""
    if ((i == 16)); then echo "pace-us = 20"; fi
  done
} >"$conf/h1.toml"
bg 1 "$logs/h1" "$rf" run "$conf/h1.toml"
wait_for 10 grep -q "^run: 1 ports, 16 sessions" "$logs/h1" || fail "the 16-ring daemon did not start: $(tail -n 5 "$logs/h1")"
for h in 4 5; do
  "$rf" create "$(ring_name x$h)" --capacity 65536 >/dev/null
  bg "$h" "$logs/x$h" "$rf" serve "$(ring_name x$h)" --listen "198.18.0.$h:7700" --multicast "239.255.2.$h:7701" \
    --from oldest --quiet
done
# h2: rings 1-8 and 15-16 of h1, the first with 5% injected loss; h3: rings
# 9-14 of h1 and the rings of h4 and h5 (8 rings from 3 sources).
mirror_table() {  # NAME SOURCE RING [EXTRA]
  printf '[[mirror]]\nname = "%s"\nsource = "%s"\nring = "%s"\nfrom = "oldest"\n%s\n' "$1" "$2" "$3" "${4:-}"
}
{
  echo "ctl = \"$conf/h2.sock\""
  echo "quiet = true"
  printf '[[port]]\nname = "eth0"\niface = "eth0"\n'
  for i in 1 2 3 4 5 6 7 8 15 16; do
    extra=""
    [[ $i == 1 ]] && extra=$'loss = 50\nseed = 11'
    mirror_table "m$i" "198.18.0.1:$((7600 + 2 * i))" "$(ring_name h2m$i)" "$extra"
  done
} >"$conf/h2.toml"
{
  echo "ctl = \"$conf/h3.sock\""
  echo "quiet = true"
  printf '[[port]]\nname = "eth0"\niface = "eth0"\n'
  for i in 9 10 11 12 13 14; do mirror_table "m$i" "198.18.0.1:$((7600 + 2 * i))" "$(ring_name h3m$i)"; done
  for h in 4 5; do mirror_table "x$h" "198.18.0.$h:7700" "$(ring_name h3x$h)"; done
} >"$conf/h3.toml"
bg 2 "$logs/h2" "$rf" run "$conf/h2.toml"
bg 3 "$logs/h3" "$rf" run "$conf/h3.toml"
wait_for 10 grep -q "^run: 1 ports, 10 sessions" "$logs/h2" || fail "h2's daemon did not start: $(tail -n 5 "$logs/h2")"
wait_for 10 grep -q "^run: 1 ports, 8 sessions" "$logs/h3" || fail "h3's daemon did not start: $(tail -n 5 "$logs/h3")"
streaming() { [[ $(ctl_json "$1" "$2" "sum(e.get('state') == 'streaming' for e in j['sessions'])") == "$3" ]]; }
wait_for 15 streaming 2 "$conf/h2.sock" 10 || fail "h2: not every mirror streams: $(on 2 "$rf" ctl "$conf/h2.sock" list)"
wait_for 15 streaming 3 "$conf/h3.sock" 8 || fail "h3: not every mirror streams: $(on 3 "$rf" ctl "$conf/h3.sock" list)"
for i in $(seq 1 16); do on 1 "$rf" publish "$(ring_name s$i)" --count 20000 --rate 200k --quiet >/dev/null; done
for h in 4 5; do on "$h" "$rf" publish "$(ring_name x$h)" --count 20000 --rate 200k --quiet >/dev/null; done
for i in 1 2 3 4 5 6 7 8 15 16; do
  wait_for 20 mirrored 2 "$conf/h2.sock" "m$i" 20000 || fail "h2 m$i did not reach 20000: $(ctl_json 2 "$conf/h2.sock" "s['m$i']")"
  check_copy "$(ring_name s$i)" "$(ring_name h2m$i)" 20000
done
for i in 9 10 11 12 13 14; do
  wait_for 20 mirrored 3 "$conf/h3.sock" "m$i" 20000 || fail "h3 m$i did not reach 20000"
  check_copy "$(ring_name s$i)" "$(ring_name h3m$i)" 20000
done
for h in 4 5; do
  wait_for 20 mirrored 3 "$conf/h3.sock" "x$h" 20000 || fail "h3 x$h did not reach 20000"
  check_copy "$(ring_name x$h)" "$(ring_name h3x$h)" 20000
done
# Each mirror took its own stream by UDP, and nothing of another's.
for h in 2 3; do
  [[ $(ctl_json $h "$conf/h$h.sock" "len(j['sessions']) >= 2 and all(e['datagrams'] >= 1000 and e['rejected'] == 0 for e in j['sessions'])") == True ]] ||
    fail "h$h: a mirror got another's datagrams, or none by UDP: $(on $h "$rf" ctl "$conf/h$h.sock" list)"
done
# The fault is m1's alone: it dropped and NAKed; no other session dropped.
[[ $(ctl_json 2 "$conf/h2.sock" "s['m1']['fault_dropped'] > 0 and s['m1']['naks'] > 0") == True ]] ||
  fail "m1's injected loss did not show: $(ctl_json 2 "$conf/h2.sock" "s['m1']")"
[[ $(ctl_json 2 "$conf/h2.sock" "sum(e['fault_dropped'] for n, e in s.items() if n != 'm1')") == 0 ]] ||
  fail "another session's counters moved with m1's fault: $(on 2 "$rf" ctl "$conf/h2.sock" list)"
[[ $(ctl_json 1 "$conf/h1.sock" "len(j['sessions']) == 16 and all(e['mirrors'] >= 1 for e in j['sessions'])") == True ]] ||
  fail "h1 does not list 16 serves with their mirrors: $(on 1 "$rf" ctl "$conf/h1.sock" list)"
[[ $(ctl_json 1 "$conf/h1.sock" "j['ports'][0]['sessions']") == 16 ]] || fail "h1's port does not carry 16 sessions"
# A serve paces at the pace-us it was given (s16: 20), else at its port
# kind's default: 50 us on a kernel port.
[[ $(ctl_json 1 "$conf/h1.sock" "[s['s%d' % i]['pace_us'] for i in range(1, 17)] == [50] * 15 + [20]") == True ]] ||
  fail "h1's serves do not pace at 50 us (s16 at 20): $(ctl_json 1 "$conf/h1.sock" "[e['pace_us'] for e in j['sessions']]")"
# `ringfire stat` finds each session's counters file.
on 1 "$rf" stat "$(ring_name s3)" | grep -q "serve.mirrors " || fail "stat shows no counters for s3: $(on 1 "$rf" stat "$(ring_name s3)")"

log "2. hot add and remove while s1 streams at 100 k records/s"
on 1 "$rf" publish "$(ring_name s1)" --count 600000 --rate 100k --quiet >/dev/null &
pub=$!
"$rf" create "$(ring_name hot)" --capacity 65536 >/dev/null
printf '[[serve]]\nname = "hot"\nring = "%s"\nlisten = "198.18.0.1:7800"\nmulticast = "239.255.3.1:7801"\nfrom = "oldest"\n' \
  "$(ring_name hot)" >"$conf/hot-serve.toml"
mirror_table hot 198.18.0.1:7800 "$(ring_name h2hot)" >"$conf/hot-mirror.toml"
for round in 1 2 3; do
  on 1 "$rf" ctl "$conf/h1.sock" add "$conf/hot-serve.toml" >/dev/null || fail "round $round: ctl add serve refused"
  on 2 "$rf" ctl "$conf/h2.sock" add "$conf/hot-mirror.toml" >/dev/null || fail "round $round: ctl add mirror refused"
  on 1 "$rf" publish "$(ring_name hot)" --count 5000 --rate 50k --quiet >/dev/null
  wait_for 10 mirrored 2 "$conf/h2.sock" hot $((5000 * round)) || fail "round $round: the hot mirror did not catch up"
  on 2 "$rf" ctl "$conf/h2.sock" remove hot >/dev/null || fail "round $round: ctl remove mirror refused"
  on 1 "$rf" ctl "$conf/h1.sock" remove hot >/dev/null || fail "round $round: ctl remove serve refused"
done
check_copy "$(ring_name hot)" "$(ring_name h2hot)" 15000
err=$(on 1 "$rf" ctl "$conf/h1.sock" remove nosuch 2>&1 >/dev/null); rc=$?
[[ $rc -eq 1 && "$err" == *"no session named nosuch"* ]] || fail "removing an unknown session: rc $rc, $err"
# A request that is not UTF-8 is answered (its bad bytes replaced in the
# error it quotes), and the daemon goes on: it once aborted on it.
ans=$(on 1 python3 -c "
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'\xff\xfe junk'); s.shutdown(socket.SHUT_WR)
print(s.recv(65536).decode())" "$conf/h1.sock" 2>&1)
[[ "$ans" == *'"ok": false'* && "$ans" == *'unknown request'* ]] || fail "a request that is not UTF-8: $ans"
[[ $(ctl_json 1 "$conf/h1.sock" "len(j['sessions'])") == 16 ]] || fail "h1's daemon did not survive a request that is not UTF-8"
# Clients that leave before their answer (a ctl killed by Ctrl-C): the
# daemon goes on (a SIGPIPE ended it). Eight that never read a large answer
# (a 64 KiB name quoted back, escaped) and stay: the operator's `list` is
# answered at once (the conductor waited 1 s on each, and every session
# with it), taking the oldest one's place.
rude=$(on 1 python3 -c "
import socket, sys, time
for _ in range(3):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'list'); s.shutdown(socket.SHUT_WR); s.close()
time.sleep(0.3)
held = []
for _ in range(8):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'remove ' + b'\\x01' * 65000); s.shutdown(socket.SHUT_WR)
    held.append(s)
time.sleep(0.3)
op = socket.socket(socket.AF_UNIX); op.settimeout(4); op.connect(sys.argv[1]); op.sendall(b'list'); op.shutdown(socket.SHUT_WR)
got = b''
try:
    while (b := op.recv(65536)): got += b
except OSError as e:
    got += str(e).encode()
print(got.count(b'\"name\"'))" "$conf/h1.sock" 2>&1)
[[ $rude == 17 ]] || fail "ctl clients that leave or never read: the operator's list got '$rude' names, want 16 sessions and the port"
[[ $(ctl_json 1 "$conf/h1.sock" "len(j['sessions'])") == 16 ]] || fail "h1's daemon did not survive ctl clients that leave early"
printf '[[serve]]\nname = "s2"\nring = "%s"\nlisten = "198.18.0.1:7900"\n' "$(ring_name s2)" >"$conf/dup.toml"
err=$(on 1 "$rf" ctl "$conf/h1.sock" add "$conf/dup.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 1 && "$err" == *"a session named s2 exists"* ]] || fail "adding a second s2: rc $rc, $err"
wait "$pub"
wait_for 20 mirrored 2 "$conf/h2.sock" m1 620000 || fail "m1 did not reach 620000"
check_copy "$(ring_name s1)" "$(ring_name h2m1)" 65536  # the ring holds the last 65536 of them
# The other sessions of both daemons kept streaming: nothing lost.
[[ $(ctl_json 2 "$conf/h2.sock" "sum(e['gap_records'] for e in j['sessions'])") == 0 ]] ||
  fail "records lost during the adds and removes: $(on 2 "$rf" ctl "$conf/h2.sock" list)"
# A ring's file cut under the sessions on it (its owner truncated it): the
# session on it ends, saying so, and the daemon and its others go on (the
# cut part reads as zeros: a mirror would have written into nothing).
truncate -s 4096 "/dev/shm/$(ring_name s15)" "/dev/shm/$(ring_name h2m16)"
wait_for 5 grep -q "^run: s15 ended: its ring .* was cut under its [0-9]*-byte mapping (4096 bytes now)" "$logs/h1" ||
  fail "h1 did not end the serve of a cut ring: $(grep '^run' "$logs/h1" | tail -n 3)"
wait_for 5 grep -q "^run: m16 ended: its ring .* was cut under its [0-9]*-byte mapping (4096 bytes now)" "$logs/h2" ||
  fail "h2 did not end the mirror into a cut ring: $(grep '^run' "$logs/h2" | tail -n 3)"
[[ $(ctl_json 1 "$conf/h1.sock" "len(j['sessions'])") == 15 && $(ctl_json 2 "$conf/h2.sock" "len(j['sessions'])") == 9 ]] ||
  fail "after the cuts: $(on 1 "$rf" ctl "$conf/h1.sock" list) $(on 2 "$rf" ctl "$conf/h2.sock" list)"

log "3. config errors name the file, line and key"
printf '[[port]]\nname = "p"\n\n[[serve]]\nname = "a"\nring = "x"\nlisten = "198.18.0.1:1"\nmtuu = 9000\n' >"$conf/bad1.toml"
err=$("$rf" run "$conf/bad1.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"bad1.toml:8: [[serve]] a, key 'mtuu': unknown key"* ]] || fail "unknown key: rc $rc, $err"
"$rf" create "$(ring_name cfg)" --capacity 1024 >/dev/null
printf '[[port]]\nname = "p"\n[[serve]]\nname = "a"\nring = "%s"\nlisten = "198.18.0.1:1"\ndup = 99\n' "$(ring_name cfg)" >"$conf/bad2.toml"
err=$("$rf" run "$conf/bad2.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"bad2.toml:7: [[serve]] a, key 'dup': "*"--dup"* ]] || fail "a bad value: rc $rc, $err"
printf '[[port]]\nname = "p"\nmtu = "big"\n' >"$conf/bad3.toml"
err=$("$rf" run "$conf/bad3.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"bad3.toml:3: [[port]] p, key 'mtu': an integer"* ]] || fail "a bad port key: rc $rc, $err"
printf '[[port]]\nname = "p"\n[[mirror]]\nname = "m"\nsource = "198.18.0.1:1"\nring = "r"\nport = "q"\n' >"$conf/bad4.toml"
err=$("$rf" run "$conf/bad4.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"bad4.toml:7: [[mirror]] m, key 'port': no [[port]] named 'q'"* ]] || fail "an unknown port: rc $rc, $err"
printf '[[port]\nname = "p"\n' >"$conf/bad5.toml"
err=$("$rf" run "$conf/bad5.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"bad5.toml:1:"* ]] || fail "a syntax error: rc $rc, $err"
"$rf" run "$conf/h2.toml" --check | grep -q "10 sessions: ok" || fail "--check of a good config"

log "3b. an echo as a task on the worker (perf/engine_echo): a closed-loop ping between two daemons"
# The same daemon, with the ping (h1) and the pong (h2) run on their port's
# worker: every record comes back, checked, and the pong's port counts its task.
echo_bin="$(dirname "$rf")/../perf/engine_echo"
if [[ -x $echo_bin ]]; then
  "$rf" create "$(ring_name ep)" --capacity 65536 >/dev/null
  "$rf" create "$(ring_name eb)" --capacity 65536 >/dev/null
  for h in 1 2; do
    o=$((3 - h))
    {
      printf 'ctl = "%s/e%s.sock"\nquiet = true\n[[port]]\nname = "eth0"\niface = "eth0"\n' "$conf" "$h"
      printf '[[serve]]\nname = "out"\nring = "%s"\nlisten = "198.18.0.%s:%s"\nmulticast = "239.255.6.%s:%s"\npace-us = 0\n' \
        "$(ring_name "$([[ $h == 1 ]] && echo ep || echo eb)")" "$h" $((7960 + 2 * h)) "$h" $((7961 + 2 * h))
      mirror_table in "198.18.0.$o:$((7960 + 2 * o))" "$(ring_name "$([[ $h == 1 ]] && echo eb1 || echo ep2)")"
    } >"$conf/e$h.toml"
  done
  bg 2 "$logs/pong" "$echo_bin" "$conf/e2.toml" eth0 pong "$(ring_name ep2)" "$(ring_name eb)"
  pongpid=${LAB_PIDS[-1]}
  timeout 60 ip netns exec "$(host 1)" "$echo_bin" "$conf/e1.toml" eth0 ping "$(ring_name ep)" "$(ring_name eb1)" \
    --closed --count 3000 --json "$logs/ping.json" >"$logs/ping" 2>&1 || fail "the ping failed: $(tail -n 5 "$logs/ping")"
  python3 - "$logs/ping.json" <<'PY' || fail "the ping's echoes: $(cat "$logs/ping.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["closed_loop"] and j["sent"] == 3000, j
assert j["delivered"] == 3000 and j["bad"] == 0 and j["duplicates"] == 0, j
assert j["count"] > 2000 and j["p50_ns"] > 0, j  # round trips measured (after the warm-up)
PY
  grep -q "^engine_echo: pong on port eth0's worker" "$logs/pong" || fail "the pong was not placed: $(tail -n 5 "$logs/pong")"
  [[ $(ctl_json 2 "$conf/e2.sock" "j['ports'][0]['tasks']") == 1 ]] || fail "h2's port does not count its task: $(on 2 "$rf" ctl "$conf/e2.sock" list)"
  # The session's counters are the conductor's copy, taken at its next turn:
  # they may trail the ping's last echo by a moment (a loaded run saw 2999).
  served() { [[ $(ctl_json 2 "$conf/e2.sock" "s['out']['records']") -ge 3000 ]]; }
  wait_for 5 served || fail "h2 did not serve the echoes: $(ctl_json 2 "$conf/e2.sock" "s['out']")"
  stop_pid "$pongpid"
  grep -q "^run: stopped" "$logs/pong" || fail "the pong's daemon did not stop cleanly: $(tail -n 5 "$logs/pong")"
else
  log "3b. skipped: no perf/engine_echo in this build (-Dbenchmarks=disabled)"
fi

stop_since 0
if "$rf" mirror 198.18.0.1:1 rf-probe --backend dpdk --eal --no-such-flag 2>&1 | grep -q "no DPDK backend"; then
  log "4. and 5. skipped: this build has no DPDK backend"
  lab_finish engine_lab_test "$logs/h1" "$logs/h2" "$logs/h3"
  exit 0
fi

log "4. a hub on one net_af_xdp port: h2 mirrors h1's ring and serves it again to h3, one process"
"$rf" create "$(ring_name hubsrc)" --capacity 65536 >/dev/null
bg 1 "$logs/hubsrc" "$rf" serve "$(ring_name hubsrc)" --listen 198.18.0.1:7400 --multicast 239.255.4.1:7401 \
  --from oldest --quiet
printf 'ctl = "%s"\n[[port]]\nname = "eth0"\nbackend = "dpdk"\niface = "eth0"\npmd = "af_xdp"\n' "$conf/hub.sock" >"$conf/hub.toml"
mirror_table up 198.18.0.1:7400 "$(ring_name hub)" >>"$conf/hub.toml"
# The serve of the mirror's ring is in the same file: it waits for the ring.
printf '[[serve]]\nname = "down"\nring = "%s"\nlisten = "198.18.0.2:7500"\nmulticast = "239.255.4.2:7501"\nfrom = "oldest"\n' \
  "$(ring_name hub)" >>"$conf/hub.toml"
# A DPDK process killed before it could clean up leaves its EAL runtime
# directory; the next one to start sweeps those of dead pids, and only those.
true & dead=$!; wait $dead
mkdir -p "/var/run/dpdk/rf$dead" "/var/run/dpdk/rf$$"
touch "/var/run/dpdk/rf$dead/dpdk_telemetry.v2" "/var/run/dpdk/rf$$/dpdk_telemetry.v2"
bg 2 "$logs/hub" "$rf" run "$conf/hub.toml"
hubpid=${LAB_PIDS[-1]}
wait_for 15 grep -q "^run: 1 ports, 2 sessions" "$logs/hub" || fail "the hub did not start: $(grep -v TELEMETRY "$logs/hub" | tail -n 5)"
[[ ! -e /var/run/dpdk/rf$dead ]] || fail "a dead process's EAL runtime directory was not swept"
[[ -e /var/run/dpdk/rf$$/dpdk_telemetry.v2 ]] || fail "a live process's EAL runtime directory was swept"
rm -rf "/var/run/dpdk/rf$$"
grep -q "^run: down waits for ring" "$logs/hub" || fail "the hub's serve did not wait for its ring: $(grep '^run' "$logs/hub")"
wait_for 10 streaming 2 "$conf/hub.sock" 1 || fail "the hub's mirror does not stream: $(on 2 "$rf" ctl "$conf/hub.sock" list)"
wait_for 10 grep -q "^run: down started" "$logs/hub" || fail "the hub's serve did not start: $(grep '^run' "$logs/hub")"
bg 3 "$logs/h3hub" "$rf" mirror 198.18.0.2:7500 "$(ring_name h3hub)" --from oldest
wait_for 10 grep -q "^mirror: 198" "$logs/h3hub" || fail "h3 did not connect to the hub: $(cat "$logs/h3hub")"
on 1 "$rf" publish "$(ring_name hubsrc)" --count 30000 --rate 100k --quiet >/dev/null
wait_for 20 mirrored 2 "$conf/hub.sock" up 30000 || fail "the hub did not reach 30000"
wait_for 20 mirror_at "$logs/h3hub" 30000 || fail "h3 did not reach 30000 through the hub: $(tail -n 1 "$logs/h3hub")"
check_copy "$(ring_name hubsrc)" "$(ring_name hub)" 30000
check_copy "$(ring_name hubsrc)" "$(ring_name h3hub)" 30000
by_udp "$logs/h3hub" || fail "h3's DATA did not come by UDP from the hub's af_xdp port: $(tail -n 1 "$logs/h3hub")"
[[ $(ctl_json 2 "$conf/hub.sock" "j['ports'][0]['path'].startswith('dpdk net_af_xdp') and j['ports'][0]['sessions'] == 2") == True ]] ||
  fail "the hub's two sessions are not on one af_xdp port: $(on 2 "$rf" ctl "$conf/hub.sock" list)"
# ... and its serve, with no pace-us given, paces at a DPDK port's 5 us.
[[ $(ctl_json 2 "$conf/hub.sock" "s['down']['pace_us']") == 5 ]] ||
  fail "the hub's serve does not pace at the DPDK port's 5 us: $(ctl_json 2 "$conf/hub.sock" "s['down']")"
# DPDK's telemetry socket answers ringfire's own commands (dpdk-telemetry.py).
if command -v dpdk-telemetry.py >/dev/null; then
  tele() { printf '%s\n' "$1" | dpdk-telemetry.py -f "rf$hubpid" 2>&1; }
  # tele_ok CMD EXPR: the reply to CMD, as j (its payload), makes EXPR true.
  tele_ok() {
    tele "$1" | python3 -c "import json,sys; r=json.loads(sys.stdin.read().strip().splitlines()[-1]); j=r[sys.argv[1].split(',')[0]]; sys.exit(0 if ($2) else 1)" "$1"
  }
  sleep 0.3  # a snapshot is published every 100 ms
  tele_ok /ringfire/sessions "j['total'] == 2 and j['sessions'] == {'up': 'mirror', 'down': 'serve'} and 'next' not in j" ||
    fail "telemetry /ringfire/sessions: $(tele /ringfire/sessions)"
  tele_ok /ringfire/session,up "j['state'] == 'streaming' and j['next_seq'] == 30000 and j['kind'] == 'mirror'" ||
    fail "telemetry /ringfire/session,up: $(tele /ringfire/session,up)"
  tele_ok /ringfire/ports "j['eth0']['path'].startswith('dpdk net_af_xdp') and j['eth0']['sessions'] == 2" ||
    fail "telemetry /ringfire/ports: $(tele /ringfire/ports)"
  tele_ok /ringfire/session,nosuch "j is None" || fail "telemetry for no session: $(tele /ringfire/session,nosuch)"
  # A page number whose page * 100 wraps to an early page (2^62: to 0)
  # answers nothing, not the first page again.
  tele_ok /ringfire/sessions,4611686018427387904 "j is None" ||
    fail "telemetry for page 2^62: $(tele /ringfire/sessions,4611686018427387904)"
fi
stop_since 0

log "5. the fallback ladder: each rung made to fail lands on the next, saying why"
"$rf" create "$(ring_name lad)" --capacity 65536 >/dev/null
ladder() {  # NAME EXTRA PORT HOST: an auto port on eth0, and a serve of the ladder ring
  printf 'ctl = "%s/%s.sock"\n[[port]]\nname = "p"\nbackend = "auto"\niface = "eth0"\n%s\n' "$conf" "$1" "$2"
  printf '[[serve]]\nname = "s"\nring = "%s"\nlisten = "198.18.0.%s:%s"\nmulticast = "239.255.5.1:7601"\nfrom = "oldest"\n' \
    "$(ring_name lad)" "${4:-4}" "$3"
}
ladder a 'device = "0000:00:1f.7"' 7600 >"$conf/a.toml"
bg 4 "$logs/la" "$rf" run "$conf/a.toml"
wait_for 15 grep -q "^run: 1 ports" "$logs/la" || fail "ladder a did not start: $(grep -v TELEMETRY "$logs/la" | tail -n 5)"
grep -q "^run: port p: dpdk: .*0000:00:1f.7.*; trying the next rung" "$logs/la" || fail "a: no reason for the device rung: $(grep '^run' "$logs/la")"
grep -q "^run: port p: af_xdp (dpdk net_af_xdp" "$logs/la" || fail "a: did not land on af_xdp: $(grep '^run' "$logs/la")"
bg 5 "$logs/lm" "$rf" mirror 198.18.0.4:7600 "$(ring_name lam)" --from oldest
wait_for 10 grep -q "^mirror: 198" "$logs/lm" || fail "the ladder's mirror did not connect: $(cat "$logs/lm")"
on 4 "$rf" publish "$(ring_name lad)" --count 5000 --rate 50k --quiet >/dev/null
wait_for 10 mirror_at "$logs/lm" 5000 || fail "nothing came through the af_xdp rung: $(tail -n 1 "$logs/lm")"
check_copy "$(ring_name lad)" "$(ring_name lam)" 5000
# eth0 is af_xdp's now (one XDP program per interface): the next daemon's
# af_xdp rung fails, and it lands on af_packet.
ladder b '' 7602 >"$conf/b.toml"
bg 4 "$logs/lb" "$rf" run "$conf/b.toml"
wait_for 15 grep -q "^run: 1 ports" "$logs/lb" || fail "ladder b did not start: $(grep -v TELEMETRY "$logs/lb" | tail -n 5)"
grep -q "^run: port p: af_xdp: .*; trying the next rung" "$logs/lb" || fail "b: no reason for the af_xdp rung: $(grep '^run' "$logs/lb")"
grep -q "^run: port p: af_packet (dpdk net_af_packet" "$logs/lb" || fail "b: did not land on af_packet: $(grep '^run' "$logs/lb")"
ladder c 'require = "af_xdp"' 7604 >"$conf/c.toml"
err=$(on 4 "$rf" run "$conf/c.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"requires af_xdp or better"*"af_xdp: "* ]] || fail "require af_xdp: rc $rc, $err"
# Datagrams larger than the link's MTU: no DPDK rung takes them; the kernel does.
ladder d 'mtu = 8000' 7606 6 >"$conf/d.toml"
bg 6 "$logs/ld" "$rf" run "$conf/d.toml"
wait_for 15 grep -q "^run: port p on kernel" "$logs/ld" || fail "d: did not land on kernel: $(grep -v TELEMETRY "$logs/ld" | grep '^run\|ringfire' | tail -n 5)"
grep -q "^run: port p: af_packet: .*do not fit" "$logs/ld" || fail "d: no reason for the af_packet rung: $(grep '^run' "$logs/ld")"

stop_since 0
lab_finish engine_lab_test "$logs/h1" "$logs/h2" "$logs/h3" "$logs/hub" "$logs/la" "$logs/lb" "$logs/ld"
