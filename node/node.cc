// node.cc — the Node: set-up (its engine, its control listener), the node
// thread's loop (the engine's conductor and every control connection), and
// the API objects (Node, Sender, Anchor). The receiver side is in
// receiver_side.cc, the owner side in owner_side.cc; threads and locks in
// node_impl.h.
#include "node/node.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

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
namespace {


// sweep_dead_rings removes channel rings of ringfire processes that died
// without their clean-up (rf<pid>-mux-*, the pid gone): a kill -9 leaves
// them behind, and nothing else ever would.
void sweep_dead_rings(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = readdir(d)) {
    int pid = 0;
    int used = 0;
    if (std::sscanf(e->d_name, "rf%d-mux-%n", &pid, &used) != 1 || used == 0 || pid <= 0) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) unlink((dir + "/" + e->d_name).c_str());
  }
  closedir(d);
}


}  // namespace

// ---- set-up -------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Node>> Node::create(NodeOptions o) {
  if (o.instance_id.empty()) return absl::InvalidArgumentError("node: instance_id is empty: name the node");
  if (o.control.ip == 0) return absl::InvalidArgumentError("node: control address has no IP: give the address peers reach");
  if (absl::Status st = mux::validate(o.mux); !st.ok()) return st;
  if (o.channel_records < 64 || (o.channel_records & (o.channel_records - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("node: channel_records ", o.channel_records,
                                                   " must be a power of two of at least 64"));
  }
  sweep_dead_rings(o.ring_dir);
  auto impl = std::make_shared<NodeImpl>();
  impl->opt = o;
  impl->worker = mux::worker_id(o.instance_id);
  if (impl->opt.port.ip == 0) impl->opt.port.ip = o.control.ip;
  if (impl->opt.port.name.empty()) impl->opt.port.name = "data";
  const uint16_t mtu = impl->opt.port.mtu;
  if (mtu < 256) return absl::InvalidArgumentError(absl::StrCat("node: port mtu ", mtu, " is below 256"));
  // One batch is one blob record that fits one datagram (no TCP fallback).
  impl->record_cap = mtu - proto::kFrameHeaderBytes - proto::kBlobRecordHeader;
  impl->mux = o.mux;
  impl->mux.max_batch_bytes = std::min(o.mux.max_batch_bytes, impl->record_cap);
  // A batch: up to max_batch_bytes, or one fenced record alone.
  impl->buf.resize(std::max<size_t>(impl->mux.max_batch_bytes,
                                    proto::kBatchHeaderBytes + proto::kRecordHeaderBytes + o.mux.max_record_bytes));
  // A STREAM frame holds one record, at most what a slot may hold.
  impl->limits.allowed[static_cast<uint8_t>(FrameKind::kStream)] = true;
  impl->limits.max_body[static_cast<uint8_t>(FrameKind::kStream)] = o.mux.slot_byte_budget;

  impl->engine = std::make_unique<engine::Engine>([raw = impl.get()](const std::string& s, const std::string& line) {
    // A channel's session starting (" -> RING from seq N over ...") is the
    // node's business, not news; everything else its engine says is.
    if (line.find(" from seq ") != std::string::npos && line.find(" -> ") != std::string::npos) return;
    raw->log(absl::StrCat(s, ": ", line));
  });
  std::string path;
  auto port = engine::open_port(impl->opt.port, [&](const std::string& line) { path = line; });
  if (!port.ok()) return absl::Status(port.status().code(), absl::StrCat("node: data port: ", port.status().message()));
  impl->data_path = (*port)->info().path;
  if (absl::Status st = impl->engine->add_port(impl->opt.port.name, std::move(*port)); !st.ok()) return st;

  auto fd = control::tcp_listen(o.control);
  if (!fd.ok()) return absl::Status(fd.status().code(), absl::StrCat("node: control listener: ", fd.status().message()));
  impl->listen_fd = *fd;
  impl->listening = control::socket_local(*fd);
  impl->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);  // see accept_all
  impl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  impl->ready.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0 || impl->ready.fd < 0) return absl::InternalError("node: eventfd failed");
  impl->ready.arm();  // a reader may wait on the descriptor before its first poll()
  if (absl::Status st = impl->engine->watch(impl->listen_fd); !st.ok()) return st;
  if (absl::Status st = impl->engine->watch(impl->wake_fd); !st.ok()) return st;
  NodeImpl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->loop(); });
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Node::Node(std::shared_ptr<NodeImpl> impl) : impl_(std::move(impl)) {}

