// ports.cc — see ports.h: the backends, instantiated.
#include "engine/ports.h"

#include <algorithm>

#include "dataplane/kernel_port.h"
#include "engine/port_runner.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include "dataplane/dpdk_port.h"
#endif

namespace ringfire::engine {
namespace {

std::unique_ptr<PortHandle> kernel_port(const PortSpec& spec) {
  dataplane::KernelPortOptions o;
  o.iface_ip = spec.ip;
  o.ttl = spec.ttl;
  o.max_datagram = std::max<size_t>(spec.mtu, 1472);
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
                                                            prepare, spec.idle);
}

#if RINGFIRE_HAVE_DPDK
absl::StatusOr<std::unique_ptr<PortHandle>> dpdk_port(const PortSpec& spec) {
  dataplane::DpdkPortOptions po;
  po.port_id = spec.dpdk_port_id;
  po.ip = spec.ip;
  po.first_binding = false;  // every session brings its own
  po.ttl = spec.ttl;
  po.max_payload = spec.mtu;
  po.neighbors = spec.neighbors;
  po.exception_port = spec.exception_port;
  auto port = dataplane::DpdkPort::open(po);
  if (!port.ok()) return port.status();
  auto prepare = [](const dataplane::DpdkPort& p, const dataplane::BindSpec& b, uint32_t, uint16_t) {
    return p.prepare(b);
  };
  return std::unique_ptr<PortHandle>(std::make_unique<PortRunner<dataplane::DpdkPort>>(
      spec.name, absl::StrCat("dpdk ", dataplane::port_driver(spec.dpdk_port_id)), std::move(*port), prepare,
      spec.idle));
}
#endif

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

absl::StatusOr<std::unique_ptr<PortHandle>> open_port(const PortSpec& spec) {
  if (spec.backend == PortSpec::Backend::kKernel) return kernel_port(spec);
#if RINGFIRE_HAVE_DPDK
  if (spec.ip == 0) {
    return absl::InvalidArgumentError(absl::StrCat("port ", spec.name, ": a DPDK port needs an IPv4 address"));
  }
  return dpdk_port(spec);
#else
  return absl::FailedPreconditionError("this build has no DPDK backend (-Ddpdk=enabled)");
#endif
}

std::unique_ptr<PortHandle> lazy_port(const PortSpec& spec) { return std::make_unique<LazyPort>(spec); }

}  // namespace ringfire::engine
