// tsc.h — the time-stamp counter for the harnesses: rdtsc reads (~10 ns
// cheaper than clock_gettime) converted to nanoseconds with a rate
// calibrated against CLOCK_MONOTONIC. Assumes an invariant TSC, synchronised
// across cores (true on the machines measured; checked by `handoff`, which
// reports negative one-way times if it is not).
#pragma once

#include <time.h>
#include <x86intrin.h>

#include <cstdint>

namespace ringfire::perf {

inline uint64_t tsc() { return __rdtsc(); }

inline uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// tsc_per_ns measures the TSC rate over `window_ns` (default 100 ms).
inline double tsc_per_ns(uint64_t window_ns = 100'000'000) {
  const uint64_t t0 = monotonic_ns();
  const uint64_t c0 = tsc();
  while (monotonic_ns() - t0 < window_ns) {
  }
  const uint64_t t1 = monotonic_ns();
  const uint64_t c1 = tsc();
  return static_cast<double>(c1 - c0) / static_cast<double>(t1 - t0);
}

}  // namespace ringfire::perf
