#!/usr/bin/env bash
# wireshark_lab_test.sh — the Lua dissector (deploy/wireshark/ringfire.lua)
# run by tshark on a capture made here: a source and mirrors on two hosts
# producing every common frame kind — HELLO, GEOMETRY, MULTICAST, DATA by
# UDP and TCP, HEARTBEAT, NAK (50 % injected loss), HEALTH, PUNCH (a unicast
# mirror), a blob larger than a datagram (DATA on TCP) and a GAP (a mirror
# resuming behind a lapped ring), and the stream multiplexer's NODE, MUXCTL
# and STREAM frames (a mux channel and the per-stream path). Then field by field: what tshark decodes
# must be what was sent (magic, version, geometry, record sequences in
# order, the blob's length, the GAP's target), and any Lua error fails.
# Then captures that once broke it (wireshark_hostile.py): a TCP stream cut
# at random points, junk declaring 4 GiB, another protocol's connection,
# MAC state across two connections on the same ports.
# Usage: wireshark_lab_test.sh PATH/TO/ringfire LUA_FILE
set -u
rf=$1
lua=$(realpath "$2")
source "$(dirname "$0")/lib.sh"
command -v tshark >/dev/null || lab_skip "no tshark (apt-get install tshark)"
lab_up 2
lab_logs wireshark
fails=0
cap=$logs/cap.pcapng
bg 2 "$logs/tshark-capture" tshark -i eth0 -w "$cap" -q
capture_pid=${LAB_PIDS[-1]}
wait_for 10 test -s "$cap" || fail "the capture did not start: $(cat "$logs/tshark-capture")"

a=$(ring_name a) b=$(ring_name b) c=$(ring_name c)
"$rf" create "$a" --capacity 4096 >/dev/null
"$rf" create "$b" --blob --capacity 64 >/dev/null
"$rf" create "$c" --capacity 1024 >/dev/null
bg 1 "$logs/serve-a" "$rf" serve "$a" --listen 198.18.0.1:7400 --multicast 239.255.7.1:7401 --udp 7402 --from oldest --quiet
bg 1 "$logs/serve-b" "$rf" serve "$b" --listen 198.18.0.1:7410 --multicast 239.255.7.2:7411 --from oldest --quiet
bg 1 "$logs/serve-c" "$rf" serve "$c" --listen 198.18.0.1:7420 --multicast 239.255.7.3:7421 --from oldest --quiet
sleep 0.5
bg 2 "$logs/m-a" "$rf" mirror 198.18.0.1:7400 "$(ring_name ma)" --from oldest --loss 500 --seed 3
bg 2 "$logs/u-a" "$rf" mirror 198.18.0.1:7400 "$(ring_name ua)" --from oldest --unicast
bg 2 "$logs/m-b" "$rf" mirror 198.18.0.1:7410 "$(ring_name mb)" --from oldest
wait_for 10 grep -q "^mirror: 198" "$logs/m-a" || fail "the multicast mirror did not connect: $(tail -n 2 "$logs/m-a")"
on 1 "$rf" publish "$a" --count 2000 --rate 20k --quiet >/dev/null
on 1 "$rf" publish "$b" --count 3 --min-size 3000 --max-size 3000 --quiet >/dev/null
wait_for 20 mirror_at "$logs/m-a" 2000 || fail "the lossy mirror did not reach 2000: $(tail -n 1 "$logs/m-a")"
wait_for 20 mirror_at "$logs/u-a" 2000 || fail "the unicast mirror did not reach 2000: $(tail -n 1 "$logs/u-a")"
wait_for 20 mirror_at "$logs/m-b" 3 || fail "the blob mirror did not reach 3: $(tail -n 1 "$logs/m-b")"
# The GAP: a mirror of c stops at 100; c laps (5000 more into 1024 slots);
# the mirror resumes at 100 and the source answers GAP to what it holds.
on 1 "$rf" publish "$c" --count 100 --quiet >/dev/null
bg 2 "$logs/m-c" "$rf" mirror 198.18.0.1:7420 "$(ring_name mc)" --from oldest
wait_for 10 mirror_at "$logs/m-c" 100 || fail "the mirror of c did not reach 100"
stop_pid "${LAB_PIDS[-1]}"
on 1 "$rf" publish "$c" --count 5000 --quiet >/dev/null
bg 2 "$logs/m-c2" "$rf" mirror 198.18.0.1:7420 "$(ring_name mc)"
wait_for 10 mirror_at "$logs/m-c2" 5100 || fail "the resumed mirror of c did not reach 5100: $(tail -n 1 "$logs/m-c2")"
# The stream multiplexer: a mux channel (NODE, ATTACH, MUXCTL credit back),
# the per-stream path (STREAM frames), 3 streams of 20 tokens each, and a
# keyed channel (NODE with nonce and proof, AUTH step 3) whose streams open
# by ATTACH (--no-tickets: the first run's open on their handles' tickets,
# with no ATTACH at all).
head -c 48 /dev/urandom | base64 >"$logs/mux.key"
chmod 600 "$logs/mux.key"
run=0
for mode in "" "--no-mux" "--psk-file $logs/mux.key --no-tickets"; do
  run=$((run + 1))
  rm -f "$logs/handles"
  # shellcheck disable=SC2086
  bg 1 "$logs/mux-c$run" "$rf" mux-consume 198.18.0.1:7600 "$logs/handles" --streams 3 --tokens 20 --credit 8 --json $mode
  wait_for 10 test -s "$logs/handles" || fail "mux-consume $mode did not start"
  # shellcheck disable=SC2086
  on 2 "$rf" mux-produce 198.18.0.2:7600 198.18.0.1:7600 "$logs/handles" --tokens 20 --credit 8 --json $mode >"$logs/mux-p$run" 2>&1 ||
    fail "mux-produce $mode: $(tail -n 2 "$logs/mux-p$run")"
  wait "${LAB_PIDS[-1]}" || fail "mux-consume $mode: $(tail -n 2 "$logs/mux-c$run")"
