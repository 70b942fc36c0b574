// cmd_record.cc — `ringfire record`: record a ring into an archive
// directory until stopped; resumes where the archive ends.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "archive/recorder.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"

namespace ringfire::cli {
namespace {

const CommandSpec kRecord{
    "record", "RING", 1, 1,
    "Record every record of a ring, under its sequence, into segment files in --dir.\n"
    "An existing archive resumes at its end (a torn tail from a kill is cleared first).\n"
    "Prints a line per second: records/s, recorded up to, lag behind the writer, bytes,\n"
    "segments, gaps taken when lapped, fsyncs, disk errors.",
    {
        {"dir", "DIR", "the archive directory (created if missing)"},
        {"from", "WHERE", "where a new archive starts: oldest (default), latest or a sequence"},
        {"fsync", "POLICY", "segment (default: each segment as it is sealed), never, or an interval (100ms)"},
        {"segment-size", "BYTES", "segment file size for a new archive (default 256Mi)"},
        {"index-interval", "BYTES", "one index entry per this many segment bytes (default 1Mi)"},
        {"batch-bytes", "BYTES", "records per write, in bytes (default 1Mi)"},
        {"linger", "TIME", "a partial batch is written this long after its first record (default 2ms)"},
        {"retain-bytes", "BYTES", "remove the oldest sealed segments beyond this size"},
        {"retain-age", "TIME", "remove sealed segments older than this"},
        {"name", "NAME", "reader name in the ring's registry (default record)"},
        {"duration", "TIME", "stop after TIME"},
        {"idle-exit", "TIME", "stop after TIME with nothing left to record"},
        {"quiet", nullptr, "no per-second lines"},
    }};

absl::Status parse_fsync(const std::string& text, archive::FsyncPolicy* policy, uint64_t* interval_ns) {
  if (text == "never") {
    *policy = archive::FsyncPolicy::kNever;
  } else if (text == "segment") {
    *policy = archive::FsyncPolicy::kSegment;
  } else if (auto ns = parse_duration_ns(text); ns && *ns > 0) {
    *policy = archive::FsyncPolicy::kInterval;
    *interval_ns = *ns;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--fsync ", text, ": use segment, never, or an interval such as 100ms"));
  }
  return absl::OkStatus();
}

void print_line(const char* prefix, const archive::Recorder& rec, uint64_t per_s) {
  const archive::RecorderSnapshot s = rec.snapshot();
  using ull = unsigned long long;
  std::printf("%s: %llu rec/s, recorded to %llu, durable to %llu, lag %llu, %llu records, %llu bytes, "
              "%llu segments, %llu gaps (%llu lost), %llu fsyncs, %llu disk errors%s%s\n",
              prefix, static_cast<ull>(per_s), static_cast<ull>(s.recorded_end), static_cast<ull>(s.durable_end),
              static_cast<ull>(s.lag), static_cast<ull>(s.records), static_cast<ull>(s.bytes),
              static_cast<ull>(s.segments), static_cast<ull>(s.gaps), static_cast<ull>(s.lost),
              static_cast<ull>(s.fsyncs), static_cast<ull>(s.disk_errors), s.stalled ? ", STALLED: " : "",
              s.stalled ? rec.last_error().c_str() : "");
  std::fflush(stdout);
}

}  // namespace

int cmd_record(int argc, char** argv, int first) {
  auto args = Args::parse(kRecord, argc, argv, first);
  if (!args.ok()) return fail("record", args.status());
  if (args->help()) {
    std::fputs(usage(kRecord).c_str(), stdout);
    return 0;
  }
  if (!args->has("dir")) return fail("record", absl::InvalidArgumentError("--dir DIR is required"));
  archive::RecordOptions o;
  o.dir = args->str("dir");
  o.reader_name = args->str("name", "record");
  auto start = parse_start(args->str("from", "oldest"));
  auto segment = args->count("segment-size", o.layout.segment_bytes);
  auto interval = args->count("index-interval", o.layout.index_interval);
  auto batch = args->count("batch-bytes", o.batch_bytes);
  auto linger = args->duration_ns("linger", o.linger_ns);
  auto retain_bytes = args->count("retain-bytes", 0);
  auto retain_age = args->duration_ns("retain-age", 0);
  auto duration = args->duration_ns("duration", UINT64_MAX);
  auto idle_exit = args->duration_ns("idle-exit", UINT64_MAX);
  if (!start.ok()) return fail("record", start.status());
  for (const auto* s : {&segment, &interval, &batch, &linger, &retain_bytes, &retain_age, &duration, &idle_exit}) {
    if (!s->ok()) return fail("record", s->status());
  }
  if (*interval < 4096) {
    return fail("record", absl::InvalidArgumentError("--index-interval must be at least 4Ki"));
  }
  if (auto st = parse_fsync(args->str("fsync", "segment"), &o.sink.fsync, &o.sink.fsync_interval_ns); !st.ok()) {
    return fail("record", st);
  }
  o.start = *start;
  o.layout.segment_bytes = *segment;
  o.layout.index_interval = *interval;
  o.batch_bytes = *batch;
  o.linger_ns = *linger;
  o.sink.retention.max_bytes = *retain_bytes;
  o.sink.retention.max_age_ns = *retain_age;
  install_stop_handlers();

  auto file = ring::RingFile::open(args->positionals()[0]);
  if (!file.ok()) return fail("record", file.status());
  auto rec = archive::Recorder::open(std::move(*file), o);
  if (!rec.ok()) return fail("record", rec.status());
  const archive::RecoveryReport& rr = (*rec)->recovery();
  if (rr.existed) {
    std::printf("record: resumed %s at sequence %llu (%s%llu orphan files removed)\n", o.dir.c_str(),
                static_cast<unsigned long long>((*rec)->snapshot().recorded_end),
                rr.torn_bytes != 0 ? "torn tail cleared, " : "",
                static_cast<unsigned long long>(rr.orphans_removed));
  } else {
    std::printf("record: new archive %s from sequence %llu\n", o.dir.c_str(),
                static_cast<unsigned long long>((*rec)->snapshot().recorded_end));
  }
  std::fflush(stdout);

  const bool quiet = args->has("quiet");
  const uint64_t t0 = now_ns();
  uint64_t next_report = t0 + 1'000'000'000u;
  uint64_t last_work = t0;
  uint64_t reported = 0;
  while (!stop_requested()) {
    const uint64_t now = now_ns();
    const uint64_t n = (*rec)->poll(now);
    if (n != 0) last_work = now;
    if (now - t0 >= *duration) break;
    if (n == 0 && now - last_work >= *idle_exit && (*rec)->snapshot().lag == 0) break;
    if (now >= next_report) {
      const uint64_t records = (*rec)->snapshot().records;
      if (!quiet) print_line("record", **rec, records - reported);
      reported = records;
      next_report += 1'000'000'000u;
    }
    if (n == 0) (*rec)->wait(now, std::min<uint64_t>(100'000'000u, next_report - std::min(next_report, now)));
  }
  const absl::Status flushed = (*rec)->flush();
  print_line("record: done", **rec, 0);
  if (!flushed.ok()) return fail("record", flushed);
  return 0;
}

}  // namespace ringfire::cli
