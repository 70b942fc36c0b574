// counter.h — a statistics counter one thread writes and others read while
// it runs: a relaxed atomic whose increment is a plain load and store (no
// locked instruction on the hot path; exact, since there is one writer).
#pragma once

#include <atomic>
#include <cstdint>

namespace ringfire::dataplane {

class Counter {
 public:
  Counter() = default;
  Counter(const Counter& o) : v_(o.get()) {}
  Counter& operator=(const Counter& o) {
    v_.store(o.get(), std::memory_order_relaxed);
    return *this;
  }
  Counter& operator+=(uint64_t n) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    return *this;
  }
  Counter& operator++() { return *this += 1; }
  void set(uint64_t v) { v_.store(v, std::memory_order_relaxed); }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

}  // namespace ringfire::dataplane