done
sleep 0.5
stop_pid "$capture_pid"

# decode FILTER FIELD...: one line per frame matching FILTER, fields tab-separated.
decode() {
  local filter=$1
  shift
  local args=()
  for x in "$@"; do args+=(-e "$x"); done
  tshark -r "$cap" -X lua_script:"$lua" -Y "$filter" -T fields -E occurrence=a -E aggregator=, "${args[@]}" 2>>"$logs/tshark-errors"
}
kinds=$(decode ringfire ringfire.kind | tr ',' '\n' | sort -un | tr '\n' ' ')
for k in 1 2 3 4 5 6 7 8 10; do
  [[ " $kinds" == *" $k "* ]] || fail "no frame of kind $k decoded (kinds seen: $kinds)"
done
[[ $(decode 'ringfire.kind == 1' ringfire.hello.magic ringfire.hello.version | sort -u) == "0x524d4652"$'\t'"1" ]] ||
  fail "HELLO: $(decode 'ringfire.kind == 1' ringfire.hello.magic ringfire.hello.version | sort -u)"
decode 'ringfire.kind == 2' ringfire.geometry.capacity ringfire.geometry.slot_size | grep -q "^4096"$'\t'"64$" ||
  fail "GEOMETRY of a: $(decode 'ringfire.kind == 2' ringfire.geometry.capacity ringfire.geometry.slot_size)"
decode 'ringfire.kind == 7' ringfire.multicast.group ringfire.multicast.port | grep -q "^239.255.7.1"$'\t'"7401$" ||
  fail "MULTICAST of a: $(decode 'ringfire.kind == 7' ringfire.multicast.group ringfire.multicast.port)"
# DATA by UDP to a's group: each frame's records carry consecutive sequences from its seq.
decode 'ringfire.kind == 3 && ip.dst == 239.255.7.1' ringfire.seq ringfire.count ringfire.data.record_seq >"$logs/data"
python3 - "$logs/data" <<'PY' || fail "DATA record sequences: $(head -n 3 "$logs/data")"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
assert len(rows) > 10, len(rows)
seen = set()
for seqs, counts, recs in rows:
    seq, count = int(seqs.split(",")[0]), int(counts.split(",")[0])
    r = [int(x) for x in recs.split(",")]
    assert r[:count] == list(range(seq, seq + count)), (seq, count, r[:5])
    seen.update(r)
assert set(range(2000)) <= seen or len(seen) > 900, len(seen)  # half were dropped at the mirror, not on the wire
PY
decode 'ringfire.kind == 6' ringfire.seq ringfire.nak.last | head -n 1 | grep -Eq "^[0-9]+"$'\t'"[0-9]+$" || fail "no NAK decoded"
# The blob over TCP: 3000-byte records in DATA on b's connection.
decode 'ringfire.kind == 3 && tcp.srcport == 7410' ringfire.data.record_len | tr ',' '\n' | grep -qx 3000 ||
  fail "the 3000-byte blob over TCP: $(decode 'ringfire.kind == 3 && tcp.srcport == 7410' ringfire.data.record_len)"
gap=$(decode 'ringfire.kind == 4' ringfire.seq | head -n 1)
[[ -n $gap ]] && ((gap > 100 && gap <= 5100 - 1024 + 1024)) || fail "GAP: '$gap' (want the oldest c held, past 100)"
decode 'ringfire.kind == 8' ringfire.seq | grep -q . || fail "no PUNCH decoded"
decode 'ringfire.kind == 10' ringfire.health.next_seq | grep -q . || fail "no HEALTH decoded"
# ... with its count of the source's datagrams taken in (a whole number, above 0 once data flowed)
decode 'ringfire.kind == 10' ringfire.health.udp_datagrams | grep -Eq '^[1-9][0-9]*$' ||
  fail "no HEALTH udp_datagrams decoded: $(decode 'ringfire.kind == 10' ringfire.health.udp_datagrams | tail -n 2)"
