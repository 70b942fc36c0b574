// port_handle.h — what the conductor holds for each port: a port and the
// worker that owns it, behind one interface so the conductor need not know
// the backend (the packet path below it is a template, with no virtual
// calls). Sessions are placed on the port through it: a serve (its ring
// reader, config and binding) or a mirror (MirrorPlane: the mirror control
// asks for its data-plane half once the handshake settled the path). The
// binding's fallible half (a socket bound, a UDP port held) runs here, on
// the conductor, so a port in use is an error the caller sees at once; the
// worker only installs it. Conductor thread only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "control/mirror_control.h"
#include "dataplane/port_worker.h"
#include "dataplane/serve_session.h"
#include "ring/idle.h"
#include "ring/raw_reader.h"

namespace ringfire::engine {

// ServeRequest: a serve session to place on a port.
struct ServeRequest {
  std::optional<ring::RawReader> reader;
  std::optional<ring::RawReader> repair_reader;  // none: NAKs answered by TCP only
  dataplane::ServeConfig config;
  bool pace_given = false;   // config.pace_ns was asked for; else the port kind's (kDefaultPaceNs)
  dataplane::BindSpec bind;  // where PUNCHes arrive and DATA leaves from
};

// ServePlaced: what the conductor learns of a placed serve session.
struct ServePlaced {
  dataplane::ServeLink* link = nullptr;  // valid until close_serve
  net::Endpoint local;             // its binding's address and UDP port
  uint64_t pace_ns = 0;                  // the pacing interval in effect
};

// PortInfo: one port, for an operator (ctl, stats lines, counters).
struct PortInfo {
  std::string name;
  std::string path;       // the active path: "kernel", "dpdk net_af_xdp", ...
  std::string worker;     // where its worker runs: "lcore 1", "a thread"
  uint64_t drops = 0;
  uint64_t sessions = 0;
  uint64_t tasks = 0;      // application tasks on its worker (worker_task.h)
  uint64_t datagrams = 0;
  uint64_t unrouted = 0;  // datagrams on a binding no session holds
  uint64_t busy_ns = 0;   // the worker's time in iterations that did work (a queued port: its workers' sum)
  std::vector<uint64_t> queue_busy_ns;  // a queued port's, one a queue's worker (empty: one worker, busy_ns)
  uint64_t iterations = 0;
  std::string summary;    // the port's own counters, when it has them
};

class PortHandle : public control::MirrorPlane {
 public:
  // open_serve builds a serve session and hands it to the worker.
  virtual absl::StatusOr<ServePlaced> open_serve(ServeRequest r) = 0;
  // close_serve takes it off the worker; the link is gone after it.
  virtual void close_serve(dataplane::ServeLink* link) = 0;
  virtual PortInfo info() const = 0;
  // add_task puts an application task on the port's worker (stepped on its
  // thread every iteration, worker_task.h); the caller keeps it alive until
  // remove_task returns, after which the worker never touches it again (nor
  // after stop).
  virtual absl::Status add_task(dataplane::WorkerTask* task) = 0;
  virtual void remove_task(dataplane::WorkerTask* task) = 0;
  // stop ends the worker (every session still on it is freed).
  virtual void stop() = 0;
};

}  // namespace ringfire::engine
