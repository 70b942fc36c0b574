#!/usr/bin/env bash
# mux_lab_test.sh — the stream multiplexer between two hosts: `ringfire
# mux-consume` (a node with 300 anchors) on h1, `ringfire mux-produce` (a
# node attaching to every handle, one decode step at a time) on h2. Each
# stream must arrive whole and in order, then finish once; batches must
# carry many streams' tokens. Then the same over DPDK (net_memif between
# the hosts, control on the kernel veths) when the build has DPDK; then a
# producer killed -9 mid-stream: every stream ends dropped exactly once.
# DPDK runs: net_memif between the hosts, and net_af_xdp on a veth each.
# Usage: mux_lab_test.sh PATH/TO/ringfire
set -u
rf=$1
source "$(dirname "$0")/lib.sh"
lab_up 2
lab_logs mux

# field JSON_FILE KEY: a top-level number from a report.
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
# check_run NAME STREAMS TOKENS [MIN_PER_BATCH]: the consumer's report says every token came, in order, and every stream finished.
check_run() {
  local r=$logs/$1.json
  [[ -s $r ]] || { fail "$1: no report: $(tail -n 3 "$logs/$1.c")"; return; }
  [[ $(field "$r" tokens) == $(($2 * $3)) ]] || fail "$1: tokens $(field "$r" tokens), want $(($2 * $3))"
  [[ $(field "$r" finished) == "$2" ]] || fail "$1: finished $(field "$r" finished), want $2"
  [[ $(field "$r" dropped) == 0 && $(field "$r" out_of_order) == 0 && $(field "$r" short_streams) == 0 ]] ||
    fail "$1: dropped/out of order/short: $(cat "$r")"
  [[ $(field "$r" reader_stall) == 0 && $(field "$r" channel_failures) == 0 ]] || fail "$1: stalls or channel failures: $(cat "$r")"
  # Batches carry many streams' tokens (each OpenSlot is a batch of its own, so
  # with few tokens per stream the mean says little: MIN_PER_BATCH 0 skips it).
  python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['records_per_batch'] > float(sys.argv[2]) else 1)" "$r" "${4:-5}" ||
    fail "$1: batches carry few records: $(field "$r" records_per_batch)"
}
# run NAME STREAMS TOKENS CONSUMER_OPTS PRODUCER_OPTS [MIN_PER_BATCH]
run() {
  local name=$1 streams=$2 tokens=$3 copts=$4 popts=$5 min_per_batch=${6:-5}
  rm -f "$logs/$name.handles"
  # The options are words with quotes (an --eal value): eval splits them as written.
  eval "bg 1 \"\$logs/\$name.c\" \"\$rf\" mux-consume 198.18.0.1:7600 \"\$logs/\$name.handles\" --streams $streams --tokens $tokens --json --timeout 60 $copts"
  local cpid=${LAB_PIDS[-1]}
  wait_for 20 test -s "$logs/$name.handles" || { fail "$name: no handles: $(cat "$logs/$name.c")"; return; }
  eval "on 2 \"\$rf\" mux-produce 198.18.0.2:7600 198.18.0.1:7600 \"\$logs/\$name.handles\" --tokens $tokens --json $popts" >"$logs/$name.p" 2>&1 ||
    fail "$name: the producer failed: $(tail -n 3 "$logs/$name.p")"
  wait "$cpid"
  grep '^{' "$logs/$name.c" | tail -n 1 >"$logs/$name.json"
  check_run "$name" "$streams" "$tokens" "$min_per_batch"
  log "$name: $(cat "$logs/$name.json")"
}

log "kernel: 300 streams x 200 tokens, Manual flush after every decode step"
run kernel 300 200 "" ""
log "kernel: Auto flush (on admission), credit 16 (many credit round trips)"
run auto 100 300 "--flush auto --credit 16 --no-tickets" "--flush auto --credit 16"
# Streams open on their handles' tickets (no ATTACH), or, with --no-tickets, by ATTACH.
for want in "kernel 300 0" "auto 0 100"; do
  read -r name tickets attaches <<<"$want"
  [[ $(field "$logs/$name.json" tickets_claimed) == "$tickets" && $(field "$logs/$name.json" attaches_answered) == "$attaches" ]] ||
    fail "$name: want $tickets streams opened on tickets and $attaches by ATTACH: $(cat "$logs/$name.json")"
