# lib.sh — the network-namespace lab, sourced by the lab tests: hosts are
# namespaces joined through veth pairs to a bridge in its own namespace.
# Addresses 198.18.0.0/24, groups 239.255.0.0/16, nothing else. Every name
# carries a per-run id; lab_down (run on every exit) kills only the PIDs
# this script started and deletes only its own namespaces.
#
#   lab_up N            hosts h1..hN (198.18.0.1..N), bridge with snooping off
#   on HOST CMD...      run CMD in a host
#   bg HOST LOG CMD...  run CMD in a host in the background, logging to LOG
#   lab_down            undo everything

LAB_ID=${LAB_ID:-$(printf '%05d' $(( $$ % 100000 )))}
LAB_PREFIX="rf${LAB_ID}"
LAB_PIDS=()
LAB_HOSTS=()

lab_skip() {
  echo "SKIP: $*"
  exit 77
}

# require_dpdk: skip (77) when $rf was built without the DPDK backend.
require_dpdk() {
  if "$rf" mirror 198.18.0.1:1 rf-probe --backend dpdk --eal --no-such-flag 2>&1 | grep -q "no DPDK backend"; then
    lab_skip "this build has no DPDK backend"
  fi
}

# have_dpdk: whether $rf was built with the DPDK backend.
have_dpdk() {
  ! "$rf" mirror 198.18.0.1:1 rf-probe --backend dpdk --eal --no-such-flag 2>&1 | grep -q "no DPDK backend"
}

# lab_logs TAG: sets $logs to a fresh log directory, removed on exit with
# the lab (kept when KEEP_LOGS is set). Call after lab_up.
lab_logs() {
  logs=$(mktemp -d "/tmp/rf-$1.XXXXXX")
  # The exit status is taken first: anything run before lab_down would
  # otherwise become the script's (a failing test exited 0).
  trap 'lab_rc=$?; [[ -n "${KEEP_LOGS:-}" ]] || rm -rf "$logs"; lab_down "$lab_rc"' EXIT
}

lab_require() {
  [[ $(id -u) -eq 0 ]] || lab_skip "the lab needs root (network namespaces)"
  command -v ip >/dev/null || lab_skip "iproute2 is missing"
  ip netns add "${LAB_PREFIX}probe" 2>/dev/null || lab_skip "cannot create network namespaces here"
  ip netns del "${LAB_PREFIX}probe"
}

lab_up() {
  local n=$1 br="${LAB_PREFIX}br"
  lab_require
  trap lab_down EXIT
  trap 'exit 130' INT TERM
  ip netns add "$br"
  ip -n "$br" link add br0 type bridge mcast_snooping 0 stp_state 0 forward_delay 0
  ip -n "$br" link set br0 up
  for i in $(seq 1 "$n"); do
    local h="${LAB_PREFIX}h$i"
    ip netns add "$h"
    LAB_HOSTS+=("$h")
    ip link add "${LAB_PREFIX}v$i" netns "$h" type veth peer name "${LAB_PREFIX}p$i" netns "$br"
    ip -n "$br" link set "${LAB_PREFIX}p$i" master br0 up
    ip -n "$h" link set lo up
    ip -n "$h" link set "${LAB_PREFIX}v$i" name eth0
    ip -n "$h" addr add "198.18.0.$i/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" route add 224.0.0.0/4 dev eth0
  done
  # Wait for carrier on every link (IPv4 only: IPv6 DAD does not matter).
  for i in $(seq 1 "$n"); do
    wait_for 5 link_up "$i" eth0 || echo "lab: h$i eth0 has no carrier" >&2
  done
}

# link_up HOST IF: the interface has carrier (its veth peer is up).
link_up() {
  ip -n "${LAB_PREFIX}h$1" -o link show "$2" 2>/dev/null | grep -q "state UP"
}

# direct_link L: a veth named dL straight between h1 (198.18.L.1/24) and h2
# (198.18.L.2/24), up, with carrier (the round-trip harnesses' links).
direct_link() {
  local l=$1 h
  ip link add "${LAB_PREFIX}d${l}a" netns "$(host 1)" type veth peer name "${LAB_PREFIX}d${l}b" netns "$(host 2)"
  on 1 ip link set "${LAB_PREFIX}d${l}a" name "d$l"
  on 2 ip link set "${LAB_PREFIX}d${l}b" name "d$l"
  for h in 1 2; do
    on $h ip addr add "198.18.$l.$h/24" dev "d$l"
    on $h ip link set "d$l" up
  done
  wait_for 5 link_up 1 "d$l"
}

host() { echo "${LAB_PREFIX}h$1"; }
on() {
  local h=$1
  shift
  ip netns exec "$(host "$h")" "$@"
}
bg() {
  local h=$1 log=$2
  shift 2
  ip netns exec "$(host "$h")" "$@" >"$log" 2>&1 &
  LAB_PIDS+=($!)
}

# ring_name TAG: a per-run ring name; lab_down removes every ring with the
# run's prefix (ring_name runs in a subshell, so nothing is recorded here).
ring_name() { echo "${LAB_PREFIX}-$1"; }

