// mirror_worker_impl.h — the mirror worker's template definitions (the datapath).
// Included by mirror_worker.cc, which instantiates them for the kernel backend,
// and by anything that instantiates them for another port (a DPDK port, a
// test's in-memory port).
#pragma once

#include <unistd.h>

#include <algorithm>

#include "dataplane/mirror_worker.h"

namespace ringfire::dataplane {

template <PacketPort Port>
MirrorWorker<Port>::MirrorWorker(MirrorWriter writer, std::optional<Port> port,
                                 const MirrorWorkerConfig& c, uint64_t first_seq, uint8_t session,
                                 int nak_eventfd)
    : writer_(std::move(writer)),
      port_(std::move(port)),
      config_(c),
      receiver_(&writer_, c.protocol, first_seq, session),
      faults_(c.rx_faults),
      link_(std::max<size_t>(8u << 20, 2 * (writer_.max_blob() + (64u << 10)))) {
  link_.nak_fd = nak_eventfd;
  publish_stats();
}

template <PacketPort Port>
void MirrorWorker<Port>::deliver(proto::ConstBytes payload, uint64_t now_ns) {
  data_seen_ = true;
  receiver_.on_datagram(payload, now_ns);
}

template <PacketPort Port>
bool MirrorWorker<Port>::step(uint64_t now_ns) {
  bool busy = false;
  if (port_) {
    RxDatagram rx[kBurst];
    const size_t n = port_->rx_burst(rx, kBurst);
    auto deliver_now = [&](proto::ConstBytes d) { deliver(d, now_ns); };
    for (size_t i = 0; i < n; ++i) faults_.offer(rx[i].payload, now_ns, deliver_now);
    faults_.release(now_ns, deliver_now);
    link_.stats.datagrams.fetch_add(n, std::memory_order_relaxed);
    link_.stats.fault_dropped.store(faults_.dropped(), std::memory_order_relaxed);
    busy = n != 0;
    if (config_.punch_to &&
        now_ns - last_punch_ns_ >=
            (data_seen_ ? config_.punch_keepalive_ns : config_.punch_retry_ns)) {
      std::byte punch[proto::kFrameHeaderBytes];
      proto::encode_punch(config_.punch_token, punch);
      const TxDatagram tx{punch, *config_.punch_to};
      port_->tx_burst(&tx, 1);
      link_.stats.punches.fetch_add(1, std::memory_order_relaxed);
      last_punch_ns_ = now_ns;
    }
  }
  for (uint32_t i = 0; i < kBurst; ++i) {
    proto::ConstBytes msg;
    if (!link_.tcp_frames.front(&msg)) break;
    proto::Frame f;
    if (proto::decode_frame(msg, msg.size(), &f) == proto::DecodeError::kOk) {
      receiver_.on_frame(f, msg, /*udp=*/false, now_ns);
    }
    link_.tcp_frames.pop();
    link_.stats.tcp_frames.fetch_add(1, std::memory_order_relaxed);
    busy = true;
  }
  if (!unsent_nak_) unsent_nak_ = receiver_.poll_nak(now_ns);
  if (unsent_nak_ && link_.naks.try_push(*unsent_nak_)) {
    unsent_nak_.reset();
    const uint64_t one = 1;
    (void)!write(link_.nak_fd, &one, sizeof(one));
  }
  publish_stats();
  return busy;
}

template <PacketPort Port>
void MirrorWorker<Port>::publish_stats() {
  const MirrorStats& s = receiver_.stats();
  constexpr auto r = std::memory_order_relaxed;
  link_.stats.records.store(s.records, r);
  link_.stats.duplicates.store(s.duplicates, r);
  link_.stats.held.store(receiver_.held_frames(), r);
  link_.stats.naks.store(s.naks, r);
  link_.stats.gap_records.store(s.gap_records, r);
  link_.stats.wrong_session.store(s.wrong_session, r);
  link_.stats.malformed.store(s.malformed, r);
  link_.stats.next_seq.store(receiver_.next_seq(), r);
  link_.stats.known_end.store(receiver_.known_end(), r);
}

}  // namespace ringfire::dataplane
