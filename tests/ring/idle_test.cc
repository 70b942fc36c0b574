// idle_test.cc — the idle strategies: when each one parks.
#include "ring/idle.h"

#include <gtest/gtest.h>

#include "ring/monotonic.h"

namespace ringfire::ring {
namespace {

// idle_until_park: empty polls until the strategy parks; how many it took.
uint64_t idle_until_park(IdleStrategy& s, uint64_t max_polls) {
  bool parked = false;
  uint64_t polls = 0;
  while (!parked && polls < max_polls) {
    s.idle([&](uint64_t) { parked = true; });
    ++polls;
  }
  return parked ? polls : 0;
}

TEST(Idle, BackoffParksAfterItsSpinsAndYields) {
  IdleStrategy s(IdleMode::kBackoff);
  EXPECT_EQ(idle_until_park(s, 1'000), IdleStrategy::kSpinPolls + IdleStrategy::kYieldPolls);
  s.reset();
  EXPECT_EQ(idle_until_park(s, 1'000), IdleStrategy::kSpinPolls + IdleStrategy::kYieldPolls);
}

// A poller whose every empty poll is a system call (a kernel port) spins
// and yields a few polls, not a hundred, before it parks.
TEST(Idle, BackoffParksSoonerWhenEachPollIsASystemCall) {
  IdleStrategy s(IdleMode::kBackoff);
  s.costly_polls(true);
  EXPECT_EQ(idle_until_park(s, 1'000), IdleStrategy::kCostlySpinPolls + IdleStrategy::kCostlyYieldPolls);
  static_assert(IdleStrategy::kCostlySpinPolls + IdleStrategy::kCostlyYieldPolls <
                IdleStrategy::kSpinPolls + IdleStrategy::kYieldPolls);
  s.reset();
  EXPECT_EQ(idle_until_park(s, 1'000), IdleStrategy::kCostlySpinPolls + IdleStrategy::kCostlyYieldPolls);
  s.costly_polls(false);  // back to a ring poller's
  s.reset();
  EXPECT_EQ(idle_until_park(s, 1'000), IdleStrategy::kSpinPolls + IdleStrategy::kYieldPolls);
}

// A poller whose park wakes for all its work parks almost at once: its
// empty polls (each a syscall on a kernel port) buy no latency.
TEST(Idle, BackoffParksAfterAFewPollsWhenEverythingWakesThePoller) {
  IdleStrategy s(IdleMode::kBackoff);
  uint64_t polls = 0;
  bool parked = false;
  while (!parked && polls < 1'000) {
    s.idle([&](uint64_t) { parked = true; }, /*woken=*/true);
    ++polls;
  }
  EXPECT_EQ(polls, IdleStrategy::kWokenPolls);
  // Hot stays hot: its window is what its user asked for.
  IdleStrategy hot(IdleMode::kHot);
  parked = false;
  for (int i = 0; i < 1'000 && !parked; ++i) hot.idle([&](uint64_t) { parked = true; }, true);
  EXPECT_FALSE(parked);
}

TEST(Idle, HotStaysAwakeForItsWindowAfterWorkThenParks) {
  IdleStrategy s(IdleMode::kHot);
  for (int round = 0; round < 2; ++round) {
    const uint64_t start = monotonic_ns();
    const uint64_t polls = idle_until_park(s, uint64_t{1} << 40);
    const uint64_t waited = monotonic_ns() - start;
    ASSERT_NE(polls, 0u);
    // Well past backoff's 120 polls, and not before the window passed.
    EXPECT_GT(polls, IdleStrategy::kSpinPolls + IdleStrategy::kYieldPolls);
    EXPECT_GE(waited, IdleStrategy::kHotNs);
    // Cold now: the next empty poll parks again at once.
    EXPECT_EQ(idle_until_park(s, 1), 1u);
    s.reset();  // work came: hot again
  }
}

TEST(Idle, ParsesEveryModeByName) {
  EXPECT_EQ(parse_idle_mode("hot"), IdleMode::kHot);
  EXPECT_EQ(parse_idle_mode("backoff"), IdleMode::kBackoff);
  EXPECT_EQ(parse_idle_mode("spin"), IdleMode::kSpin);
  EXPECT_EQ(parse_idle_mode("yield"), IdleMode::kYield);
  EXPECT_FALSE(parse_idle_mode("warm").has_value());
}

}  // namespace
}  // namespace ringfire::ring
