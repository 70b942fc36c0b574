// ipv4.h — IPv4 headers with the header checksum (RFC 791, RFC 1071), and
// the one's-complement sum the UDP and IGMP checksums share.
#pragma once

#include <cstdint>

#include "proto/bytes.h"

namespace ringfire::proto::net {

inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr uint8_t kIpProtoIgmp = 2;
inline constexpr uint8_t kIpProtoTcp = 6;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint16_t kIpFlagDontFragment = 0x4000;
inline constexpr uint16_t kIpFlagMoreFragments = 0x2000;
inline constexpr uint16_t kIpFragmentOffsetMask = 0x1fff;

struct Ipv4Header {
  uint8_t ihl_words = 5;      // header length in 32-bit words
  uint8_t tos = 0;
  uint16_t total_length = 0;  // header + payload
  uint16_t id = 0;
  uint16_t flags_fragment = kIpFlagDontFragment;
  uint8_t ttl = 64;
  uint8_t protocol = kIpProtoUdp;
  uint16_t checksum = 0;
  uint32_t src = 0;  // host order
  uint32_t dst = 0;
  bool router_alert = false;  // encode: add the 4-byte Router Alert option (IGMP)

  size_t header_bytes() const { return size_t{ihl_words} * 4; }
  bool is_fragment() const {
    return (flags_fragment & (kIpFlagMoreFragments | kIpFragmentOffsetMask)) != 0;
  }
};

// ones_complement_sum adds 16-bit big-endian words into a 32-bit
// accumulator (odd trailing byte padded with zero).
uint32_t ones_complement_sum(ConstBytes data, uint32_t sum = 0);
// fold_checksum folds a sum into the final 16-bit checksum value.
uint16_t fold_checksum(uint32_t sum);
// ipv4_checksum computes the header checksum over `header` (with its
// checksum field as found: zero it first when computing).
inline uint16_t ipv4_checksum(ConstBytes header) { return fold_checksum(ones_complement_sum(header)); }

// encode_ipv4 writes the header (20 bytes, 24 with router_alert) with
// ihl, and the checksum computed; returns the header size or 0.
size_t encode_ipv4(const Ipv4Header& h, MutableBytes out);
// decode_ipv4 checks version, IHL, total length against `in`, and the
// header checksum when verify_checksum (NICs may have verified it).
DecodeError decode_ipv4(ConstBytes in, bool verify_checksum, Ipv4Header* out);

}  // namespace ringfire::proto::net
