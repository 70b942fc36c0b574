// pacer.h — when a partly filled DATA frame may leave. Full frames always
// leave at once; a partial one leaves at most one pacing interval after the
// previous frame (the source design's rule: batching at rates where a
// datagram per record would cost more than the path carries), at once when
// the previous frame left longer ago than that (a lone record after a quiet
// spell pays nothing), and — beyond the source design — at once whenever
// the stream is sparse: at most kSparseRecords records taken in the
// previous interval and in this one. A closed loop (request/response: the
// next record comes only after the answer to this one) and a steady stream
// of a few records an interval then never wait for the interval, while a
// stream fast enough to batch (more than kSparseRecords an interval) is
// paced exactly as before, its batching and its zero-loss rate unchanged.
// Time is passed in. Worker thread.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ringfire::dataplane {

class Pacer {
 public:
  // kSparseRecords: records an interval that still leave one by one (at 50
  // us, 80 k records/s; at 5 us on a DPDK port, 800 k/s).
  static constexpr uint32_t kSparseRecords = 4;

  explicit Pacer(uint64_t interval_ns) : interval_ns_(interval_ns) {}

  // took: a record went into the open frame.
  void took(uint64_t now_ns) {
    if (now_ns - window_start_ns_ >= interval_ns_) {
      previous_ = now_ns - window_start_ns_ >= 2 * interval_ns_ ? 0 : current_;
      current_ = 0;
      window_start_ns_ = now_ns;
    }
    ++current_;
  }
  // due says whether a partial frame may leave now.
  bool due(uint64_t now_ns) const { return sparse(now_ns) || now_ns - last_flush_ns_ >= interval_ns_; }
  // deadline is when the open partial frame may leave at the latest (the
  // interval after the last frame), or sooner when this window's end makes
  // the stream sparse again.
  uint64_t deadline() const {
    const uint64_t paced = last_flush_ns_ + interval_ns_;
    return current_ <= kSparseRecords ? std::min(paced, window_start_ns_ + interval_ns_) : paced;
  }
  void flushed(uint64_t now_ns) { last_flush_ns_ = now_ns; }
  // sparse: few enough records in the last interval and this one that each leaves at once.
  bool sparse(uint64_t now_ns) const {
    const uint64_t since = now_ns - window_start_ns_;
    if (since >= 2 * interval_ns_) return true;              // two quiet windows
    if (since >= interval_ns_) return current_ <= kSparseRecords;  // this window is over: it is the previous
    return previous_ <= kSparseRecords && current_ <= kSparseRecords;
  }

 private:
  uint64_t interval_ns_;
  uint64_t last_flush_ns_ = 0;
  // Records taken in the window that started at window_start_ns_ (current_)
  // and in the window before it (previous_: 0 when it was over two windows ago).
  uint64_t window_start_ns_ = 0;
  uint32_t current_ = 0;
  uint32_t previous_ = 0;
};

}  // namespace ringfire::dataplane
