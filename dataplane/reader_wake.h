// reader_wake.h — one file descriptor an in-process reader of mirror rings
// waits on (the stream mux's readiness fd): the mirror session that
// commits records into a ring fences and writes the eventfd only when the
// reader armed it before its last look — an edge from empty, one write
// per wake-up of a waiting reader, none per record and none for a reader
// that is busy. Any thread may signal; one reader arms at a time.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace ringfire::dataplane {

struct ReaderWake {
  int fd = -1;                       // an eventfd (EFD_NONBLOCK) the reader owns and polls
  std::atomic<uint32_t> armed{0};    // the reader waits: the next commit writes fd

  // arm: the reader is about to wait; it must look at its rings again
  // after this, and not wait if they moved.
  void arm() {
    armed.store(1, std::memory_order_relaxed);
    // Seq_cst fence: pairs with signal()'s fence (a store-load pair on each
    // side: either the reader's next look sees the committed records, or the
    // writer's load of `armed` sees 1).
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  // disarm: the reader found work after arming (a write may still come: harmless).
  void disarm() { armed.store(0, std::memory_order_relaxed); }

  // signal: the writer's half, after its records (or items) were published.
  void signal() {
    // Seq_cst fence: pairs with arm()'s.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // Acq_rel exchange: one writer of the edge wins; pairs with arm()'s store.
    if (armed.load(std::memory_order_relaxed) != 0 && armed.exchange(0, std::memory_order_acq_rel) != 0) kick();
  }
  // kick: make fd readable now (the reader left items it did not take).
  void kick() const {
    const uint64_t one = 1;
    (void)!write(fd, &one, sizeof(one));
  }
  // drain: the reader's, before it looks (fd readable no longer).
  void drain() const {
    uint64_t v;
    (void)!read(fd, &v, sizeof(v));
  }
};

}  // namespace ringfire::dataplane
