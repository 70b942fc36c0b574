// attach_test.cc — attach negotiation messages: golden bytes, and forward
// compatibility (unknown fields skipped, missing fields defaulted, unknown
// transport keys ignored in requests and refused as a response's choice).
#include "proto/attach.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/proto/golden.h"

namespace ringfire::proto {
namespace {

using testing::hex;
using testing::to_hex;

TEST(AttachGolden, Request) {
  AttachRequest m{5, 6, kTransportTcp | kTransportMux};
  std::vector<std::byte> buf(128);
  buf.resize(encode_attach_request(m, buf));
  EXPECT_EQ(to_hex(buf),
            to_hex(hex("01 | 0001 0008 0000000000000005 | 0002 0008 0000000000000006 |"
                       "0003 0003 746370 |"
                       "0003 0010 6d657373656e6765722d6d75782d7631")));
  AttachRequest back;
  ASSERT_EQ(decode_attach_request(buf, &back), DecodeError::kOk);
  EXPECT_EQ(back.anchor_id, 5u);
  EXPECT_EQ(back.session_id, 6u);
  EXPECT_EQ(back.supported_keys, uint32_t{kTransportTcp | kTransportMux});
}

TEST(AttachGolden, Response) {
  AttachResponse m;
  m.anchor_id = 5;
  m.session_id = 6;
  m.transport_key = kTransportMux;
  m.initial_credit = 256;
  m.slot_byte_budget = 1 << 20;
  std::vector<std::byte> buf(128);
  buf.resize(encode_attach_response(m, buf));
  EXPECT_EQ(to_hex(buf),
            to_hex(hex("02 | 0001 0008 0000000000000005 | 0002 0008 0000000000000006 |"
                       "0004 0001 00 | 0003 0010 6d657373656e6765722d6d75782d7631 |"
                       "0005 0004 00000100 | 0006 0004 00100000")));
  AttachResponse back;
  ASSERT_EQ(decode_attach_response(buf, &back), DecodeError::kOk);
  EXPECT_EQ(back.transport_key, uint32_t{kTransportMux});
  EXPECT_EQ(back.initial_credit, 256u);
  EXPECT_EQ(back.slot_byte_budget, 1u << 20);
  AttachMessage type;
  ASSERT_EQ(attach_message_type(buf, &type), DecodeError::kOk);
  EXPECT_EQ(type, AttachMessage::kResponse);
}

// A resume: the request names the session it takes over (tag 8), the
// answer the frames the anchor holds of it (tag 9); a new stream's
// messages carry neither (the goldens above).
TEST(AttachGolden, AResumeAndItsAnswer) {
  AttachRequest m{5, 6, kTransportMux};
  m.resume_session = 0x0102030405060708;
  std::vector<std::byte> buf(128);
  buf.resize(encode_attach_request(m, buf));
  EXPECT_EQ(to_hex(buf),
            to_hex(hex("01 | 0001 0008 0000000000000005 | 0002 0008 0000000000000006 |"
                       "0003 0010 6d657373656e6765722d6d75782d7631 | 0008 0008 0102030405060708")));
  AttachRequest back;
  ASSERT_EQ(decode_attach_request(buf, &back), DecodeError::kOk);
  EXPECT_EQ(back.resume_session, 0x0102030405060708u);
  AttachResponse r;
  r.anchor_id = 5;
  r.session_id = 6;
  r.transport_key = kTransportMux;
  r.initial_credit = 256;
  r.resumed = true;
  r.resume_at = 41;
  buf.assign(128, std::byte{0});
  buf.resize(encode_attach_response(r, buf));
  EXPECT_EQ(to_hex(buf),
            to_hex(hex("02 | 0001 0008 0000000000000005 | 0002 0008 0000000000000006 |"
                       "0004 0001 00 | 0003 0010 6d657373656e6765722d6d75782d7631 |"
                       "0005 0004 00000100 | 0006 0004 00000000 | 0009 0004 00000029")));
  AttachResponse rback;
  ASSERT_EQ(decode_attach_response(buf, &rback), DecodeError::kOk);
  EXPECT_TRUE(rback.resumed);
  EXPECT_EQ(rback.resume_at, 41u);
  // A resume answered at frame 0 still says so (tag 9): an answer without
  // it is a consumer that does not know resumes.
  r.resume_at = 0;
  buf.assign(128, std::byte{0});
  buf.resize(encode_attach_response(r, buf));
  ASSERT_EQ(decode_attach_response(buf, &rback), DecodeError::kOk);
  EXPECT_TRUE(rback.resumed);
  EXPECT_EQ(rback.resume_at, 0u);
  r.resumed = false;
  buf.assign(128, std::byte{0});
  buf.resize(encode_attach_response(r, buf));
  ASSERT_EQ(decode_attach_response(buf, &rback), DecodeError::kOk);
  EXPECT_FALSE(rback.resumed);
  // Either with the wrong width is refused.
  EXPECT_EQ(decode_attach_request(hex("01 | 0008 0004 00000009"), &back), DecodeError::kBadLength);
  EXPECT_EQ(decode_attach_response(hex("02 | 0009 0008 0000000000000009"), &rback), DecodeError::kBadLength);
}

TEST(AttachCompat, UnknownFieldsAreSkippedAndUnknownKeysIgnored) {
  // A newer peer adds tag 99 and advertises a key this build has never heard.
  const auto buf = hex("01 | 0063 0003 aabbcc | 0001 0008 0000000000000009 |"
                       "0003 0004 71756963 | 0003 0003 746370");
  AttachRequest m;
  ASSERT_EQ(decode_attach_request(buf, &m), DecodeError::kOk);
  EXPECT_EQ(m.anchor_id, 9u);
  EXPECT_EQ(m.session_id, 0u);  // missing: defaulted
  EXPECT_EQ(m.supported_keys, uint32_t{kTransportTcp});
}

TEST(AttachCompat, AnOlderResponseWithoutCreditFieldsMeansLegacy) {
  const auto buf = hex("02 | 0001 0008 0000000000000005 | 0003 0003 746370");
  AttachResponse m;
  ASSERT_EQ(decode_attach_response(buf, &m), DecodeError::kOk);
  EXPECT_EQ(m.transport_key, uint32_t{kTransportTcp});
  EXPECT_EQ(m.initial_credit, 0u);
  EXPECT_EQ(m.slot_byte_budget, 0u);
  EXPECT_EQ(m.status, AttachStatus::kOk);
}

TEST(AttachCompat, MalformedMessagesAreRefused) {
  AttachResponse resp;
  AttachRequest req;
  // A chosen key this build cannot use.
  EXPECT_EQ(decode_attach_response(hex("02 | 0003 0004 71756963"), &resp), DecodeError::kBadValue);
  // Two chosen keys.
  EXPECT_EQ(decode_attach_response(hex("02 | 0003 0003 746370 | 0003 0003 746370"), &resp),
            DecodeError::kBadValue);
  // A known field with the wrong width.
  EXPECT_EQ(decode_attach_request(hex("01 | 0001 0004 00000009"), &req), DecodeError::kBadLength);
  // A field running past the end.
  EXPECT_EQ(decode_attach_request(hex("01 | 0001 0008 0000"), &req), DecodeError::kTruncated);
  // A response handed to the request decoder.
  EXPECT_EQ(decode_attach_request(hex("02"), &req), DecodeError::kBadKind);
  EXPECT_EQ(decode_attach_request({}, &req), DecodeError::kTruncated);
  // A status out of range.
  EXPECT_EQ(decode_attach_response(hex("02 | 0004 0001 07"), &resp), DecodeError::kBadValue);
}

}  // namespace
}  // namespace ringfire::proto
