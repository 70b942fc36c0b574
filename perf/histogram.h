// histogram.h — a log-linear latency histogram for the perf harnesses:
// exact below 128 ns, then 64 sub-buckets per power of two (< 1.6 % error),
// up to 2^40 ns. Fixed size, no allocation while recording.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace ringfire::perf {

class LatencyHistogram {
 public:
  void record(uint64_t ns) {
    ++counts_[bucket_of(ns)];
    ++count_;
    if (ns > max_) max_ = ns;
    if (ns < min_) min_ = ns;
  }
  uint64_t count() const { return count_; }
  uint64_t max() const { return max_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  // merge adds another histogram's samples (one per thread, read after).
  void merge(const LatencyHistogram& o) {
    for (size_t b = 0; b < kBuckets; ++b) counts_[b] += o.counts_[b];
    count_ += o.count_;
    max_ = std::max(max_, o.max_);
    min_ = std::min(min_, o.min_);
  }

  // percentile returns the upper edge of the bucket holding quantile q.
  uint64_t percentile(double q) const {
    if (count_ == 0) return 0;
    const auto rank = static_cast<uint64_t>(q * static_cast<double>(count_ - 1)) + 1;
    uint64_t seen = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) return upper_edge(b) < max_ ? upper_edge(b) : max_;
    }
    return max_;
  }

 private:
  static constexpr int kSubBits = 6;
  static constexpr uint64_t kLinear = 2u << kSubBits;  // 128: exact below this
  static constexpr size_t kBuckets = kLinear + (40 - kSubBits - 1) * (1u << kSubBits);

  static size_t bucket_of(uint64_t v) {
    if (v < kLinear) return static_cast<size_t>(v);
    if (v >= (uint64_t{1} << 40)) return kBuckets - 1;
    const int msb = 63 - std::countl_zero(v);          // >= 7
    const uint64_t sub = (v >> (msb - kSubBits)) & ((1u << kSubBits) - 1);
    return kLinear + static_cast<size_t>(msb - kSubBits - 1) * (1u << kSubBits) + sub;
  }
  static uint64_t upper_edge(size_t b) {
    if (b < kLinear) return b;
    const size_t k = b - kLinear;
    const int msb = static_cast<int>(k >> kSubBits) + kSubBits + 1;
    const uint64_t sub = k & ((1u << kSubBits) - 1);
    return ((uint64_t{1} << kSubBits | sub) << (msb - kSubBits)) + (uint64_t{1} << (msb - kSubBits)) - 1;
  }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t max_ = 0;
  uint64_t min_ = ~uint64_t{0};
};

}  // namespace ringfire::perf
