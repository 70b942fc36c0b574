// spsc_queue.h — the single-producer single-consumer queue the control
// thread and the workers talk through (in-process; rte_ring takes its place
// where DPDK is up). Indices and their cached copies on their own cache
// lines; try_push/try_pop never block and never allocate.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <type_traits>

namespace ringfire::dataplane {

template <typename T, size_t N>
class SpscQueue {
  static_assert(N >= 2 && (N & (N - 1)) == 0, "capacity must be a power of two");
  static_assert(std::is_trivially_copyable_v<T>, "queue elements are copied");

 public:
  // try_push appends `v`; false if full. Producer thread only.
  [[nodiscard]] bool try_push(const T& v) {
    const size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - cached_head_ == N) {
      // Acquire: pairs with the release store of head_ in try_pop; the
      // consumer is done with the slot we are about to reuse.
      cached_head_ = head_.load(std::memory_order_acquire);
      if (tail - cached_head_ == N) return false;
    }
    slots_[tail & (N - 1)] = v;
    // Release: pairs with the acquire load of tail_ in try_pop.
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // try_pop removes the oldest element into `*out`; false if empty.
  // Consumer thread only.
  [[nodiscard]] bool try_pop(T* out) {
    const size_t head = head_.load(std::memory_order_relaxed);
    if (head == cached_tail_) {
      // Acquire: pairs with the release store of tail_ in try_push.
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (head == cached_tail_) return false;
    }
    *out = slots_[head & (N - 1)];
    // Release: pairs with the acquire load of head_ in try_push.
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  // size_approx is exact from either side's own thread, approximate elsewhere.
  size_t size_approx() const {
    // Acquire both: pair with the release stores of tail_ (push) and head_
    // (pop), as in try_pop and try_push.
    return tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire);
  }
  static constexpr size_t capacity() { return N; }

 private:
  alignas(64) std::atomic<size_t> head_{0};
  alignas(64) size_t cached_tail_ = 0;  // consumer's copy of tail_
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) size_t cached_head_ = 0;  // producer's copy of head_
  alignas(64) std::array<T, N> slots_{};
};

}  // namespace ringfire::dataplane
