// node.h — the stream multiplexer's public API: one Node per process.
//
// A consumer makes an Anchor and hands its handle (printable) to a
// producer on another node; the producer attaches to it and gets a Sender.
//
//   Node::create    the node: its control listener (TCP), its MuxConfig
//                   (checked: zero credit is refused), and the engine its
//                   channels are sessions of — one of its own (one data-
//                   plane port, kernel or DPDK through the fallback ladder,
//                   conducted by a thread of the node's), or the host's
//                   (NodeOptions::host: `ringfire run`'s daemon, whose
//                   conductor then runs the node beside its serves and
//                   mirrors: one engine per host).
//   create_anchor   consumer: an anchor (single- or multi-sender) and its
//                   handle (worker id in the upper 64 bits, anchor id
//                   below, and a ticket: its first attach answered in
//                   advance).
//   attach          producer: a stream to a handle at a peer's control
//                   address. A handle's unused ticket opens it at once
//                   (no round trip: the OpenSlot goes with its first
//                   records); else ATTACH on the TCP control connection,
//                   which blocks until answered (setup, not the hot path).
//   Sender::send    synchronous, never blocks: kSent, or why not (kFull:
//                   the slot's byte budget, retry after credit).
//   Sender::finish  the terminal.
//   flush_batch     no argument, never an error, non-blocking: whatever is
//                   staged goes in the next batches (Manual policy).
//   Anchor::recv    items of each stream in order, then exactly one end:
//                   finished, or dropped with its reason (the producer went
//                   away, the peer's channel died, never claimed, ...).
//                   Anchor::cancel reaches the producer as a closed sender.
//   fd / poll       consumer, many anchors at once: one descriptor for an
//                   event loop (readable when some anchor has an item), and
//                   a call that returns the items of every ready anchor —
//                   its cost is the items ready, never the anchors open.
//                   A node is read either this way or by blocking recv()
//                   calls, not both at once (they share the descriptor).
//   send_many       producer: a decode step's records in one call.
//
// Per peer, one channel each way a node produces: an egress blob ring of
// `_stream_batch` records that this node's engine serves, which the peer's
// engine mirrors (unicast UDP, NAK-repaired) into an ingress ring its
// applier reads. Credit and receiver-to-owner closes go back on the TCP
// control connection. See ARCHITECTURE.md "The stream multiplexer".
// Thread-safe: every call may come from any thread, but a hosted node is
// created and destroyed on its host engine's conductor.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/fault_injector.h"
#include "engine/engine.h"
#include "engine/ports.h"
#include "mux/anchor_handle.h"
#include "mux/mux_config.h"
#include "mux/peer_receiver.h"
#include "mux/peer_sender.h"
#include "net/auth.h"
#include "net/endpoint.h"
#include "proto/bytes.h"

