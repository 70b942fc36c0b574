// serve_session.h — one served ring on a port worker: reads the ring
// as raw records, packs them into DATA frames, paces them, and sends each
// frame once to the multicast group or once per unicast mirror (N times with
// dup) from its binding on the worker's port, with a heartbeat carrying one
// past the last sent sequence while idle
// (after 1 ms, then backing off to heartbeat_max_ns while nothing is sent).
// It accepts PUNCHes bearing a token the control thread registered (on an
// authenticated session only with a valid MAC and a counter higher than any
// before) and sends DATA where they come from if that is the address the
// mirror's TCP connection comes from (a NAT keeps it); any other address (a
// kernel-bypass port with an address of its own, a stolen token) first gets
// a PROBE, at most one per 100 ms, and DATA only once the mirror has echoed
// it over TCP. A stranger's datagram never makes it send DATA anywhere, and
// every one it refuses is counted by reason. On an authenticated session
// every datagram it sends ends in a MAC frame.
// It also repairs: a NAK range the control thread hands it is re-read from
// the ring and sent through the data plane (to the group, or to the unicast
// mirror that asked), a burst per step beside the live stream.
// The packet I/O backend is the template parameter; the port worker that
// steps the session owns the port and hands it the PUNCHes that arrive on
// its binding. Everything the control thread touches is in ServeLink:
// queues and relaxed-atomic counters. step() is bounded work. Worker thread
// only, once installed.
#pragma once

#include <array>
#include <atomic>
#include <optional>
#include <vector>

#include "dataplane/counter.h"
#include "dataplane/datagram_tag.h"
#include "dataplane/fault_shaper.h"
#include "dataplane/loss_meter.h"
#include "dataplane/pacer.h"
#include "dataplane/packet_port.h"
#include "dataplane/spsc_queue.h"
#include "dataplane/worker_wake.h"
#include "net/datagram_mac.h"
#include "proto/data_framer.h"
#include "ring/raw_reader.h"

