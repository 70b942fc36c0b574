// anchor_handle_test.cc — a handle carries its node's worker id in the upper
// 64 bits (recovered with a shift), prints and parses back, and refuses
// malformed text.
#include "mux/anchor_handle.h"

#include "gtest/gtest.h"

namespace ringfire::mux {
namespace {

TEST(AnchorHandle, TheWorkerIdIsTheUpperHalfAndTheTextRoundTrips) {
  const uint64_t w = worker_id("node-a");
  EXPECT_EQ(w, worker_id("node-a"));  // deterministic
  EXPECT_NE(w, worker_id("node-b"));
  const AnchorHandle h{w, 42};
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

}  // namespace
}  // namespace ringfire::mux
