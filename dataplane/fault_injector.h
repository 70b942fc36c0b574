// fault_injector.h — seeded, deterministic loss, duplication, reordering and
// delay of datagrams, applied by the packet I/O layer on send or receive
// (this kernel has no netem). Each decision draws from one xorshift stream,
// so the same seed and the same traffic give the same faults.
#pragma once

#include <cstdint>

namespace ringfire::dataplane {

// FaultConfig: probabilities in parts per million, so 5 % is 50000.
struct FaultConfig {
  uint32_t drop_ppm = 0;
  uint32_t duplicate_ppm = 0;
  uint32_t reorder_ppm = 0;   // the datagram is held and sent after the next one
  uint32_t delay_ppm = 0;     // the datagram is held for delay_ns
  uint64_t delay_ns = 0;
  uint64_t seed = 1;

  bool any() const { return drop_ppm || duplicate_ppm || reorder_ppm || delay_ppm; }
};

// FaultAction is what happens to one datagram.
enum class FaultAction : uint8_t { kPass, kDrop, kDuplicate, kReorder, kDelay };

class FaultInjector {
 public:
  explicit FaultInjector(const FaultConfig& c) : c_(c), state_(c.seed ? c.seed : 1) {}

  // decide draws the fate of the next datagram.
  FaultAction decide() {
    const uint32_t r = static_cast<uint32_t>(next() % 1'000'000);
    uint32_t edge = c_.drop_ppm;
    if (r < edge) return FaultAction::kDrop;
    if (r < (edge += c_.duplicate_ppm)) return FaultAction::kDuplicate;
    if (r < (edge += c_.reorder_ppm)) return FaultAction::kReorder;
    if (r < (edge += c_.delay_ppm)) return FaultAction::kDelay;
    return FaultAction::kPass;
  }
  const FaultConfig& config() const { return c_; }

 private:
  uint64_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  FaultConfig c_;
  uint64_t state_;
};

}  // namespace ringfire::dataplane