namespace ringfire::dataplane {

struct ServeConfig {
  uint8_t session = 1;
  uint16_t mtu = 1472;             // UDP payload per datagram, the MAC frame included
  // pace_ns: a partial frame leaves at most one pacing interval after the
  // previous frame (a full one at once, a lone record after a quiet
  // interval at once). An engine's serve that names none gets its port
  // kind's (kDefaultPaceNs): 50 us on the kernel path (~40 k datagrams/s),
  // 5 us on a DPDK port (a datagram costs it ~0.1-2 us).
  uint64_t pace_ns = 50'000;
  uint64_t heartbeat_ns = 1'000'000;       // the first heartbeat after a send ...
  uint64_t heartbeat_max_ns = 100'000'000; // ... then growing while idle, up to this
  uint32_t heartbeat_growth = 2;           // each idle heartbeat waits this many times the last (at least 2)
  // heartbeat_follows_cadence: data that leaves in bursts at a steady
  // cadence (a decode loop's steps) moves the first heartbeat after a
  // burst to three cadences later (at least heartbeat_ns, at most
  // heartbeat_max_ns; only while the spacing is steady, its mean
  // deviation within a quarter of it): while the bursts keep coming, no heartbeat (and
  // no wake-up of the receiver) between them; a lost last datagram shows
  // by the next burst's sequence, or by that heartbeat once they stop.
  bool heartbeat_follows_cadence = false;
  std::optional<net::MacKey> data_key;  // authenticated: seal every datagram
  // tag: unkeyed, the group's datagrams end with a TAG frame carrying it
  // (random per incarnation; 0: untagged). Unicast mirrors get their own
  // with kAllowToken.
  uint64_t tag = 0;
  uint32_t dup = 1;                // sends of each datagram
  // dup_auto (dup = "auto"): each unicast mirror's datagrams go once, or
  // twice while its HEALTH shows a loss above the thresholds' (LossMeter);
  // the group's go `dup` times.
  bool dup_auto = false;
  LossThresholds dup_thresholds;
  uint32_t burst_records = 32;     // records read per step (a repair's: at most 32)
  std::optional<Endpoint> multicast;
  FaultConfig tx_faults;           // test: faults on every datagram sent
  // writer_pokes: the ring's writer is in this process and pokes the
  // worker after every publish (poke_worker: the stream mux's egress), so
  // a parked worker needs no timeout to find new records.
  bool writer_pokes = false;
};

// ServeCommand: control thread -> worker.
struct ServeCommand {
  enum class Kind : uint8_t { kAllowToken, kForgetToken, kRepair, kProbeEcho, kLossReport } kind;
  uint64_t token;     // kRepair: the unicast mirror that asked; 0: the multicast group
  // first: kRepair: records first..last (inclusive); kProbeEcho: the
  // challenge; kLossReport: the datagrams the mirror's HEALTH says it took
  // in (and `last`: the NAKs it says it sent).
  uint64_t first = 0;
  uint64_t last = 0;
  uint32_t peer_ip = 0;  // kAllowToken: PUNCHes must come from this address
  bool keyed = false;    // kAllowToken: PUNCHes must carry a MAC under punch_key
  net::MacKey punch_key{};
  uint64_t tag = 0;      // kAllowToken: this mirror's datagrams end with a TAG frame carrying it; 0: untagged
};

struct alignas(64) ServeStats {  // its own cache lines: the worker writes (Counter: single writer), control reads
  Counter records;
  Counter frames;
  Counter datagrams;
  Counter tx_bursts;       // tx_burst calls (datagrams / tx_bursts: how full a burst is)
  Counter data_bursts;     // ... of them, a step's burst of data frames (heartbeats, probes, repairs apart)
  Counter data_datagrams;  // the datagrams those bursts sent
  Counter send_failures;
  Counter heartbeats;
  Counter lapped;          // records the ring overwrote before we read them
  Counter left_to_tcp;     // records too large for a datagram
  Counter control_tells;   // wake-ups of the control for its caught-up TCP-mode mirrors (tell_control_at)
  Counter punches;
  // Refused datagrams by reason (a serve worker receives only PUNCHes).
  Counter punch_malformed;
  Counter punch_wrong_kind;
  Counter punch_unknown_token;
  Counter punch_probed;         // a known token from another address: not refused, not served, probed
  Counter probes;               // PROBEs sent (path validation)
  Counter paths_validated;      // addresses that echoed their PROBE over TCP
  Counter punch_bad_mac;
  Counter punch_replayed;      // a counter not above the last accepted
  uint64_t punches_refused() const {
    return punch_malformed.get() + punch_wrong_kind.get() + punch_unknown_token.get() +
           punch_bad_mac.get() + punch_replayed.get();
  }
  Counter unicast_mirrors;
  // next_to_send: one past the last sequence sent; stored with release by
  // the worker (serve_session_impl.h), loaded with acquire by control.
  std::atomic<uint64_t> next_to_send{0};
  Counter fault_dropped;   // test: datagrams the send-side faults dropped
  Counter repairs;         // NAK ranges repaired through the data plane
  Counter repair_records;
  Counter repairs_cut;     // ended early: lapped, or no room (the mirror NAKs again)
  // dup = "auto": unicast mirrors whose datagrams go twice now, the
  // switches between once and twice, and the second copies sent.
  Counter dup_auto_doubled;
  Counter dup_auto_switches;
  Counter dup_auto_copies;
};

// ServeLink is the part of a serve session the control thread may touch.
struct ServeLink;
// poke_worker wakes the serve's worker if it is parked (after a push to
// its commands, or a publish it must not wait a deadline for).
void poke_worker(ServeLink& link);

struct ServeLink {
  SpscQueue<ServeCommand, 1024> commands;  // control -> worker
  // oversized holds the sequences of records too large for a datagram,
  // which the control thread sends on each mirror's TCP connection.
  SpscQueue<uint64_t, 16384> oversized;   // worker -> control
  // notify_fd is an eventfd the worker writes when it queues oversized
  // records (-1: none yet). Stored with release by the control thread once
  // it has made it (the session may already be on its worker); the worker
  // loads it with acquire.
  std::atomic<int> notify_fd{-1};
  // wake: the worker's, set when the session is installed; whoever pushes
  // a command, or publishes into the served ring while the worker may be
  // parked on something else (a worker with several sessions waits in
  // poll(), not on this ring), pokes it.
  std::atomic<WorkerWake*> wake{nullptr};
  // gate: records at or past it wait, though published (UINT64_MAX: none
  // wait). A producer that publishes a pass of several records at once
  // (the stream mux's flush) raises it after the last one, so the worker
  // finds them all in one step and sends them in one burst. Stored with
  // release by the producer, loaded with acquire by the worker.
  std::atomic<uint64_t> gate{UINT64_MAX};
  // tell_control_at: the control thread's request to hear (a write of
  // notify_fd) once the worker has taken record `tell_control_at` from the
  // ring: its TCP-mode mirrors are caught up and it sleeps until the ring
  // moves, not polling it (UINT64_MAX: no request). The control stores it;
  // the worker takes it back (exchange) when it tells.
  std::atomic<uint64_t> tell_control_at{UINT64_MAX};
  ServeStats stats;
};

inline void poke_worker(ServeLink& link) {
  if (WorkerWake* w = link.wake.load(std::memory_order_acquire)) w->poke();  // pairs with attach's release
}
// run_worker: the ring's writer, after publishing: a parked worker's
// iteration runs on the writer's thread where the port allows (WorkerWake::run_or_poke).
inline void run_worker(ServeLink& link) {
  if (WorkerWake* w = link.wake.load(std::memory_order_acquire)) w->run_or_poke();  // pairs with attach's release
}

template <PacketPort Port>
class alignas(64) ServeSession {
 public:
  // `repair_reader`, a second reader of the same ring, serves kRepair
  // commands (without one they are refused: counted in repairs_cut).
  ServeSession(ring::RawReader reader, const ServeConfig& config,
               std::optional<ring::RawReader> repair_reader = std::nullopt);
  ServeSession(const ServeSession&) = delete;
  ServeSession& operator=(const ServeSession&) = delete;
  ~ServeSession();  // gives back the port's buffer the open frame is built in

