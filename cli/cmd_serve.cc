// cmd_serve.cc — `ringfire serve`: serve a ring to mirrors over UDP
// multicast, UDP unicast and/or TCP: a one-session engine.
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/dpdk_options.h"
#include "control/serve_control.h"
#include "telemetry/counters_file.h"
#include "dataplane/kernel_udp.h"
#include "engine/engine.h"
#include "engine/ports.h"

namespace ringfire::cli {
namespace {

const CommandSpec kServe = {
    "serve", "RING", 1, 1,
    "Serve a ring to mirrors. The TCP listener carries the handshake, NAK repair and\n"
    "TCP-mode DATA; DATA goes to a multicast group (--multicast) and/or by unicast to\n"
    "mirrors that punch --udp PORT. With neither, every mirror gets DATA over TCP.",
    with_backend_options(with_fault_options({
        {"listen", "ADDR:PORT", "TCP address for mirrors (required)"},
        {"multicast", "GROUP:PORT", "send DATA to this group (239.255.0.0/16 in labs)"},
        {"iface", "IF", "interface for multicast sends (default: the --listen address)"},
        {"ttl", "N", "multicast TTL (default 1)"},
        {"mtu", "BYTES", "largest UDP payload (default 1472)"},
        {"udp", "PORT", "UDP port mirrors punch for unicast DATA"},
        {"dup", "N", "send every datagram N times (default 1)"},
        {"pace-us", "US", "pacing interval (default 50)"},
        {"heartbeat-us", "US", "heartbeat interval while idle (default 1000)"},
        {"repair-udp-max", "N", "NAKs of up to N records are also repaired by UDP, through the data plane, "
                                "besides TCP (default 1024; 0: TCP only)"},
        {"heartbeat-max-us", "US", "heartbeats back off while idle up to this (default 100000)"},
        {"from", "WHERE", "where the UDP stream starts: latest (default) or oldest"},
        {"psk-file", "FILE", "require mirrors to authenticate with this pre-shared key (>= 32 bytes, "
                             "mode 600); every datagram then carries a MAC"},
        {"max-connections", "N", "TCP connections at most (default 256); more are refused"},
        {"handshake-timeout", "DURATION", "a connection must complete its HELLO within (default 5s)"},
        {"peer-timeout", "DURATION", "a mirror silent this long is dropped (default 5s; mirrors report every 100 ms)"},
        {"stall-timeout", "DURATION", "a mirror that reads nothing of what it was sent this long is dropped (default 10s)"},
        {"slow-mirror-pct", "PCT", "warn when a mirror lags by this share of the ring (default 50)"},
        {"idle", "MODE", "worker idle strategy: spin, yield or backoff (default backoff)"},
        {"counters-dir", "DIR", "keep the counters file (for `ringfire stat`) here (default /dev/shm)"},
        {"quiet", nullptr, "no per-second stats lines"},
    }), "dpdk: the port's IPv4 address (default: --iface's)")};

// publish_counters writes every counter a serve keeps into its counters
// file (`ringfire stat` shows them), once a second.
void publish_counters(telemetry::CountersFile& f, const control::ServeControl& ctl,
                      const dataplane::ServeStats& w, uint64_t port_drops) {
  constexpr auto r = std::memory_order_relaxed;
  const control::ServeControlStats& c = ctl.stats();
  f.set("serve.records", w.records.load(r) + c.tcp_records);
  f.set("serve.frames", w.frames.load(r));
  f.set("serve.datagrams", w.datagrams.load(r));
  f.set("serve.send_failures", w.send_failures.load(r));
  f.set("serve.next_seq", w.next_to_send.load(r));
  f.set("serve.heartbeats", w.heartbeats.load(r));
  f.set("serve.lapped", w.lapped.load(r));
  f.set("serve.mirrors", c.mirrors);
  f.set("serve.unicast_mirrors", w.unicast_mirrors.load(r));
  f.set("serve.naks", c.naks);
  f.set("serve.nak_ranges", c.nak_ranges);
  f.set("serve.nak_records_tcp", c.nak_records);
  f.set("serve.udp_repairs", c.udp_repairs);
  f.set("serve.gaps", c.gaps);
  f.set("serve.slow_warnings", c.slow_warnings);
  f.set("serve.port_drops", port_drops);
  f.set("refused.tcp.conn_cap", c.conn_cap);
  f.set("refused.tcp.handshake_timeout", c.handshake_timeouts);
  f.set("refused.tcp.malformed", c.malformed);
  f.set("refused.tcp.oversized", c.oversized);
  f.set("refused.tcp.wrong_kind", c.wrong_kind);
  f.set("refused.tcp.bad_hello", c.bad_hello);
  f.set("refused.tcp.unauthenticated", c.unauthenticated);
  f.set("refused.tcp.bad_auth", c.bad_auth);
  f.set("refused.tcp.slow", c.slow_cut);
  f.set("refused.tcp.silent", c.peer_timeouts);
  f.set("refused.tcp.nak_dropped", c.nak_dropped);
  f.set("refused.punch.malformed", w.punch_malformed.load(r));
  f.set("refused.punch.wrong_kind", w.punch_wrong_kind.load(r));
  f.set("refused.punch.unknown_token", w.punch_unknown_token.load(r));
  f.set("refused.punch.wrong_sender", w.punch_wrong_sender.load(r));
  f.set("refused.punch.bad_mac", w.punch_bad_mac.load(r));
  f.set("refused.punch.replayed", w.punch_replayed.load(r));
  for (const control::MirrorView& m : ctl.mirrors()) {
    const std::string k = absl::StrCat("mirror.", dataplane::to_string(m.peer), ".");
    f.set(k + "lag", m.lag);
    f.set(k + "slow", m.slow);
    if (m.has_health) {
      f.set(k + "holes", m.health.holes);
      f.set(k + "naks", m.health.naks);
      f.set(k + "gap_records", m.health.gap_records);
      f.set(k + "held_high", m.health.held_high);
      f.set(k + "rx_drops", m.health.rx_drops);
      f.set(k + "rejected", m.health.rejected);
    }
  }
  f.sweep();
}

// refusals: the rejection counters by reason, for the log line printed
// when they change.
std::string refusals(const control::ServeControlStats& c, const dataplane::ServeStats& w) {
  constexpr auto r = std::memory_order_relaxed;
  return absl::StrCat(
      "refused: TCP ", c.refused(), " (conn-cap ", c.conn_cap, ", handshake-timeout ", c.handshake_timeouts,
      ", malformed ", c.malformed, ", oversized ", c.oversized, ", wrong-kind ", c.wrong_kind, ", bad-hello ",
      c.bad_hello, ", unauthenticated ", c.unauthenticated, ", bad-auth ", c.bad_auth, ", slow ", c.slow_cut,
      ", silent ", c.peer_timeouts, "), NAK ranges dropped ", c.nak_dropped, ", PUNCH ", w.punches_refused(),
      " (malformed ", w.punch_malformed.load(r), ", wrong-kind ", w.punch_wrong_kind.load(r),
      ", unknown-token ", w.punch_unknown_token.load(r), ", wrong-sender ", w.punch_wrong_sender.load(r),
      ", bad-mac ", w.punch_bad_mac.load(r), ", replayed ", w.punch_replayed.load(r), ")");
}

// serve_loop runs the engine's conductor here until SIGINT/SIGTERM, with
// the once-a-second stats line and counters of its one session.
int serve_loop(engine::Engine& eng, engine::Engine::Serve& s, bool quiet, const std::string& counters_dir) {
  control::ServeControl& ctl = *s.control;
  const control::ServeControlConfig& cc = s.spec.control;
  const dataplane::ServeStats& ws = s.link->stats;
  std::printf("serve: %s on %s%s%s, session %u%s\n", s.spec.ring.c_str(), dataplane::to_string(ctl.listening()).c_str(),
              s.spec.worker.multicast ? absl::StrCat(", multicast ", dataplane::to_string(*s.spec.worker.multicast)).c_str() : "",
              s.spec.unicast ? absl::StrCat(", unicast ", dataplane::to_string(dataplane::Endpoint{
                                   s.udp_local.ip != 0 ? s.udp_local.ip : s.spec.iface_ip, s.udp_local.port})).c_str()
                             : "",
              s.spec.worker.session, cc.psk ? ", authenticated (PSK)" : "");
  std::fflush(stdout);
  auto counters = telemetry::CountersFile::create(counters_dir, "serve", s.spec.ring,
                                                  dataplane::to_string(ctl.listening()));
  if (!counters.ok()) return fail("serve", counters.status());
  const engine::PortInfo port = s.port->info();
  if (!quiet) std::printf("serve: worker on %s\n", port.worker.c_str());

  uint64_t next_report = now_ns() + 1'000'000'000u;
  uint64_t last_records = 0, last_frames = 0;
  std::string last_refusals = refusals(ctl.stats(), ws);
  while (!stop_requested()) {
    eng.run_once(100'000'000);
    const uint64_t now = now_ns();
    if (now < next_report) continue;
    const auto& cs = ctl.stats();
    const uint64_t records = ws.records.load() + cs.tcp_records;
    const uint64_t frames = ws.frames.load();
    const uint64_t drops = s.port->port_drops();
    uint64_t slowest = 0;
    for (const control::MirrorView& m : ctl.mirrors()) slowest = std::max(slowest, m.lag);
    if (!quiet) {
      std::printf(
          "serve: %llu rec/s, %llu frames/s, next seq %llu, mirrors %llu (unicast %llu), slowest lag %llu, "
          "NAKs %llu (%llu records by TCP, %llu ranges by UDP), GAPs %llu, lapped %llu, refused TCP %llu, "
          "punches refused %llu%s\n",
          static_cast<unsigned long long>(records - last_records),
          static_cast<unsigned long long>(frames - last_frames),
          static_cast<unsigned long long>(ws.next_to_send.load()),
          static_cast<unsigned long long>(cs.mirrors),
          static_cast<unsigned long long>(ws.unicast_mirrors.load()),
          static_cast<unsigned long long>(slowest),
          static_cast<unsigned long long>(cs.naks), static_cast<unsigned long long>(cs.nak_records),
          static_cast<unsigned long long>(cs.udp_repairs), static_cast<unsigned long long>(cs.gaps),
          static_cast<unsigned long long>(ws.lapped.load()), static_cast<unsigned long long>(cs.refused()),
          static_cast<unsigned long long>(ws.punches_refused()),
          port.path == "kernel" ? "" : absl::StrCat(", port drops ", drops).c_str());
      std::fflush(stdout);
    }
    publish_counters(*counters, ctl, ws, drops);
    // The breakdown, whenever it changed: what strangers sent, by reason.
    if (std::string now_refusals = refusals(cs, ws); now_refusals != last_refusals) {
      std::printf("serve: %s\n", now_refusals.c_str());
      std::fflush(stdout);
      last_refusals = std::move(now_refusals);
    }
    last_records = records;
    last_frames = frames;
    next_report = now + 1'000'000'000u;
  }
  const std::string final_refusals = refusals(ctl.stats(), ws);
  engine::PortHandle* port_handle = s.port;  // the engine's, alive after its sessions
  eng.stop_all();                            // frees s
  if (const std::string summary = port_handle->info().summary; !summary.empty()) {
    std::printf("serve: port: %s\n", summary.c_str());
  }
  std::printf("serve: %s\n", final_refusals.c_str());
  std::printf("serve: stopped\n");
  return 0;
}

}  // namespace

int cmd_serve(int argc, char** argv, int first) {
  auto args = Args::parse(kServe, argc, argv, first);
  if (!args.ok()) return fail("serve", args.status());
  if (args->help()) {
    std::fputs(usage(kServe).c_str(), stdout);
    return 0;
  }
  if (!args->has("listen")) {
    return fail("serve", absl::InvalidArgumentError("--listen ADDR:PORT is required"));
  }
  auto listen = dataplane::parse_endpoint(args->str("listen"));
  if (!listen.ok()) return fail("serve", listen.status());
  auto ttl = args->count("ttl", 1);
  auto mtu = args->count("mtu", 1472);
  auto udp_port = args->count("udp", 0);
  auto dup = args->count("dup", 1);
  auto pace = args->count("pace-us", 50);
  auto heartbeat = args->count("heartbeat-us", 1000);
  auto repair_max = args->count("repair-udp-max", 1024);
  auto heartbeat_max = args->count("heartbeat-max-us", 100000);
  auto max_conns = args->count("max-connections", 256);
  auto slow_pct = args->count("slow-mirror-pct", 50);
  auto handshake = args->duration_ns("handshake-timeout", 5'000'000'000);
  auto peer_timeout = args->duration_ns("peer-timeout", 5'000'000'000);
  auto stall_timeout = args->duration_ns("stall-timeout", 10'000'000'000);
  auto idle_mode = parse_idle(args->str("idle", "backoff"));
  auto faults = parse_faults(*args);
  for (const auto* s : {&ttl, &mtu, &udp_port, &dup, &pace, &heartbeat, &repair_max, &heartbeat_max,
                        &max_conns, &slow_pct, &handshake, &peer_timeout, &stall_timeout}) {
    if (!s->ok()) return fail("serve", s->status());
  }
  if (*max_conns == 0 || *max_conns > 4096) {
    return fail("serve", absl::InvalidArgumentError("--max-connections: between 1 and 4096"));
  }
  if (*slow_pct == 0 || *slow_pct > 100) {
    return fail("serve", absl::InvalidArgumentError("--slow-mirror-pct: between 1 and 100"));
  }
  if (*handshake < 100'000'000 || *peer_timeout < 500'000'000 || *stall_timeout < 500'000'000) {
    return fail("serve", absl::InvalidArgumentError(
                             "--handshake-timeout must be at least 100ms, --peer-timeout and --stall-timeout at least 500ms"));
  }
  if (*heartbeat_max < *heartbeat) {
    return fail("serve", absl::InvalidArgumentError("--heartbeat-max-us must be at least --heartbeat-us"));
  }
  if (!faults.ok()) return fail("serve", faults.status());
  if (!idle_mode.ok()) return fail("serve", idle_mode.status());
  if (*ttl == 0 || *ttl > 255 || *mtu < 64 || *mtu > dataplane::kMaxDatagram || *udp_port > 65535 ||
      *dup == 0 || *dup > 16 || *repair_max > 65536) {
    return fail("serve", absl::InvalidArgumentError(
                             "need 1 <= --ttl <= 255, 64 <= --mtu <= 65507, --udp a port, "
                             "1 <= --dup <= 16, --repair-udp-max <= 65536"));
  }
  const std::string from = args->str("from", "latest");
  if (from != "latest" && from != "oldest") {
    return fail("serve", absl::InvalidArgumentError("--from: latest or oldest"));
  }
  std::optional<dataplane::Endpoint> group;
  if (args->has("multicast")) {
    auto g = dataplane::parse_endpoint(args->str("multicast"));
    if (!g.ok()) return fail("serve", g.status());
    if ((g->ip >> 28) != 0xE) {
      return fail("serve", absl::InvalidArgumentError(absl::StrCat(
                               "--multicast ", args->str("multicast"),
                               " is not a multicast group (224.0.0.0/4; labs use 239.255.0.0/16)")));
    }
    group = *g;
  }
  auto iface = iface_address(*args, listen->ip);
  if (!iface.ok()) return fail("serve", iface.status());
  const uint32_t iface_ip = *iface;
  if (group && iface_ip == 0) {
    return fail("serve", absl::InvalidArgumentError(
                             "multicast needs an interface: give --iface, or --listen on an address"));
  }
  std::optional<control::Psk> psk;
  if (args->has("psk-file")) {
    auto k = control::load_psk(args->str("psk-file"));
    if (!k.ok()) return fail("serve", k.status());
    psk = std::move(*k);
  }
  install_stop_handlers();

  auto file = ring::RingFile::open(args->positionals()[0]);
  if (!file.ok()) return fail("serve", file.status());
  const std::string ring_path = file->path();  // the engine attaches its readers to it

  uint8_t session = 0;
  while (session == 0) {
    if (getrandom(&session, 1, 0) != 1) session = static_cast<uint8_t>(getpid() | 1);
  }
  engine::ServeSpec spec;
  spec.name = "serve";
  spec.port = "port0";
  spec.ring = ring_path;
  spec.from_oldest = from == "oldest";
  spec.udp_port = static_cast<uint16_t>(*udp_port);  // 0: one the port picks (and holds)
  spec.unicast = args->has("udp");
  spec.iface_ip = iface_ip;
  spec.worker.session = session;
  spec.worker.mtu = static_cast<uint16_t>(*mtu);
  spec.worker.pace_ns = *pace * 1000;
  spec.worker.heartbeat_ns = *heartbeat * 1000;
  spec.worker.heartbeat_max_ns = *heartbeat_max * 1000;
  spec.worker.dup = static_cast<uint32_t>(*dup);
  spec.worker.multicast = group;
  spec.worker.tx_faults = *faults;
  control::ServeControlConfig& cc = spec.control;
  cc.listen = *listen;
  cc.ttl = static_cast<uint8_t>(*ttl);
  cc.udp_repair_max = static_cast<uint32_t>(*repair_max);
  cc.max_connections = static_cast<uint32_t>(*max_conns);
  cc.handshake_timeout_ns = *handshake;
  cc.peer_timeout_ns = *peer_timeout;
  cc.stall_timeout_ns = *stall_timeout;
  cc.slow_mirror_share = static_cast<double>(*slow_pct) / 100.0;
  if (psk) {
    // One salt per serve process: every datagram of this incarnation is
    // MACed under the key derived from it (multicast has one datagram for
    // every mirror); each mirror learns the salt in the handshake.
    cc.salt = control::random_nonce();
    spec.worker.data_key = control::data_key(*psk, cc.salt);
    cc.psk = std::move(psk);
  }

  auto backend = start_backend(*args);
  if (!backend.ok()) return fail("serve", backend.status());
  engine::PortSpec ps;
  ps.name = spec.port;
  ps.ttl = static_cast<uint8_t>(*ttl);
  ps.mtu = static_cast<uint16_t>(*mtu);
  ps.idle = *idle_mode;
  if (backend->dpdk) {
    // The port holds each binding's UDP port in the kernel too
    // (DpdkPort::prepare), so a second serve on it, kernel or DPDK, fails
    // at start-up.
    ps.backend = engine::PortSpec::Backend::kDpdk;
    ps.ip = backend->dpdk_ip != 0 ? backend->dpdk_ip : iface_ip;
    ps.neighbors = backend->neighbors;
    ps.exception_port = backend->exception_port;
  } else {
    ps.ip = iface_ip;  // multicast leaves here
    spec.bind_ip = listen->ip;
  }
  auto port = engine::open_port(ps);
  if (!port.ok()) return fail("serve", port.status());
  engine::Engine eng([](const std::string&, const std::string& line) {
    std::printf("serve: %s\n", line.c_str());  // refusals and warnings: printed even with --quiet
    std::fflush(stdout);
  });
  if (absl::Status st = eng.add_port(ps.name, std::move(*port)); !st.ok()) return fail("serve", st);
  auto s = eng.add_serve(std::move(spec));
  if (!s.ok()) return fail("serve", s.status());
  return serve_loop(eng, **s, args->has("quiet"), args->str("counters-dir", "/dev/shm"));
}


}  // namespace ringfire::cli
