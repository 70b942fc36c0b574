// mirror_receiver.cc — mirror-side trust checks, ordering, hold-back, loss
// detection and NAK timing.
#include "dataplane/mirror_receiver.h"

#include <algorithm>

#include "ring/slot.h"

namespace ringfire::dataplane {

static_assert(proto::kMaxSequence == ring::kMaxSeq, "the wire's sequences are the ring's");

using proto::ConstBytes;
using proto::DecodeError;
using proto::Frame;
using proto::FrameKind;
using proto::Nak;

namespace {

uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
uint64_t range_size(const Nak& n) { return n.last - n.first + 1; }

}  // namespace

MirrorReceiver::MirrorReceiver(MirrorWriter* writer, const MirrorConfig& config,
                               uint64_t first_seq, uint8_t session, UdpTrust trust)
    : writer_(writer),
      config_(config),
      session_(session),
      trust_(trust),
      next_seq_(first_seq),
      known_end_(first_seq),
      vouched_end_(first_seq),
      hold_(config.hold_back_frames, config.hold_back_bytes) {
  config_.nak_ranges = std::clamp<uint32_t>(config_.nak_ranges, 1, proto::kMaxNakRanges);
  config_.nak_max_records = std::max<uint32_t>(config_.nak_max_records, 1);
}

void MirrorReceiver::on_datagram(ConstBytes payload, const Endpoint& from, uint64_t now_ns) {
  if (trust_.source_ip != 0) {
    bool ok = from.ip == trust_.source_ip && (trust_.source_port == 0 || from.port == trust_.source_port);
    for (uint32_t i = 0; !ok && i < trust_.relay_count; ++i) ok = from.ip == trust_.relays[i];
    if (!ok) {
      ++stats_.wrong_sender;
      return;
    }
  }
  if (trust_.mac) {
    ConstBytes inner;
    if (!unseal(*trust_.mac, payload, &inner)) {
      ++stats_.bad_mac;
      return;
    }
    payload = inner;
  } else if (trust_.tag) {
    ConstBytes inner;
    if (!strip_tag(*trust_.tag, payload, &inner)) {
      ++stats_.bad_tag;
      return;
    }
    payload = inner;
  }
  ++stats_.udp_datagrams;
  for (uint32_t i = 0; i < config_.max_datagram_frames && !payload.empty(); ++i) {
    Frame f;
    if (proto::decode_frame(payload, payload.size(), &f) != DecodeError::kOk) {
      ++stats_.malformed;
      return;
    }
    const size_t n = proto::kFrameHeaderBytes + f.header.len;
    on_frame(f, payload.first(n), /*udp=*/true, now_ns);
    payload = payload.subspan(n);
  }
}

void MirrorReceiver::on_tcp_frame(const Frame& f, ConstBytes frame_bytes, uint64_t now_ns) {
  on_frame(f, frame_bytes, /*udp=*/false, now_ns);
}

// A frame is plausible when it ends within the window past what the session
// vouched for, widened by what the source could have sent since it last
// stated its position over TCP: twice its fastest pace seen between such
// statements, over the time since the last one plus a slack for the
// statement's own trip (at most kPaceHorizonNs in all). A source lapped far
// ahead of its mirror stays plausible between statements; a forged sequence
// still cannot reach further than the source's own word and pace allow.
bool MirrorReceiver::plausible(uint64_t end, uint64_t now_ns) const {
  uint64_t allowance = config_.plausible_window;
  if (pace_per_ns_ > 0) {
    const uint64_t since = now_ns > stated_at_ns_ ? now_ns - stated_at_ns_ : 0;
    const double ns = static_cast<double>(std::min(since + kStatementSlackNs, kPaceHorizonNs));
    allowance = saturating_add(allowance, static_cast<uint64_t>(2 * pace_per_ns_ * ns));
  }
  return end <= saturating_add(std::max(next_seq_, vouched_end_), allowance);
}

void MirrorReceiver::note_statement(uint64_t position, uint64_t now_ns) {
  vouch(position);
  if (!stated_) {
    stated_ = true;
    paced_from_ = position;
    paced_from_ns_ = now_ns;
  } else if (now_ns - paced_from_ns_ >= kPaceSampleNs) {
    // The pace over at least one sample interval; the peak decays by a
    // quarter per sample so a source that slows down narrows the window.
    const double sample = position > paced_from_
                              ? static_cast<double>(position - paced_from_) /
                                    static_cast<double>(now_ns - paced_from_ns_)
                              : 0.0;
    pace_per_ns_ = std::max(sample, pace_per_ns_ * 0.75);
    paced_from_ = position;
    paced_from_ns_ = now_ns;
  }
  stated_at_ns_ = now_ns;
}

void MirrorReceiver::on_frame(const Frame& f, ConstBytes frame_bytes, bool udp, uint64_t now_ns) {
  if (udp) {
    // UDP carries DATA, HEARTBEAT and PROBE to a mirror, nothing else: a
    // GAP, a NAK answer or anything newer comes only on the connection.
    if (f.header.kind != FrameKind::kData && f.header.kind != FrameKind::kHeartbeat &&
        f.header.kind != FrameKind::kProbe) {
      ++stats_.wrong_kind;
      return;
    }
    if (f.header.flags != session_) {
      ++stats_.wrong_session;
      return;
    }
  }
  if (f.header.seq >= proto::kMaxSequence && f.header.kind != FrameKind::kProbe) {
    // No sequence gets there (see kMaxSequence): crafted, or broken.
    ++stats_.malformed;
    return;
  }
  switch (f.header.kind) {
    case FrameKind::kData:
      on_data(f, frame_bytes, udp, now_ns);
      return;
    case FrameKind::kHeartbeat:
      if (f.header.len != 0) {
        ++stats_.malformed;
        return;
      }
      if (udp) {
        // One past the last sequence sent: anything below it that we lack
        // is a lost tail, which poll_nak asks for.
        if (!plausible(f.header.seq, now_ns)) {
          ++stats_.implausible;
          position_wanted_ = true;
          return;
        }
        ++stats_.udp_accepted;
        note_end(f.header.seq);
        return;
      }
      // On TCP: the source's own position. What we believed beyond it came
      // from datagrams alone; forget it (a real datagram says it again).
      note_statement(f.header.seq, now_ns);
      if (known_end_ > f.header.seq) {
        uint64_t end = std::max(f.header.seq, next_seq_);
        hold_.for_each([&](uint64_t, uint64_t e) { end = std::max(end, e); });
        known_end_ = std::min(known_end_, end);
        dirty_ = true;
      }
      return;
    case FrameKind::kProbe:
      // UDP only (on TCP it is the mirror's to send): echoed by the control
      // thread, which proves to the source that this address is ours.
      if (!udp || f.header.len != 0) {
        ++stats_.malformed;
        return;
      }
      ++stats_.probes;
      probe_ = f.header.seq;
      return;
    case FrameKind::kGap:
      // TCP only (checked above): the source no longer holds [next_seq,
      // seq): skip it; the holes are the only loss a reader of the mirror
      // can ever see.
      vouch(f.header.seq);
      if (f.header.seq > next_seq_) {
        ++stats_.gaps;
        stats_.gap_records += f.header.seq - next_seq_;
        next_seq_ = f.header.seq;
        dirty_ = true;
        note_end(next_seq_);
        drain_hold_back();
      }
      return;
    default:
      ++stats_.malformed;  // not a frame a mirror receives
      return;
  }
}

void MirrorReceiver::on_data(const Frame& f, ConstBytes frame_bytes, bool udp, uint64_t now_ns) {
  const DecodeError e = writer_->blob() ? proto::BlobRecords::check(f, writer_->max_blob())
                                        : proto::check_fixed_data(f.header, writer_->slot_size());
  if (e != DecodeError::kOk) {
    ++stats_.malformed;
    return;
  }
  const uint64_t first = f.header.seq;
  const uint64_t end = first + f.header.count;  // first < 2^62: no overflow
  if (end > proto::kMaxSequence) {
    ++stats_.malformed;
    return;
  }
  if (udp && !plausible(end, now_ns)) {
    ++stats_.implausible;
    position_wanted_ = true;
    return;
  }
  if (udp) ++stats_.udp_accepted;
  if (!udp) vouch(end);
  note_end(end);
  dirty_ = true;
  if (end <= next_seq_) {
    stats_.duplicates += f.header.count;
    return;
  }
  if (first > next_seq_) {
    switch (hold_.hold(first, end, frame_bytes)) {
      case HoldBack::Hold::kHeld:
        ++stats_.frames_held;
        stats_.held_high = std::max<uint64_t>(stats_.held_high, hold_.size());
        break;
      case HoldBack::Hold::kDuplicate:
        ++stats_.held_duplicates;
        stats_.duplicates += f.header.count;
        break;
      case HoldBack::Hold::kFull:
        ++stats_.hold_overflow;  // recovered later by NAK: the hole now reaches further
        break;
    }
    return;
  }
  apply(f);
  drain_hold_back();
}

void MirrorReceiver::apply(const Frame& f) {
  ++stats_.frames;
  uint64_t seq = f.header.seq;
  auto put = [&](ConstBytes record) {
    if (seq < next_seq_) {
      ++stats_.duplicates;
    } else if (writer_->write(seq, record)) {
      ++stats_.records;
      next_seq_ = seq + 1;
    } else {
      ++stats_.ring_refused;
    }
    ++seq;
  };
  if (writer_->blob()) {
    proto::BlobRecords recs(f.body);
    for (uint16_t i = 0; i < f.header.count; ++i) put(recs.next());
  } else {
    const size_t size = writer_->slot_size();
    for (uint16_t i = 0; i < f.header.count; ++i) put(f.body.subspan(i * size, size));
  }
}

void MirrorReceiver::drain_hold_back() {
  while (!hold_.empty() && hold_.lowest_first() <= next_seq_) {
    const HoldBack::HeldFrame h = hold_.pop();
    if (h.end_seq <= next_seq_) {
      stats_.duplicates += h.end_seq - h.first_seq;
      continue;
    }
    Frame f;
    if (proto::decode_frame(h.bytes, h.bytes.size(), &f) == DecodeError::kOk) apply(f);
  }
}

uint32_t MirrorReceiver::find_holes(Nak* out, uint32_t max) const {
  uint64_t cursor = next_seq_;
  uint32_t n = 0;
  hold_.for_each([&](uint64_t first, uint64_t end) {
    if (n < max && first > cursor) out[n++] = Nak{cursor, first - 1};
    cursor = std::max(cursor, end);
  });
  if (n < max && known_end_ > cursor) out[n++] = Nak{cursor, known_end_ - 1};
  return n;
}

uint64_t MirrorReceiver::first_retry_ns() const {
  // The measured NAK-to-repair time plus four times its variation (RFC
  // 6298's retransmission timeout): a repair that has not started by then
  // was lost (a UDP repair datagram), so ask again, and the source answers
  // the repeat over TCP. Before any measurement, 1 ms. A repair merely late
  // costs a duplicate over TCP; a lost one costs this wait, with every
  // record behind it.
  const uint64_t rto = srtt_ns_ == 0 ? 1'000'000 : srtt_ns_ + 4 * rttvar_ns_;
  return std::clamp(rto, config_.nak_retry_min_ns, std::max(config_.nak_retry_min_ns, config_.nak_repeat_ns));
}

void MirrorReceiver::sample_repair(uint64_t ns) {
  if (srtt_ns_ == 0) {
    srtt_ns_ = std::max<uint64_t>(ns, 1);
    rttvar_ns_ = ns / 2;
  } else {
    const uint64_t diff = ns > srtt_ns_ ? ns - srtt_ns_ : srtt_ns_ - ns;
    rttvar_ns_ = (3 * rttvar_ns_ + diff) / 4;
    srtt_ns_ = std::max<uint64_t>((7 * srtt_ns_ + ns) / 8, 1);
  }
  stats_.repair_srtt_ns = srtt_ns_;
}

std::optional<proto::NakRanges> MirrorReceiver::poll_nak(uint64_t now_ns) {
  // Nothing changed and no repeat is due: nothing to do. While NAKs are
  // outstanding, look at most once per nak_min_gap_ns (the hole list costs
  // a walk of the hold-back); a first hole is NAKed at once.
  if (!dirty_ && now_ns < next_due_ns_) return std::nullopt;
  if (outstanding_count_ != 0 && now_ns - last_poll_ns_ < config_.nak_min_gap_ns) return std::nullopt;
  last_poll_ns_ = now_ns;
  dirty_ = false;
  std::array<Nak, proto::kMaxNakRanges> holes;
  const uint32_t nh = find_holes(holes.data(), proto::kMaxNakRanges);
  stats_.holes = nh;

  // What is still missing of each outstanding range: nothing (repaired),
  // less than before (the repair is arriving: restart its clock), or the
  // same. The pieces stay sorted and disjoint, as the holes are.
  std::array<Outstanding, proto::kMaxNakRanges> kept;
  uint32_t nk = 0;
  for (uint32_t i = 0; i < outstanding_count_; ++i) {
    Outstanding o = outstanding_[i];
    uint64_t left = 0;
    const uint32_t before = nk;
    for (uint32_t h = 0; h < nh && nk < kept.size(); ++h) {
      const uint64_t a = std::max(o.range.first, holes[h].first);
      const uint64_t b = std::min(o.range.last, holes[h].last);
      if (a > b) continue;
      kept[nk] = o;
      kept[nk++].range = Nak{a, b};
      left += b - a + 1;
    }
    if (left < range_size(o.range)) {
      if (!o.sampled && o.repeats == 0) sample_repair(now_ns - o.sent_ns);  // Karn: not a repeat's
      for (uint32_t k = before; k < nk; ++k) {
        kept[k].sampled = true;
        kept[k].sent_ns = now_ns;
      }
    }
  }

  // Candidates, lowest first: every piece of a hole no NAK covers (new),
  // and every outstanding piece whose wait is over (a repeat).
  struct Candidate {
    Nak range;
    int32_t outstanding;  // index into kept, or -1 for a new piece
  };
  std::array<Candidate, 2 * proto::kMaxNakRanges> cands;
  uint32_t nc = 0;
  uint32_t k = 0;
  for (uint32_t h = 0; h < nh; ++h) {
    uint64_t cursor = holes[h].first;
    while (cursor <= holes[h].last && nc < cands.size()) {
      while (k < nk && kept[k].range.last < cursor) ++k;
      if (k < nk && kept[k].range.first <= cursor) {  // covered from here
        if (now_ns - kept[k].sent_ns >= kept[k].wait_ns) {
          cands[nc++] = Candidate{kept[k].range, static_cast<int32_t>(k)};
        }
        if (kept[k].range.last == UINT64_MAX) break;
        cursor = kept[k].range.last + 1;
        continue;
      }
      uint64_t end = holes[h].last;  // uncovered up to the next outstanding piece
      if (k < nk && kept[k].range.first <= end) end = kept[k].range.first - 1;
      end = std::min(end, saturating_add(cursor, config_.nak_max_records - 1));
      cands[nc++] = Candidate{Nak{cursor, end}, -1};
      if (end == UINT64_MAX) break;
      cursor = end + 1;
    }
  }

  // One NAK carries new ranges or repeats, not both (a repeat is answered
  // over TCP): the lowest candidate decides, the other kind waits for the
  // next poll.
  proto::NakRanges nak;
  nak.repeat = nc != 0 && cands[0].outstanding >= 0;
  std::array<Outstanding, proto::kMaxNakRanges> added;
  uint32_t na = 0;
  for (uint32_t c = 0; c < nc && nak.count < config_.nak_ranges; ++c) {
    if ((cands[c].outstanding >= 0) != nak.repeat) continue;
    if (cands[c].outstanding >= 0) {
      Outstanding& o = kept[static_cast<uint32_t>(cands[c].outstanding)];
      ++o.repeats;
      o.wait_ns = o.repeats == 1 ? config_.nak_repeat_ns
                                 : std::min(2 * o.wait_ns, config_.nak_repeat_max_ns);
      o.sent_ns = now_ns;
      ++stats_.nak_repeats;
    } else {
      if (nk + na >= proto::kMaxNakRanges) continue;  // tracked later, once some are repaired
      added[na++] = Outstanding{cands[c].range, now_ns, first_retry_ns(), 0, false};
    }
    nak.push(cands[c].range);
  }

  // The new outstanding set: kept and added, merged in order.
  outstanding_count_ = 0;
  next_due_ns_ = UINT64_MAX;
  for (uint32_t a = 0, b = 0; a < nk || b < na;) {
    const bool take_kept = b == na || (a < nk && kept[a].range.first < added[b].range.first);
    const Outstanding& o = take_kept ? kept[a++] : added[b++];
    outstanding_[outstanding_count_++] = o;
    next_due_ns_ = std::min(next_due_ns_, saturating_add(o.sent_ns, o.wait_ns));
  }
  // More candidates than one NAK may name: look again at the next gap.
  if (nc > nak.count) dirty_ = true;
  if (nak.count == 0) return std::nullopt;
  ++stats_.naks;
  stats_.nak_ranges += nak.count;
  return nak;
}

}  // namespace ringfire::dataplane
