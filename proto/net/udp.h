// udp.h — UDP headers and the checksum over the IPv4 pseudo-header
// (RFC 768). A checksum of 0 means "none" (accepted by Linux receivers).
#pragma once

#include <cstdint>

#include "proto/bytes.h"

namespace ringfire::proto::net {

inline constexpr size_t kUdpHeaderBytes = 8;

struct UdpHeader {
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint16_t length = 0;    // header + payload
  uint16_t checksum = 0;  // 0 = not computed
};

// udp_checksum computes the checksum of a UDP datagram (header with a zero
// checksum field, then payload) between src and dst (host order). Never
// returns 0: a computed zero is sent as 0xffff.
uint16_t udp_checksum(uint32_t src, uint32_t dst, ConstBytes datagram);

// encode_udp writes the 8-byte header; the checksum is left as given.
size_t encode_udp(const UdpHeader& h, MutableBytes out);
// decode_udp checks the length field against `in` (the IP payload);
// verifies the checksum when it is non-zero and verify is set.
DecodeError decode_udp(ConstBytes in, uint32_t src, uint32_t dst, bool verify, UdpHeader* out);

}  // namespace ringfire::proto::net
