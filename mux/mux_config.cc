// mux_config.cc — checking a MuxConfig when a node is built.
#include "mux/mux_config.h"

#include "absl/strings/str_cat.h"

namespace ringfire::mux {

absl::Status validate(const MuxConfig& c) {
  if (c.initial_credit == 0) {
    return absl::InvalidArgumentError(
        "mux initial_credit 0: zero is the wire's \"no mux\"; give at least 1 (default 256), or set enabled = false");
  }
  if (c.max_batch_bytes < 256 || c.max_batch_bytes > kMaxBatchCeiling) {
    return absl::InvalidArgumentError(
        absl::StrCat("mux max_batch_bytes ", c.max_batch_bytes, ": between 256 and ", kMaxBatchCeiling));
  }
  if (c.slot_byte_budget < c.max_batch_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("mux slot_byte_budget ", c.slot_byte_budget,
                                                   ": at least max_batch_bytes (", c.max_batch_bytes, ")"));
  }
  if (c.max_record_bytes == 0 || c.max_record_bytes + 64 > c.slot_byte_budget) {
    return absl::InvalidArgumentError(absl::StrCat("mux max_record_bytes ", c.max_record_bytes,
                                                   ": between 1 and slot_byte_budget - 64 (",
                                                   c.slot_byte_budget, " - 64)"));
  }
  if (c.peer_byte_budget < c.slot_byte_budget) {
    return absl::InvalidArgumentError(absl::StrCat("mux peer_byte_budget ", c.peer_byte_budget,
                                                   ": at least slot_byte_budget (", c.slot_byte_budget, ")"));
  }
  if (c.max_streams_per_peer == 0 || c.max_streams_per_peer > proto::SlotId::kMaxIndex + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mux max_streams_per_peer ", c.max_streams_per_peer, ": between 1 and 2^24"));
  }
  if (c.heartbeat_interval_ns < 1'000'000) {
    return absl::InvalidArgumentError("mux heartbeat_interval: at least 1 ms");
  }
  if (c.stall_deadline_ns < 2 * c.heartbeat_interval_ns) {
    return absl::InvalidArgumentError("mux stall_deadline: at least two heartbeat intervals");
  }
  if (c.accept_timeout_ns < 1'000'000) {
    return absl::InvalidArgumentError("mux accept_timeout: at least 1 ms (default 60 s)");
  }
  if (c.flush.kind == FlushPolicy::Kind::kManual && (c.flush.on_admission || c.flush.max_linger_ns != 0)) {
    return absl::InvalidArgumentError("mux flush: Manual takes no Auto condition (use Auto with max_linger for a net)");
  }
  return absl::OkStatus();
}

}  // namespace ringfire::mux
