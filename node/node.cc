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
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
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

// fork_count: the fork()s this process came out of since its first node
// (a child handler counts them): what inherited() compares.
std::atomic<uint64_t> g_forks{0};

uint64_t fork_count() {
  static const bool watching = [] {
    return pthread_atfork(nullptr, nullptr, [] { g_forks.fetch_add(1, std::memory_order_relaxed); }) == 0;
  }();
  (void)watching;
  return g_forks.load(std::memory_order_relaxed);
}

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
  impl->pid = getpid();
  impl->forks = fork_count();
  if (impl->opt.port.ip == 0) impl->opt.port.ip = o.control.ip;
  if (impl->opt.port.name.empty()) impl->opt.port.name = "data";
  const uint16_t mtu = impl->opt.port.mtu;
  if (mtu < 256) return absl::InvalidArgumentError(absl::StrCat("node: port mtu ", mtu, " is below 256"));
  // One batch is one blob record that fits one datagram (no TCP fallback),
  // with the 16-byte frame every channel datagram ends in (its TAG, or its
  // MAC under a key). A batch one byte over went by the channel's TCP,
  // behind the datagram after it: a NAK, and a repair, every step.
  static_assert(proto::kTagFrameBytes == proto::kMacFrameBytes);
  impl->record_cap = mtu - proto::kFrameHeaderBytes - proto::kBlobRecordHeader - proto::kTagFrameBytes;
  impl->mux = o.mux;
  impl->mux.max_batch_bytes = std::min(o.mux.max_batch_bytes, impl->record_cap);
  // A batch: up to max_batch_bytes, or one fenced record alone.
  impl->buf.resize(std::max<size_t>(impl->mux.max_batch_bytes,
                                    proto::kBatchHeaderBytes + proto::kRecordHeaderBytes + o.mux.max_record_bytes));
  // A STREAM frame holds one record, at most what a slot may hold.
  impl->limits.allowed[static_cast<uint8_t>(FrameKind::kStream)] = true;
  impl->limits.max_body[static_cast<uint8_t>(FrameKind::kStream)] = o.mux.slot_byte_budget;

  if (o.host != nullptr) {
    // On the host's engine: its port carries the channels.
    engine::PortHandle* port = o.host->port_named(impl->opt.port.name);
    if (port == nullptr) {
      return absl::NotFoundError(absl::StrCat("node: no port named ", impl->opt.port.name, " in the engine"));
    }
    impl->data_path = port->info().path;
    impl->engine = o.host;
  } else {
    impl->own_engine = std::make_unique<engine::Engine>([raw = impl.get()](const std::string& s, const std::string& line) {
      // A channel's session starting (" -> RING from seq N over ...") is the
      // node's business, not news; everything else its engine says is.
      if (line.find(" from seq ") != std::string::npos && line.find(" -> ") != std::string::npos) return;
      raw->log(absl::StrCat(s, ": ", line));
    });
    impl->engine = impl->own_engine.get();
    auto port = engine::open_port(impl->opt.port, {});
    if (!port.ok()) return absl::Status(port.status().code(), absl::StrCat("node: data port: ", port.status().message()));
    impl->data_path = (*port)->info().path;
    if (absl::Status st = impl->engine->add_port(impl->opt.port.name, std::move(*port)); !st.ok()) return st;
  }

  auto fd = net::tcp_listen(o.control);
  if (!fd.ok()) return absl::Status(fd.status().code(), absl::StrCat("node: control listener: ", fd.status().message()));
  impl->listen_fd = *fd;
  impl->listening = net::socket_local(*fd);
  impl->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);  // see accept_all
  impl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  impl->ready.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0 || impl->ready.fd < 0) return absl::InternalError("node: eventfd failed");
  impl->ready.arm();  // a reader may wait on the descriptor before its first poll()
  if (absl::Status st = impl->engine->watch(impl->listen_fd); !st.ok()) return st;
  if (absl::Status st = impl->engine->watch(impl->wake_fd); !st.ok()) {
    impl->engine->unwatch(impl->listen_fd);
    return st;
  }
  impl->engine->add_agent(impl.get());
  if (impl->own_engine) {
    NodeImpl* raw = impl.get();
    impl->thread = std::thread([raw] {
      pthread_setname_np(pthread_self(), "rf-node");  // what `top -H` shows
      raw->loop();
    });
  }
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Node::Node(std::shared_ptr<NodeImpl> impl) : impl_(std::move(impl)) {}

bool Node::inherited() const { return impl_->forks != fork_count(); }
bool Anchor::inherited() const { return node_->forks != fork_count(); }
bool Sender::inherited() const { return node_->forks != fork_count(); }

Node::~Node() {
  NodeImpl& m = *impl_;
  m.stopping.store(true);
  if (m.thread.joinable()) {  // its own conductor ends the peers and the engine
    m.wake();
    m.thread.join();
    m.engine->unwatch(m.listen_fd);  // its conductor is gone: this thread may
  } else {
    // Hosted: this is the host's conductor (Node::create's contract).
    m.stop_peers();
    m.engine->remove_agent(&m);
    m.engine->unwatch(m.listen_fd);
    m.engine->unwatch(m.wake_fd);
    m.engine = nullptr;  // the host's, not to be touched again (senders and anchors may outlive this)
  }
  // It accepts no more: a connection waiting in the backlog is reset now,
  // not left unanswered while anchors and senders hold the rest alive.
  close(m.listen_fd);
  m.listen_fd = -1;
}

