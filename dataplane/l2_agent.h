// l2_agent.h — the L2/L3 duties a kernel-bypass port does for itself, with
// no DPDK in them: which ARP frames it answers, when it may ask for a
// neighbor, which groups it has joined and when it reports them (IGMPv3),
// and the frames for each. The port (dpdk_port) wraps the frames in mbufs
// and sends them; this part is tested on its own (tests/dataplane/
// l2_agent_test.cc). Time is passed in, in the caller's ticks
// (`ticks_per_second` of them a second: the TSC's on a port). Worker thread only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "proto/bytes.h"
#include "proto/net/arp.h"
#include "proto/net/ethernet.h"

namespace ringfire::dataplane {

class L2Agent {
 public:
  // kMaxFrame: room enough for any frame below (a report of kMaxGroups groups).
  static constexpr size_t kMaxGroups = 64;
  static constexpr size_t kMaxFrame = 14 + 24 + 8 + 8 * kMaxGroups;
  static constexpr size_t kMinFrame = 60;  // Ethernet's minimum, without its FCS

  L2Agent() = default;
  L2Agent(const proto::net::MacAddr& mac, uint32_t ip, uint64_t ticks_per_second)
      : mac_(mac), ip_(ip), hz_(ticks_per_second) {}

  // answers_arp: whether `a` asks for this port's address (reply with
  // arp_reply to its sender).
  bool answers_arp(const proto::net::ArpPacket& a) const {
    return a.op == proto::net::ArpOp::kRequest && a.target_ip == ip_ && ip_ != 0;
  }
  // may_ask_arp: whether a request for an unknown neighbor may go now: at
  // most one every 10 ms, whatever the datagrams waiting on it (each of
  // them is dropped meanwhile; the protocol's retries carry on).
  bool may_ask_arp(uint64_t now);

  // join: true when `group` is new (announce it: a report is due at once,
  // then after 1 s, then every 60 s); leave: true when it was joined
  // (announce the leave with igmp_report(leave=true)).
  bool join(uint32_t group);
  bool leave(uint32_t group);
  const std::vector<uint32_t>& groups() const { return groups_; }
  bool joined(uint32_t group) const;
  // report_due: an unsolicited membership report should go now (the
  // robustness resend and the refresh a snooping switch with no querier
  // needs to keep forwarding: its membership interval is 260 s).
  bool report_due(uint64_t now) const { return !groups_.empty() && now >= next_report_; }
  // link_came_up: the port's link went down and came back: the switch
  // forgot the port's groups, so they are announced as if just joined.
  void link_came_up() {
    reports_sent_ = 0;
    next_report_ = 0;
  }
  // reported: one went at `now`; schedules the next.
  void reported(uint64_t now);
  // report_owed: one should have gone and did not (no mbuf, a full TX
  // ring: a query's answer, say): due at once, the schedule's count kept.
  void report_owed() { next_report_ = 0; }
  // answers_query: a query (of any version) is answered with a report of
  // every joined group; nothing is answered with none joined.
  bool answers_query(uint8_t igmp_type) const;

  // The frames: each written from out[0], zero-padded to the 60-byte
  // minimum; returns the frame's length, or 0 when out is too small (or,
  // for a report, there is no group).
  size_t arp_request(uint32_t target_ip, proto::MutableBytes out) const;
  size_t arp_reply(const proto::net::MacAddr& to_mac, uint32_t to_ip, proto::MutableBytes out) const;
  // igmp_report: joined groups (leave=false: "exclude no source") or left
  // ones (leave=true: "include no source"), to 224.0.0.22 with TTL 1 and
  // Router Alert, as RFC 3376 asks. One frame names at most kMaxGroups:
  // send more in frames of that many (report_chunks).
  size_t igmp_report(std::span<const uint32_t> groups, bool leave, proto::MutableBytes out) const;
  // report_chunk: the i-th run of at most kMaxGroups of `groups` (empty past the end).
  static std::span<const uint32_t> report_chunk(std::span<const uint32_t> groups, size_t i) {
    const size_t first = i * kMaxGroups;
    if (first >= groups.size()) return {};
    return groups.subspan(first, std::min(kMaxGroups, groups.size() - first));
  }

 private:
  size_t arp(proto::net::ArpOp op, const proto::net::MacAddr& dst_mac, uint32_t target_ip,
             proto::MutableBytes out) const;

  proto::net::MacAddr mac_{};
  uint32_t ip_ = 0;
  uint64_t hz_ = 1;
  std::vector<uint32_t> groups_;  // joined, each once
  uint32_t reports_sent_ = 0;     // since the last join
  uint64_t next_report_ = 0;
  bool asked_ = false;
  uint64_t last_ask_ = 0;
};

}  // namespace ringfire::dataplane
