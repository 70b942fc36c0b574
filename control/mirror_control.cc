// mirror_control.cc — mirror handshake, ring setup, TCP relay.
#include "control/mirror_control.h"

#include <poll.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "control/ring_geometry.h"
#include "dataplane/kernel_udp.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include "dataplane/dpdk_port.h"
#endif
#include "ring/ring_file.h"

namespace ringfire::control {

using dataplane::Endpoint;

namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// refusal turns the source's REFUSE into the error a user acts on.
absl::Status refusal(const proto::Frame& f, const Endpoint& source) {
  proto::Refuse r;
  if (proto::decode_refuse(f, &r) != proto::DecodeError::kOk) {
    return absl::DataLossError(absl::StrCat("the source at ", dataplane::to_string(source),
                                            " sent a malformed REFUSE"));
  }
  const std::string msg = absl::StrCat("the source at ", dataplane::to_string(source), " refused: ",
                                       proto::refuse_reason_name(r.reason), ": ", std::string(r.text));
  switch (r.reason) {
    case proto::RefuseReason::kBusy:
    case proto::RefuseReason::kHandshakeTimeout:
    case proto::RefuseReason::kSlow:
      return absl::UnavailableError(msg);
    case proto::RefuseReason::kAuthRequired:
    case proto::RefuseReason::kAuthFailed:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::FailedPreconditionError(msg);
  }
}

// handshake_limits: what the source may send before streaming begins.
FrameLimits handshake_limits() {
  FrameLimits l;
  l.max_body.fill(0);
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kGeometry)] = 256;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kMulticast)] = 256;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kAuth)] = 256;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kRefuse)] = 256;
  l.unknown = 0;
  return l;
}

// stream_limits: what the source may send once streaming: DATA up to the
// largest record the ring holds (or 64 KiB of smaller ones), GAP and
// HEARTBEAT with no body, a REFUSE; anything newer is skipped.
FrameLimits stream_limits(const ring::RingFile& f) {
  FrameLimits l;
  l.max_body.fill(kUnknownFrameBody);
  const uint64_t largest = f.blob() ? ring::max_blob_bytes(f.header().arena_size) : f.slot_size();
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kData)] =
      static_cast<uint32_t>(std::max<uint64_t>(64u << 10, proto::kBlobRecordHeader + largest));
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kGap)] = 0;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kHeartbeat)] = 0;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kRefuse)] = 256;
  return l;
}

// read_handshake reads the next handshake frame; a REFUSE becomes its error.
absl::Status read_handshake(TcpConn& conn, const MirrorOptions& o, proto::Frame* f, size_t* size) {
  const FrameLimits limits = handshake_limits();
  for (int waited = 0;;) {
    switch (conn.next_frame(f, size, limits)) {
      case TcpConn::Next::kFrame:
        if (f->header.kind == proto::FrameKind::kRefuse) return refusal(*f, o.source);
        return absl::OkStatus();
      case TcpConn::Next::kMalformed:
      case TcpConn::Next::kOversized:
        return absl::DataLossError(absl::StrCat("the peer at ", dataplane::to_string(o.source),
                                                " sent a malformed frame (not a ringfire source?)"));
      case TcpConn::Next::kNeedMore: break;
    }
    if (waited >= o.handshake_timeout_ms) {
      return absl::UnavailableError(absl::StrCat("no answer from the source at ", dataplane::to_string(o.source),
                                                 " within ", o.handshake_timeout_ms, " ms"));
    }
    pollfd p{conn.fd(), POLLIN, 0};
    poll(&p, 1, 10);
    waited += 10;
    if (!conn.read_available(64u << 10)) {
      // Closed: but what it said last (a REFUSE) may be in the buffer.
      if (conn.next_frame(f, size, limits) == TcpConn::Next::kFrame) {
        if (f->header.kind == proto::FrameKind::kRefuse) return refusal(*f, o.source);
        return absl::OkStatus();
      }
      return absl::UnavailableError(absl::StrCat("the source at ", dataplane::to_string(o.source),
                                                 " closed the connection during the handshake"));
    }
  }
}

