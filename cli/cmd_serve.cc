// cmd_serve.cc — `ringfire serve`: serve a ring to mirrors over UDP
// multicast, UDP unicast and/or TCP, on the kernel network stack.
#include <sys/random.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/dpdk_options.h"
#include "control/serve_control.h"
#include "dataplane/kernel_udp.h"
#include "dataplane/tsc_clock.h"
#include "dataplane/worker_runner.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include "dataplane/dpdk_port.h"
#endif

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
        {"from", "WHERE", "where the UDP stream starts: latest (default) or oldest"},
        {"idle", "MODE", "worker idle strategy: spin, yield or backoff (default backoff)"},
        {"quiet", nullptr, "no per-second stats lines"},
    }), "dpdk: the port's IPv4 address (default: --iface's)")};

// ServeRun is everything serve_with needs besides the ring and the port.
struct ServeRun {
  std::string ring_path;
  dataplane::Endpoint listen;
  std::optional<dataplane::Endpoint> group;
  bool unicast = false;
  uint8_t ttl = 1;
  uint8_t session = 1;
  ring::IdleMode idle = ring::IdleMode::kBackoff;
  bool quiet = false;
  uint32_t udp_repair_max = 1024;
  dataplane::ServeConfig worker;
};

// port_drops: ", port drops N" for a port that counts its losses (DPDK).
template <typename Port>
std::string port_drops(const Port& port) {
  if constexpr (requires { port.drops(); }) {
    return absl::StrCat(", port drops ", port.drops());
  } else {
    return "";
  }
}

