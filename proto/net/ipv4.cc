// ipv4.cc — IPv4 encode/decode and the Internet checksum.
#include "proto/net/ipv4.h"

#include <bit>
#include <cstring>

namespace ringfire::proto::net {

uint32_t ones_complement_sum(ConstBytes data, uint32_t sum) {
  // Eight bytes a step, summed in the machine's byte order and swapped once
  // at the end (RFC 1071: the one's-complement sum commutes with the swap);
  // 32-bit halves into a 64-bit accumulator cannot overflow here.
  const std::byte* p = data.data();
  size_t n = data.size();
  uint64_t acc = 0;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    acc += (w & 0xffffffffu) + (w >> 32);
  }
  if (n >= 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    acc += w;
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    acc += w;
    p += 2;
    n -= 2;
  }
  if (n == 1) {  // the odd byte is its word's first (high in network order)
    const uint16_t w = static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) << (std::endian::native == std::endian::little ? 0 : 8));
    acc += w;
  }
  while ((acc >> 16) != 0) acc = (acc & 0xffff) + (acc >> 16);
  auto folded = static_cast<uint16_t>(acc);
  if constexpr (std::endian::native == std::endian::little) folded = static_cast<uint16_t>(folded << 8 | folded >> 8);
  return sum + folded;
}

uint16_t fold_checksum(uint32_t sum) {
  while ((sum >> 16) != 0) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xffff);
}

size_t encode_ipv4(const Ipv4Header& h, MutableBytes out) {
  const size_t len = h.router_alert ? kIpv4HeaderBytes + 4 : kIpv4HeaderBytes;
  if (out.size() < len) return 0;
  std::byte* b = out.data();
  b[0] = std::byte(0x40 | (len / 4));
  b[1] = std::byte(h.tos);
  store_be16(b + 2, h.total_length);
  store_be16(b + 4, h.id);
  store_be16(b + 6, h.flags_fragment);
  b[8] = std::byte(h.ttl);
  b[9] = std::byte(h.protocol);
  store_be16(b + 10, 0);
  store_be32(b + 12, h.src);
  store_be32(b + 16, h.dst);
  if (h.router_alert) store_be32(b + 20, 0x94040000);  // RFC 2113: type 148, len 4, value 0
  store_be16(b + 10, ipv4_checksum(ConstBytes(b, len)));
  return len;
}

DecodeError decode_ipv4(ConstBytes in, bool verify_checksum, Ipv4Header* out) {
  if (in.size() < kIpv4HeaderBytes) return DecodeError::kTruncated;
  const std::byte* b = in.data();
  const uint8_t vihl = std::to_integer<uint8_t>(b[0]);
  if ((vihl >> 4) != 4) return DecodeError::kBadVersion;
  out->ihl_words = vihl & 0x0f;
  if (out->ihl_words < 5) return DecodeError::kBadLength;
  const size_t hlen = out->header_bytes();
  if (in.size() < hlen) return DecodeError::kTruncated;
  out->tos = std::to_integer<uint8_t>(b[1]);
  out->total_length = load_be16(b + 2);
  if (out->total_length < hlen) return DecodeError::kBadLength;
  if (out->total_length > in.size()) return DecodeError::kTruncated;
  out->id = load_be16(b + 4);
  out->flags_fragment = load_be16(b + 6);
  out->ttl = std::to_integer<uint8_t>(b[8]);
  out->protocol = std::to_integer<uint8_t>(b[9]);
  out->checksum = load_be16(b + 10);
  out->src = load_be32(b + 12);
  out->dst = load_be32(b + 16);
  out->router_alert = false;
  if (verify_checksum && fold_checksum(ones_complement_sum(in.first(hlen))) != 0) {
    return DecodeError::kBadChecksum;
  }
  return DecodeError::kOk;
}

}  // namespace ringfire::proto::net
