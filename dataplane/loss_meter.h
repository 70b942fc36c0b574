// loss_meter.h — dup = "auto" for one unicast mirror: the path's loss
// from the datagrams the source sent that mirror (those its port took)
// and the count its HEALTH reports taking in (proto::Health::udp_datagrams),
// and how many copies each of its datagrams gets from it: two while the
// averaged loss is above the `on` threshold, one again once it falls below
// `off`, and one above `dead` (a path or a receiver that loses most of
// what it is sent is not helped by more). Both counts take every copy, so
// doubling never hides the loss it answers (the measure is per datagram,
// not per record) and the decision does not swing back and forth. The two
// counts are read at different moments (what is in flight, the report's
// trip to the worker): a window's loss is signed, so what one window
// over-counts the next gives back in the average, and the average starts
// at 0, so one skewed window cannot double a clean path. The serve's
// worker owns it (plain fields, no atomics).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ringfire::dataplane {

struct LossThresholds {
  uint32_t on_ppm = 10'000;   // 1 %: double a mirror's datagrams above this
  uint32_t off_ppm = 2'000;   // 0.2 %: back to one copy below this
  uint32_t dead_ppm = 500'000;  // 50 %: one copy above this (repairs over TCP carry it)
};

class LossMeter {
 public:
  // A window shorter than this many datagrams sent is not judged yet: a
  // few datagrams say nothing about a rate. Reports fold into the next one.
  static constexpr uint64_t kMinWindow = 256;

  // sent: `n` datagrams (copies included) left for this mirror.
  void sent(uint64_t n) { sent_ += n; }

  // report: the mirror's HEALTH said it took in `received` datagrams and
  // sent `naks` NAKs this session (cumulative counts). True when the
  // copies changed. A mirror is doubled only in a window in which it also
  // NAKed: one that missed nothing is never doubled, whatever the counts
  // say (a count read at the wrong moment, a port that counts as sent what
  // it lost before the wire).
  bool report(uint64_t received, uint64_t naks, const LossThresholds& t) {
    if (!based_ || received < base_received_) {
      // The first report, or a count that went back (a mirror that lies,
      // or restarted its count): a new baseline, no judgment.
      based_ = true;
      base_sent_ = sent_;
      base_received_ = received;
      base_naks_ = naks;
      return false;
    }
    const uint64_t ds = sent_ - base_sent_;
    if (ds < kMinWindow) return false;
    const uint64_t dr = received - base_received_;
    const bool missed = naks > base_naks_;
    base_sent_ = sent_;
    base_received_ = received;
    base_naks_ = naks;
    // Signed, in ppm (in double: no count overflows it), at least -100 %
    // (a lying count cannot bank credit); averaged a quarter a window.
    const double sample = (static_cast<double>(ds) - static_cast<double>(dr)) * 1e6 / static_cast<double>(ds);
    average_ = (3 * average_ + static_cast<int64_t>(std::max(sample, -1e6))) / 4;
    const uint64_t loss = loss_ppm();
    const uint32_t before = copies_;
    if (copies_ == 1 && missed && loss > t.on_ppm && loss <= t.dead_ppm) copies_ = 2;
    if (copies_ == 2 && (loss < t.off_ppm || loss > t.dead_ppm)) copies_ = 1;
    return copies_ != before;
  }

  uint32_t copies() const { return copies_; }
  // loss_ppm: the averaged loss, parts per million (0 when the average is
  // below 0: reports that counted more than was sent in their windows).
  uint64_t loss_ppm() const { return average_ > 0 ? static_cast<uint64_t>(average_) : 0; }

 private:
  uint64_t sent_ = 0;
  uint64_t base_sent_ = 0;
  uint64_t base_received_ = 0;
  uint64_t base_naks_ = 0;
  int64_t average_ = 0;  // signed ppm
  uint32_t copies_ = 1;
  bool based_ = false;
};

}  // namespace ringfire::dataplane
