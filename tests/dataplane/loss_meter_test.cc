// loss_meter_test.cc — dup = "auto"'s judgment of one mirror's path: the
// first report a baseline, windows under kMinWindow folded into the next,
// a lossy path doubled after one window and a clean one never (nor one
// whose reports lead and lag what was sent), the hysteresis between the
// thresholds, the way back to one copy, a dead path left at one copy, and
// a count that goes back (a lying or restarted mirror) taken as a new
// baseline.
#include "dataplane/loss_meter.h"

#include <gtest/gtest.h>

namespace ringfire::dataplane {
namespace {

constexpr LossThresholds kT{};  // on above 1 %, off below 0.2 %

// window: `sent` datagrams go out, of which the mirror reports taking
// `taken` more than before; returns whether the copies changed.
// A mirror that misses datagrams NAKs (its count grows with each window
// that lost any).
struct Path {
  LossMeter m;
  uint64_t received = 0;
  uint64_t naks = 0;
  bool window(uint64_t sent, uint64_t taken) {
    m.sent(sent);
    received += taken;
    naks += taken < sent;
    return m.report(received, naks, kT);
  }
};

TEST(LossMeter, TheFirstReportIsABaselineAndALossyWindowDoublesAtOnce) {
  Path p;
  p.m.sent(5000);  // before the first report: not judged (the mirror's count started elsewhere)
  EXPECT_FALSE(p.m.report(0, 0, kT));
  EXPECT_EQ(p.m.copies(), 1u);
  EXPECT_TRUE(p.window(1000, 800));  // 20 % lost: a quarter of it into the average from 0
  EXPECT_EQ(p.m.copies(), 2u);
  EXPECT_EQ(p.m.loss_ppm(), 50'000u);
}

TEST(LossMeter, ACleanPathIsNeverDoubled) {
  Path p;
  p.m.report(0, 0, kT);
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(p.window(1000, 1000));
    EXPECT_FALSE(p.window(1000, 1001));  // a report that counted one in flight more: not a gain
  }
  EXPECT_EQ(p.m.copies(), 1u);
  EXPECT_EQ(p.m.loss_ppm(), 0u);
}

TEST(LossMeter, AShortWindowFoldsIntoTheNext) {
  Path p;
  p.m.report(0, 0, kT);
  EXPECT_FALSE(p.window(LossMeter::kMinWindow - 1, 0));  // all lost, but too few to judge
  EXPECT_EQ(p.m.copies(), 1u);
  EXPECT_EQ(p.m.loss_ppm(), 0u);
  EXPECT_TRUE(p.window(1, 0));  // now the window is whole: every one of 256 lost (a quarter of 100 %)
  EXPECT_EQ(p.m.loss_ppm(), 250'000u);
}

TEST(LossMeter, BetweenTheThresholdsTheCopiesStayAsTheyAre) {
  Path single;
  single.m.report(0, 0, kT);
  for (int i = 0; i < 50; ++i) single.window(10'000, 9'950);  // 0.5 %: below on, above off
  EXPECT_EQ(single.m.copies(), 1u);
  EXPECT_NEAR(static_cast<double>(single.m.loss_ppm()), 5'000, 5);

  Path doubled;
  doubled.m.report(0, 0, kT);
  doubled.window(10'000, 9'000);  // 10 %: doubled
  ASSERT_EQ(doubled.m.copies(), 2u);
  for (int i = 0; i < 50; ++i) doubled.window(10'000, 9'950);
  EXPECT_EQ(doubled.m.copies(), 2u);  // 0.5 % is not clean enough to go back
}

TEST(LossMeter, APathThatHealsGoesBackToOneCopyAfterTheAverageFalls) {
  Path p;
  p.m.report(0, 0, kT);
  ASSERT_TRUE(p.window(1000, 800));
  int windows = 0;
  while (p.m.copies() == 2 && windows < 100) {
    p.window(1000, 1000);
    ++windows;
  }
  EXPECT_EQ(p.m.copies(), 1u);
  // 50,000 ppm decays by a quarter a window: below 2,000 after 12.
  EXPECT_EQ(windows, 12);
  EXPECT_LT(p.m.loss_ppm(), kT.off_ppm);
}

// The mirror's count is taken as it sends HEALTH, the source's as the
// worker reads the report: one window counts some in flight as lost, the
// next gives them back. Signed windows cancel; clipped at 0 they would
// add up to a loss that was never there.
TEST(LossMeter, ReportsThatLeadAndLagWhatWasSentCancel) {
  Path p;
  p.m.report(0, 0, kT);
  for (int i = 0; i < 200; ++i) {
    p.window(1000, 970);   // 3 % "lost": 30 still in flight
    p.window(1000, 1030);  // ... and here they are
    EXPECT_EQ(p.m.copies(), 1u) << i;
  }
}

// A path that loses most of what it is sent (a dead link, a receiver that
// drops nearly everything) is not sent twice as much: repairs over TCP carry it.
TEST(LossMeter, ADeadPathStaysAtOneCopyAndADoubledOneThatDiesGoesBack) {
  Path dead;
  dead.m.report(0, 0, kT);
  for (int i = 0; i < 20; ++i) dead.window(1000, 0);
  EXPECT_EQ(dead.m.copies(), 1u);
  EXPECT_GT(dead.m.loss_ppm(), kT.dead_ppm);

  Path dying;
  dying.m.report(0, 0, kT);
  ASSERT_TRUE(dying.window(1000, 800));
  int windows = 0;
  while (dying.m.copies() == 2 && windows < 20) {
    dying.window(1000, 0);
    ++windows;
  }
  EXPECT_EQ(dying.m.copies(), 1u);
  EXPECT_LE(windows, 3);
}

// Counts that show loss from a mirror that NAKed nothing (it missed no
// record: a count read at the wrong moment, datagrams a port counted as
// sent and lost before the wire) never double it; the first window in
// which it also NAKs does.
TEST(LossMeter, LossWithoutANakNeverDoubles) {
  LossMeter m;
  m.report(0, 0, kT);
  uint64_t received = 0;
  for (int i = 0; i < 50; ++i) {
    m.sent(1000);
    received += 900;
    EXPECT_FALSE(m.report(received, 0, kT)) << i;
  }
  EXPECT_EQ(m.copies(), 1u);
  EXPECT_GT(m.loss_ppm(), kT.on_ppm);
  m.sent(1000);
  received += 900;
  EXPECT_TRUE(m.report(received, 1, kT));
  EXPECT_EQ(m.copies(), 2u);
}

TEST(LossMeter, ACountThatGoesBackIsANewBaselineNotAJudgment) {
  Path p;
  p.m.report(0, 0, kT);
  p.window(1000, 1000);
  p.m.sent(1000);
  EXPECT_FALSE(p.m.report(10, p.naks, kT));  // below the last report's 1,000
  EXPECT_EQ(p.m.copies(), 1u);
  p.received = 10;
  EXPECT_TRUE(p.window(1000, 500));  // judged from the new baseline: 50 %, a quarter of it into the average
  EXPECT_EQ(p.m.loss_ppm(), 125'000u);
}

}  // namespace
}  // namespace ringfire::dataplane
