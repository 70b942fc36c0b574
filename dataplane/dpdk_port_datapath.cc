// dpdk_port_datapath.cc — a DPDK port's bursts, worker thread only: RX
// (parse, match a binding, ARP and IGMP through the L2 agent, the rest to
// the exception port or dropped, each counted) and TX (headers stamped in
// front of a payload, duplicates sharing one mbuf, a lent mbuf sent
// uncopied), and the frames the port sends for itself.
// rte_eth_get_monitor_addr (the af_xdp RX gate) is experimental in 22.11.
#define ALLOW_EXPERIMENTAL_API 1
#include "dataplane/dpdk_port.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_udp.h>

#include <net/if.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cstring>

#include "proto/frame.h"
#include "proto/net/packet.h"

namespace ringfire::dataplane {

using proto::net::MacAddr;

void DpdkPort::release_rx() {
  for (size_t i = 0; i < rx_held_n_; ++i) rte_pktmbuf_free(rx_held_[i]);
  rx_held_n_ = 0;
}

void DpdkPort::learn(uint32_t ip, const MacAddr& mac, NeighborTable::Source source) {
  if (!neighbors_.set(ip, mac, source) && ip != 0 && !proto::net::is_multicast_mac(mac)) ++stats_.neighbors_full;
  stats_.neighbors.set(neighbors_.size());
}

bool DpdkPort::send_frame(rte_mbuf* m) {
  if (rte_eth_tx_burst(o_.port_id, o_.queue, &m, 1) == 1) {
    ++stats_.tx_frames;
    return true;
  }
  rte_pktmbuf_free(m);
  ++stats_.tx_refused;
  return false;
}

bool DpdkPort::send_l2(absl::FunctionRef<size_t(proto::MutableBytes)> write) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return false;
  auto* b = reinterpret_cast<std::byte*>(rte_pktmbuf_append(m, L2Agent::kMaxFrame));
  const size_t len = b == nullptr ? 0 : write(proto::MutableBytes(b, L2Agent::kMaxFrame));
  if (len == 0) {
    rte_pktmbuf_free(m);
    return false;
  }
  rte_pktmbuf_trim(m, static_cast<uint16_t>(L2Agent::kMaxFrame - len));
  return send_frame(m);
}

void DpdkPort::send_igmp_report() {
  const std::span<const uint32_t> groups(l2_.groups());
  bool all_sent = true;
  for (size_t i = 0; !L2Agent::report_chunk(groups, i).empty(); ++i) {
    const auto chunk = L2Agent::report_chunk(groups, i);
    if (send_l2([&](proto::MutableBytes out) { return l2_.igmp_report(chunk, false, out); })) {
      ++stats_.igmp_reports;
    } else {
      all_sent = false;
    }
  }
  // A report that did not go (no mbuf, a full TX ring), a query's answer
  // too, is due again at the next tick, not at the next minute's refresh.
  if (all_sent) {
    l2_.reported(rte_get_tsc_cycles());
  } else {
    l2_.report_owed();
  }
}

void DpdkPort::send_igmp_leave(std::span<const uint32_t> groups) {
  for (size_t i = 0; !L2Agent::report_chunk(groups, i).empty(); ++i) {
    const auto chunk = L2Agent::report_chunk(groups, i);
    if (send_l2([&](proto::MutableBytes out) { return l2_.igmp_report(chunk, true, out); })) ++stats_.igmp_reports;
  }
}

void DpdkPort::l2_tick(uint64_t now) {
  next_l2_tsc_ = now + rte_get_tsc_hz() / 10;
  // The link: a switch port that went down forgot its groups (a snooping
  // switch empties its table for it), so a link that comes back up
  // announces them again at once rather than at the next minute's refresh.
  if (l2_.groups().empty()) {
    link_known_ = false;
  } else if (const int up = link_is_up(); up >= 0) {
    if (up == 1 && !link_up_ && link_known_) {
      l2_.link_came_up();
      ++stats_.link_ups;
    }
    link_up_ = up == 1;
    link_known_ = true;
  }
  if (l2_.report_due(now)) send_igmp_report();
}

int DpdkPort::link_is_up() const {
  if (link_probe_fd_ >= 0) {
    // A port on a kernel interface (af_packet, af_xdp): the interface's
    // carrier, as the kernel has it (those PMDs report their link up throughout).
    ifreq r{};
    std::memcpy(r.ifr_name, link_iface_.c_str(), std::min(link_iface_.size(), sizeof(r.ifr_name) - 1));
    if (ioctl(link_probe_fd_, SIOCGIFFLAGS, &r) != 0) return -1;
    return (r.ifr_flags & IFF_RUNNING) != 0 ? 1 : 0;
  }
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(o_.port_id, &link) != 0) return -1;
  return link.link_status == RTE_ETH_LINK_UP ? 1 : 0;
}

