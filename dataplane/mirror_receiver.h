// mirror_receiver.h — the mirror side of the protocol, without I/O: DATA,
// HEARTBEAT and GAP frames in (from UDP or TCP), records out into the mirror
// ring at exactly next_seq, and the NAKs to send. Frames that overtake a hole
// are held (bounded); one NAK covers the hole and is repeated only if it goes
// unanswered; duplicates and stale retransmissions are dropped; UDP frames of
// another session are ignored; a heartbeat reveals a lost tail. Time is
// passed in. Worker thread only.
#pragma once

#include <cstdint>
#include <optional>

#include "dataplane/hold_back.h"
#include "dataplane/mirror_writer.h"
#include "proto/frame.h"

namespace ringfire::dataplane {

// MirrorConfig holds the protocol's numbers; the defaults are the source
// document's.
struct MirrorConfig {
  uint32_t hold_back_frames = 8192;
  size_t hold_back_bytes = 16u << 20;
  uint32_t nak_max_records = 65535;
  uint64_t nak_repeat_ns = 20'000'000;  // 20 ms
  uint32_t max_datagram_frames = 32;    // frames decoded from one datagram
};

// MirrorStats are counters for the once-a-second stats line and tests.
struct MirrorStats {
  uint64_t records = 0;         // written to the ring
  uint64_t frames = 0;          // DATA frames applied (in order or from hold-back)
  uint64_t duplicates = 0;      // records at or below next_seq, dropped
  uint64_t held = 0;            // frames put in hold-back
  uint64_t hold_overflow = 0;   // frames dropped because hold-back was full
  uint64_t naks = 0;            // NAKs sent (first and repeats)
  uint64_t nak_repeats = 0;
  uint64_t gaps = 0;            // GAP frames that skipped records
  uint64_t gap_records = 0;     // records the source no longer had
  uint64_t wrong_session = 0;   // UDP frames of another session
  uint64_t malformed = 0;       // frames that failed to decode
  uint64_t rejected = 0;        // records the ring refused (size mismatch)
};

class MirrorReceiver {
 public:
  // first_seq is GEOMETRY's first sequence; session is MULTICAST's byte.
  MirrorReceiver(MirrorWriter* writer, const MirrorConfig& config, uint64_t first_seq,
                 uint8_t session);

  // on_datagram handles one UDP payload (one or more frames).
  void on_datagram(proto::ConstBytes payload, uint64_t now_ns);
  // on_frame handles one frame; `udp` says whether the session byte applies.
  void on_frame(const proto::Frame& f, proto::ConstBytes frame_bytes, bool udp, uint64_t now_ns);

  // poll_nak returns the NAK to send now, if any: a hole not yet covered by
  // an outstanding NAK, or one unanswered for nak_repeat_ns.
  std::optional<proto::Nak> poll_nak(uint64_t now_ns);

  uint64_t next_seq() const { return next_seq_; }
  // known_end is one past the highest sequence the source is known to have sent.
  uint64_t known_end() const { return known_end_; }
  size_t held_frames() const { return hold_.size(); }
  const MirrorStats& stats() const { return stats_; }

 private:
  void on_data(const proto::Frame& f, proto::ConstBytes frame_bytes);
  // apply writes the records of `f` at and above next_seq.
  void apply(const proto::Frame& f);
  void drain_hold_back();
  void note_end(uint64_t end) {
    if (end > known_end_) known_end_ = end;
  }

  MirrorWriter* writer_;
  MirrorConfig config_;
  uint8_t session_;
  uint64_t next_seq_;
  uint64_t known_end_;
  HoldBack hold_;
  std::optional<proto::Nak> outstanding_;
  uint64_t nak_sent_ns_ = 0;
  MirrorStats stats_;
};

}  // namespace ringfire::dataplane
