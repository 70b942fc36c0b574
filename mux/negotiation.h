// negotiation.h — choosing a stream's path at attach (ATTACH frames,
// PROTOCOL.md §3): the receiver answers with the mux key only when both
// sides have it enabled, with its window and slot byte budget; otherwise
// both use the per-stream TCP path. A mux answer with a zero window is
// refused, not retried elsewhere: it can only be a peer that bound a mux
// receiver and told us to ignore it. Disabling the mux is the rollback: the
// node stops advertising the key and the next attach takes the TCP path.
// Pure functions; control thread.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "mux/mux_config.h"
#include "proto/attach.h"

namespace ringfire::mux {

// supported_keys: what this node advertises in its attach requests.
uint32_t supported_keys(const MuxConfig& local);

// answer: the receiver's response to `request`; `anchor_known` says whether
// the anchor it names exists here.
proto::AttachResponse answer(const proto::AttachRequest& request, const MuxConfig& local, bool anchor_known);

// PathChoice: what the sender does with the answer.
struct PathChoice {
  enum class Kind : uint8_t { kTcp, kMux } kind = Kind::kTcp;
  uint32_t credit = 0;            // kMux: the slot's window
  uint32_t slot_byte_budget = 0;  // kMux: the receiver's, or the default
  uint32_t peer_byte_budget = 0;  // kMux: the receiver's, or (an older one) this node's own
};

// choose reads the receiver's answer; an error says why the stream cannot
// attach (unknown anchor, refused, a mux answer we did not ask for, or a
// zero window).
absl::StatusOr<PathChoice> choose(const proto::AttachResponse& response, const MuxConfig& local);

}  // namespace ringfire::mux
