// engine.h — one engine per process: named ports (each with the worker
// that owns it) and the sessions placed on them — serves and mirrors of any
// number of rings — all driven by one conductor thread, the caller's, which
// owns every TCP listener and connection (each session's control state
// machine keeps its sockets in an epoll of its own; the conductor waits on
// all of those at once, through one epoll that holds them). Sessions are
// added and removed while the others stream. The composition layer: it
// assembles a session from its spec (readers, the binding, the control
// side) and is the only code that knows both control/ and the ports.
// Conductor thread only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/mirror_control.h"
#include "control/serve_control.h"
#include "engine/conductor_agent.h"
#include "engine/port_handle.h"

namespace ringfire::engine {

// ServeSpec: one served ring.
struct ServeSpec {
  std::string name;             // unique in the engine (ctl, logs)
  std::string port;             // the port it sends from
  std::string ring;             // a ring's path
  bool from_oldest = false;     // the UDP stream starts at the oldest record (else the newest)
  uint32_t bind_ip = 0;         // kernel backend: the address its socket binds (0: any)
  uint16_t udp_port = 0;        // PUNCHes arrive here (0: one the port picks)
  bool unicast = false;         // announce the UDP port for unicast mirrors
  uint32_t iface_ip = 0;        // where multicast leaves, when the binding has no address
  dataplane::ServeConfig worker;
  bool pace_given = false;      // worker.pace_ns was asked for (else its port kind's kDefaultPaceNs)
  control::ServeControlConfig control;  // listen and the rest; ring, ports and data_ip are filled in
  std::string owner;            // an agent's session (a mux node's channel): "" for the config's own
};

// MirrorSpec: one mirrored ring.
struct MirrorSpec {
  std::string name;
  std::string port;
  control::MirrorOptions options;
  std::string owner;  // as ServeSpec::owner
};

class Engine {
 public:
  // log receives each session's events (connections, refusals, warnings),
  // prefixed by nothing: `session` names where it came from.
  using Log = std::function<void(const std::string& session, const std::string& line)>;

  explicit Engine(Log log);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // add_port takes a port under its name (the name must be new).
  absl::Status add_port(const std::string& name, std::unique_ptr<PortHandle> port);

  struct Serve {
    ServeSpec spec;
    PortHandle* port = nullptr;
    dataplane::ServeLink* link = nullptr;
    net::Endpoint udp_local;
    uint64_t pace_ns = 0;  // the pacing interval in effect (the spec's, or the port kind's)
    std::unique_ptr<control::ServeControl> control;
    uint64_t poll_at = 0;  // run_once: when its control is polled next unless its descriptor is ready first
    uint64_t polled_ns = 0;  // ... and when it was last
  };
  struct Mirror {
    MirrorSpec spec;
    PortHandle* port = nullptr;
    std::unique_ptr<control::MirrorControl> control;
    uint64_t poll_at = 0;  // as Serve::poll_at
    uint64_t polled_ns = 0;
  };

  // add_serve places a serve session on its port and opens its listener;
  // an error (a port in use, a ring that is not there) says what to change.
  // `mapped`: the ring as this process already maps it (a node's egress
  // ring, RingFile::share of its writer's), so it is not mapped again.
  absl::StatusOr<Serve*> add_serve(ServeSpec spec, std::optional<ring::RingFile> mapped = std::nullopt);
  // add_mirror starts a mirror session (it connects from the next run_once).
  absl::StatusOr<Mirror*> add_mirror(MirrorSpec spec);
  // remove ends a session by name (its port keeps the others streaming).
  absl::Status remove(const std::string& name);

  // watch adds a descriptor of the caller's (a control socket) to what
  // run_once waits on: readable, it returns early. watch and unwatch are
  // one epoll_ctl each: safe from any thread.
  absl::Status watch(int fd);
  void unwatch(int fd);
  // ready: `fd` (watched) was readable at the last look, which ends every
  // run_once — an agent reads only those (level-triggered: one it leaves
  // unread is ready again at the next look). Conductor thread.
  bool ready(int fd) const;

  // add_agent: conductor work beside the sessions (a mux node), run by
  // every run_once after the sessions' turn; remove_agent before it goes.
  void add_agent(ConductorAgent* agent);
  void remove_agent(ConductorAgent* agent);

  // run_once does what every session and agent has ready or due, waits at
  // most `max_wait_ns` (or until an agent's deadline) for more, and returns.
  // A session's control is polled when its descriptor was ready at the
  // last wait, when its own deadline came, when its last poll left more to
  // do, and at least every kPollEveryNs (its timeouts are judged there;
  // that one rides on a wake-up for something else within half of it).
  void run_once(uint64_t max_wait_ns);
  static constexpr uint64_t kPollEveryNs = 100'000'000;
  // stop_all ends every session and stops every port's worker.
  void stop_all();

  const std::vector<std::unique_ptr<Serve>>& serves() const { return serves_; }
  const std::vector<std::unique_ptr<Mirror>>& mirrors() const { return mirrors_; }
  std::vector<PortInfo> ports() const;
  PortHandle* port_named(const std::string& name) const;

 private:
  bool name_taken(const std::string& name) const;
  Log log_;
  int epoll_fd_ = -1;
  std::vector<std::pair<std::string, std::unique_ptr<PortHandle>>> ports_;
  std::vector<std::unique_ptr<Serve>> serves_;
  std::vector<std::unique_ptr<Mirror>> mirrors_;
  std::vector<ConductorAgent*> agents_;
  std::vector<int> ready_fds_;  // what the last wait reported (sessions' wait_fd among them)
};

}  // namespace ringfire::engine