done
log "kernel: one stream, hot workers (--idle hot), the reader blocked in recv applying its channel"
run hot 1 300 "--idle hot" "--idle hot --rate 500" 0  # one stream: a token per batch
python3 -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['applied_by_readers'] > 0 else 1)" "$logs/hot.json" ||
  fail "hot: no channel record applied by the reader: $(cat "$logs/hot.json")"

if have_dpdk; then
  sock="$logs/memif.sock"
  eal() { echo "-l $1 --no-huge -m 256 --no-pci --no-shconf --file-prefix ${LAB_PREFIX}$2$RANDOM --vdev net_memif0,role=$2,socket=$sock,socket-abstract=no"; }
  log "DPDK net_memif: 300 streams x 200 tokens"
  run memif 300 200 "--backend dpdk --dpdk-ip 198.18.1.1 --eal '$(eal 0 server)'" "--backend dpdk --dpdk-ip 198.18.1.2 --eal '$(eal 1 client)'"
  # net_af_xdp: one process per interface, so each host gets a second veth
  # on the bridge for its DPDK port (control stays on eth0, the kernel's).
  for n in 1 2; do
    ip link add "${LAB_PREFIX}x$n" netns "$(host $n)" type veth peer name "${LAB_PREFIX}y$n" netns "${LAB_PREFIX}br"
    ip -n "${LAB_PREFIX}br" link set "${LAB_PREFIX}y$n" master br0 up
    on $n ip link set "${LAB_PREFIX}x$n" name "x$n"
    on $n ip link set "x$n" up
    wait_for 5 link_up $n "x$n" || echo "mux_lab: x$n on h$n has no carrier" >&2
  done
  log "DPDK net_af_xdp: 100 streams x 100 tokens, paced"
  run af_xdp 100 100 "--backend dpdk --pmd af_xdp --iface x1 --dpdk-ip 198.18.0.101" \
    "--backend dpdk --pmd af_xdp --iface x2 --dpdk-ip 198.18.0.102 --rate 200"
  grep -q '"data_path":"dpdk net_af_xdp' "$logs/af_xdp.json" || fail "af_xdp: not on net_af_xdp: $(cat "$logs/af_xdp.json")"
else
  log "DPDK: not in this build (skipped)"
fi
# Every mux run's channel carried its batches by UDP (not the channel's TCP
# catch-up): datagrams came, and no batch came in a DATA frame by TCP. (How
# many datagrams is the kernel's: a consumer descheduled while the producer
# sends gets the run GRO-merged into a handful.)
for r in "$logs"/kernel.json "$logs"/auto.json "$logs"/hot.json "$logs"/memif.json "$logs"/af_xdp.json; do
  [[ -s $r ]] || continue
  python3 -c "import json,sys; c = json.load(open(sys.argv[1]))['channel']; sys.exit(0 if c['datagrams'] > 0 and c['tcp_records'] == 0 else 1)" "$r" ||
    fail "$(basename "$r" .json): the channel's batches did not come by UDP: $(cat "$r")"
done

log "descriptors: 4096 streams over the mux under ulimit -n 1024 (O(peers) sockets)"

rm -f "$logs/lim.handles"
bg 1 "$logs/lim.c" bash -c 'ulimit -n 1024 && exec "$0" "$@"' "$rf" mux-consume 198.18.0.1:7600 "$logs/lim.handles" \
  --streams 4096 --tokens 3 --json --timeout 60
cpid=${LAB_PIDS[-1]}
wait_for 20 test -s "$logs/lim.handles" || fail "lim: no handles: $(tail -n 2 "$logs/lim.c")"
on 2 bash -c 'ulimit -n 1024 && exec "$0" "$@"' "$rf" mux-produce 198.18.0.2:7600 198.18.0.1:7600 "$logs/lim.handles" \
  --tokens 3 --json >"$logs/lim.p" 2>&1 || fail "lim: the mux producer failed under ulimit -n 1024: $(tail -n 2 "$logs/lim.p")"
wait "$cpid" || fail "lim: the mux consumer failed under ulimit -n 1024: $(tail -n 2 "$logs/lim.c")"
grep '^{' "$logs/lim.c" | tail -n 1 >"$logs/lim.json"
check_run lim 4096 3 0
fds=$(field "$logs/lim.json" fds)
((fds < 64)) || fail "lim: the consumer holds $fds descriptors for 4096 streams from one peer"
log "the per-stream path under ulimit -n 1024: it runs out near 1000 streams, says so, and nothing wedges"
rm -f "$logs/ps.handles"
bg 1 "$logs/ps.c" bash -c 'ulimit -n 1024 && exec "$0" "$@"' "$rf" mux-consume 198.18.0.1:7600 "$logs/ps.handles" \
  --streams 2000 --tokens 3 --json --timeout 15 --no-mux
