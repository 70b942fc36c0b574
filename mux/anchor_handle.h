// anchor_handle.h — the name a consumer gives its producer for a stream:
// the node's worker id (xxh3 of its instance id) in the upper 64 bits — the
// batching key, recovered with a shift — and the anchor id in the lower 64.
// Printed and parsed as "WORKER:ANCHOR", 16 hex digits each; a handle
// with a ticket (the attach answered in advance: PROTOCOL.md §5.2.1) adds
// ":SESSION:CREDIT:SLOT_BUDGET:PEER_BUDGET" (16, 8, 8 and 8 hex digits).
#pragma once

#include <cstdint>
#include <optional>
#include <algorithm>
#include <string>
#include <string_view>

namespace ringfire::mux {

// worker_id: the batching key of the node with `instance_id`.
uint64_t worker_id(std::string_view instance_id);

__extension__ using Packed128 = unsigned __int128;  // a GCC/Clang extension, as -Wpedantic wants it named

// Ticket: what an ATTACH answer would say, given in advance by the
// consumer with the anchor — the session the stream opens under and the
// terms of its answer. A producer holding one opens the stream in the
// channel at once (its OpenSlot, and its first records with it), with no
// ATTACH. Once: the consumer takes the first OpenSlot naming it.
struct Ticket {
  uint64_t session = 0;  // 0: no ticket
  uint32_t credit = 0;   // initial_credit (never 0 in a ticket)
  uint32_t slot_byte_budget = 0;
  uint32_t peer_byte_budget = 0;
  friend bool operator==(const Ticket&, const Ticket&) = default;
};

struct AnchorHandle {
  uint64_t worker = 0;
  uint64_t anchor = 0;
  Ticket ticket;  // session 0: none (attach asks)
  // packed: the 128-bit name (the ticket apart); its upper half is the destination worker.
  Packed128 packed() const { return static_cast<Packed128>(worker) << 64 | anchor; }
  static AnchorHandle unpack(Packed128 v) {
    return AnchorHandle{static_cast<uint64_t>(v >> 64), static_cast<uint64_t>(v), {}};
  }
  std::string to_string() const;
  // parse: nullopt unless exactly 16 hex digits, ':', 16 hex digits —
  // and, for a ticket, ':' and 16, 8, 8 and 8 hex digits so separated,
  // its session and credit non-zero.
  static std::optional<AnchorHandle> parse(std::string_view s);
  friend bool operator==(const AnchorHandle&, const AnchorHandle&) = default;
};

// not_a_handle: what to say of text that does not parse. Echoed: at most
// its first 33 characters (the short form's length), and nothing from its
// second ':' on — past either a ticket's session, a secret, would be (an
// unpadded or shifted line too); bytes other than printable ASCII as '?'.
inline std::string not_a_handle(std::string_view text) {
  size_t cut = std::min<size_t>(text.size(), 33);
  if (size_t first = text.find(':'); first != std::string_view::npos) {
    if (size_t second = text.find(':', first + 1); second != std::string_view::npos) cut = std::min(cut, second);
  }
  std::string m = "not a handle: '";
  for (char c : text.substr(0, cut)) m.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  m.append(cut < text.size() ? "...'" : "'");
  return m;
}

}  // namespace ringfire::mux
