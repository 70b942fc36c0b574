// serve_control.h — the source side's control thread: owns the listening
// socket and every mirror's TCP connection (epoll). Answers HELLO with
// GEOMETRY and MULTICAST (group or unicast port, MTU, TTL, session byte, a
// fresh token registered with the worker), serves NAKs from the ring over
// TCP (DATA for what it holds, GAP for what it no longer does; optionally a
// small one through the worker by UDP as well), and streams DATA on
// the connection to mirrors that asked for TCP. Talks to the serve worker
// only through its command queue and counters; never touches a datagram.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/tcp_conn.h"
#include "dataplane/serve_worker.h"
#include "ring/raw_reader.h"

namespace ringfire::control {

struct ServeControlConfig {
  dataplane::Endpoint listen;
  std::string ring;                             // name or path of the served ring
  std::optional<dataplane::Endpoint> multicast;  // group:port announced to mirrors
  uint16_t unicast_port = 0;                     // the worker's UDP port for PUNCH (0: none)
  uint32_t data_ip = 0;                          // the worker's address (0: as the TCP listener)
  uint16_t mtu = 1472;
  uint8_t ttl = 1;
  uint8_t session = 1;
  size_t tcp_frame_bytes = 64u << 10;
  size_t max_backlog_bytes = 64u << 20;  // a mirror further behind is dropped
  uint32_t tcp_records_per_poll = 4096;
  // A NAK of at most this many records from a UDP mirror is also repaired
  // through the data plane: the worker re-sends the range from the ring by
  // UDP, beside the TCP answer (whichever arrives second is stale). Not for
  // a repeated NAK, nor for what the ring is about to overwrite. 0: TCP only.
  uint32_t udp_repair_max = 1024;
};

struct ServeControlStats {
  uint64_t mirrors = 0;
  uint64_t accepted = 0;
  uint64_t refused = 0;      // bad HELLO, schema mismatch, malformed frames
  uint64_t dropped_slow = 0;
  uint64_t naks = 0;
  uint64_t nak_records = 0;  // records retransmitted
  uint64_t udp_repairs = 0;  // NAKs handed to the worker to repair by UDP
  uint64_t gaps = 0;
  uint64_t tcp_records = 0;  // records streamed to TCP-mode mirrors
  uint64_t oversized = 0;    // records too large for a datagram, sent over TCP
};

class ServeControl {
 public:
  // start opens the listening socket; the worker behind `link` must
  // outlive this object.
  static absl::StatusOr<std::unique_ptr<ServeControl>> start(const ServeControlConfig& c,
                                                             dataplane::ServeLink* link);
  ~ServeControl();

  // poll runs one round: waits up to timeout_us for sockets, handles what
  // is ready, and streams TCP-mode DATA. Returns whether TCP-mode mirrors
  // still have records to send (the caller should not wait then).
  bool poll(uint64_t timeout_us);
  bool has_tcp_mirrors() const;
  const ServeControlStats& stats() const { return stats_; }
  dataplane::Endpoint listening() const { return listening_; }

 private:
  struct Mirror {
    explicit Mirror(int fd) : conn(fd) {}
    TcpConn conn;
    bool streaming = false;      // HELLO answered
    bool udp = false;            // DATA by multicast or unicast (not TCP mode)
    uint64_t token = 0;
    uint64_t last_nak_first = UINT64_MAX;  // a NAK for the same hole again: its repair was lost
    std::optional<ring::RawReader> tcp_reader;  // TCP-mode mirrors
  };
  ServeControl(const ServeControlConfig& c, dataplane::ServeLink* link, ring::RingFile info);

  void accept_all();
  bool on_readable(Mirror& m);
  bool on_hello(Mirror& m, const proto::Frame& f);
  bool on_nak(Mirror& m, const proto::Nak& nak);
  // send_range appends DATA frames of records first..last (inclusive) read
  // from `reader`, and a GAP wherever the ring skipped; returns records sent.
  uint64_t send_range(Mirror& m, ring::RawReader& reader, uint64_t first, uint64_t last,
                      uint64_t max_records);
  void drop(size_t index);
  // send_oversized sends the records the worker could not fit in a datagram
  // to every UDP mirror's TCP connection.
  void send_oversized();

  ServeControlConfig config_;
  dataplane::ServeLink* worker_;
  ring::RingFile info_;
  int epoll_fd_ = -1;
  int listen_fd_ = -1;
  int notify_fd_ = -1;  // the worker's "oversized records queued" eventfd
  dataplane::Endpoint listening_;
  std::vector<std::unique_ptr<Mirror>> mirrors_;
  std::vector<std::byte> frame_buf_;
  std::optional<ring::RawReader> oversized_reader_;
  ServeControlStats stats_;
};

}  // namespace ringfire::control
