// frame.cc — ring-mirroring frame encode/decode.
#include "proto/frame.h"

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
  if (kind == 0 || kind > kMaxFrameKind) return DecodeError::kBadKind;
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
  ByteWriter w = begin_frame(out, FrameKind::kHello, 0, m.first_wanted, kHelloBody);
  w.le32(kHelloMagic);
  w.le16(m.version);
  w.le16(m.flags);
  w.le64(m.expected_schema);
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
  w.le16(0);
  w.le64(m.token);
  w.be32(m.data_ip);
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
  r.skip(2);
  out->token = r.le64();
  out->data_ip = f.body.size() >= kMulticastBody ? r.be32() : 0;
  if (out->port == 0 && out->group != 0) return DecodeError::kBadValue;  // a group needs a port
  return DecodeError::kOk;
}

size_t encode_gap(uint64_t next_seq, MutableBytes out) {
  return finish(begin_frame(out, FrameKind::kGap, 0, next_seq, 0));
}

size_t encode_heartbeat(uint64_t next_seq, uint8_t session, MutableBytes out) {
  return finish(begin_frame(out, FrameKind::kHeartbeat, session, next_seq, 0));
}

size_t encode_punch(uint64_t token, MutableBytes out) {
  return finish(begin_frame(out, FrameKind::kPunch, 0, token, 0));
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

DecodeError decode_empty(const Frame& f, FrameKind kind) { return expect(f, kind, 0); }

}  // namespace ringfire::proto
