// cmd_mirror.cc — `ringfire mirror`: keep a local sparse copy of a remote
// ring under the same sequence numbers; reconnect and resume when the
// source goes away.
#include <time.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/dpdk_options.h"
#include "control/mirror_control.h"
#include "telemetry/counters_file.h"
#include "dataplane/kernel_udp.h"
#include "dataplane/tsc_clock.h"
#include "dataplane/worker_runner.h"
#include "ringfire_config.h"

namespace ringfire::cli {
namespace {

const CommandSpec kMirror = {
    "mirror", "HOST:PORT RING", 2, 2,
    "Mirror the ring served at HOST:PORT into RING (created sparse from the source's\n"
    "geometry, or resumed where it ends). Reconnects and resumes if the source goes away.",
    with_backend_options(with_fault_options({
        {"from", "WHERE", "latest, oldest, or a sequence (default: resume, else latest); a ring that "
                          "already ends past it resumes at its end"},
        {"unicast", nullptr, "ask for UDP unicast (punch) instead of multicast"},
        {"tcp", nullptr, "ask for DATA on the TCP connection"},
        {"iface", "IF", "interface to join the multicast group on"},
        {"schema", "N", "refuse a source ring with another schema signature"},
        {"dir", "DIR", "directory for the ring (default /dev/shm)"},
        {"hold", "N", "hold-back depth in frames (default 8192)"},
        {"nak-repeat-us", "US", "repeat an unanswered NAK after (default 20000; the first repeat comes "
                                "sooner, at twice the measured repair time)"},
        {"single-range-naks", nullptr, "one range per NAK, as a peer without multi-range NAKs (A/B)"},
        {"psk-file", "FILE", "authenticate with this pre-shared key (the source's), and believe only "
                             "datagrams that carry its MAC"},
        {"accept-from", "IP,...", "also believe UDP from these addresses (a multicast relay); by default "
                                  "only the source's announced data address"},
        {"peer-timeout", "DURATION", "give the source up when it is silent this long (default 5s)"},
        {"once", nullptr, "exit when the source goes away instead of reconnecting"},
        {"idle", "MODE", "worker idle strategy: spin, yield or backoff (default backoff)"},
        {"counters-dir", "DIR", "keep the counters file (for `ringfire stat`) here (default /dev/shm)"},
        {"quiet", nullptr, "no per-second stats lines"},
    }), "dpdk: the port's IPv4 address (default: the TCP connection's)")};

}  // namespace

int cmd_mirror(int argc, char** argv, int first) {
  auto args = Args::parse(kMirror, argc, argv, first);
  if (!args.ok()) return fail("mirror", args.status());
  if (args->help()) {
    std::fputs(usage(kMirror).c_str(), stdout);
    return 0;
  }
  control::MirrorOptions o;
  auto source = dataplane::parse_endpoint(args->positionals()[0]);
  if (!source.ok()) return fail("mirror", source.status());
  o.source = *source;
  o.ring = args->positionals()[1];
  o.dir = args->str("dir", "/dev/shm");
  o.unicast = args->has("unicast");
  o.tcp_only = args->has("tcp");
  if (o.unicast && o.tcp_only) {
    return fail("mirror", absl::InvalidArgumentError("--unicast and --tcp exclude each other"));
  }
  if (args->has("from")) {
    const std::string from = args->str("from");
    if (from == "latest") {
      o.from = control::MirrorOptions::From::kLatest;
    } else if (from == "oldest") {
      o.from = control::MirrorOptions::From::kOldest;
    } else if (absl::SimpleAtoi(from, &o.from_seq)) {
      o.from = control::MirrorOptions::From::kSequence;
    } else {
      return fail("mirror", absl::InvalidArgumentError(absl::StrCat(
                                "--from ", from, ": expected latest, oldest or a sequence number")));
    }
  }
  auto iface_ip = iface_address(*args, 0);
  if (!iface_ip.ok()) return fail("mirror", iface_ip.status());
  o.iface_ip = *iface_ip;
  auto schema = parse_schema(args->str("schema", "0"));
  auto hold = args->count("hold", 8192);
  auto nak_us = args->count("nak-repeat-us", 20000);
  auto faults = parse_faults(*args);
  auto idle_mode = parse_idle(args->str("idle", "backoff"));
  for (const auto* s : {&schema, &hold, &nak_us}) {
    if (!s->ok()) return fail("mirror", s->status());
  }
  if (!faults.ok()) return fail("mirror", faults.status());
  if (!idle_mode.ok()) return fail("mirror", idle_mode.status());
  if (*hold == 0 || *hold > (1u << 20)) {
    return fail("mirror", absl::InvalidArgumentError("--hold must be between 1 and 1048576"));
  }
  o.expected_schema = *schema;
  auto peer_timeout = args->duration_ns("peer-timeout", 5'000'000'000);
  if (!peer_timeout.ok()) return fail("mirror", peer_timeout.status());
  if (*peer_timeout < 500'000'000) {
    return fail("mirror", absl::InvalidArgumentError("--peer-timeout must be at least 500ms"));
  }
  o.peer_timeout_ns = *peer_timeout;
  if (args->has("psk-file")) {
    auto k = control::load_psk(args->str("psk-file"));
    if (!k.ok()) return fail("mirror", k.status());
    o.psk = std::move(*k);
  }
  for (absl::string_view ip : absl::StrSplit(args->str("accept-from"), ',', absl::SkipEmpty())) {
    auto e = dataplane::parse_endpoint(std::string(ip), 0);
    if (!e.ok()) return fail("mirror", absl::InvalidArgumentError(absl::StrCat("--accept-from: ", e.status().message())));
    if (o.accept_from.size() == 8) return fail("mirror", absl::InvalidArgumentError("--accept-from: at most 8 addresses"));
    o.accept_from.push_back(e->ip);
  }
  auto backend = start_backend(*args);
  if (!backend.ok()) return fail("mirror", backend.status());
  if (backend->dpdk) {
    o.backend = control::Backend::kDpdk;
    o.dpdk_ip = backend->dpdk_ip;
    o.dpdk_neighbors = backend->neighbors;
    o.dpdk_exception_port = backend->exception_port;
  }
  o.worker.protocol.hold_back_frames = static_cast<uint32_t>(*hold);
  o.worker.protocol.nak_repeat_ns = *nak_us * 1000;
  o.multi_range_naks = !args->has("single-range-naks");
  o.worker.rx_faults = *faults;
  const bool quiet = args->has("quiet");
  const bool once = args->has("once");
  install_stop_handlers();

  const std::string counters_dir = args->str("counters-dir", "/dev/shm");
  for (int attempt = 0; !stop_requested(); ++attempt) {
    auto session = control::MirrorSession::establish(o);
    if (!session.ok()) {
      // A refusal is final; an unreachable source is retried once we have
      // mirrored before (the source restarting).
      const bool retry = attempt > 0 && !once &&
                         session.status().code() == absl::StatusCode::kUnavailable;
      if (retry && attempt % 25 == 1) {
        std::printf("mirror: reconnecting: %s\n", std::string(session.status().message()).c_str());
        std::fflush(stdout);
      }
      if (!retry) return fail("mirror", session.status());
      const timespec ts{0, 200'000'000};
      nanosleep(&ts, nullptr);
      continue;
    }
    control::MirrorSession& s = **session;
    std::printf("mirror: %s -> %s from seq %llu over %s\n", dataplane::to_string(o.source).c_str(),
                ring::ring_path(o.ring, o.dir).c_str(),
                static_cast<unsigned long long>(s.first_seq()), s.description().c_str());
    std::fflush(stdout);
    std::atomic<bool> stop_worker{false};
    dataplane::WorkerRunner runner;
    runner.start([&] {
      ring::IdleStrategy idle(*idle_mode);
      dataplane::TscClock clock;  // deadlines from the TSC: no clock call per poll
      while (!stop_worker.load(std::memory_order_relaxed)) {
        if (s.step(clock.now_ns())) {
          idle.reset();
        } else {
          idle.idle([&](uint64_t timeout_ns) { s.park(clock.now_ns(), timeout_ns); });
        }
      }
    });
    if (!quiet) std::printf("mirror: worker on %s\n", runner.where().c_str());
    const auto& st = s.stats();
    auto counters = telemetry::CountersFile::create(counters_dir, "mirror", ring::ring_path(o.ring, o.dir),
                                                    dataplane::to_string(o.source));
    if (!counters.ok()) return fail("mirror", counters.status());
    auto publish = [&] {
      constexpr auto r = std::memory_order_relaxed;
      telemetry::CountersFile& f = *counters;
      const uint64_t next = st.next_seq.load(r), end = st.known_end.load(r);
      f.set("mirror.records", st.records.load(r));
      f.set("mirror.next_seq", next);
      f.set("mirror.lag", end > next ? end - next : 0);
      f.set("mirror.held", st.held.load(r));
      f.set("mirror.held_high", st.held_high.load(r));
      f.set("mirror.holes", st.holes.load(r));
      f.set("mirror.naks", st.naks.load(r));
      f.set("mirror.nak_repeats", st.nak_repeats.load(r));
      f.set("mirror.gap_records", st.gap_records.load(r));
      f.set("mirror.duplicates", st.duplicates.load(r));
      f.set("mirror.datagrams", st.datagrams.load(r));
      f.set("mirror.tcp_frames", st.tcp_frames.load(r));
      f.set("mirror.hold_overflow", st.hold_overflow.load(r));
      f.set("mirror.repair_time_ns", st.repair_srtt_ns.load(r));
      f.set("mirror.port_drops", s.port_drops());
      f.set("mirror.health_reports", s.control_stats().health_reports);
      f.set("rejected.udp.wrong_sender", st.wrong_sender.load(r));
      f.set("rejected.udp.bad_mac", st.bad_mac.load(r));
      f.set("rejected.udp.wrong_kind", st.wrong_kind.load(r));
      f.set("rejected.udp.wrong_session", st.wrong_session.load(r));
      f.set("rejected.udp.implausible", st.implausible.load(r));
      f.set("rejected.udp.malformed", st.malformed.load(r));
      f.set("rejected.tcp.wrong_kind", s.control_stats().tcp_wrong_kind);
      f.sweep();
    };
    uint64_t next_report = now_ns() + 1'000'000'000u;
    uint64_t last_records = 0;
    uint64_t last_rejected = 0;
    bool alive = true;
    while (alive && !stop_requested()) {
      alive = s.poll(100);
      const uint64_t now = now_ns();
      if (now < next_report) continue;
      const uint64_t records = st.records.load();
      const uint64_t next = st.next_seq.load();
      const uint64_t end = st.known_end.load();
      if (!quiet) {
        std::printf(
            "mirror: %llu rec/s, next seq %llu, lag %llu, held %llu, NAKs %llu, GAP records %llu, "
            "dup %llu, datagrams %llu, TCP frames %llu, fault-dropped %llu, port drops %llu\n",
            static_cast<unsigned long long>(records - last_records),
            static_cast<unsigned long long>(next),
            static_cast<unsigned long long>(end > next ? end - next : 0),
            static_cast<unsigned long long>(st.held.load()),
            static_cast<unsigned long long>(st.naks.load()),
            static_cast<unsigned long long>(st.gap_records.load()),
            static_cast<unsigned long long>(st.duplicates.load()),
            static_cast<unsigned long long>(st.datagrams.load()),
            static_cast<unsigned long long>(st.tcp_frames.load()),
            static_cast<unsigned long long>(st.fault_dropped.load()),
            static_cast<unsigned long long>(s.port_drops()));
        std::fflush(stdout);
      }
      last_records = records;
      next_report = now + 1'000'000'000u;
      publish();
      // What strangers sent, by reason, whenever it changed.
      if (const uint64_t rejected = st.rejected(); rejected != last_rejected) {
        last_rejected = rejected;
        constexpr auto r = std::memory_order_relaxed;
        std::printf("mirror: rejected UDP %llu (wrong-sender %llu, bad-mac %llu, wrong-kind %llu, "
                    "wrong-session %llu, implausible %llu, malformed %llu)\n",
                    static_cast<unsigned long long>(rejected),
                    static_cast<unsigned long long>(st.wrong_sender.load(r)),
                    static_cast<unsigned long long>(st.bad_mac.load(r)),
                    static_cast<unsigned long long>(st.wrong_kind.load(r)),
                    static_cast<unsigned long long>(st.wrong_session.load(r)),
                    static_cast<unsigned long long>(st.implausible.load(r)),
                    static_cast<unsigned long long>(st.malformed.load(r)));
        std::fflush(stdout);
      }
    }
    stop_worker.store(true);
    runner.join();
    if (const std::string port = s.port_summary(); !port.empty()) std::printf("mirror: port: %s\n", port.c_str());
    std::printf("mirror: %s; %llu records written, next seq %llu, NAKs %llu (%llu repeats), repair time %.0f us\n",
                alive ? "stopped" : absl::StrCat("source gone (", s.end_reason(), ")").c_str(),
                static_cast<unsigned long long>(st.records.load()),
                static_cast<unsigned long long>(st.next_seq.load()),
                static_cast<unsigned long long>(st.naks.load()),
                static_cast<unsigned long long>(st.nak_repeats.load()),
                static_cast<double>(st.repair_srtt_ns.load()) / 1000.0);
    std::fflush(stdout);
    if (alive || once) break;
  }
  return 0;
}

}  // namespace ringfire::cli
