// anchor_handle.h — the name a consumer gives its producer for a stream:
// the node's worker id (xxh3 of its instance id) in the upper 64 bits — the
// batching key, recovered with a shift — and the anchor id in the lower 64.
// Printed and parsed as "WORKER:ANCHOR", 16 hex digits each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ringfire::mux {

// worker_id: the batching key of the node with `instance_id`.
uint64_t worker_id(std::string_view instance_id);

__extension__ using Packed128 = unsigned __int128;  // a GCC/Clang extension, as -Wpedantic wants it named

struct AnchorHandle {
  uint64_t worker = 0;
  uint64_t anchor = 0;
  // packed: the 128-bit handle; its upper half is the destination worker.
  Packed128 packed() const { return static_cast<Packed128>(worker) << 64 | anchor; }
  static AnchorHandle unpack(Packed128 v) {
    return AnchorHandle{static_cast<uint64_t>(v >> 64), static_cast<uint64_t>(v)};
  }
  std::string to_string() const;
  // parse: nullopt unless exactly 16 hex digits, ':', 16 hex digits.
  static std::optional<AnchorHandle> parse(std::string_view s);
  friend bool operator==(const AnchorHandle&, const AnchorHandle&) = default;
};

}  // namespace ringfire::mux
