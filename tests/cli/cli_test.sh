#!/usr/bin/env bash
# cli_test.sh — the `ringfire` command as an operator meets it: bad input
# fails with a message that says what to change (exit 2), a publisher and two
# readers in separate processes verify every record, stat shows the readers.
# The example configs in deploy/configs pass `ringfire run --check`.
# Usage: cli_test.sh PATH/TO/ringfire [deploy/configs]
set -u
rf=$1
configs=${2:-}
ring="rf-clitest-$$"
fails=0
cleanup() { "$rf" remove "$ring" >/dev/null 2>&1; "$rf" remove "$ring-blob" >/dev/null 2>&1; }
trap cleanup EXIT

# expect_fail CODE PATTERN CMD...: CMD exits CODE and stderr matches PATTERN.
expect_fail() {
  local code=$1 pattern=$2
  shift 2
  local err
  err=$("$@" 2>&1 >/dev/null)
  local rc=$?
  if [[ $rc -ne $code ]] || ! grep -q -- "$pattern" <<<"$err"; then
    echo "FAIL: '$*' exited $rc (want $code), stderr: $err (want /$pattern/)"
    fails=$((fails + 1))
  fi
}
expect_ok() {
  if ! "$@" >/tmp/rf-cli-$$.out 2>&1; then
    echo "FAIL: '$*' failed: $(cat /tmp/rf-cli-$$.out)"
    fails=$((fails + 1))
  fi
}

expect_fail 2 "unknown command" "$rf" frobnicate
expect_fail 2 "unknown option --bogus" "$rf" create "$ring" --bogus
expect_fail 2 "not a power of two" "$rf" create "$ring" --capacity 1000
expect_fail 2 "needs a value" "$rf" create "$ring" --capacity
expect_fail 2 "expected a whole number" "$rf" create "$ring" --capacity lots
expect_fail 2 "cannot open ring" "$rf" tail "$ring" --count 1
expect_fail 2 "usage: ringfire publish" "$rf" publish
expect_fail 2 "expected latest, oldest or a sequence" "$rf" tail "$ring" --from yesterday
expect_ok "$rf" create "$ring" --capacity 4096 --slot-size 64
expect_fail 2 "already exists" "$rf" create "$ring"
expect_fail 2 "expected spin, yield, backoff or hot" "$rf" tail "$ring" --idle hard
expect_ok "$rf" --help
expect_ok "$rf" tail --help

# A publisher and two readers in separate processes.
"$rf" tail "$ring" --from oldest --name a --idle-exit 2s --quiet >/tmp/rf-cli-$$.a 2>&1 &
ta=$!
"$rf" tail "$ring" --from oldest --name b --idle-exit 2s --quiet >/tmp/rf-cli-$$.b 2>&1 &
tb=$!
sleep 0.5
stat_during=$("$rf" stat "$ring")
json_during=$("$rf" stat "$ring" --json)
expect_ok "$rf" publish "$ring" --count 200000 --quiet
wait $ta; ra=$?
wait $tb; rb=$?
for f in a b; do
  line=$(tail -n 1 /tmp/rf-cli-$$.$f)
  read -r verified lost <<<"$(sed -E 's/tail: ([0-9]+) records verified, ([0-9]+) lost.*/\1 \2/' <<<"$line")"
  if [[ "$line" != *" 0 torn, 0 misplaced, last seq 199999" ]] || (( verified + lost != 200000 )); then
    echo "FAIL: reader $f: $line"
    fails=$((fails + 1))
  fi
done
[[ $ra -eq 0 && $rb -eq 0 ]] || { echo "FAIL: readers exited $ra $rb"; fails=$((fails + 1)); }
grep -q "readers     2 of 64" <<<"$stat_during" || { echo "FAIL: stat did not list 2 readers: $stat_during"; fails=$((fails + 1)); }
"$rf" stat "$ring" | grep -q "write_seq   200000" || { echo "FAIL: stat write_seq"; fails=$((fails + 1)); }
# stat --json: the same, for scripts (two readers named a and b while they ran).
python3 -c "import json,sys; j=json.loads(sys.argv[1]); assert sorted(r['name'] for r in j['readers']) == ['a', 'b'] and j['kind'] == 'fixed-slot' and j['writer']['state'] in ('none', 'gone', 'alive')" "$json_during" ||
  { echo "FAIL: stat --json during: $json_during"; fails=$((fails + 1)); }
