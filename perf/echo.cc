// echo.cc — the round-trip harness behind `pingpong` and `stress`.
//
//   echo pong IN OUT                 copy every record of IN into OUT, as is
//   echo ping OUT IN --rate R --count N [--json FILE] [--drain-ms MS]
//                                    (--rate 0: flat out, as fast as it can publish)
//
// ping publishes self-checking records into OUT at a fixed rate (open loop:
// it never waits for echoes), and reads IN, where a pong on the far side of
// a mirror hop publishes each record back through another mirror hop. An
// echo is matched by the sequence in its payload; the round trip is now -
// the publish stamp. Reports delivered % and round-trip percentiles as JSON.
#include <time.h>

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
#include "ring/producer.h"

namespace ringfire::perf {
namespace {

int pong(const std::string& in, const std::string& out, ring::IdleMode mode) {
  auto fi = ring::RingFile::open(in);
  auto fo = ring::RingFile::open(out);
  if (!fi.ok() || !fo.ok()) {
    std::fprintf(stderr, "echo pong: %s\n",
                 std::string((fi.ok() ? fo.status() : fi.status()).message()).c_str());
    return 2;
  }
  if (fi->slot_size() != fo->slot_size()) {
    std::fprintf(stderr, "echo pong: IN and OUT must have the same slot size\n");
    return 2;
  }
  auto c = ring::Consumer::attach(std::move(*fi), ring::StartPosition::latest(), "pong");
  auto p = ring::Producer::attach(std::move(*fo));
  if (!c.ok() || !p.ok()) return 2;
  std::vector<std::byte> rec(c->record_size());
  ring::IdleStrategy idle(mode);
  for (;;) {
    if (c->try_read(rec.data()).ok) {
      p->publish(rec.data());
      idle.reset();
    } else {
      idle.idle();
    }
  }
}

int ping(const std::string& out, const std::string& in, uint64_t rate, uint64_t count,
         uint64_t drain_ms, const std::string& json, ring::IdleMode mode) {
  auto fo = ring::RingFile::open(out);
  auto fi = ring::RingFile::open(in);
  if (!fi.ok() || !fo.ok()) {
    std::fprintf(stderr, "echo ping: %s\n",
                 std::string((fi.ok() ? fo.status() : fi.status()).message()).c_str());
    return 2;
  }
  auto p = ring::Producer::attach(std::move(*fo));
  auto c = ring::Consumer::attach(std::move(*fi), ring::StartPosition::latest(), "ping");
  if (!c.ok() || !p.ok()) return 2;
  const size_t size = p->record_size();
  std::vector<std::byte> rec(c->record_size());
  const uint64_t first_seq = p->next_seq();
  std::vector<uint8_t> echoed(count, 0);
  LatencyHistogram h;
  ring::IdleStrategy idle(mode);
  const uint64_t warmup = count / 20;
  uint64_t sent = 0, delivered = 0, dups = 0, bad = 0;
  const uint64_t start = monotonic_ns();
  uint64_t done_sending = 0;
  for (;;) {
    const uint64_t now = monotonic_ns();
    bool busy = false;
    if (sent < count &&
        (rate == 0 ||
         now - start >= static_cast<uint64_t>(static_cast<double>(sent) * 1e9 / static_cast<double>(rate)))) {
      ring::fill_record({p->claim(), size}, p->next_seq(), now);
      p->commit();
      ++sent;
      busy = true;
      if (sent == count) done_sending = now;
    }
    const ring::ReadResult r = c->try_read(rec.data());
    if (r.ok) {
      busy = true;
      uint64_t seq;
      std::memcpy(&seq, rec.data(), 8);
      if (ring::check_record(rec.data(), rec.size(), seq) != ring::CheckVerdict::kOk ||
          seq < first_seq || seq - first_seq >= count) {
        ++bad;
      } else if (echoed[seq - first_seq]++ != 0) {
        ++dups;
      } else {
        ++delivered;
        const uint64_t t = monotonic_ns();
        if (seq - first_seq >= warmup) h.record(t - ring::record_stamp(rec.data()));
      }
    }
    if (done_sending != 0 && (delivered == count || now - done_sending > drain_ms * 1'000'000)) break;
    if (busy) {
      idle.reset();
    } else {
      idle.idle();
    }
  }
  const double secs = static_cast<double>(done_sending - start) / 1e9;
  const double pct = 100.0 * static_cast<double>(delivered) / static_cast<double>(count);
  std::printf("ping: rate %llu/s (achieved %.0f/s), %llu sent, %.3f%% delivered, round trip p50 %.1f us, "
              "p99 %.1f us, p99.9 %.1f us, dups %llu, bad %llu\n",
              static_cast<unsigned long long>(rate), static_cast<double>(count) / secs,
              static_cast<unsigned long long>(count), pct, static_cast<double>(h.percentile(0.5)) / 1e3,
              static_cast<double>(h.percentile(0.99)) / 1e3, static_cast<double>(h.percentile(0.999)) / 1e3,
              static_cast<unsigned long long>(dups), static_cast<unsigned long long>(bad));
  if (!json.empty()) {
    write_json(json, absl::StrCat("\"harness\": \"echo\", \"rate\": ",
                                  rate != 0 ? rate : static_cast<uint64_t>(static_cast<double>(count) / secs),
                                  ", \"flat_out\": ", rate == 0 ? "true" : "false", ", \"achieved_rate\": ",
                                  static_cast<uint64_t>(static_cast<double>(count) / secs),
                                  ", \"sent\": ", count, ", \"delivered\": ", delivered,
                                  ", \"delivered_pct\": ", pct, ", \"duplicates\": ", dups,
                                  ", \"bad\": ", bad, ", ", latency_json(h)));
  }
  return bad == 0 && dups == 0 ? 0 : 3;
}

int run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: echo pong IN OUT [--idle MODE]\n"
                 "       echo ping OUT IN --rate R --count N [--json FILE] [--drain-ms MS] [--idle MODE]\n");
    return 2;
  }
  const std::string role = argv[1], a = argv[2], b = argv[3];
  uint64_t rate = 10000, count = 100000, drain_ms = 2000;
  std::string json, idle = "spin";
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--json") json = v;
    else if (k == "--idle") idle = v;
    else if (k == "--rate" && absl::SimpleAtoi(v, &rate)) {}
    else if (k == "--count" && absl::SimpleAtoi(v, &count) && count > 0) {}
    else if (k == "--drain-ms" && absl::SimpleAtoi(v, &drain_ms)) {}
    else {
      std::fprintf(stderr, "echo: bad option %s %s\n", k.c_str(), v.c_str());
      return 2;
    }
  }
  auto mode = ring::parse_idle_mode(idle);
  if (!mode) return 2;
  if (role == "pong") return pong(a, b, *mode);
  if (role == "ping") return ping(a, b, rate, count, drain_ms, json, *mode);
  std::fprintf(stderr, "echo: role must be ping or pong\n");
  return 2;
}

}  // namespace
}  // namespace ringfire::perf

int main(int argc, char** argv) { return ringfire::perf::run(argc, argv); }
