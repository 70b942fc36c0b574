// negotiation_test.cc — the mux is chosen only when both sides have it; a
// receiver without it, or a sender that does not advertise it, gets the
// per-stream TCP path; a zero window and a mux answer nobody asked for are
// refused; disabling the mux is the rollback; an unknown anchor says so.
#include "mux/negotiation.h"

#include "gtest/gtest.h"

namespace ringfire::mux {
namespace {

MuxConfig on() {
  MuxConfig c;
  c.enabled = true;
  c.initial_credit = 64;
  c.slot_byte_budget = 2 << 20;
  return c;
}

proto::AttachRequest request_from(const MuxConfig& sender) {
  proto::AttachRequest r;
  r.anchor_id = 5;
  r.session_id = 6;
  r.supported_keys = supported_keys(sender);
  return r;
}

TEST(Negotiation, BothEnabledPicksTheMuxWithTheReceiversWindowAndBudget) {
  const proto::AttachResponse a = answer(request_from(on()), on(), true);
  EXPECT_EQ(a.transport_key, proto::kTransportMux);
  EXPECT_EQ(a.anchor_id, 5u);
  EXPECT_EQ(a.session_id, 6u);
  auto c = choose(a, on());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, PathChoice::Kind::kMux);
  EXPECT_EQ(c->credit, 64u);
  EXPECT_EQ(c->slot_byte_budget, 2u << 20);
}

TEST(Negotiation, EitherSideWithoutItTakesThePerStreamPath) {
  const MuxConfig off;  // enabled = false: the rollback switch
  for (const auto& [sender, receiver] : {std::pair{on(), off}, std::pair{off, on()}, std::pair{off, off}}) {
    const proto::AttachResponse a = answer(request_from(sender), receiver, true);
    EXPECT_EQ(a.transport_key, proto::kTransportTcp);
    EXPECT_EQ(a.initial_credit, 0u);
    auto c = choose(a, sender);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->kind, PathChoice::Kind::kTcp);
  }
  proto::AttachRequest legacy;  // advertises nothing: an older sender
  EXPECT_EQ(answer(legacy, on(), true).transport_key, proto::kTransportTcp);
}

TEST(Negotiation, AZeroWindowAnUnaskedMuxAndAnUnknownAnchorAreRefusedSayingWhy) {
  proto::AttachResponse a = answer(request_from(on()), on(), true);
  a.initial_credit = 0;
  auto c = choose(a, on());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("zero window"), std::string::npos);
  a.initial_credit = 8;
  c = choose(a, MuxConfig{});  // we never offered it
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("did not offer"), std::string::npos);
  const proto::AttachResponse unknown = answer(request_from(on()), on(), false);
  EXPECT_EQ(unknown.status, proto::AttachStatus::kUnknownAnchor);
  c = choose(unknown, on());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  a.slot_byte_budget = 0;  // "use the default"
  c = choose(a, on());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->slot_byte_budget, on().slot_byte_budget);
}

// Through the codec: what the receiver encodes, the sender decodes and
// chooses the same way.
TEST(Negotiation, TheAnswerSurvivesTheWire) {
  std::byte buf[256];
  const proto::AttachRequest req = request_from(on());
  const size_t n = proto::encode_attach_request(req, buf);
  ASSERT_GT(n, 0u);
  proto::AttachRequest got;
  ASSERT_EQ(proto::decode_attach_request(proto::ConstBytes(buf, n), &got), proto::DecodeError::kOk);
  const proto::AttachResponse a = answer(got, on(), true);
  const size_t m = proto::encode_attach_response(a, buf);
  proto::AttachResponse back;
  ASSERT_EQ(proto::decode_attach_response(proto::ConstBytes(buf, m), &back), proto::DecodeError::kOk);
  auto c = choose(back, on());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, PathChoice::Kind::kMux);
  EXPECT_EQ(c->credit, 64u);
}

}  // namespace
}  // namespace ringfire::mux