  // attach: the port worker installs the session on `port`, sending from
  // `binding` (worker thread, before the first step).
  void attach(Port* port, BindingId binding, WorkerWake* wake = nullptr) {
    port_ = port;
    binding_ = binding;
    if (framer_.empty()) begin_frame();  // in the port's buffer, if it lends one
    link_.wake.store(wake, std::memory_order_release);  // pairs with poke_worker's acquire
  }
  BindingId binding() const { return binding_; }
  // take_commands applies the control thread's commands; the worker calls
  // it before each burst, so a token allowed in the same round as its
  // PUNCH is known when the PUNCH is read.
  void take_commands();
  // on_datagram takes what arrived on the session's binding: PUNCHes.
  void on_datagram(const RxDatagram& d, uint64_t now_ns);
  // step reads, frames, sends; `now` is CLOCK_MONOTONIC ns. Returns whether
  // it did any work (for the idle strategy).
  bool step(uint64_t now_ns);
  // next_deadline_ns: by when step must run again with nothing new (a paced
  // frame, a heartbeat); now_ns when work is pending.
  uint64_t next_deadline_ns(uint64_t now_ns) const;
  // reader: the served ring (a worker with one session parks on it).
  ring::RawReader& reader() { return reader_; }
  bool writer_pokes() const { return config_.writer_pokes; }
  // records_waiting: a ring whose writer pokes has published records the
  // gate lets out, not yet read (the park's last look, after `parked` is
  // raised; other rings' records are found by the park's timeouts, and
  // may wait in the ring for the pacer on purpose).
  bool records_waiting() const {
    return config_.writer_pokes && reader_.published() > reader_.cursor() &&
           reader_.cursor() < link_.gate.load(std::memory_order_acquire);  // pairs with the producer's release
  }

