// ethernet.cc — Ethernet II encode/decode.
#include "proto/net/ethernet.h"

#include <cstring>

namespace ringfire::proto::net {

size_t encode_ether(const EtherHeader& h, MutableBytes out) {
  if (out.size() < kEtherHeaderBytes) return 0;
  std::memcpy(out.data(), h.dst.data(), 6);
  std::memcpy(out.data() + 6, h.src.data(), 6);
  store_be16(out.data() + 12, h.ethertype);
  return kEtherHeaderBytes;
}

DecodeError decode_ether(ConstBytes in, EtherHeader* out) {
  if (in.size() < kEtherHeaderBytes) return DecodeError::kTruncated;
  std::memcpy(out->dst.data(), in.data(), 6);
  std::memcpy(out->src.data(), in.data() + 6, 6);
  out->ethertype = load_be16(in.data() + 12);
  out->vlan_tci = 0;
  out->header_bytes = kEtherHeaderBytes;
  if (out->ethertype == kEtherTypeVlan) {
    if (in.size() < kEtherHeaderBytes + kVlanTagBytes) return DecodeError::kTruncated;
    out->vlan_tci = load_be16(in.data() + 14);
    out->ethertype = load_be16(in.data() + 16);
    out->header_bytes = kEtherHeaderBytes + kVlanTagBytes;
  }
  return DecodeError::kOk;
}

}  // namespace ringfire::proto::net
