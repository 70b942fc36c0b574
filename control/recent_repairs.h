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

  // remember notes that r was repaired by UDP at now_ns for `asker` (an
  // opaque id: which mirror's NAK it answered).
  void remember(const proto::Nak& r, uint64_t now_ns, const void* asker) {
    entries_[next_++ % kSize] = Entry{r, now_ns, asker, true};
  }

  // Overlap is the most recent repair overlapping a range: when, for whom.
  struct Overlap {
    uint64_t sent_ns = 0;  // 0: none
    const void* asker = nullptr;
  };
  // youngest_overlap: the most recent repair overlapping r within max_age_ns.
  Overlap youngest_overlap(const proto::Nak& r, uint64_t now_ns, uint64_t max_age_ns) const {
    Overlap best;
    for (const Entry& e : entries_) {
      if (!e.used || now_ns - e.sent_ns > max_age_ns) continue;
      if (e.range.first <= r.last && r.first <= e.range.last && e.sent_ns > best.sent_ns) {
        best = Overlap{e.sent_ns, e.asker};
      }
    }
    return best;
  }

 private:
  struct Entry {
    proto::Nak range;
    uint64_t sent_ns;
    const void* asker;
    bool used;
  };
  std::array<Entry, kSize> entries_{};
  uint64_t next_ = 0;
};

}  // namespace ringfire::control
