// mux_config.h — the stream multiplexer's configuration: whether it is
// offered, how large a batch may be, the credit a receiver grants, the byte
// budgets, and the flush policy. Checked once, when a node is built: a zero
// initial credit is refused there (zero is the wire's "no mux").
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "proto/stream_batch.h"

namespace ringfire::mux {

// FlushPolicy: who decides when a peer's batch is written. Auto's two
// conditions compose (either may be off); Manual writes only at
// flush_batch() — and liveness records (open, close, credit, terminal)
// always move their batch, under every policy.
struct FlushPolicy {
  enum class Kind : uint8_t { kAuto, kManual } kind = Kind::kAuto;
  bool on_admission = true;    // Auto: write at the end of every step that staged something
  uint64_t max_linger_ns = 0;  // Auto: write at most this long after a batch's first record (0: off)

  static FlushPolicy manual() { return FlushPolicy{Kind::kManual, false, 0}; }
  static FlushPolicy linger(uint64_t ns) { return FlushPolicy{Kind::kAuto, false, ns}; }
};

inline constexpr uint32_t kMaxBatchCeiling = 64 * 1024;  // the coalescing threshold

struct MuxConfig {
  bool enabled = false;                  // offered in attach requests and answers
  uint32_t max_batch_bytes = 60 * 1024;  // clamped by the channel's record cap and 64 KiB
  uint32_t initial_credit = 256;         // frames a receiver grants a slot (C); 0 is refused
  // The byte budgets: what one slot, and all of one peer's open slots, may
  // have outstanding (sent, not credited back) and, on the owner's side,
  // withheld. The receiver enforces both on what arrives (PROTOCOL.md §2.3):
  // they are its memory bound.
  uint32_t slot_byte_budget = 1 << 20;
  uint32_t peer_byte_budget = 8 << 20;
  uint32_t max_streams_per_peer = 4096;  // live slots per peer (the dense table's size)
  // max_record_bytes: the largest record a send takes. One larger than a
  // batch's record cap is fenced: it goes alone in a batch of its own (the
  // channel carries a batch larger than a datagram over TCP, in order).
  uint32_t max_record_bytes = 256 << 10;
  uint64_t heartbeat_interval_ns = 1'000'000'000;  // per-slot liveness, phase-aligned per peer
  uint64_t stall_deadline_ns = 10'000'000'000;     // a slot at its byte cap with no credit this long dies
  // accept_timeout_ns: a stream the receiver answered must be claimed by
  // the owner's OpenSlot within this, or it ends (never_opened) and its
  // anchor is free again: a peer that attaches and goes quiet holds nothing.
  uint64_t accept_timeout_ns = 60'000'000'000;
  FlushPolicy flush;
};

// validate: every error names the field and what to change.
absl::Status validate(const MuxConfig& c);

}  // namespace ringfire::mux