bool DpdkPort::rx_may_have_frames() {
  if (!rx_gate_ || last_rx_full_) return true;
  rte_power_monitor_cond pmc{};
  if (rte_eth_get_monitor_addr(o_.port_id, o_.queue, &pmc) != 0) return true;
  const uint32_t producer = *static_cast<const volatile uint32_t*>(pmc.addr);
  if (pmc.fn(producer, pmc.opaque) != 0) return true;  // the producer moved
  const uint64_t now = rte_get_tsc_cycles();
  if (now < next_forced_rx_tsc_) return false;
  next_forced_rx_tsc_ = now + forced_rx_interval_;
  return true;
}

size_t DpdkPort::rx_burst(RxDatagram* out, size_t n) {
  release_rx();  // the previous burst's payloads are no longer referenced
  if (const uint64_t now = rte_get_tsc_cycles(); now >= next_l2_tsc_) l2_tick(now);
  rte_mbuf* mbufs[kBurst];
  n = std::min<size_t>(n, kBurst);
  // First what the other queues received for this one's sessions
  // (QueueShare); while the wire may have frames, at most half the burst:
  // under a steady hand-off this queue's own RX ring is still read every
  // call, never left to overflow.
  const bool wire_may = rx_may_have_frames();
  const size_t inbox_max = wire_may ? std::max<size_t>(n / 2, 1) : n;
  const uint16_t handed = share_ ? static_cast<uint16_t>(rte_ring_sc_dequeue_burst(
                                       share_->inbox[o_.queue], reinterpret_cast<void**>(mbufs),
                                       static_cast<unsigned>(inbox_max), nullptr))
                                 : 0;
  stats_.rx_from_queues += handed;
  uint16_t got = handed;
  if (handed < n && wire_may) {
    const uint16_t wire = rte_eth_rx_burst(o_.port_id, o_.queue, mbufs + handed, static_cast<uint16_t>(n - handed));
    last_rx_full_ = wire == n - handed;
    stats_.rx_frames += wire;
    got += wire;
  }
  if (got == 0) {
    if (o_.exception_port >= 0) flush_exception();
    return 0;
  }
  size_t k = 0;
  for (uint16_t i = 0; i < got; ++i) {
    rte_mbuf* m = mbufs[i];
    const bool from_queue = i < handed;  // handed on once only: one no binding here matched is not ours
    proto::net::ParsedPacket p;
    const proto::ConstBytes frame(rte_pktmbuf_mtod(m, const std::byte*), m->data_len);
    // UDP checksums are trusted to the port: what it flags bad is dropped,
    // and software does not re-verify, because virtual ports (a veth through
    // af_packet) hand over the kernel's partial, offloaded checksums.
    const bool l4_bad = (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_BAD;
    const uint64_t ip_verdict = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
    const bool ip_bad = ip_verdict == RTE_MBUF_F_RX_IP_CKSUM_BAD;
    const proto::net::ParseOptions opt{/*verify_ip_checksum=*/ip_verdict != RTE_MBUF_F_RX_IP_CKSUM_GOOD,
                                       /*verify_udp_checksum=*/false};
    // IPv4 that is neither UDP nor IGMP is someone else's (a TCP segment
    // that af_packet hands over as a 64 KiB GSO chain, say): not ours, not
    // malformed. Untagged frames only; the full parse handles VLANs.
    if (m->data_len >= 34 && frame[12] == std::byte{0x08} && frame[13] == std::byte{0x00} &&
        frame[23] != std::byte{proto::net::kIpProtoUdp} && frame[23] != std::byte{proto::net::kIpProtoIgmp}) {
      not_ours(m);
      continue;
    }
    if (m->nb_segs != 1 || l4_bad || ip_bad || proto::net::parse_packet(frame, opt, &p) != proto::DecodeError::kOk) {
      ++stats_.rx_malformed;
      rte_pktmbuf_free(m);
      continue;
    }
    switch (p.kind) {
      case proto::net::PacketKind::kArp:
        learn(p.arp.sender_ip, p.arp.sender_mac, NeighborTable::Source::kArp);
        if (l2_.answers_arp(p.arp) &&
            send_l2([&](proto::MutableBytes reply) { return l2_.arp_reply(p.arp.sender_mac, p.arp.sender_ip, reply); })) {
          ++stats_.arp_replies;
        }
        to_exception(m);  // the kernel behind it resolves its peers too
        continue;
      case proto::net::PacketKind::kIgmp:
        if (l2_.answers_query(p.igmp.type)) send_igmp_report();
        rte_pktmbuf_free(m);
        continue;
      case proto::net::PacketKind::kUdp: {
        if (const BindingId b = match(p.ip.dst, p.udp.dst_port); b != 0) {
          learn(p.ip.src, p.eth.src, NeighborTable::Source::kSeen);  // fills an unknown peer only
          out[k++] = RxDatagram{p.payload, Endpoint{p.ip.src, p.udp.src_port}, b};
          rx_held_[rx_held_n_++] = m;
          continue;
        }
        if (!from_queue && hand_off(m, p.udp.dst_port)) continue;
        break;
      }
      default:
        break;
    }
    not_ours(m);
  }
  if (o_.exception_port >= 0) flush_exception();
  return k;
}

bool DpdkPort::hand_off(rte_mbuf* m, uint16_t udp_port) {
  if (!share_) return false;
  const uint8_t owner = share_->owner[udp_port].load(std::memory_order_relaxed);  // a hint (QueueShare)
  if (owner == 0 || owner - 1 == o_.queue) return false;
  if (rte_ring_mp_enqueue(share_->inbox[owner - 1], m) != 0) {
    ++stats_.rx_handoff_full;  // a loss: the session's repair brings it back
    rte_pktmbuf_free(m);
    return true;
  }
  ++stats_.rx_handed_off;
  return true;
}

void DpdkPort::not_ours(rte_mbuf* m) {
  ++stats_.rx_not_ours;
  to_exception(m);
}

void DpdkPort::to_exception(rte_mbuf* m) {
  if (o_.exception_port >= 0 && exc_out_n_ < exc_out_.size()) {
    // From a veth, a TCP segment may carry a partial checksum the kernel
    // behind the tap would drop; finish it (one frame chain only).
    if (m->nb_segs == 1) {
      proto::net::complete_partial_checksum(proto::MutableBytes(rte_pktmbuf_mtod(m, std::byte*), m->data_len));
    }
    exc_out_[exc_out_n_++] = m;
  } else {
    rte_pktmbuf_free(m);
  }
}

void DpdkPort::flush_exception() {
  const auto exc = static_cast<uint16_t>(o_.exception_port);
  if (exc_out_n_ != 0) {
    const uint16_t sent = rte_eth_tx_burst(exc, 0, exc_out_.data(), static_cast<uint16_t>(exc_out_n_));
    for (size_t i = sent; i < exc_out_n_; ++i) rte_pktmbuf_free(exc_out_[i]);
    stats_.rx_exception += sent;
    exc_out_n_ = 0;
  }
  const uint64_t now = rte_get_tsc_cycles();
  if (now < next_exc_poll_tsc_) return;
  next_exc_poll_tsc_ = now + rte_get_tsc_hz() / 10000;
  rte_mbuf* in[kBurst];
  const uint16_t got = rte_eth_rx_burst(exc, 0, in, kBurst);
  if (got == 0) return;
  const uint16_t sent = rte_eth_tx_burst(o_.port_id, o_.queue, in, got);
  for (uint16_t i = sent; i < got; ++i) rte_pktmbuf_free(in[i]);
  stats_.tx_exception += sent;
  stats_.tx_refused += got - sent;
}

bool DpdkPort::lease_tx(TxLease* l) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return false;
  const size_t tail = rte_pktmbuf_tailroom(m);
  if (tail <= proto::net::kUdpFrameOverhead) {
    rte_pktmbuf_free(m);
    return false;
  }
  l->room = rte_pktmbuf_mtod(m, std::byte*) + proto::net::kUdpFrameOverhead;
  l->capacity = tail - proto::net::kUdpFrameOverhead;
  l->handle = m;
  return true;
}