python3 -c "import json,sys; j=json.loads(sys.argv[1]); assert j['write_seq'] == 200000 and j['capacity'] > 0" "$("$rf" stat "$ring" --json)" ||
  { echo "FAIL: stat --json write_seq"; fails=$((fails + 1)); }

# --unchecked: sequence and stamp only, no checksum (a benchmark publisher's
# records): 1,000 of them land, and tail, which checks sums, finds them torn.
expect_ok "$rf" create "$ring-u" --capacity 4096 --slot-size 64
expect_ok "$rf" publish "$ring-u" --count 1000 --unchecked --quiet
"$rf" stat "$ring-u" | grep -q "write_seq   1000" || { echo "FAIL: stat write_seq after --unchecked"; fails=$((fails + 1)); }
out=$("$rf" tail "$ring-u" --from oldest --idle-exit 200ms --quiet)
[[ "$out" == *"0 records verified, 0 lost, 0 holes skipped, 1000 torn"* ]] ||
  { echo "FAIL: --unchecked records should carry no checksum: $out"; fails=$((fails + 1)); }
"$rf" remove "$ring-u" >/dev/null

# Blob rings: variable-size records verified the same way.
expect_ok "$rf" create "$ring-blob" --blob --capacity 1024 --arena 16Mi
expect_fail 2 "min-size" "$rf" publish "$ring-blob" --max-size 8Mi
expect_ok "$rf" publish "$ring-blob" --count 5000 --min-size 24 --max-size 4000 --quiet
out=$("$rf" tail "$ring-blob" --from oldest --idle-exit 200ms --quiet)
[[ "$out" == *"1024 records verified, 0 lost, 0 holes skipped, 0 torn, 0 misplaced, last seq 4999"* ]] ||
  { echo "FAIL: blob tail: $out"; fails=$((fails + 1)); }

# Backend options: EAL arguments after -- go to DPDK, only with --backend dpdk.
expect_fail 2 "need --backend dpdk" "$rf" mirror 198.18.0.1:1 "$ring-m" -- -l 0
expect_fail 2 "with --eal or after --, not both" "$rf" mirror 198.18.0.1:1 "$ring-m" --backend dpdk --eal "-l 0" -- -l 0
rte_before=$([[ -e /var/run/dpdk/rte ]] && echo yes)
if ! "$rf" mirror 198.18.0.1:1 "$ring-m" --backend dpdk --eal x 2>&1 | grep -q "no DPDK backend"; then
  # The EAL failed (no hugepages) after making its runtime directory: gone again.
  [[ -n $rte_before || ! -e /var/run/dpdk/rte ]] || { echo "FAIL: a failed EAL start left /var/run/dpdk/rte"; fails=$((fails + 1)); }
  expect_fail 2 "EAL did not start with '-l 0 --no-such-flag'" "$rf" mirror 198.18.0.1:1 "$ring-m" --backend dpdk -- -l 0 --no-such-flag
fi

# Trust options: a key file that is missing, short or readable by others,
# and bounds out of range, fail at start-up saying what to change.
key=/tmp/rf-cli-$$.key
# A mirror that cannot start says why once, on stderr as its exit's reason
# (the session's log said it on stdout too).
out=$("$rf" mirror 127.0.0.1:1 "$ring-m" 2>&1)
rc=$?
if [[ $rc != 2 || $(grep -c "cannot reach source 127.0.0.1:1" <<<"$out") != 1 ]]; then
  echo "FAIL: an unreachable source exited $rc and said: $out (want exit 2 and the reason once)"
  fails=$((fails + 1))