Node::~Node() {
  impl_->stopping.store(true);
  impl_->wake();
  if (impl_->thread.joinable()) impl_->thread.join();
}

NodeImpl::~NodeImpl() {
  // Senders and anchors may outlive the Node; they hold this until they go.
  if (thread.joinable()) {  // create() failed after starting it (never: it starts last)
    stopping.store(true);
    wake();
    thread.join();
  }
  if (listen_fd >= 0) close(listen_fd);
  if (wake_fd >= 0) close(wake_fd);
  if (spare_fd >= 0) close(spare_fd);
  engine.reset();  // its sessions signal `ready`: gone before its descriptor
  if (ready.fd >= 0) close(ready.fd);
}

dataplane::Endpoint Node::control_address() const { return impl_->listening; }
uint64_t Node::worker_id() const { return impl_->worker; }
std::string Node::data_path() const { return impl_->data_path; }

// ---- the node thread ----------------------------------------------------

void NodeImpl::loop() {
  uint64_t wait = 1'000'000;
  while (!stopping.load()) {
    engine->run_once(wait);
    uint64_t v;
    (void)!read(wake_fd, &v, sizeof(v));
    // Release: pairs with wake()'s acq_rel exchange (node_impl.h): a waker that
    // finds false after this has its work seen by the pass that follows.
    wake_pending.store(false, std::memory_order_release);
    const uint64_t now = monotonic_ns();
    accept_all(now);
    // A channel's ingress ring, once its mirror made it (in the engine's
    // turn above): opened outside mu (it maps a file). Only this thread
    // changes `in`, so it reads it without mu.
    for (auto& p : in) {
      if (p->receiver && !p->ingress && !p->dead) open_ingress(*p);
    }
    {
      std::lock_guard l(mu);
      step(now);
      for (auto& p : in) {
        if (!p->dead && (p->failed || p->conn == nullptr)) end_in(*p, p->failed ? "its channel lost a record" : kClosedByPeer);
      }
      std::erase_if(in, [](const std::shared_ptr<InPeer>& p) { return p->dead; });
      wait = next_wait(monotonic_ns());
    }
    if (ready_owed) {  // items this pass made ready: a reader waiting on the descriptor looks
      ready_owed = false;
      ready.signal();
    }
  }
  // Stopping: every peer is lost.
  {
    std::lock_guard l(mu);
    for (auto& [w, p] : out) end_out(*p, kNodeStops);
    out.clear();
    for (auto& t : tcp_out) {
      t->closed = true;
      if (t->attach && !t->attach->done) {
        t->attach->done = true;
        t->attach->status = absl::UnavailableError("the node stops");
      }
      if (t->conn) engine->unwatch(t->conn->fd());
      t->conn.reset();
    }
    tcp_out.clear();
    attach_cv.notify_all();
    for (auto& p : in) end_in(*p, kNodeStops);
    in.clear();
  }
  ready.signal();
  engine->stop_all();
}

