// node_impl.h — the Node's private state (node/ only): NodeImpl, which
// node.cc (set-up, the conductor's pass, the API), receiver_side.cc (the
// accepted connections, channels mirrored in) and owner_side.cc (channels
// served out, the per-stream path's producer side) share; readiness.cc
// (the readers) applies the ingress rings.
// Threads and what they hold:
//   conductor     NodeImpl::conduct, run by the engine's conductor: the
//                 node's own thread over an engine of its own, or a host
//                 engine's (`ringfire run`). It alone calls the engine,
//                 accepts, reads and writes the control connections, makes
//                 and removes channel rings and sessions. It takes mu for
//                 protocol work only — frames are decoded and queued under
//                 it, and every system call (reads, writes, closes, ring
//                 and session set-up, log lines) waits until it let go.
//   readers       poll() / recv(): apply the ingress rings under mu on
//                 their own thread (no applier thread, no hand-off), then
//                 take items from the ready anchors; wait on `ready` (the
//                 channels' mirror workers signal it)
//   callers       Sender/Anchor/Node calls: under mu, memory only (attach
//                 waits on a condition variable for its answer). A
//                 flush_batch() or the conductor that published batches
//                 wakes the egress ring's reader and steps its worker once
//                 it let go of mu (EgressRun). A per-stream producer writes
//                 its own connection under that stream's lock, never mu.
// mu is never held across a system call: condition variables are notified
// and the readiness descriptor written once it is released.
#pragma once

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "dataplane/reader_wake.h"
#include "engine/engine.h"  // and engine/conductor_agent.h
#include "net/auth.h"
#include "net/tcp_conn.h"
#include "node/node.h"
#include "node/node_peers.h"
#include "proto/attach.h"
#include "proto/frame.h"
#include "ring/monotonic.h"

namespace ringfire::node {

using net::TcpConn;
using proto::FrameKind;

constexpr uint64_t kChannelSchema = 0x3130305855464D52;  // bytes "RMFUX001" (LE): a channel ring's schema
constexpr size_t kMaxConnBacklog = 4u << 20;              // output a peer leaves unread: cut past it
constexpr uint32_t kMaxControlBody = 64u << 10;
// kPositionEveryNs: a moved channel position (MUXCTL with no body) is
// reported this often at most, or at once past 1/16 of the ring: the owner
// needs it only for admission (half the ring may be ahead) and drain(), so
// a decode step's batches cost no report, and no wake-up of either node
// thread, of their own.
constexpr uint64_t kPositionEveryNs = 100'000'000;  // the credit sweep's (mux::PeerReceiver::kCreditSweepNs): one phase
// kReserveAfterNs: a channel's lazy rings are reserved whole this long
// after the channel came up (not on its first tokens' path: the
// allocation takes ~2 ms of the CPU the first token needs).
constexpr uint64_t kReserveAfterNs = 100'000'000;
// kWarmPerPass: once reserved, the channel rings are warmed
// (RingFile::warm) this much at a time, over all of them (~1 ms on this
// VM, not a 14 ms stall a ring), at most once each kWarmEveryNs.
constexpr uint64_t kWarmPerPass = 1u << 20;
constexpr uint64_t kWarmEveryNs = 1'000'000;
// The two ends of a channel that are nobody's fault (not logged).
inline constexpr const char* kClosedByPeer = "its control connection closed";
inline constexpr const char* kNodeStops = "the node stops";
constexpr size_t kApplyBudget = 256;              // ingress records applied per channel per turn (then others get mu)
constexpr uint64_t kWatchSliceNs = 10'000'000;    // a reader blocked in recv looks around at least this often

inline net::FrameLimits mux_limits() {
  net::FrameLimits l;
  auto allow = [&](FrameKind k, uint32_t max) {
    l.allowed[static_cast<uint8_t>(k)] = true;
    l.max_body[static_cast<uint8_t>(k)] = max;
  };
  allow(FrameKind::kNode, 256);
  allow(FrameKind::kAuth, proto::kAuthMirrorBody);  // the keyed exchange's step 3
  allow(FrameKind::kAttach, 1024);
  allow(FrameKind::kMuxControl, kMaxControlBody);
  return l;
}

inline uint64_t random_u64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = monotonic_ns() * 0x9E3779B97F4A7C15ull;
  }
  return v;
}

