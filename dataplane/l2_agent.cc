// l2_agent.cc — the port's ARP and IGMP decisions and frames.
#include "dataplane/l2_agent.h"

#include <algorithm>
#include <cstring>

#include "proto/net/igmp.h"
#include "proto/net/ipv4.h"

namespace ringfire::dataplane {

using proto::net::MacAddr;

bool L2Agent::may_ask_arp(uint64_t now) {
  if (asked_ && now - last_ask_ <= hz_ / 100) return false;
  asked_ = true;
  last_ask_ = now;
  return true;
}

bool L2Agent::joined(uint32_t group) const {
  return std::find(groups_.begin(), groups_.end(), group) != groups_.end();
}

bool L2Agent::join(uint32_t group) {
  if (group == 0 || joined(group)) return false;
  groups_.push_back(group);
  reports_sent_ = 0;
  next_report_ = 0;  // due now
  return true;
}

bool L2Agent::leave(uint32_t group) {
  const auto it = std::find(groups_.begin(), groups_.end(), group);
  if (it == groups_.end()) return false;
  groups_.erase(it);
  return true;
}

void L2Agent::reported(uint64_t now) {
  ++reports_sent_;
  next_report_ = now + hz_ * (reports_sent_ < 2 ? 1 : 60);
}

bool L2Agent::answers_query(uint8_t igmp_type) const {
  return igmp_type == proto::net::kIgmpQuery && !groups_.empty();
}

size_t L2Agent::arp(proto::net::ArpOp op, const MacAddr& dst_mac, uint32_t target_ip,
                    proto::MutableBytes out) const {
  if (out.size() < kMinFrame) return 0;
  std::memset(out.data(), 0, kMinFrame);
  proto::net::encode_ether({dst_mac, mac_, proto::net::kEtherTypeArp}, out);
  proto::net::ArpPacket a;
  a.op = op;
  a.sender_mac = mac_;
  a.sender_ip = ip_;
  a.target_mac = op == proto::net::ArpOp::kReply ? dst_mac : MacAddr{};
  a.target_ip = target_ip;
  proto::net::encode_arp(a, out.subspan(proto::net::kEtherHeaderBytes));
  return kMinFrame;
}

size_t L2Agent::arp_request(uint32_t target_ip, proto::MutableBytes out) const {
  return arp(proto::net::ArpOp::kRequest, proto::net::kBroadcastMac, target_ip, out);
}

size_t L2Agent::arp_reply(const MacAddr& to_mac, uint32_t to_ip, proto::MutableBytes out) const {
  return arp(proto::net::ArpOp::kReply, to_mac, to_ip, out);
}

size_t L2Agent::igmp_report(std::span<const uint32_t> groups, bool leave, proto::MutableBytes out) const {
  if (groups.empty() || groups.size() > kMaxGroups) return 0;
  constexpr size_t kIpWithAlert = proto::net::kIpv4HeaderBytes + 4;
  const size_t igmp = 8 + 8 * groups.size();
  const size_t len = proto::net::kEtherHeaderBytes + kIpWithAlert + igmp;
  const size_t frame = std::max(kMinFrame, len);
  if (out.size() < frame) return 0;
  std::memset(out.data(), 0, frame);
  const proto::MutableBytes f = out.first(len);
  const uint32_t dst = proto::net::kIgmpV3ReportGroup;
  proto::net::encode_ether({proto::net::multicast_mac(dst), mac_, proto::net::kEtherTypeIpv4}, f);
  proto::net::Ipv4Header ip;
  ip.protocol = proto::net::kIpProtoIgmp;
  ip.ttl = 1;
  ip.router_alert = true;
  ip.tos = 0xc0;  // internetwork control, as RFC 3376 sends reports
  ip.total_length = static_cast<uint16_t>(kIpWithAlert + igmp);
  ip.src = ip_;
  ip.dst = dst;
  proto::net::encode_ipv4(ip, f.subspan(proto::net::kEtherHeaderBytes));
  proto::net::encode_igmpv3_report(
      leave ? proto::net::IgmpV3RecordType::kChangeToInclude : proto::net::IgmpV3RecordType::kChangeToExclude,
      groups, f.subspan(proto::net::kEtherHeaderBytes + kIpWithAlert));
  return frame;
}

}  // namespace ringfire::dataplane
