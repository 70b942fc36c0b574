// worker_runner.cc — lcore or thread.
#include "dataplane/worker_runner.h"

#include <pthread.h>

#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include <rte_launch.h>
#include <rte_lcore.h>

#include "dataplane/dpdk_eal.h"
#endif

namespace ringfire::dataplane {

void WorkerRunner::start(std::function<void()> loop, int wanted) {
  // Named, so that `top -H` and a profile tell the worker from the conductor.
  loop_ = [loop = std::move(loop)] {
    pthread_setname_np(pthread_self(), "rf-worker");
    loop();
  };
#if RINGFIRE_HAVE_DPDK
  if (eal_running() && rte_lcore_count() > 1) {
    // The first worker lcore nobody runs on yet (or the one asked for):
    // two ports never share one.
    unsigned lcore;
    RTE_LCORE_FOREACH_WORKER(lcore) {
      if (wanted >= 0 && lcore != static_cast<unsigned>(wanted)) continue;
      if (rte_eal_get_lcore_state(lcore) != WAIT) continue;
      if (rte_eal_remote_launch([](void* arg) {
            (*static_cast<std::function<void()>*>(arg))();
            return 0;
          }, &loop_, lcore) == 0) {
        lcore_ = static_cast<int>(lcore);
        where_ = "lcore " + std::to_string(lcore);
        return;
      }
    }
  }
  if (eal_running()) {
    // A thread the EAL knows (an lcore id of its own), so that the mbuf
    // pool's per-lcore cache serves it: an unregistered thread takes and
    // gives back every mbuf through the pool's shared ring (compare-and-
    // swap each way, ~0.3 us a datagram measured on memif).
    // (Registration fails only when every lcore id is taken: the loop
    // runs anyway, uncached.)
    where_ = "a registered thread";
    thread_ = std::thread([this] {
      const bool registered = rte_thread_register() == 0;
      loop_();
      if (registered) rte_thread_unregister();
    });
    return;
  }
#else
  (void)wanted;
#endif
  thread_ = std::thread(loop_);
}

void WorkerRunner::join() {
#if RINGFIRE_HAVE_DPDK
  if (lcore_ >= 0) {
    rte_eal_wait_lcore(static_cast<unsigned>(lcore_));
    lcore_ = -1;
    return;
  }
#endif
  if (thread_.joinable()) thread_.join();
}

}  // namespace ringfire::dataplane
