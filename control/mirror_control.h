// mirror_control.h — the control side of one mirror session, as a state
// machine the conductor thread drives (never blocking it): connects to the
// source, sends HELLO (with a challenge, and proves itself, when it has the
// pre-shared key), builds (or checks and resumes) the sparse mirror ring
// from GEOMETRY, asks the engine for the session's data-plane half on the
// path MULTICAST describes (a group to join, a port to PUNCH from, or none
// in TCP mode) and tells it whom to believe, then relays TCP-borne frames to
// it and its NAKs and PROBE echoes to the source. Reports its health every
// 100 ms (and at once when a datagram was implausible: the source answers
// with its position), and gives the source up when it falls silent; then
// reconnects and resumes at the ring's end, unless told to stop. A refusal
// or a mismatch is final, with the reason. Never writes the ring itself,
// never constructs a port or a worker. Conductor thread only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/mirror_session.h"
#include "net/auth.h"
#include "net/tcp_conn.h"
#include "ring/ring_file.h"

namespace ringfire::control {

struct MirrorOptions {
  net::Endpoint source;
  std::string ring;              // name in `dir`, or a path
  std::string dir = "/dev/shm";
  enum class From : uint8_t { kResume, kLatest, kOldest, kSequence } from = From::kResume;
  uint64_t from_seq = 0;
  bool unicast = false;          // ask for UDP unicast (punch) instead of multicast
  bool tcp_only = false;         // ask for DATA on the TCP connection
  uint32_t local_ip = 0;         // the data plane's address for unicast (0: the TCP connection's)
  uint32_t tcp_from_ip = 0;      // the control connection leaves from this address (0: the kernel's choice)
  uint64_t expected_schema = 0;  // 0: any
  // channel_token: sent in the HELLO (a stream mux channel: the NODE's
  // channel_epoch that named the serve); a serve that is another node's
  // channel refuses it (PROTOCOL.md 5.1). 0: none.
  uint64_t channel_token = 0;
  // max_ring_bytes: a source whose ring (slots and arena) is larger is
  // refused before anything is created (0: any size; a node's channel
  // bounds what a stranger's GEOMETRY can make it allocate).
  uint64_t max_ring_bytes = 0;
  // lazy_ring: the ring it creates takes its pages as they are written
  // (ring::kFlagLazy: a stream mux channel's, on a first token's path).
  bool lazy_ring = false;
  std::optional<net::Psk> psk;        // authenticate (and require the source to)
  std::vector<uint32_t> accept_from;  // relays whose UDP the mirror also believes
  bool multi_range_naks = true;  // offer multi-range NAKs (off: a single-range peer, for A/B)
  bool reconnect = true;         // after the source goes away (a final refusal never retries)
  // wait_for_source: a source not there yet (refused, timed out, busy) is
  // retried like one that went away, from the first attempt (a daemon's
  // mirrors; the `mirror` shorthand fails at once, saying why).
  bool wait_for_source = false;
  uint64_t handshake_timeout_ns = 5'000'000'000;
  uint64_t health_interval_ns = 100'000'000;
  uint64_t peer_timeout_ns = 5'000'000'000;  // the source silent this long is gone
  dataplane::MirrorWorkerConfig worker;
};

// MirrorPlaneRequest: what the control side asks the engine to build once
// the handshake has settled the path.
struct MirrorPlaneRequest {
  std::optional<dataplane::MirrorWriter> writer;
  dataplane::MirrorWorkerConfig config;
  uint64_t first_seq = 0;
  uint8_t session = 0;
  int nak_fd = -1;
  std::optional<dataplane::BindSpec> bind;  // none: TCP mode, no UDP
  uint32_t local_ip = 0;  // the TCP connection's local address (a lazy port's, a join's interface)
  uint16_t max_payload = 1472;
};

// MirrorPlane is the engine's side: it builds the data-plane half of a
// mirror session on its port and worker. Conductor thread only.
class MirrorPlane {
 public:
  virtual ~MirrorPlane() = default;
  // open builds the session and hands it to the worker; its link is valid
  // until close().
  virtual absl::StatusOr<dataplane::MirrorLink*> open(MirrorPlaneRequest r) = 0;
  // close takes the session off the worker (the link is gone after it).
  virtual void close(dataplane::MirrorLink* link) = 0;
  // port_drops: what the port lost; port_name: for the operator.
  virtual uint64_t port_drops() const = 0;
  virtual std::string describe() const = 0;
};

// SessionTotals: a data-plane session's last counters, kept when it ends
// (its link goes with it).
struct SessionTotals {
  uint64_t records = 0;
  uint64_t next_seq = 0;
  uint64_t naks = 0;
  uint64_t nak_repeats = 0;
  uint64_t repair_srtt_ns = 0;
  uint64_t gap_records = 0;  // records the source no longer had, skipped
};

// MirrorControlStats: what the control side itself counts.
struct MirrorControlStats {
  uint64_t sessions = 0;        // handshakes completed
  uint64_t health_reports = 0;
  uint64_t position_asks = 0;   // HEALTH sent early for an implausible datagram
  uint64_t tcp_wrong_kind = 0;  // frames a source never sends on the connection, skipped
  uint64_t bad_frame_mac = 0;   // keyed: a control frame whose MAC failed (forged, replayed): the session ended
};

class MirrorControl {
 public:
  enum class State : uint8_t { kWaiting, kConnecting, kHandshake, kStreaming, kFailed, kStopped };

