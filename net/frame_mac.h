// frame_mac.h — the MAC on every frame of a keyed control connection once
// its handshake is done (PROTOCOL.md §1.8.2): each direction has a key of
// its own, derived from the handshake's frames (net/auth.h), and an
// implicit frame counter from 0. A sealed frame's `len` counts a 16-byte
// tag after its body: the Poly1305 tag of ChaCha20-Poly1305 (IETF) with
// nothing encrypted, the frame (its 16-byte header as sent, then the body
// before the tag) as the additional data, and the counter (u64 little-
// endian after four zero bytes) as the nonce. A frame forged, replayed,
// reordered or dropped by anyone without the key fails the next check.
// TcpConn seals and opens (start_frame_mac). Its connection's thread only
// (a control's conductor, a node's).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "proto/bytes.h"

namespace ringfire::net {

inline constexpr size_t kFrameTagBytes = 16;

struct FrameKey {
  std::array<unsigned char, 32> bytes{};
};
// FrameKeys: one connection's two directions, as this side sees them.
struct FrameKeys {
  FrameKey send;
  FrameKey recv;
};

// FrameMac: one direction's key and counter.
class FrameMac {
 public:
  explicit FrameMac(const FrameKey& key) : key_(key) {}
  // seal writes the next frame's tag (the counter moves on).
  void seal(proto::ConstBytes frame, std::byte* tag);
  // open checks the next frame's tag; the counter moves on only when it verifies.
  bool open(proto::ConstBytes frame, const std::byte* tag);
  uint64_t frames() const { return counter_; }

 private:
  void compute(proto::ConstBytes frame, unsigned char* tag) const;
  FrameKey key_;
  uint64_t counter_ = 0;
};

}  // namespace ringfire::net
