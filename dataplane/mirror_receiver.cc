// mirror_receiver.cc — mirror-side ordering, hold-back, loss detection.
#include "dataplane/mirror_receiver.h"

namespace ringfire::dataplane {

using proto::ConstBytes;
using proto::DecodeError;
using proto::Frame;
using proto::FrameKind;

MirrorReceiver::MirrorReceiver(MirrorWriter* writer, const MirrorConfig& config,
                               uint64_t first_seq, uint8_t session)
    : writer_(writer),
      config_(config),
      session_(session),
      next_seq_(first_seq),
      known_end_(first_seq),
      hold_(config.hold_back_frames, config.hold_back_bytes) {}

void MirrorReceiver::on_datagram(ConstBytes payload, uint64_t now_ns) {
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

void MirrorReceiver::on_frame(const Frame& f, ConstBytes frame_bytes, bool udp, uint64_t now_ns) {
  (void)now_ns;
  if (udp && f.header.flags != session_ &&
      (f.header.kind == FrameKind::kData || f.header.kind == FrameKind::kHeartbeat)) {
    ++stats_.wrong_session;
    return;
  }
  switch (f.header.kind) {
    case FrameKind::kData:
      on_data(f, frame_bytes);
      return;
    case FrameKind::kHeartbeat:
      // seq is one past the last sequence sent: anything below it that we
      // lack is a lost tail, which poll_nak will ask for.
      note_end(f.header.seq);
      return;
    case FrameKind::kGap:
      // The source no longer holds [next_seq, seq): skip it; the holes are
      // the only loss a reader of the mirror can ever see.
      if (f.header.seq > next_seq_) {
        ++stats_.gaps;
        stats_.gap_records += f.header.seq - next_seq_;
        next_seq_ = f.header.seq;
        note_end(next_seq_);
        drain_hold_back();
      }
      return;
    default:
      ++stats_.malformed;  // not a frame a mirror receives
      return;
  }
}

void MirrorReceiver::on_data(const Frame& f, ConstBytes frame_bytes) {
  const DecodeError e = writer_->blob() ? proto::BlobRecords::check(f, writer_->max_blob())
                                        : proto::check_fixed_data(f.header, writer_->slot_size());
  if (e != DecodeError::kOk) {
    ++stats_.malformed;
    return;
  }
  const uint64_t first = f.header.seq;
  const uint64_t end = first + f.header.count;
  if (end < first) {  // sequence overflow: crafted
    ++stats_.malformed;
    return;
  }
  note_end(end);
  if (end <= next_seq_) {
    stats_.duplicates += f.header.count;
    return;
  }
  if (first > next_seq_) {
    if (hold_.hold(first, end, frame_bytes)) {
      ++stats_.held;
    } else {
      ++stats_.hold_overflow;  // recovered later by NAK: the hole now reaches further
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
      ++stats_.rejected;
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

std::optional<proto::Nak> MirrorReceiver::poll_nak(uint64_t now_ns) {
  const uint64_t hole_end = hold_.empty() ? known_end_ : hold_.lowest_first();
  if (hole_end <= next_seq_) {
    outstanding_.reset();
    return std::nullopt;
  }
  proto::Nak hole{next_seq_, hole_end - 1};
  if (hole.last - hole.first >= config_.nak_max_records) {
    hole.last = hole.first + config_.nak_max_records - 1;
  }
  const bool covered = outstanding_ && hole.first >= outstanding_->first &&
                       hole.last <= outstanding_->last;
  if (covered && now_ns - nak_sent_ns_ < config_.nak_repeat_ns) return std::nullopt;
  if (covered) ++stats_.nak_repeats;
  ++stats_.naks;
  outstanding_ = hole;
  nak_sent_ns_ = now_ns;
  return hole;
}

}  // namespace ringfire::dataplane
