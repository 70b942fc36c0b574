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
#include "cli/conductor_loop.h"
#include "cli/dpdk_options.h"
#include "cli/metrics_server.h"
#include "cli/session_report.h"
#include "cli/session_setup.h"
#include "control/mirror_control.h"
#include "dataplane/kernel_udp.h"
#include "engine/engine.h"
#include "engine/ports.h"
#include "telemetry/counters_file.h"

namespace ringfire::cli {
namespace {

const CommandSpec kMirror = {
    "mirror", "HOST:PORT RING", 2, 2,
    "Mirror the ring served at HOST:PORT into RING (created sparse from the source's\n"
    "geometry, or resumed where it ends). Reconnects and resumes if the source goes away.",
    with_backend_options(
        [] {
          std::vector<OptionSpec> o = mirror_session_options();
          o.push_back({"iface", "IF", "interface to join the multicast group on"});
          for (OptionSpec& x : shorthand_options()) o.push_back(std::move(x));
          return o;
        }(),
        "dpdk: the port's IPv4 address (default: the TCP connection's)")};

// mirror_loop runs the engine's conductor here until SIGINT/SIGTERM, or
// the source goes away with --once, with the once-a-second stats line and
// counters of its one session. A first failure (the source unreachable, a
// refusal, a mismatch) is an error: exit 2 with the reason.
int mirror_loop(engine::Engine& eng, engine::Engine::Mirror& m, bool quiet, bool json, const std::string& counters_dir,
                const std::string& metrics_at) {
  using State = control::MirrorControl::State;
  auto report = MirrorReport::start(m, "mirror", quiet, counters_dir, "");
  if (!report.ok()) return fail("mirror", report.status());
  (*report)->set_json(json);
  engine::PortHandle* port = m.port;  // the engine's, alive after its sessions
  std::unique_ptr<MetricsServer> metrics;  // closed on every return (its fd leaves the epoll with it)
  if (!metrics_at.empty()) {
    auto at = metrics_address(metrics_at);
    auto ms = at.ok() ? start_metrics(eng, *at, "mirror") : at.status();
    if (!ms.ok()) return fail("mirror", ms.status());
    metrics = std::move(*ms);
  }
  bool failed = false;
  conductor_loop(eng, 100'000'000, metrics.get(), [&] { return engine_metrics(eng); }, [&](uint64_t now) {
    (*report)->tick(now);
    const State state = m.control->state();
    failed = state == State::kFailed;
    return !failed && state != State::kStopped;  // stopped: --once, and the source went away
  });
  if (failed) {
    const absl::Status why = m.control->failure();  // stop_all frees the session
    report->reset();
    eng.stop_all();
    return fail("mirror", why);
  }
  (*report)->finish();
  report->reset();
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
  const auto counters = counters_dir(*args);  // checked before anything is made
  if (!counters.ok()) return fail("mirror", counters.status());
  if (args->has("metrics")) {  // checked before anything starts
    if (auto e = metrics_address(args->str("metrics")); !e.ok()) return fail("mirror", e.status());
  }
  auto parsed = parse_mirror_session(*args, args->positionals()[0], args->positionals()[1]);
  if (!parsed.ok()) return fail("mirror", parsed.status());
  const control::MirrorOptions o = std::move(*parsed);
  auto iface_ip = iface_address(*args, 0);
  if (!iface_ip.ok()) return fail("mirror", iface_ip.status());
  auto idle_mode = parse_idle(args->str("idle", "backoff"));
  if (!idle_mode.ok()) return fail("mirror", idle_mode.status());
  auto backend = start_backend(*args);
  if (!backend.ok()) return fail("mirror", backend.status());
  install_stop_handlers();

  // The port opens with the first session's path: its address is the TCP
  // connection's unless given (--dpdk-ip; --iface for the kernel's joins).
  engine::PortSpec ps;
  ps.name = "port0";
  ps.idle = *idle_mode;
  ps.mtu = 1472;  // at least: a binding takes the source's MTU, and a DPDK port opens with it
  if (backend->dpdk) {
    ps.backend = engine::PortSpec::Backend::kDpdk;
    ps.dpdk_port_id = 0;  // the EAL's (start_backend made it)
    ps.ip = backend->dpdk_ip;
    ps.neighbors = backend->neighbors;
    ps.exception_port = backend->exception_port;
  } else {
    ps.ip = *iface_ip;
  }
  // A failure is said once, on stderr as the exit's reason (mirror_loop),
  // not also here: `session` is set once the mirror is added, and the
  // control logs on this (the conductor's) thread.
  const engine::Engine::Mirror* session = nullptr;
  engine::Engine eng([&session](const std::string&, const std::string& line) {
    if (session != nullptr && session->control->state() == control::MirrorControl::State::kFailed) return;
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
  session = *added;
  return mirror_loop(eng, **added, args->has("quiet"), args->has("json"), *counters,
                     args->str("metrics", ""));
}

}  // namespace ringfire::cli
