// udp.cc — UDP encode/decode and checksum.
#include "proto/net/udp.h"

#include "proto/net/ipv4.h"

namespace ringfire::proto::net {

uint16_t udp_checksum(uint32_t src, uint32_t dst, ConstBytes datagram) {
  uint32_t sum = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff);
  sum += kIpProtoUdp;
  sum += static_cast<uint32_t>(datagram.size());
  const uint16_t c = fold_checksum(ones_complement_sum(datagram, sum));
  return c == 0 ? 0xffff : c;
}

size_t encode_udp(const UdpHeader& h, MutableBytes out) {
  if (out.size() < kUdpHeaderBytes) return 0;
  store_be16(out.data(), h.src_port);
  store_be16(out.data() + 2, h.dst_port);
  store_be16(out.data() + 4, h.length);
  store_be16(out.data() + 6, h.checksum);
  return kUdpHeaderBytes;
}

DecodeError decode_udp(ConstBytes in, uint32_t src, uint32_t dst, bool verify, UdpHeader* out) {
  if (in.size() < kUdpHeaderBytes) return DecodeError::kTruncated;
  out->src_port = load_be16(in.data());
  out->dst_port = load_be16(in.data() + 2);
  out->length = load_be16(in.data() + 4);
  out->checksum = load_be16(in.data() + 6);
  if (out->length < kUdpHeaderBytes) return DecodeError::kBadLength;
  if (out->length > in.size()) return DecodeError::kTruncated;
  if (verify && out->checksum != 0) {
    // Summing the datagram with its checksum in place gives 0 when it is right.
    uint32_t sum = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + kIpProtoUdp +
                   out->length;
    if (fold_checksum(ones_complement_sum(in.first(out->length), sum)) != 0) {
      return DecodeError::kBadChecksum;
    }
  }
  return DecodeError::kOk;
}

}  // namespace ringfire::proto::net
