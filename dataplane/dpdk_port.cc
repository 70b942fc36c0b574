// dpdk_port.cc — a DPDK port's setup: its pool, queues and offloads, the
// exception port, its bindings (UDP ports held in the kernel, steered by
// XDP on af_xdp, groups joined), and its summary. The bursts are in
// dpdk_port_datapath.cc.
// rte_eth_get_monitor_addr (the af_xdp RX gate) is experimental in 22.11.
#define ALLOW_EXPERIMENTAL_API 1
#include "dataplane/dpdk_port.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_ring.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dataplane/kernel_udp.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_XDP_STEER
#include "dataplane/xdp_steer.h"
#endif

namespace ringfire::dataplane {

using proto::net::MacAddr;

namespace {
// An Ethernet header with one VLAN tag: what a frame adds to its IP packet.
constexpr size_t kMaxL2Header = 18;

// steered_iface_of: the interface under `port` if ringfire's XDP program
// steers it ("" otherwise, and in a build without the program).
std::string steered_iface_of(uint16_t port) {
#if RINGFIRE_HAVE_XDP_STEER
  char dev[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(port, dev);
  return steered_iface(dev);
#else
  (void)port;
  return "";
#endif
}

// packed_pool makes an mbuf pool whose objects lie back to back, none
// padded out to a page boundary: net_af_xdp registers the pool as its UMEM
// and assumes `count * object size` bytes from the first object cover them
// all. A default pool on 4 KiB pages (--no-huge) spreads 2.4 KiB objects
// one per page, the UMEM misses the last ~40 % of them, and the socket stops
// receiving once the fill ring has been handed those. (Packing is only for
// ports without DMA: an mbuf may now straddle a page.)
rte_mempool* packed_pool(const std::string& name, uint32_t n, unsigned cache) {
  rte_mempool* mp = rte_mempool_create_empty(
      name.c_str(), n, sizeof(rte_mbuf) + RTE_MBUF_DEFAULT_BUF_SIZE, cache,
      sizeof(rte_pktmbuf_pool_private), static_cast<int>(rte_socket_id()), RTE_MEMPOOL_F_NO_IOVA_CONTIG);
  if (mp == nullptr) return nullptr;
  rte_pktmbuf_pool_private priv{};
  priv.mbuf_data_room_size = RTE_MBUF_DEFAULT_BUF_SIZE;
  if (rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr) != 0) {
    rte_mempool_free(mp);
    return nullptr;
  }
  rte_pktmbuf_pool_init(mp, &priv);
  if (rte_mempool_populate_default(mp) < 0) {
    rte_mempool_free(mp);
    return nullptr;
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  return mp;
}

// start_exception_port sets up the exception port (once per process) with
// a small pool of its own, and gives it the data port's MAC: the kernel
// behind it then sends as the port, and takes frames sent to the port.
absl::Status start_exception_port(uint16_t exc, uint16_t data_port) {
  static std::array<bool, RTE_MAX_ETHPORTS> started{};
  if (started[exc]) return absl::OkStatus();
  if (!rte_eth_dev_is_valid_port(exc) || exc == data_port) {
    return absl::InvalidArgumentError(absl::StrCat("the exception port ", exc, " is not a second DPDK port"));
  }
  rte_mempool* pool = rte_pktmbuf_pool_create(absl::StrCat("rf_exc_", exc).c_str(), 1023, 32, 0,
                                              RTE_MBUF_DEFAULT_BUF_SIZE, static_cast<int>(rte_socket_id()));
  rte_ether_addr mac{};
  rte_eth_conf conf{};
  int rc = pool == nullptr ? -ENOMEM : rte_eth_dev_configure(exc, 1, 1, &conf);
  if (rc == 0) rc = rte_eth_rx_queue_setup(exc, 0, 256, rte_eth_dev_socket_id(exc), nullptr, pool);
  if (rc == 0) rc = rte_eth_tx_queue_setup(exc, 0, 256, rte_eth_dev_socket_id(exc), nullptr);
  if (rc == 0) rc = rte_eth_macaddr_get(data_port, &mac);
  if (rc == 0) rc = rte_eth_dev_default_mac_addr_set(exc, &mac);
  if (rc == 0) rc = rte_eth_dev_start(exc);
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot start the exception port ", exc, ": ",
                                                      rte_strerror(rc < 0 ? -rc : rc)));
  }
  started[exc] = true;
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<DpdkPort> DpdkPort::open(const DpdkPortOptions& o) {
  DpdkPort p(o);
  if (!rte_eth_dev_is_valid_port(o.port_id)) {
    return absl::NotFoundError(absl::StrCat("DPDK port ", o.port_id, " does not exist"));
  }
  // A datagram must fit the port's MTU and one mbuf. Chained mbufs and
  // jumbo pools are not built: no port on this machine takes an MTU over
  // 1500 from DPDK (net_tap caps frames at 1522, memif refuses), so neither
  // could be tested.
  uint16_t port_mtu = 1500;
  const bool af_xdp = driver_is(o.port_id, "net_af_xdp");
  const size_t ip_bytes = size_t{o.max_payload} + 28;
  constexpr uint16_t room = RTE_MBUF_DEFAULT_BUF_SIZE;
  rte_eth_dev_get_mtu(o.port_id, &port_mtu);
  const size_t mbuf_room = size_t{room} - RTE_PKTMBUF_HEADROOM;
  if (ip_bytes > port_mtu || ip_bytes + kMaxL2Header > mbuf_room) {
    const size_t fits = std::min<size_t>(port_mtu, mbuf_room - kMaxL2Header) - 28;
    return absl::InvalidArgumentError(absl::StrCat(
        "UDP payloads of ", o.max_payload, " bytes do not fit DPDK port ", o.port_id, " (MTU ", port_mtu, ", ",
        mbuf_room, "-byte mbufs): use --mtu ", fits, " or less at the source, or raise the interface's MTU"));
  }
  // The pool must cover every mbuf the port can hold at once: the RX and TX
  // descriptors, a burst in each direction, the per-core cache; and on
  // af_xdp, whose mbufs are the UMEM, also the fill and completion rings
  // (2048 each). Short of that, the PMD stops receiving and sending for
  // want of an mbuf, and nothing ever frees one.
  constexpr uint16_t kTxDesc = 1024;
  constexpr unsigned kCache = 256;
  const std::string steer_iface = steered_iface_of(o.port_id);
  // An XSK's RX ring is all the buffering there is between the kernel and
  // a worker that the scheduler has put aside (a socket has megabytes): 4096
  // descriptors ride out ~40 ms at 100 k datagrams/s. Its fill ring is 4096.
  const uint16_t kRxDesc = af_xdp ? 4096 : 1024;
  // One pool per port for the life of the process: the PMD keeps mbufs of
  // it in its queues until the port is closed (at exit), so a session that
  // ends must not free it, and the next session on the port reuses it. A
  // port of N queues has one N times the size; on af_xdp, whose pool is a
  // socket's UMEM (and this DPDK shares none between sockets), one a queue.
  const uint16_t queues = std::max<uint16_t>(o.queues, 1);
  const uint16_t pools = af_xdp ? queues : 1;
  uint32_t mbufs = o.mbufs;
  if (mbufs == 0) mbufs = af_xdp ? 16383 : 4096u * queues - 1;  // 2^n - 1: the mempool's best size
  static std::array<std::array<rte_mempool*, kMaxQueues>, RTE_MAX_ETHPORTS> port_pools{};
  for (uint16_t q = 0; q < pools; ++q) {
    rte_mempool*& pool = port_pools[o.port_id][q];
    if (pool != nullptr) continue;
    const std::string name = q == 0 ? absl::StrCat("rf_pool_", o.port_id) : absl::StrCat("rf_pool_", o.port_id, "_", q);
    pool = af_xdp ? packed_pool(name, mbufs, kCache)
                  : rte_pktmbuf_pool_create(name.c_str(), mbufs, kCache, 0, room, static_cast<int>(rte_socket_id()));
    if (pool == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot create a pool of ", mbufs, " mbufs (", (uint64_t{mbufs} * (room + 192)) >> 20,
          " MiB): ", rte_strerror(rte_errno), " (give the EAL more memory: -m, or hugepages)"));
    }
  }
  const auto pool_of = [&](uint16_t q) { return port_pools[o.port_id][af_xdp ? q : 0]; };
  p.pool_ = pool_of(o.queue);
  // Offloads the port has: UDP checksums on TX (a NIC, net_tap; the payload
  // is not summed twice), IPv4 and UDP checksum verdicts on RX. af_xdp,
  // af_packet and memif offer none: software does it.
  static std::array<uint64_t, RTE_MAX_ETHPORTS> port_tx_offloads{};
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(o.port_id, &info) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot query DPDK port ", o.port_id));
  }
  // The port, too, is started once and stays up until exit: a later session
  // (a mirror reconnecting to a restarted source) takes it as it is. af_xdp
  // cannot set its queue up again (the socket of the first setup holds it).
  static std::array<bool, RTE_MAX_ETHPORTS> port_started{};
  if (!port_started[o.port_id]) {
    rte_eth_conf conf{};
    conf.txmode.offloads = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    conf.rxmode.offloads = info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
    port_tx_offloads[o.port_id] = conf.txmode.offloads;
    int rc = rte_eth_dev_configure(o.port_id, queues, queues, &conf);
    for (uint16_t q = 0; q < queues && rc == 0; ++q) {
      rc = rte_eth_rx_queue_setup(o.port_id, q, kRxDesc, rte_eth_dev_socket_id(o.port_id), nullptr, pool_of(q));
      if (rc == 0) rc = rte_eth_tx_queue_setup(o.port_id, q, kTxDesc, rte_eth_dev_socket_id(o.port_id), nullptr);
    }
    if (rc == 0) rc = rte_eth_dev_start(o.port_id);
    if (rc != 0) {
      std::string hint;
#if RINGFIRE_HAVE_XDP_STEER
      if (!steer_iface.empty()) hint = attached_program_hint(steer_iface);
#endif
      return absl::FailedPreconditionError(
          absl::StrCat("cannot start DPDK port ", o.port_id, ": ", rte_strerror(-rc), hint));
    }
    port_started[o.port_id] = true;
  }
  if (o.exception_port >= 0) {
    if (absl::Status st = start_exception_port(static_cast<uint16_t>(o.exception_port), o.port_id); !st.ok()) {
      return st;
    }
  }
  p.open_ = true;
  p.tx_udp_cksum_ = (port_tx_offloads[o.port_id] & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) != 0;
  rte_eth_allmulticast_enable(o.port_id);
  rte_ether_addr addr{};
  rte_eth_macaddr_get(o.port_id, &addr);
  std::memcpy(p.mac_.data(), addr.addr_bytes, 6);
  p.l2_ = L2Agent(p.mac_, o.ip, rte_get_tsc_hz());
  // A port on a kernel interface takes its link state from the kernel.
  char iface[IF_NAMESIZE] = {};
  if (info.if_index != 0 && if_indextoname(info.if_index, iface) != nullptr) {
    p.link_iface_ = iface;
    p.link_probe_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  }
  p.steer_iface_ = steer_iface;
  p.bindings_.resize(1);
  p.by_port_.assign(65536, 0);
