// idle.h — what a poller does when the ring (or queue) it polls is empty.
// Spinning gives the lowest latency on an isolated core; on a shared core
// two spinning pollers take turns once per scheduler tick (milliseconds),
// so yield and backoff exist for shared machines, labs and CI.
#pragma once

#include <sched.h>
#include <time.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace ringfire::ring {

enum class IdleMode : uint8_t {
  kSpin,     // pause instruction only
  kYield,    // sched_yield
  kBackoff,  // spin, then yield, then sleep 50 us until work arrives
};

inline std::optional<IdleMode> parse_idle_mode(std::string_view s) {
  if (s == "spin") return IdleMode::kSpin;
  if (s == "yield") return IdleMode::kYield;
  if (s == "backoff") return IdleMode::kBackoff;
  return std::nullopt;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// IdleStrategy is called with idle() after every empty poll and reset()
// after every productive one. Owned by one poller thread.
class IdleStrategy {
 public:
  explicit IdleStrategy(IdleMode mode) : mode_(mode) {}

  void reset() { empty_polls_ = 0; }
  void idle() {
    ++empty_polls_;
    switch (mode_) {
      case IdleMode::kSpin: cpu_relax(); return;
      case IdleMode::kYield: sched_yield(); return;
      case IdleMode::kBackoff:
        if (empty_polls_ < kSpinPolls) {
          cpu_relax();
        } else if (empty_polls_ < kSpinPolls + kYieldPolls) {
          sched_yield();
        } else {
          const timespec ts{0, kSleepNs};
          nanosleep(&ts, nullptr);
        }
        return;
    }
  }

 private:
  static constexpr uint32_t kSpinPolls = 2000;
  static constexpr uint32_t kYieldPolls = 200;
  static constexpr long kSleepNs = 50'000;
  IdleMode mode_;
  uint32_t empty_polls_ = 0;
};

}  // namespace ringfire::ring
