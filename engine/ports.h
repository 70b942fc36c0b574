// ports.h — building a port and its worker from a PortSpec: the one place
// that knows every backend (kernel sockets, a DPDK ethdev) and picks it,
// once, at start-up. A spec without an address may be opened lazily, by
// the first session placed on it, with that session's address (a mirror
// whose data-plane address is its TCP connection's). Conductor thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/port_handle.h"

namespace ringfire::engine {

struct PortSpec {
  std::string name = "port0";
  enum class Backend : uint8_t { kKernel, kDpdk } backend = Backend::kKernel;
  uint32_t ip = 0;         // the port's address (dpdk: required, or lazy); kernel: for multicast
  uint8_t ttl = 1;
  uint16_t mtu = 1472;     // the largest UDP payload it sends or receives
  ring::IdleMode idle = ring::IdleMode::kBackoff;
  // dpdk: the EAL is already up (cli/engine start it); these pick the port.
  uint16_t dpdk_port_id = 0;
  std::vector<dataplane::StaticNeighbor> neighbors;
  int exception_port = -1;
};

// open_port starts the port's worker (a DPDK port: on an lcore when the
// EAL has one to spare). An error says what to change.
absl::StatusOr<std::unique_ptr<PortHandle>> open_port(const PortSpec& spec);

// lazy_port: a port opened by its first session (with that session's
// address when spec.ip is 0). Until then it costs nothing.
std::unique_ptr<PortHandle> lazy_port(const PortSpec& spec);

}  // namespace ringfire::engine
