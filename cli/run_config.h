// run_config.h — a config file's tables as the engine's specs: [[port]]
// tables as PortSpecs, [[serve]] and [[mirror]] tables as sessions (their
// keys are the shorthands' option names, checked by the same code). Every
// error names the file, the line, the table and the key, and says what to
// change. Also the tables `ringfire ctl add` sends. Start-up and conductor.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/config_file.h"
#include "engine/engine.h"
#include "engine/ports.h"

namespace ringfire::cli {

// DaemonOptions: the config's top-level keys.
struct DaemonOptions {
  std::string ctl;                     // the control socket's path
  std::string counters_dir = "/dev/shm";
  std::string eal;                     // EAL arguments ("": ringfire's default)
  std::optional<dataplane::Endpoint> metrics;  // the Prometheus endpoint (none: off)
  bool quiet = false;
};

absl::StatusOr<DaemonOptions> daemon_options(const ConfigFile& f);
absl::StatusOr<engine::PortSpec> port_spec(const ConfigFile& f, const ConfigTable& t);

// A session to add: exactly one of the two, with its table's name.
struct SessionSpec {
  std::optional<engine::ServeSpec> serve;
  std::optional<engine::MirrorSpec> mirror;
  // follows: a serve of the ring a mirror of the same config writes (a hub)
  // names that mirror; the serve starts once the mirror has created it.
  std::string follows;
};
// session_spec builds a [[serve]] or [[mirror]] table's spec; `ports` names
// the ports it may go on (with one, `port` may be left out).
absl::StatusOr<SessionSpec> session_spec(const ConfigFile& f, const ConfigTable& t,
                                         const std::vector<std::string>& ports);

// valid_name: 1 to 32 of [A-Za-z0-9_.-] (names become file names).
bool valid_name(const std::string& name);

}  // namespace ringfire::cli