NodeImpl::~NodeImpl() {
  // Senders and anchors may outlive the Node; they hold this until they go.
  if (listen_fd >= 0) close(listen_fd);
  if (wake_fd >= 0) close(wake_fd);
  if (spare_fd >= 0) close(spare_fd);
  own_engine.reset();  // its sessions signal `ready`: gone before its descriptor
  if (ready.fd >= 0) close(ready.fd);
}

net::Endpoint Node::control_address() const { return impl_->listening; }
uint64_t Node::worker_id() const { return impl_->worker; }
mux::FlushPolicy Node::flush_policy() const { return impl_->mux.flush; }
std::string Node::data_path() const { return impl_->data_path; }

// ---- the conductor --------------------------------------------------------

void NodeImpl::loop() {
  while (!stopping.load()) engine->run_once(100'000'000);  // conduct() plans the wait
  stop_peers();
  engine->remove_agent(this);
  engine->stop_all();
}

uint64_t NodeImpl::conduct(uint64_t now) {
  // Only what the engine's last look found readable is read (a read a
  // connection every pass was a system call each; one turn came per
  // channel's report).
  uint64_t v;
  if (engine->ready(wake_fd)) (void)!read(wake_fd, &v, sizeof(v));
  // Release: pairs with wake()'s acq_rel exchange (node_impl.h): a waker that
  // finds false after this has its work seen by the pass that follows.
  wake_pending.store(false, std::memory_order_release);
  // This pass reports what a reader's put-off wake was for (read under mu
  // in its step); one set after that look stays set for the next.
  wake_owed.store(false, std::memory_order_relaxed);
  if (stopped) return now + 100'000'000;
  if (engine->ready(listen_fd)) accept_all(now);
  before_step(now);
  uint64_t deadline;
  bool owed = false;  // a close or a position the applies below made due: the next pass at once
  {
    std::lock_guard l(mu);
    ++counters.conductor_passes;
    step(now);
    expire_resumes(now);
    // Within a pass of its deadline (the conductor turns at least every
    // 100 ms). What the channels hold is applied first, as the watchdog
    // does before it judges: an OpenSlot already in an ingress ring claims
    // its ticket before the ticket is judged lapsed.
    if (!tickets_due.empty() && tickets_due.front().second <= now && apply_all(false, &owed, SIZE_MAX) != 0) {
      items_ready();
    }
    expire_tickets(now);
    for (auto& p : in) {
      if (!p->dead && (p->failed || p->conn == nullptr)) end_in(*p, p->failed ? p->failed_why : kClosedByPeer);
    }
    std::erase_if(in, [](const std::shared_ptr<InPeer>& p) { return p->dead; });
    for (auto it = out.begin(); it != out.end();) {
      it = it->second->dead ? out.erase(it) : std::next(it);
    }
    std::erase_if(tcp_out, [&](const std::shared_ptr<TcpStreamOut>& t) {
      if (!t->gone.load(std::memory_order_relaxed)) return false;
      counters.tcp_records_out += t->records_out.load(std::memory_order_relaxed);  // they outlive the stream
      return true;
    });
    const uint64_t t = monotonic_ns();
    deadline = t + next_wait(t);
  }
  if (owed) wake();  // outside mu: a system call
  return after_step(now, deadline);
}

