// recent_repairs.h — the ranges a source repaired through the data plane
// (by UDP) lately, for one destination: a unicast mirror, or the multicast
// group. It decides the path of the next NAK so that a hole is repaired
// once: a NAK for a range the datagram repair already covered means that
// datagram was lost (or, for the group, that another mirror's repair is
// still on its way), so it goes over TCP, or waits. Fixed size, oldest
// forgotten first. Control thread only.
#pragma once

#include <array>
#include <cstdint>

#include "proto/frame.h"

namespace ringfire::control {

class RecentRepairs {
 public:
  static constexpr size_t kSize = 64;

  void remember(const proto::Nak& r, uint64_t now_ns) {
    entries_[next_++ % kSize] = Entry{r, now_ns, true};
  }

  // youngest_overlap: the time the most recent repair overlapping r was
  // sent, within max_age_ns; 0 if none.
  uint64_t youngest_overlap(const proto::Nak& r, uint64_t now_ns, uint64_t max_age_ns) const {
    uint64_t best = 0;
    for (const Entry& e : entries_) {
      if (!e.used || now_ns - e.sent_ns > max_age_ns) continue;
      if (e.range.first <= r.last && r.first <= e.range.last && e.sent_ns > best) best = e.sent_ns;
    }
    return best;
  }

 private:
  struct Entry {
    proto::Nak range;
    uint64_t sent_ns;
    bool used;
  };
  std::array<Entry, kSize> entries_{};
  uint64_t next_ = 0;
};

}  // namespace ringfire::control