uint64_t NodeImpl::next_wait(uint64_t now) const {
  uint64_t until = now + 100'000'000;
  for (const auto& [w, p] : out) {
    if (p->dead || !p->sender) continue;
    until = std::min(until, p->sender->next_deadline_ns());
    if (!p->channel_ready) until = std::min(until, now + 1'000'000);  // watch for its mirror
    if (p->conn && p->conn->pending() != 0) until = std::min(until, now + 1'000'000);
  }
  for (const auto& t : tcp_out) {
    if (t->conn && t->conn->pending() != 0) until = std::min(until, now + 200'000);
  }
  for (const auto& p : in) {
    if (p->conn && p->conn->pending() != 0) until = std::min(until, now + 1'000'000);
    if (p->close_after_flush) until = now;
    if (!p->node_seen || (p->per_stream && p->stream == nullptr)) until = std::min(until, p->accepted_ns + opt.hello_timeout_ns);
    if (p->receiver) until = std::min(until, now + mux.heartbeat_interval_ns);
    if (p->receiver && !p->ingress) until = std::min(until, p->accepted_ns + opt.hello_timeout_ns + 1);
    // A moved position goes within kPositionEveryNs; one look follows each
    // report (what was applied meanwhile woke nobody).
    if (p->receiver && (p->applied != p->reported || now - p->reported_ns < kPositionEveryNs)) {
      until = std::min(until, p->reported_ns + kPositionEveryNs);
    }
    // An accept timeout is judged by the watchdog, which runs at most every
    // tenth of a heartbeat interval: its next turn, not the expiry itself.
    if (p->receiver) until = std::min(until, std::max(p->receiver->next_expiry_ns(), p->watchdog_next_ns));
  }
  return until > now ? until - now : 0;
}

void NodeImpl::accept_all(uint64_t now) {
  for (;;) {
    sockaddr_in from{};
    socklen_t from_len = sizeof(from);
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
      // Out of descriptors: the pending connection would keep the listener
      // readable and the loop spinning. The spare makes room to take it and
      // close it at once (the peer sees a reset, not a hang); counted.
      // (accept reports EMFILE before it looks for a connection: none may be waiting.)
      close(spare_fd);
      const int shed = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (shed >= 0) close(shed);
      spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (shed < 0) return;  // nothing was waiting
      std::lock_guard l(mu);
      ++counters.refused;
      ++counters.out_of_fds;
      if (!fds_warned) log("out of file descriptors: new connections are refused (raise ulimit -n)");
      fds_warned = true;
      continue;
    }
    if (fd < 0) return;
    std::lock_guard l(mu);
    if (in.size() >= opt.max_connections) {
      close(fd);
      ++counters.refused;
      continue;
    }
    // One address may hold only so many connections that have not proved
    // useful yet, and all of them together only so many: a stranger that
    // opens connections and says nothing (or names channels nobody serves)
    // cannot keep honest producers out.
    const uint32_t source = ntohl(from.sin_addr.s_addr);
    if (pending_total >= opt.max_pending || pending_by_source[source] >= opt.max_pending_per_source) {
      close(fd);
      ++counters.refused;
      ++counters.refused_by_source;
      continue;
    }
    control::detect_silent_peer(fd, opt.silent_peer_ms);
    auto p = std::make_shared<InPeer>();
    p->conn = std::make_unique<TcpConn>(fd);
    p->accepted_ns = now;
    p->source = source;
    ++pending_by_source[source];
    ++pending_total;
    if (!engine->watch(fd).ok()) {
      ++counters.refused;
      settle(*p);  // never counted after all (its connection closes with it)
      continue;
    }
    in.push_back(std::move(p));
  }
}

void NodeImpl::step(uint64_t now) {
  for (auto& p : in) {
    if (!p->dead) step_in(*p, now);
  }
  for (auto& t : tcp_out) {
    if (t->conn) step_tcp_out(*t);
  }
  std::erase_if(tcp_out, [](const std::shared_ptr<TcpStreamOut>& t) { return t->conn == nullptr; });
  for (auto it = out.begin(); it != out.end();) {
    OutPeer& p = *it->second;
    if (!p.dead) step_out(p, now);
    if (p.dead) {
      it = out.erase(it);
    } else {
      ++it;
    }
  }
}

// ---- the API ------------------------------------------------------------

std::unique_ptr<Anchor> Node::create_anchor(AnchorKind kind) {
  std::lock_guard l(impl_->mu);
  auto st = std::make_shared<AnchorState>();
  st->id = random_u64();
  st->kind = kind;
  impl_->anchors[st->id] = st;
  return std::unique_ptr<Anchor>(new Anchor(impl_, st, mux::AnchorHandle{impl_->worker, st->id}));
}

