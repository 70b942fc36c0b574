// mirror_receiver.h — the mirror side of the protocol, without I/O: DATA and
// HEARTBEAT datagrams in from UDP, DATA, GAP and HEARTBEAT frames from the
// TCP connection, records out into the mirror ring at exactly next_seq, and
// the NAKs to send. Frames that overtake a hole are held (bounded); each
// hole is NAKed once and repeated only when it makes no progress, sooner
// the first time (an adaptive retry timeout: a UDP repair may be lost) and
// then backing off; several holes share one NAK when the source takes
// multi-range NAKs; NAK frames are rate-limited.
//
// Nothing from UDP is trusted until checked, in this order: the sender (the
// source's announced data address, or a declared relay), the MAC (on an
// authenticated session), the frame kind (only DATA, HEARTBEAT and PROBE
// come by UDP), the session byte, and a plausibility window (no frame may reach
// further than `plausible_window` past what the session has vouched for over
// TCP or already written, widened by the source's own pace since it last
// stated its position there). A rejected datagram is counted by reason and
// changes nothing; an implausible one also asks the control thread to get
// the source's position over TCP. Only the TCP connection can make a hole a
// GAP. Time is passed in. Worker thread only.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "dataplane/datagram_tag.h"
#include "dataplane/hold_back.h"
#include "dataplane/mirror_stats.h"
#include "dataplane/mirror_writer.h"
#include "dataplane/packet_port.h"
#include "net/datagram_mac.h"
#include "proto/frame.h"

namespace ringfire::dataplane {

// MirrorConfig holds the protocol's numbers; the defaults are the source
// document's where it has one.
struct MirrorConfig {
  uint32_t hold_back_frames = 8192;
  size_t hold_back_bytes = 16u << 20;
  uint32_t nak_max_records = 65535;        // per range
  uint64_t nak_repeat_ns = 20'000'000;     // a repeat NAK waits this, doubling per repeat ...
  uint64_t nak_repeat_max_ns = 1'000'000'000;  // ... up to this
  uint64_t nak_retry_min_ns = 250'000;     // the first repeat: the measured repair time (RTO), at least this
  uint64_t nak_min_gap_ns = 50'000;        // NAK frames at most this often
  uint32_t nak_ranges = 1;                 // ranges per NAK (kMaxNakRanges once the source takes them)
  uint32_t max_datagram_frames = 32;       // frames decoded from one datagram
  uint64_t plausible_window = 1u << 20;    // records past what the session vouched for
};

// UdpTrust says whom a mirror believes on UDP.
struct UdpTrust {
  uint32_t source_ip = 0;     // 0: any sender (tests; a source with no address)
  uint16_t source_port = 0;   // 0: any port of source_ip (multicast)
  std::array<uint32_t, 8> relays{};  // other senders the operator declared
  uint32_t relay_count = 0;
  std::optional<net::MacKey> mac;  // authenticated session: every datagram carries a MAC
  std::optional<TagFrame> tag;  // unkeyed, tagged: every datagram ends with exactly this TAG frame
};

class MirrorReceiver {
 public:
  // first_seq is GEOMETRY's first sequence; session is MULTICAST's byte.
  MirrorReceiver(MirrorWriter* writer, const MirrorConfig& config, uint64_t first_seq,
                 uint8_t session, UdpTrust trust = {});

  // on_datagram handles one UDP payload (one or more frames) from `from`.
  void on_datagram(proto::ConstBytes payload, const Endpoint& from, uint64_t now_ns);
  // on_tcp_frame handles one frame the source sent on the TCP connection.
  void on_tcp_frame(const proto::Frame& f, proto::ConstBytes frame_bytes, uint64_t now_ns);