// before_step: the pass's system calls before the protocol work — the
// connections attach() opened watched, channels set up (the egress ring
// and its serve), ingress rings opened, every connection read.
void NodeImpl::before_step(uint64_t now) {
  {
    std::lock_guard l(mu);
    pass_out.clear();
    for (const auto& [w, p] : out) {
      if (!p->dead) pass_out.push_back(p);
    }
    pass_tcp_out = tcp_out;
    // A per-stream connection is read only while its consumer keeps up
    // (TCP's window is its credit): decided here, where its items are.
    for (auto& p : in) {
      p->want_read = !p->dead && p->conn != nullptr && !p->eof &&
                     (p->stream == nullptr || !p->stream->full());
    }
  }
  // Warming (RingFile::warm): kWarmPerPass over every ring at most each
  // kWarmEveryNs, however often the conductor turns (a busy one must not
  // spend each of its passes on it).
  uint64_t warm_left = now >= next_warm_ns ? kWarmPerPass : 0;
  const auto warm_piece = [&](const ring::RingFile& f, uint64_t* at) {
    if (warm_left == 0) return false;
    const uint64_t from = *at;
    *at = f.warm(from, warm_left);
    warm_left -= std::min(warm_left, *at - from);
    if (warm_left == 0) next_warm_ns = now + kWarmEveryNs;
    return *at >= f.mapped_bytes();
  };
  // A channel's ingress ring, once its mirror made it (in the engine's
  // turn): opened outside mu (it maps a file).
  for (auto& p : in) {
    if (p->receiver && !p->ingress && !p->dead && !p->failed && p->mirror != nullptr) open_ingress(*p);
    // Its lazy pages allocated once its first tokens are long in: a full
    // filesystem ends this peer here, not the process at a later write.
    if (p->ingress_file && !p->ingress_reserved && now >= p->ingress_ns + kReserveAfterNs) {
      p->ingress_reserved = true;
      if (absl::Status st = p->ingress_file->reserve(); !st.ok()) {
        log(absl::StrCat("ingress ring: ", st.message()));
        p->write_failed = true;  // its connection is cut at this pass's step (its streams end)
        p->ingress_file.reset();
      }
    } else if (p->ingress_file && p->ingress_reserved && warm_piece(*p->ingress_file, &p->ingress_warmed)) {
      p->ingress_file.reset();  // warmed whole (the mirror's mapping: its writer's too)
      rings_warmed.fetch_add(1, std::memory_order_relaxed);
    }
  }
  for (auto& p : pass_out) {
    if (!p->watched && p->conn) {
      p->watched = true;
      if (!engine->watch(p->conn->fd()).ok()) p->write_failed = true;
    }
    if (p->serve_name.empty() && !p->setup_failed) p->setup_failed = !setup_out(*p);
    // The channel up kReserveAfterNs (its first tokens long gone): its lazy
    // ring's pages now, so a full filesystem ends this peer here, not the
    // process at a later write.
    if (p->channel_ready && p->ready_ns == 0) p->ready_ns = now;
    if (p->ready_ns != 0 && now >= p->ready_ns + kReserveAfterNs && !p->reserved && p->egress_file) {
      p->reserved = true;
      if (absl::Status st = p->egress_file->reserve(); !st.ok()) {
        log(absl::StrCat("egress ring: ", st.message()));
        p->setup_failed = true;
      }
    } else if (p->reserved && p->egress_file && !p->setup_failed && p->warmed < p->egress_file->mapped_bytes() &&
               warm_piece(*p->egress_file, &p->warmed)) {  // its writer's mapping (the serve's too)
      rings_warmed.fetch_add(1, std::memory_order_relaxed);
    }
    // What came before a close is read first (a keyed peer's refusal is a NODE, then its close).
    if (p->conn) p->open_read = !engine->ready(p->conn->fd()) || p->conn->read_available(1u << 20);
  }
  for (auto& p : in) {
    if (p->dead || p->conn == nullptr) continue;
    const int fd = p->conn->fd();
    bool look = engine->ready(fd);
    // A per-stream connection whose consumer is a window behind leaves the
    // engine's look while it is not read (its waiting bytes made every look
    // return at once: the node thread spun a core); the reader that takes
    // an item from a full stream wakes us, and it comes back, read at once.
    const bool full = p->stream != nullptr && !p->want_read && !p->eof;
    if (full && !p->read_paused) {
      engine->unwatch(fd);
      p->read_paused = true;
    } else if (!full && p->read_paused) {
      p->read_paused = false;
      if (!engine->watch(fd).ok()) p->write_failed = true;
      look = true;
    }
    // At the peer's end of stream, what it sent before is still applied.
    if (p->want_read && look && !p->conn->read_available(1u << 20)) p->eof_read = true;
  }
  for (auto& t : pass_tcp_out) step_tcp_out(*t);
}

// after_step: the pass's system calls after the protocol work — the
// batches it published sent, channel mirrors placed, connections written
// and the cut ones closed, ended peers' sessions and rings removed, the
// readers and attach() callers told, log lines printed. Returns when the
// conductor must look again.
uint64_t NodeImpl::after_step(uint64_t now, uint64_t deadline) {
  run_egress(conductor_runs);
  conductor_runs.clear();
  for (auto& p : in) {
    if (p->mirror_wanted && !place_mirror(*p)) deadline = now;  // cut: ended at once
  }
  for (auto& p : in) {
    if (p->conn && p->conn->pending() != 0 && !p->conn->flush()) {
      p->write_failed = true;
      deadline = now;
    }
  }
  for (auto& p : pass_out) {
    if (p->conn && p->conn->pending() != 0 && !p->conn->flush()) {
      p->write_failed = true;
      deadline = now;
    }
  }
  pass_out.clear();
  pass_tcp_out.clear();
  for (auto& c : closing) {
    (void)c->flush();  // what was queued before the cut goes first (a refusal, a keyed answer), as far as the socket takes it
    engine->unwatch(c->fd());
  }
  closing.clear();  // closes them
  teardown(false);
  if (!retiring_out.empty()) deadline = std::min(deadline, now + 1'000'000);  // a runner still holds one
  for (const std::string& line : logs_owed) log(line);
  logs_owed.clear();
  bool tell_readers, tell_attach;
  {
    std::lock_guard l(mu);
    tell_readers = std::exchange(ready_owed, false);
    tell_attach = std::exchange(attach_owed, false);
  }
  if (tell_readers) {  // items this pass made ready: a reader waiting on the descriptor looks
    items_cv.notify_all();
    ready.signal();
  }
  if (tell_attach) attach_cv.notify_all();
  tell_closes();
  return deadline;
}

