// auth_vectors_test.cc — PROTOCOL.md §1.8.3's worked examples: a keyed
// mirror handshake with the frame MAC (HELLO, both AUTH steps and their
// proofs, the data, punch and frame keys, the first two sealed frames, a
// sealed datagram and a keyed PUNCH) and a keyed NODE exchange that grants
// the frame MAC (both NODEs, both proofs, step 3, the frame keys). Every
// expected byte was computed independently of this code from the
// document's layouts (Python's hmac, struct, a SipHash-2-4 checked against
// the reference vectors, and the `cryptography` package's
// ChaCha20-Poly1305). The document's table quotes these constants: a change
// to the code's derivations fails here; a change to the table alone is a
// change to this file's constants too (keep them one).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/auth.h"
#include "net/datagram_mac.h"
#include "net/frame_mac.h"
#include "proto/frame.h"
#include "tests/proto/golden.h"

namespace ringfire::net {
namespace {

using proto::testing::hex;
using proto::testing::to_hex;

// The key file's 64 characters, as `ringfire keygen` writes them: the key
// is these ASCII bytes (never hex-decoded).
constexpr const char* kKeyText = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

constexpr const char* kHello =
    "01 00 0000 30000000 ffffffffffffffff | 52464d52 0100 b800 0000000000000000 |"
    "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20";
constexpr const char* kProofS = "a64507cd59e5dc8d7b6f3f2fa5ab1a87a02ad001b3540c31b94a7cafad2dbd84";
constexpr const char* kProofM = "24d38b14c6bf53e35d3ff05241d9259cfe3a5dc5eb5d7cb6235e6d8190d85581";
constexpr const char* kDataKey = "0804611fda2fd52b879c35b651366029";
constexpr const char* kPunchKey = "63dc7d6ab72e08e308ea83ed18743472";
constexpr const char* kSourceFrameKey = "c4d5227ab0d1dd55468b440e84e4684ebf0cf62333b94ab50a810808fb62d7ac";
constexpr const char* kMirrorFrameKey = "3bcf5762f1e21fefa09edcccdcee0fee0ba95087a7f83f5d28eee92bde7ab792";
// The source's first two sealed frames: a GAP (seq 100), then a TCP
// HEARTBEAT (seq 200); `len` 16 is the tag alone.
constexpr const char* kSealedGap = "04 00 0000 10000000 6400000000000000 | 988c488244f6858a5470c240e154bce6";
constexpr const char* kSealedHeartbeat = "05 00 0000 10000000 c800000000000000 | 8b82a5cc332c7435d524dccb6520323d";
// A UDP HEARTBEAT (session 7, seq 1000) under the data key; a keyed PUNCH
// (token 0x0123456789abcdef, counter 1) under the punch key.
constexpr const char* kSealedDatagram = "05 07 0000 00000000 e803000000000000 | 0c 07 0000 00000000 b61e107be074212f";
constexpr const char* kSealedPunch =
    "08 00 0000 08000000 efcdab8967452301 0100000000000000 | 0c 00 0000 00000000 ce68985792f40172";

constexpr const char* kConnectorNode =
    "0f 00 0000 3c000000 0000000000000000 | 52464e58 0100 0b00 8877665544332211 9900000000000000 b01d 0000 |"
    "6162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f80";
constexpr const char* kProofA = "12c1c8224397d85eab90754dfe74b26084f0f616aa306023e003a5616f66e53a";
constexpr const char* kProofC = "98c25eb65debd807937f009977332ba28debfc836049a3fc13099567e6739a46";
constexpr const char* kConnectorFrameKey = "fcf1b1f07d4376e7ce404b46e0fc5899745d200af5b20f996e7de5c79a8fd5cf";
constexpr const char* kAcceptorFrameKey = "ed4b365de51a2e8fb3329735a349ad2dea1bc12e1012ddf02fb3c0a1a0f5658c";

Psk key() {
  Psk k;
  const std::string text = kKeyText;
  k.key.assign(text.begin(), text.end());
  return k;
}

Nonce counting_from(int first) {
  Nonce n;
  for (int i = 0; i < 32; ++i) n[i] = std::byte(first + i);
  return n;
}

template <typename Bytes>
std::string hex_of(const Bytes& b) {
  return to_hex({reinterpret_cast<const std::byte*>(b.data()), b.size()});
}

std::string expected(const std::string& h) { return to_hex(hex(h)); }

std::vector<std::byte> auth_frame(const proto::Auth& a, size_t body) {
  std::vector<std::byte> f(proto::kFrameHeaderBytes + body);
  f.resize(proto::encode_auth(a, f));
  return f;
}

// sealed: `header` (whose len counts the tag) and its tag, as FrameMac seals it.
std::vector<std::byte> sealed(FrameMac& mac, const proto::FrameHeader& header) {
  std::vector<std::byte> f(proto::kFrameHeaderBytes + kFrameTagBytes);
  proto::encode_frame_header(header, f.data());
  mac.seal({f.data(), proto::kFrameHeaderBytes}, f.data() + proto::kFrameHeaderBytes);
  return f;
}

TEST(AuthVectors, MirrorHandshakeKeysAndSeals) {
  const Psk psk = key();
  proto::Hello h;
  h.first_wanted = proto::kHelloOldest;
  h.flags = proto::kHelloHealth | proto::kHelloMultiNak | proto::kHelloAuth | proto::kHelloFrameMac;
  h.nonce = counting_from(0x01);
  std::vector<std::byte> hello(proto::kFrameHeaderBytes + proto::kHelloMaxBody);
  hello.resize(proto::encode_hello(h, hello));
  EXPECT_EQ(to_hex(hello), expected(kHello));

  proto::Auth step1;
  step1.step = proto::AuthStep::kSourceProof;
  step1.flags = proto::kAuthFrameMac;
  step1.nonce = counting_from(0x21);
  step1.salt = counting_from(0x41);
  step1.proof = source_proof(psk, hello, step1.nonce, step1.salt, step1.flags);
  EXPECT_EQ(hex_of(step1.proof), expected(kProofS));
  const std::vector<std::byte> auth1 = auth_frame(step1, proto::kAuthSourceBody);
  EXPECT_EQ(to_hex(auth1), expected(std::string("0b 00 0000 68000000 0000000000000000 | 01 01 000000000000 |") +
                                    hex_of(step1.nonce) + hex_of(step1.salt) + kProofS));

  proto::Auth step2;
  step2.step = proto::AuthStep::kMirrorProof;
  step2.proof = mirror_proof(psk, hello, auth1);
  EXPECT_EQ(hex_of(step2.proof), expected(kProofM));
  const std::vector<std::byte> auth2 = auth_frame(step2, proto::kAuthMirrorBody);
  EXPECT_EQ(to_hex(auth2), expected(std::string("0b 00 0000 28000000 0000000000000000 | 02 00 000000000000 |") + kProofM));

  EXPECT_EQ(hex_of(data_key(psk, step1.salt).bytes), expected(kDataKey));
  EXPECT_EQ(hex_of(punch_key(psk, h.nonce, step1.nonce).bytes), expected(kPunchKey));
  const FrameKeys source = mirror_frame_keys(psk, hello, auth1, auth2, true);
  const FrameKeys mirror = mirror_frame_keys(psk, hello, auth1, auth2, false);
  EXPECT_EQ(hex_of(source.send.bytes), expected(kSourceFrameKey));
  EXPECT_EQ(hex_of(source.recv.bytes), expected(kMirrorFrameKey));
  EXPECT_EQ(hex_of(mirror.send.bytes), expected(kMirrorFrameKey));

  // The frame counter: 0 for the first sealed frame, 1 for the next.
  FrameMac out(source.send);
  EXPECT_EQ(to_hex(sealed(out, {proto::FrameKind::kGap, 0, 0, 16, 100})), expected(kSealedGap));
  EXPECT_EQ(to_hex(sealed(out, {proto::FrameKind::kHeartbeat, 0, 0, 16, 200})), expected(kSealedHeartbeat));

  std::vector<std::byte> dgram(64);
  size_t n = proto::encode_heartbeat(1000, 7, dgram);
  n = seal(data_key(psk, step1.salt), dgram.data(), n, 7);
  EXPECT_EQ(to_hex({dgram.data(), n}), expected(kSealedDatagram));
  std::vector<std::byte> punch(64);
  n = proto::encode_punch_counted(0x0123456789abcdef, 1, punch);
  n = seal(punch_key(psk, h.nonce, step1.nonce), punch.data(), n, 0);
  EXPECT_EQ(to_hex({punch.data(), n}), expected(kSealedPunch));
}

TEST(AuthVectors, NodeExchangeGrantingTheFrameMac) {
  const Psk psk = key();
  proto::Node c;
  c.flags = proto::kNodeChannel | proto::kNodeKeyed | proto::kNodeFrameMac;
  c.worker_id = 0x1122334455667788;
  c.channel_epoch = 0x99;
  c.channel_port = 7600;
  c.nonce = counting_from(0x61);
  std::vector<std::byte> cnode(proto::kFrameHeaderBytes + proto::kNodeMaxBody);
  cnode.resize(proto::encode_node(c, cnode));
  EXPECT_EQ(to_hex(cnode), expected(kConnectorNode));

  proto::Node a;
  a.flags = proto::kNodeKeyed | proto::kNodeProof | proto::kNodeFrameMac;
  a.worker_id = 0xAABBCCDDEEFF0011;
  a.nonce = counting_from(0x81);
  a.proof = node_accept_proof(psk, cnode, a.nonce, a.flags);
  EXPECT_EQ(hex_of(a.proof), expected(kProofA));
  std::vector<std::byte> anode(proto::kFrameHeaderBytes + proto::kNodeMaxBody);
  anode.resize(proto::encode_node(a, anode));
  EXPECT_EQ(to_hex(anode), expected(std::string("0f 00 0000 5c000000 0000000000000000 |"
                                                "52464e58 0100 0e00 1100ffeeddccbbaa 0000000000000000 0000 0000 |") +
                                    hex_of(a.nonce) + kProofA));

  proto::Auth step3;
  step3.step = proto::AuthStep::kNodeProof;
  step3.proof = node_connect_proof(psk, cnode, anode);
  EXPECT_EQ(hex_of(step3.proof), expected(kProofC));
  const std::vector<std::byte> auth3 = auth_frame(step3, proto::kAuthMirrorBody);
  EXPECT_EQ(to_hex(auth3), expected(std::string("0b 00 0000 28000000 0000000000000000 | 03 00 000000000000 |") + kProofC));
  const FrameKeys connector = node_frame_keys(psk, cnode, anode, auth3, true);
  EXPECT_EQ(hex_of(connector.send.bytes), expected(kConnectorFrameKey));
  EXPECT_EQ(hex_of(connector.recv.bytes), expected(kAcceptorFrameKey));
}

}  // namespace
}  // namespace ringfire::net