fi
expect_fail 2 "counters-dir /nonexistent is not a directory" "$rf" mirror 127.0.0.1:1 "$ring-m" --counters-dir /nonexistent
expect_fail 2 "counters-dir /nonexistent is not a directory" "$rf" serve "$ring" --listen 127.0.0.1:1 --counters-dir /nonexistent
expect_fail 2 "psk-file /nonexistent" "$rf" mirror 198.18.0.1:1 "$ring-m" --psk-file /nonexistent
printf 'short' >"$key"; chmod 600 "$key"
expect_fail 2 "ringfire keygen" "$rf" mirror 198.18.0.1:1 "$ring-m" --psk-file "$key"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$key"; chmod 644 "$key"
expect_fail 2 "chmod 600" "$rf" serve "$ring" --listen 198.18.0.1:1 --psk-file "$key"
expect_fail 2 "a number of copies (1 to 16) or auto" "$rf" serve "$ring" --listen 198.18.0.1:1 --udp 0 --dup sometimes
expect_fail 2 "dup auto acts on unicast mirrors: give --udp PORT" "$rf" serve "$ring" --listen 198.18.0.1:1 --dup auto
expect_fail 2 "interval: from 100ms to 1h" "$rf" top --interval 18446744073s --once  # wrapped to a busy loop (helper-40)
expect_fail 2 "health-interval: between 1ms and 1s" "$rf" mirror 198.18.0.1:1 "$ring-m" --health-interval 2s
expect_fail 2 "health-interval: at most half of --peer-timeout" "$rf" mirror 198.18.0.1:1 "$ring-m" --health-interval 1s --peer-timeout 1s
# keygen: a key file the peers take (mode 600, 64 hex digits), never an
# existing one overwritten unless asked, and a new key each time.
gen=/tmp/rf-cli-$$.gen
expect_ok "$rf" keygen "$gen"
[[ $(stat -c %a "$gen" 2>/dev/null) == 600 ]] || { echo "FAIL: keygen's file is mode $(stat -c %a "$gen")"; fails=$((fails + 1)); }
grep -Eqx '[0-9a-f]{64}' "$gen" || { echo "FAIL: keygen wrote $(wc -c <"$gen") bytes, not 64 hex digits"; fails=$((fails + 1)); }
first_key=$(cat "$gen")
expect_fail 2 "exists: keep it, or replace it with --force" "$rf" keygen "$gen"
[[ $(cat "$gen") == "$first_key" ]] || { echo "FAIL: a refused keygen changed the key"; fails=$((fails + 1)); }
expect_ok "$rf" keygen "$gen" --force
[[ $(cat "$gen") != "$first_key" && $(stat -c %a "$gen") == 600 ]] || { echo "FAIL: keygen --force kept the key or its mode"; fails=$((fails + 1)); }
ls /tmp/rf-cli-$$.gen.new-* >/dev/null 2>&1 && { echo "FAIL: keygen --force left its temporary file"; fails=$((fails + 1)); }
expect_fail 2 "cannot create" "$rf" keygen /nonexistent-dir/k
rm -f "$gen"
expect_fail 2 "max-connections: between 1 and 4096" "$rf" serve "$ring" --listen 198.18.0.1:1 --max-connections 0
expect_fail 2 "slow-mirror-pct: between 1 and 100" "$rf" serve "$ring" --listen 198.18.0.1:1 --slow-mirror-pct 0
expect_fail 2 "at least 500ms" "$rf" serve "$ring" --listen 198.18.0.1:1 --peer-timeout 10ms
expect_fail 2 "heartbeat-max-us must be at least" "$rf" serve "$ring" --listen 198.18.0.1:1 --heartbeat-max-us 10
expect_fail 2 "accept-from" "$rf" mirror 198.18.0.1:1 "$ring-m" --accept-from not-an-address
expect_fail 2 "peer-timeout must be at least 500ms" "$rf" mirror 198.18.0.1:1 "$ring-m" --peer-timeout 1ms
expect_fail 2 "metrics not-an-address" "$rf" mirror 198.18.0.1:1 "$ring-m" --metrics not-an-address
expect_fail 2 "metrics 1.2.3" "$rf" serve "$ring" --listen 198.18.0.1:1 --metrics 1.2.3

