// owner_side.cc — the producer's side of the Node: channels served out
// (the egress ring, its serve session, admission against the peer's
// position), the control connection's answers (NODE, ATTACH, MUXCTL), and
// the per-stream path's connections. Node thread, and flush_batch()'s
// caller for pump_out (under mu).
#include <sys/socket.h>
#include <unistd.h>

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

namespace ringfire::node {

// ---- the owner side: a peer this node produces to -----------------------

bool NodeImpl::setup_out(OutPeer& p) {
  // The egress ring: half its records may be unapplied at the peer, each at
  // most one record cap, so the arena never overwrites what the peer still
  // needs (the admission check in pump_out keeps it so). Made here, on the
  // conductor outside mu (a file, a mapping, a session: system calls), and
  // installed under mu at the end.
  const uint64_t id = ++egress_made;
  ring::RingOptions ro;
  ro.name = absl::StrFormat("rf%d-mux-out-%016x-%d", pid, worker, id);
  ro.dir = opt.ring_dir;
  ro.capacity = opt.channel_records;
  ro.slot_size = sizeof(ring::BlobDescriptor);
  ro.arena_size = channel_arena();
  ro.flags = ring::kFlagBlob | ring::kFlagLazy;  // its pages as batches are written, not all at set-up
  ro.schema_signature = kChannelSchema;
  p.ring_path = ring::ring_path(ro.name, ro.dir);
  auto file = ring::RingFile::create(ro);
  if (!file.ok()) {
    log(absl::StrCat("egress ring: ", file.status().message()));
    return false;
  }
  p.egress_file = file->share();
  auto prod = ring::BlobProducer::attach(std::move(*file));
  if (!prod.ok()) {
    unlink(p.ring_path.c_str());
    return false;
  }
  prod->defer_wakes();  // it is published under mu: its reader is woken after (run_egress)
  engine::ServeSpec spec;
  spec.name = absl::StrFormat("mux-out-%016x-%d", worker, id);
  spec.owner = opt.instance_id;
  spec.port = opt.port.name;
  spec.ring = p.ring_path;
  spec.from_oldest = true;
  spec.bind_ip = opt.port.ip;
  spec.unicast = true;
  spec.worker.session = static_cast<uint8_t>(p.epoch | 1);
  spec.worker.mtu = opt.port.mtu;
  spec.worker.pace_ns = 0;  // a batch is the unit: it leaves at once
  spec.pace_given = true;
  spec.worker.writer_pokes = true;  // pump_out's runs poke the worker after each pass
  // A pass is the unit: one step takes all of it (a 4,096-stream pass is
  // ~70 batches; at 32 a step, the rest waited for the worker to be woken
  // by a timer the writer armed: a timerfd_settime and a wake-up a pass).
  spec.worker.burst_records = 1024;
  // One heartbeat 1 ms after a pass exposes its lost last datagram; the
  // next pass (a decode step is ~20 ms) or the mux's own liveness says the
  // rest, so the next heartbeat waits 64 ms, not 2 (a wake-up of the
  // peer's worker saved two or three times per pass).
  spec.worker.heartbeat_growth = 64;
  // Passes at a steady cadence (decode steps): the first heartbeat after a
  // pass waits until just past the next one is due, so none goes between
  // them (each cost the peer a wake-up per pass); a lost last datagram
  // shows by the next pass's sequence, or by that heartbeat once the
  // passes stop.
  spec.worker.heartbeat_follows_cadence = true;
  // Its TCP listener is on the control address (a kernel one: a DPDK
  // port's address may exist only on its own link); DATA leaves the port.
  spec.control.listen = net::Endpoint{opt.control.ip, 0};
  spec.control.log = [this](const std::string& line) { log(line); };
  // Served to the peer only: its mirror connects from the address this
  // node's control connection reached (a stranger that finds the port
  // cannot read the channel, nor hold one of its connections).
  spec.control.only_from = p.addr.ip;
  // ... and to the mirror of the channel this NODE announces: a NODE from
  // another process on this host naming this serve gets its consumer's
  // mirror refused (the token is that NODE's epoch, not ours).
  spec.control.channel_token = p.epoch;
  spec.control.max_connections = 4;  // the peer's mirror, and its reconnects while the old one times out
  if (opt.psk) {  // one salt per channel: its datagrams are MACed under the key derived from it
    spec.control.salt = net::random_nonce();
    spec.worker.data_key = net::data_key(*opt.psk, spec.control.salt);
    spec.control.psk = opt.psk;
  }
  auto placed = engine->add_serve(std::move(spec), prod->file().share());
  if (!placed.ok()) {
    log(absl::StrCat("egress serve: ", placed.status().message()));
    unlink(p.ring_path.c_str());
    return false;
  }
  p.serve_name = (*placed)->spec.name;
  dataplane::ServeLink* link = (*placed)->link;
  // Release: pairs with the serve's acquire loads of gate (ServeSession::step);
  // gated: batches leave a pass at a time.
  link->gate.store(prod->next_seq(), std::memory_order_release);
  proto::Node m;
  m.flags = proto::kNodeChannel;
  m.worker_id = worker;
  m.channel_epoch = p.epoch;
  m.channel_port = (*placed)->control->listening().port;
  p.node_sent = queue_node(*p.conn, keyed_node(m, opt.psk));  // written at the pass's end
  std::vector<uint64_t> cum(opt.channel_records, 0);
  std::lock_guard l(mu);
  p.egress.emplace(std::move(*prod));
  p.cum_bytes = std::move(cum);
  p.serve_link = link;
  ++counters.peers_out;
  return true;
}

void NodeImpl::step_out(OutPeer& p, uint64_t now) {
  if (p.setup_failed) {
    end_out(p, "its channel could not be set up");
    return;
  }
  if (p.serve_link == nullptr) return;  // set up at the next pass
  const net::TcpConn::Next n = p.conn->read_frames(limits, [&](const proto::Frame& f, proto::ConstBytes) {
    on_out_frame(p, f);
    return p.dead ? net::TcpConn::Taken::kGone : net::TcpConn::Taken::kNext;
  });
  if (p.dead) return;
  if (n == net::TcpConn::Next::kForged) {
    ++counters.bad_frame_mac;
    end_out(p, "a control frame failed its MAC (forged, replayed or altered in flight)");
    return;
  }
  if (n != net::TcpConn::Next::kNeedMore) {
    ++counters.frames_rejected;
    end_out(p, "it sent a malformed frame");
    return;
  }
  if (!p.open_read) {
    end_out(p, kClosedByPeer);
    return;
  }
  // Ready once the peer's mirror streams the channel by UDP: the first
  // tokens of a new peer's streams then never wait for the channel's set-up
  // (they would arrive by its TCP catch-up).
  if (!p.channel_ready && p.serve_link->stats.unicast_mirrors.get() > 0) {
    p.channel_ready = true;
    attach_owed = true;
  }
  // A peer that took the connection and never answered our NODE, or whose
  // mirror never took the channel: its senders (a ticket's, open before
  // the channel is) must not wait for it forever. (`now` may predate a
  // peer attach() made during this pass.)
  if (!p.channel_ready && now > p.created_ns && now - p.created_ns > opt.attach_timeout_ns) {
    end_out(p, absl::StrCat(p.node_seen ? "its mirror did not take the channel" : "it did not answer our NODE",
                            " within ", opt.attach_timeout_ns / 1'000'000, " ms"));
    return;
  }
  if (p.node_seen) {
    for (auto& a : p.attaches) {
      if (a->sent || a->done) continue;
      if (a->ticket.session != 0) {  // no request: it opens now (the NODE answer was its wait)
        open_ticket(p, *a);
        attach_owed = true;
        continue;
      }
      proto::AttachRequest req{a->anchor, a->session, mux::supported_keys(mux)};
      req.resume_session = a->resume_session;
      queue_attach(*p.conn, req);
      a->sent = true;
    }
    std::erase_if(p.attaches, [](const std::shared_ptr<PendingAttach>& a) { return a->done; });  // the tickets opened
  }
  // No batch before the peer's mirror takes the channel by UDP: the first
  // (the OpenSlots, and the first tokens with them) would go before the
  // mirror is there, and the next batch, by UDP, would wait behind it for a
  // NAK and its repair by TCP.
  if (p.broken || (p.channel_ready && !pump_out(p, now, &conductor_runs))) {
    end_out(p, "a batch larger than its ring's largest blob");
    return;
  }
  if (p.write_failed || p.conn->pending() > kMaxConnBacklog) end_out(p, "it does not read its control connection");
}

// pump_out publishes the batches that are due into the egress ring, while
// the peer has applied enough of it: neither half the ring's records nor
// half its arena may be ahead of what the peer applied, so the ring never
// overwrites a batch it needs. Under mu, on the conductor or (Manual) on
// flush_batch()'s caller; memory only (the ring's reader is woken, and its
// worker run, by run_egress once mu is released). False if a batch could
// not be published.
bool NodeImpl::pump_out(OutPeer& p, uint64_t now, EgressRuns* runs) {
  const uint64_t arena_half = channel_arena() / 2;
  bool published = false;
  const uint64_t closes = sender_closes(*p.sender);  // build() kills stalled slots
  for (;;) {
    const uint64_t applied_bytes = p.applied == 0 ? 0 : p.cum_bytes[(p.applied - 1) % p.cum_bytes.size()];
    if (p.egress->next_seq() - p.applied >= opt.channel_records / 2 ||
        p.published_bytes - applied_bytes + buf.size() > arena_half) {
      ++counters.admission_waits;
      break;
    }
    const size_t n = p.sender->build(now, {buf.data(), buf.size()});
    if (n == 0) break;
    const uint64_t seq = p.egress->next_seq();
    if (!p.egress->publish({buf.data(), n})) return false;  // cannot be: the arena holds four of the largest
    p.published_bytes += n;
    p.cum_bytes[seq % p.cum_bytes.size()] = p.published_bytes;
    ++counters.channel_batches;
    published = true;
  }
  if (sender_closes(*p.sender) != closes) closes_owed.store(true, std::memory_order_relaxed);  // told after mu
  // The pass's batches are all in: open the gate to them at once (one
  // burst); run_egress gets them out.
  if (published && p.serve_link != nullptr) {
    p.serve_link->gate.store(p.egress->next_seq(), std::memory_order_release);  // pairs with the worker's acquire
    p.runners.fetch_add(1, std::memory_order_relaxed);  // under mu, never once dead: teardown waits for it
    runs->push_back(EgressRun{&p, p.serve_link, &*p.egress});
  }
  return true;
}

void NodeImpl::run_egress(const EgressRuns& runs) {
  for (const EgressRun& r : runs) {
    // A parked reader of the ring (a DPDK worker with this serve alone
    // parks on it) is woken; a kernel-port worker asleep in poll() is
    // stepped here, on this thread (the batches leave with no wake-up on
    // their path); a busy one finds them; a DPDK one is poked.
    r.egress->wake_parked();
    dataplane::run_worker(*r.link);
    // Release: pairs with teardown's acquire load (it frees the ring and the serve).
    r.peer->runners.fetch_sub(1, std::memory_order_release);
  }
}

void NodeImpl::on_out_frame(OutPeer& p, const proto::Frame& f) {
  if (f.header.kind == FrameKind::kNode) {
    proto::Node m;
    if (p.node_seen || proto::decode_node(f, &m) != proto::DecodeError::kOk) {
      ++counters.frames_rejected;
      end_out(p, "its NODE did not decode");
      return;
    }
    if (m.worker_id != p.worker) {
      end_out(p, absl::StrFormat("it is worker %016x, not the handle's %016x", m.worker_id, p.worker));
      return;
    }
    if (std::string why = prove_back(*p.conn, opt.psk, p.node_sent, f, m); !why.empty()) {
      ++counters.unauthenticated;
      end_out(p, why);
      return;
    }
    p.node_seen = true;
    return;
  }
  if (f.header.kind == FrameKind::kAttach) {
    proto::AttachResponse resp;
    if (!decode_attach(f, &resp)) {
      ++counters.frames_rejected;
      return;
    }
    auto it = std::find_if(p.attaches.begin(), p.attaches.end(), [&](const std::shared_ptr<PendingAttach>& a) {
      return a->sent && a->anchor == resp.anchor_id && a->session == resp.session_id;
    });
    if (it == p.attaches.end()) {
      ++counters.frames_rejected;  // an answer to nothing we asked
      return;
    }
    std::shared_ptr<PendingAttach> a = *it;
    p.attaches.erase(it);
    a->done = true;
    auto choice = mux::choose(resp, mux);
    if (!choice.ok()) {
      a->status = choice.status();
    } else if (choice->kind != mux::PathChoice::Kind::kMux) {
      a->tcp_chosen = true;  // the caller attaches again on the stream's own connection
    } else if (a->resume_session != 0 && !resp.resumed) {
      // An ok without resume_at: a consumer that does not know resumes took
      // it for a new stream. Not opened: its registration lapses there.
      a->status = absl::FailedPreconditionError("attach: the consumer answered a resume as a new stream (it has no resumes)");
    } else if (auto slot = (p.sender->set_peer_budget(choice->peer_byte_budget),
                            p.sender->open(a->anchor, a->session, choice->credit, monotonic_ns(), choice->slot_byte_budget));
               !slot) {
      a->status = absl::ResourceExhaustedError("max_streams_per_peer streams are open to that peer");
    } else {
      a->slot = *slot;
      a->resume_at = resp.resume_at;
      if (a->abandoned) p.sender->abort(*slot);
    }
    attach_owed = true;
    return;
  }
  if (f.header.kind == FrameKind::kMuxControl) {
    if (f.header.seq > p.egress->next_seq() || f.header.seq < p.applied) {
      ++counters.frames_rejected;  // a position it cannot have
      return;
    }
    p.applied = f.header.seq;
    if (!f.body.empty()) {
      const uint64_t closes = sender_closes(*p.sender);
      p.sender->apply_control(f.body);
      if (sender_closes(*p.sender) != closes) closes_owed.store(true, std::memory_order_relaxed);  // told after the pass
    }
    return;
  }
  ++counters.frames_rejected;
}

void NodeImpl::end_out(OutPeer& p, const std::string& why) {
  p.dead = true;
  closes_owed.store(true, std::memory_order_relaxed);  // its senders are closed: told after mu
  if (p.sender) {
    p.sender->peer_lost();
    out_ended = sum(out_ended, p.sender->stats());
  }
  for (auto& a : p.attaches) {
    a->done = true;
    a->status = absl::UnavailableError(absl::StrCat("the peer is gone: ", why));
  }
  p.attaches.clear();
  attach_owed = true;
  if (p.serve_link) add_serve_counters(*p.serve_link, &counters);  // they outlive the session
  p.serve_link = nullptr;  // no caller uses it again; the conductor removes the session (teardown)
  retiring_out.push_back(p.shared_from_this());
  ++counters.peers_lost;
  // An orderly close is not news (the consumer's node went, or this one stops); a failure is.
  if (why != kClosedByPeer && why != kNodeStops) log_later(absl::StrFormat("peer %016x: channel ended: %s", p.worker, why));
}

// ---- the per-stream TCP path, producer side ------------------------------

void NodeImpl::step_tcp_out(TcpStreamOut& t) {
  std::lock_guard w(t.wmu);
  if (t.conn == nullptr) return;
  if (!t.watched) {
    t.watched = true;
    t.unwatched = !engine->watch(t.conn->fd()).ok();  // then read every pass, next_wait's 200 us looks
  }
  // answer: an attach answered (or failed), under mu; the caller is told after the pass.
  auto answer = [&](absl::Status st, bool attached) {
    std::lock_guard l(mu);
    if (t.attach && !t.attach->done) {
      t.attach->done = true;
      t.attach->status = std::move(st);
      t.attached = attached;
      attach_owed = true;
    }
  };
  auto end = [&](const std::string& why) {
    t.closed = true;
    closes_owed.store(true, std::memory_order_relaxed);  // told after the pass
    answer(absl::UnavailableError(absl::StrCat("per-stream connection: ", why)), false);
    engine->unwatch(t.conn->fd());
    t.conn.reset();
    t.gone.store(true, std::memory_order_relaxed);
  };
  if (t.closed && !t.finished) return end("closed");  // abandoned (a sender dropped without its terminal)
  // What came before a close is read first; only when the last look found it readable.
  const bool open = !(t.unwatched || engine->ready(t.conn->fd())) || t.conn->read_available(64u << 10);
  using Taken = net::TcpConn::Taken;
  bool ended = false;  // end() ran: t.conn is gone
  const net::TcpConn::Next n = t.conn->read_frames(limits, [&](const proto::Frame& f, proto::ConstBytes) {
    auto gone = [&](const std::string& why) {
      end(why);
      ended = true;
      return Taken::kGone;
    };
    if (f.header.kind == FrameKind::kNode && !t.node_seen) {
      proto::Node m;
      if (proto::decode_node(f, &m) != proto::DecodeError::kOk || m.worker_id != t.worker) {
        return gone("the node there is not the handle's");
      }
      if (std::string why = prove_back(*t.conn, opt.psk, t.node_sent, f, m); !why.empty()) {
        {
          std::lock_guard l(mu);
          ++counters.unauthenticated;
        }
        return gone(why);
      }
      t.node_seen = true;
      if (opt.psk) {  // keyed, the ATTACH waited for the peer's proof (and follows ours)
        queue_attach(*t.conn, proto::AttachRequest{t.attach->anchor, t.attach->session, proto::kTransportTcp});
      }
      return Taken::kNext;
    }
    if (f.header.kind == FrameKind::kAttach && !t.attached) {
      proto::AttachResponse resp;
      if (!decode_attach(f, &resp) || resp.session_id != t.attach->session) {
        {
          std::lock_guard l(mu);
          ++counters.frames_rejected;
        }
        return gone("a bad ATTACH answer");
      }
      auto choice = mux::choose(resp, mux);
      if (!choice.ok()) {
        answer(choice.status(), false);
      } else if (choice->kind != mux::PathChoice::Kind::kTcp) {
        answer(absl::FailedPreconditionError("the peer chose the mux on a per-stream connection"), false);
      } else {
        if (resp.slot_byte_budget != 0) t.byte_budget = resp.slot_byte_budget;
        answer(absl::OkStatus(), true);
      }
      if (!t.attached) return gone("refused");
      return Taken::kNext;
    }
    std::lock_guard l(mu);
    ++counters.frames_rejected;  // nothing else comes this way
    return Taken::kNext;
  });
  if (ended) return;
  if (n != net::TcpConn::Next::kNeedMore) {  // malformed, oversized or forged
    {
      std::lock_guard l(mu);
      ++(n == net::TcpConn::Next::kForged ? counters.bad_frame_mac : counters.frames_rejected);
    }
    return end("a malformed frame");
  }
  if (!open) return end("closed by the peer");
  if (!t.conn->flush()) return end("a write failed");
  t.unwritten.store(t.conn->pending() != 0, std::memory_order_relaxed);
  if (t.finished && t.conn->pending() == 0) {
    shutdown(t.conn->fd(), SHUT_WR);  // the terminal is out: the stream is done
    engine->unwatch(t.conn->fd());
    t.conn.reset();
    t.gone.store(true, std::memory_order_relaxed);
  }
}

absl::StatusOr<std::unique_ptr<Sender>> NodeImpl::attach_tcp(std::shared_ptr<NodeImpl> self, const mux::AnchorHandle& h,
                                                             const net::Endpoint& peer) {
  auto fd = net::tcp_connect(peer, static_cast<int>(opt.attach_timeout_ns / 1'000'000), opt.control.ip);
  if (!fd.ok()) return absl::Status(fd.status().code(), absl::StrCat("attach: ", fd.status().message()));
  net::detect_silent_peer(*fd, opt.silent_peer_ms);
  auto t = std::make_shared<TcpStreamOut>();
  t->conn = std::make_unique<net::TcpConn>(*fd);
  t->worker = h.worker;
  t->byte_budget = mux.slot_byte_budget;
  t->attach = std::make_shared<PendingAttach>();
  t->attach->anchor = h.anchor;
  t->attach->session = random_u64();
  proto::Node m;
  m.worker_id = worker;  // no channel: this connection is the stream
  t->node_sent = queue_node(*t->conn, keyed_node(m, opt.psk));
  // Without a key the ATTACH goes with the NODE (no round trip); keyed, once the peer proved it.
  if (!opt.psk) queue_attach(*t->conn, proto::AttachRequest{t->attach->anchor, t->attach->session, proto::kTransportTcp});
  if (!t->conn->flush()) return absl::UnavailableError("attach: the per-stream connection failed");  // nobody else has it yet
  std::shared_ptr<PendingAttach> a = t->attach;
  {
    std::lock_guard l(mu);
    if (stopping.load()) return absl::UnavailableError("attach: the node stops");
    tcp_out.push_back(t);
    ++counters.tcp_streams_out;
  }
  wake();  // the conductor watches the connection
  std::unique_lock l(mu);
  if (!attach_cv.wait_for(l, std::chrono::nanoseconds(opt.attach_timeout_ns), [&] { return a->done; })) {
    a->done = true;
    a->status = absl::DeadlineExceededError("no answer");
    l.unlock();
    {
      std::lock_guard w(t->wmu);
      t->closed = true;  // the conductor closes it
    }
    wake();
    return absl::DeadlineExceededError(absl::StrCat("attach: no answer from ", net::to_string(peer)));
  }
  if (!a->status.ok()) return a->status;
  return std::unique_ptr<Sender>(new Sender(std::move(self), t, a->session));
}

void NodeImpl::open_ticket(OutPeer& p, PendingAttach& a) {
  a.done = true;
  if (a.abandoned) return;  // its caller gave up: nothing opens
  // The ticket is the consumer's answer given in advance: read as one.
  proto::AttachResponse terms;
  terms.anchor_id = a.anchor;
  terms.session_id = a.session;
  terms.transport_key = proto::kTransportMux;
  terms.initial_credit = a.ticket.credit;
  terms.slot_byte_budget = a.ticket.slot_byte_budget;
  terms.peer_byte_budget = a.ticket.peer_byte_budget;
  auto choice = mux::choose(terms, mux);
  if (!choice.ok()) {
    a.status = choice.status();
    return;
  }
  // A ticket is text from outside the control connection: it may lower
  // the budget every stream to this peer shares, never raise it.
  p.sender->limit_peer_budget(a.ticket.peer_byte_budget);
  auto slot = p.sender->open(a.anchor, a.session, choice->credit, monotonic_ns(), choice->slot_byte_budget);
  if (!slot) {
    a.status = absl::ResourceExhaustedError("max_streams_per_peer streams are open to that peer");
    return;
  }
  a.slot = *slot;
  ++counters.tickets_opened;
}


}  // namespace ringfire::node