void NodeImpl::teardown(bool wait) {
  for (auto& p : retiring_in) {
    if (p->conn) {
      engine->unwatch(p->conn->fd());
      p->conn.reset();
    }
    // The ring's mapping and the scratch go here, outside mu: a reader that
    // pops a stream's last item may hold the last reference to the peer.
    // (Dead under mu before this: nobody reads them again.)
    p->ingress.reset();
    p->ingress_file.reset();  // a peer that ended while its ring was warmed
    p->record = ring::LazyBytes();
    if (!p->mirror_name.empty()) {
      (void)engine->remove(p->mirror_name);
      p->mirror = nullptr;
      unlink(p->ring_path.c_str());
      p->mirror_name.clear();
    }
  }
  retiring_in.clear();
  for (;;) {
    std::erase_if(retiring_out, [&](const std::shared_ptr<OutPeer>& p) {
      // Acquire: pairs with run_egress's release decrement (the runner is
      // done with the ring and the serve's link).
      if (p->runners.load(std::memory_order_acquire) != 0) return false;
      if (p->conn) {
        if (p->watched) engine->unwatch(p->conn->fd());
        p->conn.reset();
      }
      if (!p->serve_name.empty()) {
        (void)engine->remove(p->serve_name);
        p->serve_name.clear();
      }
      if (!p->ring_path.empty()) unlink(p->ring_path.c_str());
      p->egress.reset();
      p->egress_file.reset();
      return true;
    });
    if (!wait || retiring_out.empty()) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // a flush_batch() caller is finishing its run
  }
}

void NodeImpl::stop_peers() {
  if (stopped) return;
  stopped = true;
  std::vector<std::shared_ptr<TcpStreamOut>> touts;
  {
    std::lock_guard l(mu);
    for (auto& [w, p] : out) end_out(*p, kNodeStops);
    out.clear();
    for (auto& p : in) end_in(*p, kNodeStops);
    in.clear();
    expire_resumes(UINT64_MAX);  // ends held for a resume are read: none can come now
    touts = std::move(tcp_out);
    tcp_out.clear();
  }
  for (auto& t : touts) {
    {
      std::lock_guard w(t->wmu);
      t->closed = true;
      if (t->conn) {
        if (t->watched) engine->unwatch(t->conn->fd());
        t->conn.reset();
      }
    }
    std::lock_guard l(mu);
    counters.tcp_records_out += t->records_out.load(std::memory_order_relaxed);
    if (t->attach && !t->attach->done) {
      t->attach->done = true;
      t->attach->status = absl::UnavailableError("the node stops");
    }
  }
  for (auto& c : closing) engine->unwatch(c->fd());
  closing.clear();
  teardown(true);
  for (const std::string& line : logs_owed) log(line);
  logs_owed.clear();
  {
    std::lock_guard l(mu);
    ready_owed = attach_owed = false;
  }
  attach_cv.notify_all();
  items_cv.notify_all();
  closes_owed.store(true, std::memory_order_relaxed);  // every sender is closed now
  tell_closes();
  ready.signal();
  ready.kick();  // a reader waiting on the descriptor sees the ends
}

