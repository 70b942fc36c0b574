// ethernet.h — Ethernet II headers (one optional 802.1Q tag on decode) and
// IPv4 multicast group -> MAC mapping. Network byte order on the wire.
#pragma once

#include <array>
#include <cstdint>

#include "proto/bytes.h"

namespace ringfire::proto::net {

using MacAddr = std::array<uint8_t, 6>;
inline constexpr size_t kEtherHeaderBytes = 14;
inline constexpr size_t kVlanTagBytes = 4;
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr MacAddr kBroadcastMac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

struct EtherHeader {
  MacAddr dst{};
  MacAddr src{};
  uint16_t ethertype = 0;   // after any VLAN tag
  uint16_t vlan_tci = 0;    // 0 if untagged
  size_t header_bytes = kEtherHeaderBytes;  // 18 when tagged
};

// multicast_mac maps an IPv4 group (host order) to 01:00:5e + its low 23 bits.
constexpr MacAddr multicast_mac(uint32_t group) {
  return MacAddr{0x01, 0x00, 0x5e, static_cast<uint8_t>((group >> 16) & 0x7f),
                 static_cast<uint8_t>(group >> 8), static_cast<uint8_t>(group)};
}
constexpr bool is_multicast_mac(const MacAddr& m) { return (m[0] & 1) != 0; }

// encode_ether writes an untagged header (14 bytes); returns 0 if no room.
size_t encode_ether(const EtherHeader& h, MutableBytes out);
DecodeError decode_ether(ConstBytes in, EtherHeader* out);

}  // namespace ringfire::proto::net