# `_stream_batch` inside DATA (a mux channel's records), from a pcap built
# here byte by byte: an OpenSlot, two Data records, a CreditUpdate and a
# CloseSlot{terminal-sent}, every field decoded as written.
python3 - "$logs/batch.pcap" <<'PY'
import struct, sys
def rec(t, index, gen, fs, body): return struct.pack(">BIII", t, index << 8 | gen, fs, len(body)) + body
records = [rec(1, 5, 2, 0, struct.pack(">QQ", 0xA1, 0xB2)), rec(0, 5, 2, 0, b"hello"), rec(0, 5, 2, 1, b"world!"),
           rec(3, 7, 1, 0, struct.pack(">I", 9)), rec(2, 5, 2, 2, bytes([0]))]
batch = struct.pack(">BBHQI", 1, 0, len(records), 77, 3) + b"".join(records)
blob = struct.pack("<I", len(batch)) + batch
frame = struct.pack("<BBHIQ", 3, 0x2a, 1, len(blob), 40) + blob       # DATA, session 0x2a, 1 record, seq 40
udp = struct.pack(">HHHH", 7402, 7500, 8 + len(frame), 0) + frame
ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0, bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2])) + udp
eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + ip
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    f.write(struct.pack("<IIII", 1, 0, len(eth), len(eth)) + eth)
PY
got=$(tshark -r "$logs/batch.pcap" -X lua_script:"$lua" -T fields -E occurrence=a -E aggregator=, -e ringfire.session \
  -e ringfire.data.record_seq -e ringfire.batch.record_count -e ringfire.batch.peer_epoch -e ringfire.batch.batch_seq \
  -e ringfire.batch.type -e ringfire.batch.slot_index -e ringfire.batch.slot_generation -e ringfire.batch.frame_seq \
  -e ringfire.batch.anchor_id -e ringfire.batch.session_id -e ringfire.batch.credit_delta -e ringfire.batch.close_reason 2>/dev/null)
want=$'0x2a\t40\t5\t77\t3\t1,0,0,3,2\t5,5,5,7,5\t2,2,2,1,2\t0,0,1,0,2\t0x00000000000000a1\t0x00000000000000b2\t9\t0'
[[ $got == "$want" ]] || fail "_stream_batch in DATA: got '$got', want '$want'"

# The mux: NODE both ways (the producer's with its channel port), MUXCTL
# carrying CreditUpdates, and on the per-stream path 3 x 20 STREAM records
# then 3 terminals.
decode 'ringfire.kind == 15 && tcp.dstport == 7600' ringfire.node.flags ringfire.node.channel_port | grep -Eq "^0x0001"$'\t'"[1-9][0-9]*$" ||
  fail "NODE with a channel: $(decode 'ringfire.kind == 15' ringfire.node.flags ringfire.node.channel_port)"
decode 'ringfire.kind == 15 && tcp.srcport == 7600' ringfire.node.worker_id | grep -q "^0x" || fail "no NODE answer decoded"
# The channel's mirror presents its NODE's epoch as the HELLO's channel token (§1.2 bit 8, §5.1).
epochs=$(decode 'ringfire.kind == 15 && tcp.dstport == 7600 && ringfire.node.channel_epoch' ringfire.node.channel_epoch | sort -u)
tokens=$(decode 'ringfire.kind == 1 && ringfire.hello.channel == 1' ringfire.hello.channel_token | sort -u)
[[ -n $tokens ]] || fail "no HELLO with a channel token: $(decode 'ringfire.kind == 1' ringfire.hello.flags | sort -u)"
[[ -z $(comm -13 <(echo "$epochs") <(echo "$tokens")) ]] || fail "a HELLO's channel token ($tokens) that no NODE announced ($epochs)"
# Keyed: the producer's NODE (channel + keyed) with its nonce, the answer
# (keyed + proof) with nonce and proof, then the producer's AUTH step 3.
# Both ask for the control frame MAC (bit 3, §1.8.2).
decode 'ringfire.kind == 15 && tcp.dstport == 7600 && ringfire.node.nonce' ringfire.node.flags | grep -qx 0x000b ||
  fail "no keyed NODE from the producer: $(decode 'ringfire.kind == 15' ringfire.node.flags)"
