// endpoint.cc — addresses: printing, parsing, the sockets API's form.
#include "net/endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ringfire::net {

sockaddr_in to_sockaddr(const Endpoint& e) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(e.ip);
  a.sin_port = htons(e.port);
  return a;
}

Endpoint from_sockaddr(const sockaddr_in& a) {
  return Endpoint{ntohl(a.sin_addr.s_addr), ntohs(a.sin_port)};
}

std::string to_string(const Endpoint& e) {
  return absl::StrCat(e.ip >> 24, ".", (e.ip >> 16) & 255, ".", (e.ip >> 8) & 255, ".", e.ip & 255,
                      ":", e.port);
}

absl::StatusOr<Endpoint> parse_endpoint(const std::string& text, int default_port) {
  const auto colon = text.rfind(':');
  std::string host = colon == std::string::npos ? text : text.substr(0, colon);
  Endpoint e;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) {
    e.ip = ntohl(a.s_addr);
  } else {
    // A host name: resolve it to its first IPv4 address (setup only).
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    // Digits and dots are an address, never a name: getaddrinfo would take
    // "1.2.3" as 1.2.0.3 (helper-46).
    const bool numeric = !host.empty() && host.find_first_not_of("0123456789.") == std::string::npos;
    if (numeric || host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "': expected an IPv4 address such as 198.18.0.1:7400, or a host name that resolves"));
    }
    e.ip = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
    freeaddrinfo(res);
  }
  uint32_t port = 0;
  if (colon == std::string::npos) {
    if (default_port < 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", text, "': a port is required (ADDR:PORT)"));
    }
    port = static_cast<uint32_t>(default_port);
  } else if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': bad port"));
  }
  e.port = static_cast<uint16_t>(port);
  return e;
}

absl::StatusOr<uint32_t> interface_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return absl::InternalError(absl::StrCat("getifaddrs: ", std::strerror(errno)));
  uint32_t found = 0;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && ifname == i->ifa_name) {
      found = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
      break;
    }
  }
  freeifaddrs(list);
  if (found == 0) {
    return absl::NotFoundError(
        absl::StrCat("interface '", ifname, "' has no IPv4 address (see `ip -4 addr`)"));
  }
  return found;
}

bool is_local_address(uint32_t ip) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    found = i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
            ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr) == ip;
  }
  freeifaddrs(list);
  return found;
}

Endpoint socket_local(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return from_sockaddr(a);
}

}  // namespace ringfire::net