cpid=${LAB_PIDS[-1]}
wait_for 20 test -s "$logs/ps.handles" || fail "ps: no handles"
if on 2 bash -c 'ulimit -n 1024 && exec "$0" "$@"' "$rf" mux-produce 198.18.0.2:7600 198.18.0.1:7600 "$logs/ps.handles" \
  --tokens 3 --json --no-mux >"$logs/ps.p" 2>&1; then
  fail "ps: 2000 per-stream connections under ulimit -n 1024 did not fail"
fi
grep -q "Too many open files\|max_connections\|refused\|reset" "$logs/ps.p" ||
  fail "ps: the producer's error does not say why: $(tail -n 2 "$logs/ps.p")"
# The consumer is not wedged: it ends at its timeout with a report (the streams that never attached are short).
wait "$cpid"
grep -q '^{' "$logs/ps.c" || fail "ps: the consumer wedged (no report at its timeout): $(tail -n 2 "$logs/ps.c")"
log "ps: $(tail -n 1 "$logs/ps.p")"

log "head of line: stream 0's reader takes a token every 20 ms; the other 19 finish first, whole and in order"
run slow 20 100 "--slow-stream 20 --credit 16" "--rate 100 --credit 16"
[[ -s $logs/slow.json && $(field "$logs/slow.json" finished_before_slow) == 19 ]] ||
  fail "slow: $(field "$logs/slow.json" finished_before_slow) of 19 others finished before the slow stream (a slow reader held them)"

log "the node's /metrics while it streams: promtool accepts it, and the counters move"
rm -f "$logs/met.handles"
bg 1 "$logs/met.c" "$rf" mux-consume 198.18.0.1:7600 "$logs/met.handles" --streams 10 --tokens 400 --json --timeout 30 \
  --metrics 198.18.0.1:9470
cpid=${LAB_PIDS[-1]}
wait_for 20 test -s "$logs/met.handles" || fail "met: no handles"
bg 2 "$logs/met.p" "$rf" mux-produce 198.18.0.2:7600 198.18.0.1:7600 "$logs/met.handles" --tokens 400 --rate 50 --json
# Early in the 8 s run: the scrape and top's two reads (1.2 s apart) must
# find both nodes alive however slow a loaded machine makes the steps between.
wait_for 10 grep -q "streams attached" "$logs/met.p" || fail "met: the producer did not attach: $(cat "$logs/met.p")"
sleep 1.2
# The channel rings are where the leftover check at the end looks (both nodes' are in /dev/shm now).
ls /dev/shm | grep -q "mux-in-" && ls /dev/shm | grep -q "mux-out-" ||
  fail "met: no channel rings in /dev/shm mid-run (the leftover check would see nothing): $(ls /dev/shm | head)"
on 2 python3 -c "import urllib.request; print(urllib.request.urlopen('http://198.18.0.1:9470/metrics', timeout=5).read().decode(), end='')" \
  >"$logs/met.prom" 2>&1 || fail "met: no scrape: $(head -n 3 "$logs/met.prom")"
# ringfire top sees both nodes (their counters files), the consumer's records moving.
"$rf" top --once --interval 1200ms >"$logs/met.top" 2>&1
grep -Eq "^[0-9]+ +mux +198.18.0.1:7600 +consumer kernel +[1-9][0-9]* " "$logs/met.top" ||
  fail "met: ringfire top shows no moving mux consumer: $(cat "$logs/met.top")"
grep -Eq "^[0-9]+ +mux +198.18.0.2:7600 +producer kernel " "$logs/met.top" || fail "met: ringfire top shows no mux producer"
wait "$cpid" || fail "met: the run failed: $(tail -n 2 "$logs/met.c")"
if command -v promtool >/dev/null; then
  promtool check metrics <"$logs/met.prom" >"$logs/met.promtool" 2>&1 || fail "met: promtool: $(head -n 3 "$logs/met.promtool")"
fi
got=$(awk '$1 == "ringfire_mux_records_received_total" {print $2}' "$logs/met.prom")
[[ -n $got ]] && ((got > 0 && got < 4000)) || fail "met: records received mid-run '$got' (want some of the 4000)"
grep -q '^ringfire_mux_info{path="kernel"} 1' "$logs/met.prom" || fail "met: no ringfire_mux_info for the kernel path"
grep -q '^ringfire_mux_rejected_total{reason="generation_mismatch"} 0' "$logs/met.prom" || fail "met: no rejection counters"

