// mirror_control.h — the mirror side's control thread: connects to the
// source, sends HELLO (with a challenge, and proves itself, when it has the
// pre-shared key), builds (or checks and resumes) the sparse mirror ring
// from GEOMETRY, opens the UDP path MULTICAST describes (join the group, or
// PUNCH the source's port, or none in TCP mode) and tells the worker whom
// to believe on it, then relays TCP-borne frames to the mirror worker and
// the worker's NAKs to the source. Reports its health every 100 ms (and at
// once when the worker saw an implausible datagram: the source answers
// with its position), and gives the source up when it falls silent. A
// REFUSE from the source ends the session with the source's reason. Never
// writes the ring itself.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "control/auth.h"
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
  std::optional<Psk> psk;        // authenticate (and require the source to)
  std::vector<uint32_t> accept_from;  // relays whose UDP the mirror also believes
  bool multi_range_naks = true;  // offer multi-range NAKs (off: a single-range peer, for A/B)
  int handshake_timeout_ms = 5000;
  uint64_t health_interval_ns = 100'000'000;
  uint64_t peer_timeout_ns = 5'000'000'000;  // the source silent this long is gone
  dataplane::MirrorWorkerConfig worker;
};

// MirrorControlStats: what the control thread itself counts.
struct MirrorControlStats {
  uint64_t health_reports = 0;
  uint64_t position_asks = 0;  // HEALTH sent early for an implausible datagram
  uint64_t tcp_wrong_kind = 0;  // frames a source never sends on the connection, skipped
};

class MirrorSession {
 public:
  // establish runs the handshake and returns a session whose worker is
  // ready to step. Errors name what to change; the ring is never damaged.
  // A refusal by the source or a failed authentication is
  // FailedPrecondition or PermissionDenied (final); a busy or unreachable
  // source is Unavailable (worth retrying).
  static absl::StatusOr<std::unique_ptr<MirrorSession>> establish(const MirrorOptions& o);
  ~MirrorSession();

  // step is the worker thread's iteration; stats are its counters.
  bool step(uint64_t now_ns) { return worker_->step(now_ns); }
  // park is the worker thread's idle wait (see MirrorStepper::park).
  void park(uint64_t now_ns, uint64_t timeout_ns) { worker_->park(now_ns, timeout_ns); }
  const dataplane::MirrorWorkerStats& stats() { return worker_->link().stats; }
  const MirrorControlStats& control_stats() const { return cstats_; }
  // port_summary: the packet port's counters, once the worker has stopped.
  std::string port_summary() const { return worker_->port_summary(); }
  uint64_t port_drops() const { return worker_->port_drops(); }
  // poll relays for up to timeout_ms; false once the source is gone (why:
  // end_reason()).
  bool poll(int timeout_ms);
  const std::string& end_reason() const { return end_reason_; }

  const std::string& description() const { return description_; }
  uint64_t first_seq() const { return first_seq_; }
  bool authenticated() const { return authenticated_; }

 private:
  explicit MirrorSession(TcpConn conn) : conn_(std::move(conn)) {}
  bool relay_frames();
  void send_naks();
  void send_health(uint64_t now_ns);

  TcpConn conn_;
  int epoll_fd_ = -1;
  int nak_fd_ = -1;
  std::unique_ptr<dataplane::MirrorStepper> worker_;
  std::string description_;
  std::string end_reason_;
  uint64_t first_seq_ = 0;
  bool queue_full_ = false;
  bool authenticated_ = false;
  uint16_t features_ = 0;
  FrameLimits limits_;
  uint64_t health_interval_ns_ = 0;
  uint64_t peer_timeout_ns_ = 0;
  uint64_t next_health_ns_ = 0;
  uint64_t last_health_ns_ = 0;
  uint64_t health_seq_ = 0;
  uint64_t last_rx_ns_ = 0;
  uint64_t last_received_ = 0;
  MirrorControlStats cstats_;
};

}  // namespace ringfire::control
