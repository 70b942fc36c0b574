// common.h — what every `ringfire` subcommand shares: error reporting,
// SIGINT/SIGTERM handling, the monotonic clock, start-position and idle-mode
// parsing.
#pragma once

#include <time.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/args.h"
#include "dataplane/fault_injector.h"
#include "mux/mux_config.h"
#include "ring/consumer.h"
#include "ring/idle.h"
#include "ring/monotonic.h"

namespace ringfire::cli {

// fail prints "ringfire CMD: message" to stderr and returns exit code 2.
int fail(const char* command, const absl::Status& status);

// install_stop_handlers makes SIGINT and SIGTERM set the stop flag.
void install_stop_handlers();
bool stop_requested();

inline uint64_t now_ns() { return monotonic_ns(); }

// is_directory: `path` names a directory (following links).
bool is_directory(const std::string& path);

// same_path_key: `path` made comparable with another naming the same file
// or directory: absolute, `.`, `..` and repeated or trailing separators
// folded, links resolved as far as they exist. Never throws (a loop, a
// name too long or a directory it may not read leave it lexical).
std::string same_path_key(const std::string& path);
// counters_dir: --counters-dir (default /dev/shm), an error unless it is a directory.
absl::StatusOr<std::string> counters_dir(const Args& args);
// parse_start reads "latest", "oldest" or a sequence number.
absl::StatusOr<ring::StartPosition> parse_start(const std::string& text);
// parse_schema reads a schema signature: decimal or 0x hex.
absl::StatusOr<uint64_t> parse_schema(const std::string& text);
// parse_idle reads "spin", "yield", "backoff" or "hot".
absl::StatusOr<ring::IdleMode> parse_idle(const std::string& text);
// parse_flush reads a stream mux flush policy: "auto", "manual" (flush_batch
// after each decode step) or "linger:MICROSECONDS".
absl::StatusOr<mux::FlushPolicy> parse_flush(const std::string& text);

// with_fault_options appends the test fault-injection options (--loss,
// --dup-rate, --reorder, --delay, --delay-us, --seed) to a command's options.
std::vector<OptionSpec> with_fault_options(std::vector<OptionSpec> options);
// parse_faults reads them (rates per thousand, at most 1000 in all).
absl::StatusOr<dataplane::FaultConfig> parse_faults(const Args& args);

}  // namespace ringfire::cli
