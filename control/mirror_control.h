// mirror_control.h — the mirror side's control thread: connects to the
// source, sends HELLO, builds (or checks and resumes) the sparse mirror ring
// from GEOMETRY, opens the UDP path MULTICAST describes (join the group, or
// PUNCH the source's port, or none in TCP mode), then relays TCP-borne
// frames to the mirror worker and the worker's NAKs to the source. Never
// writes the ring itself.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "control/tcp_conn.h"
#include "dataplane/mirror_worker.h"

namespace ringfire::control {

// Backend is the packet I/O backend a session's worker runs on.
enum class Backend : uint8_t { kKernel, kDpdk };

struct MirrorOptions {
  Backend backend = Backend::kKernel;
  uint32_t dpdk_ip = 0;          // the DPDK port's address; 0: the TCP connection's
  std::vector<dataplane::StaticNeighbor> dpdk_neighbors;  // MACs pinned on the DPDK port
  int dpdk_exception_port = -1;  // the DPDK port's exception port (-1: none)
  dataplane::Endpoint source;
  std::string ring;              // name in `dir`, or a path
  std::string dir = "/dev/shm";
  enum class From : uint8_t { kResume, kLatest, kOldest, kSequence } from = From::kResume;
  uint64_t from_seq = 0;
  bool unicast = false;          // ask for UDP unicast (punch) instead of multicast
  bool tcp_only = false;         // ask for DATA on the TCP connection
  uint32_t iface_ip = 0;         // where to join the group; 0: the TCP connection's address
  uint64_t expected_schema = 0;  // 0: any
  int handshake_timeout_ms = 5000;
  dataplane::MirrorWorkerConfig worker;
};

class MirrorSession {
 public:
  // establish runs the handshake and returns a session whose worker is
  // ready to step. Errors name what to change; the ring is never damaged.
  static absl::StatusOr<std::unique_ptr<MirrorSession>> establish(const MirrorOptions& o);
  ~MirrorSession();

  // step is the worker thread's iteration; stats are its counters.
  bool step(uint64_t now_ns) { return worker_->step(now_ns); }
  const dataplane::MirrorWorkerStats& stats() { return worker_->link().stats; }
  // port_summary: the packet port's counters, once the worker has stopped.
  std::string port_summary() const { return worker_->port_summary(); }
  uint64_t port_drops() const { return worker_->port_drops(); }
  // poll relays for up to timeout_ms; false once the source is gone.
  bool poll(int timeout_ms);

  const std::string& description() const { return description_; }
  uint64_t first_seq() const { return first_seq_; }

 private:
  MirrorSession(TcpConn conn) : conn_(std::move(conn)) {}
  bool relay_frames();
  void send_naks();

  TcpConn conn_;
  int epoll_fd_ = -1;
  int nak_fd_ = -1;
  std::unique_ptr<dataplane::MirrorStepper> worker_;
  std::string description_;
  uint64_t first_seq_ = 0;
  bool queue_full_ = false;
};

}  // namespace ringfire::control
