// worker_runner.h — runs a worker loop on a DPDK worker lcore when the EAL
// is up and has one to spare (rte_eal_remote_launch), and on an ordinary
// thread otherwise (the kernel backend, or a one-lcore EAL). Setup code;
// the loop itself is the caller's.
#pragma once

#include <functional>
#include <string>
#include <thread>

namespace ringfire::dataplane {

class WorkerRunner {
 public:
  // start runs `loop` once, to completion, off the calling thread: on
  // `lcore` when given (it must be an idle worker lcore), else on the first
  // idle worker lcore, else on a thread.
  void start(std::function<void()> loop, int lcore = -1);
  // join waits for the loop to return.
  void join();
  // where says where the loop runs ("lcore 1", "a thread", "a registered
  // thread": one the EAL gave an lcore id, for its mempool caches).
  const std::string& where() const { return where_; }

 private:
  std::function<void()> loop_;
  std::thread thread_;
  int lcore_ = -1;
  std::string where_ = "a thread";
};

}  // namespace ringfire::dataplane
