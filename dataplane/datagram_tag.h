// datagram_tag.h — the tag an unkeyed session puts on every UDP datagram
// (DATA, HEARTBEAT, PROBE, repairs): a 16-byte TAG frame last in the
// datagram whose `seq` is a random 64-bit value the source announced on the
// mirror's TCP connection only (MULTICAST), per mirror on unicast and per
// source incarnation on a group. A blind spoofer of the source's address
// must guess it: 2^64 tries, not the session byte's 2^8 (PROTOCOL.md
// §1.8.1). It is no MAC: whoever sees one datagram can copy it; the
// pre-shared key's MAC (datagram_mac.h) is what stops an on-path attacker.
// Hot path: a 16-byte compare, no allocation, no syscall.
#pragma once

#include <array>
#include <cstdint>

#include "proto/frame.h"

namespace ringfire::dataplane {

// TagFrame is one destination's TAG frame, encoded once when the tag is
// given out and appended by the port to each datagram sent there
// (TxDatagram::trailer).
struct TagFrame {
  std::array<std::byte, proto::kTagFrameBytes> bytes{};
  static TagFrame of(uint8_t session, uint64_t tag) {
    TagFrame t;
    proto::encode_tag_frame(session, tag, t.bytes.data());
    return t;
  }
};

// strip_tag checks that `datagram` ends in exactly `expected` (header and
// tag, compared without an early exit); on success *payload is the
// datagram without it.
inline bool strip_tag(const TagFrame& expected, proto::ConstBytes datagram, proto::ConstBytes* payload) {
  if (datagram.size() < proto::kTagFrameBytes) return false;
  const std::byte* tail = datagram.data() + datagram.size() - proto::kTagFrameBytes;
  const uint64_t diff = (proto::load_le64(tail) ^ proto::load_le64(expected.bytes.data())) |
                        (proto::load_le64(tail + 8) ^ proto::load_le64(expected.bytes.data() + 8));
  if (diff != 0) return false;
  *payload = datagram.first(datagram.size() - proto::kTagFrameBytes);
  return true;
}

}  // namespace ringfire::dataplane
