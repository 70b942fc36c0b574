#!/usr/bin/env bash
# systemd_test.sh — the unit and the daemon's side of it: ringfire@.service
# passes `systemd-analyze verify` with nothing to say (its ExecStart pointed
# at the built binary); `ringfire run` under a notify socket (as systemd
# would run it, in a lab host) says READY=1 with its status once its ports
# and sessions are up, pings WATCHDOG=1 at half WATCHDOG_USEC, and says
# STOPPING=1 on SIGTERM; a bad config never says READY.
# Usage: systemd_test.sh PATH/TO/ringfire UNIT_FILE
set -u
rf=$(realpath "$1")
unit=$2
source "$(dirname "$0")/../lab/lib.sh"
command -v systemd-analyze >/dev/null || lab_skip "no systemd-analyze (apt-get install systemd)"
fails=0

# 1. The unit, verified against the binary it would run.
work=$(mktemp -d /tmp/rf-systemd.XXXXXX)
trap 'rm -rf "$work"' EXIT
sed "s|/usr/local/bin/ringfire|$rf|g" "$unit" >"$work/ringfire@.service"
out=$(systemd-analyze verify "$work/ringfire@lab.service" 2>&1); rc=$?
[[ $rc -eq 0 && -z $out ]] || fail "systemd-analyze verify: rc $rc: $out"
# ... and it would say so: a broken copy is caught.
sed 's/^Type=notify/Type=notifyy/' "$work/ringfire@.service" >"$work/broken@.service"
out=$(systemd-analyze verify "$work/broken@lab.service" 2>&1)
[[ $out == *"service type"* ]] || fail "a broken unit passed verify: $out"

# 2. The daemon's notifications, in a lab host.
lab_up 1
lab_logs systemd
trap 'lab_rc=$?; rm -rf "$work"; [[ -n "${KEEP_LOGS:-}" ]] || rm -rf "$logs"; lab_down "$lab_rc"' EXIT
ring=$(ring_name sd)
"$rf" create "$ring" --capacity 4096 >/dev/null
printf 'ctl = "%s/sd.sock"\n[[port]]\nname = "p"\niface = "eth0"\n[[serve]]\nname = "s"\nring = "%s"\nlisten = "198.18.0.1:7400"\n' \
  "$logs" "$ring" >"$work/ok.toml"
# listen SOCKET OUT: collect notify datagrams into OUT, one per line.
python3 - "$work/notify.sock" "$work/notes" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(15)
with open(sys.argv[2], "w", buffering=1) as out:
    try:
        while True:
            out.write(s.recv(4096).decode().replace("\n", " | ") + "\n")
    except socket.timeout:
        pass
PY
listener=$!
wait_for 5 test -S "$work/notify.sock" || fail "the notify listener did not start"
NOTIFY_SOCKET=$work/notify.sock WATCHDOG_USEC=200000 bg 1 "$logs/daemon" "$rf" run "$work/ok.toml"
daemon=${LAB_PIDS[-1]}
wait_for 10 grep -q "^READY=1 | STATUS=1 ports, 1 sessions" "$work/notes" ||
  fail "no READY=1 with the status: $(cat "$work/notes") / $(tail -n 3 "$logs/daemon")"
sleep 1
pings=$(grep -c "^WATCHDOG=1" "$work/notes")
(( pings >= 5 && pings <= 20 )) || fail "WATCHDOG=1 $pings times in ~1 s at a 100 ms interval"
stop_pid "$daemon"
wait_for 5 grep -q "^STOPPING=1" "$work/notes" || fail "no STOPPING=1 on SIGTERM: $(tail -n 3 "$work/notes")"

# A config that does not start never says READY.
: >"$work/notes"
printf '[[port]]\nname = "p"\niface = "eth0"\nbogus = 1\n' >"$work/bad.toml"
NOTIFY_SOCKET=$work/notify.sock on 1 "$rf" run "$work/bad.toml" >/dev/null 2>&1; rc=$?
[[ $rc -eq 2 ]] || fail "a bad config: exit $rc, not 2"
sleep 0.2
! grep -q "READY=1" "$work/notes" || fail "a bad config said READY=1"
kill "$listener" 2>/dev/null; wait "$listener" 2>/dev/null
lab_finish systemd_test