#if RINGFIRE_HAVE_XDP_STEER
  if (!steer_iface.empty()) {
    auto steer = steer_to_port(steer_iface, o.ip, 0);
    if (!steer.ok()) return steer.status();
    // Sharing the kernel's address, the port sees no ARP reply: start from
    // what the kernel has resolved (the control peer among them).
    for (const StaticNeighbor& n : steer->kernel_neighbors) p.learn(n.ip, n.mac, NeighborTable::Source::kArp);
  }
#endif
  for (const StaticNeighbor& n : o.neighbors) p.learn(n.ip, n.mac, NeighborTable::Source::kPinned);
  p.tx_headers_ = TxHeaderCache({p.mac_, o.ip, o.ttl});
  if (af_xdp) {
    rte_power_monitor_cond pmc{};
    p.rx_gate_ = rte_eth_get_monitor_addr(o.port_id, o.queue, &pmc) == 0 && pmc.size == sizeof(uint32_t);
    p.forced_rx_interval_ = rte_get_tsc_hz() / 1000;
  }
  if (o.first_binding) {
    // The first binding, as one session on its own port asks for it.
    BindSpec spec;
    spec.udp_port = o.udp_port;
    spec.group = o.join_group;
    spec.reuse = o.join_group != 0;  // a group's receivers on one host share its port
    auto first = p.prepare(spec);
    if (!first.ok()) return first.status();
    if (p.install(std::move(*first)) == 0) return absl::InternalError("cannot install the port's first binding");
  }
  return p;
}