// open_or_create_ring returns the mirror ring for `g`: the existing one if
// its geometry matches (and it is a mirror ring), or a new sparse ring.
absl::StatusOr<ring::RingFile> open_or_create_ring(const MirrorOptions& o, const proto::Geometry& g,
                                                   bool exists) {
  const std::string path = ring::ring_path(o.ring, o.dir);
  if (!exists) return ring::RingFile::create(mirror_ring_options(g, path));
  auto f = ring::RingFile::open(path);
  if (!f.ok()) return f.status();
  if (const std::string diff = geometry_mismatch(*f, g); !diff.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "existing ring ", path, " does not match the source:", diff,
        " remove it or mirror into another name (nothing was written)"));
  }
  return f;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MirrorSession>> MirrorSession::establish(const MirrorOptions& o) {
  // What the ring already holds decides where a resume starts.
  const std::string path = ring::ring_path(o.ring, o.dir);
  uint64_t have = 0;
  bool exists = false;
  if (auto existing = ring::RingFile::open(path); existing.ok()) {
    exists = true;
    have = existing->header().write_seq.load(std::memory_order_acquire);
  } else if (existing.status().code() != absl::StatusCode::kNotFound) {
    return existing.status();
  }

  auto fd = tcp_connect(o.source, o.handshake_timeout_ms);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<MirrorSession> s(new MirrorSession(TcpConn(*fd)));

  proto::Hello hello;
  hello.expected_schema = o.expected_schema;
  switch (o.from) {
    case MirrorOptions::From::kResume: hello.first_wanted = have; break;  // 0 = latest
    case MirrorOptions::From::kLatest: hello.first_wanted = proto::kHelloLatest; break;
    case MirrorOptions::From::kOldest: hello.first_wanted = proto::kHelloOldest; break;
    case MirrorOptions::From::kSequence:
      hello.first_wanted = o.from_seq == 0 ? proto::kHelloOldest : o.from_seq;
      break;
  }
  // A mirror never asks again for what it holds: a ring that already ends
  // past where it would start resumes at its end (a restart with --from
  // oldest would otherwise be sent every record again over TCP).
  const bool resuming = have != 0 && (hello.first_wanted == have || hello.first_wanted == proto::kHelloOldest ||
                                      (o.from == MirrorOptions::From::kSequence && hello.first_wanted < have));
  if (resuming) hello.first_wanted = have;
  hello.flags = proto::kHelloHealth;
  if (o.multi_range_naks) hello.flags |= proto::kHelloMultiNak;
  if (o.unicast) hello.flags |= proto::kHelloUnicastCapable | proto::kHelloPrefersUnicast;
  if (o.tcp_only) hello.flags |= proto::kHelloTcpOnly;
  if (o.psk) {
    hello.flags |= proto::kHelloAuth;
    hello.nonce = random_nonce();
  }
  std::byte hello_buf[proto::kFrameHeaderBytes + proto::kHelloAuthBody];
  const proto::ConstBytes hello_bytes(hello_buf, proto::encode_hello(hello, hello_buf));
  if (!s->conn_.send(hello_bytes)) {
    return absl::UnavailableError("the source closed the connection during the handshake");
  }

  proto::Frame f;
  size_t size = 0;
  absl::Status st = read_handshake(s->conn_, o, &f, &size);
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat(st.message(), o.expected_schema != 0 &&
                                                    st.code() == absl::StatusCode::kUnavailable
                                                    ? " (the source refuses a schema mismatch)" : ""));
  }
  std::optional<dataplane::MacKey> data_key, punch_key_;
  if (o.psk) {
    // The source must prove it holds the key before we believe anything.
    proto::Auth a;
    if (f.header.kind != proto::FrameKind::kAuth || proto::decode_auth(f, &a) != proto::DecodeError::kOk ||
        a.step != proto::AuthStep::kSourceProof) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the source at ", dataplane::to_string(o.source),
          " does not authenticate: give its serve the same --psk-file, or drop --psk-file here"));
    }
    if (!proofs_equal(a.proof, source_proof(*o.psk, hello_bytes, a.nonce, a.salt))) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the source at ", dataplane::to_string(o.source),
          " failed authentication: its key is not this --psk-file's (or it is not the source)"));
    }
    proto::Auth mine;
    mine.step = proto::AuthStep::kMirrorProof;
    mine.proof = mirror_proof(*o.psk, hello_bytes, proto::ConstBytes(f.body.data() - proto::kFrameHeaderBytes, size));
    data_key = control::data_key(*o.psk, a.salt);
    punch_key_ = control::punch_key(*o.psk, hello.nonce, a.nonce);
    s->conn_.consume(size);
    std::byte buf[proto::kFrameHeaderBytes + proto::kAuthMirrorBody];
    s->conn_.send(proto::ConstBytes(buf, proto::encode_auth(mine, buf)));
    st = read_handshake(s->conn_, o, &f, &size);
    if (!st.ok()) return st;
    s->authenticated_ = true;
  }
  proto::Geometry g;
  if (f.header.kind != proto::FrameKind::kGeometry || proto::decode_geometry(f, &g) != proto::DecodeError::kOk ||
      g.first_seq >= proto::kMaxSequence) {
    return absl::DataLossError(absl::StrCat("the source's ", f.header.kind == proto::FrameKind::kGeometry ? "GEOMETRY is malformed"
                                                                                       : "first frame is not GEOMETRY"));
  }
  s->conn_.consume(size);
  if (st = read_handshake(s->conn_, o, &f, &size); !st.ok()) return st;
  proto::Multicast mc;
  if (f.header.kind != proto::FrameKind::kMulticast || proto::decode_multicast(f, &mc) != proto::DecodeError::kOk) {
    return absl::DataLossError("the source's MULTICAST is malformed");
  }
  s->conn_.consume(size);
  if (o.psk && (mc.features & proto::kFeatureMac) == 0 && mc.port != 0) {
    return absl::PermissionDeniedError("the source authenticated but does not MAC its datagrams");
  }
  s->features_ = mc.features;

  if (resuming && g.first_seq < have) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the source's ring ends at ", g.first_seq, " but this mirror already holds up to ", have - 1,
        ": it is not the ring this mirror was made from (recreated?). Remove ", path,
        " or mirror into another name (nothing was written)"));
  }
  auto file = open_or_create_ring(o, g, exists);
  if (!file.ok()) return file.status();
  s->limits_ = stream_limits(*file);
  auto writer = dataplane::MirrorWriter::attach(std::move(*file));
  if (!writer.ok()) return writer.status();
  s->first_seq_ = std::max(g.first_seq, writer->next_seq());

  dataplane::MirrorWorkerConfig wc = o.worker;
  // Whom to believe on UDP: the source's data address (its TCP address if
  // it names none), from its data port for unicast; declared relays too.
  wc.trust.source_ip = mc.data_ip != 0 ? mc.data_ip : o.source.ip;
  wc.trust.source_port = mc.group == 0 ? mc.port : 0;
  wc.trust.relay_count = 0;
  for (uint32_t ip : o.accept_from) {
    if (wc.trust.relay_count < wc.trust.relays.size()) wc.trust.relays[wc.trust.relay_count++] = ip;
  }
  wc.trust.mac = data_key;
  wc.protocol.nak_ranges = (mc.features & proto::kFeatureMultiNak) != 0 ? proto::kMaxNakRanges : 1;
  wc.protocol.plausible_window = std::max<uint64_t>(g.capacity, 4096);
  const Endpoint local = s->conn_.local();
  s->nak_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->nak_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  if (mc.group == 0 && mc.port != 0) {
    wc.punch_to = Endpoint{mc.data_ip != 0 ? mc.data_ip : o.source.ip, mc.port};
    wc.punch_token = mc.token;
    wc.punch_key = punch_key_;
  }
  s->description_ = mc.group != 0 ? absl::StrCat("multicast ", dataplane::to_string(Endpoint{mc.group, mc.port}))
                    : mc.port != 0 ? absl::StrCat("unicast from ", dataplane::to_string(*wc.punch_to))
                                   : std::string("TCP");
  if (s->authenticated_) s->description_ += ", authenticated";
  if (o.backend == Backend::kDpdk) {
#if RINGFIRE_HAVE_DPDK
    dataplane::DpdkPortOptions po;
    po.ip = o.dpdk_ip != 0 ? o.dpdk_ip : local.ip;
    po.udp_port = mc.group != 0 ? mc.port : 0;  // unicast: a port the kernel picks
    po.join_group = mc.group;
    po.neighbors = o.dpdk_neighbors;
    po.exception_port = o.dpdk_exception_port;
    po.max_payload = std::max<uint16_t>(mc.mtu, 64);
    std::optional<dataplane::DpdkPort> port;
    if (mc.port != 0) {
      auto p = dataplane::DpdkPort::open(po);
      if (!p.ok()) return p.status();
      port.emplace(std::move(*p));
    }
    s->worker_ = std::make_unique<dataplane::MirrorWorker<dataplane::DpdkPort>>(
        std::move(*writer), std::move(port), wc, s->first_seq_, mc.session, s->nak_fd_);
    s->description_ += " (dpdk)";
#else
    return absl::FailedPreconditionError("this build has no DPDK backend (-Ddpdk=enabled)");
#endif
  } else {
    std::optional<dataplane::KernelUdp> socket;
    if (mc.port != 0) {
      dataplane::UdpOptions uo;
      uo.max_datagram = std::max<size_t>(mc.mtu, 1472);
      if (mc.group != 0) {
        uo.bind = Endpoint{0, mc.port};
        uo.multicast_iface = o.iface_ip != 0 ? o.iface_ip : local.ip;
        uo.join_group = mc.group;
        uo.reuse_port = true;  // several mirrors of one group on a host share its port
      } else {
        uo.bind = Endpoint{local.ip, 0};
      }
      auto sock = dataplane::KernelUdp::open(uo);
      if (!sock.ok()) return sock.status();
      socket.emplace(std::move(*sock));
    }
    s->worker_ = std::make_unique<dataplane::MirrorWorker<dataplane::KernelUdp>>(
        std::move(*writer), std::move(socket), wc, s->first_seq_, mc.session, s->nak_fd_);
  }
  s->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (s->epoll_fd_ < 0) return absl::InternalError(absl::StrCat("epoll_create1: ", std::strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s->conn_.fd();
  const bool added = epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->conn_.fd(), &ev) == 0;
  ev.data.fd = s->nak_fd_;
  if (!added || epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->nak_fd_, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  s->health_interval_ns_ = o.health_interval_ns;
  s->peer_timeout_ns_ = o.peer_timeout_ns;
  const uint64_t now = monotonic_ns();
  s->last_rx_ns_ = now;
  s->last_received_ = s->conn_.received();
  s->next_health_ns_ = now;
  // Frames that arrived right behind MULTICAST are already buffered.
  s->relay_frames();
  return s;
}

MirrorSession::~MirrorSession() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (nak_fd_ >= 0) close(nak_fd_);
}