inline uint64_t next_pow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// queue_frame appends a frame (header + body) to a connection's output
// (no system call: the conductor writes it once it let go of mu).
inline void queue_frame(net::TcpConn& c, FrameKind kind, uint64_t seq, proto::ConstBytes body) {
  std::byte h[proto::kFrameHeaderBytes];
  proto::encode_frame_header(proto::FrameHeader{kind, 0, 0, static_cast<uint32_t>(body.size()), seq}, h);
  c.queue({h, sizeof(h)});
  if (!body.empty()) c.queue(body);
}

// queue_node appends a NODE frame (PROTOCOL.md §5.1); returns it as sent
// (a keyed exchange's proofs cover it).
inline std::vector<std::byte> queue_node(net::TcpConn& c, const proto::Node& m) {
  std::vector<std::byte> b(proto::kFrameHeaderBytes + proto::kNodeMaxBody);
  b.resize(proto::encode_node(m, b));
  c.queue(b);
  return b;
}

// frame_bytes: a frame decoded from a connection's input, as it came
// (header and body, contiguous there).
inline proto::ConstBytes frame_bytes(const proto::Frame& f) {
  return {f.body.data() - proto::kFrameHeaderBytes, proto::kFrameHeaderBytes + f.body.size()};
}

// The keyed NODE exchange, connector's side (§5.1): with a key, its NODE
// carries a fresh nonce (keyed_node), and the acceptor's answer must
// prove the key over it (prove_back checks that and sends the connector's
// own proof, AUTH step 3: "" when the peer may be trusted, else why not).
// Without a key, an answer is taken as it is.
inline proto::Node keyed_node(proto::Node m, const std::optional<net::Psk>& psk) {
  if (psk) {
    m.flags |= proto::kNodeKeyed | proto::kNodeFrameMac;
    m.nonce = net::random_nonce();
  }
  return m;
}
inline std::string prove_back(net::TcpConn& c, const std::optional<net::Psk>& psk, proto::ConstBytes mine,
                              const proto::Frame& f, const proto::Node& answer) {
  if (!psk) return (answer.flags & proto::kNodeKeyed) != 0 ? "it requires a pre-shared key (give this node --psk-file)" : "";
  if ((answer.flags & proto::kNodeProof) == 0) return "it holds no pre-shared key (this node has --psk-file; so must it)";
  if (!net::proofs_equal(answer.proof, net::node_accept_proof(*psk, mine, answer.nonce, answer.flags))) {
    return "it proved another pre-shared key";
  }
  proto::Auth a;
  a.step = proto::AuthStep::kNodeProof;
  a.proof = net::node_connect_proof(*psk, mine, frame_bytes(f));
  std::byte b[proto::kFrameHeaderBytes + proto::kAuthMirrorBody];
  const proto::ConstBytes step3(b, proto::encode_auth(a, {b, sizeof(b)}));
  c.queue(step3);
  // Both nodes asked (our NODE always does, keyed): every control frame
  // after step 3 is MACed, each way (§1.8.2).
  if ((answer.flags & proto::kNodeFrameMac) != 0) {
    c.start_frame_mac(net::node_frame_keys(*psk, mine, frame_bytes(f), step3, true));
  }
  return "";
}

// queue_attach appends an ATTACH frame holding a request or a response (§3).
inline void queue_attach(net::TcpConn& c, const proto::AttachRequest& m) {
  std::byte body[256];
  queue_frame(c, proto::FrameKind::kAttach, 0, {body, proto::encode_attach_request(m, {body, sizeof(body)})});
}
inline void queue_attach(net::TcpConn& c, const proto::AttachResponse& m) {
  std::byte body[256];
  queue_frame(c, proto::FrameKind::kAttach, 0, {body, proto::encode_attach_response(m, {body, sizeof(body)})});
}

