// l2_agent_test.cc — a bypass port's ARP and IGMP without DPDK: which ARP
// frames it answers and how often it asks, the groups it reports and when,
// and every frame it builds read back by the receive path's own parser.
#include "dataplane/l2_agent.h"

#include <array>
#include <cstddef>
#include <vector>

#include "gtest/gtest.h"
#include "proto/net/igmp.h"
#include "proto/net/packet.h"

namespace ringfire::dataplane {
namespace {

using proto::net::ArpOp;
using proto::net::ArpPacket;
using proto::net::MacAddr;
constexpr MacAddr kMine{0x02, 0, 0, 0, 0, 0x0a};
constexpr MacAddr kPeer{0x02, 0, 0, 0, 0, 0x0b};
constexpr uint32_t kMyIp = 0xC6120001;    // 198.18.0.1
constexpr uint32_t kPeerIp = 0xC6120002;  // 198.18.0.2
constexpr uint32_t kGroup = 0xEFFF0001;   // 239.255.0.1
constexpr uint64_t kHz = 1'000'000;       // the test's ticks: microseconds

proto::net::ParsedPacket parse(const std::vector<std::byte>& frame, size_t len) {
  proto::net::ParsedPacket p;
  EXPECT_EQ(proto::net::parse_packet(proto::ConstBytes(frame.data(), len), {}, &p), proto::DecodeError::kOk);
  return p;
}

TEST(L2Agent, AnswersOnlyARequestForItsOwnAddress) {
  const L2Agent agent(kMine, kMyIp, kHz);
  ArpPacket a{ArpOp::kRequest, kPeer, kPeerIp, MacAddr{}, kMyIp};
  EXPECT_TRUE(agent.answers_arp(a));
  a.target_ip = kPeerIp + 1;  // someone else's
  EXPECT_FALSE(agent.answers_arp(a));
  a = ArpPacket{ArpOp::kReply, kPeer, kPeerIp, kMine, kMyIp};  // a reply is learned, never answered
  EXPECT_FALSE(agent.answers_arp(a));
  EXPECT_FALSE(L2Agent(kMine, 0, kHz).answers_arp({ArpOp::kRequest, kPeer, kPeerIp, MacAddr{}, 0}));
}

TEST(L2Agent, ItsArpFramesParseBackAsSent) {
  const L2Agent agent(kMine, kMyIp, kHz);
  std::vector<std::byte> buf(L2Agent::kMaxFrame, std::byte{0xee});
  size_t len = agent.arp_reply(kPeer, kPeerIp, buf);
  ASSERT_EQ(len, 60u);
  proto::net::ParsedPacket p = parse(buf, len);
  ASSERT_EQ(p.kind, proto::net::PacketKind::kArp);
  EXPECT_EQ(p.eth.dst, kPeer);
  EXPECT_EQ(p.eth.src, kMine);
  EXPECT_EQ(p.arp.op, ArpOp::kReply);
  EXPECT_EQ(p.arp.sender_mac, kMine);
  EXPECT_EQ(p.arp.sender_ip, kMyIp);
  EXPECT_EQ(p.arp.target_mac, kPeer);
  EXPECT_EQ(p.arp.target_ip, kPeerIp);
  EXPECT_EQ(buf[59], std::byte{0});  // padded with zeros, not what the buffer held

  len = agent.arp_request(kPeerIp, buf);
  ASSERT_EQ(len, 60u);
  p = parse(buf, len);
  ASSERT_EQ(p.kind, proto::net::PacketKind::kArp);
  EXPECT_EQ(p.eth.dst, proto::net::kBroadcastMac);
  EXPECT_EQ(p.arp.op, ArpOp::kRequest);
  EXPECT_EQ(p.arp.target_mac, MacAddr{});
  EXPECT_EQ(p.arp.target_ip, kPeerIp);

  std::array<std::byte, 59> small{};
  EXPECT_EQ(agent.arp_request(kPeerIp, small), 0u);
}

TEST(L2Agent, AsksForANeighborAtMostOnceEvery10ms) {
  L2Agent agent(kMine, kMyIp, kHz);
  EXPECT_TRUE(agent.may_ask_arp(5));  // the first time, whatever the clock says
  EXPECT_FALSE(agent.may_ask_arp(6));
  EXPECT_FALSE(agent.may_ask_arp(5 + 10'000));
  EXPECT_TRUE(agent.may_ask_arp(5 + 10'001));
  EXPECT_FALSE(agent.may_ask_arp(5 + 15'000));
}

TEST(L2Agent, JoinsEachGroupOnceAndLeavesOnlyWhatItJoined) {
  L2Agent agent(kMine, kMyIp, kHz);
  EXPECT_FALSE(agent.answers_query(proto::net::kIgmpQuery));  // nothing joined: a query is not answered
  EXPECT_FALSE(agent.report_due(1'000'000'000));
  EXPECT_TRUE(agent.join(kGroup));
  EXPECT_FALSE(agent.join(kGroup));
  EXPECT_FALSE(agent.join(0));
  EXPECT_TRUE(agent.join(kGroup + 1));
  EXPECT_EQ(agent.groups(), (std::vector<uint32_t>{kGroup, kGroup + 1}));
  EXPECT_TRUE(agent.answers_query(proto::net::kIgmpQuery));
  EXPECT_FALSE(agent.answers_query(proto::net::kIgmpV3Report));  // another host's report
  EXPECT_TRUE(agent.leave(kGroup));
  EXPECT_FALSE(agent.leave(kGroup));
  EXPECT_FALSE(agent.joined(kGroup));
  EXPECT_TRUE(agent.joined(kGroup + 1));
  EXPECT_TRUE(agent.leave(kGroup + 1));
  EXPECT_FALSE(agent.answers_query(proto::net::kIgmpQuery));
}

TEST(L2Agent, ReportsAtOnceThenAfterASecondThenEveryMinute) {
  L2Agent agent(kMine, kMyIp, kHz);
  ASSERT_TRUE(agent.join(kGroup));
  uint64_t now = 7'000'000;
  EXPECT_TRUE(agent.report_due(now));  // a join is announced at once
  agent.reported(now);
  EXPECT_FALSE(agent.report_due(now + kHz - 1));
  EXPECT_TRUE(agent.report_due(now + kHz));  // robustness: once more after 1 s
  now += kHz;
  agent.reported(now);
  EXPECT_FALSE(agent.report_due(now + 60 * kHz - 1));
  EXPECT_TRUE(agent.report_due(now + 60 * kHz));  // then the refresh a querier-less switch needs
  now += 60 * kHz;
  agent.reported(now);
  EXPECT_TRUE(agent.report_due(now + 60 * kHz));
  EXPECT_FALSE(agent.report_due(now + kHz));

  ASSERT_TRUE(agent.join(kGroup + 1));  // a new group restarts the schedule
  EXPECT_TRUE(agent.report_due(now));
  agent.reported(now);
  EXPECT_TRUE(agent.report_due(now + kHz));
  agent.reported(now + kHz);
  EXPECT_FALSE(agent.report_due(now + 2 * kHz));
  agent.link_came_up();  // the switch forgot us: announce again at once
  EXPECT_TRUE(agent.report_due(now + 2 * kHz));
  agent.reported(now + 2 * kHz);
  EXPECT_TRUE(agent.report_due(now + 3 * kHz));  // with the robustness resend
  agent.reported(now + 3 * kHz);
  EXPECT_FALSE(agent.report_due(now + 4 * kHz));
  agent.report_owed();  // a query's answer found no room: due at once ...
  EXPECT_TRUE(agent.report_due(now + 4 * kHz));
  agent.reported(now + 4 * kHz);
  EXPECT_FALSE(agent.report_due(now + 5 * kHz));  // ... and the minute's schedule kept (no second robustness resend)
  EXPECT_TRUE(agent.report_due(now + 64 * kHz));
  ASSERT_TRUE(agent.leave(kGroup));
  ASSERT_TRUE(agent.leave(kGroup + 1));
  EXPECT_FALSE(agent.report_due(now + 100 * kHz));  // nothing joined, nothing reported
  agent.link_came_up();
  EXPECT_FALSE(agent.report_due(now + 100 * kHz));
}

// Reads a report back: the frame parses, and its records are the groups
// with the record type asked for.
void expect_report(const std::vector<std::byte>& buf, size_t len, const std::vector<uint32_t>& groups,
                   proto::net::IgmpV3RecordType type) {
  const proto::net::ParsedPacket p = parse(buf, len);
  ASSERT_EQ(p.kind, proto::net::PacketKind::kIgmp);
  EXPECT_EQ(p.eth.dst, proto::net::multicast_mac(proto::net::kIgmpV3ReportGroup));
  EXPECT_EQ(p.eth.src, kMine);
  EXPECT_EQ(p.ip.dst, proto::net::kIgmpV3ReportGroup);
  EXPECT_EQ(p.ip.src, kMyIp);
  EXPECT_EQ(p.ip.ttl, 1);
  EXPECT_EQ(p.ip.ihl_words, 6);  // with Router Alert
  EXPECT_EQ(p.igmp.type, proto::net::kIgmpV3Report);
  ASSERT_EQ(p.igmp.v3_records, groups.size());
  EXPECT_EQ(p.igmp.group, groups[0]);
  const size_t records = 14 + 24 + 8;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::byte* r = buf.data() + records + 8 * i;
    EXPECT_EQ(static_cast<uint8_t>(r[0]), static_cast<uint8_t>(type)) << "record " << i;
    const uint32_t g = (uint32_t{static_cast<uint8_t>(r[4])} << 24) | (uint32_t{static_cast<uint8_t>(r[5])} << 16) |
                       (uint32_t{static_cast<uint8_t>(r[6])} << 8) | static_cast<uint8_t>(r[7]);
    EXPECT_EQ(g, groups[i]) << "record " << i;
  }
}

TEST(L2Agent, ItsReportsParseBackWithEveryGroupAndTheRightRecordType) {
  const L2Agent agent(kMine, kMyIp, kHz);
  std::vector<std::byte> buf(L2Agent::kMaxFrame, std::byte{0xee});
  const std::vector<uint32_t> one{kGroup};
  size_t len = agent.igmp_report(one, false, buf);
  ASSERT_EQ(len, 60u);  // 54 bytes, padded to the minimum
  expect_report(buf, len, one, proto::net::IgmpV3RecordType::kChangeToExclude);
  EXPECT_EQ(buf[59], std::byte{0});

  std::vector<uint32_t> many;
  for (uint32_t i = 0; i < L2Agent::kMaxGroups; ++i) many.push_back(kGroup + i);
  len = agent.igmp_report(many, true, buf);
  ASSERT_EQ(len, L2Agent::kMaxFrame);
  expect_report(buf, len, many, proto::net::IgmpV3RecordType::kChangeToInclude);

  many.push_back(kGroup + 999);  // one too many for a frame
  EXPECT_EQ(agent.igmp_report(many, false, buf), 0u);
  EXPECT_EQ(agent.igmp_report({}, false, buf), 0u);
  std::vector<std::byte> small(59);
  EXPECT_EQ(agent.igmp_report(one, false, small), 0u);
}

TEST(L2Agent, MoreGroupsThanAFrameHoldsGoInChunks) {
  const L2Agent agent(kMine, kMyIp, kHz);
  std::vector<uint32_t> groups;
  for (uint32_t i = 0; i < 2 * L2Agent::kMaxGroups + 2; ++i) groups.push_back(kGroup + i);
  std::vector<uint32_t> seen;
  std::vector<std::byte> buf(L2Agent::kMaxFrame);
  size_t i = 0;
  for (; !L2Agent::report_chunk(groups, i).empty(); ++i) {
    const auto chunk = L2Agent::report_chunk(groups, i);
    EXPECT_LE(chunk.size(), L2Agent::kMaxGroups);
    const size_t len = agent.igmp_report(chunk, false, buf);
    ASSERT_GT(len, 0u);
    expect_report(buf, len, std::vector<uint32_t>(chunk.begin(), chunk.end()),
                  proto::net::IgmpV3RecordType::kChangeToExclude);
    seen.insert(seen.end(), chunk.begin(), chunk.end());
  }
  EXPECT_EQ(i, 3u);
  EXPECT_EQ(seen, groups);
}

}  // namespace
}  // namespace ringfire::dataplane
