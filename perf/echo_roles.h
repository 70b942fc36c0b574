// echo_roles.h — the two ends of the round-trip harness, each one step at a
// time, so that the same code runs in a process of its own (perf/echo) or
// as a task on an engine's port worker (perf/engine_echo).
//
// Pong copies every record of IN into OUT, as is. Ping publishes
// self-checking records into OUT at a fixed rate (open loop: it never
// waits for echoes; rate 0: flat out) and reads IN, where a pong on the
// far side of a mirror hop published each record back through another
// mirror hop; closed loop, it sends the next record when the last one's
// echo is in (one in flight, as a raw ping-pong and Aeron's cping do; a
// lost one is given up after 10 ms). An echo is matched by the sequence in its payload; the round
// trip is the clock when it is read minus the publish stamp.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "perf/histogram.h"
#include "perf/json_out.h"
#include "ring/check_record.h"
#include "ring/consumer.h"
#include "ring/monotonic.h"
#include "ring/producer.h"

namespace ringfire::perf {

// open_pair opens the ring a role publishes into and the one it reads.
struct RingPair {
  ring::Producer out;
  ring::Consumer in;
};
// `start`: where the reading begins in IN.
inline absl::StatusOr<RingPair> open_pair(const std::string& out, const std::string& in, const char* role,
                                          ring::StartPosition start = ring::StartPosition::latest()) {
  auto fo = ring::RingFile::open(out);
  if (!fo.ok()) return fo.status();
  auto fi = ring::RingFile::open(in);
  if (!fi.ok()) return fi.status();
  if (fi->slot_size() != fo->slot_size()) {
    return absl::InvalidArgumentError(absl::StrCat(role, ": ", in, " and ", out, " must have the same slot size"));
  }
  auto p = ring::Producer::attach(std::move(*fo));
  if (!p.ok()) return p.status();
  auto c = ring::Consumer::attach(std::move(*fi), start, role);
  if (!c.ok()) return c.status();
  return RingPair{std::move(*p), std::move(*c)};
}

class Pong {
 public:
  explicit Pong(RingPair rings) : r_(std::move(rings)), rec_(r_.in.record_size()) {}
  // step echoes at most kBurst records; whether it echoed any.
  bool step() {
    int n = 0;
    while (n < kBurst && r_.in.try_read(rec_.data()).ok) {
      r_.out.publish(rec_.data());
      ++n;
    }
    return n != 0;
  }
  uint64_t echoed() const { return r_.out.next_seq(); }

 private:
  static constexpr int kBurst = 32;
  RingPair r_;
  std::vector<std::byte> rec_;
};

class Ping {
 public:
  static constexpr uint64_t kClosedGiveUpNs = 10'000'000;

  // closed: one record in flight (rate is then ignored).
  Ping(RingPair rings, uint64_t rate, uint64_t count, bool closed = false)
      : r_(std::move(rings)), rate_(closed ? 0 : rate), count_(count), closed_(closed), rec_(r_.in.record_size()),
        first_seq_(r_.out.next_seq()), echoed_(count, 0), warmup_(count / 20) {}

  // step publishes the next record when it is due and reads one echo;
  // whether it did either.
  bool step() {
    const uint64_t now = monotonic_ns();
    last_now_ = now;
    if (start_ == 0) start_ = now;
    bool busy = false;
    if (sent_ < count_ && (rate_ == 0 || now >= due_ns()) &&
        (!closed_ || !awaiting_ || now - last_sent_ns_ > kClosedGiveUpNs)) {
      ring::fill_record({r_.out.claim(), r_.out.record_size()}, r_.out.next_seq(), now);
      r_.out.commit();
      ++sent_;
      awaiting_ = true;
      last_sent_ns_ = now;
      busy = true;
      if (sent_ == count_) done_sending_ = now;
    }
    if (r_.in.try_read(rec_.data()).ok) {
      busy = true;
      uint64_t seq;
      std::memcpy(&seq, rec_.data(), 8);
      if (ring::check_record(rec_.data(), rec_.size(), seq) != ring::CheckVerdict::kOk || seq < first_seq_ ||
          seq - first_seq_ >= count_) {
        ++bad_;
      } else if (echoed_[seq - first_seq_]++ != 0) {
        ++dups_;
      } else {
        ++delivered_;
        if (seq - first_seq_ == sent_ - 1) awaiting_ = false;  // the last one sent: the next may go
        if (seq - first_seq_ >= warmup_) h_.record(monotonic_ns() - ring::record_stamp(rec_.data()));
      }
    }
    return busy;
  }
  // when the next record is due (rate 0: now).
  uint64_t due_ns() const {
    if (rate_ == 0 || sent_ >= count_) return start_;
    return start_ + static_cast<uint64_t>(static_cast<double>(sent_) * 1e9 / static_cast<double>(rate_));
  }
  // finished: every record sent, and every echo in or `drain_ns` passed.
  bool finished(uint64_t now, uint64_t drain_ns) const {
    return done_sending_ != 0 && (delivered_ == count_ || now - done_sending_ > drain_ns);
  }
  bool started() const { return start_ != 0; }
  // last_now: the clock as the last step() read it (0 before the first).
  uint64_t last_now() const { return last_now_; }

