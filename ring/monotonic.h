// monotonic.h — CLOCK_MONOTONIC in nanoseconds: the one clock every thread
// outside the workers reads (registry and counters-file stamps, control
// deadlines, the CLI). Workers read the TSC-backed dataplane/tsc_clock.h,
// anchored to this same clock. In ring/ because everything may use it.
#pragma once

#include <time.h>

#include <cstdint>

namespace ringfire {

inline uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace ringfire
