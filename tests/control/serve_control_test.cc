// serve_control_test.cc — the source's control thread against hand-built
// frames from a client on loopback (the host's own, nothing leaves it):
// every refusal by reason, the PSK handshake both ways, NAKs by UDP once
// and by TCP for a repeat, HEALTH answered with the position, and the
// bounds a hostile peer meets (declared lengths, handshake deadline,
// connection cap, a peer that asks and never reads).
#include "control/serve_control.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "archive/archive_reader.h"
#include "archive/format.h"
#include "archive/recorder.h"
#include "gtest/gtest.h"
#include "net/auth.h"
#include "ring/check_record.h"
#include "ring/monotonic.h"
#include "ring/producer.h"
#include "tests/archive/recording.h"
#include "tests/ring/scoped_ring.h"
#include "tests/temp_dir.h"

namespace ringfire::control {
namespace {

using net::Endpoint;
using dataplane::ServeCommand;
using proto::Frame;
using proto::FrameKind;
using ring::testing::ScopedRing;

constexpr uint32_t kLoopback = 0x7F000001;

// Client is a mirror's end of a connection, driven by hand.
int small_window_connect(const Endpoint& to, int rcvbuf) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(to.port);
  a.sin_addr.s_addr = htonl(to.ip);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

class Client {
 public:
  explicit Client(const Endpoint& to) : conn_(*net::tcp_connect(to, 1000)) {}
  // A client whose receive buffer is `rcvbuf` from before its connect (its
  // window is that small from the start: the source's socket takes little).
  Client(const Endpoint& to, int rcvbuf) : conn_(small_window_connect(to, rcvbuf)) {}
  void send(const std::vector<std::byte>& b) { ASSERT_TRUE(conn_.send(b)); }
  void send_raw(proto::ConstBytes b) { ASSERT_TRUE(conn_.send(b)); }
  // next reads the next whole frame, pumping `ctl` meanwhile; false after
  // `ms` without one, or once the source has closed.
  bool next(ServeControl& ctl, Frame* f, int ms = 2000) {
    if (have_) {
      conn_.consume(size_);
      have_ = false;
    }
    for (int i = 0; i < ms / 5; ++i) {
      if (conn_.next_frame(f, &size_) == net::TcpConn::Next::kFrame) {
        have_ = true;
        return true;
      }
      ctl.poll(5000);
      closed_ = !conn_.read_available();
      if (closed_ && conn_.next_frame(f, &size_) != net::TcpConn::Next::kFrame) return false;
    }
    return false;
  }
  // closed_by pumps `ctl` until the source closes the connection.
  bool closed_by(ServeControl& ctl, int ms = 3000) {
    for (int i = 0; i < ms / 5; ++i) {
      ctl.poll(5000);
      if (!conn_.read_available()) return true;
      Frame f;
      size_t n;
      while (conn_.next_frame(&f, &n) == net::TcpConn::Next::kFrame) conn_.consume(n);
    }
    return false;
  }
  net::TcpConn& conn() { return conn_; }

 private:
  net::TcpConn conn_;
  size_t size_ = 0;
  bool have_ = false;
  bool closed_ = false;
};

std::vector<std::byte> hello_frame(uint16_t flags, uint64_t first = proto::kHelloOldest,
                                   const net::Nonce* nonce = nullptr) {
  proto::Hello h;
  h.first_wanted = first;
  h.flags = flags;
  if (nonce != nullptr) h.nonce = *nonce;
  std::vector<std::byte> b(128);
  b.resize(proto::encode_hello(h, b));
  return b;
}

std::vector<std::byte> nak_frame(std::initializer_list<proto::Nak> ranges, bool repeat = false) {
  proto::NakRanges r;
  for (const auto& n : ranges) r.push(n);
  r.repeat = repeat;
  std::vector<std::byte> b(proto::kFrameHeaderBytes + proto::kMaxNakBody);
  b.resize(proto::encode_nak_ranges(r, b));
  return b;
}

proto::Refuse refusal(const Frame& f) {
  proto::Refuse r;
  EXPECT_EQ(proto::decode_refuse(f, &r), proto::DecodeError::kOk);
  return r;
}

// expect_refused: the next frame `c` reads is a REFUSE for `why`, and the
// source closes the connection after it.
void expect_refused(Client& c, ServeControl& ctl, proto::RefuseReason why) {
  Frame f;
  ASSERT_TRUE(c.next(ctl, &f));
  ASSERT_EQ(f.header.kind, FrameKind::kRefuse);
  EXPECT_EQ(refusal(f).reason, why);
  EXPECT_TRUE(c.closed_by(ctl));
}

// segments_of: the first sequence of each segment the archive at `dir` lists.
std::vector<uint64_t> segments_of(const std::string& dir) {
  std::vector<uint64_t> out;
  auto r = archive::ArchiveReader::open(dir);
  if (r.ok()) {
    for (const auto& seg : r->catalog().segments) out.push_back(seg.first_seq);
  }
  return out;
}

class ServeControlTest : public ::testing::Test {
 protected:
  ServeControlTest() : ring_(ring::testing::fixed_ring(65536, 64)), producer_(*ring::Producer::attach(ring_.open())) {}

  std::unique_ptr<ServeControl> start(ServeControlConfig c = {}) {
    c.listen = Endpoint{kLoopback, 0};
    c.ring = ring_.name();
    if (!c.multicast && c.unicast_port == 0) c.multicast = Endpoint{0xEFFF0001, 7401};
    c.log = [this](const std::string& line) { log_.push_back(line); };
    auto s = ServeControl::start(c, &link_);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(*s);
  }
  void publish(int n) {
    for (int i = 0; i < n; ++i) {
      ring::fill_record({producer_.claim(), 64}, producer_.next_seq(), 0);
      producer_.commit();
    }
    link_.stats.next_to_send.store(producer_.next_seq());  // as if the worker had sent them
  }
  // handshake sends HELLO and reads GEOMETRY and MULTICAST.
  proto::Multicast handshake(Client& c, ServeControl& ctl, uint16_t flags = proto::kHelloHealth | proto::kHelloMultiNak) {
    c.send(hello_frame(flags));
    Frame f;
    EXPECT_TRUE(c.next(ctl, &f));
    EXPECT_EQ(f.header.kind, FrameKind::kGeometry);
    EXPECT_TRUE(c.next(ctl, &f));
    EXPECT_EQ(f.header.kind, FrameKind::kMulticast);
    proto::Multicast mc;
    EXPECT_EQ(proto::decode_multicast(f, &mc), proto::DecodeError::kOk);
    return mc;
  }
  std::vector<ServeCommand> commands() {
    std::vector<ServeCommand> out;
    ServeCommand c;
    while (link_.commands.try_pop(&c)) out.push_back(c);
    return out;
  }

  // segmented_archive: record_past_the_ring into `dir` in 1 MiB segments,
  // and the first sequence of each it lists: three at least, the second
  // below the ring's oldest record (34464), so that a GAP to it and one to
  // the ring's are told apart.
  void segmented_archive(const std::string& dir, std::vector<uint64_t>* segs) {
    ASSERT_NO_FATAL_FAILURE(record_past_the_ring(dir, 1u << 20));
    *segs = segments_of(dir);
    ASSERT_GE(segs->size(), 3u);
    ASSERT_LT((*segs)[1], 34464u) << "the second segment starts where the ring holds it";
  }

  // retained_archive: record_past_the_ring into `dir` in 1 MiB segments,
  // retention keeping `retain_bytes`; the archive's first record (in *first)
  // must lie in (above, below): what the test tells apart.
  void retained_archive(const std::string& dir, uint64_t retain_bytes, uint64_t above, uint64_t below,
                        uint64_t* first) {
    ASSERT_NO_FATAL_FAILURE(record_past_the_ring(dir, 1u << 20, retain_bytes));
    const std::vector<uint64_t> segs = segments_of(dir);
    ASSERT_FALSE(segs.empty());
    *first = segs[0];
    ASSERT_GT(*first, above) << "the archive's first record is not where the test needs it";
    ASSERT_LT(*first, below) << "the archive's first record is not where the test needs it";
  }

