// ports.cc — see ports.h: the backends, instantiated, and the ladder.
#include "engine/ports.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/kernel_port.h"
#include "dataplane/kernel_udp.h"
#include "engine/port_runner.h"
#include "engine/queued_port.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include <rte_lcore.h>

#include "dataplane/dpdk_port.h"
#endif

namespace ringfire::engine {
namespace {

std::unique_ptr<PortHandle> kernel_port(const PortSpec& spec, uint32_t ip) {
  dataplane::KernelPortOptions o;
  o.iface_ip = ip;
  o.ttl = spec.ttl;
  o.max_datagram = std::max<size_t>(spec.mtu, 1472);
  o.gso = spec.gso;
  o.gro = spec.gro;
  auto prepare = [](const dataplane::KernelPort& port, const dataplane::BindSpec& b, uint32_t local_ip,
                    uint16_t max_payload) {
    dataplane::KernelPortOptions po = port.options();
    // Multicast joins and sends on the port's interface, else on the
    // session's own address (a mirror's: its TCP connection's).
    if (po.iface_ip == 0) po.iface_ip = local_ip;
    po.max_datagram = std::max<size_t>(po.max_datagram, max_payload);
    return dataplane::KernelPort::prepare(po, b);
  };
  return std::make_unique<PortRunner<dataplane::KernelPort>>(spec.name, "kernel", dataplane::KernelPort(o),
                                                            prepare, spec.idle, -1);
}

#if RINGFIRE_HAVE_DPDK
absl::StatusOr<std::unique_ptr<PortHandle>> dpdk_port(const PortSpec& spec, uint16_t port_id) {
  if (spec.ip == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "port ", spec.name, ": a DPDK port needs its IPv4 address (ip = ..., or an interface that has one)"));
  }
  const uint16_t queues = std::max<uint16_t>(spec.queues, 1);
  for (uint16_t q = 0; q < queues && spec.lcore >= 0; ++q) {
    const unsigned l = static_cast<unsigned>(spec.lcore) + q;
    if (!rte_lcore_is_enabled(l) || l == rte_get_main_lcore() || rte_eal_get_lcore_state(l) != WAIT) {
      return absl::InvalidArgumentError(absl::StrCat(
          "port ", spec.name, ": lcore ", l, queues > 1 ? absl::StrCat(" (queue ", q, "'s)") : std::string(),
          " is not an idle worker lcore of the EAL (give the EAL that lcore, and each port its own)"));
    }
  }
  dataplane::DpdkPortOptions po;
  po.port_id = port_id;
  po.ip = spec.ip;
  po.first_binding = false;  // every session brings its own
  po.ttl = spec.ttl;
  po.max_payload = spec.mtu;
  po.neighbors = spec.neighbors;
  po.exception_port = spec.exception_port;
  po.queues = queues;
  auto ports = dataplane::DpdkPort::open_queues(po);
  if (!ports.ok()) return ports.status();
  auto prepare = [](const dataplane::DpdkPort& p, const dataplane::BindSpec& b, uint32_t, uint16_t) {
    return p.prepare(b);
  };
  std::vector<std::unique_ptr<PortHandle>> runners;
  for (uint16_t q = 0; q < queues; ++q) {
    runners.push_back(std::make_unique<PortRunner<dataplane::DpdkPort>>(
        spec.name, absl::StrCat("dpdk ", dataplane::port_driver(port_id)), std::move((*ports)[q]), prepare,
        spec.idle, spec.lcore < 0 ? -1 : spec.lcore + q));
  }
  if (queues == 1) return std::move(runners.front());
  return std::unique_ptr<PortHandle>(std::make_unique<QueuedPort>(std::move(runners)));
}
#endif

