// mirror_control_test.cc — the mirror's control state machine against a
// real source control (ServeControl) on loopback, with a fake data plane in
// place of the engine: what it asks the plane to build once the handshake
// settled the path (the group's binding, whom to believe), the TCP-borne
// frames it relays to the session's link, the NAKs it takes from the link
// to the source, a source that goes away and comes back (the session closed,
// a new one opened), and refusals that are final.
#include "control/mirror_control.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "control/ring_geometry.h"
#include "control/serve_control.h"
#include "gtest/gtest.h"
#include "net/tcp_conn.h"
#include "ring/check_record.h"
#include "ring/producer.h"
#include "ring/ring_file.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::control {
namespace {

using net::Endpoint;
using ring::testing::ScopedRing;
using State = MirrorControl::State;

constexpr uint32_t kLoopback = 0x7F000001;
const Endpoint kGroup{0xEFFF0001, 7401};

uint64_t now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// FakePlane stands in for the engine: it records what it is asked to build
// and hands out links no worker reads (the test plays the worker).
class FakePlane final : public MirrorPlane {
 public:
  absl::StatusOr<dataplane::MirrorLink*> open(MirrorPlaneRequest r) override {
    requests.push_back(std::move(r));
    links.push_back(std::make_unique<dataplane::MirrorLink>(1u << 20));
    return links.back().get();
  }
  void close(dataplane::MirrorLink* link) override {
    ++closed;
    EXPECT_EQ(link, links.back().get());
    requests.back().writer.reset();  // the session goes, and its hold on the ring with it
  }
  uint64_t port_drops() const override { return 0; }
  std::string describe() const override { return "fake"; }

  std::vector<MirrorPlaneRequest> requests;
  std::vector<std::unique_ptr<dataplane::MirrorLink>> links;
  int closed = 0;
};

class MirrorControlTest : public ::testing::Test {
 protected:
  MirrorControlTest()
      : ring_([] {
          ring::RingOptions o = ring::testing::fixed_ring(4096, 64);
          o.schema_signature = 0x51;
          return o;
        }()),
        producer_(*ring::Producer::attach(ring_.open())),
        mirror_name_(ring_.name() + "-m") {}
  ~MirrorControlTest() override { unlink(ring::ring_path(mirror_name_, "/dev/shm").c_str()); }

  void start_source(std::optional<Endpoint> group = kGroup) {
    ServeControlConfig c;
    c.listen = Endpoint{kLoopback, port_};
    c.ring = ring_.name();
    c.multicast = group;
    c.data_ip = kLoopback;
    c.session = 7;
    c.log = [](const std::string&) {};
    auto s = ServeControl::start(c, &source_link_);
    ASSERT_TRUE(s.ok()) << s.status();
    source_ = std::move(*s);
    port_ = source_->listening().port;
  }
  std::unique_ptr<MirrorControl> mirror(MirrorOptions o = {}) {
    o.source = Endpoint{kLoopback, port_};
    o.ring = mirror_name_;
    o.from = MirrorOptions::From::kOldest;
    return std::make_unique<MirrorControl>(o, &plane_, [this](const std::string& l) { log_.push_back(l); });
  }
  // pump runs both sides until `done` or `ms` pass.
  template <typename Done>
  bool pump(MirrorControl& m, Done done, int ms = 3000) {
    for (int i = 0; i < ms; ++i) {
      if (source_) source_->poll(0);
      m.poll(now());
      if (done()) return true;
      usleep(1000);
    }
    return false;
  }
  void publish(int n) {
    for (int i = 0; i < n; ++i) {
      ring::fill_record({producer_.claim(), 64}, producer_.next_seq(), 0);
      producer_.commit();
    }
    source_link_.stats.next_to_send.store(producer_.next_seq());
  }
  // take_tcp_frames hands each frame the session's link holds (relayed from
  // TCP) to `each` (the frame, and its bytes as relayed), in order, and pops it.
  template <typename Each>
  static void take_tcp_frames(dataplane::MirrorLink& link, Each each) {
    proto::ConstBytes b;
    while (link.tcp_frames.front(&b)) {
      proto::Frame f;
      EXPECT_EQ(proto::decode_frame(b, b.size(), &f), proto::DecodeError::kOk);
      each(f, b);
      link.tcp_frames.pop();
    }
  }

