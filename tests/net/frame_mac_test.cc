// frame_mac_test.cc — the control frame MAC (PROTOCOL.md §1.8.2) through
// net::TcpConn over a socket pair: sealed frames written in any pieces arrive
// whole with their bodies; a frame forged, altered, replayed, reordered or
// dropped on the wire fails (kForged) before anything reads it; and the two
// directions' keys differ, as do two connections'.
#include "net/frame_mac.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "net/auth.h"
#include "net/tcp_conn.h"
#include "proto/frame.h"

namespace ringfire::net {
namespace {

Psk key() {
  Psk k;
  k.key.assign(40, 'k');
  return k;
}


// frame: a NAK-kind frame with `body` (the kind does not matter to the MAC).
std::vector<std::byte> frame(const std::string& body, uint64_t seq = 0) {
  std::vector<std::byte> b(proto::kFrameHeaderBytes + body.size());
  proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kNak, 0, 0, static_cast<uint32_t>(body.size()), seq},
                             b.data());
  std::memcpy(b.data() + proto::kFrameHeaderBytes, body.data(), body.size());
  return b;
}

std::string hex_of(const std::byte* b, size_t n = net::kFrameTagBytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[std::to_integer<int>(b[i]) >> 4];
    out += digits[std::to_integer<int>(b[i]) & 15];
  }
  return out;
}

struct Pair {
  int fds[2] = {-1, -1};
  std::unique_ptr<net::TcpConn> a, b;
  int raw_b = -1;  // b's socket, for reading what a put on the wire
  Pair() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    a = std::make_unique<net::TcpConn>(fds[0]);
    b = std::make_unique<net::TcpConn>(fds[1]);
    const std::vector<std::byte> h = frame("hello"), a1 = frame("step1"), a2 = frame("step2");
    a->start_frame_mac(mirror_frame_keys(key(), h, a1, a2, true));
    b->start_frame_mac(mirror_frame_keys(key(), h, a1, a2, false));
  }
  // next: the next frame b reads (after reading what is there).
  net::TcpConn::Next next(std::string* body) {
    b->read_available();
    proto::Frame f;
    size_t size = 0;
    const net::TcpConn::Next n = b->next_frame(&f, &size);
    if (n == net::TcpConn::Next::kFrame) {
      body->assign(reinterpret_cast<const char*>(f.body.data()), f.body.size());
      b->consume(size);
    }
    return n;
  }
  // wire: what a wrote, as b's socket holds it (taken off the socket).
  std::vector<std::byte> wire() {
    std::vector<std::byte> out(1 << 16);
    const ssize_t n = read(fds[1], out.data(), out.size());
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return out;
  }
  void inject(const std::vector<std::byte>& bytes) {
    ASSERT_EQ(write(fds[0], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
};

TEST(FrameMac, SealedFramesInAnyPiecesArriveWholeWithTheirBodies) {
  Pair p;
  const std::vector<std::byte> one = frame("first"), two = frame("second, longer"), three = frame("");
  // Header and body apart, then two frames in one call.
  ASSERT_TRUE(p.a->send({one.data(), proto::kFrameHeaderBytes}));
  ASSERT_TRUE(p.a->send({one.data() + proto::kFrameHeaderBytes, one.size() - proto::kFrameHeaderBytes}));
  std::vector<std::byte> both = two;
  both.insert(both.end(), three.begin(), three.end());
  ASSERT_TRUE(p.a->send(both));
  std::string body;
  {  // A frame looked at twice before it is consumed: checked once, the same plain frame both times.
    p.b->read_available();
    proto::Frame f1, f2;
    size_t s1 = 0, s2 = 0;
    ASSERT_EQ(p.b->next_frame(&f1, &s1), net::TcpConn::Next::kFrame);
    ASSERT_EQ(p.b->next_frame(&f2, &s2), net::TcpConn::Next::kFrame);
    EXPECT_EQ(s1, s2);
    EXPECT_EQ(s1, one.size() + net::kFrameTagBytes) << "consume() takes the tag too";
    EXPECT_EQ(f2.header.len, 5u) << "the header says the plain body";
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(f2.body.data()), f2.body.size()), "first");
    // The plain frame's bytes, header on: what a relay hands on (the original frame).
    EXPECT_EQ(std::memcmp(f2.body.data() - proto::kFrameHeaderBytes, one.data(), one.size()), 0);
    p.b->consume(s2);
  }
  ASSERT_EQ(p.next(&body), net::TcpConn::Next::kFrame);
  EXPECT_EQ(body, "second, longer");
  ASSERT_EQ(p.next(&body), net::TcpConn::Next::kFrame);
  EXPECT_EQ(body, "");
  EXPECT_EQ(p.next(&body), net::TcpConn::Next::kNeedMore);
  // Each went with a 16-byte tag its len counts.
  EXPECT_EQ(p.a->written(), one.size() + two.size() + three.size() + 3 * net::kFrameTagBytes);
}