// devargs: what the EAL is given to make a rung's device.
std::string devargs(const PortSpec& spec, Rung r) {
  static int next_vdev = 10;  // after any the EAL's own arguments number 0..9
  switch (r) {
    case Rung::kDevice:
      return spec.device;
    case Rung::kAfXdp:
      // Queues: one socket a queue of the interface from 0, each with a
      // UMEM of its own (dpdk_port.cc: a pool a queue).
      return absl::StrCat("net_af_xdp", next_vdev++, ",iface=", spec.iface,
                          spec.queues > 1 ? absl::StrCat(",queue_count=", spec.queues) : "");
    case Rung::kAfPacket:
      // af_packet's rings default to 512 frames: 5 ms at 100 k datagrams/s
      // for a worker the scheduler has put aside. 4096, as af_xdp's.
      // Queues: qpairs sockets in one PACKET_FANOUT group (the kernel
      // hashes each flow to one).
      return absl::StrCat("net_af_packet", next_vdev++, ",iface=", spec.iface, ",framecnt=4096",
                          spec.queues > 1 ? absl::StrCat(",qpairs=", spec.queues) : "");
    case Rung::kKernel:
      break;
  }
  return "";
}

// the address of the port: given, else its interface's.
uint32_t port_ip(const PortSpec& spec) {
  if (spec.ip != 0 || spec.iface.empty()) return spec.ip;
  auto ip = net::interface_address(spec.iface);
  return ip.ok() ? *ip : 0;
}

// try_rung opens the port on one rung.
absl::StatusOr<std::unique_ptr<PortHandle>> try_rung(const PortSpec& spec, Rung r) {
  const uint32_t ip = port_ip(spec);
  if (r == Rung::kKernel) return kernel_port(spec, ip);
#if RINGFIRE_HAVE_DPDK
  if (!dataplane::eal_running()) return absl::FailedPreconditionError("the DPDK EAL is not running");
  if (r != Rung::kDevice && spec.iface.empty()) {
    return absl::InvalidArgumentError("no interface given (iface = ...)");
  }
  auto id = dataplane::attach_device(devargs(spec, r));
  if (!id.ok()) return id.status();
  PortSpec s = spec;
  s.ip = ip;
  auto port = dpdk_port(s, *id);
  if (!port.ok()) dataplane::detach_device(*id);
  return port;
#else
  return absl::FailedPreconditionError("this build has no DPDK backend (-Ddpdk=enabled)");
#endif
}

// LazyPort opens its port when the first session arrives.
class LazyPort final : public PortHandle {
 public:
  explicit LazyPort(const PortSpec& spec) : spec_(spec) {}
  absl::StatusOr<ServePlaced> open_serve(ServeRequest r) override {
    if (absl::Status st = ensure(r.bind.ip, r.config.mtu); !st.ok()) return st;
    return port_->open_serve(std::move(r));
  }
  void close_serve(dataplane::ServeLink* link) override {
    if (port_) port_->close_serve(link);
  }
  absl::StatusOr<dataplane::MirrorLink*> open(control::MirrorPlaneRequest r) override {
    if (absl::Status st = ensure(r.local_ip, r.max_payload); !st.ok()) return st;
    return port_->open(std::move(r));
  }
  void close(dataplane::MirrorLink* link) override {
    if (port_) port_->close(link);
  }
  absl::Status add_task(dataplane::WorkerTask* task) override {
    if (!port_) {
      return absl::FailedPreconditionError(absl::StrCat("port ", spec_.name, " opens with its first session: place a "
                                                        "session on it before a task, or give the port an address"));
    }
    return port_->add_task(task);
  }
  void remove_task(dataplane::WorkerTask* task) override {
    if (port_) port_->remove_task(task);
  }
  uint64_t port_drops() const override { return port_ ? port_->port_drops() : 0; }
  std::string describe() const override { return port_ ? port_->describe() : std::string(); }
  PortInfo info() const override {
    if (port_) return port_->info();
    PortInfo i;
    i.name = spec_.name;
    i.path = "not open yet";
    return i;
  }
  void stop() override {
    if (port_) port_->stop();
  }

 private:
  // ensure opens the port for its first session: at that session's
  // address unless the spec has one, for its largest datagram.
  absl::Status ensure(uint32_t ip, uint16_t max_payload) {
    if (port_) return absl::OkStatus();
    PortSpec s = spec_;
    if (s.ip == 0) s.ip = ip;
    s.mtu = std::max(s.mtu, max_payload);
    auto p = open_port(s);
    if (!p.ok()) return p.status();
    port_ = std::move(*p);
    return absl::OkStatus();
  }
  PortSpec spec_;
  std::unique_ptr<PortHandle> port_;
};

}  // namespace

