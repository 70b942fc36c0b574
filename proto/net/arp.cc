// arp.cc — ARP encode/decode.
#include "proto/net/arp.h"

#include <cstring>

namespace ringfire::proto::net {

size_t encode_arp(const ArpPacket& p, MutableBytes out) {
  if (out.size() < kArpBytes) return 0;
  std::byte* b = out.data();
  store_be16(b, 1);  // hardware: Ethernet
  store_be16(b + 2, kEtherTypeIpv4);
  b[4] = std::byte{6};
  b[5] = std::byte{4};
  store_be16(b + 6, static_cast<uint16_t>(p.op));
  std::memcpy(b + 8, p.sender_mac.data(), 6);
  store_be32(b + 14, p.sender_ip);
  std::memcpy(b + 18, p.target_mac.data(), 6);
  store_be32(b + 24, p.target_ip);
  return kArpBytes;
}

DecodeError decode_arp(ConstBytes in, ArpPacket* out) {
  if (in.size() < kArpBytes) return DecodeError::kTruncated;
  const std::byte* b = in.data();
  if (load_be16(b) != 1 || load_be16(b + 2) != kEtherTypeIpv4 || b[4] != std::byte{6} ||
      b[5] != std::byte{4}) {
    return DecodeError::kBadValue;
  }
  const uint16_t op = load_be16(b + 6);
  if (op != 1 && op != 2) return DecodeError::kBadKind;
  out->op = static_cast<ArpOp>(op);
  std::memcpy(out->sender_mac.data(), b + 8, 6);
  out->sender_ip = load_be32(b + 14);
  std::memcpy(out->target_mac.data(), b + 18, 6);
  out->target_ip = load_be32(b + 24);
  return DecodeError::kOk;
}

}  // namespace ringfire::proto::net