absl::StatusOr<std::unique_ptr<Sender>> Node::attach(const mux::AnchorHandle& h, const dataplane::Endpoint& peer) {
  NodeImpl& m = *impl_;
  if (!m.mux.enabled) return m.attach_tcp(impl_, h, peer);  // no mux here: one connection per stream
  std::shared_ptr<OutPeer> p;
  {
    std::lock_guard l(m.mu);
    if (auto it = m.out.find(h.worker); it != m.out.end() && !it->second->dead) p = it->second;
  }
  if (p == nullptr) {
    // A new peer: connect here (setup may block; the node thread must not).
    auto fd = control::tcp_connect(peer, static_cast<int>(m.opt.attach_timeout_ns / 1'000'000));
    if (!fd.ok()) return absl::Status(fd.status().code(), absl::StrCat("attach: ", fd.status().message()));
    control::detect_silent_peer(*fd, m.opt.silent_peer_ms);
    std::lock_guard l(m.mu);
    if (auto it = m.out.find(h.worker); it != m.out.end() && !it->second->dead) {
      close(*fd);  // another attach got there first
      p = it->second;
    } else if (m.out.size() >= m.opt.max_connections) {
      close(*fd);
      return absl::ResourceExhaustedError(absl::StrCat("attach: max_connections (", m.opt.max_connections, ") reached"));
    } else {
      p = std::make_shared<OutPeer>();
      p->worker = h.worker;
      p->addr = peer;
      p->conn = std::make_unique<TcpConn>(*fd);
      p->epoch = random_u64();
      p->sender.emplace(m.mux, p->epoch);
      if (absl::Status st = m.engine->watch(*fd); !st.ok()) return st;
      m.out[h.worker] = p;
    }
  }
  auto a = std::make_shared<PendingAttach>();
  a->anchor = h.anchor;
  a->session = random_u64();
  std::unique_lock l(m.mu);
  if (p->dead) return absl::UnavailableError("attach: the peer is gone");
  p->attaches.push_back(a);
  m.wake();
  const auto answered = [&] { return a->done && (!a->status.ok() || a->tcp_chosen || p->channel_ready || p->dead); };
  if (!m.attach_cv.wait_for(l, std::chrono::nanoseconds(m.opt.attach_timeout_ns), answered)) {
    if (a->done && a->status.ok() && !a->tcp_chosen) p->sender->abort(a->slot);  // answered, but no channel in time
    a->abandoned = true;
    return absl::DeadlineExceededError(absl::StrCat("attach: no answer from ", dataplane::to_string(peer), " within ",
                                                    m.opt.attach_timeout_ns / 1'000'000, " ms"));
  }
  if (!a->status.ok()) return a->status;
  if (p->dead && !a->tcp_chosen) return absl::UnavailableError("attach: the peer went away");
  if (a->tcp_chosen) {
    l.unlock();
    return m.attach_tcp(impl_, h, peer);  // the peer does not take the mux
  }
  return std::unique_ptr<Sender>(new Sender(impl_, p, a->slot, a->session));
}

void Node::flush_batch() {
  NodeImpl& m = *impl_;
  bool left = false;
  {
    std::lock_guard l(m.mu);
    const uint64_t now = monotonic_ns();
    for (auto& [w, p] : m.out) {
      if (!p->sender || p->dead) continue;
      p->sender->kick();
      // Under Manual the batches are built here, on the caller's thread
      // (one hand-off fewer); what admission holds back, and a channel not
      // set up yet, the node thread does.
      if (m.opt.build_on_flush && p->serve_link != nullptr && !p->broken) {
        p->broken = !m.pump_out(*p, now);
        left |= p->broken || p->sender->has_staged();
      } else {
        left = true;
      }
    }
  }
  if (left) m.wake();
}

size_t Node::send_many(std::span<SendOne> sends) {
  NodeImpl& m = *impl_;
  size_t sent = 0;
  bool liveness = false, foreign = false;
  {
    std::lock_guard l(m.mu);
    const uint64_t now = monotonic_ns();
    for (SendOne& one : sends) {
      Sender& s = *one.sender;
      if (s.node_ != impl_) {
        foreign = true;  // another node's sender: sent below, under its own lock
      } else if (s.tcp_) {
        one.status = s.send_tcp_locked(one.record);
      } else if (s.peer_->dead || s.done_) {
        one.status = mux::SendStatus::kClosed;
      } else {
        one.status = s.peer_->sender->send(s.slot_, one.record, now);
      }
      sent += s.node_ == impl_ && one.status == mux::SendStatus::kSent;
      liveness |= s.node_ == impl_ && one.status == mux::SendStatus::kSent;
    }
  }
  for (SendOne& one : sends) {
    if (foreign && one.sender->node_ != impl_) sent += (one.status = one.sender->send(one.record)) == mux::SendStatus::kSent;
  }
  if (liveness && m.mux.flush.kind == mux::FlushPolicy::Kind::kAuto) m.wake();
  return sent;
}

