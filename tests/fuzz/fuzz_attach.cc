// fuzz_attach.cc — libFuzzer target for attach negotiation messages.
// Oracle: a decoded message re-encodes to one that decodes to the same value.
#include <vector>

#include "proto/attach.h"
#include "tests/fuzz/require.h"

using namespace ringfire::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ConstBytes in(reinterpret_cast<const std::byte*>(data), size);
  AttachMessage type;
  if (attach_message_type(in, &type) != DecodeError::kOk) return 0;
  std::vector<std::byte> out(256);
  if (type == AttachMessage::kRequest) {
    AttachRequest m, back;
    if (decode_attach_request(in, &m) != DecodeError::kOk) return 0;
    out.resize(encode_attach_request(m, out));
    REQUIRE(decode_attach_request(out, &back) == DecodeError::kOk);
    REQUIRE(back.anchor_id == m.anchor_id && back.session_id == m.session_id &&
            back.supported_keys == m.supported_keys && back.resume_session == m.resume_session);
  } else {
    AttachResponse m, back;
    if (decode_attach_response(in, &m) != DecodeError::kOk) return 0;
    if (m.transport_key == 0) return 0;  // no key chosen: nothing to re-encode
    out.resize(encode_attach_response(m, out));
    REQUIRE(decode_attach_response(out, &back) == DecodeError::kOk);
    REQUIRE(back.transport_key == m.transport_key && back.initial_credit == m.initial_credit &&
            back.slot_byte_budget == m.slot_byte_budget && back.status == m.status && back.resume_at == m.resume_at &&
            back.resumed == m.resumed);
  }
  return 0;
}