  ScopedRing ring_;
  ring::Producer producer_;
  std::string mirror_name_;
  dataplane::ServeLink source_link_;
  std::unique_ptr<ServeControl> source_;
  uint16_t port_ = 0;
  FakePlane plane_;
  std::vector<std::string> log_;
};

// A mirror ring's reader registry is for this host's readers: a source
// that announces a smaller one (0: a stream mux channel's reader found no
// place, and nothing read what came, helper-45) gets the default here.
TEST(MirrorRingOptions, TheRegistryIsAtLeastTheDefaultWhateverTheSourceSays) {
  proto::Geometry g;
  g.capacity = 1024;
  g.slot_size = 64;
  g.registry_size = 0;
  EXPECT_EQ(mirror_ring_options(g, "x").registry_size, ring::RingOptions{}.registry_size);
  g.registry_size = 200;
  EXPECT_EQ(mirror_ring_options(g, "x").registry_size, 200u);
}

TEST_F(MirrorControlTest, TheHandshakeOpensTheGroupsBindingAndBelievesOnlyTheSourcesAddress) {
  start_source();
  auto m = mirror();
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kStreaming; })) << static_cast<int>(m->state());
  ASSERT_EQ(plane_.requests.size(), 1u);
  const MirrorPlaneRequest& r = plane_.requests[0];
  ASSERT_TRUE(r.bind.has_value());
  EXPECT_EQ(r.bind->group, kGroup.ip);
  EXPECT_EQ(r.bind->udp_port, kGroup.port);
  EXPECT_TRUE(r.bind->reuse);  // other mirrors of the group on this host share the port
  EXPECT_EQ(r.session, 7);
  EXPECT_EQ(r.config.trust.source_ip, kLoopback);
  EXPECT_EQ(r.config.trust.source_port, 0);  // multicast: from any port of the source
  EXPECT_EQ(r.local_ip, kLoopback);
  EXPECT_FALSE(r.config.punch_to.has_value());
  // The mirror ring was made from GEOMETRY.
  auto made = ring::RingFile::open(ring::ring_path(mirror_name_, "/dev/shm"));
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->header().capacity, 4096u);
  EXPECT_EQ(made->header().schema_signature, 0x51u);
}

TEST_F(MirrorControlTest, NaksTheSessionQueuesGoToTheSourceOverTcp) {
  start_source();
  publish(100);
  auto m = mirror();
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kStreaming; }));
  dataplane::MirrorLink& link = *plane_.links.back();
  proto::NakRanges nak;
  nak.push(proto::Nak{10, 19});
  nak.push(proto::Nak{40, 41});
  ASSERT_TRUE(link.naks.try_push(nak));
  const uint64_t one = 1;
  ASSERT_EQ(write(plane_.requests[0].nak_fd, &one, 8), 8);  // as the worker wakes its control
  ASSERT_TRUE(pump(*m, [&] { return source_->stats().naks == 1; }));
  EXPECT_EQ(source_->stats().nak_ranges, 2u);
}

TEST_F(MirrorControlTest, InTcpModeTheSourcesDataFramesAreRelayedToTheSessionAndNoBindingIsMade) {
  start_source(std::nullopt);  // neither a group nor a UDP port: DATA over TCP
  publish(500);
  MirrorOptions o;
  o.tcp_only = true;
  auto m = mirror(o);
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kStreaming; }));
  EXPECT_FALSE(plane_.requests[0].bind.has_value());
  dataplane::MirrorLink& link = *plane_.links.back();
  uint64_t records = 0, next = 0;
  ASSERT_TRUE(pump(*m, [&] {
    take_tcp_frames(link, [&](const proto::Frame& f, proto::ConstBytes) {
      if (f.header.kind != proto::FrameKind::kData) return;
      EXPECT_EQ(f.header.seq, next);
      records += f.header.count;
      next = f.header.seq + f.header.count;
    });
    return records >= 500;
  }));
  EXPECT_EQ(records, 500u);
}

