// tcp_conn_test.cc — TcpConn::read_frames, the one loop every reader of a
// control connection runs: frames handed over in order, each consumed or
// left as the handler answers, a malformed or oversized frame reported
// with nothing of it handed over, and a handler that ends the connection
// left alone.
#include "net/tcp_conn.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "net/auth.h"
#include "net/frame_mac.h"
#include "proto/frame.h"

namespace ringfire::net {
namespace {

using Taken = TcpConn::Taken;
using Next = TcpConn::Next;

// frame: a frame of `kind` (NAK unless said: the kind does not matter here) with `body`.
std::vector<std::byte> frame(const std::string& body, proto::FrameKind kind = proto::FrameKind::kNak) {
  std::vector<std::byte> b(proto::kFrameHeaderBytes + body.size());
  proto::encode_frame_header(proto::FrameHeader{kind, 0, 0, static_cast<uint32_t>(body.size()), 0}, b.data());
  std::memcpy(b.data() + proto::kFrameHeaderBytes, body.data(), body.size());
  return b;
}

std::string body_of(const proto::Frame& f) {
  return std::string(reinterpret_cast<const char*>(f.body.data()), f.body.size());
}

struct Pair {
  int fds[2] = {-1, -1};
  std::unique_ptr<TcpConn> reader;
  Pair() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    reader = std::make_unique<TcpConn>(fds[1]);
  }
  ~Pair() { close(fds[0]); }
  void write(const std::vector<std::byte>& b) {
    ASSERT_EQ(::write(fds[0], b.data(), b.size()), static_cast<ssize_t>(b.size()));
  }
};

FrameLimits limits(uint32_t max_body) {
  FrameLimits l;
  l.allowed.fill(true);
  l.max_body.fill(max_body);
  return l;
}

TEST(TcpConnReadFrames, HandsEveryFrameInOrderAndConsumesWhatIsTaken) {
  Pair p;
  for (const char* b : {"one", "two", "three"}) p.write(frame(b));
  const std::vector<std::byte> four = frame("four");
  p.write(std::vector<std::byte>(four.begin(), four.begin() + 10));  // half a frame
  ASSERT_TRUE(p.reader->read_available());
  std::vector<std::string> seen;
  const Next n = p.reader->read_frames(limits(1024), [&](const proto::Frame& f, proto::ConstBytes plain) {
    seen.push_back(body_of(f));
    EXPECT_EQ(plain.size(), proto::kFrameHeaderBytes + f.body.size());
    return Taken::kNext;
  });
  EXPECT_EQ(n, Next::kNeedMore);
  EXPECT_EQ(seen, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_EQ(p.reader->buffered(), 10u);  // the half frame waits
}

TEST(TcpConnReadFrames, LeaveKeepsTheFrameAtTheFrontAndLastConsumesItThenStops) {
  Pair p;
  for (const char* b : {"one", "two", "three"}) p.write(frame(b));
  ASSERT_TRUE(p.reader->read_available());
  std::vector<std::string> seen;
  auto reader = [&](Taken at_two) {
    return [&seen, at_two](const proto::Frame& f, proto::ConstBytes) {
      seen.push_back(body_of(f));
      return body_of(f) == "two" ? at_two : Taken::kNext;
    };
  };
  EXPECT_EQ(p.reader->read_frames(limits(1024), reader(Taken::kLeave)), Next::kFrame);
  EXPECT_EQ(seen, (std::vector<std::string>{"one", "two"}));
  // "two" is still at the front: the next read starts with it.
  EXPECT_EQ(p.reader->read_frames(limits(1024), reader(Taken::kLast)), Next::kFrame);
  EXPECT_EQ(seen, (std::vector<std::string>{"one", "two", "two"}));
  // ...and was consumed, so "three" comes next.
  EXPECT_EQ(p.reader->read_frames(limits(1024), reader(Taken::kNext)), Next::kNeedMore);
  EXPECT_EQ(seen, (std::vector<std::string>{"one", "two", "two", "three"}));
  EXPECT_EQ(p.reader->buffered(), 0u);
}

TEST(TcpConnReadFrames, ABadFrameIsReportedAndNothingOfItHandedOver) {
  Pair p;
  p.write(frame("fine"));
  p.write(frame(std::string(100, 'x')));  // over the limit below
  p.write(frame("after"));
  ASSERT_TRUE(p.reader->read_available());
  std::vector<std::string> seen;
  const Next n = p.reader->read_frames(limits(64), [&](const proto::Frame& f, proto::ConstBytes) {
    seen.push_back(body_of(f));
    return Taken::kNext;
  });
  EXPECT_EQ(n, Next::kOversized);
  EXPECT_EQ(seen, (std::vector<std::string>{"fine"}));
  // Nothing of the bad frame was consumed: it and what follows are held.
  EXPECT_EQ(p.reader->buffered(), frame(std::string(100, 'x')).size() + frame("after").size());

  Pair q;
  std::vector<std::byte> junk = frame("junk");
  junk[0] = std::byte{0};  // kind 0: no frame is that
  q.write(junk);
  ASSERT_TRUE(q.reader->read_available());
  seen.clear();
  EXPECT_EQ(q.reader->read_frames(limits(1024), [&](const proto::Frame& f, proto::ConstBytes) {
    seen.push_back(body_of(f));
    return Taken::kNext;
  }), Next::kMalformed);
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(q.reader->buffered(), junk.size());
}

// A source that refused the handshake before its side of the MAC began
// sends its REFUSE unsealed (PROTOCOL.md §1.8.2): to a MACed reader that is
// a frame that fails its MAC (kForged, nothing handed over or consumed),
// which front_unsealed reads as it is — whole frames only.
TEST(TcpConnReadFrames, AnUnsealedRefuseFailsItsMacAndIsReadUnsealed) {
  Pair p;
  Psk k;
  k.key.assign(40, 'k');
  const std::vector<std::byte> h = frame("hello"), a1 = frame("step1"), a2 = frame("step2");
  p.reader->start_frame_mac(mirror_frame_keys(k, h, a1, a2, false));
  const std::vector<std::byte> refuse = frame("not you", proto::FrameKind::kRefuse);
  p.write(std::vector<std::byte>(refuse.begin(), refuse.end() - 2));  // all but its last two bytes
  ASSERT_TRUE(p.reader->read_available());
  proto::Frame f;
  EXPECT_FALSE(p.reader->front_unsealed(&f)) << "half a frame read as one";
  p.write(std::vector<std::byte>(refuse.end() - 2, refuse.end()));
  ASSERT_TRUE(p.reader->read_available());
  int calls = 0;
  EXPECT_EQ(p.reader->read_frames(limits(1024), [&](const proto::Frame&, proto::ConstBytes) {
    ++calls;
    return Taken::kNext;
  }), Next::kForged);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(p.reader->buffered(), refuse.size());
  ASSERT_TRUE(p.reader->front_unsealed(&f));
  EXPECT_EQ(f.header.kind, proto::FrameKind::kRefuse);
  EXPECT_EQ(body_of(f), "not you");
}

// On a connection whose frames are MACed, a frame left at the front
// (kLeave: no room for it yet) is read again whole on the next call, and
// its tag still verifies: the check is of the frame, once it is taken,
// not a counter moved by a look.
TEST(TcpConnReadFrames, OnAMacedConnectionALeftFrameIsReadAgainAndVerifies) {
  int fds[2] = {-1, -1};
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  TcpConn writer(fds[0]), reader(fds[1]);
  Psk k;
  k.key.assign(40, 'k');
  const std::vector<std::byte> h = frame("hello"), a1 = frame("step1"), a2 = frame("step2");
  writer.start_frame_mac(mirror_frame_keys(k, h, a1, a2, true));
  reader.start_frame_mac(mirror_frame_keys(k, h, a1, a2, false));
  for (const char* b : {"one", "two", "three"}) ASSERT_TRUE(writer.send(frame(b)));
  ASSERT_TRUE(reader.read_available());
  std::vector<std::string> seen;
  auto take = [&](Taken at_two) {
    return [&seen, at_two](const proto::Frame& f, proto::ConstBytes plain) {
      seen.push_back(body_of(f));
      EXPECT_EQ(plain.size(), proto::kFrameHeaderBytes + f.body.size()) << "the plain frame carries no tag";
      return body_of(f) == "two" ? at_two : Taken::kNext;
    };
  };
  EXPECT_EQ(reader.read_frames(limits(1024), take(Taken::kLeave)), Next::kFrame);
  EXPECT_EQ(reader.read_frames(limits(1024), take(Taken::kLeave)), Next::kFrame);  // looked at twice, still there
  EXPECT_EQ(reader.read_frames(limits(1024), take(Taken::kNext)), Next::kNeedMore);
  EXPECT_EQ(seen, (std::vector<std::string>{"one", "two", "two", "two", "three"}));
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(TcpConnReadFrames, AHandlerThatEndsTheConnectionIsLeftAlone) {
  Pair p;
  for (const char* b : {"one", "two"}) p.write(frame(b));
  ASSERT_TRUE(p.reader->read_available());
  int calls = 0;
  std::unique_ptr<TcpConn> conn = std::move(p.reader);
  TcpConn* raw = conn.get();
  std::vector<std::unique_ptr<TcpConn>> closing;  // as a node retires a connection
  EXPECT_EQ(raw->read_frames(limits(1024), [&](const proto::Frame&, proto::ConstBytes) {
    ++calls;
    closing.push_back(std::move(conn));
    closing.clear();  // gone: read_frames must touch nothing of it now
    return Taken::kGone;
  }), Next::kFrame);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace ringfire::net
