// daemon.h — `ringfire run`'s daemon as a function, for the command and for
// programs that embed the engine: they run the same config, ctl socket and
// counters, and put their own tasks on a port's worker (worker_task.h)
// through the hooks. Conductor thread (the caller's).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "node/node.h"

namespace ringfire::cli {

struct DaemonHooks {
  // node_up: a [[node]] of the config is up on the engine (before started);
  // the node lives until after `stopping` (take its anchors and senders
  // down there).
  std::function<void(const std::string& name, node::Node&)> node_up;
  // started: every port, session and node of the config is placed; an
  // error stops the daemon (exit status 1, the message printed).
  std::function<absl::Status(engine::Engine&)> started;
  // tick: once per conductor turn; false ends the daemon.
  std::function<bool(engine::Engine&, uint64_t now_ns)> tick;
  // stopping: before the sessions and ports stop (take tasks off here).
  std::function<void(engine::Engine&)> stopping;
};

// run_daemon runs CONFIG until a stop signal (or a hook ends it) and
// returns the exit status. `check_only`: check the config, start nothing.
int run_daemon(const std::string& config_path, bool check_only, const DaemonHooks& hooks);

}  // namespace ringfire::cli