// serve_with runs the worker on its own thread and the control loop here,
// until SIGINT/SIGTERM; the backend is chosen once, by the caller.
template <dataplane::PacketPort Port>
int serve_with(ring::RawReader reader, Port port, const ServeRun& run) {
  const dataplane::Endpoint udp_local = port.local();
  // The worker's second reader, for NAK repair through the data plane.
  std::optional<ring::RawReader> repair_reader;
  if (run.udp_repair_max != 0) {
    auto file = ring::RingFile::open(run.ring_path);
    if (!file.ok()) return fail("serve", file.status());
    auto r = ring::RawReader::attach(std::move(*file), ring::StartPosition::at(0));
    if (!r.ok()) return fail("serve", r.status());
    repair_reader.emplace(std::move(*r));
  }
  dataplane::ServeWorker<Port> worker(std::move(reader), std::move(port), run.worker, std::move(repair_reader));

  control::ServeControlConfig cc;
  cc.listen = run.listen;
  cc.ring = run.ring_path;
  cc.multicast = run.group;
  cc.unicast_port = run.unicast ? udp_local.port : 0;
  cc.udp_repair_max = run.udp_repair_max;
  cc.data_ip = udp_local.ip;
  cc.mtu = run.worker.mtu;
  cc.ttl = run.ttl;
  cc.session = run.session;
  auto control = control::ServeControl::start(cc, &worker.link());
  if (!control.ok()) return fail("serve", control.status());

  std::printf("serve: %s on %s%s%s, session %u\n", run.ring_path.c_str(),
              dataplane::to_string((*control)->listening()).c_str(),
              run.group ? absl::StrCat(", multicast ", dataplane::to_string(*run.group)).c_str() : "",
              cc.unicast_port ? absl::StrCat(", unicast ", dataplane::to_string(udp_local)).c_str() : "",
              run.session);
  std::fflush(stdout);

  std::atomic<bool> stop_worker{false};
  dataplane::WorkerRunner runner;
  runner.start([&] {
    ring::IdleStrategy idle(run.idle);
    dataplane::TscClock clock;  // pacing and heartbeat deadlines from the TSC
    while (!stop_worker.load(std::memory_order_relaxed)) {
      if (worker.step(clock.now_ns())) {
        idle.reset();
      } else {
        idle.idle();
      }
    }
  });
  if (!run.quiet) std::printf("serve: worker on %s\n", runner.where().c_str());

  const bool quiet = run.quiet;
  uint64_t next_report = now_ns() + 1'000'000'000u;
  uint64_t last_records = 0, last_frames = 0;
  while (!stop_requested()) {
    const bool more = (*control)->poll((*control)->has_tcp_mirrors() ? 50 : 100'000);
    (void)more;
    const uint64_t now = now_ns();
    if (now >= next_report) {
      const auto& ws = worker.link().stats;
      const auto& cs = (*control)->stats();
      const uint64_t records = ws.records.load() + cs.tcp_records;
      const uint64_t frames = ws.frames.load();
      if (!quiet) {
        std::printf(
            "serve: %llu rec/s, %llu frames/s, next seq %llu, mirrors %llu (unicast %llu), "
            "NAKs %llu (%llu records, %llu by UDP), GAPs %llu, lapped %llu, punches refused %llu%s\n",
            static_cast<unsigned long long>(records - last_records),
            static_cast<unsigned long long>(frames - last_frames),
            static_cast<unsigned long long>(ws.next_to_send.load()),
            static_cast<unsigned long long>(cs.mirrors),
            static_cast<unsigned long long>(ws.unicast_mirrors.load()),
            static_cast<unsigned long long>(cs.naks), static_cast<unsigned long long>(cs.nak_records),
            static_cast<unsigned long long>(cs.udp_repairs), static_cast<unsigned long long>(cs.gaps), static_cast<unsigned long long>(ws.lapped.load()),
            static_cast<unsigned long long>(ws.punches_refused.load()), port_drops(worker.port()).c_str());
        std::fflush(stdout);
      }
      last_records = records;
      last_frames = frames;
      next_report = now + 1'000'000'000u;
    }
  }
  stop_worker.store(true);
  runner.join();
  if constexpr (requires(const Port& p) { p.summary(); }) {
    std::printf("serve: port: %s\n", worker.port().summary().c_str());
  }
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
  auto idle_mode = parse_idle(args->str("idle", "backoff"));
  auto faults = parse_faults(*args);
  for (const auto* s : {&ttl, &mtu, &udp_port, &dup, &pace, &heartbeat, &repair_max}) {
    if (!s->ok()) return fail("serve", s->status());
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
  install_stop_handlers();

  auto file = ring::RingFile::open(args->positionals()[0]);
  if (!file.ok()) return fail("serve", file.status());
  const std::string ring_path = file->path();
  auto reader = ring::RawReader::attach(
      std::move(*file), from == "oldest" ? ring::StartPosition::oldest() : ring::StartPosition::latest());
  if (!reader.ok()) return fail("serve", reader.status());

  uint8_t session = 0;
  while (session == 0) {
    if (getrandom(&session, 1, 0) != 1) session = static_cast<uint8_t>(getpid() | 1);
  }
  ServeRun run;
  run.ring_path = ring_path;
  run.listen = *listen;
  run.group = group;
  run.unicast = args->has("udp");
  run.ttl = static_cast<uint8_t>(*ttl);
  run.session = session;
  run.idle = *idle_mode;
  run.quiet = args->has("quiet");
  run.worker.session = session;
  run.worker.mtu = static_cast<uint16_t>(*mtu);
  run.worker.pace_ns = *pace * 1000;
  run.worker.heartbeat_ns = *heartbeat * 1000;
  run.worker.dup = static_cast<uint32_t>(*dup);
  run.worker.multicast = group;
  run.worker.tx_faults = *faults;
  run.udp_repair_max = static_cast<uint32_t>(*repair_max);

  auto backend = start_backend(*args);
  if (!backend.ok()) return fail("serve", backend.status());
  if (backend->dpdk) {
#if RINGFIRE_HAVE_DPDK
    dataplane::DpdkPortOptions po;
    po.ip = backend->dpdk_ip != 0 ? backend->dpdk_ip : iface_ip;
    po.udp_port = static_cast<uint16_t>(*udp_port != 0 ? *udp_port : 40000 + getpid() % 20000);
    po.ttl = static_cast<uint8_t>(*ttl);
    po.neighbors = backend->neighbors;
    po.exception_port = backend->exception_port;
    po.max_payload = static_cast<uint16_t>(*mtu);
    auto port = dataplane::DpdkPort::open(po);
    if (!port.ok()) return fail("serve", port.status());
    return serve_with(std::move(*reader), std::move(*port), run);
#endif
  }
  dataplane::UdpOptions uo;
  uo.bind = dataplane::Endpoint{listen->ip, static_cast<uint16_t>(*udp_port)};
  uo.multicast_iface = iface_ip;
  uo.ttl = static_cast<uint8_t>(*ttl);
  uo.max_datagram = 64;  // the worker receives only PUNCHes
  auto sock = dataplane::KernelUdp::open(uo);
  if (!sock.ok()) return fail("serve", sock.status());
  return serve_with(std::move(*reader), std::move(*sock), run);
}


}  // namespace ringfire::cli