# The example configs are valid as shipped (their rings made here, under
# per-run names: a serve's ring must exist, unless a mirror of the same
# config writes it — a hub's serve waits for it).
if [[ -n $configs ]]; then
  n=0
  for conf in "$configs"/*.toml; do
    sed -E "s|^ring = \"([^\"]*)\"|ring = \"$ring-cfg-\1\"|" "$conf" >/tmp/rf-cli-$$.toml
    for r in $(sed -nE 's/^ring = "([^"]*)".*/\1/p' /tmp/rf-cli-$$.toml | sort -u); do
      "$rf" create "$r" --capacity 1024 >/dev/null 2>&1
    done
    # A hub's ring is the mirror's to create: remove it again.
    grep -q '^\[\[mirror\]\]' /tmp/rf-cli-$$.toml &&
      for r in $(awk '/^\[\[mirror\]\]/{m=1} /^\[\[serve\]\]/{m=0} m && /^ring = /{print $3}' /tmp/rf-cli-$$.toml | tr -d '"'); do
        "$rf" remove "$r" >/dev/null 2>&1
      done
    expect_ok "$rf" run /tmp/rf-cli-$$.toml --check
    n=$((n + 1))
  done
  for r in /dev/shm/"$ring"-cfg-*; do [[ -e $r ]] && "$rf" remove "$(basename "$r")" >/dev/null 2>&1; done
  (( n >= 3 )) || { echo "FAIL: only $n configs in $configs"; fails=$((fails + 1)); }
  # A serve of a ring nobody writes is still refused.
  printf '[[port]]\nname = "p"\nip = "198.18.0.1"\n[[serve]]\nname = "a"\nring = "%s-none"\nlisten = "198.18.0.1:1"\n' \
    "$ring" >/tmp/rf-cli-$$.toml
  expect_fail 2 "toml:6: \[\[serve\]\] a, key .ring.: cannot open ring" "$rf" run /tmp/rf-cli-$$.toml --check
fi
# Two sessions of one config that cannot share a listen address, a group,
# or a mirror's ring: refused at --check with the line (the first failed at
# start after the sessions before it were up; the others ran wrong).
"$rf" create "$ring-dup" --capacity 1024 >/dev/null
dup() { printf '[[port]]\nname = "p"\nip = "198.18.0.1"\n%s\n' "$1" >/tmp/rf-cli-$$.toml; }
serve() { printf '[[serve]]\nname = "%s"\nring = "%s"\nlisten = "%s"\n%s\n' "$1" "$ring-dup" "$2" "$3"; }
dup "$(serve a 198.18.0.1:7400 '')
$(serve b 0.0.0.0:7400 '')"
expect_fail 2 "toml:11: serve a listens on 198.18.0.1:7400 already" "$rf" run /tmp/rf-cli-$$.toml --check
dup "$(serve a 198.18.0.1:7400 'multicast = "239.255.9.1:7401"')
$(serve b 198.18.0.1:7402 'multicast = "239.255.9.1:7401"')"
expect_fail 2 "serve a sends to 239.255.9.1:7401 already" "$rf" run /tmp/rf-cli-$$.toml --check
dup "$(printf '[[mirror]]\nname = "m%s"\nsource = "198.18.0.9:7400"\nring = "%s-m"\n' 1 "$ring" 2 "$ring")"
expect_fail 2 "mirror m1 writes /dev/shm/$ring-m already" "$rf" run /tmp/rf-cli-$$.toml --check
for bad in 0.0.0.0:7400 198.18.0.9:0 239.255.9.1:7400; do  # a source that can never answer (it retried for ever)
  dup "$(printf '[[mirror]]\nname = "m"\nsource = "%s"\nring = "%s-m"\n' "$bad" "$ring")"
  expect_fail 2 "source $bad: the serve's own address and listen port" "$rf" run /tmp/rf-cli-$$.toml --check
done
dup "$(serve a 198.18.0.1:7400 'multicast = "224.0.0.1:7401"')"
expect_fail 2 "is link-local control (224.0.0.0/24)" "$rf" run /tmp/rf-cli-$$.toml --check
dup "$(serve a 198.18.0.1:7400 'multicast = "239.255.9.1:0"')"
expect_fail 2 "give the group's port" "$rf" run /tmp/rf-cli-$$.toml --check
"$rf" remove "$ring-dup" >/dev/null

