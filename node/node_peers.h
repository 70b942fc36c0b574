// node_peers.h — the node's per-peer state (private to node/): an OutPeer
// per peer this node produces to (its control connection, its PeerSender,
// the egress blob ring its engine serves), an InPeer per peer producing to
// it (the accepted connection, its PeerReceiver, the ingress ring its
// engine mirrors, applied by whoever reads), and the anchors with their
// ready lists. Every field is guarded by NodeImpl::mu unless it says
// otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "control/tcp_conn.h"
#include "dataplane/serve_session.h"
#include "mux/peer_receiver.h"
#include "mux/peer_sender.h"
#include "node/node.h"
#include "ring/blob.h"

namespace ringfire::node {

// PendingAttach: one attach() waiting for its ATTACH response.
struct PendingAttach {
  uint64_t anchor = 0;
  uint64_t session = 0;
  bool sent = false;        // its request is on the connection
  bool done = false;        // answered (or failed): status and slot are final
  bool abandoned = false;   // the caller timed out: a late success is aborted
  bool tcp_chosen = false;  // the peer answered tcp: attach again on the stream's own connection
  absl::Status status;
  proto::SlotId slot;
};

struct OutPeer {
  uint64_t worker = 0;              // the handle's worker id; its NODE must say the same
  dataplane::Endpoint addr;         // its control address
  std::unique_ptr<control::TcpConn> conn;
  uint64_t epoch = 0;               // the channel's (random, non-zero)
  std::optional<mux::PeerSender> sender;
  std::optional<ring::BlobProducer> egress;
  std::string ring_path;
  std::string serve_name;           // the engine session serving the egress ring ("" until set up)
  dataplane::ServeLink* serve_link = nullptr;  // its link (poked after a publish); the engine's
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
  uint32_t next_frame = 0;   // the STREAM seq expected next
  bool ended = false;        // its end is queued (finished or dropped)
  bool cancelled = false;    // the consumer went away: the node thread closes the connection
};

// TcpStreamOut: a stream on the per-stream path, producer side.
struct TcpStreamOut {
  std::unique_ptr<control::TcpConn> conn;
  uint64_t worker = 0;           // the handle's: its NODE must say the same
  uint32_t byte_budget = 0;      // unwritten bytes a send may leave queued (else kFull)
  uint32_t frame_seq = 0;
  std::vector<std::byte> node_sent;  // our NODE as sent (keyed: the ATTACH waits for the peer's proof)
  bool node_seen = false;
  bool attached = false;         // its ATTACH was answered ok
  bool finished = false;
  bool closed = false;           // the connection ended (cancelled, the peer gone) or was finished
  std::shared_ptr<PendingAttach> attach;
};

struct InPeer : std::enable_shared_from_this<InPeer> {  // held by shared_ptr (streams keep it alive)
  std::unique_ptr<control::TcpConn> conn;
  bool per_stream = false;          // a NODE without a channel: one stream's own connection
  bool eof = false;                 // the peer closed: apply what it sent, then end
  bool close_after_flush = false;   // a refused per-stream attach: close once the answer is out
  std::shared_ptr<TcpStreamIn> stream;  // per_stream: once attached
  uint64_t accepted_ns = 0;
  uint32_t source = 0;              // the connection's IP (the per-source caps)
  bool pending = true;              // counted in its source's pending connections (NodeImpl::settle)
  bool channel_counted = false;     // counted in its source's channels
  bool node_seen = false;           // its NODE arrived (keyed: and its proof; before, nothing else is accepted)
  // The keyed exchange (§5.1): the peer's NODE and our answer as they went,
  // until its AUTH step 3 proves the key.
  bool auth_pending = false;
  proto::Node hello;
  std::vector<std::byte> hello_bytes, answer_bytes;
  uint64_t worker = 0;
  uint64_t epoch = 0;
  std::unique_ptr<mux::PeerReceiver> receiver;
  std::string ring_path;
  std::string mirror_name;          // the engine session mirroring its channel ("" until NODE)
  // The ingress ring, once the mirror created it (the node thread opens it,
  // then never replaces it). Whoever holds mu applies it: a reader in
  // poll() or recv() (its items so need no hand-off), or the node thread
  // before it judges the streams' liveness.
  std::optional<ring::BlobConsumer> ingress;
  std::vector<std::byte> record;    // ingress scratch (max_blob bytes)
  uint64_t applied = 0;             // channel records applied
  uint64_t reported = 0;            // the last position sent back
  uint64_t reported_ns = 0;         // ... and when
  uint64_t watchdog_next_ns = 0;    // when the receiver's watchdog runs next
  bool failed = false;              // a reader found the channel broken (a lost record)
  bool dead = false;                // ended: its streams got their Dropped
};

struct AnchorState;

// AnchorStream: one producer's stream into an anchor.
struct AnchorStream {
  AnchorState* anchor = nullptr;
  uint64_t session = 0;
  std::shared_ptr<InPeer> peer;            // keeps the receiver (and the stream) alive
  mux::PeerReceiver::Stream* stream = nullptr;
  std::shared_ptr<TcpStreamIn> tcp;        // instead, on the per-stream path
  size_t at = 0;                           // its index in anchor->streams
  bool queued = false;                     // in anchor->ready
};

// AnchorState: an anchor's streams, and which of them have items (a FIFO:
// a reader's cost is the streams ready, never the streams open).
struct AnchorState : std::enable_shared_from_this<AnchorState> {
  uint64_t id = 0;
  AnchorKind kind = AnchorKind::kSingleSender;
  bool cancelled = false;
  bool attached_once = false;               // single-sender: a second attach is refused
  std::vector<std::unique_ptr<AnchorStream>> streams;  // live (swap-removed: AnchorStream::at)
  std::deque<AnchorStream*> ready;          // streams with an item, each once
  bool listed = false;                      // in NodeImpl::ready_anchors
  bool paused = false;                      // poll() passes it by (it is never listed while paused)
};

}  // namespace ringfire::node
