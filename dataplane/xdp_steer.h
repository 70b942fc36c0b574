// xdp_steer.h — ringfire's own XDP program under DPDK's net_af_xdp PMD.
// The PMD's default program takes every frame on the queue, so the host's
// kernel would lose its TCP control connection and its ARP. ringfire
// instead passes `xdp_prog=` (the program in xdp/steer.bpf.c, embedded in
// the binary) and, once the port is up, tells the program which address and
// group are the DPDK port's; all else stays with the kernel. The DPDK port
// therefore needs an address of its own, not the kernel's on that interface.
// Start-up only; nothing here is on the hot path.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ringfire::dataplane {

// with_steer_program returns EAL `args` where every net_af_xdp vdev without
// an xdp_prog= devarg gets ringfire's program (written once to a private
// file, removed at exit), and records which vdev sits on which interface.
absl::StatusOr<std::string> with_steer_program(const std::string& args);

// steered_iface: the interface under vdev `device_name` (e.g.
// "net_af_xdp0") if ringfire's program was given to it, else "".
std::string steered_iface(const std::string& device_name);

// steer_to_port tells the program on `iface` to hand the port the frames
// for `ip` (ARP and IPv4) and for `group` (UDP, and IGMP); host order, group
// 0 for none. Fails, saying what to change, when `ip` is the kernel's own
// address on that interface (the control connection would vanish).
absl::Status steer_to_port(const std::string& iface, uint32_t ip, uint32_t group);

}  // namespace ringfire::dataplane