uint64_t NodeImpl::next_wait(uint64_t now) const {
  uint64_t until = now + 100'000'000;
  for (const auto& [w, p] : out) {
    if (p->dead || !p->sender) continue;
    // Its batches wait for the channel (a ticket's OpenSlot may be due before it is up).
    if (p->channel_ready) until = std::min(until, p->sender->next_deadline_ns());
    if (!p->channel_ready) until = std::min(until, now + 1'000'000);  // watch for its mirror
    if (p->conn && p->conn->pending() != 0) until = std::min(until, now + 1'000'000);
    if (!p->watched || p->serve_name.empty()) until = now;  // set up at once
    // Its ring reserved kReserveAfterNs after it came up, then warmed a piece a pass.
    if (p->ready_ns != 0 && !p->reserved && p->egress_file) until = std::min(until, p->ready_ns + kReserveAfterNs);
    if (p->reserved && p->egress_file && p->warmed < p->egress_file->mapped_bytes()) {
      until = std::min(until, std::max(now, next_warm_ns));
    }
  }
  for (const auto& t : tcp_out) {
    // Unwritten bytes (a socket that took less than a send gave it): a look
    // every 200 us until they are out. (A finish() wakes the conductor itself.)
    // One the engine would not watch is read every pass: the same look.
    if (t->unwritten.load(std::memory_order_relaxed) || t->unwatched) until = std::min(until, now + 200'000);
  }
  if (!resuming.empty()) until = std::min(until, resuming.front().second);  // the next held end to read
  for (const auto& p : in) {
    if (p->conn && p->conn->pending() != 0) until = std::min(until, now + 1'000'000);
    if (p->close_after_flush) until = now;
    if (p->ingress_file) {  // its ring reserved, then warmed a piece at a time
      until = std::min(until, p->ingress_reserved ? std::max(now, next_warm_ns) : p->ingress_ns + kReserveAfterNs);
    }
    if (unproven(*p)) until = std::min(until, p->accepted_ns + opt.hello_timeout_ns);
    if (p->receiver) until = std::min(until, now + mux.heartbeat_interval_ns);
    if (p->receiver && !p->ingress) until = std::min(until, p->accepted_ns + opt.hello_timeout_ns + 1);
    if (p->receiver && p->mirror != nullptr && !p->ingress) until = std::min(until, now + 1'000'000);  // watch for its ring
    // A moved position goes within kPositionEveryNs; one look follows each
    // report (what was applied meanwhile woke nobody).
    if (p->receiver && (p->applied != p->reported || now - p->reported_ns < kPositionEveryNs)) {
      until = std::min(until, p->reported_ns + kPositionEveryNs);
    }
    // Credit held back goes at the sweep (sooner when reads make it due: they wake us).
    if (p->receiver && p->receiver->owes_credit()) until = std::min(until, p->receiver->sweep_at_ns());
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
      {
        std::lock_guard l(mu);
        ++counters.refused;
        ++counters.out_of_fds;
      }
      if (!fds_warned) log("out of file descriptors: new connections are refused (raise ulimit -n)");
      fds_warned = true;
      continue;
    }
    if (fd < 0) return;
    // One address may hold only so many connections that have not proved
    // useful yet, and all of them together only so many: a stranger that
    // opens connections and says nothing (or names channels nobody serves)
    // cannot keep honest producers out.
    const uint32_t source = ntohl(from.sin_addr.s_addr);
    bool take = false;
    {
      std::lock_guard l(mu);
      if (in.size() >= opt.max_connections) {
        ++counters.refused;
      } else if (pending_total >= opt.max_pending || pending_by_source[source] >= opt.max_pending_per_source) {
        ++counters.refused;
        ++counters.refused_by_source;
      } else {
        take = true;
        ++pending_by_source[source];
        ++pending_total;
      }
    }
    if (!take) {
      close(fd);
      continue;
    }
    net::detect_silent_peer(fd, opt.silent_peer_ms);
    auto p = std::make_shared<InPeer>();
    p->conn = std::make_unique<net::TcpConn>(fd);
    p->accepted_ns = now;
    p->source = source;
    if (opt.psk) p->nonce = net::random_nonce();  // a keyed NODE's answer's: drawn here, not under mu
    const bool watched = engine->watch(fd).ok();
    std::lock_guard l(mu);
    if (!watched) {
      ++counters.refused;
      settle(*p);  // never counted after all (its connection closes with it)
      continue;
    }
    in.push_back(std::move(p));
  }
}

void NodeImpl::step(uint64_t now) {
  for (auto& p : in) {
    // A peer whose connection was cut after the last pass (its channel's
    // mirror could not be placed) is ended below, not stepped.
    if (!p->dead && p->conn != nullptr) step_in(*p, now);
  }
  for (auto& p : pass_out) {
    if (!p->dead) step_out(*p, now);
  }
  // The channel mirrors' counters, for stats() (which never touches the
  // engine); kept as they were when the session's link went (the source
  // gone: its counters go with it, before this peer ends).
  for (auto& p : in) {
    if (p->mirror != nullptr && !p->dead && p->mirror->control->stats() != nullptr) {
      refresh_mirror_counts(*p);
    }
  }
}

// ---- the API ------------------------------------------------------------

namespace {

// pending_attach: an attach to the handle's anchor, on its ticket when it
// has one (not for a resume: that is an ATTACH's), else under a fresh
// session (getrandom: drawn before the node's lock is taken).
std::shared_ptr<PendingAttach> pending_attach(const mux::AnchorHandle& h, uint64_t resume_session) {
  auto a = std::make_shared<PendingAttach>();
  a->anchor = h.anchor;
  a->resume_session = resume_session;
  if (h.ticket.session != 0 && resume_session == 0) a->ticket = h.ticket;
  a->session = a->ticket.session != 0 ? a->ticket.session : random_u64();
  return a;
}

}  // namespace

std::unique_ptr<Anchor> Node::create_anchor(AnchorKind kind) {
  NodeImpl& m = *impl_;
  // Not make_shared: tickets_due holds a weak_ptr for the accept timeout
  // (60 s), and with make_shared that would keep the whole AnchorState's
  // memory of a closed anchor that long; apart, only the control block.
  std::shared_ptr<AnchorState> st(new AnchorState());
  st->id = random_u64();  // getrandom: before the lock
  st->kind = kind;
  st->spare_stream = std::make_unique<AnchorStream>();  // its first stream's state, made here, not on its first token
  st->streams.reserve(1);
  if (m.mux.enabled) st->spare_rx = mux::PeerReceiver::make_spare();
  if (m.mux.enabled && m.opt.tickets && kind == AnchorKind::kSingleSender) {
    // Its attach answered in advance (§5.2.1): what an ATTACH response
    // would grant, under a session drawn here. Single-sender only: a
    // ticket opens one stream, and a multi-sender handle goes to many.
    st->ticket = mux::Ticket{random_u64(), m.mux.initial_credit, m.mux.slot_byte_budget, m.mux.peer_byte_budget};
  }
  const mux::AnchorHandle h{m.worker, st->id, st->ticket};
  const uint64_t now = monotonic_ns();
  std::lock_guard l(m.mu);
  m.anchors[st->id] = st;
  if (st->ticket.session != 0) m.tickets_due.emplace_back(st, now + m.mux.accept_timeout_ns);
  return std::unique_ptr<Anchor>(new Anchor(impl_, st, h));
}

