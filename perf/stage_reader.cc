// stage_reader.cc — one stage of the `stages` harness: follows a ring (a
// source or a mirror) and records publish -> read latency for every record,
// from the CLOCK_MONOTONIC stamp `ringfire publish` puts in each record
// (network namespaces on one machine share that clock, so cross-"host"
// figures are exact). Verifies each record; writes JSON when done.
//
//   stage_reader RING --name STAGE --json FILE [--warmup N] [--idle-exit-ms MS]
//                [--idle spin|yield|backoff]
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "perf/histogram.h"
#include "perf/json_out.h"
#include "perf/tsc.h"
#include "ring/check_record.h"
#include "ring/consumer.h"
#include "ring/idle.h"

namespace ringfire::perf {
namespace {

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: stage_reader RING --name STAGE --json FILE [--warmup N] "
                         "[--idle-exit-ms MS] [--idle MODE]\n");
    return 2;
  }
  std::string ring_name = argv[1], stage = "stage", json = "-", idle = "spin";
  uint64_t warmup = 1000, idle_exit_ms = 2000;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--name") stage = v;
    else if (k == "--json") json = v;
    else if (k == "--idle") idle = v;
    else if (k == "--warmup" && absl::SimpleAtoi(v, &warmup)) {}
    else if (k == "--idle-exit-ms" && absl::SimpleAtoi(v, &idle_exit_ms)) {}
    else {
      std::fprintf(stderr, "stage_reader: bad option %s %s\n", k.c_str(), v.c_str());
      return 2;
    }
  }
  auto mode = ring::parse_idle_mode(idle);
  auto file = ring::RingFile::open(ring_name);
  if (!file.ok() || !mode) {
    std::fprintf(stderr, "stage_reader: %s\n", file.ok() ? "bad --idle" : std::string(file.status().message()).c_str());
    return 2;
  }
  auto c = ring::Consumer::attach(std::move(*file), ring::StartPosition::latest(), stage);
  if (!c.ok()) return 2;
  std::vector<std::byte> rec(c->record_size());
  LatencyHistogram h;
  ring::IdleStrategy idler(*mode);
  uint64_t seen = 0, bad = 0, lost = 0;
  uint64_t last = monotonic_ns();
  bool started = false;
  for (;;) {
    const ring::ReadResult r = c->try_read(rec.data());
    lost += r.lost;
    if (!r.ok) {
      idler.idle();
      // Wait up to 10 s for the first record; after that, stop when quiet.
      const uint64_t quiet_ns = monotonic_ns() - last;
      if (started ? quiet_ns > idle_exit_ms * 1'000'000 : quiet_ns > 10'000'000'000ull) break;
      continue;
    }
    const uint64_t now = monotonic_ns();
    idler.reset();
    started = true;
    last = now;
    if (ring::check_record(rec.data(), rec.size(), r.seq) != ring::CheckVerdict::kOk) ++bad;
    if (++seen > warmup) {
      const uint64_t stamp = ring::record_stamp(rec.data());
      h.record(now > stamp ? now - stamp : 0);
    }
  }
  const bool ok = write_json(json, absl::StrCat("\"harness\": \"stages\", \"stage\": \"", stage,
                                                 "\", \"ring\": \"", ring_name, "\", ",
                                                 latency_json(h), ", \"lost\": ", lost,
                                                 ", \"holes\": ", c->holes_skipped(),
                                                 ", \"bad\": ", bad));
  return ok && bad == 0 ? 0 : 3;
}

}  // namespace
}  // namespace ringfire::perf

int main(int argc, char** argv) { return ringfire::perf::run(argc, argv); }
