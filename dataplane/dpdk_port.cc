// dpdk_port.cc — EAL start-up, port setup, and the DPDK bursts.
// rte_eth_get_monitor_addr (the af_xdp RX gate) is experimental in 22.11.
#define ALLOW_EXPERIMENTAL_API 1
#include "dataplane/dpdk_port.h"

#include <rte_eal.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_udp.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_cycles.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dataplane/kernel_udp.h"
#include "proto/frame.h"
#include "proto/net/packet.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_XDP_STEER
#include "dataplane/xdp_steer.h"
#endif

namespace ringfire::dataplane {

using proto::net::MacAddr;

namespace {
bool g_eal_started = false;
// An Ethernet header with one VLAN tag: what a frame adds to its IP packet.
constexpr size_t kMaxL2Header = 18;

// driver_is says whether `port` is driven by the PMD named `name`.
bool driver_is(uint16_t port, const char* name) {
  rte_eth_dev_info info{};
  return rte_eth_dev_info_get(port, &info) == 0 && info.driver_name != nullptr &&
         std::strcmp(info.driver_name, name) == 0;
}

}  // namespace

std::string port_driver(uint16_t port) {
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port, &info) != 0 || info.driver_name == nullptr) return "unknown";
  char dev[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(port, dev);
  return absl::StrCat(info.driver_name, " (", dev, ")");
}

namespace {

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

// clear_stale_memif_sockets removes the socket file of a net_memif server
// (socket-abstract=no) that nothing listens on any more, left by a process
// that was killed: the PMD refuses to start over it ("Address already in
// use"). A live server's socket is left alone.
void clear_stale_memif_sockets(const std::vector<std::string>& words) {
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] != "--vdev" || words[i + 1].rfind("net_memif", 0) != 0) continue;
    std::string role = "server", path, abstract_ = "yes";
    for (absl::string_view kv : absl::StrSplit(words[i + 1], ',')) {
      if (absl::ConsumePrefix(&kv, "role=")) role = std::string(kv);
      if (absl::ConsumePrefix(&kv, "socket=")) path = std::string(kv);
      if (absl::ConsumePrefix(&kv, "socket-abstract=")) abstract_ = std::string(kv);
    }
    if (role != "server" || abstract_ != "no" || path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) continue;
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size());
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno == ECONNREFUSED) {
      unlink(path.c_str());
    }
    close(fd);
  }
}

// runtime_base: where the EAL keeps its runtime directories (DPDK 22.11's rule).
std::string runtime_base() {
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  return getuid() == 0 ? "/var/run/dpdk" : absl::StrCat(xdg != nullptr ? xdg : "/tmp", "/dpdk");
}

// runtime_dir_of: the runtime directory an EAL started with these words
// makes: its --file-prefix, or DPDK's default "rte"; "" for a prefix that
// is not one plain name (nothing is ever removed outside its own).
std::string runtime_dir_of(const std::vector<std::string>& words) {
  std::string prefix = "rte";
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "--file-prefix" && i + 1 < words.size()) prefix = words[i + 1];
    if (absl::StartsWith(words[i], "--file-prefix=")) prefix = words[i].substr(14);
  }
  if (prefix.empty() || prefix == "." || prefix == ".." || prefix.find('/') != std::string::npos) return "";
  return absl::StrCat(runtime_base(), "/", prefix);
}

// clear_stale_runtime_dirs removes the EAL runtime directories ringfire's
// default file prefix names ("rf<pid>") whose process is gone: a process
// that exits removes its own (see eal_init), one killed (kill -9, a crash)
// cannot. Only flat directories of a dead pid are touched: a live
// process's, or anything not named so, is left alone.
void clear_stale_runtime_dirs() {
  const std::string base = runtime_base();
  DIR* d = opendir(base.c_str());
  if (d == nullptr) return;
  while (const dirent* e = readdir(d)) {
    const absl::string_view name(e->d_name);
    uint64_t pid = 0;
    if (name.size() < 3 || name.substr(0, 2) != "rf" || !absl::SimpleAtoi(name.substr(2), &pid) ||
        name.substr(2).find_first_not_of("0123456789") != absl::string_view::npos || pid == 0 || pid > INT32_MAX) {
      continue;
    }
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    const std::string dir = absl::StrCat(base, "/", name);
    DIR* inner = opendir(dir.c_str());
    if (inner == nullptr) continue;
    bool flat = true;
    while (const dirent* f = readdir(inner)) {
      const absl::string_view fname(f->d_name);
      if (fname == "." || fname == "..") continue;
      if (f->d_type == DT_DIR) {
        flat = false;
        continue;
      }
      unlink(absl::StrCat(dir, "/", fname).c_str());
    }
    closedir(inner);
    if (flat) rmdir(dir.c_str());
  }
  closedir(d);
}
}  // namespace

