#!/usr/bin/env bash
# queues_lab_test.sh — a DPDK port of two queue pairs, a worker each, on
# both ends of a net_memif link (two `ringfire run` daemons, the control
# connections on the hosts' kernel veths). h1 serves four rings (two by
# multicast, two by unicast); h2 mirrors them, one through injected loss.
# h2 places a serve of its own first, so its mirrors sit on the other
# queue from their serves: every datagram arrives on the queue its
# session is not on and is handed across (QueueShare), and the NAKs and
# PUNCHes going back are too. Every mirror must be a byte-for-byte copy,
# both queues of each port must carry sessions, and the hand-offs must be
# counted. Skips (77) where the build has no DPDK.
# Usage: queues_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
require_dpdk
lab_up 2
lab_logs queues
sock="$logs/q.memif"  # a file: the hosts are different namespaces
ctl_json() {  # HOST SOCKET PYTHON: an expression over `j` (ctl list) and `s` (its sessions by name)
  on "$1" "$rf" ctl "$2" list 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin); s = {e['name']: e for e in j['sessions']}
print($3)"
}
port_table() {  # HOST ROLE
  printf '[[port]]\nname = "d"\nbackend = "dpdk"\nip = "198.18.1.%s"\nqueues = %s\n' "$1" "${QUEUES:-2}"
  printf 'device = "net_memif0,role=%s,socket=%s,socket-abstract=no"\n' "$2" "$sock"
}
n=4
{
  printf 'ctl = "%s/h1.sock"\nquiet = true\n' "$logs"
  port_table 1 server
  for i in $(seq 1 $n); do
    "$rf" create "$(ring_name s$i)" --capacity 262144 >/dev/null
    printf '[[serve]]\nname = "s%s"\nring = "%s"\nlisten = "198.18.0.1:%s"\n' "$i" "$(ring_name s$i)" $((7700 + i))
    if (( i <= 2 )); then
      printf 'multicast = "239.255.9.%s:%s"\n' "$i" $((7710 + i))
    else
      printf 'udp = %s\n' $((7710 + i))
    fi
  done
} >"$logs/h1.toml"
{
  printf 'ctl = "%s/h2.sock"\nquiet = true\n' "$logs"
  port_table 2 client
  "$rf" create "$(ring_name pad)" --capacity 1024 >/dev/null
  printf '[[serve]]\nname = "pad"\nring = "%s"\nlisten = "198.18.0.2:7799"\n' "$(ring_name pad)"
  for i in $(seq 1 $n); do
    printf '[[mirror]]\nname = "m%s"\nsource = "198.18.0.1:%s"\nring = "%s"\nfrom = "oldest"\n' \
      "$i" $((7700 + i)) "$(ring_name m$i)"
    (( i >= 3 )) && printf 'unicast = true\n'
    (( i == 2 )) && printf 'loss = 2\nseed = 5\n'
  done
} >"$logs/h2.toml"

log "two daemons, each port 2 queues over memif; h1 serves $n rings, h2 mirrors them"
bg 1 "$logs/h1" "$rf" run "$logs/h1.toml"
wait_for 20 grep -q "^run: 1 ports, $n sessions" "$logs/h1" || fail "h1's daemon did not start: $(tail -n 5 "$logs/h1")"
bg 2 "$logs/h2" "$rf" run "$logs/h2.toml"
wait_for 20 grep -q "^run: 1 ports, $((n + 1)) sessions" "$logs/h2" || fail "h2's daemon did not start: $(tail -n 5 "$logs/h2")"
streaming() { [[ $(ctl_json 2 "$logs/h2.sock" "sum(e.get('state') == 'streaming' for e in j['sessions'])") == "$1" ]]; }
wait_for 20 streaming $n || fail "h2's mirrors are not all streaming: $(on 2 "$rf" ctl "$logs/h2.sock" list | head -c 600)"
for i in $(seq 1 $n); do
  on 1 "$rf" publish "$(ring_name s$i)" --count 100000 --rate 100k --quiet >/dev/null
done
at() { [[ $(ctl_json 2 "$logs/h2.sock" "min(s['m%d' % i].get('next_seq', 0) for i in range(1, $n + 1))") -ge 100000 ]]; }
wait_for 60 at || fail "the mirrors did not catch up: $(ctl_json 2 "$logs/h2.sock" "[s['m%d' % i].get('next_seq') for i in range(1, $n + 1)]")"
for i in $(seq 1 $n); do check_copy "$(ring_name s$i)" "$(ring_name m$i)" 100000; done

log "each port's two queues carry sessions, and the frames that came in on the other queue were handed across"
for h in 1 2; do
  per_queue=$(ctl_json $h "$logs/h$h.sock" "j['ports'][0]['counters']")
  path=$(ctl_json $h "$logs/h$h.sock" "j['ports'][0]['path']")
  [[ $path == *"2 queues"* ]] || fail "h$h's port is not two queues: $path"
  sessions=$(ctl_json $h "$logs/h$h.sock" "j['ports'][0]['sessions']")
  (( sessions >= n )) || fail "h$h's port holds $sessions sessions"
  # Both queues' workers carried frames: h1's sent DATA from both (a
  # serve on each), h2's received on both.
  for q in 0 1; do
    if [[ $h == 1 ]]; then
      [[ $per_queue =~ queue\ $q:\ rx\ [0-9]+\ frames\ [^|]*tx\ ([0-9]+)\ frames ]] && (( BASH_REMATCH[1] >= 10000 )) ||
        fail "h1 queue $q sent fewer than 10,000 frames: $per_queue"
    else
      [[ $per_queue =~ queue\ $q:\ rx\ ([0-9]+)\ frames ]] && (( BASH_REMATCH[1] >= 10000 )) ||
        fail "h2 queue $q received fewer than 10,000 frames: $per_queue"
    fi
  done
done
h2q=$(ctl_json 2 "$logs/h2.sock" "j['ports'][0]['counters']")
handed=$(grep -Eo '[0-9]+ handed to another queue' <<<"$h2q" | awk '{s += $1} END {print s + 0}')
taken=$(grep -Eo '[0-9]+ from others' <<<"$h2q" | awk '{s += $1} END {print s + 0}')
(( handed >= 10000 && taken == handed )) || fail "h2 handed $handed frames across and took $taken: $h2q"
grep -Eq ' 0 refused: its inbox full' <<<"$h2q" || true  # counted when it happens (a loss, repaired)
naks=$(ctl_json 2 "$logs/h2.sock" "s['m2'].get('naks', 0)")
(( naks >= 1 )) || fail "no NAK from the mirror behind 2% loss: $naks"

log "a bad queue count fails at start-up with what to change"
printf '[[port]]\nname = "p"\nqueues = 2\n' >"$logs/bad.toml"
err=$("$rf" run "$logs/bad.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && $err == *"key 'queues': only for backend"* ]] || fail "queues on a kernel port: rc $rc, $err"
printf '[[port]]\nname = "p"\nbackend = "dpdk"\niface = "eth0"\nqueues = 99\n' >"$logs/bad2.toml"
err=$("$rf" run "$logs/bad2.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && $err == *"queues"* ]] || fail "queues = 99: rc $rc, $err"

lab_finish queues_lab_test "$logs/h1" "$logs/h2"
