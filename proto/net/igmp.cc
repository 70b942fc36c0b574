// igmp.cc — IGMP encode/decode.
#include "proto/net/igmp.h"

#include "proto/net/ipv4.h"

namespace ringfire::proto::net {

size_t encode_igmpv2(uint8_t type, uint32_t group, MutableBytes out) {
  if (out.size() < kIgmpV2Bytes) return 0;
  std::byte* b = out.data();
  b[0] = std::byte(type);
  b[1] = std::byte{0};
  store_be16(b + 2, 0);
  store_be32(b + 4, group);
  store_be16(b + 2, fold_checksum(ones_complement_sum(ConstBytes(b, kIgmpV2Bytes))));
  return kIgmpV2Bytes;
}

size_t encode_igmpv3_report(IgmpV3RecordType type, std::span<const uint32_t> groups,
                            MutableBytes out) {
  const size_t len = 8 + groups.size() * 8;
  if (groups.size() > UINT16_MAX || out.size() < len) return 0;
  ByteWriter w(out);
  w.u8(kIgmpV3Report);
  w.u8(0);
  w.be16(0);
  w.be16(0);
  w.be16(static_cast<uint16_t>(groups.size()));
  for (uint32_t g : groups) {
    w.u8(static_cast<uint8_t>(type));
    w.u8(0);   // aux data length
    w.be16(0);  // sources
    w.be32(g);
  }
  store_be16(out.data() + 2, fold_checksum(ones_complement_sum(ConstBytes(out.data(), len))));
  return len;
}

DecodeError decode_igmp(ConstBytes in, IgmpMessage* out) {
  if (in.size() < kIgmpV2Bytes) return DecodeError::kTruncated;
  if (fold_checksum(ones_complement_sum(in)) != 0) return DecodeError::kBadChecksum;
  ByteReader r(in);
  out->type = r.u8();
  out->max_resp = r.u8();
  r.skip(2);
  out->version = 2;
  out->v3_records = 0;
  switch (out->type) {
    case kIgmpQuery:
      out->group = r.be32();
      if (in.size() >= 12) {
        // v3 query: flags, QQIC, source count, sources.
        r.skip(2);
        const uint16_t sources = r.be16();
        r.skip(size_t{sources} * 4);
        if (!r.ok()) return DecodeError::kTruncated;
        out->version = 3;
      }
      return DecodeError::kOk;
    case kIgmpV1Report:
    case kIgmpV2Report:
    case kIgmpV2Leave:
      out->group = r.be32();
      return DecodeError::kOk;
    case kIgmpV3Report: {
      r.skip(2);
      out->v3_records = r.be16();
      out->group = 0;
      for (uint16_t i = 0; i < out->v3_records; ++i) {
        r.skip(1);
        const uint8_t aux_words = r.u8();
        const uint16_t sources = r.be16();
        const uint32_t group = r.be32();
        if (i == 0) out->group = group;
        r.skip(size_t{sources} * 4 + size_t{aux_words} * 4);
        if (!r.ok()) return DecodeError::kTruncated;
      }
      return r.ok() ? DecodeError::kOk : DecodeError::kTruncated;
    }
    default:
      return DecodeError::kBadKind;
  }
}

}  // namespace ringfire::proto::net
