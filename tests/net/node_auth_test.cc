// node_auth_test.cc — the stream mux's keyed NODE exchange (PROTOCOL.md
// §5.1.1) against golden bytes: both NODE frames and both proofs, computed
// independently (Python's hmac and struct) from the document's layout.
#include <gtest/gtest.h>

#include <algorithm>

#include "net/auth.h"
#include "proto/frame.h"
#include "tests/proto/golden.h"

namespace ringfire::net {
namespace {

using proto::testing::hex;
using proto::testing::to_hex;

constexpr const char* kConnectorNode =
    "0f 00 0000 3c000000 0000000000000000 | 52464e58 0100 0300 8877665544332211 9900000000000000 b01d 0000 |"
    "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20";
constexpr const char* kProofA = "978681c753f18939e77e719de3242cf84f237091336286adf75ab32b18cbcddd";
constexpr const char* kAcceptorNode =
    "0f 00 0000 5c000000 0000000000000000 | 52464e58 0100 0600 1100ffeeddccbbaa 0000000000000000 0000 0000 |"
    "2122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f40 |"
    "978681c753f18939e77e719de3242cf84f237091336286adf75ab32b18cbcddd";
constexpr const char* kProofC = "9bbb783fa922643b4b5a7cdaa75f6f4529bb1844df4780f55ff196bca50cd872";

template <size_t N>
std::array<std::byte, N> array_of(const std::string& h) {
  std::array<std::byte, N> a{};
  const auto v = hex(h);
  std::copy_n(v.begin(), N, a.begin());
  return a;
}

TEST(NodeAuth, GoldenFramesAndProofs) {
  Psk psk;
  psk.key.assign(40, 'k');
  proto::Node c;
  c.flags = proto::kNodeChannel | proto::kNodeKeyed;
  c.worker_id = 0x1122334455667788;
  c.channel_epoch = 0x99;
  c.channel_port = 7600;
  for (int i = 0; i < 32; ++i) c.nonce[i] = std::byte(i + 1);
  std::vector<std::byte> cb(16 + proto::kNodeMaxBody);
  cb.resize(proto::encode_node(c, cb));
  EXPECT_EQ(to_hex(cb), to_hex(hex(kConnectorNode)));

  proto::Node a;
  a.flags = proto::kNodeKeyed | proto::kNodeProof;
  a.worker_id = 0xAABBCCDDEEFF0011;
  for (int i = 0; i < 32; ++i) a.nonce[i] = std::byte(0x21 + i);
  a.proof = node_accept_proof(psk, cb, a.nonce);
  EXPECT_EQ(to_hex(a.proof), to_hex(hex(kProofA)));
  std::vector<std::byte> ab(16 + proto::kNodeMaxBody);
  ab.resize(proto::encode_node(a, ab));
  EXPECT_EQ(to_hex(ab), to_hex(hex(kAcceptorNode)));
  EXPECT_EQ(to_hex(node_connect_proof(psk, cb, ab)), to_hex(hex(kProofC)));

  // Decoded back: nonce and proof where the flags say.
  proto::Frame f;
  ASSERT_EQ(proto::decode_frame(ab, proto::kNodeMaxBody, &f), proto::DecodeError::kOk);
  proto::Node back;
  ASSERT_EQ(proto::decode_node(f, &back), proto::DecodeError::kOk);
  EXPECT_EQ(back.nonce, a.nonce);
  EXPECT_EQ(back.proof, (array_of<32>(kProofA)));
  // Another key proves something else.
  Psk other;
  other.key.assign(40, 'o');
  EXPECT_FALSE(proofs_equal(node_accept_proof(other, cb, a.nonce), a.proof));
  // Granting the frame MAC (bit 3), the answer's flags are under proof_a: a
  // man in the middle that clears the bit leaves a proof the connector refuses.
  const uint16_t granted = proto::kNodeKeyed | proto::kNodeProof | proto::kNodeFrameMac;
  const Proof with_mac = node_accept_proof(psk, cb, a.nonce, granted);
  EXPECT_FALSE(proofs_equal(with_mac, a.proof));
  EXPECT_FALSE(proofs_equal(with_mac, node_accept_proof(psk, cb, a.nonce, granted & ~proto::kNodeFrameMac)));
  EXPECT_TRUE(proofs_equal(node_accept_proof(psk, cb, a.nonce, proto::kNodeKeyed | proto::kNodeProof), a.proof))
      << "without bit 3 the proof is an older acceptor's";
}

TEST(NodeAuth, MalformedKeyedNodes) {
  // A proof flag without the keyed one; a keyed body cut short of its nonce.
  auto body = hex("52464e58 0100 0400 0100000000000000 0000000000000000 0000 0000");
  std::vector<std::byte> frame(16);
  proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kNode, 0, 0, static_cast<uint32_t>(body.size()), 0},
                             frame.data());
  frame.insert(frame.end(), body.begin(), body.end());
  proto::Frame f;
  ASSERT_EQ(proto::decode_frame(frame, proto::kNodeMaxBody, &f), proto::DecodeError::kOk);
  proto::Node m;
  EXPECT_EQ(proto::decode_node(f, &m), proto::DecodeError::kBadValue);
  frame[16 + 6] = std::byte{0x02};  // keyed, but no nonce follows
  ASSERT_EQ(proto::decode_frame(frame, proto::kNodeMaxBody, &f), proto::DecodeError::kOk);
  EXPECT_EQ(proto::decode_node(f, &m), proto::DecodeError::kBadLength);
  // AUTH step 3 is 40 bytes, like step 2.
  proto::Auth a;
  a.step = proto::AuthStep::kNodeProof;
  std::vector<std::byte> ab(16 + proto::kAuthMirrorBody);
  ab.resize(proto::encode_auth(a, ab));
  EXPECT_EQ(ab.size(), 16 + proto::kAuthMirrorBody);
  ASSERT_EQ(proto::decode_frame(ab, 64, &f), proto::DecodeError::kOk);
  proto::Auth back;
  ASSERT_EQ(proto::decode_auth(f, &back), proto::DecodeError::kOk);
  EXPECT_EQ(back.step, proto::AuthStep::kNodeProof);
}

}  // namespace
}  // namespace ringfire::net
