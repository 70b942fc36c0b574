// kernel_udp.cc — kernel UDP socket setup and bursts.
#include "dataplane/kernel_udp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/udp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/frame.h"

namespace ringfire::dataplane {
namespace {

absl::Status sys_error(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

KernelUdp::KernelUdp(int fd, Endpoint local, size_t max_datagram, bool gso, bool gro)
    : fd_(fd),
      local_(local),
      max_datagram_(max_datagram),
      gso_(gso),
      gro_(gro),
      rx_room_(gro ? size_t{65536} : max_datagram),
      rx_buf_(kBurst * rx_room_) {
  for (size_t i = 0; i < kBurst; ++i) {
    rx_iov_[i] = iovec{rx_buf_.data() + i * rx_room_, rx_room_};
    rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
    rx_msgs_[i].msg_hdr.msg_iovlen = 1;
    rx_msgs_[i].msg_hdr.msg_name = &rx_addr_[i];
    tx_msgs_[i].msg_hdr.msg_name = &tx_addr_[i];
    tx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    cmsghdr* c = reinterpret_cast<cmsghdr*>(tx_cmsg_[i].bytes);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  }
}

KernelUdp::KernelUdp(KernelUdp&& o) noexcept
    : KernelUdp(std::exchange(o.fd_, -1), o.local_, o.max_datagram_, o.gso_, o.gro_) {
  // (Moved only at open, before any datagram: no received run to carry.)
  runs_ = o.runs_;
  gso_retry_in_ = o.gso_retry_in_;
}

KernelUdp::~KernelUdp() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<KernelUdp> KernelUdp::open(const UdpOptions& o) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys_error("socket");
  auto fail = [&](const std::string& what) {
    absl::Status s = sys_error(what);
    close(fd);
    return s;
  };
  const int one = 1;
  if (o.reuse_port) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // Inside a network namespace rmem_max cannot be raised: force the sizes.
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &o.buffer_bytes, sizeof(int)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o.buffer_bytes, sizeof(int));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &o.buffer_bytes, sizeof(int)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o.buffer_bytes, sizeof(int));
  }
  // A multicast receiver binds the group's port on any address, so that
  // datagrams to the group are delivered to it.
  sockaddr_in bind_addr = to_sockaddr(o.bind);
  if (bind(fd, reinterpret_cast<sockaddr*>(&bind_addr), sizeof(bind_addr)) != 0) {
    if (errno == EADDRINUSE) {
      close(fd);
      return absl::FailedPreconditionError(absl::StrCat(
          "UDP port ", o.bind.port, " is already in use on this host (another serve?): choose another "
          "--udp, or stop the process that holds it (ss -ulpn 'sport = :", o.bind.port, "')"));
    }
    return fail(absl::StrCat("bind ", to_string(o.bind)));
  }
  if (o.multicast_iface != 0) {
    in_addr ifa{htonl(o.multicast_iface)};
    if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifa, sizeof(ifa)) != 0) {
      return fail("IP_MULTICAST_IF");
    }
  }
  const int ttl = o.ttl;
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl));
  const int loop = o.multicast_loop ? 1 : 0;
  setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop));
  if (o.join_group != 0) {
    // Joining with INADDR_ANY fails (ENODEV) in a namespace without a default
    // route: always join on an explicit interface address.
    ip_mreq m{};
    m.imr_multiaddr.s_addr = htonl(o.join_group);
    m.imr_interface.s_addr = htonl(o.multicast_iface);
    if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)) != 0) {
      return fail(absl::StrCat("join group ", to_string(Endpoint{o.join_group, 0}),
                               " (give the interface with --iface)"));
    }
    // Only this socket's group: Linux otherwise hands a socket on
    // INADDR_ANY:port every group any socket of the host joined on port.
    const int zero = 0;
    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero));
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  bool gro = o.gro;
  if (gro && setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0) gro = false;  // a kernel before 5.0
  // A kernel before 4.18 would ignore UDP_SEGMENT and send a run as one
  // datagram: GSO only where the option is known.
  int segment = 0;
  socklen_t segment_len = sizeof(segment);
  const bool gso = o.gso && getsockopt(fd, SOL_UDP, UDP_SEGMENT, &segment, &segment_len) == 0;
  return KernelUdp(fd, net::from_sockaddr(local), o.max_datagram, gso, gro);
}

