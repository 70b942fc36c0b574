// repair_queue_test.cc — the ranges still to answer over one connection:
// merged, sorted, bounded; and the memory of UDP repairs that makes a
// repeat go over TCP.
#include "control/repair_queue.h"

#include <vector>

#include "control/recent_repairs.h"
#include "gtest/gtest.h"

namespace ringfire::control {
namespace {

using proto::Nak;

std::vector<std::pair<uint64_t, uint64_t>> contents(const RepairQueue& q) {
  std::vector<std::pair<uint64_t, uint64_t>> v;
  for (size_t i = 0; i < q.size(); ++i) v.emplace_back(q.at(i).first, q.at(i).last);
  return v;
}

TEST(RepairQueue, RangesAreKeptSortedAndMergedWhenTheyOverlapOrTouch) {
  RepairQueue q;
  ASSERT_TRUE(q.add(Nak{50, 60}));
  ASSERT_TRUE(q.add(Nak{10, 20}));
  ASSERT_TRUE(q.add(Nak{21, 25}));   // touches 10..20
  ASSERT_TRUE(q.add(Nak{58, 70}));   // overlaps 50..60
  ASSERT_TRUE(q.add(Nak{100, 100}));
  EXPECT_EQ(contents(q), (std::vector<std::pair<uint64_t, uint64_t>>{{10, 25}, {50, 70}, {100, 100}}));
  ASSERT_TRUE(q.add(Nak{0, 200}));   // swallows everything
  EXPECT_EQ(contents(q), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 200}}));
  EXPECT_TRUE(q.covered(Nak{5, 10}));
  EXPECT_FALSE(q.covered(Nak{150, 250}));
}

TEST(RepairQueue, AdvanceConsumesTheFrontRange) {
  RepairQueue q;
  ASSERT_TRUE(q.add(Nak{10, 20}));
  ASSERT_TRUE(q.add(Nak{30, 40}));
  q.advance(15);
  EXPECT_EQ(q.front().first, 15u);
  q.advance(21);
  EXPECT_EQ(q.front().first, 30u);
  EXPECT_EQ(q.size(), 1u);
}

TEST(RepairQueue, ItIsBoundedAndAFullQueueRefusesOnlyNewEntries) {
  RepairQueue q;
  for (uint64_t i = 0; i < RepairQueue::kMaxRanges; ++i) ASSERT_TRUE(q.add(Nak{i * 10, i * 10 + 1}));
  EXPECT_FALSE(q.add(Nak{1'000'000, 1'000'001}));
  EXPECT_TRUE(q.add(Nak{0, 5}));  // merges into an entry: still fine
  EXPECT_EQ(q.size(), RepairQueue::kMaxRanges);
}

TEST(RecentRepairs, TheYoungestOverlappingRepairAndWhoAskedForIt) {
  RecentRepairs r;
  int a = 0, b = 0;
  r.remember(Nak{10, 20}, 1000, &a);
  r.remember(Nak{15, 30}, 2000, &b);
  const auto o = r.youngest_overlap(Nak{18, 19}, 2500, 10'000);
  EXPECT_EQ(o.sent_ns, 2000u);
  EXPECT_EQ(o.asker, &b);
  EXPECT_EQ(r.youngest_overlap(Nak{31, 40}, 2500, 10'000).sent_ns, 0u);
  EXPECT_EQ(r.youngest_overlap(Nak{10, 12}, 20'000, 10'000).sent_ns, 0u);  // too old
}

}  // namespace
}  // namespace ringfire::control
