// dpdk_telemetry.h — ringfire's own commands in DPDK's telemetry socket
// (dpdk-telemetry.py), for a daemon with a DPDK port:
//   /ringfire/ports              every port: path, worker, sessions, counters
//   /ringfire/sessions[,PAGE]    session names and kinds, 100 a page ("next": the next page)
//   /ringfire/session,NAME       one session's counters
// DPDK calls them on its telemetry thread; they read a snapshot the
// conductor publishes once a loop turn (a mutex between those two threads
// only: no worker is ever touched). Without DPDK, registering is a no-op.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ringfire::cli {

struct TelemetrySnapshot {
  struct Port {
    std::string name, path, worker;
    std::vector<std::pair<std::string, uint64_t>> counters;
  };
  struct Session {
    std::string name, kind, ring, state;
    std::vector<std::pair<std::string, uint64_t>> counters;
  };
  std::vector<Port> ports;
  std::vector<Session> sessions;
};

// telemetry_register adds the commands (once per process; false if the EAL
// has no telemetry, e.g. --no-telemetry).
bool telemetry_register();
// telemetry_publish replaces the snapshot the commands answer from.
void telemetry_publish(TelemetrySnapshot snapshot);

}  // namespace ringfire::cli
