// ports.h — building a port and its worker from a PortSpec: the one place
// that knows every backend (kernel sockets, DPDK ethdevs: a NIC or a vdev
// on a kernel interface) and picks it, once, at start-up. `auto` walks the
// fallback ladder — a DPDK device (when one is named), net_af_xdp, then
// net_af_packet on the interface, then kernel sockets — logging why each
// rung it passes failed; `require` names the lowest rung allowed, so that
// falling past it is a start-up error instead of a silent slowdown. A spec
// without an address may be opened lazily, by the first session placed on
// it, with that session's address (a mirror whose data-plane address is its
// TCP connection's). Conductor thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/port_handle.h"

namespace ringfire::engine {

// Rung: a way to drive a port, best first.
enum class Rung : uint8_t { kDevice, kAfXdp, kAfPacket, kKernel };
const char* rung_name(Rung r);
absl::StatusOr<Rung> parse_rung(const std::string& name);  // "dpdk", "af_xdp", "af_packet", "kernel"

struct PortSpec {
  std::string name = "port0";
  // kernel, dpdk (exactly the rung given: `device`, else `pmd` on `iface`,
  // else the EAL's port dpdk_port_id), or auto (the ladder).
  enum class Backend : uint8_t { kKernel, kDpdk, kAuto } backend = Backend::kKernel;
  std::string iface;       // the kernel interface (vdevs are made on it; kernel: multicast)
  std::string device;      // dpdk: an EAL device's devargs or PCI address
  Rung pmd = Rung::kAfXdp; // dpdk on `iface`: kAfXdp or kAfPacket
  int dpdk_port_id = -1;   // dpdk: a port the EAL's own arguments made
  Rung require = Rung::kKernel;  // auto: the lowest rung allowed
  uint32_t ip = 0;         // the port's address (dpdk: required, or lazy); kernel: multicast's
  uint8_t ttl = 1;
  uint16_t mtu = 1472;     // the largest UDP payload it sends or receives
  bool gso = true;         // kernel: runs of datagrams leave as one UDP GSO send
  bool gro = false;        // kernel: such runs are taken whole (UDP_GRO; 64 KiB buffers: a mux node's port)
  ring::IdleMode idle = ring::IdleMode::kBackoff;
  int lcore = -1;          // dpdk: the worker's EAL lcore (-1: the first idle one, else a thread)
  // dpdk: queue pairs, a worker each (queue q's on lcore + q when lcore is
  // given); sessions spread over them (engine/queued_port.h).
  uint16_t queues = 1;
  std::vector<dataplane::StaticNeighbor> neighbors;
  int exception_port = -1;
};

// open_port starts the port's worker. `log` hears each rung that failed and
// why, and the rung taken. An error says what to change.
absl::StatusOr<std::unique_ptr<PortHandle>> open_port(const PortSpec& spec,
                                                      const std::function<void(const std::string&)>& log = {});

// lazy_port: a port opened by its first session (with that session's
// address when spec.ip is 0). Until then it costs nothing.
std::unique_ptr<PortHandle> lazy_port(const PortSpec& spec);

// start_dpdk starts the EAL for ports that attach their devices later:
// with `eal_args` when given, else a default — this process's first CPU as
// the main lcore plus `worker_lcores`, no hugepages, no shared files, and
// of the PCI devices only `pci_devices` (allow-listed: the host's own NICs
// are never probed). Once per process.
absl::Status start_dpdk(const std::string& eal_args, const std::vector<int>& worker_lcores,
                        const std::vector<std::string>& pci_devices);

}  // namespace ringfire::engine