bool eal_running() { return g_eal_started; }

absl::Status eal_init(const std::string& given, bool devices_later) {
  bool& started = g_eal_started;
  if (started) return absl::OkStatus();
#if RINGFIRE_HAVE_XDP_STEER
  // net_af_xdp gets ringfire's steering program unless the user gave one.
  auto steered = with_steer_program(given);
  if (!steered.ok()) return steered.status();
  const std::string args = *steered;
#else
  const std::string& args = given;
#endif
  static std::vector<std::string> words;  // the EAL keeps pointers into argv
  words = {"ringfire"};
  for (absl::string_view w : absl::StrSplit(args, ' ', absl::SkipEmpty())) words.emplace_back(w);
  clear_stale_memif_sockets(words);
  clear_stale_runtime_dirs();
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  // An EAL that fails after making its runtime directory (no hugepages,
  // say) leaves it behind: remove it then, if it was not there before (a
  // live process's, sharing the prefix, is left alone).
  const std::string dir = runtime_dir_of(words);
  std::error_code ec;
  const bool existed = dir.empty() || std::filesystem::exists(dir, ec);
  if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
    const int err = rte_errno;
    if (!existed) std::filesystem::remove_all(dir, ec);
    rte_errno = err;
    return absl::FailedPreconditionError(absl::StrCat(
        "DPDK EAL did not start with '", given, "': ", rte_strerror(rte_errno),
        " (check --eal: lcores with -l, --no-huge or hugepages, a --vdev or a bound NIC)"));
  }
  started = true;
  // Release the EAL, and remove its runtime directory, when the process
  // exits: --no-huge runs leave one per file prefix otherwise.
  static std::string runtime_dir = rte_eal_get_runtime_dir();
  std::atexit([] {
    // af_xdp ports are stopped and closed: that detaches their XDP program
    // from the interface. A process with a memif port skips the EAL's own
    // clean-up: memif's interrupt thread, handling a peer that exits at the
    // same moment, crashed in it (DPDK 22.11: the EAL unmaps memory the
    // thread still uses). memif needs no hugepages, so nothing is left but
    // the runtime directory, removed below.
    bool memif = false;
    uint16_t port;
    RTE_ETH_FOREACH_DEV(port) {
      memif |= driver_is(port, "net_memif");
      if (driver_is(port, "net_af_xdp")) {
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
      }
    }
    if (!memif) rte_eal_cleanup();
    std::error_code ec2;
    if (runtime_dir.rfind("/var/run/dpdk/", 0) == 0) std::filesystem::remove_all(runtime_dir, ec2);
  });
  if (rte_eth_dev_count_avail() == 0 && !devices_later) {
    return absl::FailedPreconditionError(
        "DPDK started but found no port: give a --vdev (e.g. net_af_packet0,iface=eth0) in --eal");
  }
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> attach_device(const std::string& given) {
  if (!g_eal_started) return absl::FailedPreconditionError("the EAL is not running");
#if RINGFIRE_HAVE_XDP_STEER
  auto steered = with_steer_vdev(given);
  if (!steered.ok()) return steered.status();
  const std::string devargs = *steered;
#else
  const std::string& devargs = given;
#endif
  const std::string name = devargs.substr(0, devargs.find(','));
  if (auto id = port_by_name(name); id.ok()) return id;  // probed already (the EAL's own arguments)
  if (const int rc = rte_dev_probe(devargs.c_str()); rc != 0) {
    return absl::UnavailableError(absl::StrCat("DPDK could not start ", given, ": ", rte_strerror(-rc),
                                               " (the PMD's log above says why)"));
  }
  return port_by_name(name);
}

void detach_device(uint16_t port_id) {
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port_id, &info) != 0 || info.device == nullptr) return;
  rte_eth_dev_stop(port_id);
  rte_eth_dev_close(port_id);
  rte_dev_remove(info.device);
}

absl::StatusOr<uint16_t> port_by_name(const std::string& name) {
  uint16_t id = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0) {
    return absl::NotFoundError(absl::StrCat("DPDK has no port named ", name, " (did its vdev fail to start?)"));
  }
  return id;
}

