// mirror_session.h — one mirror ring on a port worker: takes the DATA,
// HEARTBEAT and PROBE datagrams that arrive on its binding (multicast or
// unicast) and the TCP-borne frames the control thread hands over, feeds
// both to the MirrorReceiver (which checks every datagram before it may
// change anything), and hands the NAKs it produces back to the control
// thread, with the PROBEs to echo and a request for the source's position
// when a datagram was implausible (waking it through an eventfd).
// Unicast mirrors PUNCH the source every 50 ms until data flows, then once
// a second to keep the NAT mapping open (counted and MACed on an
// authenticated session). Receive-side fault injection (seeded) for tests.
// The packet I/O backend is the template parameter; the port worker that
// steps it owns the port. What the control thread touches is in
// MirrorLink. step() is bounded work. Worker thread only, once installed.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/byte_queue.h"
#include "dataplane/counter.h"
#include "dataplane/fault_shaper.h"
#include "dataplane/mirror_receiver.h"
#include "dataplane/packet_port.h"
#include "dataplane/reader_wake.h"
#include "dataplane/spsc_queue.h"
#include "dataplane/worker_wake.h"

namespace ringfire::dataplane {

struct MirrorWorkerConfig {
  MirrorConfig protocol;
  UdpTrust trust;                     // whom to believe on UDP
  FaultConfig rx_faults;
  std::optional<Endpoint> punch_to;   // unicast: where to PUNCH
  uint64_t punch_token = 0;
  std::optional<net::MacKey> punch_key;    // authenticated: PUNCHes carry a counter and a MAC
  uint64_t punch_retry_ns = 50'000'000;       // until the first datagram
  uint64_t punch_keepalive_ns = 1'000'000'000;
  // reader_wake: an in-process reader of the mirror ring waits on it (the
  // stream mux's channels): signalled once per step that committed records.
  // Null for every other mirror. It outlives the session (the reader's).
  ReaderWake* reader_wake = nullptr;
};

// MirrorLink is the part of a mirror session the control thread may touch.
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
  // wake: the worker's, set when the session is installed; the control
  // thread pokes it after queueing TCP frames (a parked worker wakes).
  std::atomic<WorkerWake*> wake{nullptr};
  MirrorWorkerStats stats;
};

template <PacketPort Port>
class alignas(64) MirrorSession {
 public:
  // nak_eventfd is written (8 bytes) whenever a NAK, a PROBE echo or a
  // position request is queued for the control thread. The TCP frame queue
  // is sized so that a frame holding the ring's largest record always fits.
  MirrorSession(MirrorWriter writer, const MirrorWorkerConfig& c, uint64_t first_seq, uint8_t session,
                int nak_eventfd);
  const MirrorReceiver& receiver() const { return receiver_; }

  // attach: the port worker installs the session on `port`; `binding` is
  // what it receives on and punches from (0: a TCP-mode session, no UDP).
  // Worker thread, before the first step.
  void attach(Port* port, BindingId binding, WorkerWake* wake) {
    port_ = port;
    binding_ = binding;
    link_.wake.store(wake, std::memory_order_release);  // pairs with the control thread's acquire
  }
  BindingId binding() const { return binding_; }
  // on_datagram takes what arrived on the session's binding.
  void on_datagram(const RxDatagram& d, uint64_t now_ns);
  bool step(uint64_t now_ns);
  // next_deadline_ns: by when step must run again with nothing new (a NAK
  // repeat, a punch); now_ns when work is pending.
  uint64_t next_deadline_ns(uint64_t now_ns) const;
  // has_tcp_frames: control has queued frames (checked last before parking).
  bool has_tcp_frames() {
    proto::ConstBytes pending;
    return link_.tcp_frames.front(&pending);
  }

  MirrorLink& link() { return link_; }

 private:
  void punch(uint64_t now_ns);
  void wake_control();
  void publish_stats();

  MirrorWriter writer_;
  Port* port_ = nullptr;
  BindingId binding_ = 0;
  MirrorWorkerConfig config_;
  MirrorReceiver receiver_;
  FaultShaper faults_;
  bool data_seen_ = false;
  uint64_t last_punch_ns_ = 0;
  uint64_t punch_counter_ = 0;
  uint64_t signalled_seq_ = 0;  // next_seq when reader_wake was last signalled
  uint64_t woken_seq_ = 0;      // the writer's next_seq when the ring's parked readers were last woken
  uint64_t datagrams_ = 0;   // published by publish_stats: no locked add per datagram
  uint64_t tcp_frames_ = 0;
  uint64_t tcp_records_ = 0;
  std::optional<proto::NakRanges> unsent_nak_;
  MirrorLink link_;
};

}  // namespace ringfire::dataplane
