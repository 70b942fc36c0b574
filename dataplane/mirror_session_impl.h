// mirror_session_impl.h — the mirror session's template definitions (the
// datapath). Included by mirror_session.cc, which instantiates them for the
// kernel backend, and by anything that instantiates them for another port
// (a DPDK port, a test's in-memory port).
#pragma once

#include <unistd.h>

#include <algorithm>

#include "dataplane/mirror_session.h"

namespace ringfire::dataplane {

template <PacketPort Port>
MirrorSession<Port>::MirrorSession(MirrorWriter writer, const MirrorWorkerConfig& c, uint64_t first_seq,
                                   uint8_t session, int nak_eventfd)
    : writer_(std::move(writer)),
      config_(c),
      receiver_(&writer_, c.protocol, first_seq, session, c.trust),
      faults_(c.rx_faults),
      link_(std::max<size_t>(8u << 20, 2 * (writer_.max_blob() + (64u << 10)))) {
  link_.nak_fd = nak_eventfd;
  writer_.defer_wakes();  // woken once a step (step())
  woken_seq_ = writer_.next_seq();
  writer_.wake_parked();  // records a killed writer left, which attaching adopted
  publish_stats();
}

template <PacketPort Port>
uint64_t MirrorSession<Port>::next_deadline_ns(uint64_t now_ns) const {
  if (unsent_nak_) return now_ns;  // work pending
  // Injected faults wake it only for a delayed datagram that falls due.
  uint64_t until = std::min(receiver_.next_nak_due_ns(), faults_.next_release_ns());
  if (config_.punch_to && binding_ != 0) {
    until = std::min(until, last_punch_ns_ + (data_seen_ ? config_.punch_keepalive_ns : config_.punch_retry_ns));
  }
  return until;
}

template <PacketPort Port>
void MirrorSession<Port>::punch(uint64_t now_ns) {
  std::byte buf[proto::kFrameHeaderBytes + 8 + proto::kMacFrameBytes];
  size_t n;
  if (config_.punch_key) {
    // Authenticated: a counter that only grows, under this connection's
    // key, so a captured PUNCH replayed later (or from elsewhere) is refused.
    n = seal(*config_.punch_key, buf,
             proto::encode_punch_counted(config_.punch_token, ++punch_counter_, buf), 0);
  } else {
    n = proto::encode_punch(config_.punch_token, buf);
  }
  const TxDatagram tx{proto::ConstBytes(buf, n), *config_.punch_to, binding_};
  if (port_->tx_burst(&tx, 1) == 1) link_.stats.punches += 1;
  last_punch_ns_ = now_ns;
}

template <PacketPort Port>
void MirrorSession<Port>::wake_control() {
  const uint64_t one = 1;
  (void)!write(link_.nak_fd, &one, sizeof(one));
}

template <PacketPort Port>
void MirrorSession<Port>::on_datagram(const RxDatagram& d, uint64_t now_ns) {
  const uint64_t accepted_before = receiver_.stats().udp_accepted;
  faults_.offer(d.payload, d.from, now_ns,
                [&](proto::ConstBytes b, const Endpoint& from) { receiver_.on_datagram(b, from, now_ns); });
  ++datagrams_;
  // The source's datagrams flow: the punch did its job (keep-alives from
  // now on). Junk from anyone else does not count.
  if (receiver_.stats().udp_accepted != accepted_before) data_seen_ = true;
}

template <PacketPort Port>
bool MirrorSession<Port>::step(uint64_t now_ns) {
  bool busy = false;
  if (binding_ != 0) {
    if (faults_.enabled()) {
      faults_.release(now_ns, [&](proto::ConstBytes b, const Endpoint& from) { receiver_.on_datagram(b, from, now_ns); });
      link_.stats.fault_dropped.set(faults_.dropped());
    }
    if (config_.punch_to &&
        now_ns - last_punch_ns_ >= (data_seen_ ? config_.punch_keepalive_ns : config_.punch_retry_ns)) {
      punch(now_ns);
    }
  }
  for (uint32_t i = 0; i < kBurst; ++i) {
    proto::ConstBytes msg;
    if (!link_.tcp_frames.front(&msg)) break;
    proto::Frame f;
    if (proto::decode_frame(msg, msg.size(), &f) == proto::DecodeError::kOk) {
      if (f.header.kind == proto::FrameKind::kData) tcp_records_ += f.header.count;
      receiver_.on_tcp_frame(f, msg, now_ns);
    }
    link_.tcp_frames.pop();
    ++tcp_frames_;
    busy = true;
  }
  bool wake = false;
  if (!unsent_nak_) {
    // Assigned only when there is one: the optional is ~1 KB, trivially
    // copied whole by an assignment (a memcpy every step, idle or not).
    if (std::optional<proto::NakRanges> nak = receiver_.poll_nak(now_ns)) unsent_nak_.emplace(*nak);
  }
  if (unsent_nak_ && link_.naks.try_push(*unsent_nak_)) {
    unsent_nak_.reset();
    wake = true;
  }
  if (const std::optional<uint64_t> challenge = receiver_.take_probe()) {
    if (link_.probes.try_push(*challenge)) wake = true;  // full: the source probes again in 100 ms
  }
  if (receiver_.take_position_request() &&
      !link_.position_wanted.exchange(true, std::memory_order_release)) {  // pairs with the control thread's exchange
    wake = true;
  }
  if (wake) wake_control();
  // Records committed since the last look (by datagrams in this
  // iteration's RX burst, or TCP frames above): the ring's parked readers
  // are woken (the writer defers its wakes to here: one fence a step), and
  // an in-process reader waiting on them is told (one fenced load when it
  // is not waiting).
  if (writer_.next_seq() != woken_seq_) {
    woken_seq_ = writer_.next_seq();
    writer_.wake_parked();
  }
  if (config_.reader_wake != nullptr && receiver_.next_seq() != signalled_seq_) {
    signalled_seq_ = receiver_.next_seq();
    config_.reader_wake->signal();
  }
  publish_stats();
  return busy;
}

template <PacketPort Port>
void MirrorSession<Port>::publish_stats() {
  MirrorWorkerStats& o = link_.stats;
  o.publish(receiver_.stats());
  o.datagrams.set(datagrams_);
  o.tcp_frames.set(tcp_frames_);
  o.tcp_records.set(tcp_records_);
  o.held.set(receiver_.held_frames());
  o.next_seq.set(receiver_.next_seq());
  o.known_end.set(receiver_.known_end());
}

}  // namespace ringfire::dataplane
