// tx_header_cache.h — the header template of each destination a
// kernel-bypass port sends to, keyed by (source UDP port, destination
// address and port), built off the per-datagram path: a miss (a new
// destination, or a neighbor table whose MAC changed since) resolves the
// neighbor once and builds the template; a hit costs a hash and a compare.
// Direct-mapped: a destination that collides with another rebuilds on its
// turn (a few hundred ns, correct either way). Worker thread only.
#pragma once

#include <array>
#include <cstdint>

#include "dataplane/neighbor_table.h"
#include "dataplane/packet_port.h"
#include "proto/net/udp_template.h"

namespace ringfire::dataplane {

class TxHeaderCache {
 public:
  static constexpr size_t kEntries = 256;

  // Origin: what every frame of the port shares.
  struct Origin {
    proto::net::MacAddr mac{};
    uint32_t ip = 0;
    uint8_t multicast_ttl = 1;
  };

  TxHeaderCache() = default;
  explicit TxHeaderCache(const Origin& o) : origin_(o) {}

  // lookup: the template for a datagram from `src_port` to `to`, or
  // nullptr when `to` is a unicast address with no neighbor entry yet.
  const proto::net::UdpTemplate* lookup(uint16_t src_port, const Endpoint& to, const NeighborTable& neighbors) {
    Entry& e = entries_[slot(src_port, to)];
    if (e.valid && e.to == to && e.src_port == src_port && e.version == neighbors.version()) {
      ++hits_;
      return &e.header;
    }
    proto::net::UdpFlow f;
    f.src_mac = origin_.mac;
    f.src_ip = origin_.ip;
    f.dst_ip = to.ip;
    f.src_port = src_port;
    f.dst_port = to.port;
    const bool multicast = (to.ip >> 28) == 0xE;
    f.ttl = multicast ? origin_.multicast_ttl : 64;
    if (multicast) {
      f.dst_mac = proto::net::multicast_mac(to.ip);
    } else if (const proto::net::MacAddr* mac = neighbors.get(to.ip)) {
      f.dst_mac = *mac;
    } else {
      return nullptr;
    }
    e = Entry{to, src_port, neighbors.version(), true, proto::net::UdpTemplate(f)};
    ++builds_;
    return &e.header;
  }

  uint64_t hits() const { return hits_; }
  uint64_t builds() const { return builds_; }

 private:
  struct Entry {
    Endpoint to;
    uint16_t src_port = 0;
    uint64_t version = 0;
    bool valid = false;
    proto::net::UdpTemplate header;
  };
  static size_t slot(uint16_t src_port, const Endpoint& to) {
    const uint64_t k = (uint64_t{to.ip} << 32) ^ (uint64_t{to.port} << 16) ^ src_port;
    return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 56);  // 256 entries
  }

  Origin origin_;
  std::array<Entry, kEntries> entries_{};
  uint64_t hits_ = 0;
  uint64_t builds_ = 0;
};

}  // namespace ringfire::dataplane
