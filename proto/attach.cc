// attach.cc — attach negotiation TLV encode/decode.
#include "proto/attach.h"

namespace ringfire::proto {
namespace {

constexpr std::string_view kTcpName = "tcp";
constexpr std::string_view kMuxName = "messenger-mux-v1";

uint32_t key_from_name(ConstBytes b) {
  const std::string_view s(reinterpret_cast<const char*>(b.data()), b.size());
  if (s == kTcpName) return kTransportTcp;
  if (s == kMuxName) return kTransportMux;
  return 0;  // a key this build does not know
}

void put_u64(ByteWriter& w, uint16_t tag, uint64_t v) {
  w.be16(tag);
  w.be16(8);
  w.be64(v);
}
void put_u32(ByteWriter& w, uint16_t tag, uint32_t v) {
  w.be16(tag);
  w.be16(4);
  w.be32(v);
}
void put_u8(ByteWriter& w, uint16_t tag, uint8_t v) {
  w.be16(tag);
  w.be16(1);
  w.u8(v);
}
void put_key(ByteWriter& w, TransportKey k) {
  const std::string_view name = transport_key_name(k);
  w.be16(kTagTransportKey);
  w.be16(static_cast<uint16_t>(name.size()));
  w.bytes(ConstBytes(reinterpret_cast<const std::byte*>(name.data()), name.size()));
}

// for_each_field walks the TLV fields after the type byte, calling
// f(tag, value) for each; stops at the first error f returns.
template <typename F>
DecodeError for_each_field(ConstBytes body, AttachMessage want, F f) {
  ByteReader r(body);
  if (r.u8() != static_cast<uint8_t>(want)) {
    return r.ok() ? DecodeError::kBadKind : DecodeError::kTruncated;
  }
  while (r.remaining() > 0) {
    const uint16_t tag = r.be16();
    const uint16_t len = r.be16();
    ConstBytes value = r.bytes(len);
    if (!r.ok()) return DecodeError::kTruncated;
    if (DecodeError e = f(tag, value); e != DecodeError::kOk) return e;
  }
  return DecodeError::kOk;
}

template <typename T>
DecodeError read_fixed(ConstBytes v, T* out) {
  if (v.size() != sizeof(T)) return DecodeError::kBadLength;
  if constexpr (sizeof(T) == 8) *out = load_be64(v.data());
  if constexpr (sizeof(T) == 4) *out = load_be32(v.data());
  if constexpr (sizeof(T) == 1) *out = std::to_integer<uint8_t>(v[0]);
  return DecodeError::kOk;
}

}  // namespace

std::string_view transport_key_name(TransportKey k) {
  switch (k) {
    case kTransportTcp: return kTcpName;
    case kTransportMux: return kMuxName;
  }
  return "";
}

size_t encode_attach_request(const AttachRequest& m, MutableBytes out) {
  ByteWriter w(out);
  w.u8(static_cast<uint8_t>(AttachMessage::kRequest));
  put_u64(w, kTagAnchorId, m.anchor_id);
  put_u64(w, kTagSessionId, m.session_id);
  for (TransportKey k : {kTransportTcp, kTransportMux}) {
    if ((m.supported_keys & k) != 0) put_key(w, k);
  }
  if (m.resume_session != 0) put_u64(w, kTagResumeSession, m.resume_session);
  return w.ok() ? w.size() : 0;
}

size_t encode_attach_response(const AttachResponse& m, MutableBytes out) {
  ByteWriter w(out);
  w.u8(static_cast<uint8_t>(AttachMessage::kResponse));
  put_u64(w, kTagAnchorId, m.anchor_id);
  put_u64(w, kTagSessionId, m.session_id);
  put_u8(w, kTagStatus, static_cast<uint8_t>(m.status));
  put_key(w, static_cast<TransportKey>(m.transport_key));
  put_u32(w, kTagInitialCredit, m.initial_credit);
  put_u32(w, kTagSlotByteBudget, m.slot_byte_budget);
  if (m.peer_byte_budget != 0) put_u32(w, kTagPeerByteBudget, m.peer_byte_budget);
  if (m.resumed) put_u32(w, kTagResumeAt, m.resume_at);
  return w.ok() ? w.size() : 0;
}

DecodeError attach_message_type(ConstBytes body, AttachMessage* out) {
  if (body.empty()) return DecodeError::kTruncated;
  const uint8_t t = std::to_integer<uint8_t>(body[0]);
  if (t != static_cast<uint8_t>(AttachMessage::kRequest) &&
      t != static_cast<uint8_t>(AttachMessage::kResponse)) {
    return DecodeError::kBadKind;
  }
  *out = static_cast<AttachMessage>(t);
  return DecodeError::kOk;
}

DecodeError decode_attach_request(ConstBytes body, AttachRequest* out) {
  *out = AttachRequest{};
  return for_each_field(body, AttachMessage::kRequest, [&](uint16_t tag, ConstBytes v) {
    switch (tag) {
      case kTagAnchorId: return read_fixed(v, &out->anchor_id);
      case kTagSessionId: return read_fixed(v, &out->session_id);
      case kTagTransportKey:
        if (v.size() > kMaxTransportKeyBytes) return DecodeError::kTooLarge;
        out->supported_keys |= key_from_name(v);
        return DecodeError::kOk;
      case kTagResumeSession: return read_fixed(v, &out->resume_session);
      default: return DecodeError::kOk;  // a newer peer's field
    }
  });
}

DecodeError decode_attach_response(ConstBytes body, AttachResponse* out) {
  *out = AttachResponse{};
  bool key_seen = false;
  DecodeError e = for_each_field(body, AttachMessage::kResponse, [&](uint16_t tag, ConstBytes v) {
    switch (tag) {
      case kTagAnchorId: return read_fixed(v, &out->anchor_id);
      case kTagSessionId: return read_fixed(v, &out->session_id);
      case kTagStatus: {
        uint8_t s = 0;
        if (DecodeError err = read_fixed(v, &s); err != DecodeError::kOk) return err;
        if (s > static_cast<uint8_t>(AttachStatus::kRefused)) return DecodeError::kBadValue;
        out->status = static_cast<AttachStatus>(s);
        return DecodeError::kOk;
      }
      case kTagTransportKey:
        if (v.size() > kMaxTransportKeyBytes) return DecodeError::kTooLarge;
        if (key_seen) return DecodeError::kBadValue;  // a response chooses one
        key_seen = true;
        out->transport_key = key_from_name(v);
        return DecodeError::kOk;
      case kTagInitialCredit: return read_fixed(v, &out->initial_credit);
      case kTagSlotByteBudget: return read_fixed(v, &out->slot_byte_budget);
      case kTagPeerByteBudget: return read_fixed(v, &out->peer_byte_budget);
      case kTagResumeAt:
        out->resumed = true;
        return read_fixed(v, &out->resume_at);
      default: return DecodeError::kOk;
    }
  });
  if (e != DecodeError::kOk) return e;
  // A chosen key this build does not know cannot be used: report it rather
  // than silently falling back to another path the peer is not serving.
  if (key_seen && out->transport_key == 0) return DecodeError::kBadValue;
  return DecodeError::kOk;
}

}  // namespace ringfire::proto
