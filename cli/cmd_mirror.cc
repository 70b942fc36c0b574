// cmd_mirror.cc — `ringfire mirror`: keep a local sparse copy of a remote
// ring under the same sequence numbers; reconnect and resume when the
// source goes away. A one-session engine.
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
#include "engine/engine.h"
#include "engine/ports.h"

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

// publish_counters writes a mirror's counters into its counters file.
void publish_counters(telemetry::CountersFile& f, const control::MirrorControl& c,
                      const dataplane::MirrorWorkerStats& st) {
  constexpr auto r = std::memory_order_relaxed;
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
  f.set("mirror.port_drops", c.port_drops());
  f.set("mirror.health_reports", c.control_stats().health_reports);
  f.set("mirror.sessions", c.control_stats().sessions);
  f.set("rejected.udp.wrong_sender", st.wrong_sender.load(r));
  f.set("rejected.udp.bad_mac", st.bad_mac.load(r));
  f.set("rejected.udp.wrong_kind", st.wrong_kind.load(r));
  f.set("rejected.udp.wrong_session", st.wrong_session.load(r));
  f.set("rejected.udp.implausible", st.implausible.load(r));
  f.set("rejected.udp.malformed", st.malformed.load(r));
  f.set("rejected.tcp.wrong_kind", c.control_stats().tcp_wrong_kind);
  f.sweep();
}

void print_stats(const control::MirrorControl& c, const dataplane::MirrorWorkerStats& st, uint64_t per_second) {
  const uint64_t next = st.next_seq.load();
  const uint64_t end = st.known_end.load();
  std::printf(
      "mirror: %llu rec/s, next seq %llu, lag %llu, held %llu, NAKs %llu, GAP records %llu, "
      "dup %llu, datagrams %llu, TCP frames %llu, fault-dropped %llu, port drops %llu\n",
      static_cast<unsigned long long>(per_second), static_cast<unsigned long long>(next),
      static_cast<unsigned long long>(end > next ? end - next : 0),
      static_cast<unsigned long long>(st.held.load()), static_cast<unsigned long long>(st.naks.load()),
      static_cast<unsigned long long>(st.gap_records.load()),
      static_cast<unsigned long long>(st.duplicates.load()),
      static_cast<unsigned long long>(st.datagrams.load()),
      static_cast<unsigned long long>(st.tcp_frames.load()),
      static_cast<unsigned long long>(st.fault_dropped.load()),
      static_cast<unsigned long long>(c.port_drops()));
  std::fflush(stdout);
}

void print_rejected(const dataplane::MirrorWorkerStats& st) {
  constexpr auto r = std::memory_order_relaxed;
  std::printf("mirror: rejected UDP %llu (wrong-sender %llu, bad-mac %llu, wrong-kind %llu, "
              "wrong-session %llu, implausible %llu, malformed %llu)\n",
              static_cast<unsigned long long>(st.rejected()),
              static_cast<unsigned long long>(st.wrong_sender.load(r)),
              static_cast<unsigned long long>(st.bad_mac.load(r)),
              static_cast<unsigned long long>(st.wrong_kind.load(r)),
              static_cast<unsigned long long>(st.wrong_session.load(r)),
              static_cast<unsigned long long>(st.implausible.load(r)),
              static_cast<unsigned long long>(st.malformed.load(r)));
  std::fflush(stdout);
}

