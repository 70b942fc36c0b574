// mirror_worker.h — the mirror side's poll-mode worker: receives DATA and
// HEARTBEAT datagrams (multicast or unicast), takes TCP-borne frames the
// control thread hands over, feeds both to the MirrorReceiver (which checks
// every datagram before it may change anything), and hands the NAKs it
// produces back to the control thread, with a request for the source's
// position when a datagram was implausible (waking it through an eventfd).
// Unicast mirrors PUNCH the source every 50 ms until data flows, then once
// a second to keep the NAT mapping open (counted and MACed on an
// authenticated session). Receive-side fault injection (seeded) for tests.
// The packet I/O backend is the template parameter; what the control
// thread touches is in MirrorLink. step() is the worker's whole, bounded
// iteration.
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
  UdpTrust trust;                     // whom to believe on UDP
  FaultConfig rx_faults;
  std::optional<Endpoint> punch_to;   // unicast: where to PUNCH
  uint64_t punch_token = 0;
  std::optional<MacKey> punch_key;    // authenticated: PUNCHes carry a counter and a MAC
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
  std::atomic<uint64_t> holes{0};
  std::atomic<uint64_t> held_high{0};
  std::atomic<uint64_t> hold_overflow{0};
  std::atomic<uint64_t> next_seq{0};
  std::atomic<uint64_t> known_end{0};
  std::atomic<uint64_t> repair_srtt_ns{0};
  std::atomic<uint64_t> nak_repeats{0};
  // Rejected UDP input by reason (MirrorStats).
  std::atomic<uint64_t> wrong_sender{0};
  std::atomic<uint64_t> bad_mac{0};
  std::atomic<uint64_t> wrong_kind{0};
  std::atomic<uint64_t> wrong_session{0};
  std::atomic<uint64_t> implausible{0};
  std::atomic<uint64_t> malformed{0};
  uint64_t rejected() const {
    constexpr auto r = std::memory_order_relaxed;
    return wrong_sender.load(r) + bad_mac.load(r) + wrong_kind.load(r) + wrong_session.load(r) +
           implausible.load(r) + malformed.load(r);
  }
};

// MirrorLink is the part of a mirror worker the control thread may touch.
struct MirrorLink {
  explicit MirrorLink(size_t tcp_queue_bytes) : tcp_frames(tcp_queue_bytes) {}
  ByteQueue tcp_frames;                  // control -> worker: TCP-borne frames
  SpscQueue<proto::NakRanges, 64> naks;  // worker -> control
  SpscQueue<uint64_t, 16> probes;        // worker -> control: PROBE challenges to echo
  // position_wanted: the worker saw an implausible datagram; the control
  // thread asks the source where it is (a HEALTH now). Release by the
  // worker before its eventfd write; the control thread exchanges it back.
  std::atomic<bool> position_wanted{false};
  int nak_fd = -1;                       // eventfd the worker writes after queueing a NAK
  // parked: the worker is in park() (idle); the control thread writes
  // wake_fd after queueing TCP frames then, and only then. Seq_cst store
  // by the worker before it checks the queue; the control thread fences
  // after its push, before loading it (a store-load pair).
  std::atomic<bool> parked{false};
  int wake_fd = -1;                      // eventfd the worker polls while parked
  MirrorWorkerStats stats;
};

// MirrorStepper is how a mirror session drives a worker whatever its backend:
// one virtual call per iteration, never per packet.
class MirrorStepper {
 public:
  virtual ~MirrorStepper() = default;
  virtual bool step(uint64_t now_ns) = 0;
  // park is the idle wait: until a datagram, a TCP frame from the control
  // thread, the next deadline (a NAK repeat, a punch), or timeout_ns.
  virtual void park(uint64_t now_ns, uint64_t timeout_ns) = 0;
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
  const MirrorReceiver& receiver() const { return receiver_; }

  ~MirrorWorker() override;
  bool step(uint64_t now_ns) override;
  void park(uint64_t now_ns, uint64_t timeout_ns) override;
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
  void punch(uint64_t now_ns);
  void wake_control();
  void publish_stats();

  MirrorWriter writer_;
  std::optional<Port> port_;
  MirrorWorkerConfig config_;
  MirrorReceiver receiver_;
  FaultShaper faults_;
  bool data_seen_ = false;
  uint64_t last_punch_ns_ = 0;
  uint64_t punch_counter_ = 0;
  std::optional<proto::NakRanges> unsent_nak_;
  MirrorLink link_;
};

}  // namespace ringfire::dataplane
