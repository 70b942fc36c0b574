// node_peers.h — the node's per-peer state (private to node/): an OutPeer
// per peer this node produces to (its control connection, its PeerSender,
// the egress blob ring its engine serves), an InPeer per peer producing to
// it (the accepted connection, its PeerReceiver, the ingress ring its
// engine mirrors, applied by whoever reads), and the anchors with their
// ready lists. Every field is guarded by NodeImpl::mu unless it says
// otherwise: "conductor" fields are the conductor's alone (it reads and
// writes them with or without mu; nobody else touches them), "wmu" ones a
// per-stream connection's own lock's.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "mux/peer_receiver.h"
#include "mux/peer_sender.h"
#include "net/auth.h"
#include "net/tcp_conn.h"
#include "node/node.h"
#include "ring/blob.h"
#include "ring/lazy_bytes.h"

namespace ringfire::node {

// PendingAttach: one attach() waiting for its ATTACH response.
struct PendingAttach {
  uint64_t anchor = 0;
  uint64_t session = 0;
  bool sent = false;        // its request is on the connection
  bool done = false;        // answered (or failed): status and slot are final
  bool abandoned = false;   // the caller timed out: a late success is aborted
  bool tcp_chosen = false;  // the peer answered tcp: attach again on the stream's own connection
  mux::Ticket ticket;           // session set: opened on the handle's ticket, no request (§5.2.1)
  uint64_t resume_session = 0;  // a resume: the session it takes over (0: a new stream)
  uint32_t resume_at = 0;       // ... and the answer's resume_at
  absl::Status status;
  proto::SlotId slot;
};

struct OutPeer : std::enable_shared_from_this<OutPeer> {  // held by shared_ptr (senders, retiring_out)
  uint64_t worker = 0;              // the handle's worker id; its NODE must say the same
  net::Endpoint addr;         // its control address
  // conn: conductor. Frames are queued (net::TcpConn::queue) under mu and
  // written once the conductor let go of it.
  std::unique_ptr<net::TcpConn> conn;
  bool watched = false;             // conductor: conn is in the engine's epoll
  bool open_read = true;            // conductor: this pass's read found the connection open
  bool write_failed = false;        // conductor: a flush failed (ended at the next pass)
  bool setup_failed = false;        // conductor: its egress ring or serve could not be made
  uint64_t epoch = 0;               // the channel's (random, non-zero)
  uint64_t created_ns = 0;          // connected: its channel must be up within attach_timeout_ns of this
  std::optional<mux::PeerSender> sender;
  // egress: the channel ring, published under mu (its parked reader woken
  // after: BlobProducer::defer_wakes); unmapped by the conductor's teardown
  // once no runner holds it.
  std::optional<ring::BlobProducer> egress;
  // egress_file: the conductor's handle on the egress ring (reserve(): a
  // lazy ring's pages, allocated once the channel is up, off the first
  // token's path).
  std::optional<ring::RingFile> egress_file;
  bool reserved = false;            // conductor: egress_file reserved
  uint64_t warmed = 0;              // conductor: egress_file warmed up to here (RingFile::warm)
  uint64_t ready_ns = 0;            // conductor: when the channel came up (its reserve waits kReserveAfterNs)
  std::string ring_path;
  std::string serve_name;           // conductor: the engine session serving the egress ring ("" until set up)
  dataplane::ServeLink* serve_link = nullptr;  // its link (poked after a publish); the engine's; null once ended
  // runners: threads that published into the egress ring under mu and, mu
  // released, wake its reader and run or poke its worker (EgressRun): the
  // conductor frees the ring and the serve only once none is left.
  // Incremented under mu (never once dead), decremented with release.
  std::atomic<uint32_t> runners{0};
  uint64_t applied = 0;             // channel records the peer has applied (its MUXCTL seq)
  uint64_t published_bytes = 0;     // batch bytes published into the egress ring
  std::vector<uint64_t> cum_bytes;  // published_bytes after each sequence (by seq mod its size)
  std::vector<std::byte> node_sent; // our NODE as sent (a keyed exchange's proofs cover it)
  bool node_seen = false;           // its NODE answer arrived (keyed: and proved the key)
  bool channel_ready = false;       // the peer's mirror takes the channel by UDP (attach waits for it)
  bool broken = false;              // a batch could not be published (the node thread ends it)
  bool dead = false;                // its connection ended: every sender is closed
  std::deque<std::shared_ptr<PendingAttach>> attaches;
};

// TcpStreamIn: a stream on the per-stream TCP path, consumer side: its
// own connection, read only while fewer than `window` items wait (TCP's
// flow control is its credit).
struct AnchorStream;
struct TcpStreamIn {
  AnchorStream* owner = nullptr;  // its anchor's entry (null once the anchor let it go)
  std::deque<Item> items;
  uint32_t window = 0;
  uint64_t bytes = 0;                 // data bytes in items
  uint64_t byte_budget = UINT64_MAX;  // the slot byte budget (mux.slot_byte_budget)
  uint32_t next_frame = 0;   // the STREAM seq expected next
  bool ended = false;        // its end is queued (finished or dropped)
  bool cancelled = false;    // the consumer went away: the node thread closes the connection
  // full: the consumer is a window of items, or a budget of bytes, behind:
  // the connection is not read (TCP's window holds the producer) until a
  // reader takes an item. What it holds is under the budget plus a frame.
  bool full() const { return items.size() >= window || bytes >= byte_budget; }
};

// TcpStreamOut: a stream on the per-stream path, producer side. Its
// connection is its own lock's (wmu), not the node's: the producer writes
// each STREAM frame at once on its own thread (a system call, as one TCP
// connection per stream costs), and the conductor reads its answers under
// the same lock. Lock order: wmu, then the node's mu.
struct TcpStreamOut {
  std::mutex wmu;
  std::unique_ptr<net::TcpConn> conn;  // wmu
  uint64_t worker = 0;           // the handle's: its NODE must say the same
  uint32_t byte_budget = 0;      // wmu: unwritten bytes a send may leave queued (else kFull)
  uint32_t frame_seq = 0;        // wmu
  std::vector<std::byte> node_sent;  // conductor: our NODE as sent (keyed: the ATTACH waits for the peer's proof)
  bool node_seen = false;        // conductor
  bool watched = false;          // conductor
  bool unwatched = false;        // conductor: the engine would not watch it (read every pass)
  bool attached = false;         // wmu: its ATTACH was answered ok
  bool finished = false;         // wmu
  bool closed = false;           // wmu: the connection ended (cancelled, the peer gone) or was finished
  std::atomic<bool> gone{false}; // its connection is closed (the conductor lets it go)
  std::atomic<bool> unwritten{false};  // bytes wait for the socket (the conductor flushes them): set under wmu
  std::atomic<uint64_t> records_out{0};  // STREAM frames written (NodeStats::tcp_records_out)
  std::shared_ptr<PendingAttach> attach;  // mu
};

struct InPeer : std::enable_shared_from_this<InPeer> {  // held by shared_ptr (streams keep it alive)
  // conn: conductor (frames queued under mu, written after it). Null once
  // cut: the conductor then ends the peer.
  std::unique_ptr<net::TcpConn> conn;
  bool want_read = false;           // conductor: read this pass (decided under mu: the stream's window)
  bool read_paused = false;         // conductor: out of the engine's epoll while its stream is a window behind
  bool eof_read = false;            // conductor: a read found the peer's end
  bool write_failed = false;        // conductor: a flush failed
  // The channel's mirror session, wanted (accept_node, under mu) and then
  // placed by the conductor once it let go of mu; its counters are copied
  // into mirror_counts under mu every pass (readers of stats() never touch
  // the engine).
  std::optional<engine::MirrorSpec> mirror_wanted;  // conductor
  bool node_answer_owed = false;    // conductor: our NODE answer goes once the mirror is placed
  engine::Engine::Mirror* mirror = nullptr;  // conductor
  NodeStats mirror_counts;          // channel_* fields only: mirror_counts_past + mirror_counts_link
  // A reconnect of the channel's mirror starts its link's counters at 0:
  // the earlier links' are kept here (conductor, under mu).
  NodeStats mirror_counts_past;
  NodeStats mirror_counts_link;     // the link of session mirror_link_session
  uint64_t mirror_link_session = 0; // MirrorControlStats::sessions when that link began
  bool per_stream = false;          // a NODE without a channel: one stream's own connection
  bool eof = false;                 // the peer closed: apply what it sent, then end
  bool close_after_flush = false;   // a refused per-stream attach: close once the answer is out
  std::shared_ptr<TcpStreamIn> stream;  // per_stream: once attached
  uint64_t accepted_ns = 0;
  uint32_t source = 0;              // the connection's IP: the per-source caps, and where its channel is mirrored from
  net::Nonce nonce{};           // keyed: our NODE answer's nonce (drawn at accept, outside mu)
  bool pending = true;              // counted in its source's pending connections (NodeImpl::settle)
  bool channel_counted = false;     // counted in its source's channels
  bool carried_stream = false;      // a stream was registered on its channel (an ATTACH, a ticket's OpenSlot)
  bool node_seen = false;           // its NODE arrived (keyed: and its proof; before, nothing else is accepted)
  // The keyed exchange (§5.1): the peer's NODE and our answer as they went,
  // until its AUTH step 3 proves the key.
  bool auth_pending = false;
  proto::Node hello;
  std::vector<std::byte> hello_bytes, answer_bytes;
  uint64_t worker = 0;
  uint64_t epoch = 0;
  uint16_t channel_port = 0;        // its NODE's: the serve its channel mirrors, on `source`
  std::unique_ptr<mux::PeerReceiver> receiver;
  std::string ring_path;
  std::string mirror_name;          // conductor: the engine session mirroring its channel ("" until placed)
  // The ingress ring, once the mirror created it (the node thread opens it,
  // then never replaces it). Whoever holds mu applies it: a reader in
  // poll() or recv() (its items so need no hand-off), or the node thread
  // before it judges the streams' liveness.
  std::optional<ring::BlobConsumer> ingress;
  // ingress_file: the conductor's handle on it, reserved (its lazy pages
  // allocated) kReserveAfterNs after it opened, warmed, then let go.
  std::optional<ring::RingFile> ingress_file;
  bool ingress_reserved = false;    // conductor: ingress_file reserved
  uint64_t ingress_warmed = 0;      // conductor: ... and warmed up to here
  uint64_t ingress_ns = 0;          // conductor: when it opened
  ring::LazyBytes record;           // ingress scratch (max_blob bytes: pages taken as records reach them)
  uint64_t applied = 0;             // channel records applied
  uint64_t reported = 0;            // the last position sent back
  uint64_t reported_ns = 0;         // ... and when
  uint64_t watchdog_next_ns = 0;    // when the receiver's watchdog runs next
  bool failed = false;              // a reader found the channel broken (a lost record, or a foreign epoch)
  const char* failed_why = "";      // ... which (end_in's reason)
  bool dead = false;                // ended: its streams got their Dropped
};

struct AnchorState;

// AnchorStream: one producer's stream into an anchor.
struct AnchorStream {
  AnchorState* anchor = nullptr;
  uint64_t session = 0;                    // what its items say (a resumed stream keeps the one it took over)
  uint64_t wire_session = 0;               // its producer's (the ATTACH's): what a resume of it names
  std::shared_ptr<InPeer> peer;            // keeps the receiver (and the stream) alive
  mux::PeerReceiver::Stream* stream = nullptr;
  std::shared_ptr<TcpStreamIn> tcp;        // instead, on the per-stream path
  size_t at = 0;                           // its index in anchor->streams
  bool queued = false;                     // in anchor->ready
  // A resume: the stream that took this one over (its items wait until
  // this one's are read: `behind`), and this one's end is not read.
  AnchorStream* superseded_by = nullptr;
  bool behind = false;                     // a resumed stream whose predecessor still has items
  bool resumed = false;                    // it came from a resume (never claimed: its producer went)
};

// AnchorState: an anchor's streams, and which of them have items (a FIFO:
// a reader's cost is the streams ready, never the streams open).
struct AnchorState : std::enable_shared_from_this<AnchorState> {
  uint64_t id = 0;
  AnchorKind kind = AnchorKind::kSingleSender;
  bool cancelled = false;
  bool attached_once = false;               // single-sender: a second attach is refused
  // ticket: the handle's (NodeOptions::tickets), claimed by the first
  // OpenSlot naming it (session 0 once used, or none).
  mux::Ticket ticket;
  std::vector<std::unique_ptr<AnchorStream>> streams;  // live (swap-removed: AnchorStream::at)
  std::deque<AnchorStream*> ready;          // streams with an item, each once
  bool listed = false;                      // in NodeImpl::ready_anchors
  bool paused = false;                      // poll() passes it by (it is never listed while paused)
  // A resume (NodeOptions::resume_window_ns): its stream ended with its
  // channel; a producer naming resume_session may take it over until
  // resume_deadline_ns. Its end is held (held_end, once read from the
  // stream) and read only if none came.
  uint64_t resume_session = 0;              // 0: none awaited (the held stream's wire_session)
  uint64_t resume_label = 0;                // ... and the session its items say
  uint64_t resume_deadline_ns = 0;
  uint32_t resume_frames = 0;               // the data frames the anchor holds of it (the answer's resume_at)
  AnchorStream* resume_from = nullptr;      // the ended stream, while its items are unread
  std::optional<Item> held_end;             // its end, read from it while the resume is awaited
  uint32_t frames_base = 0;                 // data frames before the last resume: a later end counts from here
  // Made with the anchor (create_anchor, before the lock) for its first
  // stream: add_stream and expect() take them, so the poll that reads a
  // burst of first tokens allocates neither (a later stream makes its own).
  std::unique_ptr<AnchorStream> spare_stream;
  mux::PeerReceiver::Spare spare_rx;
};

}  // namespace ringfire::node