size_t KernelUdp::rx_burst(RxDatagram* out, size_t n) {
  if (rx_next_ == rx_msgs_n_) {
    for (size_t i = 0; i < n; ++i) {
      rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
      if (gro_) {
        rx_msgs_[i].msg_hdr.msg_control = rx_cmsg_[i].bytes;
        rx_msgs_[i].msg_hdr.msg_controllen = sizeof(rx_cmsg_[i].bytes);
      }
    }
    const int got = recvmmsg(fd_, rx_msgs_.data(), static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
    if (got <= 0) return 0;
    rx_msgs_n_ = static_cast<size_t>(got);
    rx_next_ = 0;
    rx_off_ = 0;
    for (size_t i = 0; i < rx_msgs_n_; ++i) {
      const msghdr& h = rx_msgs_[i].msg_hdr;
      size_t segment = rx_msgs_[i].msg_len;
      if (gro_ && h.msg_controllen > 0) {
        for (const cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&h), const_cast<cmsghdr*>(c))) {
          if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int size = 0;
            std::memcpy(&size, CMSG_DATA(c), sizeof(size));
            if (size > 0) segment = static_cast<size_t>(size);
          }
        }
      }
      // A datagram past the room it was read into was cut: it is handed
      // out as it was read, and the session's decoder drops it, counted.
      rx_segment_[i] = static_cast<uint32_t>(std::min(segment, rx_room_));
      if (rx_msgs_[i].msg_len > segment && segment > 0) {
        ++runs_.gro_runs;
        runs_.gro_datagrams += (rx_msgs_[i].msg_len + segment - 1) / segment;
      }
    }
  }
  size_t got = 0;
  while (got < n && rx_next_ < rx_msgs_n_) {
    const size_t len = std::min<size_t>(rx_msgs_[rx_next_].msg_len, rx_room_);
    const size_t take = std::min<size_t>(rx_segment_[rx_next_], len - rx_off_);
    out[got].payload = proto::ConstBytes(static_cast<const std::byte*>(rx_iov_[rx_next_].iov_base) + rx_off_, take);
    out[got].from = net::from_sockaddr(rx_addr_[rx_next_]);
    ++got;
    rx_off_ += take;
    if (rx_off_ >= len || take == 0) {
      ++rx_next_;
      rx_off_ = 0;
    }
  }
  return got;
}

size_t KernelUdp::pack(const TxDatagram* in, size_t n) {
  // The kernel's bounds on one GSO send: its segments, and its bytes (one
  // IPv4 packet's payload before segmentation).
  constexpr size_t kMaxSegments = 64;
  auto bytes = [](const TxDatagram& d) {
    return d.payload.size() + (d.trailer != nullptr ? proto::kTagFrameBytes : 0);
  };
  size_t m = 0;
  size_t v = 0;  // iovecs used
  for (size_t i = 0; i < n; ++m) {
    // The run: one destination, every datagram the first's size, but a
    // last that may be shorter.
    const size_t segment = bytes(in[i]);
    size_t j = i + 1;
    size_t total = segment;
    if (gso_ && segment > 0) {  // (a segment size of 0 would send one empty datagram for the run)
      while (j < n && j - i < kMaxSegments && in[j].to == in[i].to) {
        const size_t b = bytes(in[j]);
        if (b > segment || total + b > kMaxDatagram) break;
        total += b;
        ++j;
        if (b < segment) break;
      }
    }
    msghdr& h = tx_msgs_[m].msg_hdr;
    h.msg_iov = &tx_iov_[v];
    for (size_t k = i; k < j; ++k) {
      tx_iov_[v++] = iovec{const_cast<std::byte*>(in[k].payload.data()), in[k].payload.size()};
      if (in[k].trailer != nullptr) {
        tx_iov_[v++] = iovec{const_cast<std::byte*>(in[k].trailer), proto::kTagFrameBytes};
      }
    }
    h.msg_iovlen = static_cast<size_t>(&tx_iov_[v] - h.msg_iov);
    if (j - i > 1) {
      cmsghdr* c = reinterpret_cast<cmsghdr*>(tx_cmsg_[m].bytes);
      const uint16_t size = static_cast<uint16_t>(segment);
      std::memcpy(CMSG_DATA(c), &size, sizeof(size));
      h.msg_control = tx_cmsg_[m].bytes;
      h.msg_controllen = sizeof(tx_cmsg_[m].bytes);
    } else {
      h.msg_control = nullptr;
      h.msg_controllen = 0;
    }
    tx_addr_[m] = to_sockaddr(in[i].to);
    tx_count_[m] = static_cast<uint32_t>(j - i);
    i = j;
  }
  return m;
}

