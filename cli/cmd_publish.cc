// cmd_publish.cc — `ringfire publish`: a synthetic feed of self-checking
// records (ring/check_record.h), at a fixed rate or flat out.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "ring/blob.h"
#include "ring/check_record.h"
#include "ring/producer.h"

namespace ringfire::cli {
namespace {

const CommandSpec kPublish{
    "publish", "RING", 1, 1,
    "Publish self-checking records (sequence, timestamp, checksum) into an existing ring.\n"
    "Fixed rings get slot-sized records; blob rings get lengths in [--min-size, --max-size].",
    {
        {"rate", "N", "records per second (default: flat out)"},
        {"count", "N", "stop after N records"},
        {"duration", "TIME", "stop after TIME (e.g. 5s)"},
        {"min-size", "BYTES", "blob rings: smallest record (default 24)"},
        {"max-size", "BYTES", "blob rings: largest record (default 256)"},
        {"idle", "MODE", "waiting for the next record's time: spin (default), yield or backoff"},
        {"quiet", nullptr, "no per-second lines"},
        {"unchecked", nullptr,
         "records carry only their sequence and stamp (bytes 16.. zero, no checksum): a benchmark "
         "publisher's least cost per record; check a mirror with `compare --exact`, not `tail`"},
    }};

// Pacer releases record i at start + i / rate: sleeps when far ahead, and
// waits out the last stretch with the idle strategy (spin on an isolated
// core; yield where the core is shared) so a steady rate does not jitter by
// a timer slack.
class Pacer {
 public:
  Pacer(uint64_t rate, uint64_t start_ns, ring::IdleMode mode)
      : rate_(rate), start_ns_(start_ns), idle_(mode) {}
  void wait_for(uint64_t i) {
    if (rate_ == 0) return;
    const uint64_t due = start_ns_ + static_cast<uint64_t>(static_cast<double>(i) * 1e9 / rate_);
    for (;;) {
      const uint64_t now = now_ns();
      if (now >= due) {
        idle_.reset();
        return;
      }
      if (due - now > 200'000) {
        const uint64_t nap = due - now - 100'000;
        const timespec ts{static_cast<time_t>(nap / 1'000'000'000u),
                          static_cast<long>(nap % 1'000'000'000u)};
        nanosleep(&ts, nullptr);
      } else {
        idle_.idle();
      }
    }
  }

 private:
  uint64_t rate_;
  uint64_t start_ns_;
  ring::IdleStrategy idle_;
};

// cpu_time_ns: this process's CPU time (the summary's cost per record).
uint64_t cpu_time_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

struct Limits {
  ring::IdleMode idle = ring::IdleMode::kSpin;
  uint64_t rate = 0;
  uint64_t count = UINT64_MAX;
  uint64_t duration_ns = UINT64_MAX;
  bool quiet = false;
};

// run publishes with `publish_one(seq_hint, now)` until a limit or a signal.
template <typename PublishOne>
int run(const char* what, const Limits& lim, PublishOne publish_one) {
  const uint64_t start = now_ns();
  const uint64_t cpu_start = cpu_time_ns();
  Pacer pacer(lim.rate, start, lim.idle);
  uint64_t n = 0;
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  uint64_t next_report = start + 1'000'000'000u;
  uint64_t reported = 0;
  while (n < lim.count && !stop_requested()) {
    pacer.wait_for(n);
    const uint64_t now = now_ns();  // also the record's stamp
    if (now - start >= lim.duration_ns) break;
    last_seq = publish_one(now);
    if (n == 0) first_seq = last_seq;
    ++n;
    if (now >= next_report) {
      if (!lim.quiet) {
        std::printf("publish: %llu rec/s, %llu total, next seq %llu\n",
                    static_cast<unsigned long long>(n - reported),
                    static_cast<unsigned long long>(n),
                    static_cast<unsigned long long>(last_seq + 1));
        std::fflush(stdout);
      }
      reported = n;
      next_report += 1'000'000'000u;
    }
  }
  const double secs = static_cast<double>(now_ns() - start) / 1e9;
  const double cpu_ns = static_cast<double>(cpu_time_ns() - cpu_start);
  std::printf("publish: %s %llu records (seq %llu..%llu) in %.3f s, %.0f rec/s, %.1f CPU ns per record\n", what,
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(first_seq),
              static_cast<unsigned long long>(n ? last_seq : first_seq), secs,
              secs > 0 ? static_cast<double>(n) / secs : 0.0, n ? cpu_ns / static_cast<double>(n) : 0.0);
  return 0;
}

// fill_unchecked writes what --unchecked records hold: the sequence at 0,
// the stamp at 8, zeros after (the spans are at least 24 bytes: checked).
void fill_unchecked(std::span<std::byte> out, uint64_t seq, uint64_t stamp_ns) {
  std::memcpy(out.data(), &seq, 8);
  std::memcpy(out.data() + 8, &stamp_ns, 8);
  std::memset(out.data() + 16, 0, out.size() - 16);
}

}  // namespace

int cmd_publish(int argc, char** argv, int first) {
  auto args = Args::parse(kPublish, argc, argv, first);
  if (!args.ok()) return fail("publish", args.status());
  if (args->help()) {
    std::fputs(usage(kPublish).c_str(), stdout);
    return 0;
  }
  Limits lim;
  auto rate = args->count("rate", 0);
  auto count = args->count("count", UINT64_MAX);
  auto duration = args->duration_ns("duration", UINT64_MAX);
  auto min_size = args->count("min-size", ring::kCheckRecordMin);
  auto max_size = args->count("max-size", 256);
  for (const auto* s : {&rate, &count, &duration, &min_size, &max_size}) {
    if (!s->ok()) return fail("publish", s->status());
  }
  lim.rate = *rate;
  lim.count = *count;
  lim.duration_ns = *duration;
  lim.quiet = args->has("quiet");
  // fill: a self-checking record, or (--unchecked) sequence and stamp only.
  auto fill = args->has("unchecked") ? &fill_unchecked : &ring::fill_record;
  auto idle_mode = parse_idle(args->str("idle", "spin"));
  if (!idle_mode.ok()) return fail("publish", idle_mode.status());
  lim.idle = *idle_mode;
  install_stop_handlers();

  auto file = ring::RingFile::open(args->positionals()[0]);
  if (!file.ok()) return fail("publish", file.status());

  if (!file->blob()) {
    if (file->slot_size() < ring::kCheckRecordMin) {
      return fail("publish", absl::FailedPreconditionError(absl::StrCat(
                                 "slot size ", file->slot_size(), " is smaller than the ",
                                 ring::kCheckRecordMin, "-byte self-checking record")));
    }
    auto p = ring::Producer::attach(std::move(*file));
    if (!p.ok()) return fail("publish", p.status());
    const size_t len = p->record_size();
    return run("published", lim, [&](uint64_t now) {
      const uint64_t seq = p->next_seq();
      fill({p->claim(), len}, seq, now);
      return p->commit();
    });
  }

  auto p = ring::BlobProducer::attach(std::move(*file));
  if (!p.ok()) return fail("publish", p.status());
  if (*min_size < ring::kCheckRecordMin || *min_size > *max_size || *max_size > p->max_blob()) {
    return fail("publish", absl::InvalidArgumentError(absl::StrCat(
                               "record sizes must satisfy ", ring::kCheckRecordMin,
                               " <= --min-size <= --max-size <= ", p->max_blob(),
                               " (a quarter of this ring's arena)")));
  }
  const auto lo = static_cast<uint32_t>(*min_size);
  const auto hi = static_cast<uint32_t>(*max_size);
  return run("published", lim, [&](uint64_t now) {
    const uint64_t seq = p->next_seq();
    const uint32_t len = ring::blob_length_for(seq, lo, hi);
    fill(p->reserve(len), seq, now);  // len <= max_blob(): checked above
    return p->commit(len);
  });
}

}  // namespace ringfire::cli
