// cmd_record.cc — `ringfire record`: record a ring into an archive
// directory until stopped; resumes where the archive ends.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "archive/recorder.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/record_setup.h"
#include "cli/session_report.h"

namespace ringfire::cli {
namespace {

CommandSpec record_spec() {
  std::vector<OptionSpec> o = record_options();
  o.push_back({"duration", "TIME", "stop after TIME"});
  o.push_back({"idle-exit", "TIME", "stop after TIME with nothing left to record"});
  o.push_back({"counters-dir", "DIR", "where to keep the counters file (default /dev/shm)"});
  o.push_back({"quiet", nullptr, "no per-second lines"});
  return CommandSpec{
      "record", "RING", 1, 1,
      "Record every record of a ring, under its sequence, into segment files in --dir.\n"
      "An existing archive resumes at its end (a torn tail from a kill is cleared first).\n"
      "Prints a line per second: records/s, recorded and durable up to, lag behind the\n"
      "writer, bytes, segments, gaps taken when lapped, fsyncs, disk errors.",
      std::move(o)};
}

}  // namespace

int cmd_record(int argc, char** argv, int first) {
  const CommandSpec spec = record_spec();
  auto args = Args::parse(spec, argc, argv, first);
  if (!args.ok()) return fail("record", args.status());
  if (args->help()) {
    std::fputs(usage(spec).c_str(), stdout);
    return 0;
  }
  const auto counters = counters_dir(*args);  // checked before anything is made
  if (!counters.ok()) return fail("record", counters.status());
  auto o = parse_record_options(*args);
  auto duration = args->duration_ns("duration", UINT64_MAX);
  auto idle_exit = args->duration_ns("idle-exit", UINT64_MAX);
  if (!o.ok()) return fail("record", o.status());
  if (!duration.ok()) return fail("record", duration.status());
  if (!idle_exit.ok()) return fail("record", idle_exit.status());
  install_stop_handlers();

  auto file = ring::RingFile::open(args->positionals()[0]);
  if (!file.ok()) return fail("record", file.status());
  const std::string ring_path = file->path();
  auto rec = archive::Recorder::open(std::move(*file), *o);
  if (!rec.ok()) return fail("record", rec.status());
  const archive::RecoveryReport& rr = (*rec)->recovery();
  if (rr.existed) {
    std::printf("record: resumed %s at sequence %llu (%s%llu orphan files removed)\n", o->dir.c_str(),
                static_cast<unsigned long long>((*rec)->snapshot().recorded_end),
                rr.torn_bytes != 0 ? "torn tail cleared, " : "",
                static_cast<unsigned long long>(rr.orphans_removed));
  } else {
    std::printf("record: new archive %s from sequence %llu\n", o->dir.c_str(),
                static_cast<unsigned long long>((*rec)->snapshot().recorded_end));
  }
  std::fflush(stdout);
  auto report = RecordReport::start(**rec, "record", args->has("quiet"), *counters, "",
                                    ring_path, o->dir);
  if (!report.ok()) return fail("record", report.status());
  const absl::Status flushed = run_recording(
      **rec, [] { return stop_requested(); }, *duration, *idle_exit, [&](uint64_t now) { (*report)->tick(now); });
  (*report)->finish();
  if (!flushed.ok()) return fail("record", flushed);
  return 0;
}

}  // namespace ringfire::cli