# stop_pid PID: SIGTERM one of our processes and wait for it.
stop_pid() {
  kill -TERM "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

# stop_since N: SIGTERM every process started since LAB_PIDS had N entries,
# then wait for them all.
stop_since() {
  local p
  for p in "${LAB_PIDS[@]:$1}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${LAB_PIDS[@]:$1}"; do wait "$p" 2>/dev/null; done
}

# lab_down [RC]: undo the lab and exit with RC (default: the last status).
lab_down() {
  local rc=${1:-$?}
  for p in "${LAB_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${LAB_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for h in "${LAB_HOSTS[@]}"; do ip netns del "$h" 2>/dev/null; done
  ip netns del "${LAB_PREFIX}br" 2>/dev/null
  rm -f /dev/shm/"${LAB_PREFIX}"-*
  # The counters files of our processes that were killed (a clean exit removes its own).
  for p in "${LAB_PIDS[@]}"; do rm -f /dev/shm/ringfire-"$p".counters /dev/shm/ringfire-"$p"-*.counters; done
  # EAL runtime directories of this run's own file prefixes (a DPDK process
  # that crashed or was killed leaves its own; all of ours have ended above).
  rm -rf /var/run/dpdk/"${LAB_PREFIX}"[a-z]*  # a letter follows: never a default rf<pid> of another process
  exit $rc
}

# wait_for SECONDS CMD...: poll CMD every 0.1 s until it succeeds.
wait_for() {
  local t=$1
  shift
  for _ in $(seq 1 $((t * 10))); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

# Test helpers: count failures, announce steps, and read a mirror's stats.
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
log() { echo "-- $*"; }
# check_copy SOURCE MIRROR COUNT: the mirror ring reads back COUNT records,
# none lost, torn or misplaced, and is byte for byte the source's ($rf).
check_copy() {
  local out
  out=$("$rf" tail "$2" --from oldest --idle-exit 300ms --quiet)
  [[ "$out" == "tail: $3 records verified, 0 lost, 0 holes skipped, 0 torn, 0 misplaced"* ]] ||
    fail "$2: $out"
  out=$("$rf" compare "$1" "$2" --exact) || fail "$2 is not a byte-for-byte copy: $out"
}

# publish_and_check HOST SOURCE COUNT TOTAL LOGDIR NAME...: publish COUNT
# records on HOST, wait for each mirror NAME (its log LOGDIR/NAME, its ring
# ring_name NAME) to reach TOTAL, and check each copy.
publish_and_check() {
  local h=$1 src=$2 count=$3 total=$4 logs=$5 m
  shift 5
  on "$h" "$rf" publish "$src" --count "$count" --rate 50k --quiet >/dev/null
  for m in "$@"; do
    wait_for 15 mirror_at "$logs/$m" "$total" || fail "$m did not reach $total: $(tail -n 1 "$logs/$m")"
  done
  for m in "$@"; do check_copy "$src" "$(ring_name "$m")" "$total"; done
}

# lab_finish NAME FILES...: the test's last words: on failures, the count and
# the last lines of each log named, and exit 1; else "NAME: all passed".
lab_finish() {
  local name=$1 f
  shift
  if (( fails )); then
    echo "$name: $fails failed"
    for f in "$@"; do echo "== $f"; tail -n 4 "$f"; done
    exit 1
  fi
  echo "$name: all passed"
}

# ctl_json HOST SOCKET EXPR: evaluate a Python expression over `ctl list`
# (j: the answer; s: sessions by name); prints its value ($rf).
ctl_json() {
  on "$1" "$rf" ctl "$2" list 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin); s = {e['name']: e for e in j['sessions']}
print($3)"
}

# mirror_stat LOGFILE NAME: a counter from the mirror's last stats line
# (e.g. "TCP frames", "datagrams").
mirror_stat() {
  grep -Eo "$2 [0-9]+" "$1" | tail -n 1 | awk '{print $NF}'
}
# by_udp LOGFILE [TCP_RECORDS_BEFORE]: since then, the mirror's DATA came by
# UDP, not repaired over TCP (fewer than 50 records in TCP-borne DATA; the
# heartbeats that answer HEALTH, ten a second, are not DATA): a fault-free
# data path that silently stalls would otherwise pass on NAK repair alone.
by_udp() {
  local now
  now=$(mirror_stat "$1" "TCP records")
  (( ${now:-999} - ${2:-0} < 50 ))
}
# udp_port HOST: the UDP port the ringfire mirror on HOST receives unicast on.
udp_port() { on "$1" ss -Huanp | grep ringfire | awk '{print $4}' | grep -Eo '[0-9]+$' | head -n 1; }
# mirror_at LOGFILE SEQ: the mirror's last stats line reports next seq >= SEQ.
mirror_at() {
  grep -Eo 'next seq [0-9]+' "$1" | tail -n 1 | awk -v s="$2" '{ok = $3 >= s} END {exit !ok}'
}