const char* rung_name(Rung r) {
  switch (r) {
    case Rung::kDevice: return "dpdk";
    case Rung::kAfXdp: return "af_xdp";
    case Rung::kAfPacket: return "af_packet";
    case Rung::kKernel: return "kernel";
  }
  return "?";
}

absl::StatusOr<Rung> parse_rung(const std::string& name) {
  for (Rung r : {Rung::kDevice, Rung::kAfXdp, Rung::kAfPacket, Rung::kKernel}) {
    if (name == rung_name(r)) return r;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a rung: dpdk, af_xdp, af_packet or kernel"));
}

absl::StatusOr<std::unique_ptr<PortHandle>> open_port(const PortSpec& spec,
                                                      const std::function<void(const std::string&)>& log) {
  switch (spec.backend) {
    case PortSpec::Backend::kKernel:
      return kernel_port(spec, port_ip(spec));
    case PortSpec::Backend::kDpdk:
#if RINGFIRE_HAVE_DPDK
      if (spec.device.empty() && spec.iface.empty() && spec.dpdk_port_id >= 0) {
        PortSpec s = spec;
        s.ip = port_ip(spec);
        return dpdk_port(s, static_cast<uint16_t>(spec.dpdk_port_id));
      }
      return try_rung(spec, spec.device.empty() ? spec.pmd : Rung::kDevice);
#else
      return absl::FailedPreconditionError("this build has no DPDK backend (-Ddpdk=enabled)");
#endif
    case PortSpec::Backend::kAuto:
      break;
  }
  // The ladder, best first; a rung without what it needs is skipped, said.
  std::vector<std::string> passed;
  for (Rung r : {Rung::kDevice, Rung::kAfXdp, Rung::kAfPacket, Rung::kKernel}) {
    if (r == Rung::kDevice && spec.device.empty()) continue;
    if (static_cast<int>(r) > static_cast<int>(spec.require)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "port ", spec.name, " requires ", rung_name(spec.require), " or better, and every rung to it failed: ",
          absl::StrJoin(passed, "; ")));
    }
    auto port = try_rung(spec, r);
    if (port.ok()) {
      if (log) log(absl::StrCat("port ", spec.name, ": ", rung_name(r), " (", (*port)->info().path, ")"));
      return port;
    }
    const std::string why = absl::StrCat(rung_name(r), ": ", port.status().message());
    if (log) log(absl::StrCat("port ", spec.name, ": ", why, "; trying the next rung"));
    passed.push_back(why);
  }
  return absl::InternalError(absl::StrCat("port ", spec.name, ": no rung left: ", absl::StrJoin(passed, "; ")));
}

std::unique_ptr<PortHandle> lazy_port(const PortSpec& spec) { return std::make_unique<LazyPort>(spec); }

absl::Status start_dpdk(const std::string& eal_args, const std::vector<int>& worker_lcores,
                        const std::vector<std::string>& pci_devices) {
#if RINGFIRE_HAVE_DPDK
  if (dataplane::eal_running()) return absl::OkStatus();
  std::string args = eal_args;
  if (args.empty()) {
    // The main lcore: the first CPU this process may run on (taskset and
    // cpusets are honoured), then the workers' lcores.
    int cpu = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)) ++cpu;
    }
    std::vector<int> lcores{cpu};
    for (int l : worker_lcores) {
      if (std::find(lcores.begin(), lcores.end(), l) == lcores.end()) lcores.push_back(l);
    }
    std::string pci = pci_devices.empty() ? " --no-pci" : "";
    for (const std::string& d : pci_devices) absl::StrAppend(&pci, " -a ", d);
    args = absl::StrCat("-l ", absl::StrJoin(lcores, ","), " --main-lcore ", cpu, " --no-huge -m 256", pci,
                        " --no-shconf --file-prefix rf", getpid(), " --log-level=lib.eal:error");
  }
  return dataplane::eal_init(args, /*devices_later=*/true);
#else
  (void)eal_args;
  (void)worker_lcores;
  (void)pci_devices;
  return absl::FailedPreconditionError("this build has no DPDK backend (-Ddpdk=enabled)");
#endif
}

}  // namespace ringfire::engine