QueueShare::QueueShare(uint16_t port_id, uint16_t queues) : owner(new std::atomic<uint8_t>[65536]) {
  for (size_t i = 0; i < 65536; ++i) owner[i].store(0, std::memory_order_relaxed);
  for (uint16_t q = 0; q < queues; ++q) {
    // 4,096 frames, the RX ring's depth over again: what the other queues
    // receive for this one while its worker is put aside (1,024 refused
    // some at 100 k datagrams/s with four workers on two CPUs).
    inbox.push_back(rte_ring_create(absl::StrCat("rf_inbox_", port_id, "_", q).c_str(), 4096,
                                    static_cast<int>(rte_socket_id()), RING_F_SC_DEQ));
  }
}

bool QueueShare::ok() const {
  return std::none_of(inbox.begin(), inbox.end(), [](rte_ring* r) { return r == nullptr; });
}

QueueShare::~QueueShare() {
  for (rte_ring* r : inbox) {
    if (r == nullptr) continue;
    void* m = nullptr;
    while (rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    rte_ring_free(r);
  }
}

absl::StatusOr<std::vector<DpdkPort>> DpdkPort::open_queues(const DpdkPortOptions& o) {
  std::vector<DpdkPort> ports;
  if (o.queues <= 1) {
    auto p = open(o);
    if (!p.ok()) return p.status();
    ports.push_back(std::move(*p));
    return ports;
  }
  if (!rte_eth_dev_is_valid_port(o.port_id)) {
    return absl::NotFoundError(absl::StrCat("DPDK port ", o.port_id, " does not exist"));
  }
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(o.port_id, &info) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot query DPDK port ", o.port_id));
  }
  if (info.max_rx_queues < o.queues || info.max_tx_queues < o.queues) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DPDK port ", o.port_id, " (", info.driver_name, ") has at most ",
        std::min(info.max_rx_queues, info.max_tx_queues), " queue pairs: give queues = that or fewer",
        driver_is(o.port_id, "net_af_packet") ? " (af_packet: its devargs' qpairs = N)" : ""));
  }
  if (o.queues > kMaxQueues) return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxQueues, " queues"));
  auto share = std::make_shared<QueueShare>(o.port_id, o.queues);
  if (!share->ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot make the queues' inboxes: ", rte_strerror(rte_errno),
                                                     " (give the EAL more memory: -m)"));
  }
  for (uint16_t q = 0; q < o.queues; ++q) {
    DpdkPortOptions qo = o;
    qo.queue = q;
    if (q != 0) qo.exception_port = -1;  // queue 0's worker forwards to and from it
    auto p = open(qo);
    if (!p.ok()) return p.status();
    p->share_ = share;
    ports.push_back(std::move(*p));
  }
  return ports;
}

