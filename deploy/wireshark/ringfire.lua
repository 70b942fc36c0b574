-- ringfire.lua — a Wireshark/tshark dissector for ringfire's wire protocol
-- (proto/PROTOCOL.md): every ring-mirroring frame kind on UDP and TCP
-- (several frames per datagram or segment, TCP frames reassembled), the
-- bodies of each, the records inside DATA, and `_stream_batch` messages
-- (big-endian) where a DATA record holds one (a mux channel). On a keyed
-- TCP connection that negotiated the control frame MAC (PROTOCOL.md
-- §1.8.2: HELLO bit 7 and AUTH step 1's flag, or NODE bit 3 both ways),
-- every frame after AUTH step 2 (mirroring) or 3 (the mux) shows its
-- 16-byte tag apart from the body (not checked: the key is not here).
-- Install: copy to ~/.local/lib/wireshark/plugins/ (or run
--   tshark -X lua_script:deploy/wireshark/ringfire.lua -r capture.pcapng).
-- Found by heuristics on UDP and TCP: every frame of the datagram or
-- segment valid (a kind 1..18; on UDP, lengths that fill the datagram; on
-- TCP, a kind that travels there, a length within its kind's bound, the
-- flags and count its kind allows, and HELLO's and NODE's magic). A TCP
-- connection whose first segment holds less than a whole header (and, for
-- HELLO or NODE, its magic) is not recognised: "Decode As...
-- ringfire_tcp" (or ringfire_udp) forces the dissector on a port.

local rf = Proto("ringfire", "ringfire")

local kinds = {
  [1] = "HELLO", [2] = "GEOMETRY", [3] = "DATA", [4] = "GAP", [5] = "HEARTBEAT", [6] = "NAK",
  [7] = "MULTICAST", [8] = "PUNCH", [9] = "ATTACH", [10] = "HEALTH", [11] = "AUTH", [12] = "MAC",
  [13] = "REFUSE", [14] = "PROBE", [15] = "NODE", [16] = "MUXCTL", [17] = "STREAM", [18] = "TAG",
}
local refusals = {
  [1] = "malformed HELLO", [2] = "unsupported version", [3] = "schema mismatch",
  [4] = "authentication required", [5] = "authentication failed", [6] = "busy",
  [7] = "handshake timeout", [8] = "protocol violation", [9] = "too slow to read",
  [10] = "another node's channel",
}
local record_types = { [0] = "Data", [1] = "OpenSlot", [2] = "CloseSlot", [3] = "CreditUpdate", [4] = "SlotHeartbeat" }
local close_reasons = { [0] = "terminal-sent", [1] = "peer-gone", [2] = "unknown-slot", [3] = "protocol-error", [4] = "cancelled" }

local f = rf.fields
f.kind = ProtoField.uint8("ringfire.kind", "Kind", base.DEC, kinds)
f.flags = ProtoField.uint8("ringfire.flags", "Flags", base.HEX)
f.session = ProtoField.uint8("ringfire.session", "Session", base.HEX)
f.count = ProtoField.uint16("ringfire.count", "Count", base.DEC)
f.len = ProtoField.uint32("ringfire.len", "Body length", base.DEC)
f.seq = ProtoField.uint64("ringfire.seq", "Seq", base.DEC)
f.magic = ProtoField.uint32("ringfire.hello.magic", "Magic", base.HEX)
f.version = ProtoField.uint16("ringfire.hello.version", "Version", base.DEC)
f.hello_flags = ProtoField.uint16("ringfire.hello.flags", "HELLO flags", base.HEX)
f.hf_unicast = ProtoField.bool("ringfire.hello.unicast", "Can receive unicast", 16, nil, 0x0001)
f.hf_prefer = ProtoField.bool("ringfire.hello.prefer_unicast", "Prefers unicast", 16, nil, 0x0002)
f.hf_tcp = ProtoField.bool("ringfire.hello.tcp", "DATA on TCP", 16, nil, 0x0004)
f.hf_health = ProtoField.bool("ringfire.hello.health", "HEALTH", 16, nil, 0x0008)
f.hf_multi = ProtoField.bool("ringfire.hello.multi_range", "Multi-range NAKs", 16, nil, 0x0010)
f.hf_auth = ProtoField.bool("ringfire.hello.auth", "Authenticate", 16, nil, 0x0020)
f.hf_tag = ProtoField.bool("ringfire.hello.datagram_tag", "Checks a datagram tag", 16, nil, 0x0040)
f.hf_frame_mac = ProtoField.bool("ringfire.hello.frame_mac", "MAC control frames", 16, nil, 0x0080)
f.hf_channel = ProtoField.bool("ringfire.hello.channel", "Channel token", 16, nil, 0x0100)
f.channel_token = ProtoField.uint64("ringfire.hello.channel_token", "Channel token (the NODE's epoch)", base.HEX)
f.frame_tag = ProtoField.bytes("ringfire.frame_tag", "Frame MAC tag (ChaCha20-Poly1305)")
f.schema = ProtoField.uint64("ringfire.schema", "Schema", base.HEX)
f.challenge = ProtoField.bytes("ringfire.challenge", "Challenge")
f.capacity = ProtoField.uint64("ringfire.geometry.capacity", "Capacity", base.DEC)
f.slot_size = ProtoField.uint32("ringfire.geometry.slot_size", "Slot size", base.DEC)
f.ring_flags = ProtoField.uint32("ringfire.geometry.ring_flags", "Ring flags", base.HEX)
f.registry = ProtoField.uint32("ringfire.geometry.registry_size", "Registry size", base.DEC)
f.slots_offset = ProtoField.uint64("ringfire.geometry.slots_offset", "Slots offset", base.DEC)
f.arena_offset = ProtoField.uint64("ringfire.geometry.arena_offset", "Arena offset", base.DEC)
f.arena_size = ProtoField.uint64("ringfire.geometry.arena_size", "Arena size", base.DEC)
f.group = ProtoField.ipv4("ringfire.multicast.group", "Group")
f.port = ProtoField.uint16("ringfire.multicast.port", "Port", base.DEC)
f.mtu = ProtoField.uint16("ringfire.multicast.mtu", "MTU", base.DEC)
f.ttl = ProtoField.uint8("ringfire.multicast.ttl", "TTL", base.DEC)
f.features = ProtoField.uint16("ringfire.multicast.features", "Features", base.HEX)
f.token = ProtoField.uint64("ringfire.multicast.token", "Token", base.HEX)
f.data_ip = ProtoField.ipv4("ringfire.multicast.data_ip", "Data address")
f.mc_tag = ProtoField.uint64("ringfire.multicast.tag", "Datagram tag", base.HEX)
f.record = ProtoField.bytes("ringfire.data.record", "Record")
f.record_seq = ProtoField.uint64("ringfire.data.record_seq", "Record seq", base.DEC)
f.record_len = ProtoField.uint32("ringfire.data.record_len", "Record length", base.DEC)
f.nak_last = ProtoField.uint64("ringfire.nak.last", "Last missing", base.DEC)
f.nak_first = ProtoField.uint64("ringfire.nak.range_first", "Range first", base.DEC)
f.nak_range_last = ProtoField.uint64("ringfire.nak.range_last", "Range last", base.DEC)
f.nak_repeat = ProtoField.bool("ringfire.nak.repeat", "Repeat", 8, nil, 0x01)
f.h_next = ProtoField.uint64("ringfire.health.next_seq", "Next seq", base.DEC)
f.h_end = ProtoField.uint64("ringfire.health.known_end", "Known end", base.DEC)
f.h_holes = ProtoField.uint32("ringfire.health.holes", "Holes", base.DEC)
f.h_held = ProtoField.uint32("ringfire.health.held", "Held", base.DEC)
f.h_high = ProtoField.uint32("ringfire.health.held_high", "Held high water", base.DEC)
f.h_naks = ProtoField.uint64("ringfire.health.naks", "NAKs", base.DEC)
f.h_gaps = ProtoField.uint64("ringfire.health.gap_records", "GAP records", base.DEC)
f.h_drops = ProtoField.uint64("ringfire.health.rx_drops", "RX drops", base.DEC)
f.h_rejected = ProtoField.uint64("ringfire.health.rejected", "Rejected", base.DEC)
f.h_udp = ProtoField.uint64("ringfire.health.udp_datagrams", "UDP datagrams taken in", base.DEC)
f.auth_step = ProtoField.uint8("ringfire.auth.step", "Step", base.DEC)
f.auth_bytes = ProtoField.bytes("ringfire.auth.value", "Value")
f.auth_flags = ProtoField.uint8("ringfire.auth.flags", "Flags (step 1: bit 0 = frames MACed)", base.HEX)
f.refuse_reason = ProtoField.uint16("ringfire.refuse.reason", "Reason", base.DEC, refusals)
f.refuse_text = ProtoField.string("ringfire.refuse.text", "Text")
f.punch_counter = ProtoField.uint64("ringfire.punch.counter", "Counter", base.DEC)
f.attach_msg = ProtoField.uint8("ringfire.attach.message", "Message", base.DEC, { [1] = "request", [2] = "response" })
f.attach_tag = ProtoField.uint16("ringfire.attach.tag", "Tag", base.DEC)
f.attach_value = ProtoField.bytes("ringfire.attach.value", "Value")
f.b_version = ProtoField.uint8("ringfire.batch.mux_version", "Mux version", base.DEC)
f.b_count = ProtoField.uint16("ringfire.batch.record_count", "Record count", base.DEC)
f.b_epoch = ProtoField.uint64("ringfire.batch.peer_epoch", "Peer epoch", base.DEC)
f.b_seq = ProtoField.uint32("ringfire.batch.batch_seq", "Batch seq", base.DEC)
f.r_type = ProtoField.uint8("ringfire.batch.type", "Record type", base.DEC, record_types)
f.r_slot_index = ProtoField.uint32("ringfire.batch.slot_index", "Slot index", base.DEC)
f.r_slot_gen = ProtoField.uint8("ringfire.batch.slot_generation", "Slot generation", base.DEC)
f.r_frame_seq = ProtoField.uint32("ringfire.batch.frame_seq", "Frame seq", base.DEC)
f.r_len = ProtoField.uint32("ringfire.batch.len", "Body length", base.DEC)
f.r_anchor = ProtoField.uint64("ringfire.batch.anchor_id", "Anchor", base.HEX)
f.r_session = ProtoField.uint64("ringfire.batch.session_id", "Session", base.HEX)
f.r_reason = ProtoField.uint8("ringfire.batch.close_reason", "Close reason", base.DEC, close_reasons)
f.r_delta = ProtoField.uint32("ringfire.batch.credit_delta", "Credit delta", base.DEC)
f.node_worker = ProtoField.uint64("ringfire.node.worker_id", "Worker id", base.HEX)
f.node_flags = ProtoField.uint16("ringfire.node.flags", "Node flags", base.HEX)
f.node_epoch = ProtoField.uint64("ringfire.node.channel_epoch", "Channel epoch", base.HEX)
f.node_port = ProtoField.uint16("ringfire.node.channel_port", "Channel port", base.DEC)
f.node_nonce = ProtoField.bytes("ringfire.node.nonce", "Nonce (keyed)")
f.node_proof = ProtoField.bytes("ringfire.node.proof", "Proof (the accepting node's)")
f.stream_terminal = ProtoField.bool("ringfire.stream.terminal", "Terminal", 8, nil, 0x01)
f.stream_record = ProtoField.bytes("ringfire.stream.record", "Record")

local e_malformed = ProtoExpert.new("ringfire.malformed", "Malformed ringfire frame", expert.group.MALFORMED, expert.severity.ERROR)
rf.experts = { e_malformed }

-- stream_batch: a `_stream_batch` message in buf (a TvbRange); true if it is one exactly.
local function is_batch(buf)
  local n = buf:len()
  if n < 16 or buf(0, 1):uint() ~= 1 then return false end
  local count, pos = buf(2, 2):uint(), 16
  for _ = 1, count do
    if pos + 13 > n then return false end
    local t = buf(pos, 1):uint()
    if t > 4 then return false end
    pos = pos + 13 + buf(pos + 9, 4):uint()
  end
  return pos == n
end

local function stream_batch(buf, tree)
  local b = tree:add(rf, buf, "_stream_batch")
  b:add(f.b_version, buf(0, 1))
  b:add(f.b_count, buf(2, 2))
  b:add(f.b_epoch, buf(4, 8))
  b:add(f.b_seq, buf(12, 4))
  local pos = 16
  for _ = 1, buf(2, 2):uint() do
    local len = buf(pos + 9, 4):uint()
    local r = b:add(rf, buf(pos, 13 + len), "Record: " .. (record_types[buf(pos, 1):uint()] or "?"))
    r:add(f.r_type, buf(pos, 1))
    r:add(f.r_slot_index, buf(pos + 1, 3))
    r:add(f.r_slot_gen, buf(pos + 4, 1))
    r:add(f.r_frame_seq, buf(pos + 5, 4))
    r:add(f.r_len, buf(pos + 9, 4))
    local t = buf(pos, 1):uint()
    local want = ({ [1] = 16, [2] = 1, [3] = 4, [4] = 0 })[t]
    if want ~= nil and len ~= want then
      r:add_proto_expert_info(e_malformed, "a " .. record_types[t] .. " body is " .. want .. " bytes (kBadLength)")
    end
    if t == 2 and len == 1 and buf(pos + 13, 1):uint() > 4 then
      r:add_proto_expert_info(e_malformed, "a close reason above 4 (kBadValue)")
    end
    if t == 1 and len == 16 then
      r:add(f.r_anchor, buf(pos + 13, 8))
      r:add(f.r_session, buf(pos + 21, 8))
    elseif t == 2 and len == 1 then
      r:add(f.r_reason, buf(pos + 13, 1))
    elseif t == 3 and len == 4 then
      r:add(f.r_delta, buf(pos + 13, 4))
    elseif t == 0 and len > 0 then
      r:add(f.record, buf(pos + 13, len))
    end
    pos = pos + 13 + len
  end
end

-- data_records: fixed-size records, or length-prefixed blobs when the
-- body is exactly that (the frame does not say which: the geometry does).
local function data_records(body, count, seq, tree)
  local n = body:len()
  if count == 0 or n == 0 then return true end
  local pos, blobs = 0, true
  for _ = 1, count do
    if pos + 4 > n then blobs = false break end
    pos = pos + 4 + body(pos, 4):le_uint()
  end
  blobs = blobs and pos == n
  pos = 0
  for i = 0, count - 1 do
    local len, off
    if blobs then
      len, off = body(pos, 4):le_uint(), 4
    else
      if n % count ~= 0 then return false end
      len, off = math.floor(n / count), 0
    end
    local r = tree:add(rf, body(pos, off + len), string.format("Record %s (%d bytes)", tostring(seq + i), len))
    r:add(f.record_seq, seq + i):set_generated()
    if blobs then r:add_le(f.record_len, body(pos, 4)) end
    if len > 0 then
      local rec = body(pos + off, len)
      if blobs and is_batch(rec) then stream_batch(rec, r) else r:add(f.record, rec) end
    end
    pos = pos + off + len
  end
  return true
end

-- The control frame MAC (§1.8.2), per TCP connection: which side asked,
-- whether the answer granted it, and from which frame on (packet number and
-- offset in it: a step 3 and the ATTACH after it share a segment) every
-- frame carries a tag. Kept across passes: it is where, not when, that counts.
-- Keyed by Wireshark's TCP stream index and by where the connection began
-- in it (its HELLO, or a keyed connector's NODE): a later connection on the
-- same addresses and ports starts clean, even where Wireshark gives it
-- the same stream index (the first one's close not captured whole).
local mac_state = {}
local starts = {}  -- conversation -> { {frame, offset}, ... }: where its connections began
local tcp_stream = Field.new("tcp.stream")
function rf.init()
  mac_state = {}
  starts = {}
end
local function conv_key(pinfo)
  local s = tcp_stream()
  if s then return "tcp " .. tostring(s.value) end
  local a = tostring(pinfo.src) .. ":" .. pinfo.src_port
  local b = tostring(pinfo.dst) .. ":" .. pinfo.dst_port
  if a < b then return a .. "-" .. b end
  return b .. "-" .. a
end
local function here(pinfo) return tostring(pinfo.src) .. ":" .. pinfo.src_port end
local function before(frame, offset, at_frame, at_offset)
  return frame < at_frame or (frame == at_frame and offset < at_offset)
end
local function mac_of(pinfo, offset, opens)
  local k = conv_key(pinfo)
  local list = starts[k] or {}
  starts[k] = list
  if opens then
    local known = false
    for _, at in ipairs(list) do
      if at[1] == pinfo.number and at[2] == offset then known = true end
    end
    if not known then list[#list + 1] = { pinfo.number, offset } end
  end
  -- The latest start at or before this frame.
  local from = { 0, 0 }
  for _, at in ipairs(list) do
    if not before(pinfo.number, offset, at[1], at[2]) and not before(at[1], at[2], from[1], from[2]) then from = at end
  end
  k = k .. " @" .. from[1] .. ":" .. from[2]
  if not mac_state[k] then mac_state[k] = {} end
  return mac_state[k]
end
local function maced(st, pinfo, offset)
  return st.from_frame ~= nil and not before(pinfo.number, offset, st.from_frame, st.from_offset)
end
-- sealed_refuse: a REFUSE is sealed only once its sender has sealed an
-- earlier frame: a source refusing the step 2 it could not check sends it
-- unsealed (PROTOCOL.md §1.8.2).
local function sealed_refuse(st, pinfo, offset)
  local first = st.first_sealed and st.first_sealed[here(pinfo)]
  return first ~= nil and before(first[1], first[2], pinfo.number, offset)
end

-- one_frame: the frame at buf(offset); returns its size.
local function one_frame(buf, pinfo, tree, offset, udp)
  local kind = buf(offset, 1):uint()
  local len = buf(offset + 4, 4):le_uint()
  -- A connection begins with a HELLO, or a keyed connector's NODE (bit 1, not 2).
  local opens = kind == 1 or (kind == 15 and len >= 8 and bit32.band(buf(offset + 22, 2):le_uint(), 6) == 2)
  local st = not udp and mac_of(pinfo, offset, opens) or {}
  local sealed = not udp and maced(st, pinfo, offset)
  if sealed and kind ~= 13 then  -- where this direction's first sealed frame is
    st.first_sealed = st.first_sealed or {}
    local first = st.first_sealed[here(pinfo)]
    if first == nil or before(pinfo.number, offset, first[1], first[2]) then
      st.first_sealed[here(pinfo)] = { pinfo.number, offset }
    end
  elseif sealed then
    sealed = sealed_refuse(st, pinfo, offset)
  end
  local short_for_tag = sealed and len < 16
  sealed = sealed and len >= 16
  local wire_len = len
  if sealed then len = len - 16 end
  local t = tree:add(rf, buf(offset, 16 + wire_len), "ringfire " .. (kinds[kind] or ("kind " .. kind)))
  if sealed then t:add(f.frame_tag, buf(offset + 16 + len, 16)) end
  if short_for_tag then t:add_proto_expert_info(e_malformed, "too short to hold its frame MAC") end
  local function bad(what) t:add_proto_expert_info(e_malformed, what) end
  t:add(f.kind, buf(offset, 1))
  if udp then t:add(f.session, buf(offset + 1, 1)) else t:add(f.flags, buf(offset + 1, 1)) end
  t:add_le(f.count, buf(offset + 2, 2))
  t:add_le(f.len, buf(offset + 4, 4))
  t:add_le(f.seq, buf(offset + 8, 8))
  local seq = buf(offset + 8, 8):le_uint64()
  local count = buf(offset + 2, 2):le_uint()
  if (kind == 3 or kind == 4 or kind == 5) and buf(offset + 12, 4):le_uint() >= 0x40000000 then
    t:add_proto_expert_info(e_malformed, "a sequence at or past 2^62")
  end
  local body = len > 0 and buf(offset + 16, len) or nil
  local function need(n)
    if len < n then t:add_proto_expert_info(e_malformed, "body shorter than " .. n) return false end
    return true
  end
  if kind == 1 and need(16) then
    t:add_le(f.magic, body(0, 4))
    t:add_le(f.version, body(4, 2))
    local fl = t:add_le(f.hello_flags, body(6, 2))
    for _, bit in ipairs({ f.hf_unicast, f.hf_prefer, f.hf_tcp, f.hf_health, f.hf_multi, f.hf_auth, f.hf_tag, f.hf_frame_mac, f.hf_channel }) do
      fl:add_le(bit, body(6, 2))
    end
    if not udp and bit32.band(body(6, 2):le_uint(), 0xa0) == 0xa0 then st.asked = true end
    t:add_le(f.schema, body(8, 8))
    local hello_flags = body(6, 2):le_uint()
    local at = 16
    if bit32.band(hello_flags, 0x20) ~= 0 then
      if len >= 48 then t:add(f.challenge, body(16, 32)) else bad("no room for the challenge (flag bit 5)") end
      at = 48
    end
    -- A body too short for the token is read as if bit 8 were clear (§1.2).
    if bit32.band(hello_flags, 0x100) ~= 0 and len >= at + 8 then t:add_le(f.channel_token, body(at, 8)) end
  elseif kind == 2 and need(56) then
    t:add_le(f.capacity, body(0, 8))
    t:add_le(f.slot_size, body(8, 4))
    t:add_le(f.ring_flags, body(12, 4))
    t:add_le(f.schema, body(16, 8))
    t:add_le(f.registry, body(24, 4))
    t:add_le(f.slots_offset, body(32, 8))
    t:add_le(f.arena_offset, body(40, 8))
    t:add_le(f.arena_size, body(48, 8))
  elseif kind == 3 then
    if (count == 0) ~= (body == nil) then bad("a record count of " .. count .. " with " .. len .. " body bytes") end
    if body and count > 0 and not data_records(body, count, seq, t) then
      bad(count .. " records do not divide " .. len .. " bytes, nor are they blobs that fill them")
    end
  elseif kind == 6 and need(8) then
    t:add(f.nak_repeat, buf(offset + 1, 1))
    t:add_le(f.nak_last, body(0, 8))
    local pos = 8
    while pos + 16 <= len do
      t:add_le(f.nak_first, body(pos, 8))
      t:add_le(f.nak_range_last, body(pos + 8, 8))
      pos = pos + 16
    end
    if pos ~= len then bad((len - pos) .. " bytes after the last whole range") end
  elseif kind == 7 and need(20) then
    t:add(f.group, body(0, 4))
    t:add_le(f.port, body(4, 2))
    t:add_le(f.mtu, body(6, 2))
    t:add(f.ttl, body(8, 1))
    t:add(f.session, body(9, 1))
    t:add_le(f.features, body(10, 2))
    t:add_le(f.token, body(12, 8))
    if len >= 24 then t:add(f.data_ip, body(20, 4)) end
    if len >= 32 then t:add_le(f.mc_tag, body(24, 8)) end
  elseif kind == 8 and len > 0 then
    if len >= 8 then t:add_le(f.punch_counter, body(0, 8)) else bad("a PUNCH body is 0 or 8 bytes") end
  elseif (kind == 4 or kind == 5 or kind == 14) and len > 0 then
    bad((kinds[kind] or kind) .. " has no body")
  elseif kind == 9 and need(1) then
    t:add(f.attach_msg, body(0, 1))
    local pos = 1
    while pos + 4 <= len do
      local vlen = body(pos + 2, 2):uint()
      if pos + 4 + vlen > len then bad("a field runs past the body") break end
      t:add(f.attach_tag, body(pos, 2))
      if vlen > 0 then t:add(f.attach_value, body(pos + 4, vlen)) end
      pos = pos + 4 + vlen
    end
  elseif kind == 10 and need(64) then
    t:add_le(f.h_next, body(0, 8))
    t:add_le(f.h_end, body(8, 8))
    t:add_le(f.h_holes, body(16, 4))
    t:add_le(f.h_held, body(20, 4))
    t:add_le(f.h_high, body(24, 4))
    t:add_le(f.h_naks, body(32, 8))
    t:add_le(f.h_gaps, body(40, 8))
    t:add_le(f.h_drops, body(48, 8))
    t:add_le(f.h_rejected, body(56, 8))
    if len >= 72 then t:add_le(f.h_udp, body(64, 8)) end  -- absent from an older mirror's report
  elseif kind == 11 and need(8) then
    t:add(f.auth_step, body(0, 1))
    t:add(f.auth_flags, body(1, 1))
    if len > 8 then t:add(f.auth_bytes, body(8, len - 8)) end
    local step = body(0, 1):uint()
    if step == 1 and bit32.band(body(1, 1):uint(), 1) ~= 0 then st.granted = true end
    -- Mirroring: MACs begin after step 2; the mux: after step 3 (both asked and granted).
    if (step == 2 or step == 3) and st.asked and st.granted and st.from_frame == nil then
      st.from_frame, st.from_offset = pinfo.number, offset + 16 + len
    end
  elseif kind == 15 and need(28) then
    t:add_le(f.magic, body(0, 4))
    t:add_le(f.version, body(4, 2))
    t:add_le(f.node_flags, body(6, 2))
    t:add_le(f.node_worker, body(8, 8))
    t:add_le(f.node_epoch, body(16, 8))
    t:add_le(f.node_port, body(24, 2))
    local flags = body(6, 2):le_uint()
    if bit32.band(flags, 6) == 4 then bad("proof (bit 2) without keyed (bit 1)") end
    if not udp and bit32.band(flags, 0xa) == 0xa then  -- keyed, frame MAC: the connector asks, the answer (with its proof) grants
      if bit32.band(flags, 4) ~= 0 then st.granted = true else st.asked = true end
    end
    if bit32.band(flags, 2) ~= 0 and len >= 60 then t:add(f.node_nonce, body(28, 32)) end
    if bit32.band(flags, 6) == 6 and len >= 92 then t:add(f.node_proof, body(60, 32)) end
  elseif kind == 16 and body then
    if is_batch(body) then stream_batch(body, t) else t:add_proto_expert_info(e_malformed, "not a _stream_batch") end
  elseif kind == 17 then
    t:add(f.stream_terminal, buf(offset + 1, 1))
    if body then t:add(f.stream_record, body) end
  elseif kind == 13 and need(4) then
    t:add_le(f.refuse_reason, body(0, 2))
    if len > 4 then t:add(f.refuse_text, body(4, len - 4)) end
  end
  return 16 + wire_len
end

-- The largest body of each kind on TCP (PROTOCOL.md §1.1's bounds; the
-- mux's kinds, generously), plus 16 for a frame MAC; nil: not a TCP kind.
local big = 64 * 1024 * 1024
local tcp_bound = {
  [1] = 256, [2] = 256, [3] = big, [4] = 0, [5] = 0, [6] = 1016, [7] = 256, [9] = 65536, [10] = 256,
  [11] = 256, [13] = 256, [14] = 0, [15] = 4096, [16] = 65536, [17] = big,
}
-- TCP kinds whose flags may be non-zero (NAK: repeat; STREAM: terminal),
-- and the one whose count may be (DATA).
local tcp_flags_ok = { [6] = true, [17] = true }

-- valid_header: a frame could start at buf(offset). `strict` (the
-- heuristic): kinds 1..18 only; otherwise a TCP frame of a later version's
-- kind (above 18, a body of at most 4,096 bytes: §1.1) is one too.
local function valid_header(buf, offset, remaining, udp, strict)
  if remaining < 16 then return false end
  local kind = buf(offset, 1):uint()
  local len = buf(offset + 4, 4):le_uint()
  if kind > 18 and not udp and not strict then return len <= 4096 + 16 end
  if kind < 1 or kind > 18 then return false end
  if udp then return 16 + len <= remaining end
  return tcp_bound[kind] ~= nil and len <= tcp_bound[kind] + 16
end

local function dissect(buf, pinfo, tree, udp)
  local n, offset, frames, names = buf:len(), 0, 0, {}
  while offset < n do
    local remaining = n - offset
    -- A header that is there is checked before any reassembly is asked
    -- for: a bad length would otherwise swallow the rest of the connection.
    if remaining >= 16 and not valid_header(buf, offset, remaining, udp) then
      if frames == 0 and udp then return 0 end
      local t = tree:add(rf, buf(offset, remaining), "ringfire: " .. remaining .. " bytes that are not a frame")
      t:add_proto_expert_info(e_malformed, "trailing bytes are not a frame")
      offset = n
      break
    end
    if not udp and (remaining < 16 or remaining < 16 + buf(offset + 4, 4):le_uint()) then
      pinfo.desegment_offset = offset
      pinfo.desegment_len = remaining < 16 and DESEGMENT_ONE_MORE_SEGMENT or (16 + buf(offset + 4, 4):le_uint() - remaining)
      offset = n  -- all of it taken: the rest comes back reassembled (0 would say "not ringfire")
      break
    end
    if udp and not valid_header(buf, offset, remaining, udp) then
      if frames == 0 then return 0 end
      local t = tree:add(rf, buf(offset, remaining), "ringfire: " .. remaining .. " bytes that are not a frame")
      t:add_proto_expert_info(e_malformed, "trailing bytes are not a frame")
      offset = n
      break
    end
    local kind = buf(offset, 1):uint()
    names[#names + 1] = kinds[kind] or tostring(kind)
    offset = offset + one_frame(buf, pinfo, tree, offset, udp)
    frames = frames + 1
  end
  if frames > 0 then
    pinfo.cols.protocol = "ringfire"
    pinfo.cols.info = table.concat(names, ", ")
  end
  return offset
end

local function heuristic(udp)
  return function(buf, pinfo, tree)
    if not valid_header(buf, 0, buf:len(), udp, true) then return false end
    if udp and buf:len() ~= 16 + buf(4, 4):le_uint() then
      -- several frames: every one must be valid
      local offset = 0
      while offset < buf:len() do
        if not valid_header(buf, offset, buf:len() - offset, true, true) then return false end
        offset = offset + 16 + buf(offset + 4, 4):le_uint()
      end
    end
    if not udp then
      -- Every whole frame of the segment valid, with the flags and count
      -- its kind allows, and HELLO's and NODE's magic: another protocol's
      -- connection is not taken (it was, by one plausible header).
      local offset, n = 0, buf:len()
      while offset + 16 <= n do
        local kind, len = buf(offset, 1):uint(), buf(offset + 4, 4):le_uint()
        if not valid_header(buf, offset, n - offset, false, true) then return false end
        if buf(offset + 1, 1):uint() ~= 0 and not tcp_flags_ok[kind] then return false end
        if buf(offset + 2, 2):le_uint() ~= 0 and kind ~= 3 then return false end
        local magic = ({ [1] = 0x524D4652, [15] = 0x584E4652 })[kind]
        if magic and (n < offset + 20 or buf(offset + 16, 4):le_uint() ~= magic) then return false end
        if offset + 16 + len > n then break end
        offset = offset + 16 + len
      end
    end
    pinfo.conversation = udp and rf_udp or rf_tcp
    dissect(buf, pinfo, tree, udp)
    return true
  end
end

rf_udp = Proto("ringfire_udp", "ringfire over UDP")
rf_tcp = Proto("ringfire_tcp", "ringfire over TCP")
function rf_udp.dissector(buf, pinfo, tree) return dissect(buf, pinfo, tree, true) end
function rf_tcp.dissector(buf, pinfo, tree) return dissect(buf, pinfo, tree, false) end
function rf.dissector(buf, pinfo, tree) return dissect(buf, pinfo, tree, pinfo.port_type == 3) end

rf:register_heuristic("udp", heuristic(true))
rf:register_heuristic("tcp", heuristic(false))
DissectorTable.get("udp.port"):add_for_decode_as(rf_udp)
DissectorTable.get("tcp.port"):add_for_decode_as(rf_tcp)