  // waiting_for_pacer: the records in the ring may not leave yet (a
  // partial frame, not due) and would not fill one: step() leaves them
  // there, and a worker may sleep until next_deadline_ns().
  bool waiting_for_pacer(uint64_t now_ns) const {
    const size_t room = framer_.room_records();
    return room != 0 && !pacer_.due(now_ns) && reader_.published() - reader_.cursor() < room;
  }

  ServeLink& link() { return link_; }

 private:
  struct Unicast {
    uint64_t token = 0;
    uint32_t peer_ip = 0;        // the mirror's TCP address: PUNCHes come from there
    std::optional<net::MacKey> key;   // authenticated: its PUNCHes' key
    uint64_t last_counter = 0;
    std::optional<Endpoint> to;  // set by the first valid PUNCH
    std::optional<Endpoint> probing;  // another address, PROBEd, not yet echoed
    uint64_t challenge = 0;
    uint64_t probed_ns = 0;
    std::optional<TagFrame> tag;  // unkeyed: what ends every datagram sent to it
    LossMeter loss;               // dup = "auto": its copies
  };
  struct Repair {
    Endpoint to;
    std::optional<TagFrame> tag;  // the destination's (a copy: the mirror may go while it runs)
    uint64_t token = 0;           // the unicast mirror's (0: the group)
    uint64_t next = 0;
    uint64_t last = 0;
  };
  static constexpr size_t kMaxRepairs = 256;
  static constexpr size_t kMaxUnicast = 4096;
  size_t send(const TxDatagram* tx, size_t n);
  void probe(Unicast& u, const Endpoint& at, uint64_t now_ns);
  // seal_in_place adds the MAC frame on an authenticated session.
  size_t seal_in_place(std::byte* buf, size_t n) const {
    return config_.data_key ? seal(*config_.data_key, buf, n, config_.session) : n;
  }
  // frame_limit leaves room for the MAC frame (keyed) or a TAG frame (a
  // destination may be tagged: TxDatagram::trailer): the same 16 bytes.
  static_assert(proto::kMacFrameBytes == proto::kTagFrameBytes);
  size_t frame_limit() const { return config_.mtu - proto::kMacFrameBytes; }
  // trailer: what the port appends to a datagram for `tag`'s destination.
  static const std::byte* trailer(const std::optional<TagFrame>& tag) {
    return tag ? tag->bytes.data() : nullptr;
  }
  void send_to_all(proto::ConstBytes datagram, uint64_t now_ns);
  void transmit(proto::ConstBytes datagram);
  // for_each_copy calls emit(to, trailer, owner) once for every copy a
  // datagram goes out as: the group's (dup copies), then each addressed
  // unicast mirror's (its own copies: dup, or dup = auto's choice).
  template <class Emit>
  void for_each_copy(Emit&& emit) {
    auto each = [&](const Endpoint& to, const std::optional<TagFrame>& tag, uint32_t copies, Unicast* u) {
      for (uint32_t d = 0; d < copies; ++d) emit(to, trailer(tag), TxOwner{u, d != 0});
    };
    if (config_.multicast) each(*config_.multicast, group_tag_, config_.dup, nullptr);
    for (Unicast& u : unicast_) {
      if (u.to) each(*u.to, u.tag, copies_for(u), &u);
    }
  }
  // queue_to_all adds a data frame's datagrams (one per destination and
  // dup) to the step's burst; flush_pending sends the burst (at the end of
  // every step, and before anything else is sent, so nothing overtakes it).
  void queue_to_all(proto::ConstBytes datagram);
  void flush_pending();
  void flush(uint64_t now_ns);
  void follow_cadence(uint64_t now_ns);
  void count_unicast();
  // copies_for: how many times a datagram goes to `u` (dup, or its loss
  // meter's under dup = "auto").
  uint32_t copies_for(const Unicast& u) const { return config_.dup_auto ? u.loss.copies() : config_.dup; }
  // TxOwner: whom a queued datagram goes to, for dup = "auto"'s count
  // (nullptr: the group) and whether it is a second copy.
  struct TxOwner {
    Unicast* to = nullptr;
    bool extra = false;
  };
  // credit: of a burst whose datagrams go to `owners`, the first `sent`
  // left (a port takes a leading run of a burst): each counted as sent to
  // its unicast mirror; a refused one never reached the path. Pointers
  // into unicast_ hold within a step (entries move only in take_commands).
  void credit(const TxOwner* owners, size_t sent);
  void on_loss_report(const ServeCommand& c);
  void recount_doubled();
  // begin_frame opens the next frame: in a buffer the port lends (a DPDK
  // mbuf: the frame leaves from where it is built) or, without one, in
  // frame_bufs_[frame_at_] (the port copies it).
  void begin_frame();
  void release_leases();
  // take_record reads the next ring record into the open frame; false when
  // none is there. Fixed records are copied straight from the ring into
  // the frame; blob records through the reader's own buffer.
  bool take_record(uint64_t now_ns);
  // tell_control_if_asked: after taking records, the control's request
  // (ServeLink::tell_control_at) met, a write of its notify_fd.
  void tell_control_if_asked();
  void queue_repair(const ServeCommand& c);
  // repair_step sends up to a burst of the oldest pending repair's records.
  bool repair_step();

