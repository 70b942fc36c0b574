// dpdk_eal.h — DPDK's environment, once per process: starting the EAL
// (and clearing what a killed process left: memif sockets, runtime
// directories), hot-plugging devices, and naming ports and their drivers.
// Setup thread only.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ringfire::dataplane {

// eal_init starts DPDK's EAL once per process with `args` (split on
// spaces), e.g. "-l 0 --no-huge -m 256 --no-pci --no-shconf
// --vdev net_af_packet0,iface=eth0". Never exits the process.
absl::Status eal_init(const std::string& args, bool devices_later = false);
// attach_device hot-plugs a device into the running EAL (a vdev such as
// "net_af_xdp1,iface=eth0", or a PCI address) and returns its port id; an
// error carries the PMD's reason. detach_device removes it again (a rung of
// the fallback ladder that failed). Setup thread.
absl::StatusOr<uint16_t> attach_device(const std::string& devargs);
void detach_device(uint16_t port_id);
// eal_running says whether eal_init succeeded in this process.
bool eal_running();
// port_by_name: the port id of the device named `name` (e.g. a vdev).
absl::StatusOr<uint16_t> port_by_name(const std::string& name);
// The vdevs ringfire can set up by itself on a kernel interface.
enum class Pmd { kAfPacket, kAfXdp };
absl::StatusOr<Pmd> parse_pmd(const std::string& name);
// default_eal_args is what ringfire passes when --eal is not given: one
// lcore, no hugepages, no shared files, a `pmd` vdev on `iface`.
std::string default_eal_args(const std::string& iface, Pmd pmd);

// port_driver names a port's PMD and device ("net_af_xdp (net_af_xdp0)").
std::string port_driver(uint16_t port_id);
// driver_is says whether `port_id` is driven by the PMD named `name` ("net_af_xdp").
bool driver_is(uint16_t port_id, const char* name);

}  // namespace ringfire::dataplane