  // record_past_the_ring: an archive at `dir` of [0, 100000) while the
  // ring (65536 slots) laps: the ring keeps [34464, 100000).
  void record_past_the_ring(const std::string& dir, uint64_t segment_bytes, uint64_t retain_bytes = 0) {
    archive::RecordOptions o;
    o.dir = dir;
    o.layout.segment_bytes = segment_bytes;
    o.sink.retention.max_bytes = retain_bytes;
    o.sink.retention_every_ns = 1'000'000;  // on this test's clock (2 ms a poll)
    o.batch_bytes = 64u << 10;
    auto rec = archive::Recorder::open(ring_.open(), o);
    ASSERT_TRUE(rec.ok()) << rec.status();
    uint64_t now = 1;
    for (int round = 0; round < 10; ++round) {
      publish(10000);
      for (int idle = 0; idle < 3;) {
        now += 2'000'000;
        const bool quiet = (*rec)->poll(now) == 0;
        if (quiet) (*rec)->settle();
        idle = quiet && (*rec)->snapshot().lag == 0 ? idle + 1 : 0;
      }
    }
    ASSERT_TRUE((*rec)->flush().ok());
    ASSERT_EQ((*rec)->snapshot().recorded_end, 100000u);
  }

  // one_replay_place_taken: a serve of an archive past the ring (in `dir`)
  // with one replay place, and archive bytes at 512 KiB/s: the archive's
  // ~3 MB part would fit in loopback's socket buffers at once, at this
  // rate a mirror holding the place holds it past its slice. No mirror is
  // cut for reading slowly. `holder` (a small receive window) asked first
  // and holds the place.
  void one_replay_place_taken(const std::string& dir, std::unique_ptr<ServeControl>* ctl,
                              std::unique_ptr<Client>* holder) {
    ASSERT_NO_FATAL_FAILURE(record_past_the_ring(dir + "/a", 1u << 20));
    ServeControlConfig c;
    c.archive_dir = dir + "/a";
    c.archive_replays = 1;
    c.stall_timeout_ns = 600'000'000'000;
    c.archive_bytes_per_s = 512u << 10;
    *ctl = start(c);
    *holder = std::make_unique<Client>((*ctl)->listening(), 4096);
    (*holder)->send(hello_frame(proto::kHelloHealth | proto::kHelloTcpOnly));  // from the oldest
    for (int i = 0; i < 2000 && (*ctl)->stats().archive_replays == 0; ++i) (*ctl)->poll(1000);
    ASSERT_EQ((*ctl)->stats().archive_replays, 1u) << "the first mirror never took the place";
  }

  ScopedRing ring_;
  ring::Producer producer_;
  dataplane::ServeLink link_;
  std::vector<std::string> log_;
};

TEST_F(ServeControlTest, AHeaderDeclaringAHugeBodyIsRefusedBeforeAnyBodyByteArrives) {
  auto ctl = start();
  Client c(ctl->listening());
  std::byte h[16];
  proto::encode_frame_header(proto::FrameHeader{FrameKind::kHello, 0, 0, 64u << 20, 0}, h);
  c.send_raw(h);
  ASSERT_NO_FATAL_FAILURE(expect_refused(c, *ctl, proto::RefuseReason::kProtocol));
  EXPECT_EQ(ctl->stats().oversized, 1u);
  EXPECT_EQ(ctl->stats().mirrors, 0u);
}

TEST_F(ServeControlTest, AConnectionThatNeverCompletesItsHelloIsCutAtTheDeadline) {
  ServeControlConfig cfg;
  cfg.handshake_timeout_ns = 200'000'000;
  auto ctl = start(cfg);
  Client c(ctl->listening());
  auto hello = hello_frame(0);
  c.send_raw(proto::ConstBytes(hello).first(10));  // half a header, then silence
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f, 3000));
  ASSERT_EQ(f.header.kind, FrameKind::kRefuse);
  EXPECT_EQ(refusal(f).reason, proto::RefuseReason::kHandshakeTimeout);
  EXPECT_TRUE(c.closed_by(*ctl));
  EXPECT_EQ(ctl->stats().handshake_timeouts, 1u);
}

TEST_F(ServeControlTest, ConnectionsOverTheCapAreRefusedAsBusy) {
  ServeControlConfig cfg;
  cfg.max_connections = 2;
  auto ctl = start(cfg);
  Client a(ctl->listening()), b(ctl->listening());
  for (int i = 0; i < 20; ++i) ctl->poll(1000);
  Client c(ctl->listening());
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f));
  ASSERT_EQ(f.header.kind, FrameKind::kRefuse);
  EXPECT_EQ(refusal(f).reason, proto::RefuseReason::kBusy);
  EXPECT_EQ(ctl->stats().conn_cap, 1u);
  handshake(a, *ctl);  // the first two are served
  EXPECT_EQ(ctl->stats().mirrors, 1u);
}