# A config that is no file: refused at once, not read without end (/dev/zero
# grew the reader past 460 MB); a directory is no config. A pipe is one
# (`run <(...)`), and a FIFO no one writes reads as empty, not waited on.
expect_fail 2 "/dev/zero: not a file" timeout 10 "$rf" run /dev/zero --check
expect_fail 2 "/tmp: not a file" timeout 10 "$rf" run /tmp --check
mkfifo /tmp/rf-cli-$$.fifo
expect_fail 2 "no \[\[port\]\]" timeout 10 "$rf" run /tmp/rf-cli-$$.fifo --check
printf '[[port]]\nname = "p"\nip = "198.18.0.1"\n' >/tmp/rf-cli-$$.toml
expect_ok timeout 10 "$rf" run <(cat /tmp/rf-cli-$$.toml) --check

# A ring larger than its filesystem's room fails at create, saying so (not
# with a SIGBUS in its writer on the first lap).
small=$(mktemp -d /tmp/rf-cli-small.XXXXXX)
if mount -t tmpfs -o size=1m none "$small" 2>/dev/null; then
  expect_fail 2 "no room for a ring of" "$rf" create "$ring-big" --dir "$small" --capacity 65536
  [[ -z $(ls "$small") ]] || { echo "FAIL: a refused ring left a file: $(ls "$small")"; fails=$((fails + 1)); }
  umount "$small"
else
  echo "cli_test: not root: the full-filesystem check is skipped"
fi
rmdir "$small"

# A careless operator's flags (helper-46): each refused at start-up, naming
# the flag, and nothing it names harmed.
expect_fail 2 "\-\-streams must be 1 to 16777216" "$rf" mux-consume 198.18.0.1:1 /tmp/rf-cli-$$.h --streams 4294967297
expect_fail 2 "\-\-credit must be 1 to 65535" "$rf" mux-consume 198.18.0.1:1 /tmp/rf-cli-$$.h --credit 4294967297
expect_fail 2 "\-\-iface needs \-\-backend dpdk" "$rf" mux-consume 198.18.0.1:1 /tmp/rf-cli-$$.h --iface eth0
expect_fail 2 "is over 1 GiB" "$rf" mux-produce 198.18.0.1:1 198.18.0.2:1 /tmp/rf-cli-$$.h --streams 100000 --tokens 100000
mkfifo -m 600 /tmp/rf-cli-$$.pipe
expect_fail 2 "not a regular file" timeout 10 "$rf" serve "$ring" --listen 198.18.0.1:1 --psk-file /tmp/rf-cli-$$.pipe
expect_fail 2 "not a regular file" "$rf" keygen /tmp/rf-cli-$$.pipe --force
[[ -p /tmp/rf-cli-$$.pipe ]] || { echo "FAIL: keygen --force replaced a pipe"; fails=$((fails + 1)); }
printf 'k%.0s' {1..40} >"$key"; chmod 640 "$key"
expect_fail 2 "(mode 640)" "$rf" serve "$ring" --listen 198.18.0.1:1 --psk-file "$key"
echo "not a ring" >/tmp/rf-cli-$$.text
expect_fail 2 "is not a ringfire ring" "$rf" remove /tmp/rf-cli-$$.text
expect_fail 2 "is not a ringfire ring" "$rf" create /tmp/rf-cli-$$.text --force
[[ -f /tmp/rf-cli-$$.text ]] || { echo "FAIL: remove deleted a file that is no ring"; fails=$((fails + 1)); }
expect_fail 2 "\-\-heartbeat-us: 100 to 10000000" "$rf" serve "$ring" --listen 198.18.0.1:1 --heartbeat-us 0
expect_fail 2 "\-\-heartbeat-us: 100 to 10000000" "$rf" serve "$ring" --listen 198.18.0.1:1 --heartbeat-us 20000000
expect_fail 2 "\-\-ttl: 1 to 255" "$rf" serve "$ring" --listen 198.18.0.1:1 --ttl 0
expect_fail 2 "\-\-mtu: 64 to 65507" "$rf" serve "$ring" --listen 198.18.0.1:1 --mtu 63
expect_fail 2 "a sequence is below 2^62" "$rf" tail "$ring" --from 9223372036854775808
expect_fail 2 "the ring directory is empty" "$rf" create "$ring-nodir" --dir ""
expect_fail 2 "\-\-readers: 1 to 65536" "$rf" create "$ring-noreaders" --readers 0
expect_fail 2 "\-\-dir is empty" "$rf" mirror 198.18.0.1:1 "$ring-m" --dir ""
expect_fail 2 "control character" "$rf" create "$ring"$'\nx'
expect_fail 2 "expected an IPv4 address" "$rf" serve "$ring" --listen 1.2.3:7000
printf 'ctl = "/tmp/rf-cli-%s.text"\n[[port]]\nname = "p"\nip = "198.18.0.1"\n' $$ >/tmp/rf-cli-$$.toml
expect_fail 2 "key 'ctl': /tmp/rf-cli-$$.text is there and is not a socket" "$rf" run /tmp/rf-cli-$$.toml --check
printf '[[port]]\nname = ["p"]\nip = "198.18.0.1"\n' >/tmp/rf-cli-$$.toml
expect_fail 2 "key 'name': takes one value, not an array" "$rf" run /tmp/rf-cli-$$.toml --check
printf '[[port]]\nname = "p"\nip = "198.18.0.1"\n[[mirror]]\nname = "m1"\nsource = "198.18.0.1:7400"\nring = "%s-loop"\n[[serve]]\nname = "s1"\nring = "%s-loop"\nlisten = "198.18.0.1:7400"\n' "$ring" "$ring" >/tmp/rf-cli-$$.toml
expect_fail 2 "mirror m1 mirrors serve s1 of this config, which serves the ring m1 writes: a loop" "$rf" run /tmp/rf-cli-$$.toml --check
# A serve on every address and a mirror of one of this host's own: a loop too.
hostip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }')
if [[ -n $hostip ]]; then
  printf '[[port]]\nname = "p"\nip = "198.18.0.1"\n[[mirror]]\nname = "m1"\nsource = "%s:7400"\nring = "%s-loop"\n[[serve]]\nname = "s1"\nring = "%s-loop"\nlisten = "0.0.0.0:7400"\n' "$hostip" "$ring" "$ring" >/tmp/rf-cli-$$.toml
  expect_fail 2 "mirror m1 mirrors serve s1 of this config, which serves the ring m1 writes: a loop" "$rf" run /tmp/rf-cli-$$.toml --check
