// mirror_stats.h — a mirror's counters, listed once. The receiver counts
// in plain integers (MirrorStats: its own, worker thread); the session
// publishes them once a step into MirrorWorkerStats (Counter: one writer,
// the worker; any thread reads), which adds the session's own. Both are
// MirrorCounts of the one list below, so a counter added to the list is
// kept, published and readable with no copy written by hand.
#pragma once

#include <cstdint>

#include "dataplane/counter.h"

namespace ringfire::dataplane {

// RINGFIRE_MIRROR_COUNTS(X): X(name) for each counter the receiver keeps.
//   records           written to the ring
//   frames            DATA frames applied (in order or from hold-back)
//   duplicates        records at or below next_seq, dropped
//   frames_held       frames put in hold-back
//   held_duplicates   frames already held (a duplicate datagram), dropped
//   hold_overflow     frames dropped because hold-back was full
//   held_high         hold-back high water, frames
//   naks              NAK frames sent (first and repeats)
//   nak_ranges        ranges named in them
//   nak_repeats       ranges NAKed again
//   holes             missing ranges below known_end at the last NAK poll
//   gaps              GAP frames that skipped records
//   gap_records       records the source no longer had
//   ring_refused      records the ring refused (size mismatch)
//   udp_accepted      UDP frames that passed every check
//   udp_datagrams     datagrams past the sender, MAC and tag checks, every
//                     copy counted (HEALTH reports it: the source's measure
//                     of the path's loss)
//   probes            PROBEs received (unicast path validation)
//   repair_srtt_ns    smoothed time from a NAK to its repair's start
// Rejected UDP input, by reason (datagrams for sender, MAC and malformed;
// frames for the rest):
//   wrong_sender      not from the source (nor a declared relay)
//   bad_mac           no MAC, or a wrong one, on an authenticated session
//   bad_tag           no TAG frame, or another tag, on a tagged session
//   wrong_kind        a frame kind UDP never carries to a mirror (GAP, ...)
//   wrong_session     another session's byte
//   implausible       a sequence beyond the plausibility window
//   malformed         failed to decode
#define RINGFIRE_MIRROR_COUNTS(X)                                                                        \
  X(records) X(frames) X(duplicates) X(frames_held) X(held_duplicates) X(hold_overflow) X(held_high)    \
  X(naks) X(nak_ranges) X(nak_repeats) X(holes) X(gaps) X(gap_records) X(ring_refused) X(udp_accepted) \
  X(udp_datagrams) X(probes) X(repair_srtt_ns) X(wrong_sender) X(bad_mac) X(bad_tag) X(wrong_kind)      \
  X(wrong_session) X(implausible) X(malformed)

inline uint64_t count_value(uint64_t v) { return v; }
inline uint64_t count_value(const Counter& c) { return c.get(); }

template <class T>
struct MirrorCounts {
#define RINGFIRE_DECLARE_COUNT(name) T name{};
  RINGFIRE_MIRROR_COUNTS(RINGFIRE_DECLARE_COUNT)
#undef RINGFIRE_DECLARE_COUNT
  // udp_rejected: the UDP input refused, every reason.
  uint64_t udp_rejected() const {
    return count_value(wrong_sender) + count_value(bad_mac) + count_value(bad_tag) + count_value(wrong_kind) +
           count_value(wrong_session) + count_value(implausible) + count_value(malformed);
  }
};

// MirrorStats: the receiver's (worker thread).
using MirrorStats = MirrorCounts<uint64_t>;

// MirrorWorkerStats: what the worker publishes for the control thread and
// the reports, on cache lines of its own: the receiver's counts, and the
// session's.
struct alignas(64) MirrorWorkerStats : MirrorCounts<Counter> {
  Counter datagrams;      // datagrams the port handed the session
  Counter tcp_frames;
  Counter tcp_records;    // records in the DATA frames that came by TCP (catch-up and repair; heartbeats apart)
  Counter fault_dropped;
  Counter punches;
  Counter held;           // frames in hold-back now
  Counter next_seq;
  Counter known_end;

  // publish copies every count of the receiver's (worker thread).
  void publish(const MirrorStats& s) {
#define RINGFIRE_PUBLISH_COUNT(name) name.set(s.name);
    RINGFIRE_MIRROR_COUNTS(RINGFIRE_PUBLISH_COUNT)
#undef RINGFIRE_PUBLISH_COUNT
  }
};

}  // namespace ringfire::dataplane