// only_from (a stream-mux channel's serve): a connection from any other
// address is closed at accept, unanswered and counted; the one peer is served.
TEST_F(ServeControlTest, OnlyTheNamedPeerIsServed) {
  ServeControlConfig cfg;
  cfg.only_from = kLoopback;
  auto ctl = start(cfg);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in self{};
  self.sin_family = AF_INET;
  self.sin_addr.s_addr = htonl(0x7F000002);  // 127.0.0.2: another address
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof(self)), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(ctl->listening().port);
  to.sin_addr.s_addr = htonl(ctl->listening().ip);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  const auto hello = hello_frame(proto::kHelloHealth);
  ASSERT_EQ(write(fd, hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
  for (int i = 0; i < 20; ++i) ctl->poll(1000);
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::byte b[64];
  const ssize_t n = read(fd, b, sizeof(b));  // closed (a reset: its HELLO was never read), not answered
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "a stranger got an answer: " << n << " " << errno;
  close(fd);
  EXPECT_EQ(ctl->stats().foreign, 1u);
  Client peer(ctl->listening());  // from 127.0.0.1: the named peer
  handshake(peer, *ctl);
  EXPECT_EQ(ctl->stats().mirrors, 1u);
}

TEST_F(ServeControlTest, AMalformedFrameIsRefusedAndCounted) {
  auto ctl = start();
  Client c(ctl->listening());
  std::byte zero[16] = {};  // kind 0
  c.send_raw(zero);
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(refusal(f).reason, proto::RefuseReason::kProtocol);
  EXPECT_TRUE(c.closed_by(*ctl));
  EXPECT_EQ(ctl->stats().malformed, 1u);
}

TEST_F(ServeControlTest, NakRangesBeyondAMirrorsQueueAreDroppedAndCounted) {
  ServeControlConfig cfg;
  cfg.udp_repair_max = 0;
  auto ctl = start(cfg);
  Client c(ctl->listening());
  handshake(c, *ctl);
  publish(60000);
  // Five NAKs of 64 one-record ranges, two apart, in one write: 320 ranges
  // that cannot merge, against a queue of 256.
  std::vector<std::byte> all;
  for (int n = 0; n < 5; ++n) {
    proto::NakRanges r;
    r.repeat = true;
    for (int i = 0; i < 64; ++i) {
      const uint64_t s = 2 * (uint64_t(n) * 64 + i);
      r.push(proto::Nak{s, s});
    }
    std::vector<std::byte> b(16 + proto::kMaxNakBody);
    b.resize(proto::encode_nak_ranges(r, b));
    all.insert(all.end(), b.begin(), b.end());
  }
  c.send(all);
  for (int i = 0; i < 20; ++i) ctl->poll(1000);
  EXPECT_EQ(ctl->stats().nak_ranges, 320u);
  EXPECT_EQ(ctl->stats().nak_dropped, 320u - RepairQueue::kMaxRanges);
  EXPECT_EQ(ctl->stats().mirrors, 1u);  // the session goes on; the mirror asks again
}

TEST_F(ServeControlTest, AMalformedHelloAndASchemaMismatchAreRefusedWithTheirReason) {
  auto ctl = start();
  Client a(ctl->listening());
  auto bad = hello_frame(0);
  bad[16] = std::byte{0};  // magic
  a.send(bad);
  Frame f;
  ASSERT_TRUE(a.next(*ctl, &f));
  EXPECT_EQ(refusal(f).reason, proto::RefuseReason::kMalformedHello);
  Client b(ctl->listening());
  proto::Hello h;
  h.expected_schema = 0x99;
  std::vector<std::byte> hb(64);
  hb.resize(proto::encode_hello(h, hb));
  b.send(hb);
  ASSERT_TRUE(b.next(*ctl, &f));
  const proto::Refuse r = refusal(f);
  EXPECT_EQ(r.reason, proto::RefuseReason::kSchema);
  EXPECT_NE(r.text.find("0x99"), std::string_view::npos);
  EXPECT_EQ(ctl->stats().bad_hello, 2u);
}

// A stream mux channel's serve (PROTOCOL.md 5.1): a HELLO whose channel
// token is not the epoch its owner announced is refused (another node's
// NODE named this serve); its own token, or none (an older consumer), is served.
TEST_F(ServeControlTest, AChannelsServeRefusesAnotherChannelsTokenAndServesItsOwnOrNone) {
  ServeControlConfig cfg;
  cfg.channel_token = 0x1234;
  auto ctl = start(cfg);
  Client stranger(ctl->listening());
  proto::Hello h;
  h.first_wanted = proto::kHelloOldest;
  h.flags = proto::kHelloHealth | proto::kHelloChannel;
  h.channel_token = 0xBAD;
  std::vector<std::byte> hb(128);
  hb.resize(proto::encode_hello(h, hb));
  stranger.send(hb);
  ASSERT_NO_FATAL_FAILURE(expect_refused(stranger, *ctl, proto::RefuseReason::kWrongChannel));
  EXPECT_EQ(ctl->stats().bad_hello, 1u);
  EXPECT_EQ(ctl->stats().mirrors, 0u);
  Client owner(ctl->listening());
  Frame f;
  h.channel_token = 0x1234;
  hb.assign(128, std::byte{});
  hb.resize(proto::encode_hello(h, hb));
  owner.send(hb);
  ASSERT_TRUE(owner.next(*ctl, &f));
  EXPECT_EQ(f.header.kind, FrameKind::kGeometry);
  Client older(ctl->listening());
  handshake(older, *ctl);
  EXPECT_EQ(ctl->stats().mirrors, 2u);
  EXPECT_EQ(ctl->stats().bad_hello, 1u);
}

TEST_F(ServeControlTest, FramesAMirrorNeverSendsAreCountedAndSkippedAndTheSessionGoesOn) {
  auto ctl = start();
  Client c(ctl->listening());
  handshake(c, *ctl);
  std::vector<std::byte> data(16 + 64);
  proto::encode_data_header(data.data(), 0, 1, 64, 0);
  c.send(data);
  c.send(hello_frame(0));  // a second HELLO
  std::byte later[16];
  proto::encode_frame_header(proto::FrameHeader{static_cast<FrameKind>(60), 0, 0, 0, 0}, later);
  c.send_raw(later);  // a later version's kind: skipped silently
  publish(3);
  c.send(nak_frame({{0, 2}}, /*repeat=*/true));
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(f.header.kind, FrameKind::kData);
  EXPECT_EQ(ctl->stats().wrong_kind, 2u);
  EXPECT_EQ(ctl->stats().mirrors, 1u);
}

TEST_F(ServeControlTest, ASmallFirstNakGoesByUdpOnceAndItsRepeatOverTcp) {
  auto ctl = start();
  Client c(ctl->listening());
  handshake(c, *ctl);
  publish(5000);
  c.send(nak_frame({{10, 19}, {40, 41}}));
  for (int i = 0; i < 20; ++i) ctl->poll(1000);
  auto cmds = commands();
  ASSERT_EQ(cmds.size(), 2u);
  EXPECT_EQ(cmds[0].kind, ServeCommand::Kind::kRepair);
  EXPECT_EQ(cmds[0].token, 0u);  // the group
  EXPECT_EQ(cmds[0].first, 10u);
  EXPECT_EQ(cmds[1].last, 41u);
  Frame f;
  EXPECT_FALSE(c.next(*ctl, &f, 100));  // nothing by TCP: repaired once
  // The mirror says the repair did not come: over TCP now, each record once.
  c.send(nak_frame({{10, 19}}, /*repeat=*/true));
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(f.header.kind, FrameKind::kData);
  EXPECT_EQ(f.header.seq, 10u);
  EXPECT_EQ(f.header.count, 10u);
  EXPECT_TRUE(commands().empty());
  EXPECT_EQ(ctl->stats().udp_repairs, 2u);
  EXPECT_EQ(ctl->stats().nak_records, 10u);
  // A mirror that does not mark its repeats (a single-range peer): the
  // source remembers what it repaired by UDP for it, and a NAK for it
  // again is a repeat all the same.
  c.send(nak_frame({{40, 41}}));
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(f.header.seq, 40u);
  EXPECT_TRUE(commands().empty());
  // A range larger than --repair-udp-max goes over TCP the first time.
  c.send(nak_frame({{1000, 2999}}));
  uint64_t got = 0;
  while (got < 2000 && c.next(*ctl, &f)) got += f.header.count;
  EXPECT_EQ(got, 2000u);
  EXPECT_TRUE(commands().empty());
}

TEST_F(ServeControlTest, ANakBeyondWhatWasSentIsAnsweredWithTheSourcesPosition) {
  auto ctl = start();
  Client c(ctl->listening());
  handshake(c, *ctl);
  publish(100);
  c.send(nak_frame({{90, 5000}}, /*repeat=*/true));
  Frame f;
  uint64_t data = 0;
  bool position = false;
  while (!(position && data == 10) && c.next(*ctl, &f)) {
    if (f.header.kind == FrameKind::kData) data += f.header.count;
    if (f.header.kind == FrameKind::kHeartbeat) {
      position = true;
      EXPECT_EQ(f.header.seq, 100u);
      EXPECT_EQ(f.header.flags, 0u);
    }
  }
  EXPECT_EQ(data, 10u);  // 90..99, nothing invented beyond
  EXPECT_TRUE(position);
}

TEST_F(ServeControlTest, HealthIsAnsweredWithThePositionAndASlowMirrorIsWarnedAbout) {
  ServeControlConfig cfg;
  cfg.slow_mirror_share = 0.5;
  auto ctl = start(cfg);
  Client c(ctl->listening());
  const proto::Multicast mc = handshake(c, *ctl);
  EXPECT_NE(mc.features & proto::kFeatureHealth, 0);
  EXPECT_NE(mc.features & proto::kFeatureMultiNak, 0);
  EXPECT_EQ(mc.features & proto::kFeatureMac, 0);
  publish(40000);  // 61 % of a 65536-slot ring
  proto::Health h;
  h.report = 1;
  h.next_seq = 10;
  std::vector<std::byte> b(128);
  b.resize(proto::encode_health(h, b));
  c.send(b);
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(f.header.kind, FrameKind::kHeartbeat);
  EXPECT_EQ(f.header.seq, 40000u);
  const auto views = ctl->mirrors();
  ASSERT_EQ(views.size(), 1u);
  EXPECT_TRUE(views[0].has_health);
  EXPECT_EQ(views[0].lag, 39990u);
  EXPECT_TRUE(views[0].slow);
  EXPECT_EQ(ctl->stats().slow_warnings, 1u);
  ASSERT_FALSE(log_.empty());
  EXPECT_NE(log_.back().find("is slow"), std::string::npos);
}

TEST_F(ServeControlTest, AMirrorThatStopsSendingHealthIsDroppedAfterThePeerTimeout) {
  ServeControlConfig cfg;
  cfg.peer_timeout_ns = 300'000'000;
  auto ctl = start(cfg);
  Client c(ctl->listening());
  handshake(c, *ctl);
  EXPECT_TRUE(c.closed_by(*ctl, 3000));
  EXPECT_EQ(ctl->stats().peer_timeouts, 1u);
  EXPECT_EQ(ctl->stats().mirrors, 0u);
}

TEST_F(ServeControlTest, APeerThatAsksAndNeverReadsIsBoundedAndCut) {
  ServeControlConfig cfg;
  cfg.out_watermark_bytes = 64u << 10;
  cfg.stall_timeout_ns = 500'000'000;
  cfg.udp_repair_max = 0;
  auto ctl = start(cfg);
  Client c(ctl->listening());
  handshake(c, *ctl);
  const int one = 4096;  // a small receive buffer: it fills at once
  setsockopt(c.conn().fd(), SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
  publish(60000);
  size_t most = 0;
  bool cut = false;
  for (int i = 0; i < 400 && !cut; ++i) {
    // NAKs for everything, as fast as it can, never reading.
    for (int k = 0; k < 20; ++k) c.send(nak_frame({{uint64_t(k) * 3000, uint64_t(k) * 3000 + 2999}}, true));
    ctl->poll(1000);
    for (const MirrorView& v : ctl->mirrors()) most = std::max(most, v.output_bytes);
    cut = ctl->stats().slow_cut != 0;
    usleep(2000);
  }
  EXPECT_TRUE(cut);
  // Answers are produced only below the watermark: one chunk more at most.
  EXPECT_LT(most, cfg.out_watermark_bytes + (1024 + 64) * 64 + 4096);
  EXPECT_EQ(ctl->stats().mirrors, 0u);
}

// A TCP-mode mirror whose socket does not take more (its output at the
// watermark) is not polled for: EPOLLOUT, watched while output waits,
// wakes the conductor when it drains (it was "behind", polled every 50 us).
TEST_F(ServeControlTest, ATcpMirrorHeldByItsSocketIsWokenByItNotPolled) {
  ServeControlConfig cfg;
  cfg.out_watermark_bytes = 64u << 10;
  auto ctl = start(cfg);
  // A small receive buffer from the connect on: it fills at once (set
  // after the connect, the window was already open wide, and the source's
  // socket, autotuned, could take nearly all 60,000 records).
  Client c(ctl->listening(), 4096);
  const proto::Multicast mc = handshake(c, *ctl, proto::kHelloHealth | proto::kHelloTcpOnly);
  ASSERT_EQ(mc.port, 0u) << "not in TCP mode";
  publish(60000);
  size_t out = 0;
  for (int i = 0; i < 400 && out < cfg.out_watermark_bytes; ++i) {
    ctl->poll(1000);
    for (const MirrorView& v : ctl->mirrors()) out = v.output_bytes;
  }
  ASSERT_GE(out, cfg.out_watermark_bytes) << "the mirror's output never reached the watermark";
  EXPECT_GT(ctl->stats().tcp_records, 0u);
  EXPECT_LT(ctl->stats().tcp_records, 60000u) << "it took everything: not held";
  EXPECT_EQ(ctl->tcp_poll_at(2'000'000'000), UINT64_MAX) << "polled for a mirror its socket holds";
}

TEST_F(ServeControlTest, AUnicastTokenIsBoundToTheMirrorsAddress) {
  ServeControlConfig cfg;
  cfg.unicast_port = 7402;
  cfg.data_ip = 0xC6120001;
  auto ctl = start(cfg);
  Client c(ctl->listening());
  const proto::Multicast mc = handshake(c, *ctl, proto::kHelloUnicastCapable | proto::kHelloPrefersUnicast);
  EXPECT_EQ(mc.group, 0u);
  EXPECT_EQ(mc.port, 7402);
  EXPECT_EQ(mc.data_ip, 0xC6120001u);
  auto cmds = commands();
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, ServeCommand::Kind::kAllowToken);
  EXPECT_EQ(cmds[0].token, mc.token);
  EXPECT_EQ(cmds[0].peer_ip, kLoopback);
  EXPECT_FALSE(cmds[0].keyed);
}

// dup = auto: a unicast mirror's HEALTH count goes to the worker, at most
// one a mirror each 50 ms: a mirror that floods HEALTH (2,000 in one
// write) puts one report in the worker's queue, and the next mirror's
// token still gets in. An older mirror's 64-byte report, and any report
// without dup = auto, go nowhere.
TEST_F(ServeControlTest, DupAutoPassesAMirrorsCountsOnAtMostOneEach50Ms) {
  auto health = [](uint64_t report, uint64_t taken, bool old) {
    proto::Health h;
    h.report = report;
    h.udp_datagrams = taken;
    std::vector<std::byte> b(128);
    b.resize(proto::encode_health(h, b));
    if (old) {  // the 64-byte body of a mirror older than the count
      b.resize(proto::kFrameHeaderBytes + proto::kHealthMinBody);
      proto::store_le32(b.data() + 4, proto::kHealthMinBody);
    }
    return b;
  };
  for (const bool automatic : {true, false}) {
    SCOPED_TRACE(automatic ? "dup = auto" : "dup = 1");
    ServeControlConfig cfg;
    cfg.unicast_port = 7402;
    cfg.data_ip = 0xC6120001;
    cfg.dup_auto = automatic;
    auto ctl = start(cfg);
    Client a(ctl->listening());
    const proto::Multicast mc = handshake(a, *ctl, proto::kHelloUnicastCapable | proto::kHelloPrefersUnicast |
                                                       proto::kHelloHealth);
    ASSERT_EQ(commands().size(), 1u);  // its token
    Client old(ctl->listening());
    const proto::Multicast mc_old = handshake(old, *ctl, proto::kHelloUnicastCapable | proto::kHelloPrefersUnicast |
                                                             proto::kHelloHealth);
    ASSERT_EQ(commands().size(), 1u);
    old.send(health(1, 5, /*old=*/true));
    Frame f;
    ASSERT_TRUE(old.next(*ctl, &f));  // answered as ever
    EXPECT_EQ(f.header.kind, FrameKind::kHeartbeat);
    std::vector<std::byte> flood;
    for (uint64_t i = 1; i <= 2000; ++i) {
      const std::vector<std::byte> h = health(i, 1000 + i, false);
      flood.insert(flood.end(), h.begin(), h.end());
    }
    a.send(flood);
    for (int i = 0; i < 2000; ++i) ASSERT_TRUE(a.next(*ctl, &f)) << i;  // every one answered
    Client b(ctl->listening());
    handshake(b, *ctl, proto::kHelloUnicastCapable | proto::kHelloPrefersUnicast | proto::kHelloHealth);
    const std::vector<ServeCommand> cmds = commands();
    std::vector<ServeCommand> reports;
    size_t tokens = 0;
    for (const ServeCommand& c : cmds) {
      if (c.kind == ServeCommand::Kind::kLossReport) reports.push_back(c);
      tokens += c.kind == ServeCommand::Kind::kAllowToken;
    }
    EXPECT_EQ(tokens, 1u);  // b's
    if (!automatic) {
      EXPECT_TRUE(reports.empty());
      continue;
    }
    // Within 50 ms of the first: one report, the first's count, a's token.
    // (A slow run may pass 50 ms while the flood is read: a second then.)
    ASSERT_GE(reports.size(), 1u);
    EXPECT_LE(reports.size(), 3u);
    EXPECT_EQ(reports[0].token, mc.token);
    EXPECT_EQ(reports[0].first, 1001u);
    for (const ServeCommand& r : reports) EXPECT_NE(r.token, mc_old.token);
  }
}

// Unkeyed, each unicast mirror that checks tags is given a tag of its own
// (in MULTICAST, and to the worker with its token); one that checks none
// gets none, and its datagrams stay as they were.
TEST_F(ServeControlTest, EachUnicastMirrorThatChecksTagsGetsATagOfItsOwn) {
  ServeControlConfig cfg;
  cfg.unicast_port = 7402;
  auto ctl = start(cfg);
  Client a(ctl->listening()), b(ctl->listening()), old(ctl->listening());
  const uint16_t unicast = proto::kHelloUnicastCapable | proto::kHelloPrefersUnicast;
  const proto::Multicast ma = handshake(a, *ctl, unicast | proto::kHelloTag);
  const proto::Multicast mb = handshake(b, *ctl, unicast | proto::kHelloTag);
  const proto::Multicast mold = handshake(old, *ctl, unicast);
  EXPECT_NE(ma.features & proto::kFeatureTag, 0);
  EXPECT_NE(mb.features & proto::kFeatureTag, 0);
  EXPECT_NE(ma.tag, 0u);
  EXPECT_NE(ma.tag, mb.tag);
  EXPECT_EQ(mold.features & proto::kFeatureTag, 0);
  EXPECT_EQ(mold.tag, 0u);
  auto cmds = commands();
  ASSERT_EQ(cmds.size(), 3u);
  EXPECT_EQ(cmds[0].token, ma.token);
  EXPECT_EQ(cmds[0].tag, ma.tag);
  EXPECT_EQ(cmds[1].tag, mb.tag);
  EXPECT_EQ(cmds[2].tag, 0u);
  EXPECT_EQ(ctl->stats().tagged, 2u);
}

// The group's datagrams carry the group's tag: a mirror that checks tags
// learns it; one that does not would drop every datagram as an unknown
// kind, so it is served over TCP (and counted), never left unserved.
TEST_F(ServeControlTest, OnATaggedGroupAMirrorThatChecksNoTagIsServedOverTcp) {
  ServeControlConfig cfg;
  cfg.multicast = Endpoint{0xEFFF0001, 7401};
  cfg.multicast_tag = 0x0123456789abcdef;
  auto ctl = start(cfg);
  Client n(ctl->listening()), old(ctl->listening());
  const proto::Multicast mn = handshake(n, *ctl, proto::kHelloHealth | proto::kHelloTag);
  EXPECT_EQ(mn.group, 0xEFFF0001u);
  EXPECT_NE(mn.features & proto::kFeatureTag, 0);
  EXPECT_EQ(mn.tag, cfg.multicast_tag);
  const proto::Multicast mold = handshake(old, *ctl, proto::kHelloHealth);
  EXPECT_EQ(mold.group, 0u);
  EXPECT_EQ(mold.port, 0u);  // TCP mode
  EXPECT_EQ(mold.features & proto::kFeatureTag, 0);
  EXPECT_EQ(ctl->stats().untagged_to_tcp, 1u);
  EXPECT_EQ(ctl->stats().tagged, 1u);
}

// A conductor serving TCP-mode mirrors polls soon while one is behind the
// ring, and for kTcpQuietNs after all caught up (a stream at mid rates);
// quiet that long, it asks the worker to tell it when the ring moves
// (tell_control_at, the worker's side in worker_test) and answers with a
// fallback far off, so an idle serve does not wake 20,000 times a second.
TEST_F(ServeControlTest, CaughtUpTcpMirrorsLetTheConductorSleepUntilTheWorkerTellsItTheRingMoved) {
  auto ctl = start();
  uint64_t now = 1'000'000'000;
  EXPECT_EQ(ctl->tcp_poll_at(now), UINT64_MAX) << "no TCP-mode mirror: nothing to poll for";
  Client c(ctl->listening());
  const proto::Multicast mc = handshake(c, *ctl, proto::kHelloHealth | proto::kHelloTcpOnly);
  ASSERT_EQ(mc.port, 0u) << "not in TCP mode";
  ctl->poll(0);
  EXPECT_EQ(ctl->tcp_poll_at(now), now + ServeControl::kTcpBehindPollNs) << "just caught up: not quiet yet";
  EXPECT_EQ(link_.tell_control_at.load(), UINT64_MAX);
  now += ServeControl::kTcpQuietNs;
  EXPECT_EQ(ctl->tcp_poll_at(now), now + ServeControl::kTcpCaughtUpPollNs);
  EXPECT_EQ(link_.tell_control_at.load(), 0u) << "the worker was not asked to tell at the next record";
  link_.tell_control_at.store(UINT64_MAX);  // as the worker takes it back when it tells
  publish(5);
  EXPECT_EQ(ctl->tcp_poll_at(now), now + ServeControl::kTcpBehindPollNs) << "behind the ring, yet not polling soon";
  EXPECT_EQ(link_.tell_control_at.load(), UINT64_MAX);
  for (int i = 0; i < 100 && ctl->stats().tcp_records < 5; ++i) ctl->poll(1000);
  EXPECT_EQ(ctl->stats().tcp_records, 5u) << "the records were not streamed";
  EXPECT_EQ(ctl->tcp_poll_at(now), now + ServeControl::kTcpBehindPollNs) << "caught up again: quiet only later";
  link_.stats.next_to_send.store(4);  // the worker itself behind the ring: its tell would come late
  now += ServeControl::kTcpQuietNs;
  EXPECT_EQ(ctl->tcp_poll_at(now), now + ServeControl::kTcpBehindPollNs) << "asked a worker that is behind";
  link_.stats.next_to_send.store(5);
  EXPECT_EQ(ctl->tcp_poll_at(now), now + ServeControl::kTcpCaughtUpPollNs);
  EXPECT_EQ(link_.tell_control_at.load(), 5u);
}

using ringfire::testing::TempDir;

// A mirror replaying from the archive under a byte cap it has spent is
// not more work for the conductor: the turn says no more, and the
// conductor's next poll is when a quantum of budget is back (it used to
// turn at once, again and again, a record at a time).
TEST_F(ServeControlTest, AReplayHeldByTheArchivesByteCapLetsTheConductorSleepUntilItsBudgetIsBack) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_NO_FATAL_FAILURE(record_past_the_ring(dir + "/a", 4u << 20));
  ServeControlConfig c;
  c.archive_dir = dir + "/a";
  c.archive_bytes_per_s = 512u << 10;  // a bank of 1 MiB, then 64 KiB every 125 ms
  auto ctl = start(c);
  Client cl(ctl->listening());
  cl.send(hello_frame(proto::kHelloHealth | proto::kHelloTcpOnly));  // from the oldest: the archive's first
  // Read what comes while pumping the control, until the cap holds it back.
  uint64_t records = 0;
  auto drain = [&] {
    Frame f;
    size_t n;
    while (cl.conn().read_available() && cl.conn().next_frame(&f, &n) == net::TcpConn::Next::kFrame) {
      if (f.header.kind == FrameKind::kData) ++records;
      cl.conn().consume(n);
    }
  };
  for (int i = 0; i < 2000 && ctl->stats().archive_throttled == 0; ++i) {
    ctl->poll(1000);
    drain();
  }
  ASSERT_GT(ctl->stats().archive_throttled, 0u) << "the byte cap never held the replay back: archive bytes " << ctl->stats().archive_bytes << " records " << records << " replays " << ctl->stats().archive_replays << " errors " << ctl->stats().archive_errors << " tcp " << ctl->stats().tcp_records << " gaps " << ctl->stats().gaps << " log " << (log_.empty() ? "" : log_.back());
  const uint64_t sent = ctl->stats().archive_bytes;
  EXPECT_GE(sent, 1u << 20) << "the bank was not spent first";
  EXPECT_LT(sent, 2u << 20);
  // Held back: no more now, and the next poll is when 64 KiB are back.
  const uint64_t t0 = ringfire::monotonic_ns();
  EXPECT_FALSE(ctl->poll(0)) << "a held-back replay made the conductor turn again at once";
  const uint64_t at = ctl->next_poll_at(t0);
  EXPECT_GE(at, t0 + 20'000'000) << "it would poll again within 20 ms";
  EXPECT_LE(at, t0 + 400'000'000) << "it would sleep past the budget's return";
  // And it goes on from there: more of the archive, no GAP.
  for (int i = 0; i < 3000 && ctl->stats().archive_bytes < sent + (64u << 10); ++i) {
    ctl->poll(1000);
    drain();
  }
  EXPECT_GE(ctl->stats().archive_bytes, sent + (64u << 10)) << "the replay did not go on";
  EXPECT_EQ(ctl->stats().gaps, 0u);
  EXPECT_GT(records, 0u);
  EXPECT_EQ(ctl->stats().archive_replays, 1u) << "the archive's reader was opened again for each turn";
}

// A mirror that asks for the archive and then reads a trickle holds its
// replay place only for a slice while another waits: the place goes to the
// mirror in line, which gets the archive from its first record (four such
// strangers kept honest mirrors from the archive for good: review helper-29).
TEST_F(ServeControlTest, AMirrorThatReadsATrickleGivesUpItsReplayPlaceToOneInLine) {
  const TempDir tmp;
  std::unique_ptr<ServeControl> ctl;
  std::unique_ptr<Client> slow;
  ASSERT_NO_FATAL_FAILURE(one_replay_place_taken(tmp.path(), &ctl, &slow));
  Client honest(ctl->listening());
  honest.send(hello_frame(proto::kHelloHealth | proto::kHelloTcpOnly));
  Frame f;
  uint64_t first_data = UINT64_MAX;
  for (int i = 0; i < 2000 && first_data == UINT64_MAX && honest.next(*ctl, &f, 5000); ++i) {
    if (f.header.kind == FrameKind::kData) first_data = f.header.seq;
    if (f.header.kind == FrameKind::kGap) break;
  }
  EXPECT_EQ(first_data, 0u) << "the mirror in line never got the archive";
  EXPECT_GE(ctl->stats().archive_preempted, 1u);
  EXPECT_GE(ctl->stats().archive_waits, 1u);
}

// Replay places go in the order mirrors asked, not the order they
// connected in (nor the conductor's round-robin): four mirrors connect in
// one order and ask in the reverse one while a fifth holds the only
// place; each gets the archive's first record in the order it asked.
TEST_F(ServeControlTest, ReplayPlacesGoInTheOrderMirrorsAskedForThem) {
  const TempDir tmp;
  std::unique_ptr<ServeControl> ctl;
  std::unique_ptr<Client> first;
  ASSERT_NO_FATAL_FAILURE(one_replay_place_taken(tmp.path(), &ctl, &first));
  std::vector<std::unique_ptr<Client>> waiting;
  for (int i = 0; i < 4; ++i) {
    waiting.push_back(std::make_unique<Client>(ctl->listening(), 4096));
    for (int k = 0; k < 20; ++k) ctl->poll(1000);  // accepted in this order
  }
  for (int i = 3; i >= 0; --i) {  // they ask in the reverse order
    const uint64_t waits = ctl->stats().archive_waits;
    waiting[i]->send(hello_frame(proto::kHelloHealth | proto::kHelloTcpOnly));
    for (int k = 0; k < 2000 && ctl->stats().archive_waits == waits; ++k) ctl->poll(1000);
    ASSERT_GT(ctl->stats().archive_waits, waits) << "mirror " << i << " did not join the line";
  }
  std::vector<int> order;
  std::vector<bool> seen(4, false);
  for (int round = 0; round < 20000 && order.size() < 4; ++round) {
    ctl->poll(1000);
    for (int i = 0; i < 4; ++i) {
      Frame f;
      size_t n;
      while (waiting[i]->conn().next_frame(&f, &n) == net::TcpConn::Next::kFrame) {
        if (f.header.kind == FrameKind::kData && !seen[i]) {
          seen[i] = true;
          order.push_back(i);
        }
        waiting[i]->conn().consume(n);
      }
      (void)waiting[i]->conn().read_available();
    }
  }
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0})) << "places were not given in the order asked";
  EXPECT_GE(ctl->stats().archive_preempted, 4u);
}