bool MirrorSession::relay_frames() {
  queue_full_ = false;
  bool pushed = false;
  // A parked worker is woken once, after the frames are in its queue.
  auto wake = [&] {
    if (!pushed) return;
    // Seq_cst fence: pairs with the worker's seq_cst store of `parked`
    // before it looks at the queue (a store-load pair needs both).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (worker_->link().parked.load(std::memory_order_relaxed)) {
      const uint64_t one = 1;
      (void)!write(worker_->link().wake_fd, &one, sizeof(one));
    }
  };
  for (;;) {
    proto::Frame f;
    size_t size = 0;
    const TcpConn::Next next = conn_.next_frame(&f, &size, limits_);
    if (next == TcpConn::Next::kNeedMore) {
      wake();
      return true;
    }
    if (next != TcpConn::Next::kFrame) {
      end_reason_ = "the source sent a malformed frame";
      return false;
    }
    const auto kind = f.header.kind;
    if (kind == proto::FrameKind::kRefuse) {
      end_reason_ = std::string(refusal(f, Endpoint{}).message());
      return false;
    }
    if (kind == proto::FrameKind::kData || kind == proto::FrameKind::kGap ||
        kind == proto::FrameKind::kHeartbeat) {
      if (size > worker_->link().tcp_frames.max_message()) {  // can never be relayed
        end_reason_ = "the source sent a frame larger than this ring's records";
        return false;
      }
      if (!worker_->link().tcp_frames.try_push(proto::ConstBytes(
              f.body.data() - proto::kFrameHeaderBytes, size))) {
        queue_full_ = true;  // the worker is behind: leave it in the buffer
        wake();
        return true;
      }
      pushed = true;
    } else if (proto::known_kind(kind)) {
      ++cstats_.tcp_wrong_kind;  // a kind a source never sends here: ignored
    }
    conn_.consume(size);
  }
}

