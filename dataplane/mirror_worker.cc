// mirror_worker.cc — datagrams and TCP frames -> MirrorReceiver -> ring.
#include "dataplane/mirror_worker.h"

#include <unistd.h>

#include <algorithm>

namespace ringfire::dataplane {

MirrorWorker::MirrorWorker(MirrorWriter writer, std::optional<KernelUdp> socket,
                           const MirrorWorkerConfig& c, uint64_t first_seq, uint8_t session,
                           int nak_eventfd)
    : writer_(std::move(writer)),
      socket_(std::move(socket)),
      config_(c),
      receiver_(&writer_, c.protocol, first_seq, session),
      faults_(c.rx_faults),
      nak_eventfd_(nak_eventfd),
      tcp_frames_(std::max<size_t>(8u << 20, 2 * (writer_.max_blob() + (64u << 10)))) {
  publish_stats();
}

void MirrorWorker::deliver(proto::ConstBytes payload, uint64_t now_ns) {
  data_seen_ = true;
  receiver_.on_datagram(payload, now_ns);
}

bool MirrorWorker::step(uint64_t now_ns) {
  bool busy = false;
  if (socket_) {
    RxDatagram rx[kBurst];
    const size_t n = socket_->rx_burst(rx, kBurst);
    auto deliver_now = [&](proto::ConstBytes d) { deliver(d, now_ns); };
    for (size_t i = 0; i < n; ++i) faults_.offer(rx[i].payload, now_ns, deliver_now);
    faults_.release(now_ns, deliver_now);
    stats_.datagrams.fetch_add(n, std::memory_order_relaxed);
    stats_.fault_dropped.store(faults_.dropped(), std::memory_order_relaxed);
    busy = n != 0;
    if (config_.punch_to &&
        now_ns - last_punch_ns_ >=
            (data_seen_ ? config_.punch_keepalive_ns : config_.punch_retry_ns)) {
      std::byte punch[proto::kFrameHeaderBytes];
      proto::encode_punch(config_.punch_token, punch);
      const TxDatagram tx{punch, *config_.punch_to};
      socket_->tx_burst(&tx, 1);
      stats_.punches.fetch_add(1, std::memory_order_relaxed);
      last_punch_ns_ = now_ns;
    }
  }
  for (uint32_t i = 0; i < kBurst; ++i) {
    proto::ConstBytes msg;
    if (!tcp_frames_.front(&msg)) break;
    proto::Frame f;
    if (proto::decode_frame(msg, msg.size(), &f) == proto::DecodeError::kOk) {
      receiver_.on_frame(f, msg, /*udp=*/false, now_ns);
    }
    tcp_frames_.pop();
    stats_.tcp_frames.fetch_add(1, std::memory_order_relaxed);
    busy = true;
  }
  if (!unsent_nak_) unsent_nak_ = receiver_.poll_nak(now_ns);
  if (unsent_nak_ && naks_.try_push(*unsent_nak_)) {
    unsent_nak_.reset();
    const uint64_t one = 1;
    (void)!write(nak_eventfd_, &one, sizeof(one));
  }
  publish_stats();
  return busy;
}

void MirrorWorker::publish_stats() {
  const MirrorStats& s = receiver_.stats();
  constexpr auto r = std::memory_order_relaxed;
  stats_.records.store(s.records, r);
  stats_.duplicates.store(s.duplicates, r);
  stats_.held.store(receiver_.held_frames(), r);
  stats_.naks.store(s.naks, r);
  stats_.gap_records.store(s.gap_records, r);
  stats_.wrong_session.store(s.wrong_session, r);
  stats_.malformed.store(s.malformed, r);
  stats_.next_seq.store(receiver_.next_seq(), r);
  stats_.known_end.store(receiver_.known_end(), r);
}

}  // namespace ringfire::dataplane
