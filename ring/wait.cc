// wait.cc — the futex behind wait_for_write / wake_readers.
#include "ring/wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "ring/idle.h"
#include "ring/monotonic.h"

namespace ringfire::ring {
namespace {

// futex: the word lives in a shared file mapping, so not FUTEX_PRIVATE.
long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

}  // namespace

bool wait_for_write(RingHeader& h, uint64_t seen, uint64_t timeout_ns) {
  return wait_for_write(h, seen, timeout_ns, wake_word_now(h));
}

bool wait_for_write(RingHeader& h, uint64_t seen, uint64_t timeout_ns, uint32_t word) {
  // Seq_cst store: pairs with the writer's seq_cst fence between its store
  // of write_seq and its load of sleepers (SequenceWriter::wake_parked): a
  // store-load pair on each side, so either the look below sees the
  // publish or the writer sees this flag and wakes us. The look lasts
  // kArmedLookNs (a publish about to land costs no sleep), and covers a
  // writer built before that fence as well as timing allows.
  h.sleepers.store(1, std::memory_order_seq_cst);
  // Seq_cst loads: pair with the writer's seq_cst fence between its
  // release store of write_seq and its load of sleepers (wake_parked).
  const uint64_t look_until = monotonic_ns() + kArmedLookNs;
  do {
    if (h.write_seq.load(std::memory_order_seq_cst) != seen) return true;
    cpu_relax();
  } while (monotonic_ns() < look_until);
  // Once more after the look's end: a reader preempted inside it looks
  // after the whole 2 us, not only before.
  if (h.write_seq.load(std::memory_order_seq_cst) != seen) return true;
  const timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
                    static_cast<long>(timeout_ns % 1'000'000'000)};
  return !(futex(&h.wake_word, FUTEX_WAIT, word, &ts) != 0 && errno == ETIMEDOUT);
}

void wake_readers(RingHeader& h) {
  h.sleepers.store(0, std::memory_order_relaxed);
  // Release: pairs with the acquire load of wake_word in wait_for_write.
  h.wake_word.fetch_add(1, std::memory_order_release);
  futex(&h.wake_word, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace ringfire::ring