void MirrorSession::send_naks() {
  proto::NakRanges nak;
  while (worker_->link().naks.try_pop(&nak)) {
    std::byte buf[proto::kFrameHeaderBytes + proto::kMaxNakBody];
    conn_.send(proto::ConstBytes(buf, proto::encode_nak_ranges(nak, buf)));
  }
  // PROBEs heard at our data address, echoed: the source may send DATA there.
  uint64_t challenge;
  while (worker_->link().probes.try_pop(&challenge)) {
    std::byte buf[proto::kFrameHeaderBytes];
    conn_.send(proto::ConstBytes(buf, proto::encode_probe(challenge, 0, buf)));
  }
}

void MirrorSession::send_health(uint64_t now_ns) {
  const dataplane::MirrorWorkerStats& st = worker_->link().stats;
  constexpr auto r = std::memory_order_relaxed;
  proto::Health h;
  h.report = ++health_seq_;
  h.next_seq = st.next_seq.load(r);
  h.known_end = st.known_end.load(r);
  h.holes = static_cast<uint32_t>(st.holes.load(r));
  h.held = static_cast<uint32_t>(st.held.load(r));
  h.held_high = static_cast<uint32_t>(st.held_high.load(r));
  h.naks = st.naks.load(r);
  h.gap_records = st.gap_records.load(r);
  h.rx_drops = worker_->port_drops() + st.hold_overflow.load(r);
  h.rejected = st.rejected();
  std::byte buf[proto::kFrameHeaderBytes + proto::kHealthBody];
  conn_.send(proto::ConstBytes(buf, proto::encode_health(h, buf)));
  ++cstats_.health_reports;
  last_health_ns_ = now_ns;
  next_health_ns_ = now_ns + health_interval_ns_;
}