absl::StatusOr<DpdkPort::Prepared> DpdkPort::prepare(const BindSpec& spec) const {
  Prepared p;
  p.group = spec.group;
  // Hold the UDP port in the kernel: a kernel socket (or another DPDK
  // process, which does the same) cannot take it, and a port the kernel
  // picks is free. (Sharing the kernel's address, the kernel then answers
  // nothing on it either: no port-unreachable for what the port takes.)
  auto fd = reserve_udp_port(spec.udp_port, spec.reuse);
  if (!fd.ok()) return fd.status();
  p.reservation_fd = *fd;
  p.udp_port = net::socket_local(p.reservation_fd).port;
  p.local = Endpoint{o_.ip, p.udp_port};
#if RINGFIRE_HAVE_XDP_STEER
  if (!steer_iface_.empty()) {
    absl::Status st = steer_binding(steer_iface_, o_.ip, p.udp_port, true);
    if (st.ok() && spec.group != 0) st = steer_binding(steer_iface_, spec.group, p.udp_port, true);
    if (!st.ok()) {
      return st;  // p closes its reservation
    }
  }
#endif
  return p;
}

BindingId DpdkPort::install(Prepared p) {
  BindingId id = 0;
  for (size_t i = 1; i < bindings_.size() && id == 0; ++i) {
    if (!bindings_[i].live) id = static_cast<BindingId>(i);
  }
  if (id == 0) {
    if (bindings_.size() > kMaxBindings) return 0;
    id = static_cast<BindingId>(bindings_.size());
    bindings_.emplace_back();
  }
  Binding& b = bindings_[id];
  b = Binding{p.udp_port, p.group, std::exchange(p.reservation_fd, -1), by_port_[p.udp_port], true};
  by_port_[p.udp_port] = id;
  // Relaxed: a hint to the other queues' workers (QueueShare).
  if (share_) share_->owner[p.udp_port].store(static_cast<uint8_t>(o_.queue + 1), std::memory_order_relaxed);
  if (first_port_ == 0) first_port_ = p.udp_port;
  if (p.group != 0 && l2_.join(p.group)) {
    joined_changed();
    send_igmp_report();
  }
  return id;
}