absl::StatusOr<std::unique_ptr<Sender>> Node::attach(const mux::AnchorHandle& h, const net::Endpoint& peer,
                                                     uint64_t resume_session) {
  NodeImpl& m = *impl_;
  if (!m.mux.enabled) {
    if (resume_session != 0) return absl::InvalidArgumentError("attach: a resume is the mux's (this node has it off)");
    return m.attach_tcp(impl_, h, peer);  // no mux here: one connection per stream
  }
  std::shared_ptr<OutPeer> p;
  {
    std::lock_guard l(m.mu);
    if (auto it = m.out.find(h.worker); it != m.out.end() && !it->second->dead) p = it->second;
  }
  if (p == nullptr) {
    // A new peer: connect here (setup may block; the conductor must not).
    // The conductor watches the connection and sets the channel up.
    // From our control address: the peer mirrors our channel from the
    // connection's source, and our serve listens there.
    auto fd = net::tcp_connect(peer, static_cast<int>(m.opt.attach_timeout_ns / 1'000'000), m.opt.control.ip);
    if (!fd.ok()) return absl::Status(fd.status().code(), absl::StrCat("attach: ", fd.status().message()));
    net::detect_silent_peer(*fd, m.opt.silent_peer_ms);
    auto fresh = std::make_shared<OutPeer>();
    fresh->worker = h.worker;
    fresh->addr = peer;
    fresh->conn = std::make_unique<net::TcpConn>(*fd);
    fresh->epoch = random_u64();
    fresh->created_ns = monotonic_ns();
    fresh->sender.emplace(m.mux, fresh->epoch);
    bool refused = false;
    {
      std::lock_guard l(m.mu);
      if (auto it = m.out.find(h.worker); it != m.out.end() && !it->second->dead) {
        p = it->second;  // another attach got there first (the fresh connection closes below)
      } else if (m.out.size() >= m.opt.max_connections || m.stopping.load()) {
        refused = true;
      } else {
        p = m.out[h.worker] = fresh;
        fresh = nullptr;
      }
    }
    if (refused) {
      return absl::ResourceExhaustedError(absl::StrCat("attach: max_connections (", m.opt.max_connections, ") reached"));
    }
  }
  auto a = pending_attach(h, resume_session);
  bool opened = false;
  {
    std::lock_guard l(m.mu);
    if (p->dead) return absl::UnavailableError("attach: the peer is gone");
    if (a->ticket.session != 0 && p->node_seen) {
      // A ticket to a peer that answered our NODE: no round trip, no
      // wake-up — the stream opens in the channel now.
      m.open_ticket(*p, *a);
      opened = true;
    } else {
      // A request, or a ticket that waits for a new peer's NODE answer
      // (what it says — another key, another node — is the caller's error).
      p->attaches.push_back(a);
    }
  }
  if (!opened) m.wake();
  std::unique_lock l(m.mu);
  return await_attach(l, p, a, h, peer, monotonic_ns() + m.opt.attach_timeout_ns);
}

absl::StatusOr<std::unique_ptr<Sender>> Node::await_attach(std::unique_lock<std::mutex>& l,
                                                           const std::shared_ptr<OutPeer>& p,
                                                           const std::shared_ptr<PendingAttach>& a,
                                                           const mux::AnchorHandle& h, const net::Endpoint& peer,
                                                           uint64_t deadline_ns) {
  NodeImpl& m = *impl_;
  // A ticket's is done once opened: its first batch waits for the channel, not its caller.
  const auto answered = [&] {
    return a->done && (!a->status.ok() || a->tcp_chosen || a->ticket.session != 0 || p->channel_ready || p->dead);
  };
  const uint64_t now = monotonic_ns();
  if (!m.attach_cv.wait_for(l, std::chrono::nanoseconds(deadline_ns > now ? deadline_ns - now : 0), answered)) {
    if (a->done && a->status.ok() && !a->tcp_chosen) p->sender->abort(a->slot);  // answered, but no channel in time
    a->abandoned = true;
    return absl::DeadlineExceededError(absl::StrCat("attach: no answer from ", net::to_string(peer), " within ",
                                                    m.opt.attach_timeout_ns / 1'000'000, " ms"));
  }
  if (!a->status.ok()) return a->status;
  if (p->dead && !a->tcp_chosen) return absl::UnavailableError("attach: the peer went away");
  if (a->tcp_chosen) {
    if (a->resume_session != 0) return absl::FailedPreconditionError("attach: the peer answered a resume without the mux");
    l.unlock();
    auto s = m.attach_tcp(impl_, h, peer);  // the peer does not take the mux
    l.lock();
    return s;
  }
  auto sender = std::unique_ptr<Sender>(new Sender(impl_, p, a->slot, a->session));
  sender->resume_at_ = a->resume_at;
  return sender;
}

