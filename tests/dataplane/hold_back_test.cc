// hold_back_test.cc — the hold-back: lowest first, bounded in frames and
// bytes, a held range never copied twice, and space freed out of order
// reused (compaction) instead of leaked.
#include "dataplane/hold_back.h"

#include <vector>

#include "gtest/gtest.h"

namespace ringfire::dataplane {
namespace {

std::vector<std::byte> frame(size_t n, uint8_t fill) { return std::vector<std::byte>(n, std::byte{fill}); }

TEST(HoldBack, FramesComeBackLowestFirstWithTheirBytes) {
  HoldBack h(8, 4096);
  ASSERT_EQ(h.hold(30, 31, frame(10, 3)), HoldBack::Hold::kHeld);
  ASSERT_EQ(h.hold(10, 12, frame(10, 1)), HoldBack::Hold::kHeld);
  ASSERT_EQ(h.hold(20, 25, frame(10, 2)), HoldBack::Hold::kHeld);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  h.for_each([&](uint64_t a, uint64_t b) { ranges.emplace_back(a, b); });
  EXPECT_EQ(ranges, (std::vector<std::pair<uint64_t, uint64_t>>{{10, 12}, {20, 25}, {30, 31}}));
  for (uint8_t want : {1, 2, 3}) {
    const HoldBack::HeldFrame f = h.pop();
    EXPECT_EQ(std::to_integer<uint8_t>(f.bytes[0]), want);
  }
  EXPECT_TRUE(h.empty());
}

TEST(HoldBack, TheSameRangeIsHeldOnce) {
  HoldBack h(8, 4096);
  EXPECT_EQ(h.hold(10, 12, frame(100, 1)), HoldBack::Hold::kHeld);
  EXPECT_EQ(h.hold(10, 12, frame(100, 1)), HoldBack::Hold::kDuplicate);
  EXPECT_EQ(h.hold(10, 11, frame(50, 1)), HoldBack::Hold::kHeld);  // another range from 10
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(h.bytes_used(), 150u);
}

TEST(HoldBack, SpaceFreedOutOfArrivalOrderIsReusedNotLeaked) {
  // 3 KiB of arena, 1 KiB frames. 100 arrives first (arena 0), 50 second
  // (1 KiB), 200 third (2 KiB): full. Popping 50 frees the middle; a fourth
  // frame fits only if the live frames are moved together.
  HoldBack h(8, 3072);
  ASSERT_EQ(h.hold(100, 101, frame(1024, 100)), HoldBack::Hold::kHeld);
  ASSERT_EQ(h.hold(50, 51, frame(1024, 50)), HoldBack::Hold::kHeld);
  ASSERT_EQ(h.hold(200, 201, frame(1024, 200)), HoldBack::Hold::kHeld);
  EXPECT_EQ(h.hold(300, 301, frame(1024, 30)), HoldBack::Hold::kFull);
  EXPECT_EQ(h.pop().first_seq, 50u);
  ASSERT_EQ(h.hold(300, 301, frame(1024, 30)), HoldBack::Hold::kHeld);
  for (uint8_t want : {100, 200, 30}) {
    const HoldBack::HeldFrame f = h.pop();
    ASSERT_EQ(f.bytes.size(), 1024u);
    EXPECT_EQ(std::to_integer<uint8_t>(f.bytes[0]), want);
    EXPECT_EQ(std::to_integer<uint8_t>(f.bytes[1023]), want);
  }
}

TEST(HoldBack, ManyOverlappingHolesNeverRunItOutOfSpace) {
  // The pattern that leaked before: the hold-back never empties, frames
  // leave from the middle of the arena. Over 100 k frames it must keep
  // taking them while its live bytes stay within its bound.
  HoldBack h(64, 64 * 256);
  uint64_t next = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    ASSERT_EQ(h.hold(i * 2 + 1000, i * 2 + 1001, frame(200, static_cast<uint8_t>(i))), HoldBack::Hold::kHeld) << i;
    while (h.size() > 32) {
      ASSERT_GE(h.pop().first_seq, next);
      next = i;
    }
  }
}

TEST(HoldBack, BoundedInFrames) {
  HoldBack h(2, 4096);
  EXPECT_EQ(h.hold(1, 2, frame(10, 1)), HoldBack::Hold::kHeld);
  EXPECT_EQ(h.hold(2, 3, frame(10, 1)), HoldBack::Hold::kHeld);
  EXPECT_EQ(h.hold(3, 4, frame(10, 1)), HoldBack::Hold::kFull);
}

}  // namespace
}  // namespace ringfire::dataplane
