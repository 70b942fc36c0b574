// arp.h — ARP for IPv4 over Ethernet (RFC 826): requests and replies, which
// the data plane answers and sends itself when no kernel stack is under it.
#pragma once

#include <cstdint>

#include "proto/bytes.h"
#include "proto/net/ethernet.h"

namespace ringfire::proto::net {

inline constexpr size_t kArpBytes = 28;
enum class ArpOp : uint16_t { kRequest = 1, kReply = 2 };

struct ArpPacket {
  ArpOp op = ArpOp::kRequest;
  MacAddr sender_mac{};
  uint32_t sender_ip = 0;  // host order
  MacAddr target_mac{};
  uint32_t target_ip = 0;
};

size_t encode_arp(const ArpPacket& p, MutableBytes out);
// decode_arp accepts only Ethernet/IPv4 ARP with op request or reply.
DecodeError decode_arp(ConstBytes in, ArpPacket* out);

}  // namespace ringfire::proto::net