// Retention removing the oldest segment holds its lock while the catalog
// still lists it: a replay from there waits (no GAP over the segments
// behind it, never the conductor blocked), and goes on from record 0 once
// the lock is let go.
TEST_F(ServeControlTest, AReplayWaitsForASegmentRetentionHoldsAndSkipsNothing) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_NO_FATAL_FAILURE(record_past_the_ring(dir + "/a", 1u << 20));
  const int lock = ::open((dir + "/a/" + archive::segment_name(0)).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(flock(lock, LOCK_EX | LOCK_NB), 0);  // as SegmentWriter::enforce takes it
  ServeControlConfig c;
  c.archive_dir = dir + "/a";
  auto ctl = start(c);
  Client cl(ctl->listening());
  cl.send(hello_frame(proto::kHelloHealth | proto::kHelloTcpOnly));  // from the oldest
  uint64_t first_data = UINT64_MAX, gaps = 0;
  auto drain = [&] {
    Frame f;
    size_t n;
    while (cl.conn().read_available() && cl.conn().next_frame(&f, &n) == net::TcpConn::Next::kFrame) {
      if (f.header.kind == FrameKind::kData && first_data == UINT64_MAX) first_data = f.header.seq;
      if (f.header.kind == FrameKind::kGap) ++gaps;
      cl.conn().consume(n);
    }
  };
  for (int i = 0; i < 100; ++i) {
    ctl->poll(1000);
    drain();
  }
  EXPECT_EQ(first_data, UINT64_MAX) << "something was sent past the segment being removed";
  EXPECT_EQ(gaps, 0u);
  EXPECT_GT(ctl->next_poll_at(0), 0u);
  ::close(lock);  // retention gave it up (here: it did not remove it)
  for (int i = 0; i < 2000 && first_data == UINT64_MAX; ++i) {
    ctl->poll(1000);
    drain();
  }
  EXPECT_EQ(first_data, 0u) << "the replay did not go on from the oldest record";
  EXPECT_EQ(gaps, 0u);
  EXPECT_EQ(ctl->stats().archive_errors, 0u);
}

