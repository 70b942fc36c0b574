// kernel_udp.h — the kernel packet I/O backend: one non-blocking UDP socket
// with recvmmsg/sendmmsg bursts of up to 32 datagrams. Setup here (socket
// options, multicast membership on an explicit interface address, buffer
// sizes forced past a namespace's rmem_max); the burst calls are inline.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/packet_port.h"
#include "ring/lazy_bytes.h"

namespace ringfire::dataplane {

inline constexpr size_t kMaxDatagram = 65507;

// parse_neighbors reads "IP=MAC[,IP=MAC...]" (MAC as aa:bb:cc:dd:ee:ff).
absl::StatusOr<std::vector<StaticNeighbor>> parse_neighbors(const std::string& text);

struct UdpOptions {
  Endpoint bind;                 // ip 0 = any; port 0 = ephemeral
  uint32_t multicast_iface = 0;  // interface address for joins and multicast sends
  uint32_t join_group = 0;       // join this group on multicast_iface (0: none)
  uint8_t ttl = 1;
  bool multicast_loop = true;    // a mirror on the source host receives its sends
  int buffer_bytes = 8 << 20;    // SO_RCVBUF/SO_SNDBUF, forced (root) past rmem_max
  size_t max_datagram = 1472;    // receive buffer per datagram
  // reuse_port lets several sockets bind the same port (multicast
  // receivers of one group on one host). Off, a port in use is a start-up
  // error naming it.
  bool reuse_port = false;
  // gso: a run of datagrams to one destination, all of one size but a
  // shorter last, leaves as one UDP_SEGMENT send (the kernel's route,
  // filters and device transmit once, not per datagram; on the wire they
  // are the same datagrams). Off, or refused by the route (a datagram
  // past the link's MTU, a device without checksum offload): one send
  // each.
  bool gso = true;
  // gro: the socket takes a run sent as one GSO send whole (UDP_GRO), one
  // socket enqueue and one wake-up for the run instead of one each;
  // rx_burst hands its datagrams out one by one. Each of its kBurst
  // receive buffers is then 64 KiB (pages taken as they are written: up
  // to 2 MiB a socket once runs arrive), so it is for the sockets that
  // receive from GSO senders (a stream mux's channels), off by default.
  bool gro = false;
};

// reserve_udp_port binds a kernel UDP socket to `port` on any address and
// keeps it (the returned fd), so that no other process takes the port a
// kernel-bypass port answers on; fails naming the port if it is taken.
absl::StatusOr<int> reserve_udp_port(uint16_t port, bool reuse = false);

class KernelUdp {
 public:
  static absl::StatusOr<KernelUdp> open(const UdpOptions& o);
  KernelUdp(KernelUdp&& o) noexcept;
  KernelUdp& operator=(KernelUdp&&) = delete;
  ~KernelUdp();

  int fd() const { return fd_; }
  Endpoint local() const { return local_; }
  // release gives up the socket: the caller closes it.
  int release() { return std::exchange(fd_, -1); }

  // rx_burst receives up to n (<= kBurst) waiting datagrams; never blocks.
  // A run that arrived whole (gro) is handed out over as many calls as it
  // takes; its bytes stay where they are until then.
  size_t rx_burst(RxDatagram* out, size_t n);
  // rx_pending: datagrams of an arrived run not yet handed out.
  bool rx_pending() const { return rx_next_ < rx_msgs_n_; }
  // tx_burst sends up to n (<= kBurst) datagrams; returns how many the
  // kernel took (the rest: socket buffer full, counted by the caller).
  size_t tx_burst(const TxDatagram* in, size_t n);

  // Runs: GSO sends that carried more than one datagram and the
  // datagrams they carried, whether the route refused GSO (then off for
  // the socket's next kGsoRetryBursts bursts); runs that arrived whole
  // (gro) and their datagrams.
  static constexpr uint32_t kGsoRetryBursts = 4096;
  struct RunStats {
    uint64_t gso_sends = 0;
    uint64_t gso_datagrams = 0;
    bool gso_refused = false;
    uint64_t gso_refusals = 0;  // each turns it off for kGsoRetryBursts bursts
    uint64_t gro_runs = 0;
    uint64_t gro_datagrams = 0;
  };
  const RunStats& run_stats() const { return runs_; }

 private:
  KernelUdp(int fd, Endpoint local, size_t max_datagram, bool gso, bool gro);
  // pack lays datagrams in[0..n) out as messages; returns how many.
  size_t pack(const TxDatagram* in, size_t n);
  int fd_ = -1;
  Endpoint local_;
  size_t max_datagram_;
  bool gso_;
  uint32_t gso_retry_in_ = 0;  // bursts until GSO is tried again after a refusal
  bool gro_;
  RunStats runs_;
  size_t rx_room_;            // each receive buffer's bytes
  ring::LazyBytes rx_buf_;    // kBurst buffers of rx_room_
  size_t rx_msgs_n_ = 0;      // messages the last recvmmsg took
  size_t rx_next_ = 0;        // the first not yet handed out whole
  size_t rx_off_ = 0;         // bytes of it handed out
  std::array<uint32_t, kBurst> rx_segment_{};  // each message's datagram size (gro), else its length
  struct alignas(cmsghdr) GroCmsg {
    std::byte bytes[CMSG_SPACE(sizeof(int))];
  };
  std::array<GroCmsg, kBurst> rx_cmsg_{};
  std::array<mmsghdr, kBurst> rx_msgs_{};
  std::array<iovec, kBurst> rx_iov_{};
  std::array<sockaddr_in, kBurst> rx_addr_{};
  std::array<mmsghdr, kBurst> tx_msgs_{};
  std::array<iovec, 2 * kBurst> tx_iov_{};  // per datagram: the payload, then its trailer
  std::array<sockaddr_in, kBurst> tx_addr_{};
  std::array<uint32_t, kBurst> tx_count_{};  // datagrams in each message
  // per message: a UDP_SEGMENT control message (its segment size)
  struct alignas(cmsghdr) SegmentCmsg {
    std::byte bytes[CMSG_SPACE(sizeof(uint16_t))];
  };
  std::array<SegmentCmsg, kBurst> tx_cmsg_{};
};

static_assert(PacketPort<KernelUdp>);

}  // namespace ringfire::dataplane
