// receiver_side.cc — the consumer's side of the Node: accepted control
// connections (NODE, ATTACH answers, MUXCTL back), the channels mirrored in
// and their ingress rings (applied by readers: readiness.cc), the
// per-stream path's streams. The conductor, under mu (apply_ingress: any
// thread under mu) but for place_mirror and open_ingress, which make the
// channel's session and map its ring once mu is released.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mux/negotiation.h"
#include "node/node_impl.h"
#include "proto/attach.h"
#include "proto/frame.h"
#include "proto/stream_batch.h"
#include "ring/blob.h"
#include "ring/monotonic.h"
#include "ring/ring_file.h"
#include "ring/wait.h"

namespace ringfire::node {

// ---- the receiver side: an accepted connection --------------------------

void NodeImpl::step_in(InPeer& p, uint64_t now) {
  if (p.eof_read) p.eof = true;  // this pass's read found the end (before_step)
  if (unproven(p) && now - p.accepted_ns > opt.hello_timeout_ns) {
    ++counters.refused;
    retire(p.conn);  // no NODE (or no attached stream) in time: a stranger
    return;
  }
  if (p.receiver && !p.ingress && now - p.accepted_ns > opt.hello_timeout_ns) {
    // Its channel never came up (no serve answered at the port it named):
    // a stranger holding one of max_channels, or a broken peer. Cut, so
    // that it cannot keep real producers out.
    ++counters.refused;
    log_later(absl::StrFormat("peer %016x: its channel did not come up within %d ms: cut", p.worker,
                              opt.hello_timeout_ns / 1'000'000));
    retire(p.conn);
    return;
  }
  if (p.close_after_flush && (p.write_failed || p.conn->pending() == 0)) {
    retire(p.conn);  // its refusal is out
    return;
  }
  if (p.stream && (p.stream->cancelled || p.stream->ended)) {
    retire(p.conn);  // the consumer went away (the producer sees its connection close), or it is over
    return;
  }
  // The per-stream path's credit is TCP's window: it was read only while
  // the consumer kept up (before_step's want_read).
  using Taken = net::TcpConn::Taken;
  auto window_full = [&] { return p.stream && p.stream->full(); };
  bool drained = false;  // no whole frame left in the input
  if (!window_full()) {
    const net::TcpConn::Next n = p.conn->read_frames(limits, [&](const proto::Frame& f, proto::ConstBytes) {
      if (window_full()) return Taken::kLeave;
      if (p.auth_pending) {
        on_node_auth(p, f);
      } else if (!p.node_seen) {
        on_node(p, f);
      } else if (f.header.kind == FrameKind::kAttach) {
        on_attach_request(p, f);
      } else if (f.header.kind == FrameKind::kStream && p.stream) {
        on_stream_frame(p, f);
      } else {
        ++counters.frames_rejected;  // a known kind with no business on this side, or a newer one: skipped
      }
      if (p.conn == nullptr) return Taken::kGone;
      return p.close_after_flush ? Taken::kLast : Taken::kNext;  // answered and done: nothing else it sends counts
    });
    if (p.conn == nullptr) return;
    if (n != net::TcpConn::Next::kFrame && n != net::TcpConn::Next::kNeedMore) {
      // Malformed, oversized or forged: the stream cannot be resynchronised.
      ++(n == net::TcpConn::Next::kForged ? counters.bad_frame_mac : counters.frames_rejected);
      if (p.stream && !p.stream->ended) tcp_end(*p.stream, mux::EndReason::kProtocolError);
      retire(p.conn);
      return;
    }
    drained = n == net::TcpConn::Next::kNeedMore;
  }
  if (p.eof && drained) {
    if (p.auth_pending) ++counters.unauthenticated;  // it left without proving the key (another key)
    if (p.stream && !p.stream->ended) tcp_end(*p.stream, mux::EndReason::kProducerGone);  // closed without its terminal
    retire(p.conn);
    return;
  }
  if (p.receiver) {
    // The watchdog walks every stream: a tenth of a heartbeat interval is
    // resolution enough (it judges in whole intervals), not every step.
    if (now >= p.watchdog_next_ns) {
      p.watchdog_next_ns = now + mux.heartbeat_interval_ns / 10;
      // What waits in the ingress ring is applied first: a consumer slow to
      // read must not make its streams look silent (it costs nothing when
      // readers keep up, and the node thread looks here at most every tenth
      // of a heartbeat interval).
      bool owed = false;
      if (apply_ingress(p, SIZE_MAX, false, &owed) != 0) items_ready();
      const mux::PeerReceiverStats before = p.receiver->stats();
      p.receiver->watchdog(now);
      // A stream it ended has its Dropped to read: wake the readers (only then).
      if (p.receiver->stats().watchdog_dead != before.watchdog_dead ||
          p.receiver->stats().never_opened != before.never_opened) {
        items_ready();
      }
    }
    // The position goes at once past 1/16 of the ring, else at most every
    // kPositionEveryNs while it moved; the credit held back goes with it
    // (a forced sweep: MUXCTL carries the position), so the two keep one
    // phase and wake the owner's node thread once, not twice.
    const bool report_due = p.applied != p.reported && (p.applied - p.reported >= opt.channel_records / 16 ||
                                                        now - p.reported_ns >= kPositionEveryNs);
    for (bool sweep = report_due;; sweep = false) {
      // A MUXCTL body is bounded (kMaxControlBody): several when more is owed.
      const size_t n =
          p.receiver->build_control({buf.data(), std::min<size_t>(buf.size(), kMaxControlBody)}, p.epoch, now, sweep);
      if (n == 0) break;
      queue_frame(*p.conn, FrameKind::kMuxControl, p.applied, {buf.data(), n});
      p.reported = p.applied;
      p.reported_ns = now;
    }
    // The position alone, so the owner may reuse its egress ring (and knows
    // when everything it sent has been applied).
    if (report_due && p.applied != p.reported) {
      queue_frame(*p.conn, FrameKind::kMuxControl, p.applied, {});
      p.reported = p.applied;
      p.reported_ns = now;
    }
  }
  // Written once mu is released (after_step); a write that failed there,
  // or a backlog the peer does not read, cuts it here.
  if (p.write_failed || p.conn->pending() > kMaxConnBacklog) retire(p.conn);
}

void NodeImpl::on_node(InPeer& p, const proto::Frame& f) {
  proto::Node m;
  if (f.header.kind != FrameKind::kNode || proto::decode_node(f, &m) != proto::DecodeError::kOk) {
    ++counters.refused;
    retire(p.conn);
    return;
  }
  if (!opt.psk) {
    accept_node(p, m, false);
    return;
  }
  // Keyed (§5.1): our NODE with a nonce and a proof over theirs; nothing
  // but its AUTH step 3 counts until it proved the key too.
  proto::Node answer;
  answer.worker_id = worker;
  answer.flags = proto::kNodeKeyed;
  if ((m.flags & proto::kNodeFrameMac) != 0) answer.flags |= proto::kNodeFrameMac;  // both MAC control frames (§1.8.2)
  answer.nonce = p.nonce;
  if ((m.flags & proto::kNodeKeyed) == 0) {
    ++counters.unauthenticated;  // it holds no key: told so (a keyed NODE without a proof), then closed
    queue_node(*p.conn, answer);
    p.close_after_flush = true;
    return;
  }
  const proto::ConstBytes theirs = frame_bytes(f);
  answer.flags |= proto::kNodeProof;
  answer.proof = net::node_accept_proof(*opt.psk, theirs, answer.nonce, answer.flags);
  p.hello = m;
  p.hello_bytes.assign(theirs.begin(), theirs.end());
  p.answer_bytes = queue_node(*p.conn, answer);
  p.auth_pending = true;
}

void NodeImpl::on_node_auth(InPeer& p, const proto::Frame& f) {
  proto::Auth a;
  p.auth_pending = false;
  if (f.header.kind != FrameKind::kAuth || proto::decode_auth(f, &a) != proto::DecodeError::kOk ||
      a.step != proto::AuthStep::kNodeProof ||
      !net::proofs_equal(a.proof, net::node_connect_proof(*opt.psk, p.hello_bytes, p.answer_bytes))) {
    ++counters.unauthenticated;  // another key, or something else instead of the proof
    retire(p.conn);
    return;
  }
  if ((p.hello.flags & proto::kNodeFrameMac) != 0) {
    p.conn->start_frame_mac(net::node_frame_keys(*opt.psk, p.hello_bytes, p.answer_bytes, frame_bytes(f), false));
  } else {
    ++counters.frames_unmaced;  // an older node: its frames after the exchange are not MACed
  }
  p.hello_bytes = {};
  p.answer_bytes = {};
  accept_node(p, p.hello, true);
}

void NodeImpl::accept_node(InPeer& p, const proto::Node& m, bool answered) {
  p.node_seen = true;
  p.worker = m.worker_id;
  proto::Node answer;
  answer.worker_id = worker;
  if ((m.flags & proto::kNodeChannel) == 0 || !mux.enabled) {
    // One stream's own connection (the per-stream path), or a channel this
    // node does not take (its mux is off: every ATTACH is answered tcp).
    p.per_stream = (m.flags & proto::kNodeChannel) == 0;
    // A control connection for per-stream attaches stays pending (under the
    // per-source cap and the hello deadline) until an ATTACH on it is
    // answered ok: a NODE alone costs a stranger nothing (review helper-28).
    if (!answered) queue_node(*p.conn, answer);
    return;
  }
  if (channels_by_source[p.source] >= opt.max_channels_per_source) {
    ++counters.refused;  // one address holds only so many of them
    ++counters.refused_by_source;
    retire(p.conn);
    return;
  }
  // One channel per epoch: the epoch names its ring and session (a second
  // NODE with a live channel's epoch is a stranger's, or a broken peer's).
  // And none on a serve whose owner is known: a NODE naming the serve a
  // live channel mirrors, once that channel carried a batch of its own
  // NODE's epoch, is another process on the owner's address naming a port
  // it does not own (it would take the serve's connection places: review
  // helper-31). Before that, which of them owns the serve shows at its
  // first batch: the others' channels end on it (apply_ingress).
  for (const auto& q : in) {
    if (q.get() != &p && q->receiver && !q->dead && !q->failed && q->conn != nullptr &&
        (q->epoch == m.channel_epoch ||
         (q->source == p.source && q->channel_port == m.channel_port && q->receiver->stats().batches != 0))) {
      ++counters.refused;
      ++counters.refused_channel_taken;
      retire(p.conn);
      return;
    }
  }
  const auto channels = std::count_if(in.begin(), in.end(), [](const auto& q) { return q->receiver && !q->dead; });
  if (static_cast<uint64_t>(channels) >= opt.max_channels && !evict_idle_channel()) {
    ++counters.refused;  // full (a mirror session and a ring each: bounded), none idle
    retire(p.conn);
    return;
  }
  ++channels_by_source[p.source];
  p.channel_counted = true;
  p.epoch = m.channel_epoch;
  p.channel_port = m.channel_port;
  p.receiver = std::make_unique<mux::PeerReceiver>(mux);
  // Its batches carry this epoch: any other came through a serve this
  // connection's NODE named but its peer does not own (apply_ingress ends it).
  p.receiver->pin_epoch(m.channel_epoch);
  // Mirror its channel: the serve on the connection's own address (never
  // one a stranger names elsewhere), into a ring of our own. The session is
  // placed once mu is released (place_mirror), and our NODE answers then.
  const net::Endpoint peer{p.source, 0};  // the connection's own (taken at accept: no getpeername under mu)
  p.ring_path = ring::ring_path(absl::StrFormat("rf%d-mux-in-%016x", pid, m.channel_epoch), opt.ring_dir);
  engine::MirrorSpec spec;
  spec.name = absl::StrFormat("mux-in-%016x", m.channel_epoch);
  spec.owner = opt.instance_id;
  spec.port = opt.port.name;
  spec.options.source = net::Endpoint{peer.ip, m.channel_port};
  spec.options.ring = p.ring_path;
  spec.options.dir = opt.ring_dir;
  spec.options.from = control::MirrorOptions::From::kOldest;
  spec.options.unicast = true;
  spec.options.expected_schema = kChannelSchema;
  spec.options.channel_token = m.channel_epoch;  // a serve whose owner's NODE announced another epoch refuses it
  spec.options.local_ip = opt.port.ip;
  // From the address the peer knows us by (its channel's serve takes only
  // that one), not the route's source on a host of several addresses.
  spec.options.tcp_from_ip = opt.control.ip;
  // A HEALTH a second, not ten: each woke the owner's node thread, and a
  // channel's loss shows by its NAKs and its liveness by the mux's own
  // (the serve's silence timeout is 5 s).
  spec.options.health_interval_ns = 1'000'000'000;
  spec.options.psk = opt.psk;  // set: the source must prove the key, and so must we
  spec.options.worker.reader_wake = &ready;  // its commits wake a reader waiting on the node's descriptor
  spec.options.worker.rx_faults = opt.channel_rx_faults;  // tests: none unless set
  const uint64_t arena = channel_arena();
  spec.options.max_ring_bytes = uint64_t{opt.channel_records} * sizeof(ring::BlobDescriptor) + arena;
  spec.options.lazy_ring = true;  // its pages as batches land, not all before the first
  p.mirror_wanted = std::move(spec);
  p.node_answer_owed = !answered;
  p.receiver->set_readable_hook(&NodeImpl::on_readable, this);
  p.receiver->set_ended_hook(&NodeImpl::on_ended, this);
  p.receiver->set_claim_hook(&NodeImpl::on_claim, this, &p);  // the InPeer outlives its receiver
}

bool NodeImpl::place_mirror(InPeer& p) {
  engine::MirrorSpec spec = std::move(*p.mirror_wanted);
  p.mirror_wanted.reset();
  const std::string name = spec.name;
  auto placed = engine->add_mirror(std::move(spec));
  if (!placed.ok()) {
    log(absl::StrCat("channel from ", p.worker, ": ", placed.status().message()));
    engine->unwatch(p.conn->fd());
    p.conn.reset();  // the conductor ends the peer at its next pass (no channel, no mirror to remove)
    return false;
  }
  p.mirror = *placed;
  p.mirror_name = name;
  if (p.node_answer_owed) {
    proto::Node answer;
    answer.worker_id = worker;
    queue_node(*p.conn, answer);
  }
  std::lock_guard l(mu);
  ++counters.peers_in;
  return true;
}

void NodeImpl::on_stream_frame(InPeer& p, const proto::Frame& f) {
  TcpStreamIn& t = *p.stream;
  if (t.ended || f.header.seq != t.next_frame || f.body.size() > mux.slot_byte_budget) {
    ++counters.frames_rejected;  // out of order, after its end, or larger than a slot may hold
    if (!t.ended) tcp_end(t, mux::EndReason::kProtocolError);
    return;
  }
  ++t.next_frame;
  if ((f.header.flags & proto::kStreamTerminal) != 0) {
    Item end{Item::Kind::kFinished, 0, {}};
    end.frames = t.next_frame - 1;
    tcp_item(t, std::move(end));
    t.ended = true;
  } else {
    tcp_item(t, Item{Item::Kind::kData, 0, std::vector<std::byte>(f.body.begin(), f.body.end())});
    ++counters.tcp_records_in;
  }
}

void NodeImpl::tcp_item(TcpStreamIn& t, Item item) {
  const bool was_empty = t.items.empty();
  t.bytes += item.bytes.size();
  t.items.push_back(std::move(item));
  if (was_empty && t.owner != nullptr) stream_readable(t.owner);
  items_ready();
}

void NodeImpl::tcp_end(TcpStreamIn& t, mux::EndReason why) {
  Item end{Item::Kind::kDropped, 0, {}};
  end.reason = why;
  end.frames = t.next_frame;
  tcp_item(t, std::move(end));
  t.ended = true;
}

void NodeImpl::on_attach_request(InPeer& p, const proto::Frame& f) {
  proto::AttachRequest req;
  if (!decode_attach(f, &req)) {
    ++counters.frames_rejected;
    return;
  }
  auto it = anchors.find(req.anchor_id);
  AnchorState* a = it == anchors.end() ? nullptr : it->second.get();
  const bool known = a != nullptr && !a->cancelled;
  if (p.per_stream) {
    if (p.stream != nullptr) {  // one stream per connection
      ++counters.frames_rejected;
      if (!p.stream->ended) tcp_end(*p.stream, mux::EndReason::kProtocolError);
      retire(p.conn);
      return;
    }
    req.supported_keys &= proto::kTransportTcp;  // this connection is the stream: tcp is the only answer
  }
  proto::AttachResponse resp = mux::answer(req, mux, known);
  if (p.per_stream) {
    if (resp.status != proto::AttachStatus::kOk) {
      // unknown anchor: answered below, then closed
    } else if (req.resume_session != 0) {
      resp.status = proto::AttachStatus::kRefused;  // a resume is the mux's (a held stream is a channel's)
      ++counters.resumes_refused;
    } else if (a->kind == AnchorKind::kSingleSender && a->attached_once) {
      resp.status = proto::AttachStatus::kRefused;
    } else {
      p.stream = std::make_shared<TcpStreamIn>();
      p.stream->window = mux.initial_credit;
      p.stream->byte_budget = mux.slot_byte_budget;
      settle(p);  // an attached stream: useful
      a->attached_once = true;
      a->ticket.session = 0;  // an ATTACH answered ok spends the ticket (PROTOCOL.md §5.2.1): it never lapses
      AnchorStream* s = add_stream(*a, req.session_id);
      s->tcp = p.stream;
      p.stream->owner = s;
      ++counters.tcp_streams_in;
    }
    ++(resp.status == proto::AttachStatus::kOk ? counters.attaches_answered : counters.attaches_refused);
    queue_attach(*p.conn, resp);
    p.close_after_flush = p.stream == nullptr;  // refused: the connection has no other use
    return;
  }
  if (p.receiver == nullptr && resp.transport_key == proto::kTransportMux) {
    resp = mux::answer(req, mux::MuxConfig{}, known);  // no channel here: the per-stream path
  }
  const uint64_t now = monotonic_ns();
  const bool resume = req.resume_session != 0;
  if (resume && (!known || resp.status != proto::AttachStatus::kOk || resp.transport_key != proto::kTransportMux ||
                 !resume_matches(*a, req.resume_session, now))) {
    // No such held stream here (an unknown anchor, none held, another
    // session, the window closed, or not the mux): nothing moves.
    if (resp.status == proto::AttachStatus::kOk) resp.status = proto::AttachStatus::kRefused;
    ++counters.resumes_refused;
  }
  if (!resume && known && a->kind == AnchorKind::kSingleSender && a->attached_once) resp.status = proto::AttachStatus::kRefused;
  // A tcp answer here registers nothing: the producer attaches again on
  // the stream's own connection (§5.5).
  if (resp.status == proto::AttachStatus::kOk && resp.transport_key == proto::kTransportMux) {
    AnchorStream* as = add_stream(*a, req.session_id);
    mux::PeerReceiver::Stream* s = p.receiver->expect(req.anchor_id, req.session_id, resp.initial_credit, now, as, &a->spare_rx);
    if (s == nullptr) {
      resp.status = proto::AttachStatus::kRefused;  // max_streams_per_peer registered
      remove_stream(as);
    } else {
      p.carried_stream = true;
      a->attached_once = true;
      a->ticket.session = 0;  // spent by the ATTACH (§5.2.1): no lapse, no second end at its deadline
      as->peer = p.shared_from_this();
      as->stream = s;
      if (resume) {
        resp.resumed = true;
        resp.resume_at = a->resume_frames;
        take_over(*a, as);
      }
    }
  }
  if (resp.status == proto::AttachStatus::kOk) settle(p);  // it attached something: useful (a channel's is already)
  ++(resp.status == proto::AttachStatus::kOk ? counters.attaches_answered : counters.attaches_refused);
  queue_attach(*p.conn, resp);
}

mux::PeerReceiver::Stream* NodeImpl::claim_ticket(InPeer& p, uint64_t anchor, uint64_t session, uint64_t now) {
  auto it = anchors.find(anchor);
  if (it == anchors.end()) return nullptr;
  AnchorState& a = *it->second;
  // Spent, never given, cancelled, or a single-sender anchor an ATTACH
  // already took: the OpenSlot is answered unknown (its sender closes).
  if (a.cancelled || a.ticket.session == 0 || a.ticket.session != session ||
      (a.kind == AnchorKind::kSingleSender && a.attached_once)) {
    return nullptr;
  }
  if (!p.receiver->has_room()) return nullptr;  // max_streams_per_peer registered: the ticket stays good
  // The terms are the ones this node put in the ticket, not anything the
  // OpenSlot says: the receiver enforces its own budgets, and this credit.
  AnchorStream* as = add_stream(a, session);
  mux::PeerReceiver::Stream* s = p.receiver->expect(anchor, session, a.ticket.credit, now, as, &a.spare_rx);
  if (s == nullptr) {  // (room checked: only a pair registered already, which a spent ticket rules out)
    remove_stream(as);
    return nullptr;
  }
  a.attached_once = true;
  a.ticket.session = 0;  // spent: a second OpenSlot naming it is unknown
  p.carried_stream = true;
  as->peer = p.shared_from_this();
  as->stream = s;
  ++counters.tickets_claimed;
  return s;
}

size_t NodeImpl::apply_ingress(InPeer& p, size_t max, bool by_reader, bool* wake_node) {
  if (p.dead || p.failed || !p.ingress) return 0;  // dead first: the conductor unmaps a dead peer's ring outside mu
  const uint64_t before = p.applied;
  const uint64_t now = monotonic_ns();  // one clock read for the turn
  size_t n = 0;
  for (; n < max; ++n) {
    uint32_t len = 0;
    const ring::ReadResult r = p.ingress->try_read(p.record.data(), &len);
    if (r.lost != 0 || p.ingress->holes_skipped() != 0) {  // a record the channel never delivered: it is broken
      p.failed = true;
      p.failed_why = "its channel lost a record";
      ++counters.channel_failures;
      *wake_node = true;
      return n;
    }
    if (!r.ok) break;
    const mux::PeerReceiver::Applied applied = p.receiver->apply({p.record.data(), len}, now, nullptr);
    p.applied = r.seq + 1;
    if (applied == mux::PeerReceiver::Applied::kForeign) {  // not its NODE's owner's channel: nothing more of it counts
      p.failed = true;
      p.failed_why = "its batches carry another epoch than its NODE's";
      ++counters.channel_failures;
      *wake_node = true;
      return n + 1;
    }
  }
  (by_reader ? counters.applied_by_readers : counters.applied_by_node) += n;
  // The position becomes owed: the node thread reports it at once past
  // 1/16 of the ring (the owner's admission needs it), or when none went
  // for kPositionEveryNs (else the look it planned after its last report
  // takes it). That second wake a reader puts off until it is done with
  // these items (wake_owed): on a CPU the two share, the woken conductor
  // ran before the poll returned them (~200 µs at a burst of first
  // tokens on this VM, perf/README.md). Closes are owed at once.
  if (n != 0 && p.applied - p.reported >= opt.channel_records / 16) {
    *wake_node = true;
  } else if (n != 0 && before == p.reported && now - p.reported_ns >= kPositionEveryNs) {
    if (by_reader) {
      wake_owed.store(true, std::memory_order_relaxed);
    } else {
      *wake_node = true;
    }
  }
  if (p.receiver->closes_owed()) *wake_node = true;
  return n;
}

bool NodeImpl::open_ingress(InPeer& p) {
  // The mirror creates the ring once the source's GEOMETRY is in (on this
  // thread, in the engine's turn): until then there is nothing to open.
  if (access(p.ring_path.c_str(), F_OK) != 0) return false;
  ring::RingExpectation want;
  want.blob = true;
  want.schema_signature = kChannelSchema;
  // The mirror's own mapping when the engine's session has it (a share:
  // one set of page tables for its writer and our reader, warmed once).
  absl::StatusOr<ring::RingFile> f = absl::NotFoundError("no mirror mapping");
  if (const auto& mapped = p.mirror->control->ring();
      mapped && mapped->blob() && mapped->header().schema_signature == kChannelSchema) {
    f = mapped->share();
  } else {
    f = ring::RingFile::open(p.ring_path, want);
  }
  if (!f.ok()) return false;
  ring::RingFile lazy = f->share();  // reserved by the conductor kReserveAfterNs from now
  auto cons = ring::BlobConsumer::attach(std::move(*f), ring::StartPosition::oldest(), "mux-reader");
  if (!cons.ok()) {
    // No reader place (the registry full of live readers): the channel
    // would deliver and nothing read it. It ends, saying why.
    log(absl::StrFormat("peer %016x: its channel ring %s has no reader place (%s): every place is a live process's; "
                        "`ringfire stat` on the ring lists them",
                        p.worker, p.ring_path, cons.status().code() == absl::StatusCode::kResourceExhausted
                                                   ? "its registry is full" : std::string(cons.status().message())));  // outside mu
    std::lock_guard l(mu);
    p.failed = true;
    p.failed_why = "its channel's ring has no reader place";
    return false;
  }
  ring::LazyBytes record(cons->max_blob());  // 2 MiB zeroed was 12 ms of page faults on the first token's path
  {
    std::lock_guard l(mu);
    p.record = std::move(record);
    p.ingress.emplace(std::move(*cons));
    settle(p);  // its channel is up
    // Records the mirror committed before the ring was open here (the first
    // batches: a producer's first tokens) woke no reader that could apply
    // them: one looks now, not at the next commit.
    if (p.ingress->published() > p.ingress->cursor()) items_ready();
  }
  p.ingress_file.emplace(std::move(lazy));
  p.ingress_ns = monotonic_ns();
  return true;
}

// evict_idle_channel: a full node makes room by ending the oldest channel
// that never carried a stream though the hello deadline passed: channels
// that attach nothing, from however many addresses, must not keep
// producers out (review helper-28). What its ring holds is applied first,
// as before a ticket is judged lapsed: an OpenSlot there claims its
// ticket, and that channel carries a stream after all. False: none such.
bool NodeImpl::evict_idle_channel() {
  const uint64_t now = monotonic_ns();
  std::vector<InPeer*> idle;
  for (const auto& q : in) {
    if (q->receiver && !q->dead && !q->carried_stream && now - q->accepted_ns > opt.hello_timeout_ns) idle.push_back(q.get());
  }
  std::sort(idle.begin(), idle.end(), [](const InPeer* a, const InPeer* b) { return a->accepted_ns < b->accepted_ns; });
  for (InPeer* q : idle) {
    bool owed = false;
    if (apply_ingress(*q, SIZE_MAX, false, &owed) != 0) items_ready();
    if (q->carried_stream) continue;
    ++counters.channels_evicted;
    end_in(*q, "it carried no stream, and a new channel wanted its place");
    return true;
  }
  return false;
}

void NodeImpl::settle(InPeer& p) {
  if (!p.pending) return;
  p.pending = false;
  --pending_total;
  if (auto it = pending_by_source.find(p.source); it != pending_by_source.end() && --it->second == 0) pending_by_source.erase(it);
}

bool NodeImpl::resume_matches(const AnchorState& a, uint64_t session, uint64_t now) {
  return a.kind == AnchorKind::kSingleSender && !a.cancelled && a.resume_session != 0 && a.resume_session == session &&
         now < a.resume_deadline_ns;
}

void NodeImpl::take_over(AnchorState& a, AnchorStream* next) {
  a.frames_base = a.resume_frames;
  next->session = a.resume_label;  // one stream to the reader: its items keep the session they had
  next->resumed = true;
  if (a.resume_from != nullptr) {  // its items are still unread: `next` waits for them
    a.resume_from->superseded_by = next;
    next->behind = true;
  }
  a.resume_from = nullptr;
  a.held_end.reset();  // read already: it is not news now
  a.resume_session = 0;  // once: expire_resumes lets the anchor go
  ++counters.resumes_answered;
}

void NodeImpl::stream_ended(AnchorStream* s, mux::EndReason reason, uint32_t frames) {
  if (opt.resume_window_ns == 0 || s == nullptr || stopping.load(std::memory_order_relaxed)) return;
  if (reason != mux::EndReason::kChannelLost && reason != mux::EndReason::kSilent) return;  // the channel's fault only
  AnchorState& a = *s->anchor;
  if (a.kind != AnchorKind::kSingleSender || a.cancelled || a.resume_session != 0 || s->superseded_by != nullptr) return;
  a.resume_session = s->wire_session;
  a.resume_label = s->session;
  a.resume_frames = a.frames_base + frames;
  a.resume_deadline_ns = monotonic_ns() + opt.resume_window_ns;
  a.resume_from = s;
  resuming.emplace_back(a.shared_from_this(), a.resume_deadline_ns);
  ++counters.resumes_held;
}

void NodeImpl::expire_resumes(uint64_t now) {
  while (!resuming.empty()) {
    auto& [a, deadline] = resuming.front();
    const bool live = a->resume_session != 0 && a->resume_deadline_ns == deadline;  // else taken over, cancelled, held again
    if (live && now < deadline) return;  // the rest expire later (in deadline order)
    if (live) {
      ++counters.resumes_expired;
      a->resume_session = 0;
      a->resume_from = nullptr;  // an end not yet read is read as it comes
      if (a->held_end) read_alone(*a, std::move(*a->held_end));  // the end read while the resume was awaited
      a->held_end.reset();
    }
    resuming.pop_front();
  }
}

void NodeImpl::read_alone(AnchorState& a, Item end) {
  // Read as the per-stream path's items are: a stream whose one item is queued.
  auto t = std::make_shared<TcpStreamIn>();
  t->window = UINT32_MAX;
  t->ended = true;
  t->items.push_back(std::move(end));
  AnchorStream* s = add_stream(a, t->items.back().session);
  s->tcp = t;
  t->owner = s;
  stream_readable(s);
  items_ready();
}

void NodeImpl::expire_tickets(uint64_t now) {
  while (!tickets_due.empty() && tickets_due.front().second <= now) {
    const std::shared_ptr<AnchorState> a = tickets_due.front().first.lock();
    tickets_due.pop_front();
    if (a == nullptr || a->ticket.session == 0) continue;  // closed, or claimed
    const uint64_t session = a->ticket.session;
    a->ticket.session = 0;  // lapsed: claim_ticket refuses it from now on
    ++counters.tickets_expired;
    // A producer that reached it by ATTACH instead: that stream's end is the anchor's.
    if (a->cancelled || a->attached_once || !a->streams.empty()) continue;
    read_alone(*a, Item{Item::Kind::kDropped, session, {}, mux::EndReason::kNeverOpened, 0});
  }
}

void NodeImpl::end_in(InPeer& p, const std::string& why) {
  // What the channel delivered before it ended is the streams' (a producer
  // that finished and closed is finished, not dropped): applied first.
  bool owed = false;
  if (apply_ingress(p, SIZE_MAX, false, &owed) != 0) items_ready();
  p.dead = true;
  settle(p);
  // A per-stream connection cut before its terminal (a backlog, a failed
  // write, a frame out of place): its stream ends, once.
  if (p.stream && !p.stream->ended) tcp_end(*p.stream, mux::EndReason::kProducerGone);
  if (p.channel_counted) {
    p.channel_counted = false;
    if (auto it = channels_by_source.find(p.source); it != channels_by_source.end() && --it->second == 0) {
      channels_by_source.erase(it);
    }
  }
  if (p.receiver) {
    p.receiver->peer_lost();  // every registered stream: exactly one Dropped (a resume may hold it: stream_ended)
    const mux::PeerReceiverStats& s = p.receiver->stats();
    in_ended = sum(in_ended, s);
  }
  // Its connection closes, and its mirror session and ring go, once mu is
  // released (teardown); the mirror's counters outlive it.
  retire(p.conn);
  p.mirror_wanted.reset();
  if (p.mirror != nullptr && p.mirror->control->stats() != nullptr) refresh_mirror_counts(p);
  counters = sum(counters, p.mirror_counts);  // every link's: the last its session had, if its link went first
  p.mirror_counts = p.mirror_counts_past = p.mirror_counts_link = NodeStats{};
  retiring_in.push_back(p.shared_from_this());
  ++counters.peers_lost;
  // An orderly close is not news; a channel that failed is.
  if (p.receiver && why != kClosedByPeer && why != kNodeStops) {
    log_later(absl::StrFormat("peer %016x: channel ended: %s", p.worker, why));
  }
  items_ready();
}


}  // namespace ringfire::node