void DpdkPort::uninstall(BindingId id) {
  if (id == 0 || id >= bindings_.size() || !bindings_[id].live) return;
  Binding& b = bindings_[id];
  for (BindingId* link = &by_port_[b.udp_port]; *link != 0; link = &bindings_[*link].next) {
    if (*link == id) {
      *link = b.next;
      break;
    }
  }
  b.live = false;
  bool group_used = false, port_used = false, addr_used = false;
  for (size_t i = 1; i < bindings_.size(); ++i) {
    if (!bindings_[i].live) continue;
    group_used |= b.group != 0 && bindings_[i].group == b.group && bindings_[i].udp_port == b.udp_port;
    port_used |= bindings_[i].udp_port == b.udp_port;
    addr_used |= bindings_[i].group == b.group;
  }
#if RINGFIRE_HAVE_XDP_STEER
  if (!steer_iface_.empty()) {
    if (!port_used) (void)steer_binding(steer_iface_, o_.ip, b.udp_port, false);
    if (b.group != 0 && !group_used) (void)steer_binding(steer_iface_, b.group, b.udp_port, false);
  }
#endif
  if (b.group != 0 && !addr_used && l2_.leave(b.group)) {
    send_igmp_leave(std::span<const uint32_t>(&b.group, 1));  // a snooping switch stops at once
    joined_changed();
  }
  if (b.reservation_fd >= 0) close(b.reservation_fd);
  if (share_ && !port_used) {  // no longer this queue's (unless another queue took it since)
    uint8_t mine = static_cast<uint8_t>(o_.queue + 1);
    share_->owner[b.udp_port].compare_exchange_strong(mine, 0, std::memory_order_relaxed);
  }
  if (first_port_ == b.udp_port && !port_used) {
    first_port_ = 0;
    for (size_t i = 1; i < bindings_.size() && first_port_ == 0; ++i) {
      if (bindings_[i].live) first_port_ = bindings_[i].udp_port;
    }
  }
}

void DpdkPort::joined_changed() {
  // The XDP program steers IGMP to the port while any queue has a group.
  const auto mine = static_cast<uint32_t>(l2_.groups().size());
  uint32_t groups = mine;
  std::unique_lock<std::mutex> steer;  // held to the map's write below (QueueShare::steer_mu)
  if (share_) {
    steer = std::unique_lock<std::mutex>(share_->steer_mu);
    groups = share_->groups.fetch_add(mine - groups_, std::memory_order_relaxed) + (mine - groups_);
  }
  groups_ = mine;
#if RINGFIRE_HAVE_XDP_STEER
  if (!steer_iface_.empty()) (void)steer_to_port(steer_iface_, o_.ip, groups);
#else
  (void)groups;
#endif
}

