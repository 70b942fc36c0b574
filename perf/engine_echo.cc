// engine_echo.cc — the round trip with one process per host and the echo
// on the worker itself: `ringfire run`'s daemon over CONFIG, with a ping or
// a pong (perf/echo_roles.h) placed as a task on the worker of port PORT
// (dataplane/worker_task.h). A record then goes from the wire into the
// mirrored ring, through the task and out of the served ring in one
// iteration of one thread: no hand-off between processes, no scheduler
// switch, on either host.
//
//   engine_echo CONFIG PORT pong IN OUT
//   engine_echo CONFIG PORT ping OUT IN (--rate R | --closed) --count N [--json FILE] [--drain-ms MS]
//
// The task goes on once every mirror of CONFIG streams and every serve has
// a mirror streaming from it (ping) or its rings are there (pong). A ping
// ends the daemon when it is done, with echo's report and exit status; a
// pong runs until SIGTERM.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/daemon.h"
#include "dataplane/worker_task.h"
#include "engine/engine.h"
#include "perf/echo_roles.h"
#include "ring/ring_file.h"

namespace ringfire::perf {
namespace {

// The tasks. `done` is the ping's word to the conductor: raised (release)
// once finished; the conductor's acquire load pairs with it, and the task's
// removal (a command answered by the worker) orders everything after.
class PongTask final : public dataplane::WorkerTask {
 public:
  explicit PongTask(RingPair r) : pong_(std::move(r)) {}
  bool step(uint64_t) override { return pong_.step(); }

 private:
  Pong pong_;
};

class PingTask final : public dataplane::WorkerTask {
 public:
  PingTask(RingPair r, uint64_t rate, uint64_t count, bool closed, uint64_t drain_ns)
      : ping_(std::move(r), rate, count, closed), drain_ns_(drain_ns) {}
  bool step(uint64_t) override {
    if (done_.load(std::memory_order_relaxed)) return false;  // its own store: no pairing needed
    const bool busy = ping_.step();
    if (ping_.finished(ping_.last_now(), drain_ns_)) done_.store(true, std::memory_order_release);
    return busy;
  }
  bool done() const { return done_.load(std::memory_order_acquire); }  // pairs with step()'s release
  const Ping& ping() const { return ping_; }

 private:
  Ping ping_;
  uint64_t drain_ns_;
  std::atomic<bool> done_{false};
};

bool connected(const engine::Engine& eng) {
  for (const auto& m : eng.mirrors()) {
    if (m->control->state() != control::MirrorControl::State::kStreaming) return false;
  }
  for (const auto& s : eng.serves()) {
    if (s->control->stats().mirrors == 0) return false;
  }
  return true;
}

int run(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: engine_echo CONFIG PORT pong IN OUT\n"
                 "       engine_echo CONFIG PORT ping OUT IN (--rate R | --closed) --count N [--json FILE] [--drain-ms MS]\n");
    return 2;
  }
  const std::string config = argv[1], port_name = argv[2], role = argv[3], a = argv[4], b = argv[5];
  if (role != "ping" && role != "pong") {
    std::fprintf(stderr, "engine_echo: the role is ping or pong, not %s\n", role.c_str());
    return 2;
  }
  PingOptions o;
  if (!parse_ping_options(argc, argv, 6, /*idle_ok=*/false, "engine_echo", &o)) return 2;

  engine::PortHandle* port = nullptr;
  std::unique_ptr<PongTask> pong;
  std::unique_ptr<PingTask> ping;
  int status = 0;
  cli::DaemonHooks hooks;
  hooks.started = [&](engine::Engine& eng) -> absl::Status {
    port = eng.port_named(port_name);
    if (port == nullptr) return absl::NotFoundError(absl::StrCat("CONFIG has no port named ", port_name));
    return absl::OkStatus();
  };
  hooks.tick = [&](engine::Engine& eng, uint64_t) {
    if (!pong && !ping) {
      if (role == "ping" ? !connected(eng) : (access(ring::ring_path(a).c_str(), F_OK) != 0 ||
                                                    access(ring::ring_path(b).c_str(), F_OK) != 0)) {
        return true;  // not yet
      }
      // The pong reads its mirror's ring from the oldest record: the ping
      // may start before this tick placed the pong (it waits only for the
      // connections), and its first records are then echoed late, not lost.
      auto rings = role == "ping" ? open_pair(a, b, "ping") : open_pair(b, a, "pong", ring::StartPosition::oldest());
      absl::Status st = rings.status();
      if (st.ok()) {
        dataplane::WorkerTask* task;
        if (role == "ping") {
          ping = std::make_unique<PingTask>(std::move(*rings), o.rate, o.count, o.closed, o.drain_ms * 1'000'000);
          task = ping.get();
        } else {
          pong = std::make_unique<PongTask>(std::move(*rings));
          task = pong.get();
        }
        st = port->add_task(task);
      }
      if (!st.ok()) {
        std::fprintf(stderr, "engine_echo: %s\n", std::string(st.message()).c_str());
        status = 2;
        ping.reset();
        pong.reset();
        return false;
      }
      std::printf("engine_echo: %s on port %s's worker\n", role.c_str(), port_name.c_str());
      std::fflush(stdout);
      return true;
    }
    if (ping && ping->done()) {
      port->remove_task(ping.get());
      status = ping->ping().report(o.json, ", \"on_worker\": true");
      return false;
    }
    return true;
  };
  hooks.stopping = [&](engine::Engine&) {
    if (ping) port->remove_task(ping.get());
    if (pong) port->remove_task(pong.get());
  };
  const int rc = cli::run_daemon(config, false, hooks);
  return rc != 0 ? rc : status;
}

}  // namespace
}  // namespace ringfire::perf

int main(int argc, char** argv) { return ringfire::perf::run(argc, argv); }
