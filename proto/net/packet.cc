// packet.cc — whole-frame build and parse.
#include "proto/net/packet.h"

namespace ringfire::proto::net {

size_t write_udp_headers(const UdpFlow& f, uint16_t ip_id, size_t payload_len, bool compute_udp_checksum,
                         MutableBytes out) {
  const size_t total = kUdpFrameOverhead + payload_len;
  if (out.size() < total || payload_len > 65535 - kIpv4HeaderBytes - kUdpHeaderBytes) return 0;
  std::byte* b = out.data();
  encode_ether(EtherHeader{f.dst_mac, f.src_mac, kEtherTypeIpv4}, out);
  Ipv4Header ip;
  ip.tos = f.tos;
  ip.total_length = static_cast<uint16_t>(kIpv4HeaderBytes + kUdpHeaderBytes + payload_len);
  ip.id = ip_id;
  ip.ttl = f.ttl;
  ip.protocol = kIpProtoUdp;
  ip.src = f.src_ip;
  ip.dst = f.dst_ip;
  encode_ipv4(ip, out.subspan(kEtherHeaderBytes));
  std::byte* u = b + kEtherHeaderBytes + kIpv4HeaderBytes;
  const auto udp_len = static_cast<uint16_t>(kUdpHeaderBytes + payload_len);
  encode_udp(UdpHeader{f.src_port, f.dst_port, udp_len, 0}, MutableBytes(u, kUdpHeaderBytes));
  if (compute_udp_checksum) {
    store_be16(u + 6, udp_checksum(f.src_ip, f.dst_ip, ConstBytes(u, udp_len)));
  }
  return total;
}

DecodeError parse_packet(ConstBytes frame, const ParseOptions& opt, ParsedPacket* out) {
  out->kind = PacketKind::kOther;
  out->payload = {};
  if (DecodeError e = decode_ether(frame, &out->eth); e != DecodeError::kOk) return e;
  ConstBytes l3 = frame.subspan(out->eth.header_bytes);
  if (out->eth.ethertype == kEtherTypeArp) {
    if (DecodeError e = decode_arp(l3, &out->arp); e != DecodeError::kOk) return e;
    out->kind = PacketKind::kArp;
    return DecodeError::kOk;
  }
  if (out->eth.ethertype != kEtherTypeIpv4) return DecodeError::kOk;
  if (DecodeError e = decode_ipv4(l3, opt.verify_ip_checksum, &out->ip); e != DecodeError::kOk) {
    return e;
  }
  // Ethernet pads short frames: the IP total length, not the frame, bounds L4.
  ConstBytes l4 = l3.subspan(out->ip.header_bytes(), out->ip.total_length - out->ip.header_bytes());
  if (out->ip.is_fragment()) {
    out->kind = PacketKind::kFragment;
    return DecodeError::kOk;
  }
  if (out->ip.protocol == kIpProtoIgmp) {
    if (DecodeError e = decode_igmp(l4, &out->igmp); e != DecodeError::kOk) return e;
    out->kind = PacketKind::kIgmp;
    return DecodeError::kOk;
  }
  if (out->ip.protocol != kIpProtoUdp) return DecodeError::kOk;
  if (DecodeError e = decode_udp(l4, out->ip.src, out->ip.dst, opt.verify_udp_checksum, &out->udp);
      e != DecodeError::kOk) {
    return e;
  }
  out->payload = l4.subspan(kUdpHeaderBytes, out->udp.length - kUdpHeaderBytes);
  out->kind = PacketKind::kUdp;
  return DecodeError::kOk;
}

bool complete_partial_checksum(MutableBytes frame) {
  if (frame.size() < kEtherHeaderBytes + kIpv4HeaderBytes || load_be16(frame.data() + 12) != kEtherTypeIpv4) {
    return false;
  }
  std::byte* ip = frame.data() + kEtherHeaderBytes;
  const size_t ihl = (std::to_integer<size_t>(ip[0]) & 0xf) * 4;
  const size_t total = load_be16(ip + 2);
  const auto protocol = std::to_integer<uint8_t>(ip[9]);
  if (ihl < kIpv4HeaderBytes || total < ihl || kEtherHeaderBytes + total > frame.size()) return false;
  if ((load_be16(ip + 6) & 0x3fff) != 0) return false;  // a fragment: no whole segment to sum
  const size_t at = protocol == kIpProtoTcp ? 16 : protocol == kIpProtoUdp ? 6 : 0;
  const size_t l4_len = total - ihl;
  if (at == 0 || l4_len < at + 2) return false;
  std::byte* l4 = ip + ihl;
  if (protocol == kIpProtoUdp && load_be16(l4 + 4) != l4_len) return false;  // lengths disagree: not ours to fix
  const uint32_t src = load_be32(ip + 12);
  const uint32_t dst = load_be32(ip + 16);
  const uint32_t pseudo = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + protocol +
                          static_cast<uint32_t>(l4_len);
  const ConstBytes segment(l4, l4_len);
  if (load_be16(l4 + at) != static_cast<uint16_t>(~fold_checksum(pseudo))) return false;
  if (fold_checksum(ones_complement_sum(segment, pseudo)) == 0) return false;  // right as it is
  store_be16(l4 + at, 0);
  uint16_t c = fold_checksum(ones_complement_sum(segment, pseudo));
  if (protocol == kIpProtoUdp && c == 0) c = 0xffff;
  store_be16(l4 + at, c);
  return true;
}

}  // namespace ringfire::proto::net