// The wire, pinned (PROTOCOL.md §1.8.2's example): the first frame a
// direction seals under the key 00 01 .. 1f, a NAK-kind frame with body "abc".
TEST(FrameMac, ASealedFrameOnTheWire) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  net::TcpConn a(fds[0]);
  FrameKeys k;
  for (size_t i = 0; i < 32; ++i) k.send.bytes[i] = static_cast<unsigned char>(i);
  a.start_frame_mac(k);
  ASSERT_TRUE(a.send(frame("abc")));
  std::byte got[64];
  ASSERT_EQ(read(fds[1], got, sizeof(got)), 16 + 3 + 16);
  // header (len 0x13: body 3 + tag 16) | "abc" | tag
  EXPECT_EQ(hex_of(got, 35), "06000000130000000000000000000000"
                             "616263"
                             "b43ea01781ae5a1e78d3cd6cef027d22");
  close(fds[1]);
}

TEST(FrameMac, AFrameForgedAlteredReplayedReorderedOrDroppedFails) {
  for (const std::string how : {"forged", "altered", "replayed", "reordered", "dropped", "bare"}) {
    Pair p;
    ASSERT_TRUE(p.a->send(frame("one")));
    ASSERT_TRUE(p.a->send(frame("two")));
    std::vector<std::byte> w = p.wire();  // both sealed frames, off the socket
    const size_t each = proto::kFrameHeaderBytes + 3 + net::kFrameTagBytes;
    ASSERT_EQ(w.size(), 2 * each);
    const std::vector<std::byte> f1(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(each));
    const std::vector<std::byte> f2(w.begin() + static_cast<std::ptrdiff_t>(each), w.end());
    std::string body;
    if (how == "forged") {  // a stranger's frame with a tag of its own making
      std::vector<std::byte> f = frame("evil");
      f.resize(f.size() + net::kFrameTagBytes, std::byte{0x5a});
      const uint32_t len = 4 + net::kFrameTagBytes;
      std::memcpy(f.data() + 4, &len, 4);
      p.inject(f);
    } else if (how == "altered") {  // one bit of the body
      std::vector<std::byte> f = f1;
      f[proto::kFrameHeaderBytes] ^= std::byte{1};
      p.inject(f);
    } else if (how == "replayed") {  // the first frame, then again
      p.inject(f1);
      p.inject(f1);
      ASSERT_EQ(p.next(&body), net::TcpConn::Next::kFrame);
      EXPECT_EQ(body, "one");
    } else if (how == "reordered") {
      p.inject(f2);
      p.inject(f1);
    } else if (how == "dropped") {  // the second without the first
      p.inject(f2);
    } else {  // a frame with no tag at all, as an unkeyed peer sends
      p.inject(frame("bare"));
    }
    EXPECT_EQ(p.next(&body), net::TcpConn::Next::kForged) << how;
    EXPECT_EQ(p.next(&body), net::TcpConn::Next::kForged) << how << ": a second look verifies no better";
  }
}

TEST(FrameMac, TheDirectionsAndTheConnectionsHaveKeysOfTheirOwn) {
  const std::vector<std::byte> h = frame("hello"), a1 = frame("step1"), a2 = frame("step2"), other = frame("step1'");
  const FrameKeys source = mirror_frame_keys(key(), h, a1, a2, true);
  const FrameKeys mirror = mirror_frame_keys(key(), h, a1, a2, false);
  EXPECT_EQ(source.send.bytes, mirror.recv.bytes);
  EXPECT_EQ(source.recv.bytes, mirror.send.bytes);
  EXPECT_NE(source.send.bytes, source.recv.bytes);
  EXPECT_NE(mirror_frame_keys(key(), h, other, a2, true).send.bytes, source.send.bytes);
  Psk k2 = key();
  k2.key[0] = 'x';
  EXPECT_NE(mirror_frame_keys(k2, h, a1, a2, true).send.bytes, source.send.bytes);
  const FrameKeys conn = node_frame_keys(key(), h, a1, a2, true);
  EXPECT_EQ(conn.send.bytes, node_frame_keys(key(), h, a1, a2, false).recv.bytes);
  EXPECT_NE(conn.send.bytes, source.send.bytes) << "a node's keys are not a mirror's";
}

// The tag itself, pinned: ChaCha20-Poly1305 (IETF) over the frame as the
// additional data, the counter as the nonce — an independent
// implementation computes the same bytes.
TEST(FrameMac, TheTagIsChaCha20Poly1305OverTheFrameWithTheCounterAsNonce) {
  FrameKey k;
  for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = static_cast<unsigned char>(i);
  FrameMac a(k), b(k);
  const std::vector<std::byte> f = frame("abc");
  std::byte t0[net::kFrameTagBytes], t1[net::kFrameTagBytes];
  a.seal(f, t0);
  a.seal(f, t1);
  EXPECT_NE(std::memcmp(t0, t1, net::kFrameTagBytes), 0) << "the counter moves the tag";
  // Computed apart from libsodium (Python's cryptography, ChaCha20Poly1305
  // encrypting b"" with the frame as associated data).
  EXPECT_EQ(hex_of(t0), "291154078c7e45599cbda618fab853a2");
  EXPECT_EQ(hex_of(t1), "220d88174b8a8b37b60f083bbef8cd8c");
  EXPECT_FALSE(b.open(f, t1)) << "frame 1's tag is not frame 0's";
  EXPECT_TRUE(b.open(f, t0));
  EXPECT_TRUE(b.open(f, t1));
  EXPECT_EQ(b.frames(), 2u);
}

}  // namespace
}  // namespace ringfire::net
