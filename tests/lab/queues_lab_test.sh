#!/usr/bin/env bash
# queues_lab_test.sh — a DPDK port of two queue pairs, a worker each, at
# both ends of a link (two `ringfire run` daemons, the control connections
# on the hosts' kernel veths): first net_memif, then net_af_packet on a
# veth of two queue pairs (qpairs = 2: a PACKET_FANOUT group). h1 serves
# four rings (two by multicast, two by unicast); h2 mirrors them, one
# through injected loss. On memif a peer's queue i lands on our queue i,
# and h2 places a serve of its own first, so its mirrors sit on the other
# queue from their serves: every datagram arrives on the queue its
# session is not on and is handed across (QueueShare), and the NAKs and
# PUNCHes going back are too. On af_packet the kernel hashes each flow to
# a queue. Every mirror must be a byte-for-byte copy, both queues of each
# port must carry sessions, and every frame handed across must be taken.
# Skips (77) where the build has no DPDK.
# Usage: queues_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
require_dpdk
lab_up 2
lab_logs queues
sock="$logs/q.memif"  # a file: the hosts are different namespaces
port_table() {  # HOST ROLE (for $backend)
  if [[ $backend == af_packet ]]; then
    printf '[[port]]\nname = "d"\nbackend = "dpdk"\niface = "d1"\npmd = "af_packet"\nqueues = %s\n' "${QUEUES:-2}"
    return
  fi
  printf '[[port]]\nname = "d"\nbackend = "dpdk"\nip = "198.18.1.%s"\nqueues = %s\n' "$1" "${QUEUES:-2}"
  printf 'device = "net_memif0,role=%s,socket=%s,socket-abstract=no"\n' "$2" "$sock"
}
# one_case BACKEND: the test on memif or af_packet.
one_case() {
  backend=$1
  local n=4 i h q per_queue path sessions h2q handed taken naks
  {
    printf 'ctl = "%s/%s-h1.sock"\nquiet = true\n' "$logs" "$backend"
    port_table 1 server
    for i in $(seq 1 $n); do
      "$rf" create "$(ring_name $backend-s$i)" --capacity 262144 >/dev/null
      printf '[[serve]]\nname = "s%s"\nring = "%s"\nlisten = "198.18.0.1:%s"\n' "$i" "$(ring_name $backend-s$i)" $((7700 + i))
      if (( i <= 2 )); then
        printf 'multicast = "239.255.9.%s:%s"\n' "$i" $((7710 + i))
      else
        printf 'udp = %s\n' $((7710 + i))
      fi
    done
  } >"$logs/$backend-h1.toml"
  {
    printf 'ctl = "%s/%s-h2.sock"\nquiet = true\n' "$logs" "$backend"
    port_table 2 client
    "$rf" create "$(ring_name $backend-pad)" --capacity 1024 >/dev/null
    printf '[[serve]]\nname = "pad"\nring = "%s"\nlisten = "198.18.0.2:7799"\n' "$(ring_name $backend-pad)"
    for i in $(seq 1 $n); do
      printf '[[mirror]]\nname = "m%s"\nsource = "198.18.0.1:%s"\nring = "%s"\nfrom = "oldest"\n' \
        "$i" $((7700 + i)) "$(ring_name $backend-m$i)"
      (( i >= 3 )) && printf 'unicast = true\n'
      (( i == 2 )) && printf 'loss = 2\nseed = 5\n'
    done
  } >"$logs/$backend-h2.toml"

  log "two daemons, each port 2 queues over $backend; h1 serves $n rings, h2 mirrors them"
  bg 1 "$logs/$backend-h1" "$rf" run "$logs/$backend-h1.toml"
  local d1=${LAB_PIDS[-1]}
  wait_for 20 grep -q "^run: 1 ports, $n sessions" "$logs/$backend-h1" || fail "h1's daemon did not start: $(tail -n 5 "$logs/$backend-h1")"
  bg 2 "$logs/$backend-h2" "$rf" run "$logs/$backend-h2.toml"
  local d2=${LAB_PIDS[-1]}
  wait_for 20 grep -q "^run: 1 ports, $((n + 1)) sessions" "$logs/$backend-h2" || fail "h2's daemon did not start: $(tail -n 5 "$logs/$backend-h2")"
  streaming() { [[ $(ctl_json 2 "$logs/$backend-h2.sock" "sum(e.get('state') == 'streaming' for e in j['sessions'])") == "$1" ]]; }
  wait_for 20 streaming $n || fail "h2's mirrors are not all streaming: $(on 2 "$rf" ctl "$logs/$backend-h2.sock" list | head -c 600)"
  for i in $(seq 1 $n); do
    on 1 "$rf" publish "$(ring_name $backend-s$i)" --count 100000 --rate 100k --quiet >/dev/null
  done
  at() { [[ $(ctl_json 2 "$logs/$backend-h2.sock" "min(s['m%d' % i].get('next_seq', 0) for i in range(1, $n + 1))") -ge 100000 ]]; }
  wait_for 60 at || fail "the mirrors did not catch up: $(ctl_json 2 "$logs/$backend-h2.sock" "[s['m%d' % i].get('next_seq') for i in range(1, $n + 1)]")"
  for i in $(seq 1 $n); do check_copy "$(ring_name $backend-s$i)" "$(ring_name $backend-m$i)" 100000; done

  log "each port's two queues carry sessions, and the frames that came in on the other queue were handed across"
  for h in 1 2; do
    per_queue=$(ctl_json $h "$logs/$backend-h$h.sock" "j['ports'][0]['counters']")
    path=$(ctl_json $h "$logs/$backend-h$h.sock" "j['ports'][0]['path']")
    [[ $path == *"2 queues"* ]] || fail "h$h's port is not two queues: $path"
    sessions=$(ctl_json $h "$logs/$backend-h$h.sock" "j['ports'][0]['sessions']")
    (( sessions >= n )) || fail "h$h's port holds $sessions sessions"
    # Both queues' workers carried frames: h1's sent DATA from both (a
    # serve on each), h2's received on both.
    for q in 0 1; do
      if [[ $h == 1 ]]; then
        [[ $per_queue =~ queue\ $q:\ rx\ [0-9]+\ frames\ [^|]*tx\ ([0-9]+)\ frames ]] && (( BASH_REMATCH[1] >= 10000 )) ||
          fail "h1 queue $q sent fewer than 10,000 frames: $per_queue"
      elif [[ $backend == memif ]]; then  # (af_packet: where the kernel's hash puts each flow)
        [[ $per_queue =~ queue\ $q:\ rx\ ([0-9]+)\ frames ]] && (( BASH_REMATCH[1] >= 10000 )) ||
          fail "h2 queue $q received fewer than 10,000 frames: $per_queue"
      fi
    done
  done
  # The queues' counters are read live: a frame handed over and not yet
  # taken from the other queue's inbox is in flight (a run read 175,152
  # handed and 175,151 taken). Read again until they settle (5 s at most).
  across() {
    h2q=$(ctl_json 2 "$logs/$backend-h2.sock" "j['ports'][0]['counters']")
    handed=$(grep -Eo '[0-9]+ handed to another queue' <<<"$h2q" | awk '{s += $1} END {print s + 0}')
    taken=$(grep -Eo '[0-9]+ from others' <<<"$h2q" | awk '{s += $1} END {print s + 0}')
    (( taken == handed ))
  }
  wait_for 5 across
  if [[ $backend == memif ]]; then
    (( handed >= 10000 && taken == handed )) || fail "h2 handed $handed frames across and took $taken: $h2q"
  else
    (( taken == handed )) || fail "h2 handed $handed frames across and took $taken: $h2q"
  fi
  naks=$(ctl_json 2 "$logs/$backend-h2.sock" "s['m2'].get('naks', 0)")
  (( naks >= 1 )) || fail "no NAK from the mirror behind 2% loss: $naks"
  stop_pid "$d2"
  stop_pid "$d1"
}