// What a mirror asking for the archive from its oldest record (TCP mode)
// is sent: the first DATA's sequence, each GAP's target, and the first
// DATA after the first GAP, until `until` (or 4 s of polls).
struct Replayed {
  uint64_t first_data = UINT64_MAX;
  std::vector<uint64_t> gaps;
  uint64_t data_after_gap = UINT64_MAX;
};
Replayed replay_from_oldest(ServeControl& ctl, const std::function<bool(const Replayed&)>& until) {
  Client cl(ctl.listening());
  cl.send(hello_frame(proto::kHelloHealth | proto::kHelloTcpOnly));
  Replayed r;
  for (int i = 0; i < 4000 && !until(r); ++i) {
    ctl.poll(1000);
    Frame f;
    size_t n;
    while (cl.conn().read_available() && cl.conn().next_frame(&f, &n) == net::TcpConn::Next::kFrame) {
      if (f.header.kind == FrameKind::kData && r.first_data == UINT64_MAX) r.first_data = f.header.seq;
      if (f.header.kind == FrameKind::kData && !r.gaps.empty() && r.data_after_gap == UINT64_MAX) {
        r.data_after_gap = f.header.seq;
      }
      if (f.header.kind == FrameKind::kGap) r.gaps.push_back(f.header.seq);
      cl.conn().consume(n);
    }
  }
  return r;
}

