// anchor_handle_test.cc — a handle carries its node's worker id in the upper
// 64 bits (recovered with a shift), prints and parses back with or without
// a ticket, and refuses malformed text (a ticket's too).
#include "mux/anchor_handle.h"

#include "gtest/gtest.h"

namespace ringfire::mux {
namespace {

TEST(AnchorHandle, TheWorkerIdIsTheUpperHalfAndTheTextRoundTrips) {
  const uint64_t w = worker_id("node-a");
  EXPECT_EQ(w, worker_id("node-a"));  // deterministic
  EXPECT_NE(w, worker_id("node-b"));
  const AnchorHandle h{w, 42, {}};
  EXPECT_EQ(static_cast<uint64_t>(h.packed() >> 64), w);  // the batching key, by a shift
  EXPECT_EQ(AnchorHandle::unpack(h.packed()), h);
  const std::string s = h.to_string();
  EXPECT_EQ(s.size(), 33u);
  EXPECT_EQ(s.substr(17), "000000000000002a");
  auto back = AnchorHandle::parse(s);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, h);
}

TEST(AnchorHandle, MalformedTextIsRefused) {
  for (const char* bad : {"", "00", "000000000000000x:000000000000002a", "0000000000000000-000000000000002a",
                          "0000000000000000:000000000000002", "0000000000000000:000000000000002aa"}) {
    EXPECT_FALSE(AnchorHandle::parse(bad)) << bad;
  }
  EXPECT_TRUE(AnchorHandle::parse("FFFFFFFFFFFFFFFF:0000000000000001"));
}

TEST(AnchorHandle, ATicketRidesInTheTextAndRoundTrips) {
  const AnchorHandle h{worker_id("node-a"), 42, Ticket{0x0123456789abcdefull, 64, 0x10000, 0x800000}};
  const std::string s = h.to_string();
  EXPECT_EQ(s.size(), 77u);
  EXPECT_EQ(s.substr(33), ":0123456789abcdef:00000040:00010000:00800000");
  auto back = AnchorHandle::parse(s);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, h);
  EXPECT_EQ(back->ticket.credit, 64u);
  // The 128-bit name is the ticket apart: the batching key is the same.
  EXPECT_EQ(AnchorHandle::unpack(h.packed()).anchor, 42u);
  EXPECT_EQ(AnchorHandle::unpack(h.packed()).ticket.session, 0u);
}

TEST(AnchorHandle, AMalformedTicketIsRefusedNotTruncated) {
  const std::string base = "0000000000000001:000000000000002a";
  for (const std::string& bad : {
           base + ":",                                                 // a trailing ':'
           base + ":0123456789abcdef",                                 // a session alone
           base + ":0123456789abcdef:00000040:00010000",               // a field short
           base + ":0123456789abcdef:00000040:00010000:00800000:",     // a trailing ':'
           base + ":0123456789abcdef:00000040:00010000:008000000",     // a digit long
           base + ":0123456789abcdef:00000040:00010000:0080000g",      // not hex
           base + ":0123456789abcdef-00000040:00010000:00800000",      // not ':'
           base + ":0000000000000000:00000040:00010000:00800000",      // session 0: no ticket
           base + ":0123456789abcdef:00000000:00010000:00800000",      // zero credit: never granted
       }) {
    EXPECT_FALSE(AnchorHandle::parse(bad)) << bad;
  }
  // Zero budgets are allowed (the producer's own, as in an ATTACH answer).
  EXPECT_TRUE(AnchorHandle::parse(base + ":0123456789abcdef:00000001:00000000:00000000"));
}

// What a refusal says of the text: its first 33 characters at most, never
// a ticket's session (a secret) that follows them.
TEST(AnchorHandle, ARefusalEchoesNoMoreThanTheShortForm) {
  const std::string ticket = "0000000000000001:000000000000002a:0123456789abcdef:00000040:00010000:0080000g";
  const std::string said = not_a_handle(ticket);
  EXPECT_EQ(said, "not a handle: '0000000000000001:000000000000002a...'");
  EXPECT_EQ(said.find("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(not_a_handle("nope"), "not a handle: 'nope'");
  // Unpadded or shifted: nothing from the second ':' on.
  EXPECT_EQ(not_a_handle("1:2a:0123456789abcdef:00000040:00010000:00800000"), "not a handle: '1:2a...'");
  EXPECT_EQ(not_a_handle(":0123456789abcdef:00000040"), "not a handle: ':0123456789abcdef...'");
  EXPECT_EQ(not_a_handle("caf\xc3\xa9"), "not a handle: 'caf?" "?'");  // what Python can always decode
}

}  // namespace
}  // namespace ringfire::mux