one_case memif
direct_link 1  # d1: 198.18.1.1 and .2, the veth made anew with two queue pairs below
ip -n "$(host 1)" link del d1
ip link add "${LAB_PREFIX}q1a" netns "$(host 1)" numtxqueues 2 numrxqueues 2 type veth peer name "${LAB_PREFIX}q1b" \
  netns "$(host 2)" numtxqueues 2 numrxqueues 2
for h in 1 2; do
  on $h ip link set "${LAB_PREFIX}q1$([[ $h == 1 ]] && echo a || echo b)" name d1
  on $h ip addr add "198.18.1.$h/24" dev d1
  on $h ip link set d1 up
done
wait_for 5 link_up 1 d1 || fail "the two-queue veth has no carrier"
one_case af_packet

log "a bad queue count fails at start-up with what to change"
printf '[[port]]\nname = "p"\nqueues = 2\n' >"$logs/bad.toml"
err=$("$rf" run "$logs/bad.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && $err == *"key 'queues': only for backend"* ]] || fail "queues on a kernel port: rc $rc, $err"
printf '[[port]]\nname = "p"\nbackend = "dpdk"\niface = "eth0"\nqueues = 99\n' >"$logs/bad2.toml"
err=$("$rf" run "$logs/bad2.toml" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && $err == *"queues"* ]] || fail "queues = 99: rc $rc, $err"

lab_finish queues_lab_test "$logs/memif-h1" "$logs/memif-h2" "$logs/af_packet-h1" "$logs/af_packet-h2"