decode 'ringfire.kind == 15 && tcp.srcport == 7600 && ringfire.node.proof' ringfire.node.flags ringfire.node.nonce |
  grep -Eq "^0x000e"$'\t'"[0-9a-f]{64}$" || fail "no keyed NODE answer with its proof: $(decode 'ringfire.kind == 15' ringfire.node.flags)"
decode 'ringfire.kind == 11 && tcp.dstport == 7600' ringfire.auth.step | grep -qx 3 || fail "no AUTH step 3 to the consumer"
# ... and every frame after step 3 shows its tag apart: the ATTACH, its answer, MUXCTL.
decode 'ringfire.kind == 9 && ringfire.frame_tag' ringfire.frame_tag | grep -Eq "^[0-9a-f]{32}$" ||
  fail "no MACed ATTACH after the keyed exchange: $(decode 'ringfire.kind == 9' ringfire.len ringfire.frame_tag | head -n 3)"
decode 'ringfire.kind == 16' ringfire.batch.type | tr ',' '\n' | grep -qx 3 ||
  fail "no CreditUpdate in MUXCTL: $(decode 'ringfire.kind == 16' ringfire.batch.type | head -n 3)"
decode 'ringfire.kind == 17' ringfire.stream.terminal | tr ',' '\n' >"$logs/stream-terminal"  # one value per STREAM frame
records=$(grep -Ecx 'False|0' "$logs/stream-terminal")
terminals=$(grep -Ecx 'True|1' "$logs/stream-terminal")
[[ $records == 60 && $terminals == 3 ]] || fail "STREAM: $records records and $terminals terminals, want 60 and 3"

# Captures that once broke the dissector (tests/lab/wireshark_hostile.py
# says how): every frame of a cut-up TCP stream decoded once; junk with a
# 4 GiB length marked and the connection after it decoded; another
# protocol's connection left alone; a MACed connection's unsealed REFUSE
# and the plain connection after it on the same ports read whole.
mkdir -p "$logs/hostile"
python3 "$(dirname "$0")/wireshark_hostile.py" "$logs/hostile" || fail "could not build the hostile captures"
hostile() {  # NAME FIELD...: tshark's fields from one capture, errors to its own file
  local name=$1; shift
  local args=()
  for e in "$@"; do args+=(-e "$e"); done
  tshark -r "$logs/hostile/$name.pcap" -X lua_script:"$lua" -T fields -E occurrence=a -E aggregator=, "${args[@]}" \
    2>>"$logs/hostile/errors" | sed '/^[[:space:]]*$/d'
}
n=$(hostile split ringfire.kind | tr ',' '\n' | grep -c .)
[[ $n == 200 ]] || fail "a TCP stream cut at random points: $n of 200 frames decoded"
[[ $(hostile trailing ringfire.kind | tr ',' '\n' | sort -n | uniq -c | awk '{print $2 "x" $1}' | paste -sd' ') == "1x1 5x22 13x1" ]] ||
  fail "junk in a connection: $(hostile trailing ringfire.kind | tr '\n' ' ')"
tshark -r "$logs/hostile/trailing.pcap" -X lua_script:"$lua" -V 2>/dev/null | grep -q "trailing bytes are not a frame" ||
  fail "the junk in a connection is not marked"
[[ $(hostile foreign frame.protocols data.len | grep -c ':tcp:data') == 11 ]] ||
  fail "another protocol's connection was taken as ringfire: $(hostile foreign frame.protocols | sort | uniq -c)"
[[ $(hostile later ringfire.kind | paste -sd'|') == "1|5,25,5" ]] || fail "a later version's kind: $(hostile later ringfire.kind | paste -sd'|')"
[[ $(hostile reuse ringfire.refuse.text ringfire.frame_tag | paste -sd'|') == "authentication failed: wrong key	|busy: the connection cap	" ]] ||
  fail "MAC state across connections: $(hostile reuse ringfire.kind ringfire.refuse.text ringfire.frame_tag | paste -sd'|')"
! grep -qi "bug\|error" "$logs/hostile/errors" || fail "tshark on the hostile captures: $(grep -i -m 3 'bug\|error' "$logs/hostile/errors")"

# No Lua error, no frame the dissector called malformed.
grep -v 'Running as user "root"' "$logs/tshark-errors" >"$logs/tshark-errors.real"
[[ ! -s $logs/tshark-errors.real ]] || fail "tshark said: $(head -n 3 "$logs/tshark-errors.real")"
errs=$(tshark -r "$cap" -X lua_script:"$lua" -V 2>&1 | grep -c -i "lua error\|Malformed ringfire")
[[ $errs == 0 ]] || fail "$errs Lua errors or malformed frames: $(tshark -r "$cap" -X lua_script:"$lua" -V 2>&1 | grep -i -m 3 'lua error\|Malformed ringfire')"
lab_finish wireshark_lab_test "$logs/tshark-capture"