namespace ringfire::node {

enum class AnchorKind : uint8_t {
  kSingleSender,  // one producer attaches; a second attach is refused
  kMultiSender,   // any number, each its own stream (session)
};

// node_port: a node's own data port by default (gro on).
inline engine::PortSpec node_port() {
  engine::PortSpec p;
  p.gro = true;
  return p;
}

struct NodeOptions {
  std::string instance_id;        // names the node; its worker id is xxh3 of it (required)
  net::Endpoint control;    // the TCP control listener (ip required; port 0 picks one)
  // port: the data plane the channels use. Its `ip` defaults to the
  // control address; backend kernel unless set. With a host, only its
  // `name` (a port of the host engine), `ip` (its address: 0 takes the
  // control address) and `mtu` count. A kernel port of the node's own
  // takes a step's runs whole (gro): channels carry runs of equal
  // datagrams.
  engine::PortSpec port = node_port();
  // host: run on this engine (its conductor drives the node, its port
  // `port.name` carries the channels) instead of an engine and a thread of
  // the node's own. Create and destroy the node on that conductor's thread.
  engine::Engine* host = nullptr;
  // mux: `enabled` false makes every attach take the per-stream TCP path
  // (one connection per stream), as does a peer that does not speak the mux.
  mux::MuxConfig mux;
  std::string ring_dir = "/dev/shm";  // where channel rings live (removed when the channel ends)
  // build_on_flush: flush_batch() builds and publishes the batches on its
  // caller's thread (else it only kicks the node thread, one hand-off more).
  bool build_on_flush = true;
  // psk: with this pre-shared key, both nodes prove it on every control
  // and per-stream connection before anything else counts (PROTOCOL.md
  // §5.1.1), and every channel runs the ring mirroring's handshake and a
  // MAC on each datagram (§1.8). A peer without it, or with another, is
  // refused, and told which side lacks it.
  std::optional<net::Psk> psk;
  uint64_t attach_timeout_ns = 5'000'000'000;
  uint64_t hello_timeout_ns = 5'000'000'000;  // an accepted connection must send NODE within this
  // A peer gone silent (its host or link lost, no FIN) ends its control
  // and per-stream connections within about this (TCP keepalive and
  // TCP_USER_TIMEOUT; 0: the kernel's defaults, which never end an idle
  // reader's connection): its streams end dropped.
  uint32_t silent_peer_ms = 6'000;
  uint32_t channel_records = 16384;  // records per channel ring (a power of two)
  // channel_arena_bytes: each channel ring's byte arena (rounded up to a
  // power of two, at least four fenced batches). Half of it may be in
  // flight to the peer; the memory each channel costs on each side.
  uint64_t channel_arena_bytes = 8u << 20;
  uint32_t max_connections = 4096;  // accepted connections (channels and per-stream ones); more are refused
  uint32_t max_channels = 64;        // producing peers mirrored at once (each a mirror session and a ring)
  // Per source address, so that one address cannot take the node: the
  // channels it may have, and the connections it may hold before they
  // prove useful (no NODE yet, a per-stream connection not yet attached, a
  // channel not yet up); max_pending bounds those over every source.
  uint32_t max_channels_per_source = 8;
  uint32_t max_pending_per_source = 32;
  uint32_t max_pending = 512;
  uint32_t max_anchors = 1u << 20;
  // resume_window_ns: a single-sender anchor whose stream ends with its
  // channel (the producer's node lost, its connection cut, a record the
  // channel never delivered) holds that end back this long. A producer
  // that attaches again naming the stream's session (Node::attach's
  // `resume_session`, from any node) is told how many frames the anchor
  // holds, and its stream goes on from the next one: the reader sees one
  // unbroken stream. Without one in time the end (dropped, channel lost)
  // is read. 0: no resume; the end is read at once.
  uint64_t resume_window_ns = 0;
  // tickets: each anchor's handle carries a ticket (PROTOCOL.md §5.2.1) —
  // its attach answered in advance, so a producer opens the stream with
  // no ATTACH round trip (its first records go with the OpenSlot). Once
  // per anchor; later producers attach as ever. Off: handles without.
  bool tickets = true;
  // channel_rx_faults: tests only. Seeded loss, duplication and reordering
  // of every ingress channel's datagrams as its mirror receives them
  // (MirrorWorkerConfig::rx_faults): the channel's NAKs must repair them
  // before a batch is applied. Off unless set.
  dataplane::FaultConfig channel_rx_faults;
};

// Item: one thing a consumer reads from an anchor.
struct Item {
  enum class Kind : uint8_t { kData, kFinished, kDropped } kind = Kind::kData;
  uint64_t session = 0;          // which producer's stream (multi-sender anchors have many)
  std::vector<std::byte> bytes;  // kData
  mux::EndReason reason = mux::EndReason::kNone;  // kDropped: why
  uint32_t frames = 0;           // an end's: the data frames the stream delivered before it
};

// Polled: one item from Node::poll; its bytes are in the poll's buffer.
struct Polled {
  uint64_t anchor = 0;   // whose (Anchor::id())
  uint64_t session = 0;
  Item::Kind kind = Item::Kind::kData;
  mux::EndReason reason = mux::EndReason::kNone;
  uint32_t frames = 0;
  uint32_t offset = 0;   // kData: the bytes [offset, offset + len) of the buffer
  uint32_t len = 0;
};

class Sender;
// SendOne: one record of a Node::send_many call, and what became of it.
struct SendOne {
  Sender* sender = nullptr;
  proto::ConstBytes record;
  mux::SendStatus status = mux::SendStatus::kSent;
};

// NodeStats: every counter, summed over the node's peers.
struct NodeStats {
  mux::PeerSenderStats out;    // owner side
  mux::PeerReceiverStats in;   // receiver side
  uint64_t peers_out = 0;      // channels this node serves
  uint64_t peers_in = 0;       // channels it mirrors
  uint64_t channel_failures = 0;  // a channel that lost a record (lapped, GAP): ended as peer loss
  uint64_t peers_lost = 0;     // control connections that ended
  uint64_t refused = 0;        // connections refused (cap, no NODE in time, bad NODE, junk)
  uint64_t refused_by_source = 0;  // ... of them: past a source's (or every source's) pending or channel cap
  uint64_t refused_channel_taken = 0;  // ... of them: a NODE naming a live channel's epoch, or the serve it mirrors
  uint64_t channels_evicted = 0;   // channels that never carried a stream, ended to make room for a new one
  uint64_t unauthenticated = 0;  // keyed nodes: a peer without the key, or with another one (refused or left)
  uint64_t frames_rejected = 0;  // frames that did not decode or had no business here
  uint64_t bad_frame_mac = 0;    // keyed: a control frame whose MAC failed (forged, replayed): its connection cut
  uint64_t frames_unmaced = 0;   // keyed peers that MAC no control frames (older ones): served anyway
  uint64_t attaches_answered = 0;
  uint64_t attaches_refused = 0;   // unknown anchor, single-sender taken, stream cap
  // Tickets (§5.2.1): streams opened on one with no ATTACH (producer side),
  // and claimed by their OpenSlot (consumer side). A ticket that claims
  // nothing (used, cancelled, forged) is counted in in.unknown_anchor.
  uint64_t tickets_opened = 0;
  uint64_t tickets_claimed = 0;
  uint64_t tickets_expired = 0;  // unclaimed within the accept timeout: lapsed (consumer side)
  // Resumes (NodeOptions::resume_window_ns): streams held back when their
  // channel ended, resumes answered, refused (no such held stream, or not
  // the mux), and held ends read because none came in time.
  uint64_t resumes_held = 0;
  uint64_t resumes_answered = 0;
  uint64_t resumes_refused = 0;
  uint64_t resumes_expired = 0;
  uint64_t channel_batches = 0;    // batches published into egress rings
  uint64_t admission_waits = 0;    // builds held back: the peer had not applied enough of the channel
  uint64_t out_of_fds = 0;         // connections shed: the process had no descriptor left
  uint64_t tcp_streams_out = 0;    // streams attached on the per-stream path (producer side)
  uint64_t tcp_streams_in = 0;     // ... and accepted (consumer side)
  uint64_t tcp_records_in = 0;
  uint64_t tcp_records_out = 0;
  // The ingress channels' mirrors (the engine's counters): how their DATA came.
  uint64_t channel_datagrams = 0;
  uint64_t channel_tcp_frames = 0;
  uint64_t channel_tcp_records = 0;  // batches that came in DATA frames by TCP (repairs; a batch too big for a datagram)
  uint64_t channel_naks = 0;
  uint64_t channel_held = 0;       // records the hold-back held (out of order, waiting for a hole)
  // Channel datagrams refused before they moved anything, by reason (not
  // the channel's peer, a bad MAC or tag, a kind or session not the channel's,
  // implausible sequences, malformed).
  uint64_t channel_wrong_sender = 0;
  uint64_t channel_bad_mac = 0;
  uint64_t channel_bad_tag = 0;
  uint64_t channel_wrong_kind = 0;
  uint64_t channel_wrong_session = 0;
  uint64_t channel_implausible = 0;
  uint64_t channel_malformed = 0;
  // Ingress channel records applied, by whom: a reader in poll() or
  // Anchor::recv (its items taken without a hand-off), or the node thread.
  uint64_t applied_by_readers = 0;
  uint64_t applied_by_node = 0;  // by the node thread, before it judged liveness (a reader was slow)
  // The egress channels' serves (the engine's counters): the datagrams that
  // carried batches (heartbeats apart) and the tx_burst calls that sent them —
  // records_sent / channel_datagrams_out is tokens per datagram, bursts per
  // flush_batch() the doorbells a forward pass costs.
  uint64_t channel_datagrams_out = 0;
  uint64_t channel_tx_bursts = 0;
  // Readiness: poll() calls, and the descriptor's wake-ups (writes: by a
  // channel's worker, the node thread or a poll that left items).
  uint64_t polls = 0;
  uint64_t ready_wakeups = 0;
  uint64_t conductor_passes = 0;  // the node thread's turns (a spinning one shows here)
  // Channel rings reserved and warmed whole (RingFile::warm): their first
  // lap no longer pays a first touch a page on the writer's path.
  uint64_t rings_warmed = 0;
  // Gauges (now, not totals), each back to zero once every stream ended and
  // was read and every peer applied what it was sent: the owner side's
  // live slots, bytes withheld (staged, not sent) and outstanding (sent,
  // not credited back); the receiver side's live streams and the bytes
  // buffered for readers; the anchors open.
  uint64_t live_slots = 0;
  uint64_t withheld_bytes = 0;
  uint64_t outstanding_bytes = 0;
  uint64_t live_streams = 0;
  uint64_t buffered_bytes = 0;
  uint64_t anchors = 0;
};

class Node;
struct NodeImpl;
struct OutPeer;
struct PendingAttach;
struct InPeer;
struct TcpStreamOut;
struct AnchorState;

// Sender: the producer's end of one stream.
class Sender {
 public:
  ~Sender();  // without finish(): the stream ends dropped at the consumer
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  mux::SendStatus send(proto::ConstBytes record);
  bool finish();
  // closed: finished, cancelled by the consumer, or its peer is gone.
  bool closed() const;
  // wait_closed: block until closed() (a cancel, a stall kill, the peer
  // lost, the node stopped), or timeout_ns passed; returns closed(). What
  // a producer that has nothing to send waits on instead of polling
  // closed() (a decode loop that must stop for a cancelled request).
  bool wait_closed(uint64_t timeout_ns);
  // inherited: made before a fork() this process came out of (a child's
  // copy): none of its node's threads are here and its locks may be held
  // by one that is not. Use nothing of it, and never destroy it (that joins
  // threads and removes the parent's rings): leave it to the process's exit.
  bool inherited() const;
  // per_stream: this stream took the per-stream TCP path.
  bool per_stream() const { return tcp_ != nullptr; }
  uint64_t session() const { return session_; }
  // resume_at: a resume's answer (Node::attach's resume_session): the data
  // frames the anchor already holds of the stream taken over; this
  // sender's first record is the stream's frame resume_at. 0 otherwise.
  uint32_t resume_at() const { return resume_at_; }

