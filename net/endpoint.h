// endpoint.h — an IPv4 address and port, and the set-up helpers around it
// that every layer uses: printing and parsing one, the sockets API's
// form, an interface's address, a socket's own address. Set-up only (a
// host name may be resolved); nothing here is on a packet path.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ringfire::net {

// Endpoint is an IPv4 address and port, host order.
struct Endpoint {
  uint32_t ip = 0;
  uint16_t port = 0;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

std::string to_string(const Endpoint& e);
// to_sockaddr and from_sockaddr convert to and from the sockets API.
sockaddr_in to_sockaddr(const Endpoint& e);
Endpoint from_sockaddr(const sockaddr_in& a);
// parse_endpoint reads "a.b.c.d:port" (port required unless default_port).
absl::StatusOr<Endpoint> parse_endpoint(const std::string& text, int default_port = -1);
// interface_address returns the first IPv4 address of a network interface.
absl::StatusOr<uint32_t> interface_address(const std::string& ifname);

// is_local_address: whether `ip` (host order) is one of this host's IPv4
// addresses (getifaddrs; false when they cannot be listed).
bool is_local_address(uint32_t ip);
// socket_local returns the address a socket is bound to.
Endpoint socket_local(int fd);

}  // namespace ringfire::net
