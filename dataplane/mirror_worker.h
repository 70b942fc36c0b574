// mirror_worker.h — the mirror side's poll-mode worker: receives DATA and
// HEARTBEAT datagrams (multicast or unicast), takes TCP-borne frames the
// control thread hands over, feeds both to the MirrorReceiver, and hands the
// NAKs it produces back to the control thread (waking it through an
// eventfd). Unicast mirrors PUNCH the source until data flows, then keep the
// path open. Receive-side fault injection (seeded) for tests. The packet I/O
// backend is the template parameter; what the control thread touches is in
// MirrorLink. step() is the worker's whole, bounded iteration.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/byte_queue.h"
#include "dataplane/fault_shaper.h"
#include "dataplane/packet_port.h"
#include "dataplane/mirror_receiver.h"
#include "dataplane/spsc_queue.h"

namespace ringfire::dataplane {

struct MirrorWorkerConfig {
  MirrorConfig protocol;
  FaultConfig rx_faults;
  std::optional<Endpoint> punch_to;   // unicast: where to PUNCH
  uint64_t punch_token = 0;
  uint64_t punch_retry_ns = 50'000'000;       // until the first datagram
  uint64_t punch_keepalive_ns = 1'000'000'000;
};

struct alignas(64) MirrorWorkerStats {  // its own cache lines: the worker writes, control reads
  std::atomic<uint64_t> datagrams{0};
  std::atomic<uint64_t> tcp_frames{0};
  std::atomic<uint64_t> fault_dropped{0};
  std::atomic<uint64_t> punches{0};
  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> duplicates{0};
  std::atomic<uint64_t> held{0};
  std::atomic<uint64_t> naks{0};
  std::atomic<uint64_t> gap_records{0};
  std::atomic<uint64_t> wrong_session{0};
  std::atomic<uint64_t> malformed{0};
  std::atomic<uint64_t> next_seq{0};
  std::atomic<uint64_t> known_end{0};
};

// MirrorLink is the part of a mirror worker the control thread may touch.
struct MirrorLink {
  explicit MirrorLink(size_t tcp_queue_bytes) : tcp_frames(tcp_queue_bytes) {}
  ByteQueue tcp_frames;             // control -> worker: TCP-borne frames
  SpscQueue<proto::Nak, 64> naks;   // worker -> control
  int nak_fd = -1;                  // eventfd the worker writes after queueing a NAK
  MirrorWorkerStats stats;
};

// MirrorStepper is how a mirror session drives a worker whatever its backend:
// one virtual call per iteration, never per packet.
class MirrorStepper {
 public:
  virtual ~MirrorStepper() = default;
  virtual bool step(uint64_t now_ns) = 0;
  virtual MirrorLink& link() = 0;
  // port_summary: the packet port's counters in one line ("" if it keeps
  // none); call once the worker has stopped.
  virtual std::string port_summary() const = 0;
  // port_drops: what the packet port lost (0 if it keeps no count); may be
  // called while the worker runs.
  virtual uint64_t port_drops() const = 0;
};

template <PacketPort Port>
class alignas(64) MirrorWorker final : public MirrorStepper {
 public:
  // port is empty for TCP-only sessions. nak_eventfd is written (8 bytes)
  // whenever a NAK is queued. The TCP frame queue is sized so that a frame
  // holding the ring's largest record always fits.
  MirrorWorker(MirrorWriter writer, std::optional<Port> port, const MirrorWorkerConfig& c,
               uint64_t first_seq, uint8_t session, int nak_eventfd);

  bool step(uint64_t now_ns) override;
  uint64_t port_drops() const override {
    if constexpr (requires(const Port& p) { p.drops(); }) {
      if (port_) return port_->drops();
    }
    return 0;
  }
  std::string port_summary() const override {
    if constexpr (requires(const Port& p) { p.summary(); }) {
      if (port_) return port_->summary();
    }
    return "";
  }

  MirrorLink& link() override { return link_; }

 private:
  void deliver(proto::ConstBytes payload, uint64_t now_ns);
  void publish_stats();

  MirrorWriter writer_;
  std::optional<Port> port_;
  MirrorWorkerConfig config_;
  MirrorReceiver receiver_;
  FaultShaper faults_;
  bool data_seen_ = false;
  uint64_t last_punch_ns_ = 0;
  std::optional<proto::Nak> unsent_nak_;
  MirrorLink link_;
};

}  // namespace ringfire::dataplane