// A damaged batch in the archive's first segment: what follows it there
// is skipped by a GAP to the next segment, whose records are sent (it was
// a GAP to the ring's oldest record: every intact archived record after
// one damaged batch was lost to the mirror, review helper-42).
TEST_F(ServeControlTest, DamageInTheArchiveSkipsToItsNextSegmentNotToTheRing) {
  const TempDir tmp;
  const std::string dir = tmp.path() + "/a";
  std::vector<uint64_t> segs;
  ASSERT_NO_FATAL_FAILURE(segmented_archive(dir, &segs));
  archive::testing::flip_byte(dir + "/" + archive::segment_name(0), 512u << 10);
  ServeControlConfig c;
  c.archive_dir = dir;
  auto ctl = start(c);
  const Replayed r = replay_from_oldest(*ctl, [](const Replayed& x) { return x.data_after_gap != UINT64_MAX; });
  EXPECT_EQ(r.first_data, 0u);
  ASSERT_FALSE(r.gaps.empty()) << "no GAP past the damage";
  EXPECT_EQ(r.gaps[0], segs[1]) << "the GAP went past the archive's intact segments";
  EXPECT_EQ(r.data_after_gap, segs[1]);
  EXPECT_EQ(ctl->stats().archive_errors, 1u);
}

// A segment the catalog lists that is not there (deleted by hand): a
// replay waits for it a while (retention removes one in milliseconds),
// then skips it to the next segment, counted; it held the replay's place
// and its mirror's answer for good (review helper-42).
TEST_F(ServeControlTest, ASegmentListedButNotThereIsSkippedAfterAWhile) {
  const TempDir tmp;
  const std::string dir = tmp.path() + "/a";
  std::vector<uint64_t> segs;
  ASSERT_NO_FATAL_FAILURE(segmented_archive(dir, &segs));
  ASSERT_EQ(::unlink((dir + "/" + archive::segment_name(0)).c_str()), 0);
  ServeControlConfig c;
  c.archive_dir = dir;
  auto ctl = start(c);
  const Replayed r = replay_from_oldest(*ctl, [](const Replayed& x) { return x.data_after_gap != UINT64_MAX; });
  ASSERT_FALSE(r.gaps.empty()) << "the missing segment held the replay";
  EXPECT_EQ(r.gaps[0], segs[1]);
  EXPECT_EQ(r.first_data, segs[1]);
  EXPECT_EQ(ctl->stats().archive_errors, 1u);
}