std::vector<absl::StatusOr<std::unique_ptr<Sender>>> Node::attach_many(std::span<const mux::AnchorHandle> handles,
                                                                        const net::Endpoint& peer) {
  NodeImpl& m = *impl_;
  std::vector<absl::StatusOr<std::unique_ptr<Sender>>> out;
  out.reserve(handles.size());
  if (handles.empty()) return out;
  // The first sets the peer up (a new one's connection and channel); the
  // rest of that peer's go at once: every request queued, one wake-up,
  // then the answers awaited (they come back in a read or a few).
  out.push_back(attach(handles[0], peer));
  // The rest of that worker's queue on its peer whatever the first's
  // answer (a refusal is that stream's; a per-stream answer is awaited as
  // one), under one deadline. With no live peer (it could not be
  // reached), they fail as the first did, not one full timeout each.
  std::vector<std::shared_ptr<PendingAttach>> pending(handles.size());
  for (size_t i = 1; i < handles.size(); ++i) {
    if (handles[i].worker != handles[0].worker) continue;  // another node's: attached alone below
    pending[i] = pending_attach(handles[i], 0);
  }
  std::shared_ptr<OutPeer> p;
  if (m.mux.enabled) {
    std::lock_guard l(m.mu);
    if (auto it = m.out.find(handles[0].worker); it != m.out.end() && !it->second->dead) {
      p = it->second;
      for (const auto& a : pending) {
        if (a == nullptr) continue;
        if (a->ticket.session != 0 && p->node_seen) {
          m.open_ticket(*p, *a);  // no request: opened now
        } else {
          p->attaches.push_back(a);
        }
      }
    }
  }
  const bool unreachable = m.mux.enabled && p == nullptr && !out[0].ok();
  m.wake();
  const uint64_t deadline = monotonic_ns() + m.opt.attach_timeout_ns;
  std::unique_lock l(m.mu);
  for (size_t i = 1; i < handles.size(); ++i) {
    if (pending[i] != nullptr && p != nullptr) {
      out.push_back(await_attach(l, p, pending[i], handles[i], peer, deadline));
    } else if (handles[i].worker == handles[0].worker && unreachable) {
      out.push_back(out[0].status());  // the same peer, which the first could not reach
    } else {
      l.unlock();
      out.push_back(attach(handles[i], peer));  // another node's handle, or a node with the mux off
      l.lock();
    }
  }
  return out;
}

void Node::flush_batch() {
  NodeImpl& m = *impl_;
  bool left = false;
  EgressRuns runs;
  {
    std::lock_guard l(m.mu);
    const uint64_t now = monotonic_ns();
    for (auto& [w, p] : m.out) {
      if (!p->sender || p->dead) continue;
      p->sender->kick();
      // Under Manual the batches are built here, on the caller's thread
      // (one hand-off fewer); what admission holds back, and a channel not
      // set up yet, the conductor does.
      if (m.opt.build_on_flush && p->serve_link != nullptr && !p->broken && p->channel_ready) {
        p->broken = !m.pump_out(*p, now, &runs);
        left |= p->broken || p->sender->has_staged();
      } else {
        left = true;
      }
    }
  }
  NodeImpl::run_egress(runs);  // the batches leave: no lock held
  m.tell_closes();  // a stalled slot this flush killed
  if (left) m.wake();
}

size_t Node::send_many(std::span<SendOne> sends) {
  NodeImpl& m = *impl_;
  size_t sent = 0;
  bool liveness = false, apart = false;
  {
    std::lock_guard l(m.mu);
    const uint64_t now = monotonic_ns();
    for (SendOne& one : sends) {
      Sender& s = *one.sender;
      if (s.node_ != impl_ || s.tcp_) {
        apart = true;  // another node's sender, or a per-stream one: sent below, under its own lock
        continue;
      }
      if (s.peer_->dead || s.done_) {
        one.status = mux::SendStatus::kClosed;
      } else {
        one.status = s.peer_->sender->send(s.slot_, one.record, now);
      }
      sent += one.status == mux::SendStatus::kSent;
      liveness |= one.status == mux::SendStatus::kSent;
    }
  }
  for (SendOne& one : sends) {
    if (apart && (one.sender->node_ != impl_ || one.sender->tcp_)) {
      sent += (one.status = one.sender->send(one.record)) == mux::SendStatus::kSent;
    }
  }
  if (liveness && m.mux.flush.kind == mux::FlushPolicy::Kind::kAuto) m.wake();
  return sent;
}