void DpdkPort::release_tx(void* handle) { rte_pktmbuf_free(static_cast<rte_mbuf*>(handle)); }

// stamp_frame writes the headers in front of a payload at b +
// kUdpFrameOverhead (b: the start of m's data) and asks
// the port to sum the UDP checksum where it can.
void DpdkPort::stamp_frame(rte_mbuf* m, std::byte* b, const proto::net::UdpTemplate& header, size_t payload) {
  header.stamp(b, ip_id_++, payload, !tx_udp_cksum_);
  if (tx_udp_cksum_) {
    // The port sums the datagram; it starts from the pseudo-header's sum.
    m->l2_len = proto::net::kEtherHeaderBytes;
    m->l3_len = proto::net::kIpv4HeaderBytes;
    m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_UDP_CKSUM;
    auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(b + proto::net::kEtherHeaderBytes);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(b + proto::net::kEtherHeaderBytes + proto::net::kIpv4HeaderBytes);
    udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, m->ol_flags);
  }
}

size_t DpdkPort::tx_burst(const TxDatagram* in, size_t n) {
  rte_mbuf* mbufs[kBurst];
  uint16_t ready = 0;
  n = std::min(n, kBurst);
  size_t last_built = SIZE_MAX;  // the datagram whose frame is mbufs[ready - 1]
  for (size_t i = 0; i < n; ++i) {
    if (o_.share_duplicates && ready != 0 && i != 0 && in[i].payload.data() == in[i - 1].payload.data() &&
        in[i].payload.size() == in[i - 1].payload.size() && in[i].to == in[i - 1].to &&
        in[i].binding == in[i - 1].binding && in[i].trailer == in[i - 1].trailer && last_built == i - 1) {
      // The same datagram again (dup N): the same frame, one more reference
      // (each transmission releases one).
      rte_mbuf* m = mbufs[ready - 1];
      rte_mbuf_refcnt_update(m, 1);
      mbufs[ready++] = m;
      last_built = i;
      ++stats_.tx_shared;
      continue;
    }
    const proto::net::UdpTemplate* header = tx_headers_.lookup(port_of(in[i].binding), in[i].to, neighbors_);
    if (header == nullptr) {
      // Unknown neighbor: ask (at most every 10 ms) and drop this datagram;
      // the protocol retries (punches, NAKs, heartbeats).
      if (l2_.may_ask_arp(rte_get_tsc_cycles())) {
        const uint32_t ip = in[i].to.ip;
        send_l2([&](proto::MutableBytes out) { return l2_.arp_request(ip, out); });
      }
      ++stats_.tx_no_neighbor;
      continue;
    }
    // The payload, then this destination's trailer (its TAG frame), if any.
    const size_t body = in[i].payload.size() + (in[i].trailer != nullptr ? proto::kTagFrameBytes : 0);
    const size_t len = proto::net::kUdpFrameOverhead + body;
    if (auto* lent = static_cast<rte_mbuf*>(in[i].lease);
        lent != nullptr && lent->data_len == 0 &&
        in[i].payload.data() == rte_pktmbuf_mtod(lent, std::byte*) + proto::net::kUdpFrameOverhead) {
      // Built in place (lease_tx), sent for the first time: the headers go
      // in front of it, and it leaves uncopied with a reference of the
      // port's (the PMD frees that one; the lender releases its own).
      auto* b = reinterpret_cast<std::byte*>(rte_pktmbuf_append(lent, static_cast<uint16_t>(len)));
      if (b == nullptr) {
        ++stats_.tx_too_big;
        continue;
      }
      if (in[i].trailer != nullptr) {
        std::memcpy(b + proto::net::kUdpFrameOverhead + in[i].payload.size(), in[i].trailer, proto::kTagFrameBytes);
      }
      stamp_frame(lent, b, *header, body);
      rte_mbuf_refcnt_update(lent, 1);
      mbufs[ready++] = lent;
      last_built = i;
      ++stats_.tx_in_place;
      continue;
    }
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr) {
      stats_.tx_no_mbuf += n - i;
      break;
    }
    auto* b = reinterpret_cast<std::byte*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len)));
    if (b == nullptr) {
      rte_pktmbuf_free(m);
      ++stats_.tx_too_big;
      continue;
    }
    std::memcpy(b + proto::net::kUdpFrameOverhead, in[i].payload.data(), in[i].payload.size());
    if (in[i].trailer != nullptr) {
      std::memcpy(b + proto::net::kUdpFrameOverhead + in[i].payload.size(), in[i].trailer, proto::kTagFrameBytes);
    }
    stamp_frame(m, b, *header, body);
    mbufs[ready++] = m;
    last_built = i;
  }
  uint16_t sent = ready ? rte_eth_tx_burst(o_.port_id, o_.queue, mbufs, ready) : 0;
  // A full TX queue (a memif peer, a NIC, the XSK ring) drains while we
  // wait: retry for up to ~20 us before dropping, rather than turning a
  // burst into NAKs. Bounded, so a dead peer costs 20 us a burst, no more.
  if (sent < ready) {
    const uint64_t give_up = rte_get_tsc_cycles() + rte_get_tsc_hz() / 50000;
    while (sent < ready && rte_get_tsc_cycles() < give_up) {
      sent += rte_eth_tx_burst(o_.port_id, o_.queue, mbufs + sent, static_cast<uint16_t>(ready - sent));
    }
  }
  for (uint16_t i = sent; i < ready; ++i) rte_pktmbuf_free(mbufs[i]);
  stats_.tx_frames += sent;
  stats_.tx_refused += ready - sent;
  return sent;  // what the port took; the rest is counted above by reason (and by the caller)
}

}  // namespace ringfire::dataplane