fi
# A path that loops (ELOOP) is no reason to abort: --check answers (it
# ended on an uncaught filesystem_error, exit 134: review helper-51).
mkdir -p /tmp/rf-cli-$$.loop && ln -sfn /tmp/rf-cli-$$.loop/l /tmp/rf-cli-$$.loop/l
printf '[[port]]\nname = "p"\nip = "198.18.0.1"\n[[serve]]\nname = "s1"\nring = "%s"\nlisten = "198.18.0.1:7400"\narchive = "/tmp/rf-cli-%s.loop/l/a"\n[[record]]\nname = "r1"\nring = "%s"\ndir = "/tmp/rf-cli-%s.loop/l/a"\n[[mirror]]\nname = "m1"\nsource = "198.18.0.9:7400"\nring = "/tmp/rf-cli-%s.loop/l/m"\n' "$ring" $$ "$ring" $$ $$ >/tmp/rf-cli-$$.toml
"$rf" run /tmp/rf-cli-$$.toml --check >/dev/null 2>&1
rc=$?
if (( rc != 0 && rc != 2 )); then echo "FAIL: run --check with looping paths exited $rc"; fails=$((fails + 1)); fi
rm -rf /tmp/rf-cli-$$.loop
expect_fail 2 "a multicast or broadcast address" "$rf" serve "$ring" --listen 224.1.1.1:7000
expect_fail 2 "counters-dir /nonexistent is not a directory" "$rf" top --counters-dir /nonexistent --once
[[ -f /tmp/rf-cli-$$.text ]] || { echo "FAIL: run removed the file at its ctl path"; fails=$((fails + 1)); }

rm -f /tmp/rf-cli-$$.*
if (( fails )); then echo "cli_test: $fails failed"; exit 1; fi
echo "cli_test: all passed"