 private:
  friend class Node;
  friend struct NodeImpl;
  mux::SendStatus send_tcp(proto::ConstBytes record);  // the per-stream path: under the stream's own lock
  Sender(std::shared_ptr<NodeImpl> node, std::shared_ptr<OutPeer> peer, proto::SlotId slot, uint64_t session)
      : node_(std::move(node)), peer_(std::move(peer)), slot_(slot), session_(session) {}
  Sender(std::shared_ptr<NodeImpl> node, std::shared_ptr<TcpStreamOut> tcp, uint64_t session)
      : node_(std::move(node)), tcp_(std::move(tcp)), session_(session) {}
  std::shared_ptr<NodeImpl> node_;  // may outlive the Node: then its stream is simply gone
  std::shared_ptr<OutPeer> peer_;   // the mux path (or:)
  std::shared_ptr<TcpStreamOut> tcp_;  // the per-stream TCP path
  proto::SlotId slot_;
  uint64_t session_;
  uint32_t resume_at_ = 0;
  bool done_ = false;
};

// Anchor: the consumer's end; one stream per attached producer.
class Anchor {
 public:
  ~Anchor();  // cancels its live streams
  Anchor(const Anchor&) = delete;
  Anchor& operator=(const Anchor&) = delete;

  const mux::AnchorHandle& handle() const { return handle_; }
  // id: what Node::poll's items name this anchor by (the handle's anchor id).
  uint64_t id() const { return handle_.anchor; }
  // inherited: as Sender::inherited.
  bool inherited() const;
  // recv: the next item of any of its streams, waiting up to timeout_ns;
  // false when none came.
  bool recv(Item* out, uint64_t timeout_ns);
  // cancel: every live stream of the anchor ends (the producers see closed
  // senders); later attaches are refused.
  void cancel();
  // live_streams: attached and not yet ended (as read).
  uint32_t live_streams() const;
  // pause: Node::poll() passes this anchor by (its items wait, and so its
  // streams' credit: the producers slow down) until resume(). For a reader
  // whose own consumer stopped (an HTTP client that does not read).
  void pause();
  void resume();

