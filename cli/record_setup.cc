// record_setup.cc — a recording's options, checked once for both spellings.
#include "cli/record_setup.h"

#include "absl/strings/str_cat.h"
#include "cli/common.h"

namespace ringfire::cli {
namespace {

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

}  // namespace

std::vector<OptionSpec> record_options() {
  return {
      {"dir", "DIR", "the archive directory (created if missing)"},
      {"from", "WHERE", "where a new archive starts: oldest (default), latest or a sequence"},
      {"fsync", "POLICY", "segment (default: each segment as it is sealed), never, or an interval (100ms)"},
      {"segment-size", "BYTES", "segment file size for a new archive (default 256Mi)"},
      {"index-interval", "BYTES", "one index entry per this many segment bytes (default 1Mi)"},
      {"batch-bytes", "BYTES", "records per write, in bytes (default 1Mi)"},
      {"buffer-bytes", "BYTES",
       "memory for batches waiting on the disk: a disk's stall is taken up here before the ring laps "
       "the recorder (default 64Mi; 4 batches are made at the start, more only while the disk stalls, given back after 30 s unneeded)"},
      {"gather", "TIME",
       "caught up while records flow, sleep up to this before reading on (default 1ms; less when a quarter "
       "of the ring passes meanwhile); 0: park on the ring, whose writer then wakes the recorder"},
      {"linger", "TIME", "a partial batch is written this long after its first record (default 2ms)"},
      {"write-behind", "BYTES",
       "unless --fsync never: the open segment is synced on the side once this much was written since "
       "its last sync, at most every 100ms, so that a seal waits only for the rest; with --fsync segment a "
       "smaller tail 1-2s after the last such sync (default 8Mi; 0: off)"},
      {"retain-bytes", "BYTES", "remove the oldest sealed segments beyond this size"},
      {"retain-age", "TIME", "remove sealed segments older than this"},
      {"name", "NAME", "reader name in the ring's registry (default record)"},
  };
}

absl::StatusOr<archive::RecordOptions> parse_record_options(const Args& args) {
  if (!args.has("dir")) return absl::InvalidArgumentError("--dir DIR is required");
  archive::RecordOptions o;
  o.dir = args.str("dir");
  if (o.dir.empty()) return absl::InvalidArgumentError("--dir is empty: give the archive's directory");
  o.reader_name = args.str("name", "record");
  auto start = parse_start(args.str("from", "oldest"));
  auto segment = args.count("segment-size", o.layout.segment_bytes);
  auto interval = args.count("index-interval", o.layout.index_interval);
  auto batch = args.count("batch-bytes", o.batch_bytes);
  auto linger = args.duration_ns("linger", o.linger_ns);
  auto buffer_bytes = args.count("buffer-bytes", o.sink.max_buffer_bytes);
  auto write_behind = args.count("write-behind", o.sink.write_behind_bytes);
  auto gather = args.duration_ns("gather", o.gather_ns);
  auto retain_bytes = args.count("retain-bytes", 0);
  auto retain_age = args.duration_ns("retain-age", 0);
  if (!start.ok()) return start.status();
  for (const auto* s : {&segment, &interval, &batch, &linger, &retain_bytes, &retain_age, &buffer_bytes, &gather,
                        &write_behind}) {
    if (!s->ok()) return s->status();
  }
  // 0 is "no bound", the default: written out, it reads as "keep nothing" (helper-46).
  if (args.has("retain-bytes") && *retain_bytes == 0) {
    return absl::InvalidArgumentError("--retain-bytes 0: give a size (without the flag nothing is removed)");
  }
  if (args.has("retain-age") && *retain_age == 0) {
    return absl::InvalidArgumentError("--retain-age 0: give a time (without the flag nothing is removed)");
  }
  if (*segment == 0) return absl::InvalidArgumentError("--segment-size must be above 0 (default 256Mi)");
  if (*interval < 4096) return absl::InvalidArgumentError("--index-interval must be at least 4Ki");
  if (*batch < 4096) return absl::InvalidArgumentError("--batch-bytes must be at least 4Ki");
  if (*buffer_bytes < 2 * *batch) {
    return absl::InvalidArgumentError(absl::StrCat("--buffer-bytes ", *buffer_bytes,
                                                   " holds fewer than 2 batches of --batch-bytes ", *batch,
                                                   ": make it at least ", 2 * *batch));
  }
  if (auto st = parse_fsync(args.str("fsync", "segment"), &o.sink.fsync, &o.sink.fsync_interval_ns); !st.ok()) {
    return st;
  }
  o.start = *start;
  o.layout.segment_bytes = *segment;
  o.layout.index_interval = *interval;
  o.batch_bytes = *batch;
  o.linger_ns = *linger;
  o.sink.max_buffer_bytes = *buffer_bytes;
  o.sink.write_behind_bytes = *write_behind;
  o.gather_ns = *gather;
  o.sink.retention.max_bytes = *retain_bytes;
  o.sink.retention.max_age_ns = *retain_age;
  return o;
}

// run_recording is the recording loop of `record` and of a daemon's
// [[record]] thread: poll, and park when there is nothing to take, until
// `stop` says so (or the optional limits pass); then flush.
absl::Status run_recording(archive::Recorder& rec, const std::function<bool()>& stop, uint64_t duration_ns,
                           uint64_t idle_exit_ns, const std::function<void(uint64_t)>& each_round) {
  const uint64_t t0 = now_ns();
  uint64_t last_work = t0;
  while (!stop()) {
    const uint64_t now = now_ns();
    const uint64_t n = rec.poll(now);
    if (n != 0) last_work = now;
    if (now - t0 >= duration_ns) break;
    if (n == 0 && now - last_work >= idle_exit_ns && rec.snapshot().lag == 0) break;
    if (each_round) each_round(now);
    if (n == 0) rec.wait(now, 100'000'000);
  }
  return rec.flush();
}

}  // namespace ringfire::cli
