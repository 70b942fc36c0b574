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
#include "cli/conductor_loop.h"
#include "cli/dpdk_options.h"
#include "cli/metrics_server.h"
#include "cli/session_report.h"
#include "cli/session_setup.h"
#include "control/serve_control.h"
#include "dataplane/kernel_udp.h"
#include "engine/engine.h"
#include "engine/ports.h"
#include "telemetry/counters_file.h"

namespace ringfire::cli {
namespace {

const CommandSpec kServe = {
    "serve", "RING", 1, 1,
    "Serve a ring to mirrors. The TCP listener carries the handshake, NAK repair and\n"
    "TCP-mode DATA; DATA goes to a multicast group (--multicast) and/or by unicast to\n"
    "mirrors that punch --udp PORT. With neither, every mirror gets DATA over TCP.",
    with_backend_options(
        [] {
          std::vector<OptionSpec> o = serve_session_options();
          for (OptionSpec& x : shorthand_options()) o.push_back(std::move(x));
          return o;
        }(),
        "dpdk: the port's IPv4 address (default: --iface's)")};

// serve_loop runs the engine's conductor here until SIGINT/SIGTERM, with
// the once-a-second stats line and counters of its one session.
int serve_loop(engine::Engine& eng, engine::Engine::Serve& s, bool quiet, bool json, const std::string& counters_dir,
               const std::string& metrics_at) {
  auto report = ServeReport::start(s, "serve", quiet, counters_dir, "");
  if (!report.ok()) return fail("serve", report.status());
  (*report)->set_json(json);
  std::unique_ptr<MetricsServer> metrics;
  if (!metrics_at.empty()) {
    auto at = metrics_address(metrics_at);
    auto m = at.ok() ? start_metrics(eng, *at, "serve") : at.status();
    if (!m.ok()) return fail("serve", m.status());
    metrics = std::move(*m);
  }
  conductor_loop(eng, 100'000'000, metrics.get(), [&] { return engine_metrics(eng); }, [&](uint64_t now) {
    (*report)->tick(now);
    return true;
  });
  const std::string last_words = (*report)->last_words();
  engine::PortHandle* port = s.port;  // the engine's, alive after its sessions
  report->reset();
  eng.stop_all();  // frees s
  if (const std::string summary = port->info().summary; !summary.empty()) {
    std::printf("serve: port: %s\n", summary.c_str());
  }
  std::printf("serve: %s\n", last_words.c_str());
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
  auto idle_mode = parse_idle(args->str("idle", "backoff"));
  if (!idle_mode.ok()) return fail("serve", idle_mode.status());
  const auto counters = counters_dir(*args);  // checked before anything is made
  if (!counters.ok()) return fail("serve", counters.status());
  if (args->has("metrics")) {  // checked before anything starts
    if (auto e = metrics_address(args->str("metrics")); !e.ok()) return fail("serve", e.status());
  }
  auto parsed = parse_serve_session(*args, args->positionals()[0]);
  if (!parsed.ok()) return fail("serve", parsed.status());
  engine::ServeSpec spec = std::move(*parsed);
  spec.name = "serve";
  spec.port = "port0";
  install_stop_handlers();

  auto backend = start_backend(*args);
  if (!backend.ok()) return fail("serve", backend.status());
  engine::PortSpec ps;
  ps.name = spec.port;
  ps.ttl = spec.control.ttl;
  ps.mtu = spec.worker.mtu;
  ps.idle = *idle_mode;
  if (backend->dpdk) {
    // The port holds each binding's UDP port in the kernel too
    // (DpdkPort::prepare), so a second serve on it, kernel or DPDK, fails
    // at start-up.
    ps.backend = engine::PortSpec::Backend::kDpdk;
    ps.dpdk_port_id = 0;  // the EAL's (start_backend made it)
    ps.ip = backend->dpdk_ip != 0 ? backend->dpdk_ip : spec.iface_ip;
    ps.neighbors = backend->neighbors;
    ps.exception_port = backend->exception_port;
  } else {
    ps.ip = spec.iface_ip;  // multicast leaves here
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
  return serve_loop(eng, **s, args->has("quiet"), args->has("json"), *counters,
                    args->str("metrics", ""));
}


}  // namespace ringfire::cli
