// slot_table_test.cc — a freed index comes back with a new generation, so a
// stale id finds nothing; the table holds its capacity and no more; the
// generation wraps after 256 reuses without confusing the live occupant.
#include "mux/slot_table.h"

#include "gtest/gtest.h"

namespace ringfire::mux {
namespace {

// value: what `id` finds, or -1 for nothing.
int value(SlotTable<int>& t, proto::SlotId id) {
  const int* v = t.find(id);
  return v == nullptr ? -1 : *v;
}

TEST(SlotTable, AFreedIndexComesBackWithANewGenerationAndTheStaleIdFindsNothing) {
  SlotTable<int> t(4);
  auto a = t.open(1);
  ASSERT_TRUE(a);
  EXPECT_EQ(value(t, *a), 1);
  ASSERT_TRUE(t.close(*a));
  EXPECT_EQ(t.find(*a), nullptr);
  EXPECT_FALSE(t.close(*a));
  auto b = t.open(2);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->index, a->index);  // reused
  EXPECT_NE(b->generation, a->generation);
  EXPECT_EQ(t.find(*a), nullptr);  // request A's id never reaches request B
  EXPECT_EQ(value(t, *b), 2);
  EXPECT_EQ(t.live(), 1u);
}

TEST(SlotTable, HoldsItsCapacityAndNoMore) {
  SlotTable<int> t(3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.open(i));
  EXPECT_FALSE(t.open(9));
  EXPECT_EQ(t.live(), 3u);
  int seen = 0;
  t.for_each([&](proto::SlotId, int& v) { seen += v; });
  EXPECT_EQ(seen, 0 + 1 + 2);
}

TEST(SlotTable, TheGenerationWrapsAndStillTellsTheLiveOccupantFromTheLastOne) {
  SlotTable<int> t(1);
  proto::SlotId prev{};
  for (int i = 0; i < 600; ++i) {
    auto id = t.open(i);
    ASSERT_TRUE(id);
    EXPECT_EQ(id->index, 0u);
    if (i != 0) {
      EXPECT_EQ(t.find(prev), nullptr) << i;
    }
    EXPECT_EQ(value(t, *id), i);
    ASSERT_TRUE(t.close(*id));
    prev = *id;
  }
}

}  // namespace
}  // namespace ringfire::mux
