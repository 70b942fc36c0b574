// repair_queue.h — the NAKed ranges still to be answered on one mirror's TCP
// connection: sorted, disjoint, merged as NAKs arrive, and bounded (a NAK
// that would need more entries is refused and counted by the caller, the
// mirror repeats it later). The control thread answers from the front, a
// chunk at a time, only while the connection drains: a peer that NAKs and
// never reads costs its own queue and nothing else. Control thread only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "proto/frame.h"

namespace ringfire::control {

class RepairQueue {
 public:
  static constexpr size_t kMaxRanges = 256;

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  const proto::Nak& front() const { return ranges_[0]; }
  const proto::Nak& at(size_t i) const { return ranges_[i]; }

  // covered: whether every sequence of r is already queued.
  bool covered(const proto::Nak& r) const {
    for (size_t i = 0; i < count_; ++i) {
      if (ranges_[i].first <= r.first && r.last <= ranges_[i].last) return true;
    }
    return false;
  }

  // add queues r, merged with what overlaps or touches it; false (nothing
  // changed) when that would take more than kMaxRanges entries.
  bool add(proto::Nak r) {
    size_t i = 0;
    while (i < count_ && ranges_[i].last != UINT64_MAX && ranges_[i].last + 1 < r.first) ++i;
    size_t j = i;  // [i, j): entries r overlaps or touches
    while (j < count_ && (r.last == UINT64_MAX || ranges_[j].first <= r.last + 1)) {
      r.first = std::min(r.first, ranges_[j].first);
      r.last = std::max(r.last, ranges_[j].last);
      ++j;
    }
    if (i == j && count_ == kMaxRanges) return false;
    const size_t removed = j - i;
    if (removed == 0) {
      std::move_backward(ranges_.begin() + i, ranges_.begin() + count_, ranges_.begin() + count_ + 1);
      ++count_;
    } else if (removed > 1) {
      std::move(ranges_.begin() + j, ranges_.begin() + count_, ranges_.begin() + i + 1);
      count_ -= removed - 1;
    }
    ranges_[i] = r;
    return true;
  }

  // advance records that everything below `next` of the front range was sent.
  void advance(uint64_t next) {
    if (count_ == 0) return;
    if (next > ranges_[0].last) {
      std::move(ranges_.begin() + 1, ranges_.begin() + count_, ranges_.begin());
      --count_;
    } else if (next > ranges_[0].first) {
      ranges_[0].first = next;
    }
  }

  void clear() { count_ = 0; }

 private:
  std::array<proto::Nak, kMaxRanges> ranges_{};
  size_t count_ = 0;
};

}  // namespace ringfire::control
