// fuzz_frame.cc — libFuzzer target for the ring-mirroring frame decoders.
// Oracle: no sanitizer report, and every message that decodes re-encodes to
// a frame that decodes to the same value.
#include <cstdlib>
#include <vector>

#include "proto/frame.h"
#include "tests/fuzz/require.h"

using namespace ringfire::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ConstBytes in(reinterpret_cast<const std::byte*>(data), size);
  // Several frames may share one TCP read: walk them all.
  while (!in.empty()) {
    Frame f;
    if (decode_frame(in, 1 << 16, &f) != DecodeError::kOk) break;
    std::vector<std::byte> out(kFrameHeaderBytes + 64);
    switch (f.header.kind) {
      case FrameKind::kHello: {
        Hello m, back;
        if (decode_hello(f, &m) != DecodeError::kOk) break;
        out.resize(encode_hello(m, out));
        Frame g;
        REQUIRE(decode_frame(out, 64, &g) == DecodeError::kOk);
        REQUIRE(decode_hello(g, &back) == DecodeError::kOk);
        REQUIRE(back.first_wanted == m.first_wanted && back.flags == m.flags &&
                back.version == m.version && back.expected_schema == m.expected_schema);
        break;
      }
      case FrameKind::kGeometry: {
        Geometry m, back;
        if (decode_geometry(f, &m) != DecodeError::kOk) break;
        out.resize(encode_geometry(m, out));
        Frame g;
        REQUIRE(decode_frame(out, 64, &g) == DecodeError::kOk);
        REQUIRE(decode_geometry(g, &back) == DecodeError::kOk);
        REQUIRE(back.capacity == m.capacity && back.arena_size == m.arena_size &&
                back.schema_signature == m.schema_signature);
        break;
      }
      case FrameKind::kMulticast: {
        Multicast m, back;
        if (decode_multicast(f, &m) != DecodeError::kOk) break;
        out.resize(encode_multicast(m, out));
        Frame g;
        REQUIRE(decode_frame(out, 64, &g) == DecodeError::kOk);
        REQUIRE(decode_multicast(g, &back) == DecodeError::kOk);
        REQUIRE(back.group == m.group && back.port == m.port && back.token == m.token &&
                back.session == m.session && back.data_ip == m.data_ip);
        break;
      }
      case FrameKind::kNak: {
        Nak m;
        if (decode_nak(f, &m) == DecodeError::kOk) REQUIRE(m.first <= m.last);
        break;
      }
      case FrameKind::kData: {
        (void)check_fixed_data(f.header, 1 + (size % 200));
        if (BlobRecords::check(f, 4096) == DecodeError::kOk) {
          BlobRecords recs(f.body);
          size_t total = 0;
          for (uint16_t i = 0; i < f.header.count; ++i) total += 4 + recs.next().size();
          REQUIRE(total == f.body.size());
        }
        break;
      }
      default:
        (void)decode_empty(f, f.header.kind);
        break;
    }
    in = in.subspan(kFrameHeaderBytes + f.header.len);
  }
  return 0;
}
