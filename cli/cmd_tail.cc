// cmd_tail.cc — `ringfire tail`: follow a ring, verify every record, print
// or count. A torn or misplaced record is a bug and makes the exit code 3.
#include <cstdio>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "ring/blob.h"
#include "ring/check_record.h"
#include "ring/consumer.h"

namespace ringfire::cli {
namespace {

const CommandSpec kTail{
    "tail", "RING", 0, 1,
    "Follow a ring and verify every record (checksum and sequence). Prints a line per\n"
    "second (records/s, lost to lapping, holes, torn) and a summary; exit code 3 if any\n"
    "record was torn or misplaced.",
    {
        {"from", "WHERE", "latest (default), oldest, or a sequence number"},
        {"count", "N", "stop after N records"},
        {"duration", "TIME", "stop after TIME"},
        {"idle-exit", "TIME", "stop after TIME without a new record"},
        {"print", nullptr, "print every record (seq, length, age in us)"},
        {"name", "NAME", "reader name in the ring's registry (default tail)"},
        {"idle", "MODE", "spin, yield, backoff (default) or hot (yield 50 ms after the last record, then back off)"},
        {"quiet", nullptr, "no per-second lines"},
        {"archive", "DIR", "read an archive directory instead of a ring (RING is then omitted);\n"
                           "      --from oldest or SEQ, --count, --print and --idle-exit apply"},
        {"follow", nullptr, "with --archive: at the archive's end, wait for what its recorder appends\n"
                            "      (until stopped, --count, or --idle-exit; without it, stop at the end)"},
    }};

struct Counters {
  uint64_t read = 0;
  uint64_t lost = 0;
  uint64_t torn = 0;
  uint64_t misplaced = 0;
  uint64_t last_seq = 0;
};

}  // namespace

int cmd_tail(int argc, char** argv, int first) {
  auto args = Args::parse(kTail, argc, argv, first);
  if (!args.ok()) return fail("tail", args.status());
  if (args->help()) {
    std::fputs(usage(kTail).c_str(), stdout);
    return 0;
  }
  if (args->has("archive") != args->positionals().empty()) {
    return fail("tail", absl::InvalidArgumentError("name a RING, or an archive with --archive DIR (not both)"));
  }
  if (args->has("archive")) return tail_archive(*args);
  if (args->has("follow")) {
    return fail("tail", absl::InvalidArgumentError("--follow is for --archive DIR (a ring's tail always follows)"));
  }
  auto start = parse_start(args->str("from", "latest"));
  auto idle_mode = parse_idle(args->str("idle", "backoff"));
  auto count = args->count("count", UINT64_MAX);
  auto duration = args->duration_ns("duration", UINT64_MAX);
  auto idle_exit = args->duration_ns("idle-exit", UINT64_MAX);
  if (!start.ok()) return fail("tail", start.status());
  if (!idle_mode.ok()) return fail("tail", idle_mode.status());
  for (const auto* s : {&count, &duration, &idle_exit}) {
    if (!s->ok()) return fail("tail", s->status());
  }
  const bool print = args->has("print");
  const bool quiet = args->has("quiet");
  const std::string name = args->str("name", "tail");
  install_stop_handlers();

  auto file = ring::RingFile::open(args->positionals()[0]);
  if (!file.ok()) return fail("tail", file.status());

  // read_one reads the next record into `buf` and its length into *len.
  std::vector<std::byte> buf;
  std::function<ring::ReadResult(uint32_t*)> read_one;
  std::optional<ring::Consumer> fixed;
  std::optional<ring::BlobConsumer> blob;
  if (file->blob()) {
    auto c = ring::BlobConsumer::attach(std::move(*file), *start, name);
    if (!c.ok()) return fail("tail", c.status());
    blob.emplace(std::move(*c));
    buf.resize(blob->max_blob());
    read_one = [&](uint32_t* len) { return blob->try_read(buf.data(), len); };
  } else {
    auto c = ring::Consumer::attach(std::move(*file), *start, name);
    if (!c.ok()) return fail("tail", c.status());
    fixed.emplace(std::move(*c));
    buf.resize(fixed->record_size());
    read_one = [&](uint32_t* len) {
      *len = fixed->record_size();
      return fixed->try_read(buf.data());
    };
  }
  auto holes_skipped = [&] { return fixed ? fixed->holes_skipped() : blob->holes_skipped(); };

  ring::IdleStrategy idle(*idle_mode);
  Counters c;
  const uint64_t t0 = now_ns();
  uint64_t last_record_ns = t0;
  uint64_t next_report = t0 + 1'000'000'000u;
  uint64_t reported = 0;
  uint64_t polls = 0;
  while (c.read < *count && !stop_requested()) {
    uint32_t len = 0;
    const ring::ReadResult r = read_one(&len);
    c.lost += r.lost;
    const bool check_clock = r.ok ? (c.read & 255) == 0 || print : (++polls & 63) == 0;
    const uint64_t now = check_clock ? now_ns() : 0;
    if (r.ok) {
      idle.reset();
      ++c.read;
      c.last_seq = r.seq;
      switch (ring::check_record(buf.data(), len, r.seq)) {
        case ring::CheckVerdict::kOk: break;
        case ring::CheckVerdict::kWrongSeq: ++c.misplaced; break;
        default: ++c.torn; break;
      }
      if (print) {
        std::printf("seq %llu len %u age %.1f us\n", static_cast<unsigned long long>(r.seq), len,
                    static_cast<double>(now - ring::record_stamp(buf.data())) / 1e3);
      }
      if (check_clock) last_record_ns = now;
    } else {
      idle.idle();
    }
    if (!check_clock) continue;
    if (now - t0 >= *duration) break;
    if (!r.ok && now - last_record_ns >= *idle_exit) break;
    if (now >= next_report) {
      if (!quiet && !print) {
        std::printf("tail: %llu rec/s, %llu read, %llu lost, %llu holes, %llu torn\n",
                    static_cast<unsigned long long>(c.read - reported),
                    static_cast<unsigned long long>(c.read), static_cast<unsigned long long>(c.lost),
                    static_cast<unsigned long long>(holes_skipped()),
                    static_cast<unsigned long long>(c.torn + c.misplaced));
        std::fflush(stdout);
      }
      reported = c.read;
      next_report += 1'000'000'000u;
    }
  }
  std::printf(
      "tail: %llu records verified, %llu lost, %llu holes skipped, %llu torn, %llu misplaced, "
      "last seq %llu\n",
      static_cast<unsigned long long>(c.read - c.torn - c.misplaced),
      static_cast<unsigned long long>(c.lost), static_cast<unsigned long long>(holes_skipped()),
      static_cast<unsigned long long>(c.torn), static_cast<unsigned long long>(c.misplaced),
      static_cast<unsigned long long>(c.last_seq));
  return (c.torn != 0 || c.misplaced != 0) ? 3 : 0;
}

}  // namespace ringfire::cli
