// tsc_clock_test.cc — TscClock: never goes backwards, and tracks
// CLOCK_MONOTONIC (loosely: a loaded 2-vCPU machine may be preempted
// between the two reads, so the bounds are milliseconds, not nanoseconds).
#include "dataplane/tsc_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace ringfire::dataplane {
namespace {

TEST(TscClock, NeverGoesBackwards) {
  TscClock clock;
  uint64_t last = clock.now_ns();
  uint64_t went_back = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const uint64_t t = clock.now_ns();
    went_back += t < last;
    last = t;
  }
  EXPECT_EQ(went_back, 0u);
}

TEST(TscClock, TracksMonotonicAcrossReanchors) {
  TscClock clock;
  // 2.5 s: through two re-anchors, comparing at each step.
  for (int i = 0; i < 25; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint64_t before = TscClock::monotonic();
    const uint64_t t = clock.now_ns();
    const uint64_t after = TscClock::monotonic();
    EXPECT_GE(t + 2'000'000, before) << "step " << i;
    EXPECT_LE(t, after + 2'000'000) << "step " << i;
  }
}

}  // namespace
}  // namespace ringfire::dataplane