 private:
  friend class Node;
  Anchor(std::shared_ptr<NodeImpl> node, std::shared_ptr<AnchorState> state, mux::AnchorHandle h)
      : node_(std::move(node)), state_(std::move(state)), handle_(h) {}
  std::shared_ptr<NodeImpl> node_;  // may outlive the Node: its streams then end dropped
  std::shared_ptr<AnchorState> state_;
  mux::AnchorHandle handle_;
  bool wake_ = false;  // recv: the node thread has something to do after this pop
};

class Node {
 public:
  static absl::StatusOr<std::unique_ptr<Node>> create(NodeOptions options);
  ~Node();  // every peer lost: senders close, streams end dropped
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // inherited: as Sender::inherited.
  bool inherited() const;

  std::unique_ptr<Anchor> create_anchor(AnchorKind kind);
  // attach: a stream to the anchor behind `handle` on the node at
  // `peer_control`. resume_session: take over that stream of the anchor,
  // which its channel ended (the old Sender::session(); the consumer holds
  // it for its NodeOptions::resume_window_ns): the new Sender's
  // resume_at() says from which frame it goes on. Refused (an error) when
  // the anchor holds no such stream; the mux only.
  absl::StatusOr<std::unique_ptr<Sender>> attach(const mux::AnchorHandle& handle,
                                                 const net::Endpoint& peer_control,
                                                 uint64_t resume_session = 0);
  // attach_many: attach() for each handle, those of one peer at once (every
  // request sent before any answer is awaited: a batch of requests costs
  // the consumer a read and a write or a few, not three system calls each).
  // One result per handle, in order.
  std::vector<absl::StatusOr<std::unique_ptr<Sender>>> attach_many(std::span<const mux::AnchorHandle> handles,
                                                                   const net::Endpoint& peer_control);
  void flush_batch();
  // send_many: each record on its sender, in order, under one lock (a
  // decode step in one call); each SendOne's status says what became of
  // it. Returns the number sent. Never blocks on I/O.
  size_t send_many(std::span<SendOne> sends);

