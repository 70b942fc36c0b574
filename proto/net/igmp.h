// igmp.h — IGMP membership (RFC 2236 v2, RFC 3376 v3): the reports a DPDK
// port sends so a snooping switch delivers a group to it, leaves, and the
// queries it must answer.
#pragma once

#include <cstdint>
#include <span>

#include "proto/bytes.h"

namespace ringfire::proto::net {

inline constexpr uint8_t kIgmpQuery = 0x11;
inline constexpr uint8_t kIgmpV1Report = 0x12;
inline constexpr uint8_t kIgmpV2Report = 0x16;
inline constexpr uint8_t kIgmpV2Leave = 0x17;
inline constexpr uint8_t kIgmpV3Report = 0x22;
inline constexpr uint32_t kAllSystemsGroup = 0xE0000001;  // 224.0.0.1
inline constexpr uint32_t kAllRoutersGroup = 0xE0000002;  // 224.0.0.2 (v2 leaves)
inline constexpr uint32_t kIgmpV3ReportGroup = 0xE0000016;  // 224.0.0.22
inline constexpr size_t kIgmpV2Bytes = 8;

// IgmpV3RecordType: with no sources, kChangeToExclude joins, kChangeToInclude
// leaves, kModeIsExclude answers a query for a joined group.
enum class IgmpV3RecordType : uint8_t {
  kModeIsInclude = 1,
  kModeIsExclude = 2,
  kChangeToInclude = 3,
  kChangeToExclude = 4,
};

struct IgmpMessage {
  uint8_t type = 0;
  uint8_t max_resp = 0;  // queries: max response time (1/10 s units, v3 coded)
  uint32_t group = 0;    // host order; 0 in a general query
  uint8_t version = 2;   // queries: 3 if the v3 query format was used
  uint16_t v3_records = 0;  // v3 reports: group records (first group above)
};

// encode_igmpv2 writes an 8-byte v2 report or leave with its checksum.
size_t encode_igmpv2(uint8_t type, uint32_t group, MutableBytes out);
// encode_igmpv3_report writes a v3 report with one source-less record per
// group; returns 0 if out is too small.
size_t encode_igmpv3_report(IgmpV3RecordType type, std::span<const uint32_t> groups,
                            MutableBytes out);
// decode_igmp validates the checksum and the shape of a query or report.
DecodeError decode_igmp(ConstBytes in, IgmpMessage* out);

}  // namespace ringfire::proto::net