// Two holes in one listed segment that is gone: the first is waited for
// (kMissingSegmentNs) and skipped, counted; the second, in the same
// segment, is skipped at once, not waited for and counted again (each
// hole of a lost segment waited its own 2 s).
TEST_F(ServeControlTest, AnotherHoleInALostSegmentIsNotWaitedForAgain) {
  const TempDir tmp;
  const std::string dir = tmp.path() + "/a";
  std::vector<uint64_t> segs;
  ASSERT_NO_FATAL_FAILURE(segmented_archive(dir, &segs));
  ASSERT_GT(segs[1], 200u) << "both holes must lie in the first segment";
  ASSERT_EQ(::unlink((dir + "/" + archive::segment_name(0)).c_str()), 0);
  ServeControlConfig c;
  c.archive_dir = dir;
  auto ctl = start(c);
  Client cl(ctl->listening());
  handshake(cl, *ctl);
  auto gap_for = [&](uint64_t from, uint64_t to) {
    cl.send(nak_frame({{from, to}}, /*repeat=*/true));
    Frame f;
    for (int i = 0; i < 4000 && cl.next(*ctl, &f, 3000); ++i) {
      if (f.header.kind == FrameKind::kGap) return f.header.seq;
    }
    return UINT64_MAX;
  };
  EXPECT_EQ(gap_for(100, 109), 110u);  // a GAP over the NAK's range (the segment's rest, up to it)
  EXPECT_EQ(ctl->stats().archive_errors, 1u);
  EXPECT_EQ(gap_for(10, 19), 20u);  // below the first: the memo holds the whole segment

  EXPECT_EQ(ctl->stats().archive_errors, 1u) << "the second hole was waited for and counted again";
}

// A NAK for a range wholly older than the archive (retention removed it)
// is answered by a GAP to the archive's first record, whose records follow
// on the next NAK; it was a GAP to the ring's oldest, past the whole
// archive (review helper-42).
TEST_F(ServeControlTest, ANakOlderThanTheArchiveIsAGapToItsFirstRecord) {
  const TempDir tmp;
  const std::string dir = tmp.path() + "/a";
  uint64_t first = 0;  // retention removed some; below the ring's oldest (34464): a GAP to either told apart
  ASSERT_NO_FATAL_FAILURE(retained_archive(dir, 6u << 20, 100, 34464, &first));
  ServeControlConfig c;
  c.archive_dir = dir;
  auto ctl = start(c);
  Client cl(ctl->listening());
  handshake(cl, *ctl);
  cl.send(nak_frame({{10, 99}}, /*repeat=*/true));
  Frame f;
  uint64_t gap = UINT64_MAX;
  for (int i = 0; i < 4000 && gap == UINT64_MAX && cl.next(*ctl, &f, 1000); ++i) {
    if (f.header.kind == FrameKind::kGap) gap = f.header.seq;
  }
  EXPECT_EQ(gap, first) << "a GAP past the archive, or none";
  // A flood of them takes no replay place and opens no feed (each opened
  // one: a catalog read and a thread, helper-42).
  for (uint64_t i = 0; i < 50; ++i) cl.send(nak_frame({{2 * i, 2 * i}}, /*repeat=*/true));  // not overlapping: each queued
  uint64_t gaps = 0;
  for (int i = 0; i < 4000 && gaps < 50 && cl.next(*ctl, &f, 1000); ++i) {
    if (f.header.kind == FrameKind::kGap && f.header.seq == first) ++gaps;
  }
  EXPECT_EQ(gaps, 50u);
  EXPECT_EQ(ctl->stats().archive_replays, 0u) << "a range older than the archive opened a feed";
}

// An archive that starts above the ring's oldest record (34464), within
// the eighth of the ring above it that the archive answers for: a range
// the ring holds and the archive does not is sent from the ring, and one
// older than both is a GAP to the ring's oldest; both were a GAP to the
// archive's first record, past records the ring still had (review helper-44).
TEST_F(ServeControlTest, WhatTheRingHoldsAndTheArchiveDoesNotIsSentFromTheRing) {
  const TempDir tmp;
  const std::string dir = tmp.path() + "/a";
  uint64_t archive_first = 0;  // above the ring's oldest (and the NAK's range), within the eighth above it
  ASSERT_NO_FATAL_FAILURE(retained_archive(dir, 5u << 20, 34600, 34464 + 65536 / 8, &archive_first));
  ServeControlConfig c;
  c.archive_dir = dir;
  auto ctl = start(c);
  Client cl(ctl->listening());
  handshake(cl, *ctl);
  Frame f;
  const auto answer = [&](uint64_t first, uint64_t last) {
    cl.send(nak_frame({{first, last}}, /*repeat=*/true));
    std::vector<std::pair<FrameKind, uint64_t>> got;  // kind, seq: up to the first DATA
    for (int i = 0; i < 4000 && (got.empty() || got.back().first != FrameKind::kData) && cl.next(*ctl, &f, 1000); ++i) {
      if (f.header.kind == FrameKind::kData || f.header.kind == FrameKind::kGap) got.emplace_back(f.header.kind, f.header.seq);
    }
    return got;
  };
  using Got = std::vector<std::pair<FrameKind, uint64_t>>;
  EXPECT_EQ(answer(34500, 34600), (Got{{FrameKind::kData, 34500}})) << "records the ring holds were skipped";
  EXPECT_EQ(answer(100, 200), (Got{{FrameKind::kGap, 34464}})) << "not a GAP to the ring's oldest record";
}

// An archive of another kind of ring would answer a mirror with records
// of the wrong size: serve refuses it at start, saying what differs.
TEST_F(ServeControlTest, AnArchiveOfAnotherKindOfRingIsRefusedAtStart) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ScopedRing other(ring::testing::fixed_ring(1024, 32));
  {
    archive::RecordOptions o;
    o.dir = dir + "/a";
    o.layout.segment_bytes = 1u << 20;
    o.batch_bytes = 16u << 10;
    ASSERT_TRUE(archive::Recorder::open(other.open(), o).ok());
  }
  ServeControlConfig c;
  c.archive_dir = dir + "/a";
  c.listen = Endpoint{kLoopback, 0};
  c.ring = ring_.name();
  c.multicast = Endpoint{0xEFFF0001, 7401};
  auto s = ServeControl::start(c, &link_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("record size 32 vs 64"), std::string::npos) << s.status();
}

// ---- the PSK handshake

class ServeControlAuthTest : public ServeControlTest {
 protected:
  ServeControlAuthTest() {
    psk_.key.assign(32, 0x5a);
    other_.key.assign(32, 0x5b);
  }
  std::unique_ptr<ServeControl> start_keyed() {
    ServeControlConfig cfg;
    cfg.psk = psk_;
    cfg.salt = net::random_nonce();
    salt_ = cfg.salt;
    return start(cfg);
  }
  // Step1: a keyed HELLO (with `flags` and a fresh challenge) sent, and the
  // source's AUTH step 1 read (as it came: header and body).
  struct Step1 {
    std::vector<std::byte> hello, auth_bytes;
    proto::Auth auth;
  };
  Step1 step1(Client& c, ServeControl& ctl, uint16_t flags) {
    Step1 s;
    const net::Nonce mine = net::random_nonce();
    s.hello = hello_frame(flags, proto::kHelloOldest, &mine);
    c.send(s.hello);
    Frame f;
    EXPECT_TRUE(c.next(ctl, &f));
    EXPECT_EQ(proto::decode_auth(f, &s.auth), proto::DecodeError::kOk);
    s.auth_bytes.assign(f.body.data() - 16, f.body.data() + f.body.size());
    return s;
  }
  // step2: the mirror's proof frame under `key`, answering `s`.
  static std::vector<std::byte> step2(const net::Psk& key, const Step1& s) {
    proto::Auth reply;
    reply.step = proto::AuthStep::kMirrorProof;
    reply.proof = net::mirror_proof(key, s.hello, s.auth_bytes);
    std::vector<std::byte> b(128);
    b.resize(proto::encode_auth(reply, b));
    return b;
  }
  net::Psk psk_, other_;
  net::Nonce salt_{};
};

