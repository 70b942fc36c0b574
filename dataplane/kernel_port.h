// kernel_port.h — the kernel backend as a port that many sessions share:
// one UDP socket per binding (the kernel demultiplexes by address and
// port), all waited on through one epoll, so an idle worker with twenty
// sessions makes one syscall a poll, not twenty. A binding's socket is made
// and bound on the setup thread (prepare: where a port in use is an error),
// then handed to the worker, which installs it. Worker thread only after
// construction, but for prepare.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/kernel_udp.h"
#include "dataplane/packet_port.h"

namespace ringfire::dataplane {

struct KernelPortOptions {
  uint32_t iface_ip = 0;        // the interface for multicast joins and sends
  uint8_t ttl = 1;
  int buffer_bytes = 8 << 20;   // per socket, forced past a namespace's rmem_max
  size_t max_datagram = 1472;
  bool gso = true;              // UdpOptions::gso and gro, for every binding's socket
  bool gro = false;
};

class KernelPort {
 public:
  // The serve's default pacing interval here (ServeConfig::pace_ns): each
  // datagram is a system call, and the path sustains ~40 k of them a second.
  static constexpr uint64_t kDefaultPaceNs = 50'000;
  // Prepared is a bound socket on its way to the worker.
  struct Prepared {
    std::unique_ptr<KernelUdp> socket;
    Endpoint local;
  };
  // prepare makes the socket for `spec` (any thread).
  static absl::StatusOr<Prepared> prepare(const KernelPortOptions& o, const BindSpec& spec);

  explicit KernelPort(const KernelPortOptions& o);
  KernelPort(KernelPort&& o) noexcept;
  KernelPort& operator=(KernelPort&&) = delete;
  ~KernelPort();

  // install takes a prepared binding and returns its id (0 when full).
  BindingId install(Prepared p);
  void uninstall(BindingId b);
  // local: a binding's address (the first binding's for 0).
  Endpoint local(BindingId b = 0) const;
  const KernelPortOptions& options() const { return o_; }
  // wait_fd: readable when any binding has a datagram (for park).
  int wait_fd() const { return epoll_fd_; }

  size_t rx_burst(RxDatagram* out, size_t n);
  // tx_burst sends each datagram from its binding's socket; returns how
  // many the kernel took.
  size_t tx_burst(const TxDatagram* in, size_t n);

 private:
  KernelUdp* socket(BindingId b) const {
    return b < sockets_.size() ? sockets_[b].get() : nullptr;
  }
  KernelPortOptions o_;
  int epoll_fd_ = -1;
  std::vector<std::unique_ptr<KernelUdp>> sockets_;  // index: binding id (0 unused)
  BindingId only_ = 0;  // the one binding, when there is exactly one (no epoll needed)
  size_t live_ = 0;
  std::array<BindingId, kBurst> ready_{};  // bindings epoll said were readable
  size_t ready_n_ = 0;
};

static_assert(PacketPort<KernelPort>);

}  // namespace ringfire::dataplane
