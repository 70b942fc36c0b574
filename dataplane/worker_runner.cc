// worker_runner.cc — lcore or thread.
#include "dataplane/worker_runner.h"

#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include <rte_launch.h>
#include <rte_lcore.h>

#include "dataplane/dpdk_port.h"
#endif

namespace ringfire::dataplane {

void WorkerRunner::start(std::function<void()> loop) {
  loop_ = std::move(loop);
#if RINGFIRE_HAVE_DPDK
  if (eal_running() && rte_lcore_count() > 1) {
    const unsigned lcore = rte_get_next_lcore(rte_lcore_id(), /*skip_main=*/1, /*wrap=*/0);
    if (lcore < RTE_MAX_LCORE &&
        rte_eal_remote_launch([](void* arg) {
          (*static_cast<std::function<void()>*>(arg))();
          return 0;
        }, &loop_, lcore) == 0) {
      lcore_ = static_cast<int>(lcore);
      where_ = "lcore " + std::to_string(lcore);
      return;
    }
  }
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
