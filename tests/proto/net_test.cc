// net_test.cc — the data plane's own L2/L3: golden Ethernet/ARP/IPv4/IGMP/
// UDP bytes, checksums against known values, multicast MAC mapping, and a
// parser that classifies frames and rejects malformed ones.
#include <vector>

#include "gtest/gtest.h"
#include "proto/net/packet.h"
#include "proto/net/udp_template.h"
#include "tests/proto/golden.h"

namespace ringfire::proto::net {
namespace {

using proto::testing::hex;
using proto::testing::to_hex;

constexpr uint32_t ip(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}

TEST(Ipv4, ChecksumOfTheTextbookHeader) {
  const auto h = hex("4500 0073 0000 4000 4011 0000 c0a8 0001 c0a8 00c7");
  EXPECT_EQ(ipv4_checksum(h), 0xb861);
}

TEST(Ipv4, EncodeThenDecodeVerifiesTheChecksum) {
  Ipv4Header h;
  h.total_length = 28;
  h.src = ip(198, 18, 0, 1);
  h.dst = ip(239, 255, 0, 1);
  h.ttl = 1;
  std::vector<std::byte> buf(28);
  ASSERT_EQ(encode_ipv4(h, buf), 20u);
  Ipv4Header back;
  ASSERT_EQ(decode_ipv4(buf, true, &back), DecodeError::kOk);
  EXPECT_EQ(back.src, h.src);
  EXPECT_EQ(back.dst, h.dst);
  buf[8] = std::byte{2};  // ttl changed without the checksum
  EXPECT_EQ(decode_ipv4(buf, true, &back), DecodeError::kBadChecksum);
  EXPECT_EQ(decode_ipv4(buf, false, &back), DecodeError::kOk);
}

TEST(Ipv4, RejectsBadVersionsAndLengths) {
  Ipv4Header h;
  auto b = hex("6500 0014 0000 4000 4011 0000 c6120001 c6120002");
  EXPECT_EQ(decode_ipv4(b, false, &h), DecodeError::kBadVersion);
  b = hex("4400 0014 0000 4000 4011 0000 c6120001 c6120002");
  EXPECT_EQ(decode_ipv4(b, false, &h), DecodeError::kBadLength);
  b = hex("4500 0100 0000 4000 4011 0000 c6120001 c6120002");
  EXPECT_EQ(decode_ipv4(b, false, &h), DecodeError::kTruncated);
  b = hex("4500 0010 0000 4000 4011 0000 c6120001 c6120002");
  EXPECT_EQ(decode_ipv4(b, false, &h), DecodeError::kBadLength);
}

TEST(Ethernet, MulticastGroupsMapToTheirMac) {
  EXPECT_EQ(multicast_mac(ip(239, 255, 0, 1)), (MacAddr{0x01, 0x00, 0x5e, 0x7f, 0x00, 0x01}));
  EXPECT_EQ(multicast_mac(ip(224, 128, 1, 2)), (MacAddr{0x01, 0x00, 0x5e, 0x00, 0x01, 0x02}));
  EXPECT_TRUE(is_multicast_mac(multicast_mac(ip(239, 255, 3, 4))));
}

TEST(Ethernet, DecodesOneVlanTag) {
  const auto b = hex("ffffffffffff 020000000001 8100 0064 0806");
  EtherHeader h;
  ASSERT_EQ(decode_ether(b, &h), DecodeError::kOk);
  EXPECT_EQ(h.vlan_tci, 100);
  EXPECT_EQ(h.ethertype, kEtherTypeArp);
  EXPECT_EQ(h.header_bytes, 18u);
  EXPECT_EQ(decode_ether(std::span(b).first(16), &h), DecodeError::kTruncated);
}

TEST(ArpGolden, Request) {
  ArpPacket p;
  p.op = ArpOp::kRequest;
  p.sender_mac = {0x02, 0, 0, 0, 0, 0x01};
  p.sender_ip = ip(198, 18, 0, 1);
  p.target_ip = ip(198, 18, 0, 2);
  std::vector<std::byte> buf(28);
  ASSERT_EQ(encode_arp(p, buf), 28u);
  EXPECT_EQ(to_hex(buf), to_hex(hex("0001 0800 06 04 0001 020000000001 c6120001 "
                                    "000000000000 c6120002")));
  ArpPacket back;
  ASSERT_EQ(decode_arp(buf, &back), DecodeError::kOk);
  EXPECT_EQ(back.target_ip, p.target_ip);
  buf[7] = std::byte{3};
  EXPECT_EQ(decode_arp(buf, &back), DecodeError::kBadKind);
}

TEST(IgmpGolden, V2ReportAndV3Join) {
  std::vector<std::byte> buf(64);
  ASSERT_EQ(encode_igmpv2(kIgmpV2Report, ip(239, 255, 0, 1), buf), 8u);
  EXPECT_EQ(to_hex(std::span(buf).first(8)), to_hex(hex("16 00 f9fe efff0001")));

  const uint32_t groups[] = {ip(239, 255, 0, 1)};
  const size_t n = encode_igmpv3_report(IgmpV3RecordType::kChangeToExclude, groups, buf);
  ASSERT_EQ(n, 16u);
  EXPECT_EQ(to_hex(std::span(buf).first(n)), to_hex(hex("22 00 e9fd 0000 0001 04 00 0000 efff0001")));
  IgmpMessage m;
  ASSERT_EQ(decode_igmp(std::span(buf).first(n), &m), DecodeError::kOk);
  EXPECT_EQ(m.type, kIgmpV3Report);
  EXPECT_EQ(m.v3_records, 1);
  EXPECT_EQ(m.group, ip(239, 255, 0, 1));
}

TEST(Igmp, DecodesQueriesOfBothVersions) {
  std::vector<std::byte> v2(8);
  ASSERT_EQ(encode_igmpv2(kIgmpQuery, 0, v2), 8u);
  IgmpMessage m;
  ASSERT_EQ(decode_igmp(v2, &m), DecodeError::kOk);
  EXPECT_EQ(m.type, kIgmpQuery);
  EXPECT_EQ(m.version, 2);
  // v3 general query: 12 bytes, no sources; checksum filled in below.
  auto v3 = hex("11 64 0000 00000000 02 7d 0000");
  const uint16_t c = fold_checksum(ones_complement_sum(v3));
  store_be16(v3.data() + 2, c);
  ASSERT_EQ(decode_igmp(v3, &m), DecodeError::kOk);
  EXPECT_EQ(m.version, 3);
  v3[1] = std::byte{0x65};
  EXPECT_EQ(decode_igmp(v3, &m), DecodeError::kBadChecksum);
}

UdpFlow lab_flow() {
  UdpFlow f;
  f.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  f.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  f.src_ip = ip(198, 18, 0, 1);
  f.dst_ip = ip(198, 18, 0, 2);
  f.src_port = 7400;
  f.dst_port = 7401;
  return f;
}

TEST(Udp, ChecksumMatchesAnIndependentComputation) {
  // 8-byte payload "ringfire" from 198.18.0.1:7400 to 198.18.0.2:7401.
  auto d = hex("1ce8 1ce9 0010 0000 72696e6766697265");
  EXPECT_EQ(udp_checksum(ip(198, 18, 0, 1), ip(198, 18, 0, 2), d), 0x8035);
}

TEST(Packet, BuildThenParseAUdpFrame) {
  std::vector<std::byte> buf(kUdpFrameOverhead + 8);
  const auto payload = hex("72696e6766697265");
  std::copy(payload.begin(), payload.end(), buf.begin() + kUdpFrameOverhead);
  ASSERT_EQ(write_udp_headers(lab_flow(), 0x1234, 8, true, buf), buf.size());
  EXPECT_EQ(to_hex(std::span(buf).first(kUdpFrameOverhead)),
            to_hex(hex("020000000002 020000000001 0800 |"
                       "4500 0024 1234 4000 4011 9c6d c6120001 c6120002 |"
                       "1ce8 1ce9 0010 8035")));
  ParsedPacket p;
  ASSERT_EQ(parse_packet(buf, ParseOptions{}, &p), DecodeError::kOk);
  EXPECT_EQ(p.kind, PacketKind::kUdp);
  EXPECT_EQ(p.udp.dst_port, 7401);
  EXPECT_EQ(to_hex(p.payload), to_hex(payload));

  buf.back() = std::byte{0};  // payload corrupted in flight
  EXPECT_EQ(parse_packet(buf, ParseOptions{}, &p), DecodeError::kBadChecksum);
}

// A veth hands af_packet and af_xdp a segment whose checksum the kernel
// left to offload: the field holds the pseudo-header's sum only.
TEST(Packet, CompletesPartialChecksumsOnly) {
  auto udp = hex("020000000002 020000000001 0800 | 4500 0024 1234 4000 4011 9c6d c6120001 c6120002 |"
                 "1ce8 1ce9 0010 8c49 | 72696e6766697265");
  EXPECT_TRUE(complete_partial_checksum(udp));
  EXPECT_EQ(to_hex(std::span(udp).subspan(40, 2)), "80 35");
  EXPECT_FALSE(complete_partial_checksum(udp));  // right now: left alone
  ParsedPacket p;
  EXPECT_EQ(parse_packet(udp, ParseOptions{}, &p), DecodeError::kOk);

  auto tcp = hex("020000000002 020000000001 0800 | 4500 002c 0000 4000 4006 aea4 c6120001 c6120002 |"
                 "c000 1ce8 00000001 00000000 5002 faf0 8c46 0000 | 72696e67");
  EXPECT_TRUE(complete_partial_checksum(tcp));
  EXPECT_EQ(to_hex(std::span(tcp).subspan(50, 2)), "6b 0b");

  auto corrupt = hex("020000000002 020000000001 0800 | 4500 0024 1234 4000 4011 9c6d c6120001 c6120002 |"
                     "1ce8 1ce9 0010 8036 | 72696e6766697265");  // wrong, and not partial
  EXPECT_FALSE(complete_partial_checksum(corrupt));
  EXPECT_EQ(to_hex(std::span(corrupt).subspan(40, 2)), "80 36");
  auto truncated = std::vector<std::byte>(udp.begin(), udp.end() - 4);  // IP length says more
  store_be16(truncated.data() + 40, 0x8c49);
  EXPECT_FALSE(complete_partial_checksum(truncated));
}

TEST(Packet, EthernetPaddingIsNotPayload) {
  std::vector<std::byte> buf(kUdpFrameOverhead + 2);
  ASSERT_EQ(write_udp_headers(lab_flow(), 1, 2, false, buf), buf.size());
  buf.resize(60);  // padded to the Ethernet minimum
  ParsedPacket p;
  ASSERT_EQ(parse_packet(buf, ParseOptions{}, &p), DecodeError::kOk);
  EXPECT_EQ(p.payload.size(), 2u);
}

TEST(Packet, ClassifiesArpIgmpFragmentsAndOthers) {
  ParsedPacket p;
  auto arp = hex("ffffffffffff 020000000001 0806 0001 0800 06 04 0001 020000000001 c6120001 "
                 "000000000000 c6120002");
  ASSERT_EQ(parse_packet(arp, ParseOptions{}, &p), DecodeError::kOk);
  EXPECT_EQ(p.kind, PacketKind::kArp);

  std::vector<std::byte> igmp(14 + 24 + 8);
  encode_ether(EtherHeader{multicast_mac(ip(239, 255, 0, 1)), {2, 0, 0, 0, 0, 1}, kEtherTypeIpv4},
               igmp);
  Ipv4Header h;
  h.protocol = kIpProtoIgmp;
  h.ttl = 1;
  h.router_alert = true;
  h.total_length = 24 + 8;
  h.src = ip(198, 18, 0, 1);
  h.dst = ip(239, 255, 0, 1);
  ASSERT_EQ(encode_ipv4(h, std::span(igmp).subspan(14)), 24u);
  encode_igmpv2(kIgmpV2Report, ip(239, 255, 0, 1), std::span(igmp).subspan(38));
  ASSERT_EQ(parse_packet(igmp, ParseOptions{}, &p), DecodeError::kOk);
  EXPECT_EQ(p.kind, PacketKind::kIgmp);
  EXPECT_EQ(p.igmp.group, ip(239, 255, 0, 1));

  std::vector<std::byte> frag(kUdpFrameOverhead + 4);
  write_udp_headers(lab_flow(), 1, 4, false, frag);
  store_be16(frag.data() + 14 + 6, kIpFlagMoreFragments);
  store_be16(frag.data() + 14 + 10, 0);
  store_be16(frag.data() + 14 + 10, ipv4_checksum(std::span(frag).subspan(14, 20)));
  ASSERT_EQ(parse_packet(frag, ParseOptions{}, &p), DecodeError::kOk);
  EXPECT_EQ(p.kind, PacketKind::kFragment);

  auto ipv6 = hex("333300000001 020000000001 86dd 6000");
  ASSERT_EQ(parse_packet(ipv6, ParseOptions{}, &p), DecodeError::kOk);
  EXPECT_EQ(p.kind, PacketKind::kOther);
}

TEST(Packet, EveryTruncationOfAUdpFrameIsAnError) {
  std::vector<std::byte> buf(kUdpFrameOverhead + 8);
  ASSERT_EQ(write_udp_headers(lab_flow(), 7, 8, true, buf), buf.size());
  for (size_t n = 0; n < buf.size(); ++n) {
    ParsedPacket p;
    EXPECT_NE(parse_packet(std::span(buf).first(n), ParseOptions{}, &p), DecodeError::kOk) << n;
  }
}

// A flow's header template stamps exactly what write_udp_headers builds,
// for every length, id and TTL tried, with and without the UDP checksum;
// the frames parse with both checksums verified.
TEST(UdpTemplate, StampsWhatWriteUdpHeadersBuilds) {
  UdpFlow f = lab_flow();
  int compared = 0;
  for (uint8_t ttl : {uint8_t{1}, uint8_t{64}, uint8_t{255}}) {
    f.ttl = ttl;
    f.dst_ip = ttl == 1 ? 0xEFFF0001 : 0xC6120002;  // a group, a unicast peer
    const UdpTemplate t(f);
    for (size_t len : {size_t{0}, size_t{1}, size_t{17}, size_t{1472}}) {
      for (uint16_t id : {uint16_t{0}, uint16_t{1}, uint16_t{0xfffe}, uint16_t{0xffff}}) {
        for (bool sum : {false, true}) {
          std::vector<std::byte> want(kUdpFrameOverhead + len), got(want.size(), std::byte{0xAA});
          for (size_t i = 0; i < len; ++i) {
            want[kUdpFrameOverhead + i] = got[kUdpFrameOverhead + i] = std::byte(i * 7 + id);
          }
          ASSERT_EQ(write_udp_headers(f, id, len, sum, want), want.size());
          t.stamp(got.data(), id, len, sum);
          ASSERT_EQ(got, want) << "ttl " << int{ttl} << " len " << len << " id " << id << " sum " << sum;
          ParseOptions opt;
          opt.verify_ip_checksum = true;
          opt.verify_udp_checksum = true;
          ParsedPacket p;
          ASSERT_EQ(parse_packet(got, opt, &p), DecodeError::kOk);
          ASSERT_EQ(p.kind, PacketKind::kUdp);
          EXPECT_EQ(p.payload.size(), len);
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 3 * 4 * 4 * 2);
}

// The word-at-a-time sum equals the textbook one (16-bit big-endian words,
// an odd byte padded) for every length to 200, at every alignment, from
// any starting sum.
TEST(Checksum, OnesComplementSumMatchesTheTextbookLoop) {
  std::vector<std::byte> data(256);
  uint32_t x = 12345;
  for (auto& b : data) {
    x = x * 1103515245 + 12345;
    b = std::byte(x >> 16);
  }
  auto textbook = [](ConstBytes d, uint32_t sum) {
    size_t i = 0;
    for (; i + 1 < d.size(); i += 2) sum += uint32_t{std::to_integer<uint8_t>(d[i])} << 8 | std::to_integer<uint8_t>(d[i + 1]);
    if (i < d.size()) sum += uint32_t{std::to_integer<uint8_t>(d[i])} << 8;
    return sum;
  };
  int checked = 0;
  for (size_t off = 0; off < 8; ++off) {
    for (size_t len = 0; len <= 200; ++len) {
      for (uint32_t start : {0u, 0xffffu, 0x12345u}) {
        const ConstBytes d(data.data() + off, len);
        ASSERT_EQ(fold_checksum(ones_complement_sum(d, start)), fold_checksum(textbook(d, start)))
            << "off " << off << " len " << len << " start " << start;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 8 * 201 * 3);
}



}  // namespace
}  // namespace ringfire::proto::net