absl::StatusOr<Pmd> parse_pmd(const std::string& name) {
  if (name == "af_packet") return Pmd::kAfPacket;
  if (name == "af_xdp") return Pmd::kAfXdp;
  return absl::InvalidArgumentError(absl::StrCat("--pmd: af_packet or af_xdp, not '", name,
                                                 "' (other vdevs: give the whole --eal)"));
}

std::string default_eal_args(const std::string& iface, Pmd pmd) {
  // One lcore: the first CPU this process may run on (so taskset/cpusets are
  // honoured rather than everything being moved to CPU 0).
  int cpu = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)) ++cpu;
  }
  return absl::StrCat("-l ", cpu, " --no-huge -m 256 --no-pci --no-shconf --file-prefix rf", getpid(),
                      " --vdev ", pmd == Pmd::kAfXdp ? "net_af_xdp0" : "net_af_packet0", ",iface=", iface,
                      // af_packet's rings default to 512 frames: 5 ms at 100 k datagrams/s
                      // for a worker the scheduler has put aside. 4096, as af_xdp's.
                      pmd == Pmd::kAfPacket ? ",framecnt=4096" : "", " --log-level=lib.eal:error");
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
  uint32_t mbufs = o.mbufs;
  if (mbufs == 0) mbufs = af_xdp ? 16383 : 4095;  // 2^n - 1: the mempool's best size
  // One pool per port for the life of the process: the PMD keeps mbufs of
  // it in its queues until the port is closed (at exit), so a session that
  // ends must not free it, and the next session on the port reuses it.
  static std::array<rte_mempool*, RTE_MAX_ETHPORTS> port_pools{};
  rte_mempool*& pool = port_pools[o.port_id];
  if (pool == nullptr) {
    const std::string name = absl::StrCat("rf_pool_", o.port_id);
    pool = af_xdp ? packed_pool(name, mbufs, kCache)
                  : rte_pktmbuf_pool_create(name.c_str(), mbufs, kCache, 0, room, static_cast<int>(rte_socket_id()));
  }
  p.pool_ = pool;
  if (p.pool_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot create a pool of ", mbufs, " mbufs (", (uint64_t{mbufs} * (room + 192)) >> 20,
        " MiB): ", rte_strerror(rte_errno), " (give the EAL more memory: -m, or hugepages)"));
  }
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
    int rc = rte_eth_dev_configure(o.port_id, 1, 1, &conf);
    if (rc == 0) rc = rte_eth_rx_queue_setup(o.port_id, 0, kRxDesc, rte_eth_dev_socket_id(o.port_id), nullptr, p.pool_);
    if (rc == 0) rc = rte_eth_tx_queue_setup(o.port_id, 0, kTxDesc, rte_eth_dev_socket_id(o.port_id), nullptr);
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
    p.rx_gate_ = rte_eth_get_monitor_addr(o.port_id, 0, &pmc) == 0 && pmc.size == sizeof(uint32_t);
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
  if (first_port_ == 0) first_port_ = p.udp_port;
  if (p.group != 0 && std::find(groups_.begin(), groups_.end(), p.group) == groups_.end()) {
    groups_.push_back(p.group);
    joined_changed();
    reports_sent_ = 0;
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
  if (b.group != 0 && !addr_used) {
    std::erase(groups_, b.group);
    send_igmp_report(b.group);  // a snooping switch stops at once
    joined_changed();
  }
  if (b.reservation_fd >= 0) close(b.reservation_fd);
  if (first_port_ == b.udp_port && !port_used) {
    first_port_ = 0;
    for (size_t i = 1; i < bindings_.size() && first_port_ == 0; ++i) {
      if (bindings_[i].live) first_port_ = bindings_[i].udp_port;
    }
  }
}

void DpdkPort::joined_changed() {
#if RINGFIRE_HAVE_XDP_STEER
  if (!steer_iface_.empty()) (void)steer_to_port(steer_iface_, o_.ip, static_cast<uint32_t>(groups_.size()));
#endif
}

Endpoint DpdkPort::local(BindingId b) const {
  return Endpoint{o_.ip, port_of(b)};
}

