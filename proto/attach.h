// attach.h — stream-mux attach negotiation, carried in ATTACH frames (kind 9)
// on the TCP control connection. Forward compatible both ways: the body is a
// message type then tag-length-value fields (big-endian); unknown tags are
// skipped, missing ones take their defaults. No allocation while decoding:
// transport keys are matched against the keys this build knows and kept as
// a bit set.
#pragma once

#include <cstdint>
#include <string_view>

#include "proto/bytes.h"

namespace ringfire::proto {

// AttachMessage is the first byte of an ATTACH frame body.
enum class AttachMessage : uint8_t {
  kRequest = 1,   // sender -> receiver: attach this stream, here is what I speak
  kResponse = 2,  // receiver -> sender: the transport chosen, and its credit
};

// TransportKey names a streaming path. On the wire it is a string, so peers
// may add keys this build has never heard of; they are ignored.
enum TransportKey : uint32_t {
  kTransportTcp = 1u << 0,  // "tcp": one connection per stream (legacy path)
  kTransportMux = 1u << 1,  // "messenger-mux-v1": the multiplexed channel
};
std::string_view transport_key_name(TransportKey k);

// AttachStatus is the receiver's verdict.
enum class AttachStatus : uint8_t {
  kOk = 0,
  kUnknownAnchor = 1,
  kRefused = 2,
};

struct AttachRequest {
  uint64_t anchor_id = 0;
  uint64_t session_id = 0;
  uint32_t supported_keys = 0;  // TransportKey bits; 0 = advertises nothing
  // resume_session: this stream takes over the anchor's stream of that
  // session, which ended with its channel (0: a new stream).
  uint64_t resume_session = 0;
};

struct AttachResponse {
  uint64_t anchor_id = 0;
  uint64_t session_id = 0;
  AttachStatus status = AttachStatus::kOk;
  uint32_t transport_key = kTransportTcp;  // exactly one TransportKey bit
  uint32_t initial_credit = 0;    // 0 = legacy peer; the mux is unusable
  uint32_t slot_byte_budget = 0;  // 0 = use the default
  uint32_t peer_byte_budget = 0;  // 0 = not given (an older receiver): the owner assumes its own
  // resume_at: a resume's answer (`resumed`: tag 9 is there, always in
  // one): the data frames the anchor holds of the stream taken over; the
  // new stream's first record is the stream's frame resume_at.
  bool resumed = false;
  uint32_t resume_at = 0;
};

// Field tags (u16). Tag values are never reused.
enum AttachTag : uint16_t {
  kTagAnchorId = 1,        // u64
  kTagSessionId = 2,       // u64
  kTagTransportKey = 3,    // string; repeatable in a request
  kTagStatus = 4,          // u8
  kTagInitialCredit = 5,   // u32
  kTagSlotByteBudget = 6,  // u32
  kTagPeerByteBudget = 7,  // u32
  kTagResumeSession = 8,   // u64; request only
  kTagResumeAt = 9,        // u32; response only
};
inline constexpr size_t kMaxTransportKeyBytes = 64;

// encode_* write an ATTACH body (not the frame header) and return its size,
// or 0 if `out` is too small.
size_t encode_attach_request(const AttachRequest& m, MutableBytes out);
size_t encode_attach_response(const AttachResponse& m, MutableBytes out);

// attach_message_type peeks the message type of an ATTACH body.
DecodeError attach_message_type(ConstBytes body, AttachMessage* out);
DecodeError decode_attach_request(ConstBytes body, AttachRequest* out);
DecodeError decode_attach_response(ConstBytes body, AttachResponse* out);

}  // namespace ringfire::proto
