// loss_meter_test.cc — dup = "auto"'s judgment of one mirror's path: the
// first report a baseline, windows under kMinWindow folded into the next,
// a lossy path doubled after one window and a clean one never, the
// hysteresis between the thresholds, the way back to one copy, and a count
// that goes back (a lying or restarted mirror) taken as a new baseline.
#include "dataplane/loss_meter.h"

#include <gtest/gtest.h>

namespace ringfire::dataplane {
namespace {

constexpr LossThresholds kT{};  // on above 1 %, off below 0.2 %

// window: `sent` datagrams go out, of which the mirror reports taking
// `taken` more than before; returns whether the copies changed.
struct Path {
  LossMeter m;
  uint64_t received = 0;
  bool window(uint64_t sent, uint64_t taken) {
    m.sent(sent);
    received += taken;
    return m.report(received, kT);
  }
};

TEST(LossMeter, TheFirstReportIsABaselineAndALossyWindowDoublesAtOnce) {
  Path p;
  p.m.sent(5000);  // before the first report: not judged (the mirror's count started elsewhere)
  EXPECT_FALSE(p.m.report(0, kT));
  EXPECT_EQ(p.m.copies(), 1u);
  EXPECT_TRUE(p.window(1000, 800));  // 20 % lost
  EXPECT_EQ(p.m.copies(), 2u);
  EXPECT_EQ(p.m.loss_ppm(), 200'000u);
}

TEST(LossMeter, ACleanPathIsNeverDoubled) {
  Path p;
  p.m.report(0, kT);
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(p.window(1000, 1000));
    EXPECT_FALSE(p.window(1000, 1001));  // a report that counted one in flight more: not a gain
  }
  EXPECT_EQ(p.m.copies(), 1u);
  EXPECT_EQ(p.m.loss_ppm(), 0u);
}

TEST(LossMeter, AShortWindowFoldsIntoTheNext) {
  Path p;
  p.m.report(0, kT);
  EXPECT_FALSE(p.window(LossMeter::kMinWindow - 1, 0));  // all lost, but too few to judge
  EXPECT_EQ(p.m.copies(), 1u);
  EXPECT_EQ(p.m.loss_ppm(), 0u);
  EXPECT_TRUE(p.window(1, 0));  // now the window is whole: every one of 256 lost
  EXPECT_EQ(p.m.loss_ppm(), 1'000'000u);
}

TEST(LossMeter, BetweenTheThresholdsTheCopiesStayAsTheyAre) {
  Path single;
  single.m.report(0, kT);
  for (int i = 0; i < 50; ++i) single.window(10'000, 9'950);  // 0.5 %: below on, above off
  EXPECT_EQ(single.m.copies(), 1u);
  EXPECT_EQ(single.m.loss_ppm(), 5'000u);

  Path doubled;
  doubled.m.report(0, kT);
  doubled.window(10'000, 9'000);  // 10 %: doubled
  ASSERT_EQ(doubled.m.copies(), 2u);
  for (int i = 0; i < 50; ++i) doubled.window(10'000, 9'950);
  EXPECT_EQ(doubled.m.copies(), 2u);  // 0.5 % is not clean enough to go back
}

TEST(LossMeter, APathThatHealsGoesBackToOneCopyAfterTheAverageFalls) {
  Path p;
  p.m.report(0, kT);
  ASSERT_TRUE(p.window(1000, 800));
  int windows = 0;
  while (p.m.copies() == 2 && windows < 100) {
    p.window(1000, 1000);
    ++windows;
  }
  EXPECT_EQ(p.m.copies(), 1u);
  // 200,000 ppm decays by a quarter a window: below 2,000 after 17.
  EXPECT_EQ(windows, 17);
  EXPECT_LT(p.m.loss_ppm(), kT.off_ppm);
}

TEST(LossMeter, ACountThatGoesBackIsANewBaselineNotAJudgment) {
  Path p;
  p.m.report(0, kT);
  p.window(1000, 1000);
  p.m.sent(1000);
  EXPECT_FALSE(p.m.report(10, kT));  // below the last report's 1,000
  EXPECT_EQ(p.m.copies(), 1u);
  p.received = 10;
  EXPECT_TRUE(p.window(1000, 500));  // judged from the new baseline: 50 %, a quarter of it into the average
  EXPECT_EQ(p.m.loss_ppm(), 125'000u);
}

}  // namespace
}  // namespace ringfire::dataplane
