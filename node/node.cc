// node.cc — the Node: its engine and control listener, the node thread
// (the engine's conductor, the control connections, the owner side's
// batching into egress rings), one applier thread per producing peer, and
// the API objects. Threads and what they hold:
//   node thread   engine_ (only it), every TcpConn, OutPeer/InPeer set-up
//                 and teardown; builds batches under mu
//   applier (one per InPeer)  reads its ingress ring, applies under mu
//   callers       Sender/Anchor/Node calls: under mu, never blocking on I/O
//                 (attach waits on a condition variable for its answer)
#include "node/node.h"

#include <dirent.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <type_traits>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "control/tcp_conn.h"
#include "engine/engine.h"
#include "mux/negotiation.h"
#include "node/node_peers.h"
#include "proto/attach.h"
#include "proto/frame.h"
#include "proto/stream_batch.h"
#include "ring/blob.h"
#include "ring/monotonic.h"
#include "ring/ring_file.h"

namespace ringfire::node {
namespace {

using control::TcpConn;
using proto::FrameKind;

constexpr uint64_t kChannelSchema = 0x3130305855464D52;  // "RFMUX001": a channel ring's schema
constexpr size_t kMaxConnBacklog = 4u << 20;              // output a peer leaves unread: cut past it
constexpr uint32_t kMaxControlBody = 64u << 10;

control::FrameLimits mux_limits() {
  control::FrameLimits l;
  auto allow = [&](FrameKind k, uint32_t max) {
    l.allowed[static_cast<uint8_t>(k)] = true;
    l.max_body[static_cast<uint8_t>(k)] = max;
  };
  allow(FrameKind::kNode, 256);
  allow(FrameKind::kAttach, 1024);
  allow(FrameKind::kMuxControl, kMaxControlBody);
  return l;
}

uint64_t random_u64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = monotonic_ns() * 0x9E3779B97F4A7C15ull;
  }
  return v;
}

uint64_t next_pow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// send_frame appends a frame (header + body) to a connection.
bool send_frame(TcpConn& c, FrameKind kind, uint64_t seq, proto::ConstBytes body) {
  std::byte h[proto::kFrameHeaderBytes];
  proto::encode_frame_header(proto::FrameHeader{kind, 0, 0, static_cast<uint32_t>(body.size()), seq}, h);
  return c.send({h, sizeof(h)}) && (body.empty() || c.send(body));
}

