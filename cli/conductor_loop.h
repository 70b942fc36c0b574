// conductor_loop.h — the one loop a ringfire process's conductor runs
// (`serve`, `mirror`, `run`): the engine's turn (its sessions, control
// connections and agents; at most max_wait_ns asleep), then the command's
// own (`after`: its reports, ctl, the watchdog; false ends the loop), then
// /metrics when it is served; until SIGINT or SIGTERM. The metrics server
// leaves the engine's watch list as the loop ends, however it ends.
// Conductor thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/functional/function_ref.h"
#include "cli/common.h"
#include "cli/metrics_server.h"
#include "engine/engine.h"

namespace ringfire::cli {

inline void conductor_loop(engine::Engine& eng, uint64_t max_wait_ns, MetricsServer* metrics,
                           const std::function<std::string()>& metrics_text,
                           absl::FunctionRef<bool(uint64_t now)> after) {
  while (!stop_requested()) {
    eng.run_once(max_wait_ns);
    const uint64_t now = now_ns();
    if (!after(now)) break;
    if (metrics != nullptr) metrics->poll(now, metrics_text);
  }
  if (metrics != nullptr) eng.unwatch(metrics->fd());
}

}  // namespace ringfire::cli