log "a producer killed -9 mid-stream: every stream ends dropped, once"
rm -f "$logs/kill.handles"
bg 1 "$logs/kill.c" "$rf" mux-consume 198.18.0.1:7600 "$logs/kill.handles" --streams 50 --tokens 100000 --json --timeout 30
cpid=${LAB_PIDS[-1]}
wait_for 20 test -s "$logs/kill.handles" || fail "kill: no handles"
bg 2 "$logs/kill.p" "$rf" mux-produce 198.18.0.2:7600 198.18.0.1:7600 "$logs/kill.handles" --tokens 100000 --rate 100 --json
ppid=${LAB_PIDS[-1]}
wait_for 20 grep -q "streams attached" "$logs/kill.p" || fail "kill: the producer did not attach: $(cat "$logs/kill.p")"
sleep 1
kill -KILL "$ppid"
wait "$ppid" 2>/dev/null
# Its egress ring: a killed process cleans nothing (seen here, as the check at the end would), so the test does.
ls /dev/shm/rf"$ppid"-mux-out-* >/dev/null 2>&1 || fail "kill: the killed producer's egress ring is not where the leftover check looks"
rm -f /dev/shm/rf"$ppid"-mux-*
wait "$cpid"
grep '^{' "$logs/kill.c" | tail -n 1 >"$logs/kill.json"
if [[ -s $logs/kill.json ]]; then
  [[ $(field "$logs/kill.json" dropped) == 50 && $(field "$logs/kill.json" finished) == 0 ]] ||
    fail "kill: want 50 dropped, 0 finished: $(cat "$logs/kill.json")"
  (( $(field "$logs/kill.json" tokens) > 0 )) || fail "kill: no token arrived before the kill"
  [[ $(field "$logs/kill.json" out_of_order) == 0 ]] || fail "kill: out of order: $(cat "$logs/kill.json")"
else
  fail "kill: no report: $(tail -n 3 "$logs/kill.c")"
fi

# A producer host that goes silent (its link cut: no FIN, no reset) on each
# path: the mux finds it by the channel's heartbeats (the watchdog), the
# per-stream path by TCP keepalive (--silent-peer-ms 3000 here). Every
# stream ends dropped well before the consumer's 30 s timeout; before
# keepalive, the per-stream consumer waited for that timeout with every
# stream still open.
for mode in "" "--no-mux"; do
  name=silent${mode:+-per-stream}
  log "$name: the producer's host goes silent mid-stream"
  rm -f "$logs/$name.handles"
  # shellcheck disable=SC2086
  bg 1 "$logs/$name.c" "$rf" mux-consume 198.18.0.1:7600 "$logs/$name.handles" --streams 5 --tokens 100000 --json --timeout 30 \
    --silent-peer-ms 3000 $mode
  cpid=${LAB_PIDS[-1]}
  wait_for 20 test -s "$logs/$name.handles" || fail "$name: no handles"
  # shellcheck disable=SC2086
  bg 2 "$logs/$name.p" "$rf" mux-produce 198.18.0.2:7600 198.18.0.1:7600 "$logs/$name.handles" --tokens 100000 --rate 100 --json \
    --silent-peer-ms 3000 $mode
  ppid=${LAB_PIDS[-1]}
  wait_for 20 grep -q "streams attached" "$logs/$name.p" || fail "$name: the producer did not attach: $(cat "$logs/$name.p")"
  sleep 1
  on 2 ip link set eth0 down
  wait "$cpid"
  on 2 ip link set eth0 up
  stop_pid "$ppid"
  grep '^{' "$logs/$name.c" | tail -n 1 >"$logs/$name.json"
  if [[ -s $logs/$name.json ]]; then
    [[ $(field "$logs/$name.json" dropped) == 5 && $(field "$logs/$name.json" finished) == 0 ]] ||
      fail "$name: want 5 dropped, 0 finished: $(cat "$logs/$name.json")"
    (( $(field "$logs/$name.json" tokens) > 0 )) || fail "$name: no token arrived before the silence"
  else
    fail "$name: no report: $(tail -n 3 "$logs/$name.c")"
  fi
done
ls /dev/shm | grep -q "mux-" && fail "channel rings left behind: $(ls /dev/shm | grep mux-)"

lab_finish mux_lab_test "$logs"/*.c "$logs"/*.p
