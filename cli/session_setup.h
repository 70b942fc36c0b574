// session_setup.h — the options of a serve and of a mirror session, and
// turning them into the engine's specs: shared by the one-session
// shorthands (`ringfire serve`, `ringfire mirror`, from flags) and the
// daemon (`ringfire run`, from a config file's tables, whose keys are the
// same names), so the two accept the same options with the same checks and
// the same messages. The backend options belong to the port, not here.
// Start-up only.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/args.h"
#include "engine/engine.h"

namespace ringfire::cli {

// serve_session_options: every option of a serve session.
std::vector<OptionSpec> serve_session_options();
// parse_serve_session checks them and builds the spec of a serve of `ring`
// (a name in /dev/shm or a path; it must exist, unless `may_follow`: a hub's
// ring that a mirror of the same config creates later). Its --archive must
// be an archive, unless `archive_recorded_here`: a [[record]] of the same
// config makes it (the serve looks again whenever a mirror needs it).
absl::StatusOr<engine::ServeSpec> parse_serve_session(const Args& args, const std::string& ring,
                                                      bool may_follow = false, bool archive_recorded_here = false);

// shorthand_options: the process options `serve` and `mirror` share
// (idle, counters-dir, quiet, json, metrics).
std::vector<OptionSpec> shorthand_options();

// mirror_session_options: every option of a mirror session.
std::vector<OptionSpec> mirror_session_options();
// parse_mirror_session builds the options of a mirror of the ring served at
// `source` (HOST:PORT) into `ring`.
absl::StatusOr<control::MirrorOptions> parse_mirror_session(const Args& args, const std::string& source,
                                                           const std::string& ring);

}  // namespace ringfire::cli
