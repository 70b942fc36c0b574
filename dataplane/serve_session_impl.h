// serve_session_impl.h — the serve session's template definitions (the
// datapath). Included by serve_session.cc, which instantiates them for the
// kernel backend, and by anything that instantiates them for another port
// (a DPDK port, a test's in-memory port).
#pragma once

#include <unistd.h>

#include <algorithm>

#include "dataplane/serve_session.h"

namespace ringfire::dataplane {

template <PacketPort Port>
ServeSession<Port>::ServeSession(ring::RawReader reader, const ServeConfig& config,
                                 std::optional<ring::RawReader> repair_reader)
    : reader_(std::move(reader)),
      config_(config),
      framer_(reader_.fixed_size(), config.session),
      pacer_(config.pace_ns),
      faults_(config.tx_faults),
      frame_bufs_(kBurst, std::vector<std::byte>(config.mtu)),
      misplaced_(reader_.fixed_size()),
      repair_reader_(std::move(repair_reader)),
      repair_framer_(reader_.fixed_size(), config.session),
      repair_buf_(config.mtu) {
  heartbeat_wait_ns_ = config_.heartbeat_ns;
  if (config_.tag != 0 && !config_.data_key) group_tag_ = TagFrame::of(config_.session, config_.tag);
  // Reserved once: a Unicast never moves, so a TxDatagram may point at its
  // TAG frame (erase_if runs between steps, when no burst is pending).
  unicast_.reserve(kMaxUnicast);
  randombytes_buf(probe_secret_.bytes.data(), probe_secret_.bytes.size());
  link_.stats.next_to_send.store(reader_.cursor(), std::memory_order_relaxed);  // before install
  begin_frame();  // in frame_bufs_: no port yet (attach opens it again in the port's buffer)
}

template <PacketPort Port>
ServeSession<Port>::~ServeSession() {
  release_leases();
  if constexpr (LendingPort<Port>) {
    if (frame_lease_ != nullptr) Port::release_tx(frame_lease_);  // any thread, port or not (LendingPort)
  }
}

template <PacketPort Port>
void ServeSession<Port>::begin_frame() {
  if constexpr (LendingPort<Port>) {
    TxLease l;
    if (port_ != nullptr && port_->lease_tx(&l)) {
      if (l.capacity >= frame_limit()) {
        frame_lease_ = l.handle;
        framer_.begin(l.room, frame_limit());
        return;
      }
      Port::release_tx(l.handle);  // an mbuf too small for the MTU: frame in our own buffer
    }
  }
  frame_lease_ = nullptr;
  framer_.begin(frame_bufs_[frame_at_].data(), frame_limit());
}

template <PacketPort Port>
void ServeSession<Port>::release_leases() {
  if constexpr (LendingPort<Port>) {
    for (size_t i = 0; i < pending_leases_n_; ++i) Port::release_tx(pending_leases_[i]);
  }
  pending_leases_n_ = 0;
}

template <PacketPort Port>
void ServeSession<Port>::take_commands() {
  ServeCommand c;
  bool took = false;
  while (link_.commands.try_pop(&c)) {
    took = true;
    if (c.kind == ServeCommand::Kind::kRepair) {
      queue_repair(c);
    } else if (c.kind == ServeCommand::Kind::kProbeEcho) {
      // The mirror heard the PROBE at that address: DATA may go there now.
      for (Unicast& u : unicast_) {
        if (u.token == c.token && u.probing && u.challenge == c.first) {
          u.to = u.probing;
          u.probing.reset();
          link_.stats.paths_validated += 1;
        }
      }
    } else if (c.kind == ServeCommand::Kind::kLossReport) {
      on_loss_report(c);
    } else if (c.kind == ServeCommand::Kind::kAllowToken) {
      if (unicast_.size() < kMaxUnicast) {  // the control thread caps connections well below
        Unicast u;
        u.token = c.token;
        u.peer_ip = c.peer_ip;
        if (c.keyed) u.key = c.punch_key;
        if (c.tag != 0 && !c.keyed) u.tag = TagFrame::of(config_.session, c.tag);
        unicast_.push_back(u);
      }
    } else {
      std::erase_if(unicast_, [&](const Unicast& u) { return u.token == c.token; });
      if (config_.dup_auto) recount_doubled();  // without auto, no mirror is ever doubled
    }
  }
  if (took) count_unicast();  // the count moves only with a command (or a punch: on_datagram)
}

// count_unicast: the unicast mirrors that take the stream now (ones whose
// punch came, or whose probe was echoed), into the link's stats; when one
// more does, the control is told at once (a stream mux waits for this to
// send its first batch; its conductor would otherwise see it at its next
// look). Worker thread.
template <PacketPort Port>
void ServeSession<Port>::count_unicast() {
  uint64_t active = 0;
  for (const Unicast& u : unicast_) active += u.to.has_value();
  const bool more = active > link_.stats.unicast_mirrors.get();
  link_.stats.unicast_mirrors.set(active);
  if (!more) return;
  // Acquire: pairs with the control thread's release store of notify_fd.
  if (const int fd = link_.notify_fd.load(std::memory_order_acquire); fd >= 0) {
    const uint64_t one = 1;
    (void)!write(fd, &one, sizeof(one));
  }
}

template <PacketPort Port>
void ServeSession<Port>::on_loss_report(const ServeCommand& c) {
  if (!config_.dup_auto) return;
  for (Unicast& u : unicast_) {
    if (u.token != c.token || !u.loss.report(c.first, c.last, config_.dup_thresholds)) continue;
    link_.stats.dup_auto_switches += 1;
    recount_doubled();
  }
}

template <PacketPort Port>
void ServeSession<Port>::recount_doubled() {
  uint64_t doubled = 0;
  for (const Unicast& v : unicast_) doubled += v.loss.copies() > 1;
  link_.stats.dup_auto_doubled.set(doubled);
}

template <PacketPort Port>
void ServeSession<Port>::credit(const TxOwner* owners, size_t sent) {
  if (!config_.dup_auto) return;
  for (size_t i = 0; i < sent; ++i) {
    if (owners[i].to == nullptr) continue;
    owners[i].to->loss.sent(1);
    if (owners[i].extra) link_.stats.dup_auto_copies += 1;
  }
}

template <PacketPort Port>
void ServeSession<Port>::probe(Unicast& u, const Endpoint& at, uint64_t now_ns) {
  if (u.probing && *u.probing == at && now_ns - u.probed_ns < 100'000'000) return;  // one per 100 ms
  // An unguessable challenge: a PRF of a secret of this worker's.
  std::byte in[24];
  proto::store_le64(in, u.token);
  proto::store_le64(in + 8, uint64_t{at.ip} << 16 | at.port);
  proto::store_le64(in + 16, ++probes_made_);
  u.challenge = mac_tag(probe_secret_, in, sizeof(in));
  u.probing = at;
  u.probed_ns = now_ns;
  std::byte buf[proto::kFrameHeaderBytes + proto::kMacFrameBytes];
  const size_t n = seal_in_place(
      buf, proto::encode_probe(u.challenge, config_.session, proto::MutableBytes(buf, proto::kFrameHeaderBytes)));
  // Tagged as the mirror's datagrams are: the address a PUNCH bearing its
  // token came from (a stranger who holds the token saw its traffic anyway).
  const TxDatagram tx{proto::ConstBytes(buf, n), at, binding_, nullptr, trailer(u.tag)};
  if (send(&tx, 1) == 1) link_.stats.probes += 1;
}

template <PacketPort Port>
void ServeSession<Port>::on_datagram(const RxDatagram& d, uint64_t now_ns) {
  ServeStats& st = link_.stats;
  proto::Frame f;
  if (proto::decode_frame(d.payload, d.payload.size(), &f) != proto::DecodeError::kOk) {
    st.punch_malformed += 1;
    return;
  }
  if (f.header.kind != proto::FrameKind::kPunch) {
    st.punch_wrong_kind += 1;
    return;
  }
  auto it = std::find_if(unicast_.begin(), unicast_.end(),
                         [&](const Unicast& u) { return u.token == f.header.seq; });
  if (it == unicast_.end()) {
    st.punch_unknown_token += 1;
    return;
  }
  proto::ConstBytes punch = d.payload;
  if (it->key && !unseal(*it->key, d.payload, &punch)) {
    st.punch_bad_mac += 1;
    return;
  }
  uint64_t token = 0, counter = 0;
  if (punch.size() != proto::kFrameHeaderBytes + f.header.len ||
      proto::decode_punch(f, &token, &counter) != proto::DecodeError::kOk) {
    st.punch_malformed += 1;
    return;
  }
  if (it->key) {
    if (counter <= it->last_counter) {
      st.punch_replayed += 1;
      return;
    }
    it->last_counter = counter;
  }
  st.punches += 1;
  // The token was handed to one TCP connection: from that connection's
  // address (a NAT keeps it, RFC 4787 "paired" pooling; the port may
  // change) DATA goes where the punch came from at once. From any other
  // address (a bypass port with its own, a stolen or replayed token) only
  // a PROBE goes there, until the mirror echoes it over TCP.
  if (d.from.ip != it->peer_ip) {
    if (!(it->to && *it->to == d.from)) {
      st.punch_probed += 1;
      probe(*it, d.from, now_ns);
    }
    return;
  }
  const bool joined = !it->to.has_value();
  it->to = d.from;
  if (joined) count_unicast();  // a mirror takes the stream by UDP from now: counted, the control told
}

template <PacketPort Port>
void ServeSession<Port>::send_to_all(proto::ConstBytes datagram, uint64_t now_ns) {
  auto send = [&](proto::ConstBytes d, const Endpoint&) { transmit(d); };
  faults_.offer(datagram, Endpoint{}, now_ns, send);
  faults_.release(now_ns, send);
  link_.stats.fault_dropped.set(faults_.dropped());
  last_send_ns_ = now_ns;
}

template <PacketPort Port>
void ServeSession<Port>::transmit(proto::ConstBytes datagram) {
  TxDatagram tx[kBurst];
  TxOwner owners[kBurst];
  size_t n = 0;
  auto burst = [&] {
    const size_t sent = send(tx, n);
    credit(owners, sent);
    link_.stats.send_failures += n - sent;
    link_.stats.datagrams += sent;
    n = 0;
  };
  for_each_copy([&](const Endpoint& to, const std::byte* tag, TxOwner owner) {
    owners[n] = owner;
    tx[n++] = TxDatagram{datagram, to, binding_, nullptr, tag};
    if (n == kBurst) burst();
  });
  if (n != 0) burst();
}

template <PacketPort Port>
void ServeSession<Port>::queue_to_all(proto::ConstBytes datagram) {
  bool queued = false;
  for_each_copy([&](const Endpoint& to, const std::byte* tag, TxOwner owner) {
    if (pending_n_ == kBurst) flush_pending();  // a wide fan-out: this frame's buffer stays taken below
    pending_owners_[pending_n_] = owner;
    pending_[pending_n_++] = TxDatagram{datagram, to, binding_, frame_lease_, tag};
    queued = true;
  });
  if (queued) ++pending_frames_;
}

template <PacketPort Port>
void ServeSession<Port>::flush_pending() {
  if (pending_n_ != 0) {
    link_.stats.data_bursts += 1;
    const size_t sent = send(pending_.data(), pending_n_);
    credit(pending_owners_.data(), sent);
    link_.stats.data_datagrams += sent;
    link_.stats.send_failures += pending_n_ - sent;
    link_.stats.datagrams += sent;
  }
  pending_n_ = 0;
  pending_frames_ = 0;
  release_leases();  // the port holds its own references to what it sent
}

template <PacketPort Port>
void ServeSession<Port>::flush(uint64_t now_ns) {
  size_t n = framer_.finish();
  if (n == 0) return;
  std::byte* buf = framer_.buffer();
  n = seal_in_place(buf, n);
  link_.stats.records += framer_.count();
  link_.stats.frames += 1;
  if (faults_.enabled()) {  // the injector holds and reorders datagrams: no batching under faults
    flush_pending();
    send_to_all(proto::ConstBytes(buf, n), now_ns);  // held ones are copied: sent from our buffer
    if constexpr (LendingPort<Port>) {
      if (frame_lease_ != nullptr) Port::release_tx(frame_lease_);
    }
  } else {
    queue_to_all(proto::ConstBytes(buf, n));
    // After the frame's last datagram is queued (a wide fan-out may send a
    // burst while queueing it: the lease is still ours then).
    if (frame_lease_ != nullptr) pending_leases_[pending_leases_n_++] = frame_lease_;
    if (config_.heartbeat_follows_cadence) follow_cadence(now_ns);
    last_send_ns_ = now_ns;
  }
  frame_lease_ = nullptr;
  heartbeat_wait_ns_ = config_.heartbeat_ns;
  // Steady (the spacing's mean deviation within a quarter of it): three
  // spacings, past the next two bursts. A worker parked to this deadline
  // while a writer steps it wakes once per three bursts, not once per
  // burst (1.25 spacings fell between every two). Irregular traffic keeps
  // the prompt heartbeat.
  if (cadence_ns_ != 0 && 4 * cadence_dev_ns_ <= cadence_ns_) {
    heartbeat_wait_ns_ = std::clamp(3 * cadence_ns_, config_.heartbeat_ns,
                                    std::max(config_.heartbeat_max_ns, config_.heartbeat_ns));
  }
  // Release: pairs with the control thread's acquire loads of next_to_send
  // (serve_control.cc: GEOMETRY, the position it answers); only this thread
  // writes it.
  link_.stats.next_to_send.store(framer_.end_seq(), std::memory_order_release);
  pacer_.flushed(now_ns);
  frame_at_ = (frame_at_ + 1) % frame_bufs_.size();
  if (pending_frames_ == frame_bufs_.size()) flush_pending();  // every buffer waits in the burst: send it
  begin_frame();
}

template <PacketPort Port>
void ServeSession<Port>::queue_repair(const ServeCommand& c) {
  std::optional<Endpoint> to;
  std::optional<TagFrame> tag;
  if (c.token == 0) {
    to = config_.multicast;
    tag = group_tag_;
  } else {
    for (const Unicast& u : unicast_) {
      if (u.token == c.token) to = u.to, tag = u.tag;
    }
  }
  if (!to || !repair_reader_ || repair_count_ == kMaxRepairs || c.last < c.first) {
    link_.stats.repairs_cut += 1;
    return;
  }
  repairs_[(repair_head_ + repair_count_++) % kMaxRepairs] = Repair{*to, tag, c.token, c.first, c.last};
  link_.stats.repairs += 1;
}

template <PacketPort Port>
bool ServeSession<Port>::repair_step() {
  if (repair_count_ == 0) return false;
  Repair& job = repairs_[repair_head_];
  ring::RawReader& rd = *repair_reader_;
  rd.seek(job.next);
  repair_framer_.begin(repair_buf_.data(), frame_limit());
  bool done = false;
  uint64_t records = 0;
  uint64_t datagrams = 0;
  auto send_frame = [&] {
    if (size_t n = repair_framer_.finish()) {
      n = seal_in_place(repair_buf_.data(), n);
      const TxDatagram tx{proto::ConstBytes(repair_buf_.data(), n), job.to, binding_, nullptr, trailer(job.tag)};
      const size_t sent = send(&tx, 1);
      link_.stats.datagrams += sent;
      link_.stats.send_failures += 1 - sent;
      datagrams += sent;
    }
    repair_framer_.begin(repair_buf_.data(), frame_limit());
  };
  // At most 32 records a step however large burst_records is (a mux
  // channel's pass takes 1,024): a repair is a send a datagram, and a
  // burst of them past the socket's buffer would make more repairs.
  for (uint32_t i = 0; i < std::min<uint32_t>(config_.burst_records, 32) && !done; ++i) {
    uint32_t len = 0;
    const ring::ReadResult r = rd.next(&len);
    if (!r.ok || r.seq != job.next) {
      // Overwritten since the control thread looked (or a hole): the TCP
      // answer, sent alongside, covers it (with a GAP where it must).
      link_.stats.repairs_cut += 1;
      done = true;
      break;
    }
    if (!repair_framer_.add(r.seq, rd.record(), len)) {
      send_frame();
      if (!repair_framer_.add(r.seq, rd.record(), len)) {  // larger than a datagram
        link_.stats.repairs_cut += 1;
        done = true;
        break;
      }
    }
    ++records;
    done = job.next++ == job.last;
  }
  send_frame();
  link_.stats.repair_records += records;
  if (config_.dup_auto && job.token != 0 && datagrams != 0) {  // sent to that mirror too (once each)
    for (Unicast& u : unicast_) {
      if (u.token == job.token) u.loss.sent(datagrams);
    }
  }
  if (done) {
    repair_head_ = (repair_head_ + 1) % kMaxRepairs;
    --repair_count_;
  }
  return true;
}

// follow_cadence: a data frame leaving `now_ns` after the previous one (its
// heartbeats apart); a gap of more than kBurstGapNs starts a new burst, and
// the bursts' spacing and its mean deviation are averaged (a gap past
// heartbeat_max_ns is a pause: no cadence until the next bursts). Worker
// thread.
template <PacketPort Port>
void ServeSession<Port>::follow_cadence(uint64_t now_ns) {
  constexpr uint64_t kBurstGapNs = 200'000;
  const uint64_t last = std::exchange(last_data_ns_, now_ns);
  if (last == 0 || now_ns < last + kBurstGapNs) return;  // the first frame, or the same burst
  const uint64_t gap = now_ns - last;
  if (gap > std::max(config_.heartbeat_max_ns, config_.heartbeat_ns)) {
    cadence_ns_ = 0;
    cadence_dev_ns_ = 0;
  } else if (cadence_ns_ == 0) {
    cadence_ns_ = gap;
    cadence_dev_ns_ = gap / 2;  // one gap is not yet a cadence
  } else {
    const uint64_t off = gap > cadence_ns_ ? gap - cadence_ns_ : cadence_ns_ - gap;
    cadence_ns_ = (3 * cadence_ns_ + gap) / 4;
    cadence_dev_ns_ = (3 * cadence_dev_ns_ + off) / 4;
  }
}

template <PacketPort Port>
uint64_t ServeSession<Port>::next_deadline_ns(uint64_t now_ns) const {
  if (repair_count_ != 0) return now_ns;  // work pending
  // Injected faults wake it only for a delayed datagram that falls due.
  uint64_t until = std::min(last_send_ns_ + heartbeat_wait_ns_, faults_.next_release_ns());
  // A partial frame, or records left in the ring for it (step()'s
  // batching), leaves when the pacer is due.
  if (!framer_.empty() || reader_.published() > reader_.cursor()) until = std::min(until, pacer_.deadline());
  return until;
}

template <PacketPort Port>
size_t ServeSession<Port>::send(const TxDatagram* tx, size_t n) {
  link_.stats.tx_bursts += 1;
  return port_->tx_burst(tx, n);  // each carries this session's binding
}

template <PacketPort Port>
bool ServeSession<Port>::take_record(uint64_t now_ns) {
  if (std::byte* slot = framer_.next_slot()) {
    // Fixed records: straight from the ring into the frame (one copy). A
    // full frame left when its last record came, so there is room here.
    const ring::ReadResult r = reader_.next_into(slot);
    if (r.lost != 0) link_.stats.lapped += r.lost;
    if (!r.ok) return false;
    if (framer_.placed(r.seq)) {
      if (framer_.room_records() == 0) flush(now_ns);  // full: it leaves now
      return true;
    }
    // r.seq does not follow (a hole, a lap): it opens the next frame.
    std::memcpy(misplaced_.data(), slot, misplaced_.size());
    flush(now_ns);
    framer_.add(r.seq, misplaced_.data(), misplaced_.size());  // an empty frame takes a slot's record
    if (framer_.room_records() == 0) flush(now_ns);
    return true;
  }
  uint32_t len = 0;
  const ring::ReadResult r = reader_.next(&len);
  if (r.lost != 0) link_.stats.lapped += r.lost;
  if (!r.ok) return false;
  if (framer_.add(r.seq, reader_.record(), len)) {
    if (framer_.room_records() == 0 && reader_.fixed_size() != 0) flush(now_ns);  // full: it leaves now
    return true;
  }
  flush(now_ns);  // full, or r.seq does not follow: a hole or a lap
  if (!framer_.add(r.seq, reader_.record(), len)) {
    // Larger than a datagram: the control thread sends it over TCP (if
    // the queue is full, mirrors see the hole and NAK it instead).
    // Acquire: pairs with the control thread's release store of notify_fd.
    if (const int fd = link_.notify_fd.load(std::memory_order_acquire); link_.oversized.try_push(r.seq) && fd >= 0) {
      const uint64_t one = 1;
      (void)!write(fd, &one, sizeof(one));
    }
    link_.stats.left_to_tcp += 1;
    link_.stats.next_to_send.store(r.seq + 1, std::memory_order_release);  // pairs as in flush()
  }
  return true;
}

template <PacketPort Port>
void ServeSession<Port>::tell_control_if_asked() {
  // Seq_cst load, paired with the control's seq_cst store of the request
  // (ServeControl::tcp_poll_at): the control stores its request and then looks at the
  // ring once more (ServeControl::tcp_poll_at); a request made as these
  // records were taken is seen here, or the control sees the records.
  const uint64_t at = link_.tell_control_at.load(std::memory_order_seq_cst);
  if (reader_.cursor() <= at) return;
  // Acq_rel: the control's next request (a store after our exchange) is
  // ordered after this take-back; one tell per request.
  if (link_.tell_control_at.exchange(UINT64_MAX, std::memory_order_acq_rel) == UINT64_MAX) return;
  // Acquire: pairs with the control thread's release store of notify_fd.
  if (const int fd = link_.notify_fd.load(std::memory_order_acquire); fd >= 0) {
    const uint64_t one = 1;
    (void)!write(fd, &one, sizeof(one));
    link_.stats.control_tells += 1;
  }
}

template <PacketPort Port>
bool ServeSession<Port>::step(uint64_t now_ns) {
  bool busy = false;
  if (faults_.enabled()) faults_.release(now_ns, [&](proto::ConstBytes d, const Endpoint&) { transmit(d); });
  // Batching: while a partial frame may not leave yet, the ring is left
  // alone until the records waiting would fill the frame (fixed-size
  // records) — the frame's first record too: one busy iteration per frame
  // (take them all, send), not one per record, and no later for any
  // record: the frame leaves when full or due either way.
  const bool wait_for_more = waiting_for_pacer(now_ns);
  const uint64_t gate = link_.gate.load(std::memory_order_acquire);  // pairs with the producer's release
  for (uint32_t i = 0; !wait_for_more && i < config_.burst_records && reader_.cursor() < gate; ++i) {
    if (!take_record(now_ns)) break;
    pacer_.took(now_ns);
    busy = true;
  }
  if (busy) tell_control_if_asked();
  if (!framer_.empty() && pacer_.due(now_ns)) flush(now_ns);
  flush_pending();  // the step's data frames: one burst
  busy |= repair_step();
  if (framer_.empty() && now_ns - last_send_ns_ >= heartbeat_wait_ns_) {
    // The first heartbeat after a send exposes a lost last datagram within
    // heartbeat_ns; later ones only say "still here", so they back off.
    std::byte hb[proto::kFrameHeaderBytes + proto::kMacFrameBytes];
    const size_t n = seal_in_place(
        hb, proto::encode_heartbeat(link_.stats.next_to_send.load(std::memory_order_relaxed),
                                    config_.session, proto::MutableBytes(hb, proto::kFrameHeaderBytes)));
    link_.stats.heartbeats += 1;
    send_to_all(proto::ConstBytes(hb, n), now_ns);
    const uint64_t growth = std::max<uint32_t>(config_.heartbeat_growth, 2);
    heartbeat_wait_ns_ = std::min(growth * heartbeat_wait_ns_, std::max(config_.heartbeat_max_ns, config_.heartbeat_ns));
  }
  return busy;
}

}  // namespace ringfire::dataplane
