// dpdk_options.h — the packet I/O backend options `serve` and `mirror`
// share (--backend, --eal, --pmd, --dpdk-ip, --neighbor, --exception-tap) and starting DPDK's EAL from
// them. Start-up only.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/args.h"
#include "dataplane/packet_port.h"

namespace ringfire::cli {

// with_backend_options appends the backend options to a command's options;
// `ip_default` says what --dpdk-ip defaults to for that command.
std::vector<OptionSpec> with_backend_options(std::vector<OptionSpec> options, const char* ip_default);

struct Backend {
  bool dpdk = false;
  uint32_t dpdk_ip = 0;  // --dpdk-ip (host order), 0 when not given
  std::vector<dataplane::StaticNeighbor> neighbors;  // --neighbor
  int exception_port = -1;  // --exception-tap: the tap's DPDK port
};

// iface_address: the IPv4 address of --iface (for multicast), `fallback`
// without --iface, and `fallback` too when the interface has none but
// --dpdk-ip is given: then --iface only names the DPDK port's interface.
absl::StatusOr<uint32_t> iface_address(const Args& args, uint32_t fallback);

// start_backend reads the options; for --backend dpdk it starts the EAL
// (with --eal, or a default built from --pmd and --iface) and fails with a
// message that says what to change.
absl::StatusOr<Backend> start_backend(const Args& args);

}  // namespace ringfire::cli
