// wait.h — parking an idle reader until the ring's writer publishes: a
// futex on the header's wake_word, armed through its sleepers flag (see
// RingHeader). Bounded by a timeout as well; the writer pays one relaxed
// load per publish and a system call only when somebody is parked.
#pragma once

#include <cstdint>

#include "ring/layout.h"

namespace ringfire::ring {

// wait_for_write parks the calling thread until the ring's write_seq moves
// past `seen`, the writer wakes it, or timeout_ns passes, whichever is first.
// Returns false when it slept out the whole timeout. Its arming and the
// writer's wake_parked are fenced on both sides: a publish racing the
// arming is seen or wakes it (tests/ring/wait_test.cc); after arming it
// looks at write_seq for kArmedLookNs before it sleeps.
bool wait_for_write(RingHeader& h, uint64_t seen, uint64_t timeout_ns);
inline constexpr uint64_t kArmedLookNs = 2'000;
// The same, sleeping on a wake_word value the caller read before it made
// its own last checks (wake_word_now): a wake_readers after that read —
// the writer's, or another thread's that wants this sleeper up (a port
// worker's control, WorkerWake::signal) — makes it return.
bool wait_for_write(RingHeader& h, uint64_t seen, uint64_t timeout_ns, uint32_t word);
inline uint32_t wake_word_now(const RingHeader& h) {
  return h.wake_word.load(std::memory_order_acquire);  // pairs with wake_readers' release increment
}

// wake_readers is the writer's half: clear the flag, bump the word, wake
// every parked reader. Called by SequenceWriter::wake_parked when sleepers is set.
void wake_readers(RingHeader& h);

}  // namespace ringfire::ring
