// xdp_steer.h — ringfire's own XDP program under DPDK's net_af_xdp PMD.
// The PMD's default program takes every frame on the queue, so the host's
// kernel would lose its TCP control connection and its ARP. ringfire
// instead passes `xdp_prog=` (the program in xdp/steer.bpf.c, embedded in
// the binary) and, once the port is up, tells the program which address and
// group are the DPDK port's; all else stays with the kernel. The port may
// share the kernel's address (then only its UDP port is steered, and the
// kernel keeps ARP) or have one of its own on the subnet. Start-up only.
#pragma once

#include <cstdint>
#include <string>

#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/packet_port.h"

namespace ringfire::dataplane {

// with_steer_program returns EAL `args` where every net_af_xdp vdev without
// an xdp_prog= devarg gets ringfire's program (in a memfd: nothing on disk),
// and records which vdev sits on which interface.
absl::StatusOr<std::string> with_steer_program(const std::string& args);

// with_steer_vdev: one vdev's devargs (a hot-plugged device), the same way.
absl::StatusOr<std::string> with_steer_vdev(const std::string& devargs);

// steered_iface: the interface under vdev `device_name` (e.g.
// "net_af_xdp0") if ringfire's program was given to it, else "".
std::string steered_iface(const std::string& device_name);

// SteerResult: how the port is steered, and, when it shares the kernel's
// address (so ARP replies go to the kernel), the neighbours the kernel
// already knows on that interface, to seed the port's table with.
struct SteerResult {
  bool shared = false;
  std::vector<StaticNeighbor> kernel_neighbors;
};

// attached_program_hint: when an XDP program is attached to `iface`, a
// sentence naming it and how to remove it (for a port that failed to start:
// a killed af_xdp process leaves its program behind); "" otherwise.
std::string attached_program_hint(const std::string& iface);

// steer_to_port tells the program on `iface` which address is the port's:
// when `ip` is not the kernel's address on `iface`, ARP for it and all IPv4
// to it go to the port; otherwise only the bindings' UDP does. `groups`:
// how many groups the port has joined (IGMP goes to the port if any).
absl::StatusOr<SteerResult> steer_to_port(const std::string& iface, uint32_t ip, uint32_t groups);

// steer_binding adds (or, with add false, removes) a binding: UDP to
// addr:udp_port (host order; addr the port's address or a group) goes to
// the port. Any thread: the map is the kernel's.
absl::Status steer_binding(const std::string& iface, uint32_t addr, uint16_t udp_port, bool add);

}  // namespace ringfire::dataplane