  // log receives one line per event an operator should see (connected,
  // source gone and why, reconnecting).
  MirrorControl(const MirrorOptions& o, MirrorPlane* plane, std::function<void(const std::string&)> log);
  ~MirrorControl();
  MirrorControl(const MirrorControl&) = delete;
  MirrorControl& operator=(const MirrorControl&) = delete;

  // poll does what is ready now and what is due (never waits); returns
  // when it next needs to run even if nothing arrives.
  uint64_t poll(uint64_t now_ns);
  // wait_fd: readable when the session has something to do (the conductor
  // waits on it among others).
  int wait_fd() const { return epoll_fd_; }
  // stop ends the session (takes it off the worker); state kStopped.
  void stop();

  State state() const { return state_; }
  // failure: why a failed session failed (final: a refusal, a mismatch).
  const absl::Status& failure() const { return failure_; }
  // first_seq, description: of the current (or last) session.
  uint64_t first_seq() const { return first_seq_; }
  const std::string& description() const { return description_; }
  const std::string& end_reason() const { return end_reason_; }
  bool authenticated() const { return authenticated_; }
  // stats: the data plane's counters of the current session (nullptr when
  // none), and the control side's own.
  const dataplane::MirrorWorkerStats* stats() const { return link_ ? &link_->stats : nullptr; }
  const MirrorControlStats& control_stats() const { return cstats_; }
  // ring: the ring as this session's writer maps it (a RingFile::share),
  // once the handshake made it. A reader in this process (a mux node's
  // ingress) takes a share rather than a mapping of its own: one set of
  // page tables, warmed once for the writer and the reader. The mapping
  // holds the writer's lock (flock) while any share lives: a reconnect
  // writes through it again (connect()), never through a new descriptor,
  // which could not take the lock. Conductor.
  const std::optional<ring::RingFile>& ring() const { return ring_; }
  // last_totals: the counters of the session that ended last.
  const SessionTotals& last_totals() const { return last_totals_; }
  uint64_t port_drops() const { return plane_->port_drops(); }
  const MirrorOptions& options() const { return o_; }

 private:
  void connect(uint64_t now_ns);
  bool on_writable(uint64_t now_ns);
  // handshake consumes what the source sent; false once it failed.
  bool handshake(uint64_t now_ns);
  // refused ends the session on a REFUSE: unavailable (retried) or failed, by its reason.
  void refused(const proto::Frame& f, uint64_t now_ns);
  absl::Status on_multicast(const proto::Multicast& mc, uint64_t now_ns);
  bool relay_frames();
  void send_naks();
  void send_health(uint64_t now_ns);
  void end_session(const std::string& why, uint64_t now_ns);
  // unavailable: the source is not there (yet, or any more): retried, or
  // final before the first session unless wait_for_source.
  void unavailable(const absl::Status& why, uint64_t now_ns);
  // close_link takes the session off its worker, keeping its totals.
  void close_link();
  void fail(const absl::Status& why);

  MirrorOptions o_;
  MirrorPlane* plane_;
  std::function<void(const std::string&)> log_;
  State state_ = State::kWaiting;
  int epoll_fd_ = -1;
  int nak_fd_ = -1;
  std::optional<net::TcpConn> conn_;
  int connecting_fd_ = -1;
  uint64_t deadline_ns_ = 0;     // of the current step (connect, handshake)
  uint64_t next_attempt_ns_ = 0;
  int attempts_ = 0;             // since the last session that streamed
  bool ever_streamed_ = false;
  // Handshake state.
  uint64_t have_ = 0;
  std::optional<ring::RingFile> existing_;  // the ring already here (connect maps it; the session then writes it)
  bool resuming_ = false;
  proto::Hello hello_;
  std::vector<std::byte> hello_bytes_;
  bool awaiting_auth_ = false;
  std::optional<proto::Geometry> geometry_;
  std::optional<ring::RingFile> ring_;  // the writer's mapping (ring())
  std::optional<net::MacKey> data_key_, punch_key_;
  // Streaming state.
  dataplane::MirrorLink* link_ = nullptr;
  bool queue_full_ = false;
  bool authenticated_ = false;
  bool frames_maced_ = false;  // keyed, and the source MACs control frames (§1.8.2)
  uint16_t features_ = 0;
  net::FrameLimits limits_;
  uint64_t next_health_ns_ = 0;
  uint64_t last_health_ns_ = 0;
  uint64_t health_seq_ = 0;
  uint64_t last_rx_ns_ = 0;
  uint64_t last_received_ = 0;
  uint64_t first_seq_ = 0;
  std::string description_;
  std::string end_reason_;
  absl::Status failure_;
  MirrorControlStats cstats_;
  SessionTotals last_totals_;
};

}  // namespace ringfire::control