  // fd: readable when some anchor of this node has an item (an edge once
  // poll() took everything, level while it left items) — or when a
  // channel delivered only liveness records (an idle slot's heartbeat,
  // once a heartbeat interval at most, or an OpenSlot): poll() then
  // returns nothing. For epoll and asyncio's add_reader; never read it
  // yourself.
  int fd() const;
  // poll: up to `max` items of any anchors, appended to *items, their bytes
  // to *bytes; returns how many. Never waits. Applies what the channels
  // delivered on this thread (no hand-off).
  size_t poll(std::vector<Polled>* items, std::vector<std::byte>* bytes, size_t max);
  // wait: until fd() is readable or timeout_ns passed; true if readable.
  bool wait(uint64_t timeout_ns) const;
  // idle: the caller is done with what poll() returned and goes back to
  // waiting on fd() by itself (epoll, asyncio): the node thread's wake
  // that poll() put off (a position report due after a quiet spell) goes
  // now, not at the next poll. poll(), wait() and recv() do this themselves.
  void idle();

  // drain waits (at most timeout_ns) until everything sent has been applied
  // by its peers: staged records sent, terminals written, channels caught
  // up, per-stream connections written out. What a producer calls before
  // it exits; true when done.
  bool drain(uint64_t timeout_ns);

  net::Endpoint control_address() const;
  uint64_t worker_id() const;
  mux::FlushPolicy flush_policy() const;  // the node's (NodeOptions::mux.flush)
  std::string data_path() const;  // the data plane's active path ("kernel", "dpdk net_af_xdp", ...)
  NodeStats stats() const;

 private:
  // await_attach: waits (under l) until `a` is answered or `deadline_ns`, and makes its Sender.
  absl::StatusOr<std::unique_ptr<Sender>> await_attach(std::unique_lock<std::mutex>& l, const std::shared_ptr<OutPeer>& p,
                                                       const std::shared_ptr<PendingAttach>& a,
                                                       const mux::AnchorHandle& h, const net::Endpoint& peer,
                                                       uint64_t deadline_ns);
  explicit Node(std::shared_ptr<NodeImpl> impl);
  std::shared_ptr<NodeImpl> impl_;
};

}  // namespace ringfire::node