DpdkPort::DpdkPort(DpdkPort&& o) noexcept
    : o_(o.o_),
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
      last_arp_tsc_(o.last_arp_tsc_),
      next_report_tsc_(o.next_report_tsc_),
      rx_gate_(o.rx_gate_),
      last_rx_full_(o.last_rx_full_),
      next_forced_rx_tsc_(o.next_forced_rx_tsc_),
      forced_rx_interval_(o.forced_rx_interval_),
      reports_sent_(o.reports_sent_),
      tx_udp_cksum_(o.tx_udp_cksum_),
      ip_id_(o.ip_id_),
      stats_(o.stats_) {
  steer_iface_ = std::move(o.steer_iface_);
  bindings_ = std::move(o.bindings_);
  by_port_ = std::move(o.by_port_);
  groups_ = std::move(o.groups_);
  first_port_ = o.first_port_;
}

DpdkPort::~DpdkPort() {
  release_rx();
  if (!open_) return;
  for (uint32_t g : std::vector<uint32_t>(groups_)) send_igmp_report(g);  // a snooping switch stops at once
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
                      s.igmp_reports.get(), " IGMP reports; ", pool_ ? rte_mempool_avail_count(pool_) : 0,
                      " of ", pool_ ? pool_->size : 0, " mbufs free; UDP checksums by ",
                      tx_udp_cksum_ ? "the port" : "software");
}

void DpdkPort::release_rx() {
  for (size_t i = 0; i < rx_held_n_; ++i) rte_pktmbuf_free(rx_held_[i]);
  rx_held_n_ = 0;
}

void DpdkPort::learn(uint32_t ip, const MacAddr& mac, NeighborTable::Source source) {
  if (!neighbors_.set(ip, mac, source) && ip != 0 && !proto::net::is_multicast_mac(mac)) ++stats_.neighbors_full;
  stats_.neighbors.set(neighbors_.size());
}

bool DpdkPort::send_frame(rte_mbuf* m) {
  if (rte_eth_tx_burst(o_.port_id, 0, &m, 1) == 1) {
    ++stats_.tx_frames;
    return true;
  }
  rte_pktmbuf_free(m);
  ++stats_.tx_refused;
  return false;
}

void DpdkPort::send_arp(uint16_t op, const MacAddr& dst_mac, uint32_t target_ip) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return;
  auto* b = reinterpret_cast<std::byte*>(rte_pktmbuf_append(m, 60));  // minimum frame
  if (b == nullptr) {
    rte_pktmbuf_free(m);
    return;
  }
  std::memset(b, 0, 60);
  const proto::MutableBytes frame(b, 60);
  proto::net::encode_ether({dst_mac, mac_, proto::net::kEtherTypeArp}, frame);
  proto::net::ArpPacket a;
  a.op = static_cast<proto::net::ArpOp>(op);
  a.sender_mac = mac_;
  a.sender_ip = o_.ip;
  a.target_mac = op == 2 ? dst_mac : MacAddr{};
  a.target_ip = target_ip;
  proto::net::encode_arp(a, frame.subspan(proto::net::kEtherHeaderBytes));
  send_frame(m);
}

void DpdkPort::send_igmp_report(uint32_t left) {
  const bool leave = left != 0;
  const std::span<const uint32_t> groups = leave ? std::span<const uint32_t>(&left, 1) : std::span<const uint32_t>(groups_);
  if (groups.empty()) return;
  if (groups.size() > 64) return;  // one frame: 64 records fit, and a port never has that many groups
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return;
  const size_t records = 8 * groups.size();
  const size_t kLen = proto::net::kEtherHeaderBytes + 24 + 8 + records;
  auto* b = reinterpret_cast<std::byte*>(rte_pktmbuf_append(m, static_cast<uint16_t>(std::max<size_t>(60, kLen))));
  if (b == nullptr) {
    rte_pktmbuf_free(m);
    return;
  }
  std::memset(b, 0, std::max<size_t>(60, kLen));
  const proto::MutableBytes frame(b, kLen);
  const uint32_t dst = proto::net::kIgmpV3ReportGroup;
  proto::net::encode_ether({proto::net::multicast_mac(dst), mac_, proto::net::kEtherTypeIpv4}, frame);
  proto::net::Ipv4Header ip;
  ip.protocol = proto::net::kIpProtoIgmp;
  ip.ttl = 1;
  ip.router_alert = true;
  ip.tos = 0xc0;
  ip.total_length = static_cast<uint16_t>(24 + 8 + records);
  ip.src = o_.ip;
  ip.dst = dst;
  proto::net::encode_ipv4(ip, frame.subspan(proto::net::kEtherHeaderBytes));
  // Joining is "exclude no source"; leaving is "include no source".
  proto::net::encode_igmpv3_report(leave ? proto::net::IgmpV3RecordType::kChangeToInclude
                                         : proto::net::IgmpV3RecordType::kChangeToExclude,
                                   groups,
                                   frame.subspan(proto::net::kEtherHeaderBytes + 24));
  if (send_frame(m)) ++stats_.igmp_reports;
  if (leave) return;
  // Unsolicited reports: once more after 1 s (IGMP's robustness: the first
  // may be lost), then every 60 s, so a snooping switch without a querier
  // (membership interval 260 s) keeps forwarding the group.
  ++reports_sent_;
  next_report_tsc_ = rte_get_tsc_cycles() + rte_get_tsc_hz() * (reports_sent_ < 2 ? 1 : 60);
}