TEST_F(ServeControlAuthTest, AMirrorWithoutAuthenticationIsRefusedAndCounted) {
  auto ctl = start_keyed();
  Client c(ctl->listening());
  c.send(hello_frame(proto::kHelloHealth));
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f));
  const proto::Refuse r = refusal(f);
  EXPECT_EQ(r.reason, proto::RefuseReason::kAuthRequired);
  EXPECT_NE(r.text.find("--psk-file"), std::string_view::npos);
  EXPECT_EQ(ctl->stats().unauthenticated, 1u);
  ASSERT_FALSE(log_.empty());
  EXPECT_NE(log_.back().find("not authenticated"), std::string::npos);
}

TEST_F(ServeControlAuthTest, BothSidesProveTheKeyAndTheMirrorGetsTheDataKeysSalt) {
  auto ctl = start_keyed();
  Client c(ctl->listening());
  const net::Nonce mine = net::random_nonce();
  const auto hello = hello_frame(proto::kHelloAuth | proto::kHelloHealth, proto::kHelloOldest, &mine);
  c.send(hello);
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f));
  ASSERT_EQ(f.header.kind, FrameKind::kAuth);
  proto::Auth a;
  ASSERT_EQ(proto::decode_auth(f, &a), proto::DecodeError::kOk);
  EXPECT_EQ(a.salt, salt_);
  EXPECT_TRUE(net::proofs_equal(a.proof, net::source_proof(psk_, hello, a.nonce, a.salt)));
  EXPECT_FALSE(net::proofs_equal(a.proof, net::source_proof(other_, hello, a.nonce, a.salt)));
  const std::vector<std::byte> auth_bytes(f.body.data() - 16, f.body.data() + f.body.size());
  proto::Auth reply;
  reply.step = proto::AuthStep::kMirrorProof;
  reply.proof = net::mirror_proof(psk_, hello, auth_bytes);
  std::vector<std::byte> b(128);
  b.resize(proto::encode_auth(reply, b));
  c.send(b);
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(f.header.kind, FrameKind::kGeometry);
  ASSERT_TRUE(c.next(*ctl, &f));
  proto::Multicast mc;
  ASSERT_EQ(proto::decode_multicast(f, &mc), proto::DecodeError::kOk);
  EXPECT_NE(mc.features & proto::kFeatureMac, 0);
  EXPECT_EQ(ctl->mirrors().size(), 1u);
  EXPECT_TRUE(ctl->mirrors()[0].authenticated);
}

TEST_F(ServeControlAuthTest, AWrongProofIsRefused) {
  auto ctl = start_keyed();
  Client c(ctl->listening());
  const net::Nonce mine = net::random_nonce();
  const auto hello = hello_frame(proto::kHelloAuth, proto::kHelloOldest, &mine);
  c.send(hello);
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f));
  const std::vector<std::byte> auth_bytes(f.body.data() - 16, f.body.data() + f.body.size());
  proto::Auth reply;
  reply.step = proto::AuthStep::kMirrorProof;
  reply.proof = net::mirror_proof(other_, hello, auth_bytes);  // another key
  std::vector<std::byte> b(128);
  b.resize(proto::encode_auth(reply, b));
  c.send(b);
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(refusal(f).reason, proto::RefuseReason::kAuthFailed);
  EXPECT_EQ(ctl->stats().bad_auth, 1u);
  EXPECT_EQ(ctl->stats().mirrors, 0u);
}

// A mirror that asks (HELLO bit 7): every control frame after its step 2
// is MACed both ways (§1.8.2). Its sealed NAK is served; a NAK injected
// into the live connection with a tag of its maker's own is counted, moves
// nothing (no repair), and ends the connection.
TEST_F(ServeControlAuthTest, AfterTheHandshakeEveryFrameIsMacedAndAForgedOneMovesNothing) {
  auto ctl = start_keyed();
  Client c(ctl->listening());
  const Step1 s1 = step1(c, *ctl, proto::kHelloAuth | proto::kHelloFrameMac | proto::kHelloHealth | proto::kHelloMultiNak);
  const proto::Auth& a = s1.auth;
  EXPECT_EQ(a.flags & proto::kAuthFrameMac, proto::kAuthFrameMac) << "the source did not answer bit 7";
  // proof_s covers the answer: a man in the middle that clears the bit (to
  // talk the mirror out of MACs) leaves a proof the mirror refuses.
  EXPECT_TRUE(net::proofs_equal(a.proof, net::source_proof(psk_, s1.hello, a.nonce, a.salt, a.flags)));
  EXPECT_FALSE(net::proofs_equal(a.proof, net::source_proof(psk_, s1.hello, a.nonce, a.salt, 0)));
  const std::vector<std::byte> s2 = step2(psk_, s1);
  c.send(s2);
  c.conn().start_frame_mac(net::mirror_frame_keys(psk_, s1.hello, s1.auth_bytes, s2, false));
  Frame f;
  // GEOMETRY and MULTICAST verify under the source's key.
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(f.header.kind, FrameKind::kGeometry);
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(f.header.kind, FrameKind::kMulticast);
  EXPECT_EQ(ctl->stats().frames_unmaced, 0u);
  publish(5000);
  c.send(nak_frame({{10, 19}}));  // sealed by the client's conn
  for (int i = 0; i < 20; ++i) ctl->poll(1000);
  ASSERT_EQ(commands().size(), 1u) << "the honest NAK was not served";
  EXPECT_EQ(ctl->stats().naks, 1u);
  // The forger's NAK: well formed, its len counting a tag, the tag made up.
  std::vector<std::byte> forged = nak_frame({{100, 199}});
  const uint32_t len = static_cast<uint32_t>(forged.size() - proto::kFrameHeaderBytes + net::kFrameTagBytes);
  std::memcpy(forged.data() + 4, &len, 4);
  forged.resize(forged.size() + net::kFrameTagBytes, std::byte{0x42});
  ASSERT_EQ(write(c.conn().fd(), forged.data(), forged.size()), static_cast<ssize_t>(forged.size()));
  EXPECT_TRUE(c.closed_by(*ctl));
  EXPECT_EQ(ctl->stats().bad_frame_mac, 1u);
  EXPECT_EQ(ctl->stats().naks, 1u) << "the forged NAK counted";
  EXPECT_TRUE(commands().empty()) << "the forged NAK moved a repair";
}

// An older keyed mirror (no bit 7) is still served, its datagrams MACed
// and its TCP frames not: counted, so an operator can see it.
TEST_F(ServeControlAuthTest, AnOlderKeyedMirrorIsServedWithoutFrameMacsAndCounted) {
  auto ctl = start_keyed();
  Client c(ctl->listening());
  const Step1 s1 = step1(c, *ctl, proto::kHelloAuth);
  EXPECT_EQ(s1.auth.flags, 0) << "bit 7 was not asked for";
  c.send(step2(psk_, s1));
  Frame f;
  ASSERT_TRUE(c.next(*ctl, &f));
  EXPECT_EQ(f.header.kind, FrameKind::kGeometry) << "not served in the clear";
  EXPECT_EQ(ctl->stats().frames_unmaced, 1u);
}

TEST(PskFile, AShortOrWorldReadableKeyFileIsRefusedWithWhatToDo) {
  const std::string path = "/tmp/rf-psk-test-" + std::to_string(getpid());
  {
    std::ofstream(path) << "short\n";
  }
  chmod(path.c_str(), 0600);
  auto k = net::load_psk(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("ringfire keygen"), std::string::npos);
  {
    std::ofstream(path) << std::string(64, 'a') << "\n";
  }
  chmod(path.c_str(), 0644);
  k = net::load_psk(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("chmod 600"), std::string::npos);
  chmod(path.c_str(), 0600);
  k = net::load_psk(path);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->key.size(), 64u);  // the newline is not part of the key
  unlink(path.c_str());
}

}  // namespace
}  // namespace ringfire::control
