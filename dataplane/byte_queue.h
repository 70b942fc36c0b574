// byte_queue.h — a single-producer single-consumer queue of variable-size
// messages in one byte ring: how the control thread hands TCP-borne frames
// (retransmissions, GAPs, TCP-mode DATA) to a mirror worker without an
// allocation per message. A message is a u32 length then its bytes; one that
// would straddle the end is preceded by a wrap marker. The buffer's pages
// are taken as they are first written (LazyBytes); a push that finds the
// queue empty past kRestartAfter goes back to the start (a wrap marker),
// so the pages a queue holds follow its deepest backlog, not its capacity
// (a TCP-mode mirror's 8 MiB queue at 1 M records/s: ~0.3 MiB, not 8).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ring/lazy_bytes.h"
#include "proto/bytes.h"

namespace ringfire::dataplane {

class ByteQueue {
 public:
  explicit ByteQueue(size_t capacity_bytes) : buf_(capacity_bytes) {}

  size_t max_message() const { return buf_.size() / 2 - kHeader; }
  // resident_bytes: the buffer's pages in memory now (a diagnostic).
  size_t resident_bytes() const { return buf_.resident_bytes(); }
  static constexpr size_t kRestartAfter = 256 << 10;

  // try_push copies a message in; false if there is no room now (or ever,
  // when it exceeds max_message()). Producer thread only.
  [[nodiscard]] bool try_push(proto::ConstBytes msg) {
    const size_t need = align(kHeader + msg.size());
    if (msg.size() > max_message()) return false;
    const size_t tail = tail_.load(std::memory_order_relaxed);
    // Acquire: pairs with the release store of head_ in pop; the consumer
    // is done with the bytes we are about to reuse.
    const size_t head = head_.load(std::memory_order_acquire);
    size_t pos = tail % buf_.size();
    size_t wrap = 0;
    if (pos + need > buf_.size() || (head == tail && pos >= kRestartAfter && need <= pos)) {
      wrap = buf_.size() - pos;  // skip to the start
    }
    if (tail + wrap + need - head > buf_.size()) return false;
    if (wrap != 0) {
      if (wrap >= kHeader) store_len(pos, kWrap);
      pos = 0;
    }
    store_len(pos, static_cast<uint32_t>(msg.size()));
    if (!msg.empty()) std::memcpy(buf_.data() + pos + kHeader, msg.data(), msg.size());
    // Release: pairs with the acquire load of tail_ in front.
    tail_.store(tail + wrap + need, std::memory_order_release);
    return true;
  }

  // front returns the oldest message (empty span and false if none); it
  // stays valid until pop(). Consumer thread only.
  bool front(proto::ConstBytes* out) {
    size_t head = head_.load(std::memory_order_relaxed);
    // Acquire: pairs with the release store of tail_ in try_push.
    const size_t tail = tail_.load(std::memory_order_acquire);
    if (head == tail) return false;
    size_t pos = head % buf_.size();
    if (buf_.size() - pos < kHeader || load_len(pos) == kWrap) {
      head += buf_.size() - pos;
      // Release: pairs with the acquire load of head_ in try_push (the
      // skipped tail of the buffer is free again).
      head_.store(head, std::memory_order_release);
      pos = 0;
    }
    const uint32_t len = load_len(pos);
    *out = proto::ConstBytes(buf_.data() + pos + kHeader, len);
    front_size_ = align(kHeader + len);
    return true;
  }
  // pop releases the message front() returned.
  void pop() {
    // Release: pairs with the acquire load of head_ in try_push.
    head_.store(head_.load(std::memory_order_relaxed) + front_size_, std::memory_order_release);
  }

 private:
  static constexpr size_t kHeader = 4;
  static constexpr uint32_t kWrap = 0xFFFFFFFF;
  static size_t align(size_t n) { return (n + 7) & ~size_t{7}; }
  void store_len(size_t pos, uint32_t v) { std::memcpy(buf_.data() + pos, &v, 4); }
  uint32_t load_len(size_t pos) const {
    uint32_t v;
    std::memcpy(&v, buf_.data() + pos, 4);
    return v;
  }

  ring::LazyBytes buf_;  // pages taken as the queue first reaches them
  // The consumer's cache line: head_ and what only it writes.
  alignas(64) std::atomic<size_t> head_{0};
  size_t front_size_ = 0;
  // The producer's.
  alignas(64) std::atomic<size_t> tail_{0};
};

}  // namespace ringfire::dataplane