  ring::RawReader reader_;
  Port* port_ = nullptr;
  BindingId binding_ = 0;
  ServeConfig config_;
  std::optional<TagFrame> group_tag_;  // unkeyed: what ends every datagram sent to the group
  proto::DataFramer framer_;
  Pacer pacer_;
  FaultShaper faults_;
  // TX batching: a step's data frames leave in one tx_burst (a forward
  // pass's batches to a peer: one burst, one doorbell), each in a buffer of
  // its own until then. pending_ is empty between steps.
  std::vector<std::vector<std::byte>> frame_bufs_;
  size_t frame_at_ = 0;        // the buffer the framer writes into
  std::array<TxDatagram, kBurst> pending_{};
  std::array<TxOwner, kBurst> pending_owners_{};
  size_t pending_n_ = 0;
  size_t pending_frames_ = 0;  // frames with datagrams in pending_: their buffers are taken
  void* frame_lease_ = nullptr;  // the lent buffer the open frame is built in (nullptr: frame_bufs_)
  std::array<void*, kBurst> pending_leases_{};  // queued frames' lent buffers, released after their burst
  size_t pending_leases_n_ = 0;
  std::vector<std::byte> misplaced_;  // a record read into the frame that did not follow it (a hole, a lap)
  std::vector<Unicast> unicast_;
  net::MacKey probe_secret_{};     // keys the PROBE challenges (random per worker)
  uint64_t probes_made_ = 0;
  uint64_t last_send_ns_ = 0;
  uint64_t heartbeat_wait_ns_;  // backs off while idle
  uint64_t cadence_ns_ = 0;     // the bursts' usual spacing (heartbeat_follows_cadence; 0: none seen)
  uint64_t last_data_ns_ = 0;   // when the last data frame left (follow_cadence)
  uint64_t cadence_dev_ns_ = 0; // the spacing's mean deviation: steady when within a quarter of it
  std::optional<ring::RawReader> repair_reader_;
  proto::DataFramer repair_framer_;
  std::vector<std::byte> repair_buf_;
  std::array<Repair, kMaxRepairs> repairs_{};  // a FIFO: no allocation on the hot path
  size_t repair_head_ = 0;
  size_t repair_count_ = 0;
  ServeLink link_;
};

}  // namespace ringfire::dataplane