TEST_F(MirrorControlTest, ASourceThatGoesAwayClosesTheSessionAndOneThatComesBackGetsANewOne) {
  start_source();
  auto m = mirror();
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kStreaming; }));
  source_.reset();  // the source process ends: its connections close
  ASSERT_TRUE(pump(*m, [&] { return m->state() != State::kStreaming; }));
  EXPECT_EQ(plane_.closed, 1);
  EXPECT_NE(m->state(), State::kFailed);
  start_source();  // the same port again
  ASSERT_TRUE(source_ != nullptr);
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kStreaming; }, 5000))
      << static_cast<int>(m->state()) << " " << m->end_reason() << " " << m->failure() << " log: " << log_.back();
  EXPECT_EQ(plane_.requests.size(), 2u);
  EXPECT_EQ(m->control_stats().sessions, 2u);
}

// A reader in this process holds a share of the ring's mapping (a mux
// node's ingress does), and so the writer's lock: the next session writes
// through that same mapping, not a new descriptor that could not lock it.
TEST_F(MirrorControlTest, ASessionAfterAReconnectWritesThroughTheMappingAReaderShares) {
  start_source();
  auto m = mirror();
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kStreaming; }));
  ASSERT_TRUE(m->ring().has_value());
  const ring::RingFile reader = m->ring()->share();
  source_.reset();
  ASSERT_TRUE(pump(*m, [&] { return m->state() != State::kStreaming; }));
  start_source();
  ASSERT_TRUE(source_ != nullptr);
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kStreaming; }, 5000))
      << static_cast<int>(m->state()) << " " << m->end_reason() << " " << m->failure();
  EXPECT_EQ(m->control_stats().sessions, 2u);
  EXPECT_EQ(&m->ring()->header(), &reader.header()) << "the second session mapped the ring again";
}

TEST_F(MirrorControlTest, ASchemaMismatchIsFinalAndSaysSo) {
  start_source();
  MirrorOptions o;
  o.expected_schema = 0x99;
  auto m = mirror(o);
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kFailed; }));
  EXPECT_NE(std::string(m->failure().message()).find("schema"), std::string::npos) << m->failure();
  EXPECT_TRUE(plane_.requests.empty());
  // Final: it does not try again.
  EXPECT_FALSE(pump(*m, [&] { return m->state() != State::kFailed; }, 500));
}

TEST_F(MirrorControlTest, AnUnreachableSourceAtTheStartIsAFailureNamingIt) {
  start_source();
  source_.reset();  // nothing listens there now
  auto m = mirror();
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kFailed; }));
  EXPECT_NE(std::string(m->failure().message()).find("cannot reach source 127.0.0.1"), std::string::npos)
      << m->failure();
}

TEST_F(MirrorControlTest, WaitingForItsSourceAMirrorRetriesUntilTheSourceStarts) {
  start_source();
  source_.reset();  // the daemon's mirror starts before its source
  MirrorOptions o;
  o.wait_for_source = true;
  auto m = mirror(o);
  ASSERT_FALSE(pump(*m, [&] { return m->state() == State::kFailed || m->state() == State::kStreaming; }, 600));
  EXPECT_NE(m->end_reason().find("cannot reach source 127.0.0.1"), std::string::npos) << m->end_reason();
  ASSERT_FALSE(log_.empty());
  EXPECT_NE(log_.front().find("reconnecting: cannot reach source"), std::string::npos) << log_.front();
  start_source();  // the same port
  ASSERT_TRUE(pump(*m, [&] { return m->state() == State::kStreaming; }, 5000)) << m->end_reason();
  EXPECT_EQ(plane_.requests.size(), 1u);
  EXPECT_EQ(m->control_stats().sessions, 1u);
}

// Proxy: one TCP connection relayed between a mirror and its source, with
// a way to put bytes of a stranger's into it (what an on-path attacker can
// do to a connection it cannot read the key of).
class Proxy {
 public:
  explicit Proxy(const Endpoint& upstream) : upstream_(upstream) {
    auto l = net::tcp_listen(Endpoint{kLoopback, 0});
    EXPECT_TRUE(l.ok());
    listen_fd_ = *l;
  }
  ~Proxy() {
    for (int fd : {listen_fd_, down_, up_}) {
      if (fd >= 0) close(fd);
    }
  }
  Endpoint address() const { return net::socket_local(listen_fd_); }
  // relay moves what either side wrote (accepting the mirror first).
  void relay() {
    if (down_ < 0) {
      down_ = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK);
      if (down_ < 0) return;
      auto u = net::tcp_connect(upstream_, 1000);
      ASSERT_TRUE(u.ok());
      up_ = *u;
    }
    move(down_, up_);
    move(up_, down_);
  }
  void inject_to_mirror(const std::vector<std::byte>& b) {
    ASSERT_EQ(write(down_, b.data(), b.size()), static_cast<ssize_t>(b.size()));
  }

 private:
  static void move(int from, int to) {
    std::byte buf[65536];
    for (ssize_t n; (n = read(from, buf, sizeof(buf))) > 0;) {
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = write(to, buf + done, static_cast<size_t>(n - done));
        if (w > 0) done += w;
      }
    }
  }
  Endpoint upstream_;
  int listen_fd_ = -1, down_ = -1, up_ = -1;
};