Endpoint DpdkPort::local(BindingId b) const {
  return Endpoint{o_.ip, port_of(b)};
}

DpdkPort::DpdkPort(DpdkPort&& o) noexcept
    : o_(o.o_),
      share_(std::move(o.share_)),
      groups_(o.groups_),
      open_(std::exchange(o.open_, false)),
      pool_(std::exchange(o.pool_, nullptr)),
      mac_(o.mac_),
      rx_held_(o.rx_held_),
      rx_held_n_(std::exchange(o.rx_held_n_, 0)),
      exc_out_(o.exc_out_),
      exc_out_n_(std::exchange(o.exc_out_n_, 0)),
      next_exc_poll_tsc_(o.next_exc_poll_tsc_),
      neighbors_(o.neighbors_),
      tx_headers_(o.tx_headers_),
      l2_(std::move(o.l2_)),
      next_l2_tsc_(o.next_l2_tsc_),
      link_up_(o.link_up_),
      link_known_(o.link_known_),
      link_iface_(std::move(o.link_iface_)),
      link_probe_fd_(std::exchange(o.link_probe_fd_, -1)),
      rx_gate_(o.rx_gate_),
      last_rx_full_(o.last_rx_full_),
      next_forced_rx_tsc_(o.next_forced_rx_tsc_),
      forced_rx_interval_(o.forced_rx_interval_),
      tx_udp_cksum_(o.tx_udp_cksum_),
      ip_id_(o.ip_id_),
      stats_(o.stats_) {
  steer_iface_ = std::move(o.steer_iface_);
  bindings_ = std::move(o.bindings_);
  by_port_ = std::move(o.by_port_);
  first_port_ = o.first_port_;
}

DpdkPort::~DpdkPort() {
  if (link_probe_fd_ >= 0) close(link_probe_fd_);
  release_rx();
  if (!open_) return;
  send_igmp_leave(l2_.groups());  // a snooping switch stops at once
  for (const Binding& b : bindings_) {
    if (b.live && b.reservation_fd >= 0) close(b.reservation_fd);
  }
}

std::string DpdkPort::summary() const {
  const DpdkPortStats& s = stats_;
  return absl::StrCat("rx ", s.rx_frames.get(), " frames (", s.rx_not_ours.get(), " not ours, ",
                      s.rx_malformed.get(), " malformed, ", s.rx_exception.get(), " to the exception port), tx ",
                      s.tx_frames.get(), " frames (", s.tx_exception.get(), " from the exception port, ",
                      s.tx_refused.get(), " refused by the queue, ", s.tx_no_mbuf.get(), " without an mbuf, ",
                      s.tx_no_neighbor.get(), " awaiting ARP, ", s.tx_too_big.get(), " too big, ", s.tx_shared.get(), " duplicates shared, ",
                      s.tx_in_place.get(), " sent where they were built), ", s.arp_replies.get(),
                      " ARP replies, ", s.neighbors.get(), " neighbors (", s.neighbors_full.get(), " refused: full), ",
                      s.igmp_reports.get(), " IGMP reports, ", s.link_ups.get(), " link ups; ",
                      share_ ? absl::StrCat("queue ", o_.queue, " of ", o_.queues, ": ", s.rx_handed_off.get(),
                                            " handed to another queue (", s.rx_handoff_full.get(), " refused: its inbox full), ",
                                            s.rx_from_queues.get(), " from others; ")
                             : std::string(),
                      pool_ ? rte_mempool_avail_count(pool_) : 0,
                      " of ", pool_ ? pool_->size : 0, " mbufs free; UDP checksums by ",
                      tx_udp_cksum_ ? "the port" : "software");
}

}  // namespace ringfire::dataplane