// sum adds every counter of b into a (the stats structs are all u64 counters).
template <typename Stats>
Stats sum(Stats a, const Stats& b) {
  static_assert(sizeof(Stats) % sizeof(uint64_t) == 0 && std::is_trivially_copyable_v<Stats>);
  uint64_t x[sizeof(Stats) / 8], y[sizeof(Stats) / 8];
  std::memcpy(x, &a, sizeof(a));
  std::memcpy(y, &b, sizeof(b));
  for (size_t i = 0; i < sizeof(Stats) / 8; ++i) x[i] += y[i];
  std::memcpy(&a, x, sizeof(a));
  return a;
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

struct NodeImpl {
  NodeOptions opt;
  uint64_t worker = 0;
  uint32_t record_cap = 0;  // the largest batch: one datagram's blob record
  mux::MuxConfig mux;       // opt.mux with max_batch_bytes clamped to record_cap
  std::unique_ptr<engine::Engine> engine;
  std::string data_path;
  int listen_fd = -1;
  dataplane::Endpoint listening;
  int wake_fd = -1;
  std::atomic<bool> wake_pending{false};
  std::atomic<bool> stopping{false};
  std::thread thread;
  control::FrameLimits limits = mux_limits();

  mutable std::mutex mu;  // guards everything below (and the peers' fields)
  std::condition_variable items_cv;   // an item may be ready for some anchor
  std::condition_variable attach_cv;  // an attach was answered
  std::map<uint64_t, std::shared_ptr<OutPeer>> out;  // by worker id
  std::vector<std::shared_ptr<InPeer>> in;
  std::vector<std::shared_ptr<TcpStreamOut>> tcp_out;  // per-stream connections this node opened
  std::map<uint64_t, std::shared_ptr<AnchorState>> anchors;
  uint64_t next_anchor = 1;
  mux::PeerSenderStats out_ended;
  mux::PeerReceiverStats in_ended;
  NodeStats counters;            // the node's own (peers, refusals, ...)
  std::vector<std::byte> buf;    // the node thread's batch buffer

  // wake: the node thread looks again (coalesced: one eventfd write while it has not looked).
  void wake() {
    if (!wake_pending.exchange(true, std::memory_order_acq_rel)) {
      const uint64_t one = 1;
      (void)!write(wake_fd, &one, sizeof(one));
    }
  }

  void log(const std::string& line) const {
    std::fprintf(stderr, "node %s: %s\n", opt.instance_id.c_str(), line.c_str());
  }

  ~NodeImpl();
  void loop();
  void step(uint64_t now);
  void accept_all(uint64_t now);
  void step_in(InPeer& p, uint64_t now);
  void step_out(OutPeer& p, uint64_t now);
  bool pump_out(OutPeer& p, uint64_t now);
  bool setup_out(OutPeer& p);
  void on_node(InPeer& p, const proto::Frame& f);
  void on_attach_request(InPeer& p, const proto::Frame& f);
  void on_out_frame(OutPeer& p, const proto::Frame& f);
  void end_out(OutPeer& p, const std::string& why);
  void step_tcp_out(TcpStreamOut& t);
  void on_stream_frame(InPeer& p, const proto::Frame& f);
  absl::StatusOr<std::unique_ptr<Sender>> attach_tcp(std::shared_ptr<NodeImpl> self, const mux::AnchorHandle& h,
                                                     const dataplane::Endpoint& peer);
  void end_in(InPeer& p, const std::string& why, std::vector<std::thread>* to_join);
  void applier(std::shared_ptr<InPeer> p);
  uint64_t next_wait(uint64_t now) const;
  // channel_arena: a channel ring's arena — room for half its records at
  // the record cap, and for a fenced batch (the ring's largest blob is a
  // quarter of the arena).
  uint64_t channel_arena() const {
    return next_pow2(std::max<uint64_t>(uint64_t{opt.channel_records} * record_cap, 4 * uint64_t{buf.size()}));
  }
  std::shared_ptr<InPeer> in_ptr(const InPeer& p) const;
};

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
  impl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) return absl::InternalError("node: eventfd failed");
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
    wake_pending.store(false, std::memory_order_release);
    const uint64_t now = monotonic_ns();
    accept_all(now);
    std::vector<std::thread> to_join;
    {
      std::lock_guard l(mu);
      step(now);
      for (auto& p : in) {
        if (!p->dead && (p->failed || p->conn == nullptr)) end_in(*p, p->failed ? "its channel lost a record" : "gone", &to_join);
      }
      std::erase_if(in, [](const std::shared_ptr<InPeer>& p) { return p->dead; });
      wait = next_wait(monotonic_ns());
    }
    for (std::thread& t : to_join) t.join();
  }
  // Stopping: every peer is lost.
  std::vector<std::thread> to_join;
  {
    std::lock_guard l(mu);
    for (auto& [w, p] : out) end_out(*p, "the node stops");
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
    for (auto& p : in) end_in(*p, "the node stops", &to_join);
    in.clear();
  }
  for (std::thread& t : to_join) t.join();
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
  }
  return until > now ? until - now : 0;
}