bool DpdkPort::rx_may_have_frames() {
  if (!rx_gate_ || last_rx_full_) return true;
  rte_power_monitor_cond pmc{};
  if (rte_eth_get_monitor_addr(o_.port_id, 0, &pmc) != 0) return true;
  const uint32_t producer = *static_cast<const volatile uint32_t*>(pmc.addr);
  if (pmc.fn(producer, pmc.opaque) != 0) return true;  // the producer moved
  const uint64_t now = rte_get_tsc_cycles();
  if (now < next_forced_rx_tsc_) return false;
  next_forced_rx_tsc_ = now + forced_rx_interval_;
  return true;
}

size_t DpdkPort::rx_burst(RxDatagram* out, size_t n) {
  release_rx();  // the previous burst's payloads are no longer referenced
  if (!groups_.empty() && rte_get_tsc_cycles() >= next_report_tsc_) send_igmp_report();
  if (!rx_may_have_frames()) {
    if (o_.exception_port >= 0) flush_exception();
    return 0;
  }
  rte_mbuf* mbufs[kBurst];
  const uint16_t got = rte_eth_rx_burst(o_.port_id, 0, mbufs, static_cast<uint16_t>(n));
  last_rx_full_ = got == n;
  size_t k = 0;
  for (uint16_t i = 0; i < got; ++i) {
    rte_mbuf* m = mbufs[i];
    ++stats_.rx_frames;
    proto::net::ParsedPacket p;
    const proto::ConstBytes frame(rte_pktmbuf_mtod(m, const std::byte*), m->data_len);
    // UDP checksums are trusted to the port: what it flags bad is dropped,
    // and software does not re-verify, because virtual ports (a veth through
    // af_packet) hand over the kernel's partial, offloaded checksums.
    const bool l4_bad = (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_BAD;
    const uint64_t ip_verdict = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
    const bool ip_bad = ip_verdict == RTE_MBUF_F_RX_IP_CKSUM_BAD;
    const proto::net::ParseOptions opt{/*verify_ip_checksum=*/ip_verdict != RTE_MBUF_F_RX_IP_CKSUM_GOOD,
                                       /*verify_udp_checksum=*/false};
    // IPv4 that is neither UDP nor IGMP is someone else's (a TCP segment
    // that af_packet hands over as a 64 KiB GSO chain, say): not ours, not
    // malformed. Untagged frames only; the full parse handles VLANs.
    if (m->data_len >= 34 && frame[12] == std::byte{0x08} && frame[13] == std::byte{0x00} &&
        frame[23] != std::byte{proto::net::kIpProtoUdp} && frame[23] != std::byte{proto::net::kIpProtoIgmp}) {
      not_ours(m);
      continue;
    }
    if (m->nb_segs != 1 || l4_bad || ip_bad || proto::net::parse_packet(frame, opt, &p) != proto::DecodeError::kOk) {
      ++stats_.rx_malformed;
      rte_pktmbuf_free(m);
      continue;
    }
    switch (p.kind) {
      case proto::net::PacketKind::kArp:
        learn(p.arp.sender_ip, p.arp.sender_mac, NeighborTable::Source::kArp);
        if (p.arp.op == proto::net::ArpOp::kRequest && p.arp.target_ip == o_.ip) {
          send_arp(2, p.arp.sender_mac, p.arp.sender_ip);
          ++stats_.arp_replies;
        }
        to_exception(m);  // the kernel behind it resolves its peers too
        continue;
      case proto::net::PacketKind::kIgmp:
        if (p.igmp.type == proto::net::kIgmpQuery && !groups_.empty()) send_igmp_report();
        rte_pktmbuf_free(m);
        continue;
      case proto::net::PacketKind::kUdp: {
        if (const BindingId b = match(p.ip.dst, p.udp.dst_port); b != 0) {
          learn(p.ip.src, p.eth.src, NeighborTable::Source::kSeen);  // fills an unknown peer only
          out[k++] = RxDatagram{p.payload, Endpoint{p.ip.src, p.udp.src_port}, b};
          rx_held_[rx_held_n_++] = m;
          continue;
        }
        break;
      }
      default:
        break;
    }
    not_ours(m);
  }
  if (o_.exception_port >= 0) flush_exception();
  return k;
}

void DpdkPort::not_ours(rte_mbuf* m) {
  ++stats_.rx_not_ours;
  to_exception(m);
}

void DpdkPort::to_exception(rte_mbuf* m) {
  if (o_.exception_port >= 0 && exc_out_n_ < exc_out_.size()) {
    // From a veth, a TCP segment may carry a partial checksum the kernel
    // behind the tap would drop; finish it (one frame chain only).
    if (m->nb_segs == 1) {
      proto::net::complete_partial_checksum(proto::MutableBytes(rte_pktmbuf_mtod(m, std::byte*), m->data_len));
    }
    exc_out_[exc_out_n_++] = m;
  } else {
    rte_pktmbuf_free(m);
  }
}

void DpdkPort::flush_exception() {
  const auto exc = static_cast<uint16_t>(o_.exception_port);
  if (exc_out_n_ != 0) {
    const uint16_t sent = rte_eth_tx_burst(exc, 0, exc_out_.data(), static_cast<uint16_t>(exc_out_n_));
    for (size_t i = sent; i < exc_out_n_; ++i) rte_pktmbuf_free(exc_out_[i]);
    stats_.rx_exception += sent;
    exc_out_n_ = 0;
  }
  const uint64_t now = rte_get_tsc_cycles();
  if (now < next_exc_poll_tsc_) return;
  next_exc_poll_tsc_ = now + rte_get_tsc_hz() / 10000;
  rte_mbuf* in[kBurst];
  const uint16_t got = rte_eth_rx_burst(exc, 0, in, kBurst);
  if (got == 0) return;
  const uint16_t sent = rte_eth_tx_burst(o_.port_id, 0, in, got);
  for (uint16_t i = sent; i < got; ++i) rte_pktmbuf_free(in[i]);
  stats_.tx_exception += sent;
  stats_.tx_refused += got - sent;
}

bool DpdkPort::lease_tx(TxLease* l) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return false;
  const size_t tail = rte_pktmbuf_tailroom(m);
  if (tail <= proto::net::kUdpFrameOverhead) {
    rte_pktmbuf_free(m);
    return false;
  }
  l->room = rte_pktmbuf_mtod(m, std::byte*) + proto::net::kUdpFrameOverhead;
  l->capacity = tail - proto::net::kUdpFrameOverhead;
  l->handle = m;
  return true;
}