bool Node::drain(uint64_t timeout_ns) {
  NodeImpl& m = *impl_;
  const uint64_t until = monotonic_ns() + timeout_ns;
  for (;;) {
    bool idle = true;
    std::vector<std::shared_ptr<TcpStreamOut>> touts;
    {
      std::lock_guard l(m.mu);
      for (const auto& [w, p] : m.out) {
        if (p->dead || !p->sender || !p->egress) continue;
        idle &= p->sender->idle() && p->applied == p->egress->next_seq();
      }
      touts = m.tcp_out;
    }
    for (const auto& t : touts) {
      std::lock_guard w(t->wmu);
      idle &= t->conn == nullptr || t->conn->pending() == 0;
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
  s.rings_warmed = impl_->rings_warmed.load(std::memory_order_relaxed);
  s.out = impl_->out_ended;
  s.in = impl_->in_ended;
  for (const auto& [w, p] : impl_->out) {
    if (p->sender && !p->dead) {
      s.out = sum(s.out, p->sender->stats());
      s.live_slots += p->sender->live_slots();
      s.withheld_bytes += p->sender->withheld_total_bytes();
      s.outstanding_bytes += p->sender->outstanding_bytes();
    }
    if (p->serve_link && !p->dead) impl_->add_serve_counters(*p->serve_link, &s);
  }
  for (const auto& p : impl_->in) {
    if (p->dead) continue;
    if (p->receiver) {
      s.in = sum(s.in, p->receiver->stats());
      s.live_streams += p->receiver->live_streams();
      s.buffered_bytes += p->receiver->buffered_bytes();
    }
    s = sum(s, p->mirror_counts);  // the conductor's copy of its channel mirror's counters
  }
  s.anchors = impl_->anchors.size();
  for (const auto& t : impl_->tcp_out) s.tcp_records_out += t->records_out.load(std::memory_order_relaxed);
  return s;
}

mux::SendStatus Sender::send_tcp(proto::ConstBytes record) {
  TcpStreamOut& t = *tcp_;
  std::lock_guard w(t.wmu);
  if (done_ || t.closed || t.conn == nullptr) return mux::SendStatus::kClosed;
  if (record.size() > t.byte_budget) return mux::SendStatus::kTooLarge;
  if (t.conn->pending() + record.size() > t.byte_budget) return mux::SendStatus::kFull;
  std::byte h[proto::kFrameHeaderBytes];
  proto::encode_frame_header(
      proto::FrameHeader{FrameKind::kStream, 0, 0, static_cast<uint32_t>(record.size()), t.frame_seq}, h);
  t.conn->queue({h, sizeof(h)});
  t.conn->queue(record);
  if (!t.conn->flush()) {  // written now, on this thread (the per-stream path's cost)
    t.closed = true;
    node_->closes_owed.store(true, std::memory_order_relaxed);  // told by send() once wmu is released
    return mux::SendStatus::kClosed;
  }
  if (t.conn->pending() != 0 && !t.unwritten.exchange(true, std::memory_order_relaxed)) node_->wake();
  ++t.frame_seq;
  t.records_out.fetch_add(1, std::memory_order_relaxed);
  return mux::SendStatus::kSent;
}

mux::SendStatus Sender::send(proto::ConstBytes record) {
  if (tcp_) {  // the per-stream path: one STREAM frame per record, written now
    const mux::SendStatus st = send_tcp(record);
    if (st == mux::SendStatus::kClosed) node_->tell_closes();  // a write that failed closed it: its lock released
    return st;
  }
  mux::SendStatus st;
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
      std::lock_guard w(tcp_->wmu);
      if (done_ || tcp_->closed || tcp_->conn == nullptr) return false;
      std::byte h[proto::kFrameHeaderBytes];
      proto::encode_frame_header(
          proto::FrameHeader{FrameKind::kStream, proto::kStreamTerminal, 0, 0, tcp_->frame_seq++}, h);
      tcp_->conn->send({h, sizeof(h)});
      tcp_->finished = done_ = true;
    }
    node_->closes_owed.store(true, std::memory_order_relaxed);  // a wait_closed on another thread returns
    node_->tell_closes();
    node_->wake();  // the conductor closes the connection once the terminal is out
    return true;
  }
  {
    std::lock_guard l(node_->mu);
    if (peer_->dead || done_) return false;
    ok = peer_->sender->finish(slot_);
    done_ = true;
  }
  node_->closes_owed.store(true, std::memory_order_relaxed);  // a wait_closed on another thread returns
  node_->tell_closes();
  node_->wake();  // the terminal is a liveness record: it moves its batch
  return ok;
}

bool Sender::closed() const {
  if (tcp_) {
    std::lock_guard w(tcp_->wmu);
    return done_ || tcp_->closed || tcp_->conn == nullptr;
  }
  std::lock_guard l(node_->mu);
  return done_ || peer_->dead || peer_->sender->closed(slot_);
}

bool Sender::wait_closed(uint64_t timeout_ns) {
  NodeImpl& m = *node_;
  // At most ten years: a "forever" (UINT64_MAX) must not wrap negative.
  timeout_ns = std::min<uint64_t>(timeout_ns, uint64_t{10} * 365 * 86'400 * 1'000'000'000);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  for (;;) {
    // The generation is read before closed() looks: a close after that
    // look moves it (tell_closes), so the wait below returns.
    uint64_t gen;
    {
      std::lock_guard c(m.close_mu);
      gen = m.close_gen;
    }
    if (closed()) return true;
    std::unique_lock c(m.close_mu);
    if (!m.closed_cv.wait_until(c, deadline, [&] { return m.close_gen != gen; })) {
      c.unlock();
      return closed();
    }
  }
}

Sender::~Sender() {
  if (tcp_) {  // without its terminal: the connection closes and the consumer sees the stream dropped
    std::lock_guard w(tcp_->wmu);
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