// decode_attach reads an ATTACH body that must be a request (or a
// response): false for the other message, or one that does not decode.
inline bool decode_attach(const proto::Frame& f, proto::AttachRequest* out) {
  proto::AttachMessage type;
  return proto::attach_message_type(f.body, &type) == proto::DecodeError::kOk && type == proto::AttachMessage::kRequest &&
         proto::decode_attach_request(f.body, out) == proto::DecodeError::kOk;
}
inline bool decode_attach(const proto::Frame& f, proto::AttachResponse* out) {
  proto::AttachMessage type;
  return proto::attach_message_type(f.body, &type) == proto::DecodeError::kOk && type == proto::AttachMessage::kResponse &&
         proto::decode_attach_response(f.body, out) == proto::DecodeError::kOk;
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

// EgressRun: a channel whose egress ring a thread published into under
// mu: once mu is released, its parked reader is woken and its worker run
// (a parked kernel-port worker's step on this thread) or poked. The peer's
// `runners` count holds the ring and the serve until run_egress is done.
struct EgressRun {
  OutPeer* peer = nullptr;
  dataplane::ServeLink* link = nullptr;
  const ring::BlobProducer* egress = nullptr;
};
using EgressRuns = absl::InlinedVector<EgressRun, 8>;

struct NodeImpl : engine::ConductorAgent {
  // ready: the consumer's descriptor (Node::fd); the channels' mirror
  // workers and the conductor signal it. Declared before the engine,
  // whose sessions point at it, so it outlives them.
  dataplane::ReaderWake ready;
  NodeOptions opt;
  uint64_t worker = 0;
  int pid = 0;              // this process's (ring names): read once, not under mu
  uint64_t forks = 0;       // fork_count() when made: another count is a forked child's copy (inherited())
  // egress_made: the egress channels set up so far (conductor): their ring
  // and session names. Not the epoch — that is the channel token (PROTOCOL.md
  // 5.1), and /dev/shm and session names are readable by every local user.
  uint64_t egress_made = 0;
  uint32_t record_cap = 0;  // the largest batch: one datagram's blob record
  mux::MuxConfig mux;       // opt.mux with max_batch_bytes clamped to record_cap
  // engine: the conductor's — the node's own (own_engine, conducted by
  // `thread`), or the host's (opt.host). Only the conductor calls it.
  std::unique_ptr<engine::Engine> own_engine;
  engine::Engine* engine = nullptr;
  std::string data_path;
  int listen_fd = -1;
  net::Endpoint listening;
  int wake_fd = -1;
  int spare_fd = -1;       // held in reserve: freed to shed a connection when out of descriptors
  bool fds_warned = false;
  std::atomic<bool> wake_pending{false};
  std::atomic<bool> stopping{false};
  // rings_warmed: channel rings (egress and ingress) reserved and warmed
  // whole (NodeStats; a benchmark starts its clock once its channels'
  // are). Written by the conductor, read by stats(): a count, relaxed.
  std::atomic<uint64_t> rings_warmed{0};
  uint64_t next_warm_ns = 0;  // conductor: the next piece of warming is not before this
  bool stopped = false;    // conductor: every peer ended (stop_peers ran)
  std::thread thread;      // the conductor of own_engine
  net::FrameLimits limits = mux_limits();

  // The conductor's own (never under mu): connections cut under mu, closed
  // after it; log lines; peers ended, whose sessions, rings and sockets go
  // once mu is released (an OutPeer's once no runner holds it); the
  // batches its passes published.
  std::vector<std::unique_ptr<net::TcpConn>> closing;
  std::vector<std::string> logs_owed;
  std::vector<std::shared_ptr<InPeer>> retiring_in;
  std::vector<std::shared_ptr<OutPeer>> retiring_out;
  EgressRuns conductor_runs;
  std::vector<std::shared_ptr<OutPeer>> pass_out;  // this pass's peers (a snapshot of `out`)
  std::vector<std::shared_ptr<TcpStreamOut>> pass_tcp_out;

  mutable std::mutex mu;  // guards everything below (and the peers' fields)
  std::condition_variable items_cv;   // an item may be ready for some anchor (readers blocked in recv)
  std::condition_variable attach_cv;  // an attach was answered
  // Senders that may have closed (a cancel applied, a stall kill, a peer
  // lost, a per-stream connection ended): Sender::wait_closed sleeps on
  // closed_cv until close_gen moves. closes_owed is raised where it
  // happened (under mu or a stream's wmu) and told, outside every lock, by
  // tell_closes (the conductor's pass, flush_batch, stop).
  std::atomic<bool> closes_owed{false};
  std::mutex close_mu;
  std::condition_variable closed_cv;
  uint64_t close_gen = 0;  // close_mu
  void tell_closes() {
    // Acq_rel: pairs with the raisers' stores (relaxed, but made under mu
    // or wmu, which the teller took after them, or on its own thread).
    if (!closes_owed.exchange(false, std::memory_order_acq_rel)) return;
    {
      std::lock_guard c(close_mu);
      ++close_gen;
    }
    closed_cv.notify_all();
  }
  // sender_closes: a peer's cancel and stall-kill counts, so that a pass
  // that moved them raises closes_owed.
  static uint64_t sender_closes(const mux::PeerSender& s) {
    return s.stats().closed_by_receiver + s.stats().stalled_killed;
  }
  std::map<uint64_t, std::shared_ptr<OutPeer>> out;  // by worker id
  std::vector<std::shared_ptr<InPeer>> in;  // changed only by the conductor (which may read it without mu)
  std::vector<std::shared_ptr<TcpStreamOut>> tcp_out;  // per-stream connections this node opened
  std::map<uint64_t, std::shared_ptr<AnchorState>> anchors;
  uint64_t next_anchor = 1;
  mux::PeerSenderStats out_ended;
  mux::PeerReceiverStats in_ended;
  NodeStats counters;            // the node's own (peers, refusals, ...); ended channels' serve counters too
  std::vector<std::byte> buf;    // the batch buffer (whoever builds, under mu)
  // The anchors with an item, each once (AnchorState::listed), oldest first.
  std::deque<std::shared_ptr<AnchorState>> ready_anchors;
  // Anchors holding a stream's end for a resume (AnchorState::resume_session),
  // with the deadline each was held to: in deadline order (the window is
  // one), so the front is the next to expire; an entry whose anchor was
  // taken over, cancelled or held again since is stale and dropped.
  std::deque<std::pair<std::shared_ptr<AnchorState>, uint64_t>> resuming;
  // Anchors given a ticket, with when it lapses (made + mux.accept_timeout_ns:
  // a ticket is an ATTACH answered in advance, and an answered attach is
  // claimed within the accept timeout or ends). In creation order, so in
  // deadline order; weak: a closed anchor's entry is dropped at its turn.
  std::deque<std::pair<std::weak_ptr<AnchorState>, uint64_t>> tickets_due;
  bool watcher = false;          // a reader blocked in recv waits on `ready` (the others on items_cv)
  // Per source address (the accepted connection's IP): connections not yet
  // useful (InPeer::pending), and channels.
  std::map<uint32_t, uint32_t> pending_by_source, channels_by_source;
  uint32_t pending_total = 0;
  // What the conductor owes once it let go of mu: a signal of the readers'
  // descriptor and condition variable (items it made ready), a notify of
  // attach() callers (an attach answered or failed).
  bool ready_owed = false;
  bool attach_owed = false;

  // wake_owed: a wake a reader put off until it is done with what it
  // read (apply_ingress: the position after a quiet spell), so that the
  // conductor does not take the reader's CPU while the caller still
  // waits for its items; paid at the reader's next poll(), wait() or
  // recv() (wake_if_owed), or by the conductor's next pass (it clears it).
  // Relaxed: what it is for is read under mu.
  std::atomic<bool> wake_owed{false};
  void wake_if_owed() {
    if (wake_owed.load(std::memory_order_relaxed) && wake_owed.exchange(false, std::memory_order_relaxed)) wake();
  }

  // wake: the conductor looks again (coalesced: one eventfd write while it has not looked).
  void wake() {
    // Acq_rel: pairs with the conductor's release store of false (conduct()).
    if (!wake_pending.exchange(true, std::memory_order_acq_rel)) {
      const uint64_t one = 1;
      (void)!write(wake_fd, &one, sizeof(one));
    }
  }

  void log(const std::string& line) const {
    std::fprintf(stderr, "node %s: %s\n", opt.instance_id.c_str(), line.c_str());
  }
  // log_later: a line the conductor prints once it let go of mu.
  void log_later(std::string line) { logs_owed.push_back(std::move(line)); }
  // retire: a connection cut under mu (the conductor closes it after).
  void retire(std::unique_ptr<net::TcpConn>& c) {
    if (c) closing.push_back(std::move(c));
  }

  ~NodeImpl() override;
  // conduct: one pass of the conductor (engine::ConductorAgent).
  uint64_t conduct(uint64_t now) override;
  // stop_peers: every peer lost, their sessions and rings gone (the
  // conductor, when the node stops).
  void stop_peers();
  void loop();  // own_engine's conductor thread
  // The conductor's pass, in its phases: what it does before mu (accept,
  // open rings, set up channels, read), under it (step), and after it
  // (after_step: sessions placed and removed, connections written and
  // closed, batches run, logs).
  void accept_all(uint64_t now);
  void before_step(uint64_t now);
  void step(uint64_t now);
  uint64_t after_step(uint64_t now, uint64_t deadline);
  void step_in(InPeer& p, uint64_t now);
  void step_out(OutPeer& p, uint64_t now);
  // pump_out publishes the batches that are due (under mu); a pass that
  // published adds its EgressRun to *runs. False if a batch could not be published.
  bool pump_out(OutPeer& p, uint64_t now, EgressRuns* runs);
  // run_egress: after mu, each run's reader woken and worker run or poked.
  static void run_egress(const EgressRuns& runs);
  // setup_out: the conductor, outside mu: the egress ring and its serve session.
  bool setup_out(OutPeer& p);
  void on_node(InPeer& p, const proto::Frame& f);
  void on_node_auth(InPeer& p, const proto::Frame& f);
  // accept_node: a NODE taken (keyed: proved); answered: our NODE already went.
  void accept_node(InPeer& p, const proto::Node& m, bool answered);
  // place_mirror: the conductor, outside mu: the channel's mirror session
  // accept_node asked for (false: cut the peer).
  bool place_mirror(InPeer& p);
  void on_attach_request(InPeer& p, const proto::Frame& f);
  void on_out_frame(OutPeer& p, const proto::Frame& f);
  void end_out(OutPeer& p, const std::string& why);
  // step_tcp_out: a per-stream connection this node opened (the conductor,
  // under its wmu, not mu: it takes mu for the attach only).
  void step_tcp_out(TcpStreamOut& t);
  void on_stream_frame(InPeer& p, const proto::Frame& f);
  // tcp_item: an item of a per-stream connection's stream (its anchor's
  // ready list, the readers told); tcp_end: its end, dropped for `why`.
  void tcp_item(TcpStreamIn& t, Item item);
  void tcp_end(TcpStreamIn& t, mux::EndReason why);
  absl::StatusOr<std::unique_ptr<Sender>> attach_tcp(std::shared_ptr<NodeImpl> self, const mux::AnchorHandle& h,
                                                     const net::Endpoint& peer);
  // open_ticket: an attach on a handle's ticket (§5.2.1) opens its slot in
  // p's channel on the ticket's terms, with no ATTACH (its OpenSlot goes
  // in the channel's next batch); `a` is then done. Under mu, once p's
  // NODE answer came (a cold peer's by the conductor, when it does).
  void open_ticket(OutPeer& p, PendingAttach& a);
  // claim_ticket: an OpenSlot from p's channel that no attach registered:
  // if it names an anchor's unused ticket, the stream is registered now
  // on the ticket's terms (the receiver's claim hook, inside apply, under
  // mu) and the ticket is spent; else nullptr (answered unknown).
  mux::PeerReceiver::Stream* claim_ticket(InPeer& p, uint64_t anchor, uint64_t session, uint64_t now);
  static mux::PeerReceiver::Stream* on_claim(void* self, void* peer, uint64_t anchor, uint64_t session, uint64_t now) {
    return static_cast<NodeImpl*>(self)->claim_ticket(*static_cast<InPeer*>(peer), anchor, session, now);
  }
  void end_in(InPeer& p, const std::string& why);
  // stream_ended: a receiver queued a stream's dropped end (the hook):
  // one whose channel ended or went silent, of a single-sender anchor, is
  // held for a resume. Under mu.
  void stream_ended(AnchorStream* s, mux::EndReason reason, uint32_t frames);
  static void on_ended(void* self, void* stream, mux::EndReason reason, uint32_t frames) {
    static_cast<NodeImpl*>(self)->stream_ended(static_cast<AnchorStream*>(stream), reason, frames);
  }
  // expire_resumes: the held ends whose window closed are read. Under mu.
  void expire_resumes(uint64_t now);
  // expire_tickets: tickets unclaimed past their deadline lapse (an
  // OpenSlot naming one is then unknown: its sender closes); an anchor
  // that no producer reached reads one Dropped{kNeverOpened}, under the
  // ticket's session, and may be attached again. Under mu.
  void expire_tickets(uint64_t now);
  // read_alone: `end` is read from the anchor as a one-item stream of its
  // own (an end with no live stream behind it: a held one, a lapsed
  // ticket's). Under mu.
  void read_alone(AnchorState& a, Item end);
  // resume_matches: an attach naming `session` may take over the anchor's
  // held stream (a single-sender anchor, not cancelled, the session it
  // holds, within the window). Under mu.
  static bool resume_matches(const AnchorState& a, uint64_t session, uint64_t now);
  // take_over: `next` (registered for the resume) goes on from the held
  // stream: the anchor's frames count on from it, its end is not read,
  // and `next`'s items wait for its unread ones. Under mu.
  void take_over(AnchorState& a, AnchorStream* next);
  // teardown: the conductor, outside mu: ended peers' sessions, rings and
  // sockets (an OutPeer's once no runner holds it; `wait`: until then).
  void teardown(bool wait);
  // settle: an accepted connection proved useful (its NODE came, its
  // per-stream connection attached, its channel is up): it no longer
  // counts against its source's pending cap. Idempotent.
  void settle(InPeer& p);
  bool evict_idle_channel();
  // unproven: a connection cut at the hello deadline unless it proves
  // itself first — no NODE yet, a per-stream connection with no stream, or
  // a control connection of a node without the mux that attached nothing.
  // (A channel's own deadline is its channel coming up: step_in.)
  static bool unproven(const InPeer& p) {
    return !p.node_seen || (p.per_stream && p.stream == nullptr) || (p.pending && p.receiver == nullptr);
  }
  // open_ingress: the conductor opens a channel's ingress ring once its
  // mirror created it (outside mu: it maps a file); true when open.
  bool open_ingress(InPeer& p);
  // apply_ingress (under mu) applies up to `max` records of the peer's
  // ingress ring (counted as a reader's or the conductor's); returns how
  // many. *wake_node: the conductor has something to send back (a position
  // to report, closes owed) — the caller wakes it once it let go of mu. A
  // lost record fails the channel.
  size_t apply_ingress(InPeer& p, size_t max, bool by_reader, bool* wake_node);
  // apply_all: apply_ingress on every live channel, at most `max` records
  // each (a reader's turn: kApplyBudget).
  size_t apply_all(bool by_reader, bool* wake_node, size_t max = kApplyBudget);
  // channels_pending: some ingress ring holds records nobody applied yet.
  bool channels_pending() const;
  // The readiness lists (under mu). stream_readable: the stream has an
  // item (PeerReceiver's hook, or the per-stream path's). take_item: the
  // next item of one of the anchor's ready streams; false if none.
  void stream_readable(AnchorStream* s);
  static void on_readable(void* self, void* stream) { static_cast<NodeImpl*>(self)->stream_readable(static_cast<AnchorStream*>(stream)); }
  bool take_item(AnchorState& a, Item* item, Polled* polled, std::vector<std::byte>* bytes, bool* wake_node);
  // remove_stream: the anchor lets the stream go (its end was read, or cancel).
  void remove_stream(AnchorStream* s);
  AnchorStream* add_stream(AnchorState& a, uint64_t session);
  uint64_t next_wait(uint64_t now) const;
  // channel_arena: a channel ring's arena — the configured size, and room
  // for a fenced batch (the ring's largest blob is a quarter of the arena).
  // Admission keeps half of it at most in flight.
  uint64_t channel_arena() const {
    return next_pow2(std::max<uint64_t>(opt.channel_arena_bytes, 4 * uint64_t{buf.size()}));
  }
  // add_serve_counters adds an egress channel serve's burst and datagram
  // counters (the engine's single-writer atomics, readable from any thread) to s.
  static void add_serve_counters(const dataplane::ServeLink& l, NodeStats* s) {
    s->channel_datagrams_out += l.stats.data_datagrams.get();
    s->channel_tx_bursts += l.stats.data_bursts.get();
  }
  // items_ready: the conductor made items ready (under mu); the readers
  // are told once it let go of mu.
  void items_ready() { ready_owed = true; }
  // refresh_mirror_counts: a channel mirror's counters into p.mirror_counts
  // (conductor, under mu; its link must be up): the earlier links' kept,
  // so the channel's figures run on through a reconnect.
  static void refresh_mirror_counts(InPeer& p) {
    const uint64_t session = p.mirror->control->control_stats().sessions;
    if (session != p.mirror_link_session) {  // a new link: the last one's counts are history
      p.mirror_counts_past = sum(p.mirror_counts_past, p.mirror_counts_link);
      p.mirror_counts_past.channel_held = 0;  // a gauge: only the live link's counts
      p.mirror_link_session = session;
    }
    p.mirror_counts_link = mirror_counts_of(*p.mirror);
    p.mirror_counts = sum(p.mirror_counts_past, p.mirror_counts_link);
  }
  // mirror_counts_of: a channel mirror's counters (the conductor reads its
  // session; the workers' counters are single-writer atomics).
  static NodeStats mirror_counts_of(const engine::Engine::Mirror& m) {
    NodeStats s;
    if (const dataplane::MirrorWorkerStats* w = m.control->stats()) {
      s.channel_datagrams = w->datagrams.get();
      s.channel_tcp_frames = w->tcp_frames.get();
      s.channel_tcp_records = w->tcp_records.get();
      s.channel_naks = w->naks.get();
      s.channel_held = w->held.get();
      s.channel_wrong_sender = w->wrong_sender.get();
      s.channel_bad_mac = w->bad_mac.get();
      s.channel_bad_tag = w->bad_tag.get();
      s.channel_wrong_kind = w->wrong_kind.get();
      s.channel_wrong_session = w->wrong_session.get();
      s.channel_implausible = w->implausible.get();
      s.channel_malformed = w->malformed.get();
    }
    return s;
  }
};

}  // namespace ringfire::node
