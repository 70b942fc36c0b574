// udp_template.h — the Ethernet, IPv4 and UDP headers of one flow, built
// once (addresses, ports, TTL) and stamped in front of each payload with
// only what changes per datagram: the lengths, the IP id and the checksums
// (the IPv4 one from a sum precomputed over the fixed fields). Byte for
// byte what write_udp_headers builds. Pure: no I/O, no allocation.
#pragma once

#include <array>
#include <cstring>

#include "proto/net/packet.h"

namespace ringfire::proto::net {

class UdpTemplate {
 public:
  UdpTemplate() = default;
  explicit UdpTemplate(const UdpFlow& f) : src_ip_(f.src_ip), dst_ip_(f.dst_ip) {
    write_udp_headers(f, 0, 0, false, MutableBytes(bytes_.data(), bytes_.size()));
    // The IPv4 header as built, without its checksum, total length and id:
    // those three are added back per datagram.
    std::byte* ip = bytes_.data() + kEtherHeaderBytes;
    store_be16(ip + 2, 0);
    store_be16(ip + 4, 0);
    store_be16(ip + 10, 0);
    ip_sum_ = ones_complement_sum(ConstBytes(ip, kIpv4HeaderBytes));
  }

  // stamp writes the 42 header bytes in front of a payload of `payload_len`
  // bytes already at out[kUdpFrameOverhead] (`out` holds both); the UDP
  // checksum is computed if asked (else 0: the port offloads it, or none).
  void stamp(std::byte* out, uint16_t ip_id, size_t payload_len, bool compute_udp_checksum) const {
    std::memcpy(out, bytes_.data(), bytes_.size());
    const auto udp_len = static_cast<uint16_t>(kUdpHeaderBytes + payload_len);
    const auto total = static_cast<uint16_t>(kIpv4HeaderBytes + udp_len);
    std::byte* ip = out + kEtherHeaderBytes;
    store_be16(ip + 2, total);
    store_be16(ip + 4, ip_id);
    store_be16(ip + 10, fold_checksum(ip_sum_ + total + ip_id));
    std::byte* u = ip + kIpv4HeaderBytes;
    store_be16(u + 4, udp_len);
    if (compute_udp_checksum) store_be16(u + 6, udp_checksum(src_ip_, dst_ip_, ConstBytes(u, udp_len)));
  }

 private:
  std::array<std::byte, kUdpFrameOverhead> bytes_{};
  uint32_t ip_sum_ = 0;
  uint32_t src_ip_ = 0;
  uint32_t dst_ip_ = 0;
};

}  // namespace ringfire::proto::net