  // poll_nak returns the NAK to send now, if any: holes not yet covered by
  // an outstanding NAK, and ranges whose NAK went unanswered.
  std::optional<proto::NakRanges> poll_nak(uint64_t now_ns);
  // take_position_request: an implausible datagram arrived since the last
  // call; the control thread should ask the source where it is.
  bool take_position_request() {
    const bool r = position_wanted_;
    position_wanted_ = false;
    return r;
  }
  // take_probe: a PROBE's challenge arrived (unicast path validation) for
  // the control thread to echo over TCP.
  std::optional<uint64_t> take_probe() {
    std::optional<uint64_t> c = probe_;
    probe_.reset();
    return c;
  }

  uint64_t next_seq() const { return next_seq_; }
  // next_nak_due_ns: when an outstanding NAK is next due for a repeat
  // (UINT64_MAX: none).
  uint64_t next_nak_due_ns() const { return next_due_ns_; }
  // known_end is one past the highest sequence the source is known to have sent.
  uint64_t known_end() const { return known_end_; }
  // vouched_end is the highest position the source stated over TCP.
  uint64_t vouched_end() const { return vouched_end_; }
  size_t held_frames() const { return hold_.size(); }
  const MirrorStats& stats() const { return stats_; }

 private:
  // Outstanding is a NAKed range awaiting its repair.
  struct Outstanding {
    proto::Nak range;
    uint64_t sent_ns;
    uint64_t wait_ns;    // until the next repeat, unless the range makes progress
    uint32_t repeats;
    bool sampled;        // its repair time went into the estimate
  };

  void on_frame(const proto::Frame& f, proto::ConstBytes frame_bytes, bool udp, uint64_t now_ns);
  void on_data(const proto::Frame& f, proto::ConstBytes frame_bytes, bool udp, uint64_t now_ns);
  bool plausible(uint64_t end, uint64_t now_ns) const;
  // note_statement takes the source's position as it stated it over TCP
  // (a HEARTBEAT there) and samples its pace from successive statements.
  void note_statement(uint64_t position, uint64_t now_ns);
  // apply writes the records of `f` at and above next_seq.
  void apply(const proto::Frame& f);
  void drain_hold_back();
  void note_end(uint64_t end) {
    if (end > known_end_) {
      known_end_ = end;
      dirty_ = true;
    }
  }
  void vouch(uint64_t end) {
    if (end > vouched_end_) vouched_end_ = end;
  }
  // find_holes lists the missing ranges, lowest first, at most `max`.
  uint32_t find_holes(proto::Nak* out, uint32_t max) const;
  uint64_t first_retry_ns() const;
  void sample_repair(uint64_t ns);

  MirrorWriter* writer_;
  MirrorConfig config_;
  uint8_t session_;
  UdpTrust trust_;
  uint64_t next_seq_;
  uint64_t known_end_;
  uint64_t vouched_end_;
  HoldBack hold_;
  std::array<Outstanding, proto::kMaxNakRanges> outstanding_{};
  uint32_t outstanding_count_ = 0;
  uint64_t last_poll_ns_ = 0;
  uint64_t next_due_ns_ = UINT64_MAX;  // the earliest outstanding repeat
  bool dirty_ = true;                  // something poll_nak looks at changed
  uint64_t srtt_ns_ = 0;    // smoothed NAK -> first repair time
  uint64_t rttvar_ns_ = 0;
  bool position_wanted_ = false;
  std::optional<uint64_t> probe_;
  // The source's pace, from its TCP position statements (see plausible()).
  static constexpr uint64_t kPaceSampleNs = 1'000'000;       // statements this far apart make a sample
  static constexpr uint64_t kStatementSlackNs = 20'000'000;  // a statement's trip to this worker
  static constexpr uint64_t kPaceHorizonNs = 1'000'000'000;  // the widening stops growing here
  bool stated_ = false;
  uint64_t stated_at_ns_ = 0;    // the last statement
  uint64_t paced_from_ = 0;      // the statement the next pace sample starts from
  uint64_t paced_from_ns_ = 0;
  double pace_per_ns_ = 0;       // records per ns, the decaying peak
  MirrorStats stats_;
};

}  // namespace ringfire::dataplane