bool Node::drain(uint64_t timeout_ns) {
  NodeImpl& m = *impl_;
  const uint64_t until = monotonic_ns() + timeout_ns;
  for (;;) {
    bool idle = true;
    {
      std::lock_guard l(m.mu);
      for (const auto& [w, p] : m.out) {
        if (p->dead || !p->sender || !p->egress) continue;
        idle &= p->sender->idle() && p->applied == p->egress->next_seq();
      }
      for (const auto& t : m.tcp_out) idle &= t->conn == nullptr || t->conn->pending() == 0;
    }
    if (idle) return true;
    if (monotonic_ns() >= until) return false;
    m.wake();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

NodeStats Node::stats() const {
  std::lock_guard l(impl_->mu);
  NodeStats s = impl_->counters;
  s.out = impl_->out_ended;
  s.in = impl_->in_ended;
  for (const auto& [w, p] : impl_->out) {
    if (p->sender && !p->dead) s.out = sum(s.out, p->sender->stats());
    if (p->serve_link && !p->dead) impl_->add_serve_counters(*p->serve_link, &s);
  }
  for (const auto& p : impl_->in) {
    if (p->receiver && !p->dead) s.in = sum(s.in, p->receiver->stats());
  }
  // The engine is the node thread's, but its counters are single-writer
  // atomics any thread may read; the session list changes only under mu.
  for (const auto& m : impl_->engine->mirrors()) impl_->add_channel_counters(*m, &s);
  return s;
}

mux::SendStatus Sender::send_tcp_locked(proto::ConstBytes record) {
  if (done_ || tcp_->closed || tcp_->conn == nullptr) return mux::SendStatus::kClosed;
  if (record.size() > tcp_->byte_budget) return mux::SendStatus::kTooLarge;
  if (tcp_->conn->pending() + record.size() > tcp_->byte_budget) return mux::SendStatus::kFull;
  if (!send_frame(*tcp_->conn, FrameKind::kStream, tcp_->frame_seq, record)) {
    tcp_->closed = true;
    return mux::SendStatus::kClosed;
  }
  ++tcp_->frame_seq;
  ++node_->counters.tcp_records_out;
  return mux::SendStatus::kSent;
}

mux::SendStatus Sender::send(proto::ConstBytes record) {
  mux::SendStatus st;
  if (tcp_) {  // the per-stream path: one STREAM frame per record, written now
    std::lock_guard l(node_->mu);
    return send_tcp_locked(record);
  }
  {
    std::lock_guard l(node_->mu);
    if (peer_->dead || done_) return mux::SendStatus::kClosed;
    st = peer_->sender->send(slot_, record, monotonic_ns());
  }
  if (st == mux::SendStatus::kSent && node_->mux.flush.kind == mux::FlushPolicy::Kind::kAuto) node_->wake();
  return st;
}

bool Sender::finish() {
  bool ok;
  if (tcp_) {
    {
      std::lock_guard l(node_->mu);
      if (done_ || tcp_->closed || tcp_->conn == nullptr) return false;
      std::byte h[proto::kFrameHeaderBytes];
      proto::encode_frame_header(
          proto::FrameHeader{FrameKind::kStream, proto::kStreamTerminal, 0, 0, tcp_->frame_seq++}, h);
      tcp_->conn->send({h, sizeof(h)});
      tcp_->finished = done_ = true;
    }
    node_->wake();  // the node thread closes the connection once the terminal is out
    return true;
  }
  {
    std::lock_guard l(node_->mu);
    if (peer_->dead || done_) return false;
    ok = peer_->sender->finish(slot_);
    done_ = true;
  }
  node_->wake();  // the terminal is a liveness record: it moves its batch
  return ok;
}

bool Sender::closed() const {
  std::lock_guard l(node_->mu);
  if (tcp_) return done_ || tcp_->closed || tcp_->conn == nullptr;
  return done_ || peer_->dead || peer_->sender->closed(slot_);
}

Sender::~Sender() {
  if (tcp_) {  // without its terminal: the connection closes and the consumer sees the stream dropped
    std::lock_guard l(node_->mu);
    if (!done_ && tcp_->conn != nullptr) {
      tcp_->closed = true;
      shutdown(tcp_->conn->fd(), SHUT_RDWR);
    }
    return;
  }
  {
    std::lock_guard l(node_->mu);
    if (done_ || peer_->dead || !peer_->sender->abort(slot_)) return;
  }
  node_->wake();
}

}  // namespace ringfire::node