void DpdkPort::release_tx(void* handle) { rte_pktmbuf_free(static_cast<rte_mbuf*>(handle)); }

// stamp_frame writes the headers in front of a payload at b +
// kUdpFrameOverhead (b: the start of m's data) and asks
// the port to sum the UDP checksum where it can.
void DpdkPort::stamp_frame(rte_mbuf* m, std::byte* b, const proto::net::UdpTemplate& header, size_t payload) {
  header.stamp(b, ip_id_++, payload, !tx_udp_cksum_);
  if (tx_udp_cksum_) {
    // The port sums the datagram; it starts from the pseudo-header's sum.
    m->l2_len = proto::net::kEtherHeaderBytes;
    m->l3_len = proto::net::kIpv4HeaderBytes;
    m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_UDP_CKSUM;
    auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(b + proto::net::kEtherHeaderBytes);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(b + proto::net::kEtherHeaderBytes + proto::net::kIpv4HeaderBytes);
    udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, m->ol_flags);
  }
}

size_t DpdkPort::tx_burst(const TxDatagram* in, size_t n) {
  rte_mbuf* mbufs[kBurst];
  uint16_t ready = 0;
  n = std::min(n, kBurst);
  size_t last_built = SIZE_MAX;  // the datagram whose frame is mbufs[ready - 1]
  for (size_t i = 0; i < n; ++i) {
    if (o_.share_duplicates && ready != 0 && i != 0 && in[i].payload.data() == in[i - 1].payload.data() &&
        in[i].payload.size() == in[i - 1].payload.size() && in[i].to == in[i - 1].to &&
        in[i].binding == in[i - 1].binding && in[i].trailer == in[i - 1].trailer && last_built == i - 1) {
      // The same datagram again (dup N): the same frame, one more reference
      // (each transmission releases one).
      rte_mbuf* m = mbufs[ready - 1];
      rte_mbuf_refcnt_update(m, 1);
      mbufs[ready++] = m;
      last_built = i;
      ++stats_.tx_shared;
      continue;
    }
    const proto::net::UdpTemplate* header = tx_headers_.lookup(port_of(in[i].binding), in[i].to, neighbors_);
    if (header == nullptr) {
      // Unknown neighbor: ask (at most every 10 ms) and drop this datagram;
      // the protocol retries (punches, NAKs, heartbeats).
      const uint64_t now = rte_get_tsc_cycles();
      if (now - last_arp_tsc_ > rte_get_tsc_hz() / 100) {
        send_arp(1, proto::net::kBroadcastMac, in[i].to.ip);
        last_arp_tsc_ = now;
      }
      ++stats_.tx_no_neighbor;
      continue;
    }
    // The payload, then this destination's trailer (its TAG frame), if any.
    const size_t body = in[i].payload.size() + (in[i].trailer != nullptr ? proto::kTagFrameBytes : 0);
    const size_t len = proto::net::kUdpFrameOverhead + body;
    if (auto* lent = static_cast<rte_mbuf*>(in[i].lease);
        lent != nullptr && lent->data_len == 0 &&
        in[i].payload.data() == rte_pktmbuf_mtod(lent, std::byte*) + proto::net::kUdpFrameOverhead) {
      // Built in place (lease_tx), sent for the first time: the headers go
      // in front of it, and it leaves uncopied with a reference of the
      // port's (the PMD frees that one; the lender releases its own).
      auto* b = reinterpret_cast<std::byte*>(rte_pktmbuf_append(lent, static_cast<uint16_t>(len)));
      if (b == nullptr) {
        ++stats_.tx_too_big;
        continue;
      }
      if (in[i].trailer != nullptr) {
        std::memcpy(b + proto::net::kUdpFrameOverhead + in[i].payload.size(), in[i].trailer, proto::kTagFrameBytes);
      }
      stamp_frame(lent, b, *header, body);
      rte_mbuf_refcnt_update(lent, 1);
      mbufs[ready++] = lent;
      last_built = i;
      ++stats_.tx_in_place;
      continue;
    }
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr) {
      stats_.tx_no_mbuf += n - i;
      break;
    }
    auto* b = reinterpret_cast<std::byte*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len)));
    if (b == nullptr) {
      rte_pktmbuf_free(m);
      ++stats_.tx_too_big;
      continue;
    }
    std::memcpy(b + proto::net::kUdpFrameOverhead, in[i].payload.data(), in[i].payload.size());
    if (in[i].trailer != nullptr) {
      std::memcpy(b + proto::net::kUdpFrameOverhead + in[i].payload.size(), in[i].trailer, proto::kTagFrameBytes);
    }
    stamp_frame(m, b, *header, body);
    mbufs[ready++] = m;
    last_built = i;
  }
  uint16_t sent = ready ? rte_eth_tx_burst(o_.port_id, 0, mbufs, ready) : 0;
  // A full TX queue (a memif peer, a NIC, the XSK ring) drains while we
  // wait: retry for up to ~20 us before dropping, rather than turning a
  // burst into NAKs. Bounded, so a dead peer costs 20 us a burst, no more.
  if (sent < ready) {
    const uint64_t give_up = rte_get_tsc_cycles() + rte_get_tsc_hz() / 50000;
    while (sent < ready && rte_get_tsc_cycles() < give_up) {
      sent += rte_eth_tx_burst(o_.port_id, 0, mbufs + sent, static_cast<uint16_t>(ready - sent));
    }
  }
  for (uint16_t i = sent; i < ready; ++i) rte_pktmbuf_free(mbufs[i]);
  stats_.tx_frames += sent;
  stats_.tx_refused += ready - sent;
  return sent;  // what the port took; the rest is counted above by reason (and by the caller)
}

}  // namespace ringfire::dataplane
