// worker_task.h — application code that runs on a port worker's own thread
// (DPDK's run-to-completion model): a consumer of a mirrored ring that
// answers into a served ring, a strategy that reads one feed and publishes
// another, a loopback for measuring a deployment's round trip. The worker
// steps every task once per iteration, after the RX burst has gone to the
// sessions and before the sessions step: a record a mirror wrote in this
// iteration is the task's to read in it, and what the task publishes into
// a served ring leaves in the same iteration — no thread hand-off, no
// scheduler switch on the path. Worker thread only.
#pragma once

#include <cstdint>

namespace ringfire::dataplane {

class WorkerTask {
 public:
  virtual ~WorkerTask() = default;
  // step does bounded work (a burst's worth, never a wait) and says whether
  // it did any. `now_ns` is the iteration's clock read.
  virtual bool step(uint64_t now_ns) = 0;
  // next_deadline_ns: when the task next has work of its own, at the
  // latest; a worker carrying tasks never sleeps past it. A task that polls
  // a ring (nothing wakes the worker for it) answers `now_ns`, so the
  // worker keeps polling (spinning or yielding, as its idle mode says).
  virtual uint64_t next_deadline_ns(uint64_t now_ns) const { return now_ns; }
};

}  // namespace ringfire::dataplane