bool MirrorSession::poll(int timeout_ms) {
  const bool health = (features_ & proto::kFeatureHealth) != 0;
  uint64_t now = monotonic_ns();
  if (health && next_health_ns_ > now) {
    timeout_ms = std::min<int>(timeout_ms, static_cast<int>((next_health_ns_ - now) / 1'000'000) + 1);
  }
  epoll_event events[4];
  const int n = epoll_wait(epoll_fd_, events, 4, queue_full_ ? 0 : timeout_ms);
  bool alive = true;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == conn_.fd() && !conn_.read_available(4u << 20)) {
      alive = false;
      end_reason_ = "the source closed the connection";
    }
    if (events[i].data.fd == nak_fd_) {
      uint64_t ignored;
      (void)!read(nak_fd_, &ignored, sizeof(ignored));
    }
  }
  now = monotonic_ns();
  if (conn_.received() != last_received_) {
    last_received_ = conn_.received();
    last_rx_ns_ = now;
  }
  if (!relay_frames()) alive = false;
  send_naks();
  if (health) {
    // Acquire: pairs with the worker's release when it raised the flag.
    const bool ask = worker_->link().position_wanted.exchange(false, std::memory_order_acquire);
    if (ask && now - last_health_ns_ >= 1'000'000) {
      ++cstats_.position_asks;
      send_health(now);
    } else if (ask) {
      worker_->link().position_wanted.store(true, std::memory_order_relaxed);  // ask at the next report
    }
    if (now >= next_health_ns_) send_health(now);
    if (now - last_rx_ns_ > peer_timeout_ns_) {
      alive = false;
      end_reason_ = absl::StrCat("the source fell silent for ", (now - last_rx_ns_) / 1'000'000, " ms");
    }
  }
  if (!conn_.flush()) {
    alive = false;
    if (end_reason_.empty()) end_reason_ = "the connection to the source failed";
  }
  return alive;
}

}  // namespace ringfire::control
