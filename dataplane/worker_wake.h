// worker_wake.h — how the control thread wakes a parked port worker: the
// worker raises `parked` and fences (seq_cst) before it looks at its queues
// one last time and sleeps in poll() on `fd`; a control thread that queued work for
// it fences (seq_cst) and writes `fd` only if it sees `parked` — one
// syscall per wake-up of a sleeping worker, none for a busy one.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "ring/layout.h"
#include "ring/wait.h"

namespace ringfire::dataplane {

struct WorkerWake {
  std::atomic<bool> parked{false};
  int fd = -1;  // an eventfd the worker polls while parked
  // ring: while the worker parks on a served ring's futex instead of in
  // poll() (one serve session and nothing else: PortWorker::park), that
  // ring's header; signal() then wakes the ring's sleepers. Stored
  // (relaxed) before the release store of `parked`, which publishes it.
  std::atomic<ring::RingHeader*> ring{nullptr};
  // step_parked: set by a worker whose port any thread may drive (a kernel
  // port's sockets): it runs the parked worker's iteration on the caller's
  // thread and returns true, or false when the worker is not parked or is
  // taken (PortWorker::step_parked). Null: the worker must be woken.
  bool (*step_parked)(void* worker) = nullptr;
  void* worker = nullptr;

  // poke: the control thread's half, after it pushed to a worker queue.
  void poke() {
    // Seq_cst fence: pairs with the worker's fence after its store of
    // `parked`, before its last look at the queues (a store-load pair on
    // each side needs both). Acquire: pairs with that release store (the
    // worker's `ring` is seen with it).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (parked.load(std::memory_order_acquire)) signal();
  }

  // run_or_poke: the writer's half, after it published records the worker
  // sends: a parked worker's iteration runs here, on the writer's thread
  // (the records leave without a thread hand-off), else as poke().
  void run_or_poke() {
    // Seq_cst fence and acquire load: pair with the worker's fence and release store of `parked`, as in poke.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!parked.load(std::memory_order_acquire)) return;
    if (step_parked != nullptr && step_parked(worker)) return;
    signal();
  }

  // signal: the parked worker returns: its ring's futex (wake_readers:
  // its other readers wake too and find nothing, once) or its poll()
  // (its eventfd made readable).
  void signal() {
    if (ring::RingHeader* h = ring.load(std::memory_order_relaxed)) {
      ring::wake_readers(*h);
      return;
    }
    if (fd < 0) return;
    const uint64_t one = 1;
    (void)!write(fd, &one, sizeof(one));
  }
};

}  // namespace ringfire::dataplane
