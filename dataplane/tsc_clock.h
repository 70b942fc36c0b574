// tsc_clock.h — the workers' clock: CLOCK_MONOTONIC nanoseconds read from
// the time-stamp counter (one rdtsc, no vDSO call), for pacing, heartbeat
// and NAK deadlines on the hot path. The TSC's rate is measured against
// CLOCK_MONOTONIC at start (10 ms) and again every second, when the clock
// also re-anchors to CLOCK_MONOTONIC, so it cannot drift from the control
// thread's clock by more than the rate error of one second. Never goes
// backwards. Needs an invariant TSC (CPUID 0x80000007 EDX bit 8), the same
// on every core (as the kernel's tsc clocksource also assumes); without one,
// use_tsc is false and now_ns reads CLOCK_MONOTONIC. One thread only.
#pragma once

#include <time.h>

#include <cstdint>

#include "ring/monotonic.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace ringfire::dataplane {

class TscClock {
 public:
  TscClock() {
    if (!use_tsc_) return;
    anchor(monotonic(), rdtsc());
    const uint64_t t0 = anchor_ns_;
    while (monotonic() - t0 < 10'000'000) {
    }
    reanchor();
  }

  uint64_t now_ns() {
    if (!use_tsc_) return monotonic();
    const uint64_t c = rdtsc();
    if (c - anchor_tsc_ >= reanchor_cycles_) return reanchor();
    // (delta * mult) >> 32 in 64 bits: mult < 2^32 (under 1 ns a cycle).
    const uint64_t delta = c - anchor_tsc_;
    const uint64_t ns = anchor_ns_ + (delta >> 32) * mult_ + (((delta & 0xffffffffu) * mult_) >> 32);
    return last_ = ns > last_ ? ns : last_;
  }

  bool use_tsc() const { return use_tsc_; }

  static uint64_t monotonic() { return monotonic_ns(); }

 private:
#if defined(__x86_64__)
  static uint64_t rdtsc() { return __rdtsc(); }
  static bool invariant_tsc() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0x80000007, &a, &b, &c, &d) != 0 && (d & (1u << 8)) != 0;
  }
#else
  static uint64_t rdtsc() { return 0; }
  static bool invariant_tsc() { return false; }
#endif

  void anchor(uint64_t ns, uint64_t tsc) {
    anchor_ns_ = ns;
    anchor_tsc_ = tsc;
  }

  // reanchor measures the rate over the last anchor period, then restarts
  // from CLOCK_MONOTONIC now.
  uint64_t reanchor() {
    const uint64_t ns = monotonic();
    const uint64_t c = rdtsc();
    if (ns > anchor_ns_ && c > anchor_tsc_) {
      mult_ = static_cast<uint64_t>(static_cast<double>(ns - anchor_ns_) / static_cast<double>(c - anchor_tsc_) *
                                    4294967296.0);
      if (mult_ >= (uint64_t{1} << 32)) use_tsc_ = false;  // a TSC under 1 GHz: read the clock instead
      const uint64_t per_second = (uint64_t{1'000'000'000} << 32) / (mult_ ? mult_ : 1);
      reanchor_cycles_ = per_second ? per_second : 1;
    }
    anchor(ns, c);
    return last_ = ns > last_ ? ns : last_;
  }

  bool use_tsc_ = invariant_tsc();
  uint64_t anchor_ns_ = 0;
  uint64_t anchor_tsc_ = 0;
  uint64_t mult_ = 0;                 // ns per cycle, 32.32 fixed point
  uint64_t reanchor_cycles_ = 1;      // about one second of cycles
  uint64_t last_ = 0;
};

}  // namespace ringfire::dataplane
