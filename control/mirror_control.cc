// mirror_control.cc — mirror handshake, ring setup, TCP relay.
#include "control/mirror_control.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

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
  if (o.unicast) hello.flags |= proto::kHelloUnicastCapable | proto::kHelloPrefersUnicast;
  if (o.tcp_only) hello.flags |= proto::kHelloTcpOnly;
  std::byte buf[64];
  if (!s->conn_.send(proto::ConstBytes(buf, proto::encode_hello(hello, buf)))) {
    return absl::UnavailableError("the source closed the connection during the handshake");
  }

  proto::Frame f;
  size_t size = 0;
  if (absl::Status st = read_frame_blocking(s->conn_, o.handshake_timeout_ms, &f, &size); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(st.message(), o.expected_schema != 0
                                                    ? " (the source refuses a schema mismatch)"
                                                    : ""));
  }
  proto::Geometry g;
  if (proto::decode_geometry(f, &g) != proto::DecodeError::kOk) {
    return absl::DataLossError("the source's GEOMETRY is malformed");
  }
  s->conn_.consume(size);
  if (absl::Status st = read_frame_blocking(s->conn_, o.handshake_timeout_ms, &f, &size); !st.ok()) {
    return st;
  }
  proto::Multicast mc;
  if (proto::decode_multicast(f, &mc) != proto::DecodeError::kOk) {
    return absl::DataLossError("the source's MULTICAST is malformed");
  }
  s->conn_.consume(size);

  if (o.from == MirrorOptions::From::kResume && have != 0 && g.first_seq < have) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the source's ring ends at ", g.first_seq, " but this mirror already holds up to ", have - 1,
        ": it is not the ring this mirror was made from (recreated?). Remove ", path,
        " or mirror into another name (nothing was written)"));
  }
  auto file = open_or_create_ring(o, g, exists);
  if (!file.ok()) return file.status();
  auto writer = dataplane::MirrorWriter::attach(std::move(*file));
  if (!writer.ok()) return writer.status();
  s->first_seq_ = std::max(g.first_seq, writer->next_seq());

  dataplane::MirrorWorkerConfig wc = o.worker;
  const Endpoint local = s->conn_.local();
  s->nak_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (mc.group == 0 && mc.port != 0) {
    wc.punch_to = Endpoint{mc.data_ip != 0 ? mc.data_ip : o.source.ip, mc.port};
    wc.punch_token = mc.token;
  }
  s->description_ = mc.group != 0 ? absl::StrCat("multicast ", dataplane::to_string(Endpoint{mc.group, mc.port}))
                    : mc.port != 0 ? absl::StrCat("unicast from ", dataplane::to_string(*wc.punch_to))
                                   : std::string("TCP");
  if (o.backend == Backend::kDpdk) {
#if RINGFIRE_HAVE_DPDK
    dataplane::DpdkPortOptions po;
    po.ip = o.dpdk_ip != 0 ? o.dpdk_ip : local.ip;
    po.udp_port = mc.group != 0 ? mc.port : static_cast<uint16_t>(40000 + getpid() % 20000);
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
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s->conn_.fd();
  epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->conn_.fd(), &ev);
  ev.data.fd = s->nak_fd_;
  epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->nak_fd_, &ev);
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
  for (;;) {
    proto::Frame f;
    size_t size = 0;
    const TcpConn::Next next = conn_.next_frame(&f, &size);
    if (next == TcpConn::Next::kNeedMore) return true;
    if (next == TcpConn::Next::kMalformed) return false;
    const auto kind = f.header.kind;
    if (size > worker_->link().tcp_frames.max_message()) return false;  // can never be relayed
    if (kind == proto::FrameKind::kData || kind == proto::FrameKind::kGap ||
        kind == proto::FrameKind::kHeartbeat) {
      if (!worker_->link().tcp_frames.try_push(proto::ConstBytes(
              f.body.data() - proto::kFrameHeaderBytes, size))) {
        queue_full_ = true;  // the worker is behind: leave it in the buffer
        return true;
      }
    }
    conn_.consume(size);
  }
}

void MirrorSession::send_naks() {
  uint64_t ignored;
  (void)!read(nak_fd_, &ignored, sizeof(ignored));
  proto::Nak nak;
  while (worker_->link().naks.try_pop(&nak)) {
    std::byte buf[32];
    conn_.send(proto::ConstBytes(buf, proto::encode_nak(nak, buf)));
  }
}

bool MirrorSession::poll(int timeout_ms) {
  epoll_event events[4];
  const int n = epoll_wait(epoll_fd_, events, 4, queue_full_ ? 0 : timeout_ms);
  bool alive = true;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == conn_.fd()) alive &= conn_.read_available();
  }
  alive &= relay_frames();
  send_naks();
  alive &= conn_.flush();
  return alive;
}

}  // namespace ringfire::control
