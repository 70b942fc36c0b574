// frame_test.cc — golden bytes for every ring-mirroring frame, round trips,
// and decoders that refuse every malformed input without reading past it.
#include "proto/frame.h"

#include <array>
#include <vector>

#include "gtest/gtest.h"
#include "tests/proto/golden.h"

namespace ringfire::proto {
namespace {

using testing::hex;
using testing::to_hex;

constexpr size_t kMaxBody = 1 << 20;

Frame decode(const std::vector<std::byte>& bytes) {
  Frame f;
  EXPECT_EQ(decode_frame(bytes, kMaxBody, &f), DecodeError::kOk);
  return f;
}

TEST(FrameGolden, Hello) {
  Hello m;
  m.first_wanted = 0x0102030405060708;
  m.flags = kHelloUnicastCapable | kHelloPrefersUnicast;
  m.expected_schema = 0xAABB;
  std::vector<std::byte> buf(64);
  buf.resize(encode_hello(m, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("01 00 0000 10000000 0807060504030201 |"
                                    "52464d52 0100 0300 bbaa000000000000")));
  Hello back;
  ASSERT_EQ(decode_hello(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.first_wanted, m.first_wanted);
  EXPECT_EQ(back.flags, m.flags);
  EXPECT_EQ(back.version, kProtocolVersion);
  EXPECT_EQ(back.expected_schema, 0xAABBu);
}

TEST(FrameGolden, Geometry) {
  Geometry g;
  g.first_seq = 5;
  g.capacity = 1024;
  g.slot_size = 64;
  g.ring_flags = 2;
  g.schema_signature = 0x1122334455667788;
  g.registry_size = 64;
  g.slots_offset = 0x2000;
  g.arena_offset = 0x42000;
  g.arena_size = 0;
  std::vector<std::byte> buf(128);
  buf.resize(encode_geometry(g, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("02 00 0000 38000000 0500000000000000 |"
                                    "0004000000000000 40000000 02000000 8877665544332211 |"
                                    "40000000 00000000 0020000000000000 0020040000000000 |"
                                    "0000000000000000")));
  Geometry back;
  ASSERT_EQ(decode_geometry(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.first_seq, 5u);
  EXPECT_EQ(back.capacity, 1024u);
  EXPECT_EQ(back.schema_signature, g.schema_signature);
  EXPECT_EQ(back.arena_offset, 0x42000u);
}

TEST(FrameGolden, Multicast) {
  Multicast m;
  m.group = 0xEFFF0001;  // 239.255.0.1
  m.port = 7400;
  m.mtu = 1472;
  m.ttl = 1;
  m.session = 7;
  m.token = 0x0123456789ABCDEF;
  m.data_ip = 0xC6120165;  // 198.18.1.101
  m.features = kFeatureTag;
  m.tag = 0x1122334455667788;
  std::vector<std::byte> buf(64);
  buf.resize(encode_multicast(m, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("07 00 0000 20000000 0000000000000000 |"
                                    "efff0001 e81c c005 01 07 1000 efcdab8967452301 c6120165 8877665544332211")));
  Multicast back;
  ASSERT_EQ(decode_multicast(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.group, m.group);
  EXPECT_EQ(back.port, 7400);
  EXPECT_EQ(back.mtu, 1472);
  EXPECT_EQ(back.session, 7);
  EXPECT_EQ(back.token, m.token);
  EXPECT_EQ(back.data_ip, m.data_ip);
  EXPECT_EQ(back.features, kFeatureTag);
  EXPECT_EQ(back.tag, m.tag);
}

TEST(FrameGolden, MulticastFromASourceBeforeTagsHasNone) {
  // The 24-byte body of sources before the datagram tag.
  const auto old = hex("07 00 0000 18000000 0000000000000000 |"
                       "efff0001 e81c c005 01 07 0000 efcdab8967452301 c6120165");
  Multicast back;
  back.tag = 1;
  ASSERT_EQ(decode_multicast(decode(old), &back), DecodeError::kOk);
  EXPECT_EQ(back.data_ip, 0xC6120165u);
  EXPECT_EQ(back.tag, 0u);
}

TEST(FrameGolden, AGrantedTagOfZeroIsRefused) {
  // Feature bit 4 with a zero tag: a tag anyone would guess.
  const auto zero = hex("07 00 0000 20000000 0000000000000000 |"
                        "efff0001 e81c c005 01 07 1000 efcdab8967452301 c6120165 0000000000000000");
  Multicast back;
  EXPECT_EQ(decode_multicast(decode(zero), &back), DecodeError::kBadValue);
}

TEST(FrameGolden, TagFrame) {
  std::array<std::byte, kTagFrameBytes> buf{};
  encode_tag_frame(9, 0x0102030405060708, buf.data());
  EXPECT_EQ(to_hex(buf), to_hex(hex("12 09 0000 00000000 0807060504030201")));
  EXPECT_STREQ(frame_kind_name(FrameKind::kTag), "TAG");
}

TEST(FrameGolden, MulticastFromAnOlderSourceHasNoDataAddress) {
  // The 20-byte body that sources sent before data_ip existed.
  const auto old = hex("07 00 0000 14000000 0000000000000000 |"
                       "00000000 e91c c005 01 07 0000 efcdab8967452301");
  Multicast back;
  back.data_ip = 1;
  ASSERT_EQ(decode_multicast(decode(old), &back), DecodeError::kOk);
  EXPECT_EQ(back.group, 0u);
  EXPECT_EQ(back.port, 7401);
  EXPECT_EQ(back.data_ip, 0u);  // punch the TCP peer
}

TEST(FrameGolden, DataHeaderCarriesTheSessionInFlags) {
  std::array<std::byte, 16> buf{};
  encode_data_header(buf.data(), 100, 2, 128, 9);
  EXPECT_EQ(to_hex(buf), to_hex(hex("03 09 0200 80000000 6400000000000000")));
  FrameHeader h;
  ASSERT_EQ(decode_frame_header(buf, kMaxBody, &h), DecodeError::kOk);
  EXPECT_EQ(check_fixed_data(h, 64), DecodeError::kOk);
  EXPECT_EQ(check_fixed_data(h, 63), DecodeError::kBadLength);
}

TEST(FrameGolden, GapHeartbeatNakPunch) {
  std::vector<std::byte> buf(64);
  buf.resize(encode_gap(77, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("04 00 0000 00000000 4d00000000000000")));
  EXPECT_EQ(decode_empty(decode(buf), FrameKind::kGap), DecodeError::kOk);

  buf.assign(64, std::byte{});
  buf.resize(encode_heartbeat(78, 9, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("05 09 0000 00000000 4e00000000000000")));

  buf.assign(64, std::byte{});
  buf.resize(encode_nak(Nak{10, 12}, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("06 00 0000 08000000 0a00000000000000 0c00000000000000")));
  Nak nak;
  ASSERT_EQ(decode_nak(decode(buf), &nak), DecodeError::kOk);
  EXPECT_EQ(nak.first, 10u);
  EXPECT_EQ(nak.last, 12u);

  buf.assign(64, std::byte{});
  buf.resize(encode_punch(0xDEADBEEF, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("08 00 0000 00000000 efbeadde00000000")));
}

TEST(FrameDecode, RejectsKindZeroAndOversizedBodiesAndPassesLaterKindsToTheCaller) {
  auto buf = hex("00 00 0000 00000000 0000000000000000");
  FrameHeader h;
  EXPECT_EQ(decode_frame_header(buf, kMaxBody, &h), DecodeError::kBadKind);
  // A kind this build does not know decodes, and known_kind says so: TCP
  // receivers skip it, UDP receivers drop the datagram.
  buf = hex("2a 00 0000 00000000 0000000000000000");
  ASSERT_EQ(decode_frame_header(buf, kMaxBody, &h), DecodeError::kOk);
  EXPECT_FALSE(known_kind(h.kind));
  EXPECT_STREQ(frame_kind_name(h.kind), "unknown");
  EXPECT_TRUE(known_kind(FrameKind::kRefuse));
  buf = hex("03 00 0100 ffffffff 0000000000000000");
  EXPECT_EQ(decode_frame_header(buf, kMaxBody, &h), DecodeError::kTooLarge);
}

TEST(FrameGolden, HelloWithAChallengeCarriesTheNonceAfterTheFixedBody) {
  Hello m;
  m.flags = kHelloAuth | kHelloHealth | kHelloMultiNak;
  for (size_t i = 0; i < m.nonce.size(); ++i) m.nonce[i] = std::byte(i);
  std::vector<std::byte> buf(128);
  buf.resize(encode_hello(m, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("01 00 0000 30000000 0000000000000000 |"
                                    "52464d52 0100 3800 0000000000000000 |"
                                    "000102030405060708090a0b0c0d0e0f 101112131415161718191a1b1c1d1e1f")));
  Hello back;
  ASSERT_EQ(decode_hello(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.nonce, m.nonce);
  // The flag without the nonce is malformed; flags are u16: bit 8 is kept.
  buf.resize(16 + 16);
  store_le32(buf.data() + 4, 16);
  EXPECT_EQ(decode_hello(decode(buf), &back), DecodeError::kBadLength);
  Hello high;
  high.flags = 1u << 9;  // unknown: kept, and nothing follows for it
  buf.assign(64, std::byte{});
  buf.resize(encode_hello(high, buf));
  ASSERT_EQ(buf.size(), 16u + kHelloBody);
  ASSERT_EQ(decode_hello(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.flags, 1u << 9);
  EXPECT_EQ(std::to_integer<int>(buf[16 + 7]), 2);  // the high byte of flags, at body offset 7
}

TEST(FrameGolden, HelloWithAChannelTokenCarriesItAfterTheChallengeOrTheFixedBody) {
  Hello m;
  m.flags = kHelloChannel;
  m.channel_token = 0x0807060504030201;
  std::vector<std::byte> buf(128);
  buf.resize(encode_hello(m, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("01 00 0000 18000000 0000000000000000 |"
                                    "52464d52 0100 0001 0000000000000000 | 0102030405060708")));
  Hello back;
  ASSERT_EQ(decode_hello(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.channel_token, m.channel_token);
  m.flags |= kHelloAuth;
  for (size_t i = 0; i < m.nonce.size(); ++i) m.nonce[i] = std::byte(0xA0 + i);
  buf.assign(128, std::byte{});
  buf.resize(encode_hello(m, buf));
  ASSERT_EQ(buf.size(), 16u + kHelloMaxBody);
  ASSERT_EQ(decode_hello(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.nonce, m.nonce);
  EXPECT_EQ(back.channel_token, m.channel_token);
  EXPECT_EQ(std::to_integer<int>(buf[16 + 48]), 0x01);  // the token's first byte, after the challenge
  // The flag without room for the token is taken as unset.
  buf.resize(16 + kHelloAuthBody + 4);
  store_le32(buf.data() + 4, kHelloAuthBody + 4);
  ASSERT_EQ(decode_hello(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.flags & kHelloChannel, 0u);
  EXPECT_EQ(back.channel_token, 0u);
  EXPECT_EQ(back.nonce, m.nonce);
}

TEST(FrameGolden, MulticastFeaturesLiveInTheFormerReservedField) {
  Multicast m;
  m.group = 0xEFFF0001;
  m.port = 7401;
  m.session = 3;
  m.features = kFeatureMultiNak | kFeatureHealth | kFeatureMac;
  std::vector<std::byte> buf(64);
  buf.resize(encode_multicast(m, buf));
  EXPECT_EQ(to_hex(std::span(buf).subspan(16 + 8, 4)), to_hex(hex("00 03 0700")));
  Multicast back;
  ASSERT_EQ(decode_multicast(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.features, m.features);
}

TEST(FrameGolden, MultiRangeNak) {
  NakRanges r;
  r.push(Nak{10, 12});
  r.push(Nak{20, 20});
  r.push(Nak{30, 31});
  std::vector<std::byte> buf(128);
  buf.resize(encode_nak_ranges(r, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("06 00 0000 28000000 0a00000000000000 0c00000000000000 |"
                                    "1400000000000000 1400000000000000 1e00000000000000 1f00000000000000")));
  NakRanges back;
  ASSERT_EQ(decode_nak_ranges(decode(buf), &back), DecodeError::kOk);
  ASSERT_EQ(back.count, 3u);
  EXPECT_EQ(back.ranges[2].last, 31u);
  // A plain NAK decodes as one range; the single-range decoder refuses more.
  Nak one;
  EXPECT_EQ(decode_nak(decode(buf), &one), DecodeError::kBadLength);
  // Out of order or overlapping ranges, and a ragged length, are refused.
  store_le64(buf.data() + 24, 12);  // second range starts at the first's last
  EXPECT_EQ(decode_nak_ranges(decode(buf), &back), DecodeError::kBadValue);
  buf.resize(16 + 16);
  store_le32(buf.data() + 4, 16);
  EXPECT_EQ(decode_nak_ranges(decode(buf), &back), DecodeError::kBadLength);
}

TEST(FrameGolden, Health) {
  Health h;
  h.report = 7;
  h.next_seq = 100;
  h.known_end = 110;
  h.holes = 2;
  h.held = 3;
  h.held_high = 9;
  h.naks = 4;
  h.gap_records = 5;
  h.rx_drops = 6;
  h.rejected = 8;
  h.udp_datagrams = 0x1234;
  std::vector<std::byte> buf(128);
  buf.resize(encode_health(h, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("0a 00 0000 48000000 0700000000000000 |"
                                    "6400000000000000 6e00000000000000 02000000 03000000 09000000 00000000 |"
                                    "0400000000000000 0500000000000000 0600000000000000 0800000000000000 |"
                                    "3412000000000000")));
  Health back;
  ASSERT_EQ(decode_health(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.held_high, 9u);
  EXPECT_EQ(back.rejected, 8u);
  EXPECT_TRUE(back.has_udp_datagrams);
  EXPECT_EQ(back.udp_datagrams, 0x1234u);
}

// An older mirror's 64-byte report decodes without the datagram count (a
// source then leaves that mirror's copies as configured); 56 bytes is short.
TEST(FrameGolden, HealthOfAnOlderMirror) {
  std::vector<std::byte> buf = hex("0a 00 0000 40000000 0700000000000000 |"
                                   "6400000000000000 6e00000000000000 02000000 03000000 09000000 00000000 |"
                                   "0400000000000000 0500000000000000 0600000000000000 0800000000000000");
  Health back;
  back.udp_datagrams = 99;
  ASSERT_EQ(decode_health(decode(buf), &back), DecodeError::kOk);
  EXPECT_FALSE(back.has_udp_datagrams);
  EXPECT_EQ(back.udp_datagrams, 0u);
  EXPECT_EQ(back.rejected, 8u);
  std::vector<std::byte> short_body = hex("0a 00 0000 38000000 0700000000000000 |"
                                          "6400000000000000 6e00000000000000 02000000 03000000 09000000 00000000 |"
                                          "0400000000000000 0500000000000000 0600000000000000");
  EXPECT_EQ(decode_health(decode(short_body), &back), DecodeError::kBadLength);
}

TEST(FrameGolden, AuthBothSteps) {
  Auth a;
  a.step = AuthStep::kSourceProof;
  a.nonce.fill(std::byte{0x11});
  a.salt.fill(std::byte{0x22});
  a.proof.fill(std::byte{0x33});
  std::vector<std::byte> buf(256);
  buf.resize(encode_auth(a, buf));
  ASSERT_EQ(buf.size(), 16 + kAuthSourceBody);
  EXPECT_EQ(to_hex(std::span(buf).first(24)), to_hex(hex("0b 00 0000 68000000 0000000000000000 01 00000000000000")));
  EXPECT_EQ(std::to_integer<int>(buf[24]), 0x11);
  EXPECT_EQ(std::to_integer<int>(buf[24 + 32]), 0x22);
  EXPECT_EQ(std::to_integer<int>(buf[24 + 64]), 0x33);
  Auth back;
  ASSERT_EQ(decode_auth(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.salt, a.salt);
  EXPECT_EQ(back.flags, 0);
  // Step 1 answering HELLO bit 7: flags bit 0 at byte 1 of the body.
  a.flags = kAuthFrameMac;
  buf.assign(256, std::byte{});
  buf.resize(encode_auth(a, buf));
  EXPECT_EQ(to_hex(std::span(buf).first(24)), to_hex(hex("0b 00 0000 68000000 0000000000000000 01 01 000000000000")));
  ASSERT_EQ(decode_auth(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.flags, kAuthFrameMac);
  a.flags = 0;
  a.step = AuthStep::kMirrorProof;
  buf.assign(256, std::byte{});
  buf.resize(encode_auth(a, buf));
  EXPECT_EQ(buf.size(), 16 + kAuthMirrorBody);
  ASSERT_EQ(decode_auth(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.step, AuthStep::kMirrorProof);
  EXPECT_EQ(back.proof, a.proof);
  buf[16] = std::byte{9};
  EXPECT_EQ(decode_auth(decode(buf), &back), DecodeError::kBadValue);
}

TEST(FrameGolden, RefuseCarriesAReasonAndText) {
  std::vector<std::byte> buf(256);
  buf.resize(encode_refuse(Refuse{RefuseReason::kSchema, "no"}, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("0d 00 0000 06000000 0000000000000000 0300 0000 6e6f")));
  Refuse back;
  ASSERT_EQ(decode_refuse(decode(buf), &back), DecodeError::kOk);
  EXPECT_EQ(back.reason, RefuseReason::kSchema);
  EXPECT_EQ(back.text, "no");
  // A text longer than 200 bytes is cut when encoding.
  const std::string long_text(300, 'x');
  buf.assign(512, std::byte{});
  buf.resize(encode_refuse(Refuse{RefuseReason::kBusy, long_text}, buf));
  EXPECT_EQ(buf.size(), 16u + 4 + kMaxRefuseText);
}

TEST(FrameGolden, CountedPunch) {
  std::vector<std::byte> buf(64);
  buf.resize(encode_punch_counted(0xDEADBEEF, 5, buf));
  EXPECT_EQ(to_hex(buf), to_hex(hex("08 00 0000 08000000 efbeadde00000000 0500000000000000")));
  uint64_t token = 0, counter = 0;
  ASSERT_EQ(decode_punch(decode(buf), &token, &counter), DecodeError::kOk);
  EXPECT_EQ(token, 0xDEADBEEFu);
  EXPECT_EQ(counter, 5u);
}

TEST(FrameDecode, EveryPrefixOfAValidFrameIsTruncated) {
  std::vector<std::byte> buf(128);
  Geometry g;
  g.capacity = 8;
  g.slot_size = 8;
  buf.resize(encode_geometry(g, buf));
  for (size_t n = 0; n < buf.size(); ++n) {
    Frame f;
    EXPECT_EQ(decode_frame(std::span(buf).first(n), kMaxBody, &f), DecodeError::kTruncated) << n;
  }
}

TEST(FrameDecode, BodyLengthsAndValuesAreChecked) {
  // A NAK whose last is before its first.
  auto buf = hex("06 00 0000 08000000 0a00000000000000 0900000000000000");
  Nak nak;
  EXPECT_EQ(decode_nak(decode(buf), &nak), DecodeError::kBadValue);
  // A NAK with a short body.
  buf = hex("06 00 0000 04000000 0a00000000000000 09000000");
  EXPECT_EQ(decode_nak(decode(buf), &nak), DecodeError::kBadLength);
  // A GEOMETRY with a capacity that is not a power of two.
  std::vector<std::byte> g(128);
  Geometry geo;
  geo.capacity = 1000;
  geo.slot_size = 8;
  g.resize(encode_geometry(geo, g));
  EXPECT_EQ(decode_geometry(decode(g), &geo), DecodeError::kBadValue);
  // A HELLO with the wrong magic.
  buf = hex("01 00 0000 10000000 0000000000000000 00000000 0100 0000 0000000000000000");
  Hello hello;
  EXPECT_EQ(decode_hello(decode(buf), &hello), DecodeError::kBadMagic);
  // A frame of the wrong kind handed to a decoder.
  EXPECT_EQ(decode_nak(decode(g), &nak), DecodeError::kBadKind);
}

TEST(FrameEncode, RefusesABufferTooSmall) {
  std::vector<std::byte> buf(20);
  EXPECT_EQ(encode_geometry(Geometry{}, buf), 0u);
  EXPECT_EQ(encode_nak(Nak{1, 2}, std::span(buf).first(23)), 0u);
  EXPECT_EQ(encode_gap(1, std::span(buf).first(15)), 0u);
}

TEST(BlobRecords, WalksLengthPrefixedRecordsAndRejectsMalformedBodies) {
  auto body = hex("03000000 616263 | 00000000 | 02000000 7879");
  std::vector<std::byte> buf(16 + body.size());
  encode_data_header(buf.data(), 40, 3, static_cast<uint32_t>(body.size()), 1);
  std::copy(body.begin(), body.end(), buf.begin() + 16);
  Frame f = decode(buf);
  ASSERT_EQ(BlobRecords::check(f, 100), DecodeError::kOk);
  BlobRecords recs(f.body);
  EXPECT_EQ(recs.next().size(), 3u);
  EXPECT_EQ(recs.next().size(), 0u);
  EXPECT_EQ(to_hex(recs.next()), "78 79");

  EXPECT_EQ(BlobRecords::check(f, 2), DecodeError::kTooLarge);
  Frame fewer = f;
  fewer.header.count = 2;
  EXPECT_EQ(BlobRecords::check(fewer, 100), DecodeError::kBadLength);  // trailing record
  Frame more = f;
  more.header.count = 4;
  EXPECT_EQ(BlobRecords::check(more, 100), DecodeError::kTruncated);
}

}  // namespace
}  // namespace ringfire::proto