// mirror_loop runs the engine's conductor here until SIGINT/SIGTERM, or
// the source goes away with --once, with the once-a-second stats line and
// counters of its one session. A first failure (the source unreachable, a
// refusal, a mismatch) is an error: exit 2 with the reason.
int mirror_loop(engine::Engine& eng, engine::Engine::Mirror& m, bool quiet, const std::string& counters_dir) {
  using State = control::MirrorControl::State;
  control::MirrorControl& c = *m.control;
  const control::MirrorOptions& o = c.options();
  const std::string path = ring::ring_path(o.ring, o.dir);
  auto counters = telemetry::CountersFile::create(counters_dir, "mirror", path, dataplane::to_string(o.source));
  if (!counters.ok()) return fail("mirror", counters.status());
  bool streaming = false, worker_shown = false;
  uint64_t next_report = 0, last_records = 0, last_rejected = 0;
  auto summary = [&](const std::string& how) {
    const control::SessionTotals& t = c.last_totals();
    std::printf("mirror: %s; %llu records written, next seq %llu, NAKs %llu (%llu repeats), repair time %.0f us\n",
                how.c_str(), static_cast<unsigned long long>(t.records),
                static_cast<unsigned long long>(t.next_seq), static_cast<unsigned long long>(t.naks),
                static_cast<unsigned long long>(t.nak_repeats), static_cast<double>(t.repair_srtt_ns) / 1000.0);
    std::fflush(stdout);
  };
  while (!stop_requested()) {
    eng.run_once(100'000'000);
    const State state = c.state();
    if (state == State::kFailed) {
      const absl::Status why = c.failure();  // stop_all frees the session
      eng.stop_all();
      return fail("mirror", why);
    }
    const dataplane::MirrorWorkerStats* st = c.stats();
    if (state == State::kStreaming && !streaming && st != nullptr) {
      streaming = true;
      last_records = 0;
      last_rejected = 0;
      next_report = now_ns() + 1'000'000'000u;
      if (!worker_shown && !quiet) std::printf("mirror: worker on %s\n", m.port->info().worker.c_str());
      worker_shown = true;
    }
    if (state != State::kStreaming && streaming) {
      streaming = false;
      summary(absl::StrCat("source gone (", c.end_reason(), ")"));
      if (state == State::kStopped) break;  // --once
      continue;
    }
    if (state == State::kStopped) break;
    if (!streaming || now_ns() < next_report) continue;
    const uint64_t records = st->records.load();
    if (!quiet) print_stats(c, *st, records - last_records);
    last_records = records;
    next_report = now_ns() + 1'000'000'000u;
    publish_counters(*counters, c, *st);
    // What strangers sent, by reason, whenever it changed.
    if (const uint64_t rejected = st->rejected(); rejected != last_rejected) {
      last_rejected = rejected;
      print_rejected(*st);
    }
  }
  const bool was_streaming = streaming;
  engine::PortHandle* port = m.port;  // the engine's, alive after its sessions
  c.stop();                   // keeps the session's totals
  if (was_streaming) summary("stopped");
  eng.stop_all();
  if (const std::string line = port->info().summary; !line.empty()) std::printf("mirror: port: %s\n", line.c_str());
  std::fflush(stdout);
  return 0;
}

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
  o.worker.protocol.hold_back_frames = static_cast<uint32_t>(*hold);
  o.worker.protocol.nak_repeat_ns = *nak_us * 1000;
  o.multi_range_naks = !args->has("single-range-naks");
  o.worker.rx_faults = *faults;
  o.reconnect = !args->has("once");
  install_stop_handlers();

  // The port opens with the first session's path: its address is the TCP
  // connection's unless given (--dpdk-ip; --iface for the kernel's joins).
  engine::PortSpec ps;
  ps.name = "port0";
  ps.idle = *idle_mode;
  ps.mtu = 1472;  // at least: a binding takes the source's MTU, and a DPDK port opens with it
  if (backend->dpdk) {
    ps.backend = engine::PortSpec::Backend::kDpdk;
    ps.ip = backend->dpdk_ip;
    ps.neighbors = backend->neighbors;
    ps.exception_port = backend->exception_port;
  } else {
    ps.ip = *iface_ip;
  }
  engine::Engine eng([](const std::string&, const std::string& line) {
    std::printf("mirror: %s\n", line.c_str());
    std::fflush(stdout);
  });
  if (absl::Status st = eng.add_port(ps.name, engine::lazy_port(ps)); !st.ok()) return fail("mirror", st);
  engine::MirrorSpec spec;
  spec.name = "mirror";
  spec.port = ps.name;
  spec.options = o;
  auto added = eng.add_mirror(std::move(spec));
  if (!added.ok()) return fail("mirror", added.status());
  return mirror_loop(eng, **added, args->has("quiet"), args->str("counters-dir", "/dev/shm"));
}

}  // namespace ringfire::cli