void NodeImpl::accept_all(uint64_t now) {
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    std::lock_guard l(mu);
    if (in.size() >= opt.max_connections) {
      close(fd);
      ++counters.refused;
      continue;
    }
    auto p = std::make_shared<InPeer>();
    p->conn = std::make_unique<TcpConn>(fd);
    p->accepted_ns = now;
    if (!engine->watch(fd).ok()) {
      ++counters.refused;
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

// ---- the receiver side: an accepted connection --------------------------

void NodeImpl::step_in(InPeer& p, uint64_t now) {
  if ((!p.node_seen || (p.per_stream && p.stream == nullptr)) && now - p.accepted_ns > opt.hello_timeout_ns) {
    ++counters.refused;
    p.conn.reset();  // no NODE (or, per-stream, no attached stream) in time: a stranger
    return;
  }
  if (p.close_after_flush && (!p.conn->flush() || p.conn->pending() == 0)) {
    p.conn.reset();  // its refusal is out
    return;
  }
  if (p.stream && (p.stream->cancelled || p.stream->ended)) {
    p.conn.reset();  // the consumer went away (the producer sees its connection close), or it is over
    return;
  }
  // The per-stream path's credit is TCP's window: read only while the
  // consumer keeps up.
  const bool room = p.stream == nullptr || p.stream->items.size() < p.stream->window;
  // At the peer's end of stream, what it sent before is still applied.
  if (room && !p.eof && !p.conn->read_available(1u << 20)) p.eof = true;
  proto::Frame f;
  size_t size = 0;
  bool drained = false;  // no whole frame left in the input
  for (;;) {
    if (p.stream && p.stream->items.size() >= p.stream->window) break;
    const TcpConn::Next n = p.conn->next_frame(&f, &size, limits);
    if (n == TcpConn::Next::kNeedMore) {
      drained = true;
      break;
    }
    if (n != TcpConn::Next::kFrame) {  // malformed or oversized: the stream cannot be resynchronised
      ++counters.frames_rejected;
      if (p.stream && !p.stream->ended) {
        p.stream->items.push_back(Item{Item::Kind::kDropped, 0, {}});
        p.stream->ended = true;
        items_cv.notify_all();
      }
      p.conn.reset();
      return;
    }
    if (!p.node_seen) {
      on_node(p, f);
    } else if (f.header.kind == FrameKind::kAttach) {
      on_attach_request(p, f);
    } else if (f.header.kind == FrameKind::kStream && p.stream) {
      on_stream_frame(p, f);
    } else {
      ++counters.frames_rejected;  // a known kind with no business on this side, or a newer one: skipped
    }
    if (p.conn == nullptr) return;
    p.conn->consume(size);
  }
  if (p.eof && drained) {
    if (p.stream && !p.stream->ended) {  // closed without its terminal
      p.stream->items.push_back(Item{Item::Kind::kDropped, 0, {}});
      p.stream->ended = true;
      items_cv.notify_all();
    }
    p.conn.reset();
    return;
  }
  if (p.receiver) {
    p.receiver->watchdog(now);
    for (;;) {
      const size_t n = p.receiver->build_control({buf.data(), buf.size()}, p.epoch);
      if (n == 0) break;
      send_frame(*p.conn, FrameKind::kMuxControl, p.applied, {buf.data(), n});
      p.reported = p.applied;
    }
    // The position alone, so the owner may reuse its egress ring.
    if (p.applied - p.reported >= opt.channel_records / 16) {
      send_frame(*p.conn, FrameKind::kMuxControl, p.applied, {});
      p.reported = p.applied;
    }
    items_cv.notify_all();  // watchdog ends, cancels: readers look again
  }
  if (!p.conn->flush() || p.conn->pending() > kMaxConnBacklog || (p.close_after_flush && p.conn->pending() == 0)) {
    p.conn.reset();
  }
}

void NodeImpl::on_node(InPeer& p, const proto::Frame& f) {
  proto::Node m;
  if (f.header.kind != FrameKind::kNode || proto::decode_node(f, &m) != proto::DecodeError::kOk) {
    ++counters.refused;
    p.conn.reset();
    return;
  }
  p.node_seen = true;
  p.worker = m.worker_id;
  proto::Node answer;
  answer.worker_id = worker;
  std::byte b[proto::kFrameHeaderBytes + proto::kNodeBody];
  if ((m.flags & proto::kNodeChannel) == 0 || !mux.enabled) {
    // One stream's own connection (the per-stream path), or a channel this
    // node does not take (its mux is off: every ATTACH is answered tcp).
    p.per_stream = (m.flags & proto::kNodeChannel) == 0;
    p.conn->send({b, proto::encode_node(answer, {b, sizeof(b)})});
    return;
  }
  const auto channels = std::count_if(in.begin(), in.end(), [](const auto& q) { return q->receiver && !q->dead; });
  if (static_cast<uint64_t>(channels) >= opt.max_channels) {
    ++counters.refused;  // a mirror session and a ring each: bounded
    p.conn.reset();
    return;
  }
  p.epoch = m.channel_epoch;
  p.receiver = std::make_unique<mux::PeerReceiver>(mux);
  // Mirror its channel: the serve on the connection's own address (never
  // one a stranger names elsewhere), into a ring of our own.
  const dataplane::Endpoint peer = p.conn->peer();
  p.ring_path = ring::ring_path(absl::StrFormat("rf%d-mux-in-%016x", getpid(), m.channel_epoch), opt.ring_dir);
  p.mirror_name = absl::StrFormat("mux-in-%016x", m.channel_epoch);
  engine::MirrorSpec spec;
  spec.name = p.mirror_name;
  spec.port = opt.port.name;
  spec.options.source = dataplane::Endpoint{peer.ip, m.channel_port};
  spec.options.ring = p.ring_path;
  spec.options.dir = opt.ring_dir;
  spec.options.from = control::MirrorOptions::From::kOldest;
  spec.options.unicast = true;
  spec.options.expected_schema = kChannelSchema;
  spec.options.local_ip = opt.port.ip;
  const uint64_t arena = channel_arena();
  spec.options.max_ring_bytes = uint64_t{opt.channel_records} * sizeof(ring::BlobDescriptor) + arena;
  auto placed = engine->add_mirror(std::move(spec));
  if (!placed.ok()) {
    log(absl::StrCat("channel from ", p.worker, ": ", placed.status().message()));
    p.mirror_name.clear();
    p.conn.reset();
    return;
  }
  ++counters.peers_in;
  p.applier = std::thread([this, self = in_ptr(p)] { applier(self); });
  p.conn->send({b, proto::encode_node(answer, {b, sizeof(b)})});
}

void NodeImpl::on_stream_frame(InPeer& p, const proto::Frame& f) {
  TcpStreamIn& t = *p.stream;
  if (t.ended || f.header.seq != t.next_frame || f.body.size() > mux.slot_byte_budget) {
    ++counters.frames_rejected;  // out of order, after its end, or larger than a slot may hold
    if (!t.ended) {
      t.items.push_back(Item{Item::Kind::kDropped, 0, {}});
      t.ended = true;
    }
    items_cv.notify_all();
    return;
  }
  ++t.next_frame;
  if ((f.header.flags & proto::kStreamTerminal) != 0) {
    t.items.push_back(Item{Item::Kind::kFinished, 0, {}});
    t.ended = true;
  } else {
    t.items.push_back(Item{Item::Kind::kData, 0, std::vector<std::byte>(f.body.begin(), f.body.end())});
    ++counters.tcp_records_in;
  }
  items_cv.notify_all();
}

void NodeImpl::on_attach_request(InPeer& p, const proto::Frame& f) {
  proto::AttachMessage type;
  proto::AttachRequest req;
  if (proto::attach_message_type(f.body, &type) != proto::DecodeError::kOk || type != proto::AttachMessage::kRequest ||
      proto::decode_attach_request(f.body, &req) != proto::DecodeError::kOk) {
    ++counters.frames_rejected;
    return;
  }
  auto it = anchors.find(req.anchor_id);
  AnchorState* a = it == anchors.end() ? nullptr : it->second.get();
  const bool known = a != nullptr && !a->cancelled;
  if (p.per_stream) {
    if (p.stream != nullptr) {  // one stream per connection
      ++counters.frames_rejected;
      p.conn.reset();
      return;
    }
    req.supported_keys &= proto::kTransportTcp;  // this connection is the stream: tcp is the only answer
  }
  proto::AttachResponse resp = mux::answer(req, mux, known);
  if (p.per_stream) {
    if (resp.status != proto::AttachStatus::kOk) {
      // unknown anchor: answered below, then closed
    } else if (a->kind == AnchorKind::kSingleSender && a->attached_once) {
      resp.status = proto::AttachStatus::kRefused;
    } else {
      p.stream = std::make_shared<TcpStreamIn>();
      p.stream->window = mux.initial_credit;
      a->attached_once = true;
      a->streams.push_back(AnchorStream{req.session_id, nullptr, nullptr, p.stream});
      ++counters.tcp_streams_in;
    }
    ++(resp.status == proto::AttachStatus::kOk ? counters.attaches_answered : counters.attaches_refused);
    std::byte body[256];
    send_frame(*p.conn, FrameKind::kAttach, 0, {body, proto::encode_attach_response(resp, {body, sizeof(body)})});
    p.close_after_flush = p.stream == nullptr;  // refused: the connection has no other use
    return;
  }
  if (p.receiver == nullptr && resp.transport_key == proto::kTransportMux) {
    resp = mux::answer(req, mux::MuxConfig{}, known);  // no channel here: the per-stream path
  }
  if (known && a->kind == AnchorKind::kSingleSender && a->attached_once) resp.status = proto::AttachStatus::kRefused;
  // A tcp answer here registers nothing: the producer attaches again on
  // the stream's own connection (§5.5).
  if (resp.status == proto::AttachStatus::kOk && resp.transport_key == proto::kTransportMux) {
    mux::PeerReceiver::Stream* s = p.receiver->expect(req.anchor_id, req.session_id, resp.initial_credit);
    if (s == nullptr) {
      resp.status = proto::AttachStatus::kRefused;  // max_streams_per_peer registered
    } else {
      a->attached_once = true;
      a->streams.push_back(AnchorStream{req.session_id, in_ptr(p), s, nullptr});
    }
  }
  ++(resp.status == proto::AttachStatus::kOk ? counters.attaches_answered : counters.attaches_refused);
  std::byte body[256];
  const size_t n = proto::encode_attach_response(resp, {body, sizeof(body)});
  send_frame(*p.conn, FrameKind::kAttach, 0, {body, n});
}

std::shared_ptr<InPeer> NodeImpl::in_ptr(const InPeer& p) const {
  for (const auto& q : in) {
    if (q.get() == &p) return q;
  }
  return nullptr;
}

void NodeImpl::applier(std::shared_ptr<InPeer> p) {
  // The mirror creates the ring once the source's GEOMETRY is in.
  std::optional<ring::BlobConsumer> c;
  while (!p->stop.load()) {
    if (access(p->ring_path.c_str(), F_OK) == 0) {
      ring::RingExpectation want;
      want.blob = true;
      want.schema_signature = kChannelSchema;
      auto f = ring::RingFile::open(p->ring_path, want);
      if (f.ok()) {
        auto cons = ring::BlobConsumer::attach(std::move(*f), ring::StartPosition::oldest(), "mux-applier");
        if (cons.ok()) {
          c.emplace(std::move(*cons));
          break;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!c) return;
  std::vector<std::byte> rec(c->max_blob());
  while (!p->stop.load()) {
    uint32_t len = 0;
    const ring::ReadResult r = c->try_read(rec.data(), &len);
    if (r.lost != 0 || c->holes_skipped() != 0) {  // a record the channel never delivered: it is broken
      std::lock_guard l(mu);
      p->failed = true;
      ++counters.channel_failures;
      wake();
      return;
    }
    if (!r.ok) {
      wake();  // drained: credit and position may be owed
      c->park(1'000'000);
      continue;
    }
    {
      std::lock_guard l(mu);
      if (p->dead) return;
      p->receiver->apply({rec.data(), len}, monotonic_ns(), nullptr);
      p->applied = r.seq + 1;
    }
    items_cv.notify_all();
  }
}

void NodeImpl::end_in(InPeer& p, const std::string& why, std::vector<std::thread>* to_join) {
  p.dead = true;
  p.stop.store(true);
  if (p.applier.joinable()) to_join->push_back(std::move(p.applier));
  if (p.receiver) {
    p.receiver->peer_lost();  // every live stream: exactly one Dropped
    const mux::PeerReceiverStats& s = p.receiver->stats();
    in_ended = sum(in_ended, s);
  }
  if (p.conn) engine->unwatch(p.conn->fd());
  p.conn.reset();
  if (!p.mirror_name.empty()) {
    (void)engine->remove(p.mirror_name);
    unlink(p.ring_path.c_str());
    p.mirror_name.clear();
  }
  ++counters.peers_lost;
  if (p.receiver) log(absl::StrFormat("peer %016x: channel ended: %s", p.worker, why));
  items_cv.notify_all();
}

// ---- the owner side: a peer this node produces to -----------------------

bool NodeImpl::setup_out(OutPeer& p) {
  // The egress ring: half its records may be unapplied at the peer, each at
  // most one record cap, so the arena never overwrites what the peer still
  // needs (the admission check in step_out keeps it so).
  ring::RingOptions ro;
  ro.name = absl::StrFormat("rf%d-mux-out-%016x", getpid(), p.epoch);
  ro.dir = opt.ring_dir;
  ro.capacity = opt.channel_records;
  ro.slot_size = sizeof(ring::BlobDescriptor);
  ro.arena_size = channel_arena();
  ro.flags = ring::kFlagBlob;
  ro.schema_signature = kChannelSchema;
  p.ring_path = ring::ring_path(ro.name, ro.dir);
  auto file = ring::RingFile::create(ro);
  if (!file.ok()) {
    log(absl::StrCat("egress ring: ", file.status().message()));
    return false;
  }
  auto prod = ring::BlobProducer::attach(std::move(*file));
  if (!prod.ok()) {
    unlink(p.ring_path.c_str());
    return false;
  }
  p.egress.emplace(std::move(*prod));
  p.cum_bytes.assign(opt.channel_records, 0);
  engine::ServeSpec spec;
  spec.name = absl::StrFormat("mux-out-%016x", p.epoch);
  spec.port = opt.port.name;
  spec.ring = p.ring_path;
  spec.from_oldest = true;
  spec.bind_ip = opt.port.ip;
  spec.unicast = true;
  spec.worker.session = static_cast<uint8_t>(p.epoch | 1);
  spec.worker.mtu = opt.port.mtu;
  spec.worker.pace_ns = 0;  // a batch is the unit: it leaves at once
  // Its TCP listener is on the control address (a kernel one: a DPDK
  // port's address may exist only on its own link); DATA leaves the port.
  spec.control.listen = dataplane::Endpoint{opt.control.ip, 0};
  spec.control.log = [this](const std::string& line) { log(line); };
  auto placed = engine->add_serve(std::move(spec));
  if (!placed.ok()) {
    log(absl::StrCat("egress serve: ", placed.status().message()));
    unlink(p.ring_path.c_str());
    return false;
  }
  p.serve_name = (*placed)->spec.name;
  p.serve_link = (*placed)->link;
  proto::Node m;
  m.flags = proto::kNodeChannel;
  m.worker_id = worker;
  m.channel_epoch = p.epoch;
  m.channel_port = (*placed)->control->listening().port;
  std::byte b[proto::kFrameHeaderBytes + proto::kNodeBody];
  const size_t n = proto::encode_node(m, {b, sizeof(b)});
  p.conn->send({b, n});
  ++counters.peers_out;
  return true;
}

void NodeImpl::step_out(OutPeer& p, uint64_t now) {
  if (p.serve_name.empty() && !setup_out(p)) {
    end_out(p, "its channel could not be set up");
    return;
  }
  if (!p.conn->read_available(1u << 20)) {
    end_out(p, "its control connection closed");
    return;
  }
  proto::Frame f;
  size_t size = 0;
  for (;;) {
    const TcpConn::Next n = p.conn->next_frame(&f, &size, limits);
    if (n == TcpConn::Next::kNeedMore) break;
    if (n != TcpConn::Next::kFrame) {
      ++counters.frames_rejected;
      end_out(p, "it sent a malformed frame");
      return;
    }
    on_out_frame(p, f);
    if (p.dead) return;
    p.conn->consume(size);
  }
  // Ready once the peer's mirror streams the channel by UDP: the first
  // tokens of a new peer's streams then never wait for the channel's set-up
  // (they would arrive by its TCP catch-up).
  if (!p.channel_ready && p.serve_link != nullptr && p.serve_link->stats.unicast_mirrors.get() > 0) {
    p.channel_ready = true;
    attach_cv.notify_all();
  }
  if (p.node_seen) {
    for (auto& a : p.attaches) {
      if (a->sent) continue;
      proto::AttachRequest req;
      req.anchor_id = a->anchor;
      req.session_id = a->session;
      req.supported_keys = mux::supported_keys(mux);
      std::byte body[256];
      const size_t n = proto::encode_attach_request(req, {body, sizeof(body)});
      send_frame(*p.conn, FrameKind::kAttach, 0, {body, n});
      a->sent = true;
    }
  }
  if (p.broken || !pump_out(p, now)) {
    end_out(p, "a batch larger than its ring's largest blob");
    return;
  }
  if (!p.conn->flush() || p.conn->pending() > kMaxConnBacklog) end_out(p, "it does not read its control connection");
}

// pump_out publishes the batches that are due into the egress ring, while
// the peer has applied enough of it: neither half the ring's records nor
// half its arena may be ahead of what the peer applied, so the ring never
// overwrites a batch it needs. Under mu, on the node thread or (Manual) on
// flush_batch()'s caller; false if a batch could not be published.
bool NodeImpl::pump_out(OutPeer& p, uint64_t now) {
  const uint64_t arena_half = channel_arena() / 2;
  bool published = false;
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
  // A worker with other sessions parks in poll(), not on this ring: poke it.
  if (published && p.serve_link != nullptr) dataplane::poke_worker(*p.serve_link);
  return true;
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
    p.node_seen = true;
    return;
  }
  if (f.header.kind == FrameKind::kAttach) {
    proto::AttachMessage type;
    proto::AttachResponse resp;
    if (proto::attach_message_type(f.body, &type) != proto::DecodeError::kOk || type != proto::AttachMessage::kResponse ||
        proto::decode_attach_response(f.body, &resp) != proto::DecodeError::kOk) {
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
    } else if (auto slot = p.sender->open(a->anchor, a->session, choice->credit, monotonic_ns()); !slot) {
      a->status = absl::ResourceExhaustedError("max_streams_per_peer streams are open to that peer");
    } else {
      a->slot = *slot;
      if (a->abandoned) p.sender->abort(*slot);
    }
    attach_cv.notify_all();
    return;
  }
  if (f.header.kind == FrameKind::kMuxControl) {
    if (f.header.seq > p.egress->next_seq() || f.header.seq < p.applied) {
      ++counters.frames_rejected;  // a position it cannot have
      return;
    }
    p.applied = f.header.seq;
    if (!f.body.empty()) p.sender->apply_control(f.body);
    return;
  }
  ++counters.frames_rejected;
}

void NodeImpl::end_out(OutPeer& p, const std::string& why) {
  p.dead = true;
  if (p.sender) {
    p.sender->peer_lost();
    out_ended = sum(out_ended, p.sender->stats());
  }
  for (auto& a : p.attaches) {
    a->done = true;
    a->status = absl::UnavailableError(absl::StrCat("the peer is gone: ", why));
  }
  p.attaches.clear();
  attach_cv.notify_all();
  if (p.conn) engine->unwatch(p.conn->fd());
  p.conn.reset();
  if (!p.serve_name.empty()) {
    p.serve_link = nullptr;  // freed with the session
    (void)engine->remove(p.serve_name);
    p.serve_name.clear();
  }
  if (!p.ring_path.empty()) unlink(p.ring_path.c_str());
  p.egress.reset();
  ++counters.peers_lost;
  log(absl::StrFormat("peer %016x: channel ended: %s", p.worker, why));
}

// ---- the per-stream TCP path, producer side ------------------------------

void NodeImpl::step_tcp_out(TcpStreamOut& t) {
  auto end = [&](const std::string& why) {
    t.closed = true;
    if (t.attach && !t.attach->done) {
      t.attach->done = true;
      t.attach->status = absl::UnavailableError(absl::StrCat("per-stream connection: ", why));
      attach_cv.notify_all();
    }
    engine->unwatch(t.conn->fd());
    t.conn.reset();
  };
  if (!t.conn->read_available(64u << 10)) return end("closed by the peer");
  proto::Frame f;
  size_t size = 0;
  for (;;) {
    const TcpConn::Next n = t.conn->next_frame(&f, &size, limits);
    if (n == TcpConn::Next::kNeedMore) break;
    if (n != TcpConn::Next::kFrame) {
      ++counters.frames_rejected;
      return end("a malformed frame");
    }
    if (f.header.kind == FrameKind::kNode && !t.node_seen) {
      proto::Node m;
      if (proto::decode_node(f, &m) != proto::DecodeError::kOk || m.worker_id != t.worker) {
        return end("the node there is not the handle's");
      }
      t.node_seen = true;
    } else if (f.header.kind == FrameKind::kAttach && t.attach && !t.attach->done) {
      proto::AttachMessage type;
      proto::AttachResponse resp;
      if (proto::attach_message_type(f.body, &type) != proto::DecodeError::kOk || type != proto::AttachMessage::kResponse ||
          proto::decode_attach_response(f.body, &resp) != proto::DecodeError::kOk || resp.session_id != t.attach->session) {
        ++counters.frames_rejected;
        return end("a bad ATTACH answer");
      }
      auto choice = mux::choose(resp, mux);
      t.attach->done = true;
      if (!choice.ok()) {
        t.attach->status = choice.status();
      } else if (choice->kind != mux::PathChoice::Kind::kTcp) {
        t.attach->status = absl::FailedPreconditionError("the peer chose the mux on a per-stream connection");
      } else {
        t.attached = true;
        if (resp.slot_byte_budget != 0) t.byte_budget = resp.slot_byte_budget;
      }
      attach_cv.notify_all();
      if (!t.attached) return end("refused");
    } else {
      ++counters.frames_rejected;  // nothing else comes this way
    }
    t.conn->consume(size);
  }
  if (!t.conn->flush()) return end("a write failed");
  if (t.finished && t.conn->pending() == 0) {
    shutdown(t.conn->fd(), SHUT_WR);  // the terminal is out: the stream is done
    engine->unwatch(t.conn->fd());
    t.conn.reset();
  }
}

absl::StatusOr<std::unique_ptr<Sender>> NodeImpl::attach_tcp(std::shared_ptr<NodeImpl> self, const mux::AnchorHandle& h,
                                                             const dataplane::Endpoint& peer) {
  auto fd = control::tcp_connect(peer, static_cast<int>(opt.attach_timeout_ns / 1'000'000));
  if (!fd.ok()) return absl::Status(fd.status().code(), absl::StrCat("attach: ", fd.status().message()));
  auto t = std::make_shared<TcpStreamOut>();
  t->conn = std::make_unique<TcpConn>(*fd);
  t->worker = h.worker;
  t->byte_budget = mux.slot_byte_budget;
  t->attach = std::make_shared<PendingAttach>();
  t->attach->anchor = h.anchor;
  t->attach->session = random_u64();
  std::unique_lock l(mu);
  if (stopping.load()) return absl::UnavailableError("attach: the node stops");
  proto::Node m;
  m.worker_id = worker;
  std::byte b[proto::kFrameHeaderBytes + proto::kNodeBody];
  t->conn->send({b, proto::encode_node(m, {b, sizeof(b)})});
  proto::AttachRequest req;
  req.anchor_id = h.anchor;
  req.session_id = t->attach->session;
  req.supported_keys = proto::kTransportTcp;
  std::byte body[256];
  send_frame(*t->conn, FrameKind::kAttach, 0, {body, proto::encode_attach_request(req, {body, sizeof(body)})});
  if (absl::Status st = engine->watch(*fd); !st.ok()) return st;  // epoll_ctl: any thread
  tcp_out.push_back(t);
  ++counters.tcp_streams_out;
  wake();
  std::shared_ptr<PendingAttach> a = t->attach;
  if (!attach_cv.wait_for(l, std::chrono::nanoseconds(opt.attach_timeout_ns), [&] { return a->done; })) {
    t->closed = true;  // the node thread closes it
    if (t->conn) shutdown(t->conn->fd(), SHUT_RDWR);
    return absl::DeadlineExceededError(absl::StrCat("attach: no answer from ", dataplane::to_string(peer)));
  }
  if (!a->status.ok()) return a->status;
  return std::unique_ptr<Sender>(new Sender(std::move(self), t, a->session));
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
        left |= p->broken || p->sender->staged_records() != 0;
      } else {
        left = true;
      }
    }
  }
  if (left) m.wake();
}

NodeStats Node::stats() const {
  std::lock_guard l(impl_->mu);
  NodeStats s = impl_->counters;
  s.out = impl_->out_ended;
  s.in = impl_->in_ended;
  for (const auto& [w, p] : impl_->out) {
    if (p->sender && !p->dead) s.out = sum(s.out, p->sender->stats());
  }
  for (const auto& p : impl_->in) {
    if (p->receiver && !p->dead) s.in = sum(s.in, p->receiver->stats());
  }
  // The engine is the node thread's, but its counters are single-writer
  // atomics any thread may read; the session list changes only under mu.
  for (const auto& m : impl_->engine->mirrors()) {
    if (const dataplane::MirrorWorkerStats* w = m->control->stats()) {
      s.channel_datagrams += w->datagrams.get();
      s.channel_tcp_frames += w->tcp_frames.get();
      s.channel_naks += w->naks.get();
      s.channel_held += w->held.get();
    }
  }
  return s;
}

mux::SendStatus Sender::send(proto::ConstBytes record) {
  mux::SendStatus st;
  if (tcp_) {  // the per-stream path: one STREAM frame per record, written now
    std::lock_guard l(node_->mu);
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

uint64_t Sender::unsent_bytes() const {
  std::lock_guard l(node_->mu);
  if (tcp_) return tcp_->conn ? tcp_->conn->pending() : 0;
  return peer_->dead || !peer_->sender ? 0 : peer_->sender->withheld_bytes(slot_);
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

bool Anchor::recv(Item* out, uint64_t timeout_ns) {
  NodeImpl& m = *node_;
  std::unique_lock l(m.mu);
  wake_ = false;
  auto take = [&]() {
    AnchorState& a = *state_;
    for (size_t i = 0; i < a.streams.size(); ++i) {
      const size_t k = (a.next + i) % a.streams.size();
      AnchorStream& s = a.streams[k];
      if (s.tcp) {  // the per-stream path
        if (s.tcp->items.empty()) continue;
        wake_ = s.tcp->items.size() >= s.tcp->window;  // the node thread stopped reading it
        *out = std::move(s.tcp->items.front());
        s.tcp->items.pop_front();
        out->session = s.session;
        if (out->kind != Item::Kind::kData) {
          a.streams.erase(a.streams.begin() + static_cast<std::ptrdiff_t>(k));
          a.next = 0;
        } else {
          a.next = k + 1;
        }
        return true;
      }
      mux::StreamItem it;
      if (!s.peer->receiver->pop(s.stream, &it)) continue;
      wake_ = it.kind != mux::StreamItem::Kind::kData || s.peer->receiver->grant_due(s.stream);
      out->session = s.session;
      out->kind = it.kind == mux::StreamItem::Kind::kData       ? Item::Kind::kData
                  : it.kind == mux::StreamItem::Kind::kFinished ? Item::Kind::kFinished
                                                                : Item::Kind::kDropped;
      out->bytes = std::move(it.bytes);
      if (it.kind != mux::StreamItem::Kind::kData) {
        a.streams.erase(a.streams.begin() + static_cast<std::ptrdiff_t>(k));  // its end: the stream is freed
        a.next = 0;
      } else {
        a.next = k + 1;
      }
      return true;
    }
    return false;
  };
  // A zero timeout never touches the condition variable: a timed wait that
  // has already expired still sleeps for the timer slack (~50 us).
  const bool got = timeout_ns == 0 ? take() : m.items_cv.wait_for(l, std::chrono::nanoseconds(timeout_ns), take);
  l.unlock();
  if (got && wake_) m.wake();  // a grant is due, a stream's connection may be read again, or an end freed
  return got;
}

void Anchor::cancel() {
  NodeImpl& m = *node_;
  {
    std::lock_guard l(m.mu);
    state_->cancelled = true;
    for (AnchorStream& s : state_->streams) {
      if (s.tcp) {
        s.tcp->cancelled = true;  // the node thread closes its connection
      } else {
        s.peer->receiver->cancel(s.stream);
      }
    }
    state_->streams.clear();
  }
  m.wake();
}

uint32_t Anchor::live_streams() const {
  std::lock_guard l(node_->mu);
  return static_cast<uint32_t>(state_->streams.size());
}

Anchor::~Anchor() {
  cancel();
  std::lock_guard l(node_->mu);
  node_->anchors.erase(state_->id);
}

}  // namespace ringfire::node
