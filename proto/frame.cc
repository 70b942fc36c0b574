// frame.cc — ring-mirroring frame encode/decode.
#include "proto/frame.h"

#include <algorithm>
#include <cstring>

namespace ringfire::proto {

const char* decode_error_name(DecodeError e) {
  switch (e) {
    case DecodeError::kOk: return "ok";
    case DecodeError::kTruncated: return "truncated";
    case DecodeError::kBadKind: return "bad-kind";
    case DecodeError::kBadLength: return "bad-length";
    case DecodeError::kBadMagic: return "bad-magic";
    case DecodeError::kBadVersion: return "bad-version";
    case DecodeError::kBadValue: return "bad-value";
    case DecodeError::kBadChecksum: return "bad-checksum";
    case DecodeError::kTooLarge: return "too-large";
  }
  return "unknown";
}

const char* frame_kind_name(FrameKind k) {
  switch (k) {
    case FrameKind::kHello: return "HELLO";
    case FrameKind::kGeometry: return "GEOMETRY";
    case FrameKind::kData: return "DATA";
    case FrameKind::kGap: return "GAP";
    case FrameKind::kHeartbeat: return "HEARTBEAT";
    case FrameKind::kNak: return "NAK";
    case FrameKind::kMulticast: return "MULTICAST";
    case FrameKind::kPunch: return "PUNCH";
    case FrameKind::kAttach: return "ATTACH";
    case FrameKind::kHealth: return "HEALTH";
    case FrameKind::kAuth: return "AUTH";
    case FrameKind::kMac: return "MAC";
    case FrameKind::kRefuse: return "REFUSE";
    case FrameKind::kProbe: return "PROBE";
    case FrameKind::kNode: return "NODE";
    case FrameKind::kMuxControl: return "MUXCTL";
    case FrameKind::kStream: return "STREAM";
    case FrameKind::kTag: return "TAG";
  }
  return "unknown";
}

const char* refuse_reason_name(RefuseReason r) {
  switch (r) {
    case RefuseReason::kMalformedHello: return "malformed HELLO";
    case RefuseReason::kVersion: return "unsupported version";
    case RefuseReason::kSchema: return "schema mismatch";
    case RefuseReason::kAuthRequired: return "authentication required";
    case RefuseReason::kAuthFailed: return "authentication failed";
    case RefuseReason::kBusy: return "too many connections";
    case RefuseReason::kHandshakeTimeout: return "handshake timeout";
    case RefuseReason::kProtocol: return "protocol violation";
    case RefuseReason::kSlow: return "too slow to read";
    case RefuseReason::kWrongChannel: return "another node's channel";
  }
  return "unknown reason";
}

void encode_frame_header(const FrameHeader& h, std::byte* out) {
  out[0] = std::byte(static_cast<uint8_t>(h.kind));
  out[1] = std::byte(h.flags);
  store_le16(out + 2, h.count);
  store_le32(out + 4, h.len);
  store_le64(out + 8, h.seq);
}

DecodeError decode_frame_header(ConstBytes in, size_t max_body, FrameHeader* out) {
  if (in.size() < kFrameHeaderBytes) return DecodeError::kTruncated;
  const uint8_t kind = std::to_integer<uint8_t>(in[0]);
  if (kind == 0) return DecodeError::kBadKind;  // higher kinds: the caller decides (known_kind)
  out->kind = static_cast<FrameKind>(kind);
  out->flags = std::to_integer<uint8_t>(in[1]);
  out->count = load_le16(in.data() + 2);
  out->len = load_le32(in.data() + 4);
  out->seq = load_le64(in.data() + 8);
  if (out->len > max_body) return DecodeError::kTooLarge;
  return DecodeError::kOk;
}

DecodeError decode_frame(ConstBytes in, size_t max_body, Frame* out) {
  if (DecodeError e = decode_frame_header(in, max_body, &out->header); e != DecodeError::kOk) {
    return e;
  }
  if (in.size() - kFrameHeaderBytes < out->header.len) return DecodeError::kTruncated;
  out->body = in.subspan(kFrameHeaderBytes, out->header.len);
  return DecodeError::kOk;
}

namespace {

// begin_frame writes the header for a body of `len` bytes; returns a writer
// positioned at the body, failed if `out` cannot hold the frame.
ByteWriter begin_frame(MutableBytes out, FrameKind kind, uint8_t flags, uint64_t seq, uint32_t len) {
  ByteWriter w(out);
  if (out.size() < kFrameHeaderBytes + len) {
    w.fail();
    return w;
  }
  w.u8(static_cast<uint8_t>(kind));
  w.u8(flags);
  w.le16(0);
  w.le32(len);
  w.le64(seq);
  return w;
}

size_t finish(const ByteWriter& w) { return w.ok() ? w.size() : 0; }

DecodeError expect(const Frame& f, FrameKind kind, size_t body) {
  if (f.header.kind != kind) return DecodeError::kBadKind;
  if (f.header.len != body || f.body.size() != body) return DecodeError::kBadLength;
  return DecodeError::kOk;
}

}  // namespace

void encode_data_header(std::byte* out, uint64_t first_seq, uint16_t count, uint32_t body_len,
                        uint8_t session) {
  encode_frame_header(FrameHeader{FrameKind::kData, session, count, body_len, first_seq}, out);
}

DecodeError check_fixed_data(const FrameHeader& h, size_t slot_size) {
  if (h.kind != FrameKind::kData) return DecodeError::kBadKind;
  if (h.count == 0 || slot_size == 0 || uint64_t{h.count} * slot_size != h.len) {
    return DecodeError::kBadLength;
  }
  return DecodeError::kOk;
}

DecodeError BlobRecords::check(const Frame& f, uint32_t max_blob) {
  if (f.header.kind != FrameKind::kData) return DecodeError::kBadKind;
  if (f.header.count == 0) return DecodeError::kBadLength;
  ByteReader r(f.body);
  for (uint32_t i = 0; i < f.header.count; ++i) {
    const uint32_t len = r.le32();
    if (!r.ok()) return DecodeError::kTruncated;
    if (len > max_blob) return DecodeError::kTooLarge;
    r.skip(len);
    if (!r.ok()) return DecodeError::kTruncated;
  }
  return r.remaining() == 0 ? DecodeError::kOk : DecodeError::kBadLength;
}

size_t encode_hello(const Hello& m, MutableBytes out) {
  const bool auth = (m.flags & kHelloAuth) != 0;
  const bool channel = (m.flags & kHelloChannel) != 0;
  ByteWriter w = begin_frame(out, FrameKind::kHello, 0, m.first_wanted,
                             (auth ? kHelloAuthBody : kHelloBody) + (channel ? kHelloTokenBytes : 0));
  w.le32(kHelloMagic);
  w.le16(m.version);
  w.le16(m.flags);
  w.le64(m.expected_schema);
  if (auth) w.bytes(m.nonce);
  if (channel) w.le64(m.channel_token);
  return finish(w);
}

DecodeError decode_hello(const Frame& f, Hello* out) {
  // Longer bodies are accepted: a later version may append fields.
  if (f.header.kind != FrameKind::kHello) return DecodeError::kBadKind;
  if (f.body.size() < kHelloBody) return DecodeError::kBadLength;
  ByteReader r(f.body);
  if (r.le32() != kHelloMagic) return DecodeError::kBadMagic;
  out->first_wanted = f.header.seq;
  out->version = r.le16();
  out->flags = r.le16();
  out->expected_schema = r.le64();
  if (out->version == 0) return DecodeError::kBadVersion;
  if ((out->flags & kHelloAuth) != 0) {
    if (f.body.size() < kHelloAuthBody) return DecodeError::kBadLength;
    std::memcpy(out->nonce.data(), r.bytes(kNonceBytes).data(), kNonceBytes);
  }
  out->channel_token = 0;
  if ((out->flags & kHelloChannel) != 0) {
    // A body too short for the token: the flag is taken as unset (a mirror
    // from before bit 8 had a meaning may have set it; only a stream mux
    // channel's serve looks at the token).
    const size_t at = (out->flags & kHelloAuth) != 0 ? kHelloAuthBody : kHelloBody;
    if (f.body.size() >= at + kHelloTokenBytes) {
      out->channel_token = r.le64();
    } else {
      out->flags &= static_cast<uint16_t>(~kHelloChannel);
    }
  }
  return DecodeError::kOk;
}

size_t encode_geometry(const Geometry& m, MutableBytes out) {
  ByteWriter w = begin_frame(out, FrameKind::kGeometry, 0, m.first_seq, kGeometryBody);
  w.le64(m.capacity);
  w.le32(m.slot_size);
  w.le32(m.ring_flags);
  w.le64(m.schema_signature);
  w.le32(m.registry_size);
  w.le32(0);
  w.le64(m.slots_offset);
  w.le64(m.arena_offset);
  w.le64(m.arena_size);
  return finish(w);
}

DecodeError decode_geometry(const Frame& f, Geometry* out) {
  if (f.header.kind != FrameKind::kGeometry) return DecodeError::kBadKind;
  if (f.body.size() < kGeometryBody) return DecodeError::kBadLength;
  ByteReader r(f.body);
  out->first_seq = f.header.seq;
  out->capacity = r.le64();
  out->slot_size = r.le32();
  out->ring_flags = r.le32();
  out->schema_signature = r.le64();
  out->registry_size = r.le32();
  r.skip(4);
  out->slots_offset = r.le64();
  out->arena_offset = r.le64();
  out->arena_size = r.le64();
  const bool pow2 = out->capacity != 0 && (out->capacity & (out->capacity - 1)) == 0;
  if (!pow2 || out->slot_size == 0) return DecodeError::kBadValue;
  return DecodeError::kOk;
}

size_t encode_multicast(const Multicast& m, MutableBytes out) {
  ByteWriter w = begin_frame(out, FrameKind::kMulticast, 0, 0, kMulticastBody);
  w.be32(m.group);  // network order, as on the wire everywhere else
  w.le16(m.port);
  w.le16(m.mtu);
  w.u8(m.ttl);
  w.u8(m.session);
  w.le16(m.features);
  w.le64(m.token);
  w.be32(m.data_ip);
  w.le64(m.tag);
  return finish(w);
}

DecodeError decode_multicast(const Frame& f, Multicast* out) {
  if (f.header.kind != FrameKind::kMulticast) return DecodeError::kBadKind;
  if (f.body.size() < kMulticastBodyMin) return DecodeError::kBadLength;
  ByteReader r(f.body);
  out->group = r.be32();
  out->port = r.le16();
  out->mtu = r.le16();
  out->ttl = r.u8();
  out->session = r.u8();
  out->features = r.le16();
  out->token = r.le64();
  out->data_ip = f.body.size() >= kMulticastBodyNoTag ? r.be32() : 0;
  out->tag = f.body.size() >= kMulticastBody ? r.le64() : 0;
  // A granted tag is one: a zero would be a tag anyone guesses.
  if ((out->features & kFeatureTag) != 0 && out->tag == 0) return DecodeError::kBadValue;
  if (out->port == 0 && out->group != 0) return DecodeError::kBadValue;  // a group needs a port
  return DecodeError::kOk;
}

void encode_tag_frame(uint8_t session, uint64_t tag, std::byte* out) {
  encode_frame_header(FrameHeader{FrameKind::kTag, session, 0, 0, tag}, out);
}

size_t encode_gap(uint64_t next_seq, MutableBytes out) {
  return finish(begin_frame(out, FrameKind::kGap, 0, next_seq, 0));
}

size_t encode_heartbeat(uint64_t next_seq, uint8_t session, MutableBytes out) {
  return finish(begin_frame(out, FrameKind::kHeartbeat, session, next_seq, 0));
}

size_t encode_node(const Node& m, MutableBytes out) {
  const bool keyed = (m.flags & kNodeKeyed) != 0;
  const bool proof = keyed && (m.flags & kNodeProof) != 0;
  const uint16_t flags = keyed ? m.flags : static_cast<uint16_t>(m.flags & ~kNodeProof);
  ByteWriter w = begin_frame(out, FrameKind::kNode, 0, 0,
                             static_cast<uint32_t>(kNodeBody + (keyed ? kNonceBytes : 0) + (proof ? kProofBytes : 0)));
  w.le32(kNodeMagic);
  w.le16(m.version);
  w.le16(flags);
  w.le64(m.worker_id);
  w.le64(m.channel_epoch);
  w.le16(m.channel_port);
  w.le16(0);
  if (keyed) w.bytes(m.nonce);
  if (proof) w.bytes(m.proof);
  return finish(w);
}

DecodeError decode_node(const Frame& f, Node* out) {
  if (f.header.kind != FrameKind::kNode) return DecodeError::kBadKind;
  if (f.body.size() < kNodeBody) return DecodeError::kBadLength;
  ByteReader r(f.body);
  if (r.le32() != kNodeMagic) return DecodeError::kBadMagic;
  out->version = r.le16();
  out->flags = r.le16();
  out->worker_id = r.le64();
  out->channel_epoch = r.le64();
  out->channel_port = r.le16();
  if (out->version != kProtocolVersion) return DecodeError::kBadValue;
  if ((out->flags & kNodeChannel) != 0 && (out->channel_epoch == 0 || out->channel_port == 0)) {
    return DecodeError::kBadValue;  // a channel needs an epoch and a port
  }
  const bool keyed = (out->flags & kNodeKeyed) != 0;
  const bool proof = (out->flags & kNodeProof) != 0;
  if (proof && !keyed) return DecodeError::kBadValue;  // a proof comes after a nonce
  if (f.body.size() < kNodeBody + (keyed ? kNonceBytes : 0) + (proof ? kProofBytes : 0)) return DecodeError::kBadLength;
  r.skip(2);
  if (keyed) std::memcpy(out->nonce.data(), r.bytes(kNonceBytes).data(), kNonceBytes);
  if (proof) std::memcpy(out->proof.data(), r.bytes(kProofBytes).data(), kProofBytes);
  return DecodeError::kOk;
}

size_t encode_probe(uint64_t challenge, uint8_t session, MutableBytes out) {
  return finish(begin_frame(out, FrameKind::kProbe, session, challenge, 0));
}

size_t encode_punch(uint64_t token, MutableBytes out) {
  return finish(begin_frame(out, FrameKind::kPunch, 0, token, 0));
}

size_t encode_punch_counted(uint64_t token, uint64_t counter, MutableBytes out) {
  ByteWriter w = begin_frame(out, FrameKind::kPunch, 0, token, 8);
  w.le64(counter);
  return finish(w);
}

DecodeError decode_punch(const Frame& f, uint64_t* token, uint64_t* counter) {
  if (f.header.kind != FrameKind::kPunch) return DecodeError::kBadKind;
  if (f.body.size() != f.header.len || (f.header.len != 0 && f.header.len != 8)) {
    return DecodeError::kBadLength;
  }
  *token = f.header.seq;
  *counter = f.header.len == 8 ? load_le64(f.body.data()) : 0;
  return DecodeError::kOk;
}

size_t encode_nak(const Nak& m, MutableBytes out) {
  ByteWriter w = begin_frame(out, FrameKind::kNak, 0, m.first, kNakBody);
  w.le64(m.last);
  return finish(w);
}

DecodeError decode_nak(const Frame& f, Nak* out) {
  if (DecodeError e = expect(f, FrameKind::kNak, kNakBody); e != DecodeError::kOk) return e;
  out->first = f.header.seq;
  out->last = load_le64(f.body.data());
  if (out->last < out->first) return DecodeError::kBadValue;
  return DecodeError::kOk;
}

size_t encode_nak_ranges(const NakRanges& r, MutableBytes out) {
  if (r.count == 0 || r.count > kMaxNakRanges) return 0;
  const uint32_t len = static_cast<uint32_t>(kNakBody + 16 * (r.count - 1));
  ByteWriter w = begin_frame(out, FrameKind::kNak, r.repeat ? kNakRepeat : 0, r.ranges[0].first, len);
  w.le64(r.ranges[0].last);
  for (uint32_t i = 1; i < r.count; ++i) {
    w.le64(r.ranges[i].first);
    w.le64(r.ranges[i].last);
  }
  return finish(w);
}

DecodeError decode_nak_ranges(const Frame& f, NakRanges* out) {
  if (f.header.kind != FrameKind::kNak) return DecodeError::kBadKind;
  const size_t len = f.header.len;
  if (f.body.size() != len || len < kNakBody || len > kMaxNakBody || (len - kNakBody) % 16 != 0) {
    return DecodeError::kBadLength;
  }
  ByteReader r(f.body);
  out->count = 0;
  out->repeat = (f.header.flags & kNakRepeat) != 0;  // other flag bits: reserved, ignored
  Nak first{f.header.seq, r.le64()};
  if (first.last < first.first) return DecodeError::kBadValue;
  out->push(first);
  while (r.remaining() != 0) {
    Nak n;
    n.first = r.le64();
    n.last = r.le64();
    // Ascending and apart: each range starts after the previous one ends.
    if (n.last < n.first || n.first <= out->ranges[out->count - 1].last) return DecodeError::kBadValue;
    out->push(n);
  }
  return DecodeError::kOk;
}

size_t encode_health(const Health& m, MutableBytes out) {
  ByteWriter w = begin_frame(out, FrameKind::kHealth, 0, m.report, kHealthBody);
  w.le64(m.next_seq);
  w.le64(m.known_end);
  w.le32(m.holes);
  w.le32(m.held);
  w.le32(m.held_high);
  w.le32(0);
  w.le64(m.naks);
  w.le64(m.gap_records);
  w.le64(m.rx_drops);
  w.le64(m.rejected);
  w.le64(m.udp_datagrams);
  return finish(w);
}

DecodeError decode_health(const Frame& f, Health* out) {
  // Longer bodies are accepted: a later version may append fields.
  if (f.header.kind != FrameKind::kHealth) return DecodeError::kBadKind;
  if (f.body.size() < kHealthMinBody || f.body.size() != f.header.len) return DecodeError::kBadLength;
  ByteReader r(f.body);
  out->report = f.header.seq;
  out->next_seq = r.le64();
  out->known_end = r.le64();
  out->holes = r.le32();
  out->held = r.le32();
  out->held_high = r.le32();
  out->reserved = r.le32();
  out->naks = r.le64();
  out->gap_records = r.le64();
  out->rx_drops = r.le64();
  out->rejected = r.le64();
  out->has_udp_datagrams = f.body.size() >= 72;
  out->udp_datagrams = out->has_udp_datagrams ? r.le64() : 0;
  return DecodeError::kOk;
}

size_t encode_auth(const Auth& m, MutableBytes out) {
  const bool source = m.step == AuthStep::kSourceProof;
  ByteWriter w = begin_frame(out, FrameKind::kAuth, 0, 0, source ? kAuthSourceBody : kAuthMirrorBody);
  w.u8(static_cast<uint8_t>(m.step));
  w.u8(m.flags);
  w.zeros(6);
  if (source) {
    w.bytes(m.nonce);
    w.bytes(m.salt);
  }
  w.bytes(m.proof);
  return finish(w);
}

DecodeError decode_auth(const Frame& f, Auth* out) {
  if (f.header.kind != FrameKind::kAuth) return DecodeError::kBadKind;
  if (f.body.size() != f.header.len || f.body.empty()) return DecodeError::kBadLength;
  ByteReader r(f.body);
  const uint8_t step = r.u8();
  out->flags = r.u8();
  r.skip(6);
  if (step == static_cast<uint8_t>(AuthStep::kSourceProof)) {
    if (f.body.size() != kAuthSourceBody) return DecodeError::kBadLength;
    std::memcpy(out->nonce.data(), r.bytes(kNonceBytes).data(), kNonceBytes);
    std::memcpy(out->salt.data(), r.bytes(kNonceBytes).data(), kNonceBytes);
  } else if (step == static_cast<uint8_t>(AuthStep::kMirrorProof) || step == static_cast<uint8_t>(AuthStep::kNodeProof)) {
    if (f.body.size() != kAuthMirrorBody) return DecodeError::kBadLength;
  } else {
    return DecodeError::kBadValue;
  }
  out->step = static_cast<AuthStep>(step);
  std::memcpy(out->proof.data(), r.bytes(kProofBytes).data(), kProofBytes);
  return DecodeError::kOk;
}

size_t encode_refuse(const Refuse& m, MutableBytes out) {
  const size_t text = std::min(m.text.size(), kMaxRefuseText);
  ByteWriter w = begin_frame(out, FrameKind::kRefuse, 0, 0, static_cast<uint32_t>(4 + text));
  w.le16(static_cast<uint16_t>(m.reason));
  w.le16(0);
  w.bytes(ConstBytes(reinterpret_cast<const std::byte*>(m.text.data()), text));
  return finish(w);
}

DecodeError decode_refuse(const Frame& f, Refuse* out) {
  if (f.header.kind != FrameKind::kRefuse) return DecodeError::kBadKind;
  if (f.body.size() != f.header.len || f.body.size() < 4) return DecodeError::kBadLength;
  if (f.body.size() > 4 + kMaxRefuseText) return DecodeError::kTooLarge;
  out->reason = static_cast<RefuseReason>(load_le16(f.body.data()));
  out->text = std::string_view(reinterpret_cast<const char*>(f.body.data() + 4), f.body.size() - 4);
  return DecodeError::kOk;
}

DecodeError decode_empty(const Frame& f, FrameKind kind) { return expect(f, kind, 0); }

}  // namespace ringfire::proto
