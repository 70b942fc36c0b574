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
    std::vector<std::byte> out(kFrameHeaderBytes + kHelloAuthBody + 64);
    switch (f.header.kind) {
      case FrameKind::kHello: {
        Hello m, back;
        if (decode_hello(f, &m) != DecodeError::kOk) break;
        out.resize(encode_hello(m, out));
        Frame g;
        REQUIRE(decode_frame(out, 64, &g) == DecodeError::kOk);
        REQUIRE(decode_hello(g, &back) == DecodeError::kOk);
        REQUIRE(back.first_wanted == m.first_wanted && back.flags == m.flags &&
                back.version == m.version && back.expected_schema == m.expected_schema &&
                back.nonce == m.nonce);
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
                back.session == m.session && back.data_ip == m.data_ip && back.features == m.features);
        break;
      }
      case FrameKind::kNak: {
        Nak m;
        if (decode_nak(f, &m) == DecodeError::kOk) REQUIRE(m.first <= m.last);
        NakRanges r, back;
        if (decode_nak_ranges(f, &r) == DecodeError::kOk) {
          for (uint32_t i = 0; i < r.count; ++i) {
            REQUIRE(r.ranges[i].first <= r.ranges[i].last);
            if (i > 0) REQUIRE(r.ranges[i].first > r.ranges[i - 1].last);
          }
          std::vector<std::byte> o(kFrameHeaderBytes + kMaxNakBody);
          o.resize(encode_nak_ranges(r, o));
          Frame g;
          REQUIRE(decode_frame(o, kMaxNakBody, &g) == DecodeError::kOk);
          REQUIRE(decode_nak_ranges(g, &back) == DecodeError::kOk);
          REQUIRE(back.count == r.count && back.repeat == r.repeat &&
                  back.ranges[r.count - 1].last == r.ranges[r.count - 1].last);
        }
        break;
      }
      case FrameKind::kHealth: {
        Health m, back;
        if (decode_health(f, &m) != DecodeError::kOk) break;
        out.resize(encode_health(m, out));
        Frame g;
        REQUIRE(decode_frame(out, kHealthBody, &g) == DecodeError::kOk);
        REQUIRE(decode_health(g, &back) == DecodeError::kOk);
        REQUIRE(back.next_seq == m.next_seq && back.rejected == m.rejected && back.held_high == m.held_high);
        // An older mirror's 64-byte report has no count: re-encoded, it carries 0.
        REQUIRE(back.has_udp_datagrams && back.udp_datagrams == (m.has_udp_datagrams ? m.udp_datagrams : 0));
        break;
      }
      case FrameKind::kAuth: {
        Auth m, back;
        if (decode_auth(f, &m) != DecodeError::kOk) break;
        std::vector<std::byte> o(kFrameHeaderBytes + kAuthSourceBody);
        o.resize(encode_auth(m, o));
        Frame g;
        REQUIRE(decode_frame(o, kAuthSourceBody, &g) == DecodeError::kOk);
        REQUIRE(decode_auth(g, &back) == DecodeError::kOk);
        REQUIRE(back.step == m.step && back.proof == m.proof);
        break;
      }
      case FrameKind::kNode: {  // the stream mux's introduction: decode, re-encode, decode to the same
        Node m, back;
        if (decode_node(f, &m) != DecodeError::kOk) break;
        std::vector<std::byte> o(kFrameHeaderBytes + kNodeMaxBody);
        o.resize(encode_node(m, o));
        Frame g;
        REQUIRE(o.size() > kFrameHeaderBytes && decode_frame(o, kNodeMaxBody, &g) == DecodeError::kOk);
        REQUIRE(decode_node(g, &back) == DecodeError::kOk);
        REQUIRE(back.worker_id == m.worker_id && back.channel_epoch == m.channel_epoch &&
                back.channel_port == m.channel_port && back.flags == m.flags);
        REQUIRE(((m.flags & kNodeKeyed) == 0 || back.nonce == m.nonce) && ((m.flags & kNodeProof) == 0 || back.proof == m.proof));
        REQUIRE((m.flags & kNodeChannel) == 0 || (m.channel_epoch != 0 && m.channel_port != 0));
        break;
      }
      case FrameKind::kRefuse: {
        Refuse m;
        if (decode_refuse(f, &m) == DecodeError::kOk) REQUIRE(m.text.size() <= kMaxRefuseText);
        break;
      }
      case FrameKind::kPunch: {
        uint64_t token = 0, counter = 0;
        if (decode_punch(f, &token, &counter) == DecodeError::kOk) REQUIRE(token == f.header.seq);
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