// Keyed, both sides MAC every control frame after the handshake (§1.8.2):
// a TCP-mode mirror's DATA arrives sealed and whole; then a GAP injected
// into the live connection (a stranger's frame, its tag made up) is
// counted, never reaches the session, and ends it.
TEST_F(MirrorControlTest, KeyedEveryControlFrameIsMacedAndAnInjectedGapMovesNothing) {
  net::Psk key;
  key.key.assign(32, 0x33);
  ServeControlConfig c;
  c.listen = Endpoint{kLoopback, 0};
  c.ring = ring_.name();
  c.data_ip = kLoopback;
  c.session = 7;
  c.psk = key;
  c.salt = net::random_nonce();
  c.log = [](const std::string&) {};
  auto s = ServeControl::start(c, &source_link_);
  ASSERT_TRUE(s.ok()) << s.status();
  source_ = std::move(*s);
  Proxy proxy(source_->listening());
  publish(500);
  MirrorOptions o;
  o.tcp_only = true;
  o.psk = key;
  o.source = proxy.address();
  o.ring = mirror_name_;
  o.from = MirrorOptions::From::kOldest;
  auto m = std::make_unique<MirrorControl>(o, &plane_, [this](const std::string& l) { log_.push_back(l); });
  auto pump_via = [&](auto done, int ms = 3000) {
    for (int i = 0; i < ms; ++i) {
      proxy.relay();
      source_->poll(0);
      proxy.relay();
      m->poll(now());
      if (done()) return true;
      usleep(1000);
    }
    return false;
  };
  ASSERT_TRUE(pump_via([&] { return m->state() == State::kStreaming; })) << m->end_reason() << " " << m->failure();
  EXPECT_TRUE(m->authenticated());
  EXPECT_NE(m->description().find("authenticated"), std::string::npos);
  EXPECT_EQ(m->description().find("datagrams only"), std::string::npos) << m->description();
  dataplane::MirrorLink& link = *plane_.links.back();
  uint64_t records = 0, next = 0, gaps = 0;
  auto take = [&] {
    take_tcp_frames(link, [&](const proto::Frame& f, proto::ConstBytes b) {
      gaps += f.header.kind == proto::FrameKind::kGap;
      if (f.header.kind != proto::FrameKind::kData) return;
      EXPECT_EQ(f.header.seq, next);
      // Relayed as the plain frame: its len the records' (no tag), its bytes exactly header and body.
      EXPECT_EQ(f.body.size(), f.header.count * 64u);
      EXPECT_EQ(b.size(), proto::kFrameHeaderBytes + f.body.size());
      records += f.header.count;
      next = f.header.seq + f.header.count;
    });
  };
  ASSERT_TRUE(pump_via([&] {
    take();
    return records >= 500;
  }));
  EXPECT_EQ(records, 500u) << "sealed DATA did not arrive whole";
  // The stranger's GAP: "the next sequence is 10500" (records 500..10499
  // gone), well formed (no body; its len the tag's), its tag made up.
  std::vector<std::byte> gap(proto::kFrameHeaderBytes + net::kFrameTagBytes, std::byte{0x42});
  proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kGap, 0, 0, net::kFrameTagBytes, 10500}, gap.data());
  proxy.inject_to_mirror(gap);
  ASSERT_TRUE(pump_via([&] {
    take();
    return m->state() != State::kStreaming;
  })) << "the forged GAP did not end the session";
  EXPECT_EQ(m->control_stats().bad_frame_mac, 1u);
  EXPECT_NE(m->end_reason().find("MAC"), std::string::npos) << "ended: " << m->end_reason();
  EXPECT_EQ(gaps, 0u) << "the forged GAP reached the session";
  EXPECT_EQ(records, 500u);
}

}  // namespace
}  // namespace ringfire::control
