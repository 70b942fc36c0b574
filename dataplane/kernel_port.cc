// kernel_port.cc — sockets per binding, one epoll for them all.
#include "dataplane/kernel_port.h"

#include <sys/epoll.h>
#include <unistd.h>

namespace ringfire::dataplane {

absl::StatusOr<KernelPort::Prepared> KernelPort::prepare(const KernelPortOptions& o, const BindSpec& spec) {
  UdpOptions uo;
  uo.bind = Endpoint{spec.ip, spec.udp_port};
  uo.multicast_iface = o.iface_ip;
  uo.join_group = spec.group;
  uo.ttl = o.ttl;
  uo.buffer_bytes = o.buffer_bytes;
  uo.max_datagram = o.max_datagram;
  uo.reuse_port = spec.reuse;
  uo.gso = o.gso;
  uo.gro = o.gro;
  auto s = KernelUdp::open(uo);
  if (!s.ok()) return s.status();
  Prepared p;
  p.local = s->local();
  p.socket = std::make_unique<KernelUdp>(std::move(*s));
  return p;
}

KernelPort::KernelPort(const KernelPortOptions& o) : o_(o), epoll_fd_(epoll_create1(EPOLL_CLOEXEC)) {
  sockets_.resize(1);  // binding 0: none
}

KernelPort::KernelPort(KernelPort&& o) noexcept
    : o_(o.o_),
      epoll_fd_(std::exchange(o.epoll_fd_, -1)),
      sockets_(std::move(o.sockets_)),
      only_(o.only_),
      live_(o.live_) {}

KernelPort::~KernelPort() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

BindingId KernelPort::install(Prepared p) {
  BindingId id = 0;
  for (size_t i = 1; i < sockets_.size() && id == 0; ++i) {
    if (!sockets_[i]) id = static_cast<BindingId>(i);
  }
  if (id == 0) {
    if (sockets_.size() > kMaxBindings) return 0;
    id = static_cast<BindingId>(sockets_.size());
    sockets_.emplace_back();
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = id;
  if (epoll_fd_ < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, p.socket->fd(), &ev) != 0) return 0;
  sockets_[id] = std::move(p.socket);
  ++live_;
  // Leaving one-binding mode: datagrams the one socket already read (a
  // run taken whole) are not in epoll's sight; the ready list keeps it.
  if (live_ == 2 && only_ != 0 && sockets_[only_]->rx_pending()) {
    ready_n_ = 0;
    ready_[ready_n_++] = only_;
  }
  only_ = live_ == 1 ? id : 0;
  return id;
}

void KernelPort::uninstall(BindingId b) {
  KernelUdp* s = socket(b);
  if (s == nullptr) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->fd(), nullptr);
  sockets_[b].reset();
  --live_;
  only_ = 0;
  if (live_ == 1) {
    for (size_t i = 1; i < sockets_.size(); ++i) {
      if (sockets_[i]) only_ = static_cast<BindingId>(i);
    }
  }
  // The others stay listed: one may hold datagrams it already read.
  size_t keep = 0;
  for (size_t i = 0; i < ready_n_; ++i) {
    if (ready_[i] != b) ready_[keep++] = ready_[i];
  }
  ready_n_ = keep;
}

Endpoint KernelPort::local(BindingId b) const {
  if (b == 0) {
    for (size_t i = 1; i < sockets_.size(); ++i) {
      if (sockets_[i]) return sockets_[i]->local();
    }
    return Endpoint{};
  }
  const KernelUdp* s = socket(b);
  return s ? s->local() : Endpoint{};
}

size_t KernelPort::rx_burst(RxDatagram* out, size_t n) {
  if (only_ != 0) {
    // One binding: read its socket straight (what one session costs today).
    const size_t got = sockets_[only_]->rx_burst(out, n);
    for (size_t i = 0; i < got; ++i) out[i].binding = only_;
    return got;
  }
  if (live_ == 0) return 0;
  if (ready_n_ == 0) {
    epoll_event ev[kBurst];
    const int k = epoll_wait(epoll_fd_, ev, kBurst, 0);
    for (int i = 0; i < k; ++i) ready_[ready_n_++] = static_cast<BindingId>(ev[i].data.u32);
  }
  size_t got = 0;
  size_t keep = 0;
  for (size_t i = 0; i < ready_n_; ++i) {
    const BindingId b = ready_[i];
    KernelUdp* s = socket(b);
    if (s == nullptr) continue;
    if (got == n) {  // no room this burst: next time
      ready_[keep++] = b;
      continue;
    }
    const size_t k = s->rx_burst(out + got, n - got);
    for (size_t j = got; j < got + k; ++j) out[j].binding = b;
    got += k;
    if (got == n || s->rx_pending()) ready_[keep++] = b;  // may hold more (or holds some, read)
  }
  ready_n_ = keep;
  return got;
}

size_t KernelPort::tx_burst(const TxDatagram* in, size_t n) {
  size_t sent = 0;
  for (size_t i = 0; i < n;) {
    // Runs of datagrams from one binding go out in one sendmmsg.
    size_t j = i + 1;
    while (j < n && in[j].binding == in[i].binding) ++j;
    KernelUdp* s = in[i].binding == 0 && only_ != 0 ? sockets_[only_].get() : socket(in[i].binding);
    if (s != nullptr) sent += s->tx_burst(in + i, j - i);
    i = j;
  }
  return sent;
}

}  // namespace ringfire::dataplane
