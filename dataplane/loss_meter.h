// loss_meter.h — dup = "auto" for one unicast mirror: the path's loss
// from the datagrams the source sent that mirror and the count its HEALTH
// reports taking in (proto::Health::udp_datagrams), and how many copies
// each of its datagrams gets from it: two while the loss is above the
// `on` threshold, one again once it falls below `off`. Both counts take
// every copy, so doubling never hides the loss it answers (the measure is
// per datagram, not per record) and the decision does not swing back and
// forth. The serve's worker owns it (plain fields, no atomics).
#pragma once

#include <cstdint>

namespace ringfire::dataplane {

struct LossThresholds {
  uint32_t on_ppm = 10'000;   // 1 %: double a mirror's datagrams above this
  uint32_t off_ppm = 2'000;   // 0.2 %: back to one copy below this
};

class LossMeter {
 public:
  // A window shorter than this many datagrams sent is not judged yet: the
  // counts are read at different moments (what is in flight), and a few
  // datagrams say nothing about a rate. Reports fold into the next one.
  static constexpr uint64_t kMinWindow = 256;

  // sent: `n` datagrams (copies included) left for this mirror.
  void sent(uint64_t n) { sent_ += n; }

  // report: the mirror's HEALTH said it took in `received` datagrams this
  // session (a cumulative count). True when the copies changed.
  bool report(uint64_t received, const LossThresholds& t) {
    if (!based_ || received < base_received_) {
      // The first report, or a count that went back (a mirror that lies,
      // or restarted its count): a new baseline, no judgment.
      based_ = true;
      base_sent_ = sent_;
      base_received_ = received;
      return false;
    }
    const uint64_t ds = sent_ - base_sent_;
    if (ds < kMinWindow) return false;
    const uint64_t dr = received - base_received_;
    base_sent_ = sent_;
    base_received_ = received;
    const uint64_t sample = dr >= ds ? 0 : (ds - dr) * 1'000'000 / ds;
    // Smoothed by a quarter a window; the first window's sample is taken whole.
    loss_ppm_ = judged_ ? (3 * loss_ppm_ + sample) / 4 : sample;
    judged_ = true;
    const uint32_t before = copies_;
    if (copies_ == 1 && loss_ppm_ > t.on_ppm) copies_ = 2;
    if (copies_ == 2 && loss_ppm_ < t.off_ppm) copies_ = 1;
    return copies_ != before;
  }

  uint32_t copies() const { return copies_; }
  uint64_t loss_ppm() const { return loss_ppm_; }

 private:
  uint64_t sent_ = 0;
  uint64_t base_sent_ = 0;
  uint64_t base_received_ = 0;
  uint64_t loss_ppm_ = 0;
  uint32_t copies_ = 1;
  bool based_ = false;
  bool judged_ = false;
};

}  // namespace ringfire::dataplane