size_t KernelUdp::tx_burst(const TxDatagram* in, size_t n) {
  if (gso_retry_in_ != 0 && --gso_retry_in_ == 0) gso_ = true;
  size_t sent = 0;
  while (sent < n) {
    const size_t m = pack(in + sent, n - sent);
    size_t done = 0;  // messages the kernel took
    while (done < m) {
      const int k = sendmmsg(fd_, tx_msgs_.data() + done, static_cast<unsigned>(m - done), MSG_DONTWAIT);
      if (k <= 0) break;
      for (int q = 0; q < k; ++q) {
        const uint32_t c = tx_count_[done + static_cast<size_t>(q)];
        sent += c;
        if (c > 1) {
          ++runs_.gso_sends;
          runs_.gso_datagrams += c;
        }
      }
      done += static_cast<size_t>(k);
    }
    if (done == m) break;
    // The kernel refused a message. A GSO send the route cannot take
    // (EMSGSIZE or EINVAL: a segment past the link's MTU; EIO: no
    // checksum offload)
    // is sent again one datagram a message, with GSO off from now on;
    // anything else (a full buffer) is the caller's to count.
    const bool refused = tx_count_[done] > 1 && (errno == EMSGSIZE || errno == EINVAL || errno == EIO);
    if (!refused) break;
    // Off for a while, not for good: one destination's path may be what
    // refused it (a smaller MTU learned, or claimed by a forged ICMP).
    gso_ = false;
    gso_retry_in_ = kGsoRetryBursts;
    runs_.gso_refused = true;
    ++runs_.gso_refusals;
  }
  return sent;
}

absl::StatusOr<int> reserve_udp_port(uint16_t port, bool reuse) {
  UdpOptions o;
  o.bind = Endpoint{0, port};
  o.reuse_port = reuse;
  o.buffer_bytes = 4096;  // never read: whatever the kernel still delivers to it is dropped
  o.max_datagram = 64;
  auto s = KernelUdp::open(o);
  if (!s.ok()) return s.status();
  return s->release();
}

absl::StatusOr<std::vector<StaticNeighbor>> parse_neighbors(const std::string& text) {
  std::vector<StaticNeighbor> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    StaticNeighbor n;
    unsigned m[6];
    char tail = 0;
    const std::string mac(eq == absl::string_view::npos ? "" : item.substr(eq + 1));
    auto ip = net::parse_endpoint(std::string(item.substr(0, eq)), 0);
    if (eq == absl::string_view::npos || !ip.ok() ||
        std::sscanf(mac.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5],
                    &tail) != 6) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--neighbor: '", item, "' is not IP=MAC (e.g. 198.18.0.1=02:00:00:00:00:01)"));
    }
    n.ip = ip->ip;
    for (int i = 0; i < 6; ++i) n.mac[i] = static_cast<uint8_t>(m[i]);
    out.push_back(n);
  }
  return out;
}

}  // namespace ringfire::dataplane
