// idle.h — what a poller does when the ring (or queue) it polls is empty.
// Spinning gives the lowest latency on an isolated core; on a shared core
// two spinning pollers take turns once per scheduler tick (milliseconds),
// so yield and backoff exist for shared machines, labs and CI.
//
// Backoff (the default) spins kSpinPolls empty polls, yields kYieldPolls,
// then parks: it calls the poller's park(timeout_ns) — a futex on the ring
// (wait.h) or a poll() on a socket, so that new work wakes it at once — or,
// without one, sleeps; the timeout doubles from 50 us up to max_park_ns
// (1 ms) while nothing comes. Idle, a poller then costs ~1,000 wake-ups a
// second; what its first record waits is in perf/README.md ("Idle cost").
//
// Hot yields for kHotNs (50 ms) after its last work, then backs off as
// above: while traffic flows (a decode step every 20 ms, a market-data
// burst) the next record finds the poller awake — no wake-up on its path —
// and a quiet poller still parks. It costs a core per poller while
// traffic flows.
#pragma once

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

#include "ring/monotonic.h"

namespace ringfire::ring {

enum class IdleMode : uint8_t {
  kSpin,     // pause instruction only
  kYield,    // sched_yield
  kBackoff,  // spin, then yield, then park (50 us doubling to 1 ms) until work arrives
  kHot,      // yield for kHotNs after the last work, then as kBackoff
};

inline std::optional<IdleMode> parse_idle_mode(std::string_view s) {
  if (s == "spin") return IdleMode::kSpin;
  if (s == "yield") return IdleMode::kYield;
  if (s == "backoff") return IdleMode::kBackoff;
  if (s == "hot") return IdleMode::kHot;
  return std::nullopt;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

inline void sleep_ns(uint64_t ns) {
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

// IdleStrategy is called with idle() after every empty poll and reset()
// after every productive one. Owned by one poller thread (and constructed
// on it: backoff sets that thread's timer slack to 1 us, so a park's
// timeout is kept to the microsecond instead of the kernel's default 50).
class IdleStrategy {
 public:
  static constexpr uint32_t kSpinPolls = 100;
  static constexpr uint32_t kYieldPolls = 20;
  static constexpr uint64_t kFirstParkNs = 50'000;
  static constexpr uint64_t kDefaultMaxParkNs = 1'000'000;
  static constexpr uint64_t kHotNs = 50'000'000;
  static constexpr uint32_t kHotClockEvery = 64;  // empty polls between clock reads while hot
  static constexpr uint32_t kWokenPolls = 4;       // empty polls before a woken poller parks
  // A poller whose every empty poll is a system call (a kernel port's
  // recvmmsg) spins and yields for about as long as a ring poller does in
  // far fewer polls: 100 syscall polls are ~100 us, which a record every
  // 30 us never lets end (a core burnt at mid rates).
  static constexpr uint32_t kCostlySpinPolls = 4;
  static constexpr uint32_t kCostlyYieldPolls = 2;

  explicit IdleStrategy(IdleMode mode, uint64_t max_park_ns = kDefaultMaxParkNs)
      : mode_(mode), max_park_ns_(std::max(max_park_ns, kFirstParkNs)) {
    if (mode == IdleMode::kBackoff || mode == IdleMode::kHot) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  }

  // costly_polls: from now on, each empty poll is (or is not) a system call.
  void costly_polls(bool costly) {
    spin_polls_ = costly ? kCostlySpinPolls : kSpinPolls;
    yield_polls_ = costly ? kCostlyYieldPolls : kYieldPolls;
  }

  void reset() {
    empty_polls_ = 0;
    park_ns_ = kFirstParkNs;
    cold_ = false;
  }
  // idle: an empty poll. park(timeout_ns) blocks at most that long.
  // `woken`: the poller's park wakes for all its work (no timeout needed),
  // so backoff parks after kWokenPolls empty polls, not after spinning and
  // yielding (each empty poll of a kernel port is a syscall).
  template <typename Park>
  void idle(Park&& park, bool woken = false) {
    ++empty_polls_;
    switch (mode_) {
      case IdleMode::kSpin: cpu_relax(); return;
      case IdleMode::kYield: sched_yield(); return;
      case IdleMode::kHot:
        if (!cold_) {
          // The clock is read on the first empty poll after work (busy
          // iterations never pay for it), then every kHotClockEvery.
          if (empty_polls_ == 1) last_work_ns_ = monotonic_ns();
          if (empty_polls_ % kHotClockEvery != 0 || monotonic_ns() - last_work_ns_ < kHotNs) {
            sched_yield();
            return;
          }
          cold_ = true;  // quiet for kHotNs: back off (straight to parking)
          empty_polls_ = spin_polls_ + yield_polls_;
        }
        [[fallthrough]];
      case IdleMode::kBackoff:
        if (woken && empty_polls_ >= kWokenPolls) {
          park(max_park_ns_);
        } else if (empty_polls_ < spin_polls_) {
          cpu_relax();
        } else if (empty_polls_ < spin_polls_ + yield_polls_) {
          sched_yield();
        } else {
          park(park_ns_);
          park_ns_ = std::min(2 * park_ns_, max_park_ns_);
        }
        return;
    }
  }
  void idle() { idle(sleep_ns); }
  // set_max_park_ns: the backoff's longest park from now on (a poller
  // whose park wakes for its work may sleep longer: PortWorker::max_park_ns).
  void set_max_park_ns(uint64_t ns) { max_park_ns_ = std::max(ns, kFirstParkNs); }

 private:
  IdleMode mode_;
  uint64_t max_park_ns_;
  uint32_t spin_polls_ = kSpinPolls;   // see costly_polls()
  uint32_t yield_polls_ = kYieldPolls;
  uint32_t empty_polls_ = 0;
  uint64_t park_ns_ = kFirstParkNs;
  uint64_t last_work_ns_ = 0;  // hot: when the last work was seen
  bool cold_ = false;          // hot: quiet for kHotNs, backing off until the next work
};

}  // namespace ringfire::ring