  // report prints the summary line (and JSON to `json` unless empty);
  // the exit status: 0, or 3 when an echo was bad or duplicated.
  int report(const std::string& json, const std::string& extra_json = "") const {
    const double secs = static_cast<double>(done_sending_ - start_) / 1e9;
    const double pct = 100.0 * static_cast<double>(delivered_) / static_cast<double>(count_);
    const uint64_t achieved = static_cast<uint64_t>(static_cast<double>(count_) / secs);
    std::printf("ping: %s %llu/s (achieved %llu/s), %llu sent, %.3f%% delivered, round trip p50 %.1f us, "
                "p99 %.1f us, p99.9 %.1f us, dups %llu, bad %llu\n",
                closed_ ? "closed loop, rate" : "rate", static_cast<unsigned long long>(rate_),
                static_cast<unsigned long long>(achieved),
                static_cast<unsigned long long>(count_), pct, static_cast<double>(h_.percentile(0.5)) / 1e3,
                static_cast<double>(h_.percentile(0.99)) / 1e3, static_cast<double>(h_.percentile(0.999)) / 1e3,
                static_cast<unsigned long long>(dups_), static_cast<unsigned long long>(bad_));
    std::fflush(stdout);
    if (!json.empty()) {
      write_json(json, absl::StrCat("\"harness\": \"echo\", \"rate\": ", rate_ != 0 ? rate_ : achieved,
                                    ", \"flat_out\": ", rate_ == 0 && !closed_ ? "true" : "false",
                                    ", \"closed_loop\": ", closed_ ? "true" : "false", ", \"achieved_rate\": ",
                                    achieved, ", \"sent\": ", count_, ", \"delivered\": ", delivered_,
                                    ", \"delivered_pct\": ", pct, ", \"duplicates\": ", dups_, ", \"bad\": ", bad_,
                                    extra_json, ", ", latency_json(h_)));
    }
    return bad_ == 0 && dups_ == 0 ? 0 : 3;
  }

 private:
  RingPair r_;
  uint64_t rate_, count_;
  bool closed_;
  bool awaiting_ = false;     // closed: the last record's echo is not in yet
  uint64_t last_sent_ns_ = 0;
  std::vector<std::byte> rec_;
  uint64_t first_seq_;
  std::vector<uint8_t> echoed_;
  uint64_t warmup_;
  LatencyHistogram h_;
  uint64_t sent_ = 0, delivered_ = 0, dups_ = 0, bad_ = 0;
  uint64_t start_ = 0, done_sending_ = 0, last_now_ = 0;
};

// PingOptions: a ping's command-line options, shared by perf/echo and
// perf/engine_echo.
struct PingOptions {
  uint64_t rate = 10000, count = 100000, drain_ms = 2000;
  bool closed = false;
  std::string json;
  std::string idle = "spin";  // only where `idle_ok`
};
// parse_ping_options reads argv[first..]: --rate R, --closed, --count N,
// --json FILE, --drain-ms MS (and --idle MODE when `idle_ok`). False, with
// a message naming `tool` on stderr, for anything else.
inline bool parse_ping_options(int argc, char** argv, int first, bool idle_ok, const char* tool, PingOptions* o) {
  for (int i = first; i < argc; i += 2) {
    const std::string k = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--closed") {
      o->closed = true;
      --i;  // takes no value
    } else if (k == "--json" && !v.empty()) o->json = v;
    else if (k == "--idle" && idle_ok && !v.empty()) o->idle = v;
    else if (k == "--rate" && absl::SimpleAtoi(v, &o->rate)) {}
    else if (k == "--count" && absl::SimpleAtoi(v, &o->count) && o->count > 0) {}
    else if (k == "--drain-ms" && absl::SimpleAtoi(v, &o->drain_ms)) {}
    else {
      std::fprintf(stderr, "%s: bad option %s %s\n", tool, k.c_str(), v.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace ringfire::perf
