// record_setup.h — the options of a recording (`ringfire record`'s flags,
// and the keys of `ringfire run`'s [[record]] tables: the same names, the
// same checks, the same messages). Start-up only.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "archive/recorder.h"
#include "cli/args.h"

namespace ringfire::cli {

// record_options: every option of a recording but the ring itself.
std::vector<OptionSpec> record_options();
// parse_record_options checks them and builds the recorder's options.
absl::StatusOr<archive::RecordOptions> parse_record_options(const Args& args);

// run_recording is the recording loop of `ringfire record` and of a
// daemon's [[record]] thread: poll, park when there is nothing to take,
// until `stop` says so (or duration_ns passes, or idle_exit_ns without
// work); then flush. each_round(now) runs once a round (a report).
// The recording's own thread.
absl::Status run_recording(archive::Recorder& rec, const std::function<bool()>& stop, uint64_t duration_ns,
                           uint64_t idle_exit_ns, const std::function<void(uint64_t)>& each_round);

}  // namespace ringfire::cli
