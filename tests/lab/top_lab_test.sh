#!/usr/bin/env bash
# top_lab_test.sh — `ringfire top` as an operator sees it, in a terminal
# (tmux): a source on h1 and a mirror on h2 streaming 10 k records/s; the
# live view shows both sessions with their rates and the mirror's ring, it
# refreshes (the counts move between two captures), and q quits it. The
# serve runs with --json: its per-second lines are JSON objects.
# Usage: top_lab_test.sh PATH/TO/ringfire
set -u
rf=$(realpath "$1")
source "$(dirname "$0")/lib.sh"
command -v tmux >/dev/null || lab_skip "no tmux (apt-get install tmux)"
lab_up 2
lab_logs top
fails=0
counters=$logs/counters
mkdir -p "$counters"
src=$(ring_name src) dst=$(ring_name dst)
"$rf" create "$src" --capacity 262144 >/dev/null
bg 1 "$logs/serve" "$rf" serve "$src" --listen 198.18.0.1:7400 --multicast 239.255.8.1:7401 --counters-dir "$counters" --json
sleep 0.3
bg 2 "$logs/mirror" "$rf" mirror 198.18.0.1:7400 "$dst" --counters-dir "$counters" --quiet
wait_for 10 grep -q "^mirror: 198" "$logs/mirror" || fail "the mirror did not connect: $(tail -n 2 "$logs/mirror")"
bg 1 "$logs/publish" "$rf" publish "$src" --rate 10k --duration 20s --quiet
session=rf-top-$$
tmux new-session -d -s "$session" -x 160 -y 20 "$rf top --counters-dir $counters"
trap 'lab_rc=$?; tmux kill-session -t "$session" 2>/dev/null; [[ -n "${KEEP_LOGS:-}" ]] || rm -rf "$logs"; lab_down "$lab_rc"' EXIT
sleep 2.5
first=$(tmux capture-pane -p -t "$session")
sleep 1.5
second=$(tmux capture-pane -p -t "$session")
echo "$second" >"$logs/screen"
grep -q "ringfire top — 2 session(s)" <<<"$second" || fail "no header with two sessions: $second"
# rate ROLE SCREEN: the REC/S column of that role's row (counted from the end: DETAIL has spaces).
rate() { awk -v r="$1" '$2 == r {print $(NF-6)}' <<<"$2" | head -n 1; }
for role in serve mirror; do
  r=$(rate $role "$second")
  [[ $r =~ ^[0-9]+$ ]] && ((r > 5000 && r < 15000)) || fail "$role's rate '$r' is not about 10 k/s: $second"
done
awk '$2 == "mirror" {print $3}' <<<"$second" | grep -q "$dst" || fail "the mirror row does not name its ring: $second"
grep -Eq "^[0-9]+ +serve .* 198.18.0.1:7400 kernel " <<<"$second" ||
  fail "the serve row does not show its listener and rung: $second"
[[ $first != "$second" ]] || fail "the view did not refresh"
# serve --json: each second's stats as one JSON object, every counter in it.
python3 -c "
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
assert len(lines) >= 3, len(lines)
last = lines[-1]
assert last['kind'] == 'serve' and 5000 < last['rec_per_s'] < 15000, last
assert last['counters']['serve.records'] > 20000 and 'refused.punch.bad_mac' in last['counters'], last['counters']
" "$logs/serve" || fail "serve --json lines: $(grep '^{' "$logs/serve" | tail -n 1)"
# A counters file's text is anyone's bytes: escape sequences in one (the
# serve's file copied under another tag, its detail a screen clear and a
# window title) reach the terminal as '?' (helper-40: they went raw).
serve_file=$(ls "$counters"/ringfire-"${LAB_PIDS[0]}"*.counters | head -n 1)
python3 -c "
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[216:256] = b'\x1b[2J\x1b]0;pwned\x07'.ljust(40, b'\0')
open(sys.argv[2], 'wb').write(b)
" "$serve_file" "$counters/ringfire-${LAB_PIDS[0]}-evil.counters"
once=$("$rf" top --once --counters-dir "$counters")
grep -q "?\[2J?\]0;pwned?" <<<"$once" || fail "top --once does not show the crafted detail as printable: $once"
! grep -q $'\x1b' <<<"$once" || fail "an escape byte from a counters file reached the terminal"
rm -f "$counters/ringfire-${LAB_PIDS[0]}-evil.counters"
tmux send-keys -t "$session" q
wait_for 3 bash -c "! tmux has-session -t $session 2>/dev/null" || fail "q did not quit"
lab_finish top_lab_test "$logs/serve" "$logs/mirror"
