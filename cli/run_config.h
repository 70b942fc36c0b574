// run_config.h — a config file's tables as the engine's specs: [[port]]
// tables as PortSpecs, [[serve]] and [[mirror]] tables as sessions (their
// keys are the shorthands' option names, checked by the same code), and
// [[node]] tables as stream mux nodes on the same engine, [[record]] tables
// as recordings. Every
// error names the file, the line, the table and the key, and says what to
// change. Also the tables `ringfire ctl add` sends. Start-up and conductor.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "archive/recorder.h"
#include "cli/config_file.h"
#include "engine/engine.h"
#include "engine/ports.h"
#include "node/node.h"

namespace ringfire::cli {

// DaemonOptions: the config's top-level keys.
struct DaemonOptions {
  std::string ctl;                     // the control socket's path
  std::string counters_dir = "/dev/shm";
  std::string eal;                     // EAL arguments ("": ringfire's default)
  std::optional<net::Endpoint> metrics;  // the Prometheus endpoint (none: off)
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

// NodeSpec: a [[node]] table — a stream mux node on the daemon's engine
// (its channels are sessions of that engine, on the port it names).
struct NodeSpec {
  std::string name;
  node::NodeOptions options;  // host is left for the daemon to set
};
// node_spec builds a [[node]] table's spec; `ports` are the config's own.
absl::StatusOr<NodeSpec> node_spec(const ConfigFile& f, const ConfigTable& t, const std::vector<engine::PortSpec>& ports);

// RecordSpec: a [[record]] table — a recording of a ring into an archive,
// on a thread of the daemon's own (never a port's worker).
struct RecordSpec {
  std::string name;
  std::string ring;
  archive::RecordOptions options;
};
// record_spec builds a [[record]] table's spec (its keys are `ringfire
// record`'s options, plus name and ring).
absl::StatusOr<RecordSpec> record_spec(const ConfigFile& f, const ConfigTable& t);

// valid_name: 1 to 32 of [A-Za-z0-9_.-] (names become file names).
bool valid_name(const std::string& name);

}  // namespace ringfire::cli
