// worker_test.cc — serve and mirror sessions on a port worker over an
// in-memory packet port: hand-built datagrams in, and exactly what each
// session queued for TX inspected, on a fake clock. Pacing, heartbeats,
// punch tokens, dup, blobs too large for a datagram; the mirror's NAKs and
// punches; a port that refuses what it is given; the worker's routing by
// binding, and sessions added and removed while another streams.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "dataplane/mirror_session_impl.h"
#include "dataplane/port_worker.h"
#include "dataplane/serve_session_impl.h"
#include "gtest/gtest.h"
#include "ring/blob.h"
#include "ring/check_record.h"
#include "ring/consumer.h"
#include "ring/monotonic.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::dataplane {

// FakePort is a PacketPort whose traffic a test scripts and inspects.
struct FakePort {
  struct Datagram {
    std::vector<std::byte> bytes;
    Endpoint peer;
    BindingId binding = 1;  // inbox: the binding it arrives on; sent: the one it left from
  };
  struct State {
    std::deque<Datagram> inbox;  // rx_burst delivers these
    std::vector<Datagram> sent;  // tx_burst records these
    size_t bursts = 0;           // tx_burst calls
    std::vector<Datagram> delivered;
    size_t tx_room = SIZE_MAX;   // datagrams tx_burst still takes; the rest it refuses
    std::vector<BindingId> live; // installed bindings
  };
  struct Prepared {
    Endpoint local;
  };
  std::shared_ptr<State> state = std::make_shared<State>();
  Endpoint self{0xC6120001, 7402};

  size_t rx_burst(RxDatagram* out, size_t n) {
    State& s = *state;
    s.delivered.clear();
    while (!s.inbox.empty() && s.delivered.size() < n) {
      s.delivered.push_back(std::move(s.inbox.front()));
      s.inbox.pop_front();
    }
    for (size_t i = 0; i < s.delivered.size(); ++i) {
      out[i] = RxDatagram{s.delivered[i].bytes, s.delivered[i].peer, s.delivered[i].binding};
    }
    return s.delivered.size();
  }
  size_t tx_burst(const TxDatagram* in, size_t n) {
    ++state->bursts;
    const size_t take = std::min(n, state->tx_room);
    for (size_t i = 0; i < take; ++i) {
      // What a real port puts on the wire: the payload, then its trailer.
      std::vector<std::byte> bytes(in[i].payload.begin(), in[i].payload.end());
      if (in[i].trailer != nullptr) bytes.insert(bytes.end(), in[i].trailer, in[i].trailer + proto::kTagFrameBytes);
      state->sent.push_back({std::move(bytes), in[i].to, in[i].binding});
    }
    if (state->tx_room != SIZE_MAX) state->tx_room -= take;
    return take;
  }
  Endpoint local() const { return self; }
  BindingId install(Prepared) {
    BindingId id = 1;
    while (std::find(state->live.begin(), state->live.end(), id) != state->live.end()) ++id;
    state->live.push_back(id);
    return id;
  }
  void uninstall(BindingId b) { std::erase(state->live, b); }
};
static_assert(PacketPort<FakePort>);

template class ServeSession<FakePort>;
template class MirrorSession<FakePort>;

// WaitablePort is a FakePort with a wait fd, as the kernel port has: a
// worker on it can park in poll() for its datagrams.
struct WaitablePort : FakePort {
  int fd = -1;
  int wait_fd() const { return fd; }
};
template class ServeSession<WaitablePort>;

// LendingFakePort lends TX buffers (as a DPDK port lends mbufs) and records,
// per datagram sent, whether it was built in a buffer it lent.
struct LendingFakePort : FakePort {
  struct Loans {
    std::map<void*, std::unique_ptr<std::byte[]>> out;  // lent, not yet released
    size_t lent = 0;
    size_t bad_releases = 0;  // released twice, or never lent
    bool lend = true;
    std::vector<bool> in_place;  // per DATA datagram sent: built in the lease it names
  };
  static Loans& loans() {
    static Loans l;
    return l;
  }
  static constexpr size_t kRoom = 2048;
  bool lease_tx(TxLease* l) {
    if (!loans().lend) return false;
    auto buf = std::make_unique<std::byte[]>(kRoom);
    l->room = buf.get();
    l->capacity = kRoom;
    l->handle = buf.get();
    loans().out.emplace(buf.get(), std::move(buf));
    ++loans().lent;
    return true;
  }
  static void release_tx(void* handle) {
    if (loans().out.erase(handle) != 1) ++loans().bad_releases;
  }
  size_t tx_burst(const TxDatagram* in, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      proto::Frame f;
      if (proto::decode_frame(in[i].payload, in[i].payload.size(), &f) != proto::DecodeError::kOk ||
          f.header.kind != proto::FrameKind::kData) {
        continue;  // heartbeats, probes: small, built on the stack
      }
      loans().in_place.push_back(in[i].lease != nullptr && loans().out.contains(in[i].lease) &&
                                 in[i].payload.data() == static_cast<std::byte*>(in[i].lease));
    }
    return FakePort::tx_burst(in, n);
  }
};
static_assert(LendingPort<LendingFakePort>);
template class ServeSession<LendingFakePort>;

// Rig: one session on its own port worker (installed by the first step),
// stepped through the worker as a real one is.
template <typename Session>
class Rig {
 public:
  Rig(FakePort port, std::unique_ptr<Session> s, bool bound = true) : worker_(port), s_(std::move(s)) {
    typename PortWorker<FakePort>::Command c;
    c.id = 1;
    if constexpr (std::is_same_v<Session, ServeSession<FakePort>>) {
      c.kind = PortWorker<FakePort>::Command::Kind::kAddServe;
      c.serve = s_.get();
    } else {
      c.kind = PortWorker<FakePort>::Command::Kind::kAddMirror;
      c.mirror = s_.get();
    }
    c.binding = bound ? &binding_ : nullptr;
    EXPECT_TRUE(worker_.commands.try_push(c));
  }
  bool step(uint64_t now_ns) { return worker_.step(now_ns); }
  auto& link() { return s_->link(); }
  Session& session() { return *s_; }
  PortWorker<FakePort>& worker() { return worker_; }

 private:
  PortWorker<FakePort> worker_;
  std::unique_ptr<Session> s_;
  FakePort::Prepared binding_;
};
using ServeRig = Rig<ServeSession<FakePort>>;
using MirrorRig = Rig<MirrorSession<FakePort>>;

namespace {

using ring::testing::ScopedRing;

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;
const Endpoint kGroup{0xEFFF0001, 7401};

proto::Frame decode(const FakePort::Datagram& d) {
  proto::Frame f;
  EXPECT_EQ(proto::decode_frame(d.bytes, d.bytes.size(), &f), proto::DecodeError::kOk);
  return f;
}

std::vector<std::byte> punch(uint64_t token) {
  std::vector<std::byte> b(16);
  proto::encode_punch(token, b);
  return b;
}

class ServeWorkerTest : public ::testing::Test {
 protected:
  ServeWorkerTest() : ring_(ring::testing::fixed_ring(1024, 64)), producer_(*ring::Producer::attach(ring_.open())) {}

  std::unique_ptr<ServeRig> worker(ServeConfig c) {
    c.session = 9;
    auto reader = ring::RawReader::attach(ring_.open(), ring::StartPosition::latest());
    auto repair = ring::RawReader::attach(ring_.open(), ring::StartPosition::at(0));
    return std::make_unique<ServeRig>(
        port_, std::make_unique<ServeSession<FakePort>>(std::move(*reader), c, std::move(*repair)));
  }
  void publish(int n) {
    for (int i = 0; i < n; ++i) {
      ring::fill_record({producer_.claim(), 64}, producer_.next_seq(), 0);
      producer_.commit();
    }
  }
  std::vector<FakePort::Datagram>& sent() { return port_.state->sent; }
  // beats_after_a_frame: a record sent at t0, then steps every `tick` for
  // `span`: the ms after t0 at which something (a heartbeat) was sent.
  std::vector<uint64_t> beats_after_a_frame(ServeRig& w, uint64_t t0, uint64_t span, uint64_t tick) {
    publish(1);
    w.step(t0);
    std::vector<uint64_t> beats;
    for (uint64_t t = t0; t <= t0 + span; t += tick) {
      const size_t before = sent().size();
      w.step(t);
      if (sent().size() != before) beats.push_back((t - t0) / kMs);
    }
    return beats;
  }

  ScopedRing ring_;
  ring::Producer producer_;
  FakePort port_;
};

TEST_F(ServeWorkerTest, RecordsGoOutAsOneDataFrameToTheGroup) {
  ServeConfig c;
  c.multicast = kGroup;
  auto w = worker(c);
  publish(3);
  w->step(1000 * kMs);
  ASSERT_EQ(sent().size(), 1u);
  EXPECT_EQ(sent()[0].peer, kGroup);
  const proto::Frame f = decode(sent()[0]);
  EXPECT_EQ(f.header.kind, proto::FrameKind::kData);
  EXPECT_EQ(f.header.seq, 0u);
  EXPECT_EQ(f.header.count, 3);
  EXPECT_EQ(f.header.flags, 9);  // the session byte
  EXPECT_EQ(w->link().stats.next_to_send.load(), 3u);
}

TEST_F(ServeWorkerTest, ARecordPastTheSparseOnesWaitsForTheIntervalAndALoneLateOneLeavesAtOnce) {
  ServeConfig c;
  c.multicast = kGroup;
  auto w = worker(c);
  const uint64_t t0 = 1000 * kMs;
  for (uint32_t i = 0; i < Pacer::kSparseRecords; ++i) {
    publish(1);
    w->step(t0 + i * kUs);
    ASSERT_EQ(sent().size(), i + 1) << "a sparse stream's record " << i << " was held";
  }
  const uint64_t last = t0 + (Pacer::kSparseRecords - 1) * kUs;
  publish(1);
  w->step(last + 10 * kUs);  // the fifth this interval, 10 us after the last frame: held
  EXPECT_EQ(sent().size(), Pacer::kSparseRecords);
  w->step(last + 50 * kUs);  // the interval has passed
  ASSERT_EQ(sent().size(), Pacer::kSparseRecords + 1);
  EXPECT_EQ(decode(sent().back()).header.seq, Pacer::kSparseRecords);
  publish(1);
  w->step(t0 + 900 * kUs);  // quiet for 850 us: at once
  ASSERT_EQ(sent().size(), Pacer::kSparseRecords + 2);
}

// Past the sparse records, within the pacing interval records are left in
// the ring (the worker does nothing, and says so) until enough wait to fill
// a frame; then one full frame goes, holding every record in order.
TEST_F(ServeWorkerTest, WithinThePacingIntervalRecordsWaitInTheRingUntilTheyFillAFrame) {
  ServeConfig c;
  c.multicast = kGroup;
  auto w = worker(c);
  const uint64_t t0 = 1000 * kMs;
  const uint32_t k = Pacer::kSparseRecords;
  for (uint32_t i = 0; i < k; ++i) {
    publish(1);
    ASSERT_TRUE(w->step(t0 + i * kUs));  // sparse: each leaves at once
  }
  ASSERT_EQ(sent().size(), k);
  publish(1);
  ASSERT_TRUE(w->step(t0 + k * kUs));  // taken (the stream was still sparse), held: the interval's fifth
  EXPECT_EQ(sent().size(), k);
  publish(1);
  EXPECT_FALSE(w->step(t0 + (k + 1) * kUs)) << "the worker took a record that may not leave yet";
  // ... and the worker sleeps no longer than the pacer's deadline for it.
  EXPECT_EQ(w->worker().next_deadline_ns(t0 + (k + 1) * kUs), t0 + (k - 1) * kUs + c.pace_ns);
  const size_t per_frame = (1472 - proto::kFrameHeaderBytes) / 64;  // 22 records of 64 bytes
  publish(static_cast<int>(per_frame) - 3);  // one short of filling it (one is in the frame)
  EXPECT_FALSE(w->step(t0 + (k + 2) * kUs)) << "the worker read records it did not need yet";
  EXPECT_EQ(sent().size(), k);
  EXPECT_EQ(w->link().stats.records.get(), k);
  publish(1);  // now they fill it
  ASSERT_TRUE(w->step(t0 + (k + 3) * kUs));
  ASSERT_EQ(sent().size(), k + 1);
  const proto::Frame f = decode(sent().back());
  EXPECT_EQ(f.header.seq, k);
  EXPECT_EQ(f.header.count, per_frame);
}

// A worker whose one serve holds a record for the pacer sleeps until the
// pacer's deadline: not at once (the record is there, but may not leave),
// and not the backoff's longer timeout. The stream must be dense for that:
// the first Pacer::kSparseRecords records of an interval leave one by one.
TEST_F(ServeWorkerTest, AWorkerWhoseRecordWaitsForThePacerSleepsUntilItsDeadline) {
  ServeConfig c;
  c.multicast = kGroup;
  c.pace_ns = 30 * kMs;
  c.heartbeat_ns = 3600'000 * kMs;
  c.heartbeat_max_ns = c.heartbeat_ns;
  auto w = worker(c);
  const uint64_t t0 = monotonic_ns();
  for (uint32_t i = 0; i < Pacer::kSparseRecords; ++i) {
    publish(1);
    ASSERT_TRUE(w->step(t0));  // sparse: each leaves at once
  }
  ASSERT_EQ(sent().size(), Pacer::kSparseRecords);
  publish(1);
  w->step(t0);  // one more this interval: it waits for the pacer
  ASSERT_EQ(sent().size(), Pacer::kSparseRecords);
  w->worker().park(t0, 1000 * kMs);
  const uint64_t slept = monotonic_ns() - t0;
  EXPECT_GE(slept, 25 * kMs) << "it did not sleep";
  EXPECT_LT(slept, 500 * kMs) << "it slept past the pacer's deadline";
  w->step(monotonic_ns());
  EXPECT_EQ(sent().size(), Pacer::kSparseRecords + 1);
}

TEST_F(ServeWorkerTest, WhenIdleAHeartbeatCarriesOnePastTheLastSentSequence) {
  ServeConfig c;
  c.multicast = kGroup;
  auto w = worker(c);
  publish(5);
  w->step(1000 * kMs);
  w->step(1000 * kMs + 500 * kUs);
  EXPECT_EQ(sent().size(), 1u);
  w->step(1001 * kMs);
  ASSERT_EQ(sent().size(), 2u);
  const proto::Frame hb = decode(sent()[1]);
  EXPECT_EQ(hb.header.kind, proto::FrameKind::kHeartbeat);
  EXPECT_EQ(hb.header.seq, 5u);
  EXPECT_EQ(hb.header.flags, 9);
}

TEST_F(ServeWorkerTest, WhileIdleHeartbeatsBackOffToTheirMaximumAndADataFrameResetsThem) {
  ServeConfig c;
  c.multicast = kGroup;
  c.heartbeat_max_ns = 8 * kMs;
  auto w = worker(c);
  const uint64_t t0 = 1000 * kMs;
  // 1 ms after the frame, then 2, 4, 8, 8 ... ms apart.
  EXPECT_EQ(beats_after_a_frame(*w, t0, 40 * kMs, 100 * kUs), (std::vector<uint64_t>{1, 3, 7, 15, 23, 31, 39}));
  publish(1);
  w->step(t0 + 41 * kMs);
  sent().clear();
  w->step(t0 + 42 * kMs);  // 1 ms after the new frame: the first heartbeat again
  ASSERT_EQ(sent().size(), 1u);
  EXPECT_EQ(decode(sent()[0]).header.kind, proto::FrameKind::kHeartbeat);
}

// The stream mux's channel grows its idle heartbeats 64-fold: one 1 ms
// after a pass (its lost last datagram shows), the next 64 ms later.
TEST_F(ServeWorkerTest, HeartbeatsGrowByTheConfiguredFactor) {
  ServeConfig c;
  c.multicast = kGroup;
  c.heartbeat_growth = 64;
  auto w = worker(c);
  // then at the 100 ms maximum
  EXPECT_EQ(beats_after_a_frame(*w, 1000 * kMs, 300 * kMs, 500 * kUs), (std::vector<uint64_t>{1, 65, 165, 265}));
}

// Bursts at a steady cadence (a decode loop's steps, 20 ms apart) move the
// first heartbeat after each to 3 cadences: none between the bursts
// once the cadence is known; when they stop, one comes 60 ms after the
// last (its lost last datagram shows). Without the option: four between
// every two bursts.
TEST_F(ServeWorkerTest, BurstsAtASteadyCadenceSendNoHeartbeatBetweenThem) {
  for (bool follow : {true, false}) {
    ServeConfig c;
    c.multicast = kGroup;
    c.pace_ns = 0;
    c.heartbeat_follows_cadence = follow;
    auto w = worker(c);
    const uint64_t t0 = 1000 * kMs;
    uint64_t heartbeats = 0, data = 0;
    auto count = [&] {
      for (const auto& d : sent()) (decode(d).header.kind == proto::FrameKind::kHeartbeat ? heartbeats : data) += 1;
      sent().clear();
    };
    for (int step = 0; step < 10; ++step) {
      publish(3);
      const uint64_t at = t0 + static_cast<uint64_t>(step) * 20 * kMs;
      for (uint64_t t = at; t < at + 20 * kMs; t += 500 * kUs) w->step(t);
      count();
      if (step == 3) heartbeats = 0;  // from here the cadence is known
    }
    EXPECT_EQ(data, 10u) << "follow " << follow;
    // Without: 1, 3, 7 and 15 ms after each of the last six bursts.
    EXPECT_EQ(heartbeats, follow ? 0u : 24u) << "follow " << follow;
    // The bursts stop: the first heartbeat past the 20 ms the next burst was
    // due comes 60 ms after the last one (31 ms without: its backed-off one).
    const uint64_t last = t0 + 9 * 20 * kMs;
    uint64_t first_beat = 0;
    for (uint64_t t = last + 20 * kMs; t < last + 80 * kMs && first_beat == 0; t += 500 * kUs) {
      w->step(t);
      if (!sent().empty()) first_beat = (t - last) / kUs;
    }
    EXPECT_EQ(first_beat, follow ? 60'000u : 31'000u) << "follow " << follow;
  }
}

// Bursts at no steady spacing (5 ms, then 35 ms, again and again: request
// and response, not decode steps) keep the prompt heartbeat: 1 ms after
// each burst, whatever the option says.
TEST_F(ServeWorkerTest, BurstsAtNoSteadyCadenceKeepThePromptHeartbeat) {
  ServeConfig c;
  c.multicast = kGroup;
  c.pace_ns = 0;
  c.heartbeat_follows_cadence = true;
  auto w = worker(c);
  uint64_t t = 1000 * kMs;
  int prompt = 0;
  for (int burst = 0; burst < 12; ++burst) {
    publish(2);
    w->step(t);
    sent().clear();
    w->step(t + 1 * kMs);  // the first heartbeat after the burst, if it is prompt
    const bool beat = !sent().empty() && decode(sent()[0]).header.kind == proto::FrameKind::kHeartbeat;
    if (burst >= 4 && beat) ++prompt;
    sent().clear();
    const uint64_t gap = burst % 2 == 0 ? 5 * kMs : 35 * kMs;
    for (uint64_t u = t + 1 * kMs + 500 * kUs; u < t + gap; u += 500 * kUs) w->step(u);
    sent().clear();
    t += gap;
  }
  EXPECT_EQ(prompt, 8) << "an irregular spacing took the heartbeat away";
}

ServeCommand allow(uint64_t token, const Endpoint& from, const net::MacKey* key = nullptr) {
  ServeCommand c{ServeCommand::Kind::kAllowToken, token};
  c.peer_ip = from.ip;
  if (key != nullptr) {
    c.keyed = true;
    c.punch_key = *key;
  }
  return c;
}

// Unkeyed, every datagram ends with its destination's TAG frame: the
// group's tag on the group, each unicast mirror's own on its datagrams,
// none for a mirror given no tag (an older peer); data, heartbeats and
// repairs alike, and one payload to all of them.
TEST_F(ServeWorkerTest, EachDestinationsDatagramsEndWithItsOwnTag) {
  ServeConfig c;
  c.multicast = kGroup;
  c.session = 9;
  c.tag = 0x1111111111111111;
  c.mtu = 4 * 64 + proto::kFrameHeaderBytes + proto::kTagFrameBytes;
  auto w = worker(c);
  const Endpoint a{0xC6120003, 6666}, b{0xC6120004, 7777}, old{0xC6120005, 8888};
  ServeCommand ca = allow(77, a), cb = allow(78, b), cold = allow(79, old);
  ca.tag = 0xAAAAAAAAAAAAAAAA;
  cb.tag = 0xBBBBBBBBBBBBBBBB;
  for (const ServeCommand& cmd : {ca, cb, cold}) ASSERT_TRUE(w->link().commands.try_push(cmd));
  port_.state->inbox.push_back({punch(77), a});
  port_.state->inbox.push_back({punch(78), b});
  port_.state->inbox.push_back({punch(79), old});
  w->step(1000 * kMs);  // the punches: each mirror's address learned
  sent().clear();
  publish(4);
  w->step(1001 * kMs);
  w->step(1003 * kMs);  // and a heartbeat after it
  ASSERT_TRUE(w->link().commands.try_push({ServeCommand::Kind::kRepair, 78, 1, 2}));
  w->step(1004 * kMs);
  auto tail_of = [](const FakePort::Datagram& s) {
    return std::vector<std::byte>(s.bytes.end() - proto::kTagFrameBytes, s.bytes.end());
  };
  auto tag_bytes = [](uint64_t tag) {
    const TagFrame f = TagFrame::of(9, tag);
    return std::vector<std::byte>(f.bytes.begin(), f.bytes.end());
  };
  std::map<uint64_t, std::vector<std::string>> kinds;  // by destination's IP: each datagram's kind
  for (const FakePort::Datagram& s : sent()) {
    const proto::Frame f = decode(s);
    kinds[s.peer.ip].push_back(proto::frame_kind_name(f.header.kind));
    if (s.peer == kGroup) {
      EXPECT_EQ(tail_of(s), tag_bytes(c.tag)) << "to the group";
    } else if (s.peer == a) {
      EXPECT_EQ(tail_of(s), tag_bytes(ca.tag)) << "to a";
    } else if (s.peer == b) {
      EXPECT_EQ(tail_of(s), tag_bytes(cb.tag)) << "to b";
    } else {
      ASSERT_EQ(s.peer, old);
      EXPECT_EQ(s.bytes.size(), proto::kFrameHeaderBytes + f.header.len) << "an untagged mirror's datagram has a trailer";
    }
  }
  EXPECT_EQ(kinds[kGroup.ip], (std::vector<std::string>{"DATA", "HEARTBEAT"}));
  EXPECT_EQ(kinds[a.ip], (std::vector<std::string>{"DATA", "HEARTBEAT"}));
  EXPECT_EQ(kinds[b.ip], (std::vector<std::string>{"DATA", "HEARTBEAT", "DATA"}));  // the repair too
  EXPECT_EQ(kinds[old.ip], (std::vector<std::string>{"DATA", "HEARTBEAT"}));
}

TEST_F(ServeWorkerTest, APunchWithAWrongTokenIsRefusedAndSendsNothingThere) {
  auto w = worker(ServeConfig{});  // unicast only
  const Endpoint attacker{0xC6120002, 5555}, mirror{0xC6120003, 6666};
  ASSERT_TRUE(w->link().commands.try_push(allow(77, mirror)));
  port_.state->inbox.push_back({punch(99), attacker});
  publish(2);
  w->step(1000 * kMs);
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(w->link().stats.punch_unknown_token.get(), 1u);
  port_.state->inbox.push_back({punch(77), mirror});
  publish(1);
  w->step(1001 * kMs);
  ASSERT_EQ(sent().size(), 1u);
  EXPECT_EQ(sent()[0].peer, mirror);  // the reply goes where the punch came from
  for (const auto& d : sent()) EXPECT_NE(d.peer, attacker);
  EXPECT_EQ(w->link().stats.unicast_mirrors.get(), 1u);  // counted at once (a stream mux waits on it)
}

TEST_F(ServeWorkerTest, ARepairResendsTheRangeFromTheRingToTheGroupOrTheMirrorThatAsked) {
  ServeConfig c;
  c.multicast = kGroup;
  c.mtu = 64 * 4 + proto::kFrameHeaderBytes + proto::kTagFrameBytes;  // four records a datagram, and room for a tag
  auto w = worker(c);
  publish(10);
  w->step(1000 * kMs);
  w->step(1000 * kMs + 100 * kUs);
  sent().clear();
  // Records 2..7 again, for a multicast mirror (token 0): to the group.
  ASSERT_TRUE(w->link().commands.try_push({ServeCommand::Kind::kRepair, 0, 2, 7}));
  w->step(1001 * kMs);
  ASSERT_EQ(sent().size(), 2u);
  EXPECT_EQ(sent()[0].peer, kGroup);
  EXPECT_EQ(decode(sent()[0]).header.seq, 2u);
  EXPECT_EQ(decode(sent()[0]).header.count, 4);
  EXPECT_EQ(decode(sent()[1]).header.seq, 6u);
  EXPECT_EQ(decode(sent()[1]).header.count, 2);
  EXPECT_EQ(decode(sent()[1]).header.flags, 9);  // the session byte
  EXPECT_EQ(w->link().stats.repair_records.get(), 6u);
  // For a unicast mirror: only where its punch came from; an unknown token
  // (or one that has not punched yet) is refused, nothing sent.
  sent().clear();
  const Endpoint mirror{0xC6120003, 6666};
  ASSERT_TRUE(w->link().commands.try_push(allow(77, mirror)));
  port_.state->inbox.push_back({punch(77), mirror});
  w->step(1002 * kMs);
  sent().clear();
  ASSERT_TRUE(w->link().commands.try_push({ServeCommand::Kind::kRepair, 77, 9, 9}));
  ASSERT_TRUE(w->link().commands.try_push({ServeCommand::Kind::kRepair, 78, 0, 1}));
  w->step(1002 * kMs + 10 * kUs);
  ASSERT_EQ(sent().size(), 1u);
  EXPECT_EQ(sent()[0].peer, mirror);
  EXPECT_EQ(decode(sent()[0]).header.seq, 9u);
  EXPECT_EQ(w->link().stats.repairs.get(), 2u);
  EXPECT_EQ(w->link().stats.repairs_cut.get(), 1u);
}

TEST_F(ServeWorkerTest, ATokenPunchedFromAnotherAddressGetsOnlyAProbeUntilTheMirrorEchoesIt) {
  auto w = worker(ServeConfig{});
  const int efd = eventfd(0, EFD_NONBLOCK);
  w->link().notify_fd.store(efd);
  uint64_t told = 0;
  const Endpoint mirror{0xC6120003, 6666}, other{0xC6120005, 6666};
  ASSERT_TRUE(w->link().commands.try_push(allow(77, mirror)));
  port_.state->inbox.push_back({punch(77), other});  // the right token, another host
  publish(1);
  w->step(1000 * kMs);
  // No DATA there: one PROBE, carrying a challenge.
  ASSERT_EQ(sent().size(), 1u);
  EXPECT_EQ(sent()[0].peer, other);
  const proto::Frame probe = decode(sent()[0]);
  ASSERT_EQ(probe.header.kind, proto::FrameKind::kProbe);
  EXPECT_EQ(probe.header.flags, 9);
  EXPECT_EQ(w->link().stats.punch_probed.get(), 1u);
  // More punches from there within 100 ms: no more PROBEs (no reflection).
  for (int i = 0; i < 5; ++i) port_.state->inbox.push_back({punch(77), other});
  w->step(1010 * kMs);
  EXPECT_EQ(sent().size(), 1u);
  // A wrong echo validates nothing; the right one (the mirror heard it at
  // that address) does, and DATA goes there.
  ServeCommand echo{ServeCommand::Kind::kProbeEcho, 77, probe.header.seq + 1};
  ASSERT_TRUE(w->link().commands.try_push(echo));
  publish(1);
  w->step(1020 * kMs);
  EXPECT_EQ(sent().size(), 1u);
  EXPECT_EQ(read(efd, &told, sizeof(told)), -1) << "the control told of a mirror no probe validated";
  echo.first = probe.header.seq;
  ASSERT_TRUE(w->link().commands.try_push(echo));
  publish(1);
  w->step(1030 * kMs);
  ASSERT_EQ(sent().size(), 2u);
  // The echo validated it: counted, and the control told at once.
  EXPECT_EQ(w->link().stats.unicast_mirrors.get(), 1u);
  EXPECT_EQ(read(efd, &told, sizeof(told)), static_cast<ssize_t>(sizeof(told)));
  EXPECT_EQ(decode(sent()[1]).header.kind, proto::FrameKind::kData);
  EXPECT_EQ(sent()[1].peer, other);
  EXPECT_EQ(w->link().stats.paths_validated.get(), 1u);
  // From the mirror's TCP address (through a NAT the port may change) DATA
  // goes at once.
  port_.state->inbox.push_back({punch(77), Endpoint{mirror.ip, 4242}});
  publish(1);
  w->step(1040 * kMs);
  EXPECT_EQ(sent().back().peer, (Endpoint{mirror.ip, 4242}));
  EXPECT_EQ(decode(sent().back()).header.kind, proto::FrameKind::kData);
  w->link().notify_fd.store(-1);
  close(efd);
}

TEST_F(ServeWorkerTest, EveryKindOfJunkIsCountedByReasonAndSendsNothing) {
  auto w = worker(ServeConfig{});
  const Endpoint mirror{0xC6120003, 6666};
  ASSERT_TRUE(w->link().commands.try_push(allow(77, mirror)));
  std::vector<std::byte> junk(40, std::byte{0xee});
  std::vector<std::byte> gap(16);
  proto::encode_gap(5, gap);
  std::vector<std::byte> long_punch = punch(77);
  long_punch.resize(40);  // trailing bytes after the PUNCH
  proto::store_le32(long_punch.data() + 4, 24);
  for (const auto& d : {junk, gap, long_punch}) port_.state->inbox.push_back({d, mirror});
  publish(1);
  w->step(1000 * kMs);
  EXPECT_TRUE(sent().empty());
  const ServeStats& st = w->link().stats;
  EXPECT_EQ(st.punch_malformed.get(), 2u);  // the junk, and a PUNCH body of the wrong length
  EXPECT_EQ(st.punch_wrong_kind.get(), 1u);
  EXPECT_EQ(st.punches_refused(), 3u);
}

TEST_F(ServeWorkerTest, AnAuthenticatedSessionTakesOnlyMacedPunchesWithARisingCounter) {
  net::MacKey data_key, punch_key;
  data_key.bytes.fill(1);
  punch_key.bytes.fill(2);
  ServeConfig c;
  c.data_key = data_key;
  auto w = worker(c);
  const Endpoint mirror{0xC6120003, 6666};
  ASSERT_TRUE(w->link().commands.try_push(allow(77, mirror, &punch_key)));
  auto sealed = [&](uint64_t counter, const net::MacKey& k) {
    std::vector<std::byte> b(64);
    b.resize(seal(k, b.data(), proto::encode_punch_counted(77, counter, b), 0));
    return b;
  };
  net::MacKey wrong;
  wrong.bytes.fill(3);
  port_.state->inbox.push_back({punch(77), mirror});            // no MAC
  port_.state->inbox.push_back({sealed(1, wrong), mirror});     // another key
  publish(1);
  w->step(1000 * kMs);
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(w->link().stats.punch_bad_mac.get(), 2u);
  port_.state->inbox.push_back({sealed(5, punch_key), mirror});
  publish(1);
  w->step(1001 * kMs);
  ASSERT_FALSE(sent().empty());
  // What it sends is sealed under the data key: a mirror with it opens it.
  proto::ConstBytes inner;
  ASSERT_TRUE(unseal(data_key, sent().back().bytes, &inner));
  proto::Frame f;
  ASSERT_EQ(proto::decode_frame(inner, inner.size(), &f), proto::DecodeError::kOk);
  EXPECT_EQ(f.header.kind, proto::FrameKind::kData);
  EXPECT_EQ(inner.size(), proto::kFrameHeaderBytes + f.header.len);
  EXPECT_FALSE(unseal(punch_key, sent().back().bytes, &inner));
  // A captured PUNCH replayed (from the NAT's new port) moves nothing; a
  // newer one does.
  sent().clear();
  port_.state->inbox.push_back({sealed(5, punch_key), Endpoint{mirror.ip, 9999}});
  publish(1);
  w->step(1002 * kMs);
  EXPECT_EQ(w->link().stats.punch_replayed.get(), 1u);
  ASSERT_FALSE(sent().empty());
  EXPECT_EQ(sent().back().peer, mirror);
  port_.state->inbox.push_back({sealed(6, punch_key), Endpoint{mirror.ip, 9999}});
  publish(1);
  w->step(1003 * kMs);
  EXPECT_EQ(sent().back().peer, (Endpoint{mirror.ip, 9999}));
}

TEST_F(ServeWorkerTest, ARepairOfRecordsTheRingNoLongerHoldsIsCutNotSentTorn) {
  ServeConfig c;
  c.multicast = kGroup;
  auto w = worker(c);
  publish(1100);  // a 1024-slot ring: 0..75 are overwritten
  ASSERT_TRUE(w->link().commands.try_push({ServeCommand::Kind::kRepair, 0, 10, 20}));
  w->step(1000 * kMs);
  for (const auto& d : sent()) EXPECT_GE(decode(d).header.seq, 76u);
  EXPECT_EQ(w->link().stats.repair_records.get(), 0u);
  EXPECT_EQ(w->link().stats.repairs_cut.get(), 1u);
}

// A step's data frames leave in one tx_burst (one doorbell), each frame
// whole in its own buffer; with the gate shut, published records wait, and
// raising it lets all of them go in the next step's one burst.
TEST_F(ServeWorkerTest, AStepsFramesLeaveInOneBurstAndTheGateHoldsThemUntilRaised) {
  ServeConfig c;
  c.multicast = kGroup;
  c.mtu = 16 + 3 * 64;  // a frame holds a few 64-byte records: ten make several frames
  c.pace_ns = 0;        // the last, partial frame leaves in the same step
  auto w = worker(c);
  w->link().gate.store(0);
  publish(10);
  w->step(1000 * kMs);
  for (const auto& d : sent()) EXPECT_NE(decode(d).header.kind, proto::FrameKind::kData) << "records past the gate went out";
  sent().clear();
  w->link().gate.store(10);
  const size_t bursts = port_.state->bursts;
  w->step(1000 * kMs + 1);
  ASSERT_GE(sent().size(), 3u);
  EXPECT_EQ(port_.state->bursts, bursts + 1) << "the step's frames went in more than one burst";
  EXPECT_EQ(w->link().stats.data_bursts.get(), 1u);
  EXPECT_EQ(w->link().stats.data_datagrams.get(), sent().size());
  uint64_t next = 0;
  for (const auto& d : sent()) {  // in order, each frame whole (its own buffer)
    const proto::Frame f = decode(d);
    ASSERT_EQ(f.header.kind, proto::FrameKind::kData);
    EXPECT_EQ(f.header.seq, next);
    next += f.header.count;
  }
  EXPECT_EQ(next, 10u);
}

// The control, its TCP-mode mirrors caught up, asks to hear when the ring
// moves: the worker tells it once (its eventfd), at the first record it
// takes past the mark, and not again until asked again.
TEST_F(ServeWorkerTest, TheWorkerTellsTheControlOnceWhenItTakesTheRecordItWasAskedFor) {
  ServeConfig c;
  c.multicast = kGroup;
  c.pace_ns = 0;
  auto w = worker(c);
  const int efd = eventfd(0, EFD_NONBLOCK);
  w->link().notify_fd.store(efd);
  publish(2);
  w->step(1000 * kMs);
  w->link().tell_control_at.store(2);  // caught up to 2: tell me when record 2 is taken
  w->step(1001 * kMs);
  uint64_t v = 0;
  EXPECT_EQ(read(efd, &v, sizeof(v)), -1) << "told before the ring moved";
  publish(3);
  w->step(1002 * kMs);
  ASSERT_EQ(read(efd, &v, sizeof(v)), static_cast<ssize_t>(sizeof(v)));
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(w->link().stats.control_tells.get(), 1u);
  EXPECT_EQ(w->link().tell_control_at.load(), UINT64_MAX);
  publish(1);
  w->step(1003 * kMs);
  EXPECT_EQ(read(efd, &v, sizeof(v)), -1) << "told again unasked";
  EXPECT_EQ(w->link().stats.control_tells.get(), 1u);
  close(efd);
}

// Injected faults (a test facility) wake a session only when a delayed
// datagram falls due: a serve or a mirror that drops a share of its
// datagrams parks like any other (it used to spin: 100 % of a core for a
// daemon of idle mirrors under --loss).
TEST_F(ServeWorkerTest, InjectedFaultsWakeASessionOnlyForADelayedDatagramDue) {
  ServeConfig c;
  c.multicast = kGroup;
  c.pace_ns = 0;
  c.heartbeat_ns = 1000 * kMs;
  c.tx_faults.drop_ppm = 100'000;
  c.tx_faults.seed = 3;
  auto w = worker(c);
  publish(1);
  w->step(1000 * kMs);  // sent (or dropped): nothing held
  EXPECT_EQ(w->session().next_deadline_ns(1001 * kMs), 2000 * kMs) << "dropping faults keep it awake";

  FaultShaper delaying(FaultConfig{0, 0, 0, 1'000'000, 7 * kMs, 5});  // every datagram delayed 7 ms
  EXPECT_EQ(delaying.next_release_ns(), UINT64_MAX);
  std::vector<std::byte> d(8);
  int delivered = 0;
  delaying.offer(d, kGroup, 100 * kMs, [&](proto::ConstBytes, const Endpoint&) { ++delivered; });
  EXPECT_EQ(delivered, 0);
  EXPECT_EQ(delaying.next_release_ns(), 107 * kMs);
  delaying.release(107 * kMs, [&](proto::ConstBytes, const Endpoint&) { ++delivered; });
  EXPECT_EQ(delivered, 1);
  EXPECT_EQ(delaying.next_release_ns(), UINT64_MAX);
}

TEST_F(ServeWorkerTest, DupSendsEveryDatagramNTimes) {
  ServeConfig c;
  c.multicast = kGroup;
  c.dup = 3;
  auto w = worker(c);
  publish(1);
  w->step(1000 * kMs);
  ASSERT_EQ(sent().size(), 3u);
  EXPECT_EQ(sent()[0].bytes, sent()[2].bytes);
}

// dup = "auto": each unicast mirror's copies follow the loss its HEALTH
// reports against what was sent it (repairs and heartbeats counted too):
// the lossy mirror's datagrams go twice, the clean one's once throughout,
// and the lossy one's go once again when its path heals. Without auto the
// same reports change nothing.
class DupAutoTest : public ServeWorkerTest {
 protected:
  void run_case(bool automatic) {
    sent().clear();
    ServeConfig c;
    c.mtu = 64 + proto::kFrameHeaderBytes + proto::kTagFrameBytes;  // a record a datagram
    c.dup_auto = automatic;
    auto w = worker(c);
    const Endpoint lossy{0xC6120003, 6666}, clean{0xC6120004, 7777};
    ASSERT_TRUE(w->link().commands.try_push(allow(77, lossy)));
    ASSERT_TRUE(w->link().commands.try_push(allow(78, clean)));
    port_.state->inbox.push_back({punch(77), lossy});
    port_.state->inbox.push_back({punch(78), clean});
    uint64_t t = 1000 * kMs;
    w->step(t);
    sent().clear();  // a first heartbeat
    std::map<uint64_t, uint64_t> to;   // DATA datagrams sent, by destination port
    std::map<uint64_t, uint64_t> all;  // every datagram (heartbeats too): what the meter counts
    auto take = [&] {
      for (const FakePort::Datagram& d : sent()) {
        ++all[d.peer.port];
        if (decode(d).header.kind == proto::FrameKind::kData) ++to[d.peer.port];
      }
      sent().clear();
    };
    auto run = [&](int records) {  // publish and step until all of them left
      publish(records);
      for (int i = 0; i < records / 16 + 4; ++i) w->step(t += 100 * kUs);
      take();
    };
    std::map<uint64_t, uint64_t> naks;  // each mirror's NAK count: it grows in a window that lost any
    auto report = [&](uint64_t token, uint64_t received, bool missed = false) {
      ServeCommand r{ServeCommand::Kind::kLossReport, token};
      r.first = received;
      r.last = naks[token] += missed;
      ASSERT_TRUE(w->link().commands.try_push(r));
    };
    report(77, 0);  // the baselines
    report(78, 0);
    run(400);
    ASSERT_EQ(to[6666], 400u);
    ASSERT_EQ(to[7777], 400u);
    report(77, all[6666] * 8 / 10, /*missed=*/true);  // 20 % lost
    report(78, all[7777]);
    to.clear();
    publish(10);
    for (int i = 0; i < 4; ++i) w->step(t += 100 * kUs);
    std::vector<std::vector<std::byte>> to_lossy;
    for (const FakePort::Datagram& d : sent()) {
      if (d.peer == lossy && decode(d).header.kind == proto::FrameKind::kData) to_lossy.push_back(d.bytes);
    }
    take();
    EXPECT_EQ(to[7777], 10u);
    if (!automatic) {
      EXPECT_EQ(to[6666], 10u);
      EXPECT_EQ(w->link().stats.dup_auto_doubled.get(), 0u);
      return;
    }
    ASSERT_EQ(to[6666], 20u);
    for (size_t i = 0; i + 1 < to_lossy.size(); i += 2) EXPECT_EQ(to_lossy[i], to_lossy[i + 1]) << i;
    EXPECT_EQ(w->link().stats.dup_auto_doubled.get(), 1u);
    EXPECT_EQ(w->link().stats.dup_auto_switches.get(), 1u);
    EXPECT_EQ(w->link().stats.dup_auto_copies.get(), 10u);
    // A repair to it counts as sent it (once). Then the path heals: every
    // window whole, the clean mirror's too; it goes back to one copy.
    ASSERT_TRUE(w->link().commands.try_push({ServeCommand::Kind::kRepair, 77, 400, 401}));
    w->step(t += 100 * kUs);
    take();
    EXPECT_EQ(to[6666], 22u);
    int windows = 0;
    while (w->link().stats.dup_auto_doubled.get() != 0 && windows < 40) {
      report(77, all[6666]);
      report(78, all[7777]);
      to.clear();
      run(160);
      EXPECT_EQ(to[7777], 160u) << "the clean mirror doubled in window " << windows;
      ++windows;
    }
    EXPECT_EQ(w->link().stats.dup_auto_doubled.get(), 0u) << windows << " windows";
    EXPECT_EQ(w->link().stats.dup_auto_switches.get(), 2u);
    to.clear();
    run(10);
    EXPECT_EQ(to[6666], 10u);
  }
};

TEST_F(DupAutoTest, DupAutoDoublesOnlyTheMirrorWhoseReportsShowLoss) { run_case(true); }

// What the port refused never reached the path: not counted as sent, so a
// mirror that took all that left is not judged lossy (nor doubled, which
// would fill the socket more).
TEST_F(ServeWorkerTest, DupAutoCountsOnlyTheDatagramsThePortTook) {
  ServeConfig c;
  c.mtu = 64 + proto::kFrameHeaderBytes + proto::kTagFrameBytes;  // a record a datagram
  c.dup_auto = true;
  auto w = worker(c);
  const Endpoint mirror{0xC6120003, 6666};
  ASSERT_TRUE(w->link().commands.try_push(allow(77, mirror)));
  port_.state->inbox.push_back({punch(77), mirror});
  uint64_t t = 1000 * kMs;
  w->step(t);
  uint64_t taken = sent().size();
  sent().clear();
  ServeCommand r{ServeCommand::Kind::kLossReport, 77};
  r.first = taken;
  ASSERT_TRUE(w->link().commands.try_push(r));
  for (int round = 0; round < 8; ++round) {
    port_.state->tx_room = 200;  // of the next 400, half refused
    publish(400);
    for (int i = 0; i < 30; ++i) w->step(t += 100 * kUs);
    taken += sent().size();
    sent().clear();
    port_.state->tx_room = SIZE_MAX;
    r.first = taken;  // the mirror took every datagram that left ...
    r.last = round + 1;  // ... and NAKed the records of the refused ones
    ASSERT_TRUE(w->link().commands.try_push(r));
  }
  w->step(t += 100 * kUs);
  EXPECT_GE(w->link().stats.send_failures.get(), 8 * 200u);  // (and a heartbeat or so)
  EXPECT_EQ(w->link().stats.dup_auto_switches.get(), 0u);
  EXPECT_EQ(w->link().stats.dup_auto_doubled.get(), 0u);
}
TEST_F(DupAutoTest, WithoutAutoTheSameReportsChangeNothing) { run_case(false); }

TEST(ServeWorkerBlob, ARecordTooLargeForADatagramIsQueuedForTcp) {
  ScopedRing r(ring::testing::blob_ring(64, 1 << 16));
  auto p = ring::BlobProducer::attach(r.open());
  ASSERT_TRUE(p.ok());
  FakePort port;
  ServeConfig c;
  c.multicast = kGroup;
  c.mtu = 1472;
  ServeRig w(port, std::make_unique<ServeSession<FakePort>>(
                      *ring::RawReader::attach(r.open(), ring::StartPosition::latest()), c));
  for (uint32_t len : {100u, 3000u, 100u}) {
    const uint64_t seq = p->next_seq();
    ring::fill_record(p->reserve(len), seq, 0);
    p->commit(len);
  }
  w.step(1000 * kMs);
  w.step(1001 * kMs);
  uint64_t oversized = 0;
  ASSERT_TRUE(w.link().oversized.try_pop(&oversized));
  EXPECT_EQ(oversized, 1u);
  std::vector<uint64_t> firsts;
  for (const auto& d : port.state->sent) {
    const proto::Frame f = decode(d);
    if (f.header.kind == proto::FrameKind::kData) firsts.push_back(f.header.seq);
  }
  EXPECT_EQ(firsts, (std::vector<uint64_t>{0, 2}));  // 1 never went over UDP
}

// ---- the mirror worker

TEST(MirrorWorkerTest, DatagramsLandInTheRingAndALossQueuesANakAndWakesControl) {
  ScopedRing r(ring::testing::fixed_ring(1024, 64, ring::kFlagSparse));
  FakePort port;
  const int efd = eventfd(0, EFD_NONBLOCK);
  MirrorRig w(port, std::make_unique<MirrorSession<FakePort>>(*MirrorWriter::attach(r.open()), MirrorWorkerConfig{}, 0, 9, efd));
  auto frame = [](uint64_t seq, uint16_t count) {
    std::vector<std::byte> f(16 + count * 64);
    proto::encode_data_header(f.data(), seq, count, count * 64, 9);
    for (uint16_t i = 0; i < count; ++i) ring::fill_record({f.data() + 16 + i * 64, 64}, seq + i, 0);
    return f;
  };
  const Endpoint source{0xC6120001, 40000};
  port.state->inbox.push_back({frame(0, 4), source});
  port.state->inbox.push_back({frame(6, 2), source});  // 4..5 lost
  w.step(1000 * kMs);
  EXPECT_EQ(w.link().stats.records.get(), 4u);
  proto::NakRanges nak;
  ASSERT_TRUE(w.link().naks.try_pop(&nak));
  ASSERT_EQ(nak.count, 1u);
  EXPECT_EQ(nak.ranges[0].first, 4u);
  EXPECT_EQ(nak.ranges[0].last, 5u);
  uint64_t wakes = 0;
  EXPECT_EQ(read(efd, &wakes, 8), 8);
  EXPECT_EQ(wakes, 1u);
  // The repair arrives by TCP through the link.
  ASSERT_TRUE(w.link().tcp_frames.try_push(frame(4, 2)));
  w.step(1001 * kMs);
  EXPECT_EQ(w.link().stats.next_seq.get(), 8u);
  close(efd);
}

TEST(MirrorWorkerTest, AUnicastMirrorPunchesUntilDataFlows) {
  ScopedRing r(ring::testing::fixed_ring(1024, 64, ring::kFlagSparse));
  FakePort port;
  MirrorWorkerConfig c;
  const Endpoint source{0xC6120001, 7402};
  c.punch_to = source;
  c.punch_token = 0xABCD;
  const int efd = eventfd(0, EFD_NONBLOCK);
  MirrorRig w(port, std::make_unique<MirrorSession<FakePort>>(*MirrorWriter::attach(r.open()), c, 0, 9, efd));
  w.step(1000 * kMs);
  w.step(1010 * kMs);  // within the 50 ms retry: no second punch
  w.step(1060 * kMs);
  ASSERT_EQ(port.state->sent.size(), 2u);
  EXPECT_EQ(port.state->sent[0].peer, source);
  const proto::Frame f = decode(port.state->sent[0]);
  EXPECT_EQ(f.header.kind, proto::FrameKind::kPunch);
  EXPECT_EQ(f.header.seq, 0xABCDu);
  close(efd);
}

// ---- a port that refuses what it is given

TEST_F(ServeWorkerTest, DatagramsThePortRefusesAreCountedAsSendFailures) {
  ServeConfig c;
  c.multicast = kGroup;
  c.mtu = 64 + proto::kFrameHeaderBytes + proto::kTagFrameBytes;  // one record a datagram, and room for a tag
  port_.state->tx_room = 2;
  auto w = worker(c);
  publish(5);
  w->step(1000 * kMs);
  for (int i = 1; i <= 5; ++i) w->step(1000 * kMs + i * 100 * kUs);
  EXPECT_EQ(sent().size(), 2u);
  EXPECT_EQ(w->link().stats.datagrams.get(), 2u);
  EXPECT_EQ(w->link().stats.send_failures.get(), 3u);
  EXPECT_EQ(w->link().stats.next_to_send.load(), 5u);  // refused, not retried: mirrors NAK them
}

// ---- frames built where they are sent

// records_of: the DATA frames among `sent`, each record checked against its
// sequence; returns the sequences in the order they arrived.
std::vector<uint64_t> records_of(const std::vector<FakePort::Datagram>& sent) {
  std::vector<uint64_t> seqs;
  for (const auto& d : sent) {
    const proto::Frame f = decode(d);
    if (f.header.kind != proto::FrameKind::kData) continue;
    for (uint16_t i = 0; i < f.header.count; ++i) {
      const std::byte* rec = d.bytes.data() + proto::kFrameHeaderBytes + i * 64u;
      EXPECT_EQ(ring::check_record(rec, 64, f.header.seq + i), ring::CheckVerdict::kOk) << "seq " << f.header.seq + i;
      seqs.push_back(f.header.seq + i);
    }
  }
  return seqs;
}

// A reader lapped while a partial frame is open finds a record that does not
// follow the frame (records are copied from the ring straight into the
// frame): the frame leaves as it was, and that record, intact, opens the next.
TEST_F(ServeWorkerTest, ALappedServeSendsItsOpenFrameAndTheNextRecordItFindsOpensAFreshOne) {
  ServeConfig c;
  c.multicast = kGroup;
  c.pace_ns = 10'000 * kMs;  // the partial frame may not leave by itself
  auto w = worker(c);
  const size_t per_frame = (1472 - proto::kFrameHeaderBytes) / 64;  // 22 records of 64 bytes
  publish(static_cast<int>(per_frame) + 3);
  w->step(1000 * kMs);  // a full frame (0..21) leaves; 22..24 in the open frame
  ASSERT_EQ(records_of(sent()).size(), per_frame);
  publish(1024 + 100);  // the ring (1,024 slots) laps the reader
  w->step(1000 * kMs + 1);
  const std::vector<uint64_t> seqs = records_of(sent());
  ASSERT_GT(seqs.size(), per_frame + 3);
  for (size_t i = 0; i < per_frame + 3; ++i) EXPECT_EQ(seqs[i], i);
  EXPECT_GE(seqs[per_frame + 3], 125u) << "a record the writer had overwritten was sent";
  for (size_t i = per_frame + 4; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], seqs[i - 1] + 1);
  EXPECT_GT(w->link().stats.lapped.get(), 0u);
}


// On a port that lends buffers, every data frame is built in one and sent
// from it (no copy between the ring and the port's buffer); each lease is
// given back once, after its burst, and the open frame's when the session
// goes. A port with nothing to lend gets frames built in the session's own
// buffers, whole.
TEST(ServeLendingTest, FramesAreBuiltInTheBuffersThePortLendsAndEachIsGivenBackOnce) {
  ScopedRing r(ring::testing::fixed_ring(1024, 64));
  auto producer = ring::Producer::attach(r.open());
  ASSERT_TRUE(producer.ok());
  auto publish = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ring::fill_record({producer->claim(), 64}, producer->next_seq(), 0);
      producer->commit();
    }
  };
  LendingFakePort::Loans& loans = LendingFakePort::loans();
  loans = {};
  LendingFakePort port;
  ServeConfig c;
  c.multicast = kGroup;
  c.dup = 2;  // both copies name the same lease
  c.mtu = 16 + 4 * 64 + proto::kTagFrameBytes;  // four records a frame, and room for a tag
  c.pace_ns = 0;
  {
    auto s = std::make_unique<ServeSession<LendingFakePort>>(
        *ring::RawReader::attach(r.open(), ring::StartPosition::latest()), c);
    PortWorker<LendingFakePort> w(port);
    using Command = PortWorker<LendingFakePort>::Command;
    LendingFakePort::Prepared b;
    ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kAddServe, 1, s.get(), nullptr, &b}));
    w.step(1000 * kMs);  // installed: the open frame is in a lent buffer
    EXPECT_EQ(loans.out.size(), 1u);
    publish(10);  // frames of 4, 4 and 2, each twice
    w.step(1001 * kMs);
    const std::vector<uint64_t> seqs = records_of(port.state->sent);
    ASSERT_EQ(seqs.size(), 20u);
    for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(std::count(seqs.begin(), seqs.end(), i), 2) << i;
    ASSERT_EQ(loans.in_place.size(), 6u);
    for (size_t i = 0; i < loans.in_place.size(); ++i) EXPECT_TRUE(loans.in_place[i]) << "datagram " << i << " was copied";
    EXPECT_EQ(loans.lent, 4u);  // three sent, one open
    EXPECT_EQ(loans.out.size(), 1u) << "a sent frame's lease was kept";
    // Nothing to lend: the next frames are built in the session's buffers.
    loans.lend = false;
    publish(5);
    w.step(1002 * kMs);  // the open (lent) frame fills and goes; the next is the session's own
    w.step(1003 * kMs);
    EXPECT_EQ(records_of(port.state->sent).size(), 30u);
    EXPECT_EQ(std::count(loans.in_place.begin(), loans.in_place.end(), false), 2) << "the unlent frame, twice";
    EXPECT_TRUE(loans.out.empty());
    loans.lend = true;
    publish(4);
    w.step(1004 * kMs);
    w.step(1005 * kMs);  // a lent frame open again
    EXPECT_EQ(loans.out.size(), 1u);
    ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kRemove, 1, nullptr, nullptr, nullptr}));
    w.step(1006 * kMs);
    s.reset();
  }
  EXPECT_TRUE(loans.out.empty()) << "the open frame's lease outlived its session";
  EXPECT_EQ(loans.bad_releases, 0u);
}

// ---- the port worker: routing by binding, sessions added and removed

std::vector<std::byte> data_frame(uint64_t seq, uint16_t count) {
  std::vector<std::byte> f(16 + count * 64);
  proto::encode_data_header(f.data(), seq, count, count * 64, 9);
  for (uint16_t i = 0; i < count; ++i) ring::fill_record({f.data() + 16 + i * 64, 64}, seq + i, 0);
  return f;
}

TEST(PortWorkerTest, EachDatagramGoesToTheSessionOfItsBindingAndARemovedOneLeavesTheOthersStreaming) {
  ScopedRing ra(ring::testing::fixed_ring(1024, 64, ring::kFlagSparse));
  ScopedRing rb(ring::testing::fixed_ring(1024, 64, ring::kFlagSparse));
  FakePort port;
  const int efd = eventfd(0, EFD_NONBLOCK);
  const Endpoint source{0xC6120001, 40000};
  MirrorWorkerConfig c;
  c.trust.source_ip = source.ip;
  auto a = std::make_unique<MirrorSession<FakePort>>(*MirrorWriter::attach(ra.open()), c, 0, 9, efd);
  auto b = std::make_unique<MirrorSession<FakePort>>(*MirrorWriter::attach(rb.open()), c, 0, 9, efd);
  PortWorker<FakePort> w(port);
  using Command = PortWorker<FakePort>::Command;
  FakePort::Prepared pa, pb;
  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kAddMirror, 1, nullptr, a.get(), &pa}));
  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kAddMirror, 2, nullptr, b.get(), &pb}));
  w.step(1000 * kMs);
  ASSERT_EQ(w.session_count(), 2u);
  ASSERT_EQ(a->binding(), 1);
  ASSERT_EQ(b->binding(), 2);
  PortWorker<FakePort>::Retired r;
  ASSERT_TRUE(w.retired.try_pop(&r));
  EXPECT_TRUE(r.installed);
  ASSERT_TRUE(w.retired.try_pop(&r));

  port.state->inbox.push_back({data_frame(0, 4), source, 1});
  port.state->inbox.push_back({data_frame(0, 2), source, 2});
  port.state->inbox.push_back({data_frame(2, 2), source, 2});
  port.state->inbox.push_back({data_frame(0, 1), source, 7});  // no session holds binding 7
  w.step(1001 * kMs);
  EXPECT_EQ(a->link().stats.records.get(), 4u);
  EXPECT_EQ(b->link().stats.records.get(), 4u);
  EXPECT_EQ(w.stats().unrouted.get(), 1u);

  // Remove a; b keeps receiving, and what still arrives for a's binding is
  // counted, not handed to a session that is gone.
  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kRemove, 1, nullptr, nullptr, nullptr}));
  port.state->inbox.push_back({data_frame(4, 4), source, 2});
  port.state->inbox.push_back({data_frame(4, 4), source, 1});
  w.step(1002 * kMs);
  ASSERT_TRUE(w.retired.try_pop(&r));
  EXPECT_EQ(r.id, 1u);
  EXPECT_EQ(r.mirror, a.get());  // back to its owner, to free
  EXPECT_EQ(w.session_count(), 1u);
  EXPECT_EQ(port.state->live, (std::vector<BindingId>{2}));
  EXPECT_EQ(b->link().stats.records.get(), 8u);
  EXPECT_EQ(a->link().stats.records.get(), 4u);
  EXPECT_EQ(w.stats().unrouted.get(), 2u);
  a.reset();
  port.state->inbox.push_back({data_frame(8, 2), source, 2});
  w.step(1003 * kMs);
  EXPECT_EQ(b->link().stats.records.get(), 10u);
  close(efd);
}

// WokenRig: a serve (no heartbeat due for an hour) on a worker over a
// WaitablePort, the ring's producer at hand.
struct WokenRig {
  explicit WokenRig(bool writer_pokes, uint64_t heartbeat_ns = 3600'000 * kMs)
      : ring(ring::testing::fixed_ring(1024, 64)), producer(*ring::Producer::attach(ring.open())) {
    port.fd = eventfd(0, EFD_NONBLOCK);
    ServeConfig c;
    c.session = 9;
    c.multicast = kGroup;
    c.pace_ns = 0;
    c.writer_pokes = writer_pokes;
    c.heartbeat_ns = heartbeat_ns;
    c.heartbeat_max_ns = 3600'000 * kMs;  // an idle serve's heartbeats back off to an hour
    serve = std::make_unique<ServeSession<WaitablePort>>(
        std::move(*ring::RawReader::attach(ring.open(), ring::StartPosition::latest())), c);
    worker = std::make_unique<PortWorker<WaitablePort>>(port);
  }
  ~WokenRig() { close(port.fd); }
  void install() {
    using Command = PortWorker<WaitablePort>::Command;
    ASSERT_TRUE(worker->commands.try_push(Command{Command::Kind::kAddServe, 1, serve.get(), nullptr, &binding}));
    worker->step(0);
    ASSERT_EQ(worker->session_count(), 1u);
  }
  void publish_one() {
    ring::fill_record({producer.claim(), 64}, producer.next_seq(), 0);
    producer.commit();
  }
  ScopedRing ring;
  ring::Producer producer;
  WaitablePort port;
  std::unique_ptr<ServeSession<WaitablePort>> serve;
  std::unique_ptr<PortWorker<WaitablePort>> worker;
  WaitablePort::Prepared binding;
};

// A worker whose every source of work wakes it (a port with a wait fd, a
// served ring whose writer pokes) parks until its sessions' next deadline,
// and a poke ends the park; a ring whose writer does not poke, or a port
// with nothing to wait on, keeps it on the backoff's short parks.
TEST(PortWorkerTest, AWorkerWokenByAllItsWorkParksUntilPokedOrItsDeadline) {
  WokenRig unpoked(false);
  ASSERT_NO_FATAL_FAILURE(unpoked.install());
  EXPECT_FALSE(unpoked.worker->wakeable());  // another process may write its ring: it must look again soon

  WokenRig r(true);
  PortWorker<WaitablePort>& w = *r.worker;
  EXPECT_TRUE(w.wakeable());  // no sessions yet
  ASSERT_NO_FATAL_FAILURE(r.install());
  EXPECT_TRUE(w.wakeable());
  // Parked with a 1 us timeout asked for, it sleeps until poked.
  const uint64_t start = monotonic_ns();
  std::thread poker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    w.wake().poke();
  });
  w.park(0, 1000);
  const uint64_t parked = monotonic_ns() - start;
  poker.join();
  EXPECT_GE(parked, 90 * kMs) << "it did not wait for the poke";
  EXPECT_LT(parked, PortWorker<WaitablePort>::kWakeableParkNs) << "the poke did not wake it";

  FakePort plain;  // a poll-mode port: nothing to wait on
  PortWorker<FakePort> polling(plain);
  EXPECT_FALSE(polling.wakeable());
}

// A worker with one serve whose writer does not poke parks on the ring's
// futex for as long as its deadlines allow (an idle serve wakes ~50 times a
// second, not 1,000); a control's poke after it queued a command ends that
// park as the writer's publish does, not its timeout (the counter says
// which ended it: a park that ran out its 10 s would not count).
TEST(PortWorkerTest, AWorkerParkedOnItsServedRingIsWokenByAPublishAndByAPoke) {
  WokenRig r(false);
  PortWorker<WaitablePort>& w = *r.worker;
  ASSERT_NO_FATAL_FAILURE(r.install());
  ASSERT_TRUE(w.parks_on_ring());
  EXPECT_EQ(w.max_park_ns(), PortWorker<WaitablePort>::kRingParkMaxNs);
  auto park_until = [&](auto&& wake) {
    const uint64_t woken_before = w.stats().ring_parks_woken.get();
    std::thread parker([&] { w.park(kMs, 10'000 * kMs); });  // the heartbeat is an hour away
    for (int i = 0; i < 10'000 && !w.wake().parked.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // asleep on the futex
    wake();
    parker.join();
    return w.stats().ring_parks_woken.get() - woken_before;
  };
  EXPECT_EQ(park_until([&] { r.publish_one(); }), 1u) << "the writer's publish did not end the park";
  w.step(2 * kMs);  // takes the record
  using Command = PortWorker<WaitablePort>::Command;
  EXPECT_EQ(park_until([&] {
              ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kRemove, 77}));  // no such session: a no-op
              w.wake().poke();
            }),
            1u)
      << "the control's poke did not end the park";
  EXPECT_EQ(w.wake().ring.load(), nullptr);
  w.step(3 * kMs);
  EXPECT_EQ(w.commands.size_approx(), 0u);
  // A serve's own command (a repair, a token) pushed as the worker went to
  // sleep — its poke saw no `parked` and signalled nothing — is found by
  // the park's last look: the park is called off, not slept (an hour here).
  ASSERT_TRUE(r.serve->link().commands.try_push(ServeCommand{ServeCommand::Kind::kForgetToken, 1234}));
  w.park(4 * kMs, 3600'000 * kMs);
  EXPECT_EQ(w.stats().parks_called_off.get(), 1u);
  w.step(5 * kMs);
  EXPECT_EQ(r.serve->link().commands.size_approx(), 0u);

  WokenRig poked(true);  // a writer that pokes: it waits in poll(), not on the ring
  ASSERT_NO_FATAL_FAILURE(poked.install());
  EXPECT_FALSE(poked.worker->parks_on_ring());
  EXPECT_EQ(poked.worker->max_park_ns(), ring::IdleStrategy::kDefaultMaxParkNs);
}

// Records a writer published before the worker's last look are seen by it:
// it does not park (a lost wake-up would sleep to the deadline, 1 s here).
TEST(PortWorkerTest, RecordsPublishedBeforeTheParkKeepTheWorkerAwake) {
  WokenRig r(true);
  ASSERT_NO_FATAL_FAILURE(r.install());
  r.publish_one();  // no poke: the writer saw the worker busy
  const uint64_t start = monotonic_ns();
  r.worker->park(0, 1000);
  EXPECT_LT(monotonic_ns() - start, PortWorker<WaitablePort>::kWakeableParkNs / 2) << "parked with a record waiting";
}

// RunnerLoop: the port runner's loop, reduced, on a thread of its own:
// it steps the worker and parks it (counting the parks); stopped and
// joined on every exit path (a failed ASSERT returns early).
struct RunnerLoop {
  explicit RunnerLoop(PortWorker<WaitablePort>& worker) : w(worker), t([this] {
    std::unique_lock held(w.step_mutex());
    while (!stop.load()) {
      if (!w.step(monotonic_ns())) {
        parks.fetch_add(1);
        w.park(monotonic_ns(), 1000, &held);
      }
    }
  }) {}
  ~RunnerLoop() {
    stop.store(true);
    w.wake().poke();
    t.join();
  }
  PortWorker<WaitablePort>& w;
  std::atomic<bool> stop{false};
  std::atomic<int> parks{0};
  std::thread t;
};

// A writer that finds the worker asleep in poll() runs its iteration on
// its own thread: the record leaves at once, the worker sleeps on.
TEST(PortWorkerTest, AWritersPokeStepsASleepingWorkerOnTheWritersThread) {
  WokenRig r(true);
  PortWorker<WaitablePort>& w = *r.worker;
  ASSERT_NO_FATAL_FAILURE(r.install());
  RunnerLoop loop(w);
  std::atomic<int>& parks = loop.parks;
  while (!w.wake().parked.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // deep in poll()
  {
    std::lock_guard l(w.step_mutex());
    r.port.state->sent.clear();  // the first step's heartbeat
  }
  const int parked_before = parks.load();
  r.publish_one();
  w.wake().run_or_poke();
  {
    std::lock_guard l(w.step_mutex());  // the worker is still in poll(): its port is ours to read
    EXPECT_EQ(w.stats().inline_steps.get(), 1u);
    ASSERT_EQ(r.port.state->sent.size(), 1u) << "the record did not leave on the writer's thread";
    EXPECT_EQ(decode(r.port.state->sent[0]).header.kind, proto::FrameKind::kData);
    EXPECT_EQ(parks.load(), parked_before) << "the worker woke for it";
  }
}

}  // namespace
}  // namespace ringfire::dataplane

namespace ringfire::dataplane {
namespace {

// CopyTask: the application on the worker — every record of one ring
// (a mirror's) published into another (a serve's), as a pong does.
class CopyTask final : public WorkerTask {
 public:
  CopyTask(ring::Consumer in, ring::Producer out) : in_(std::move(in)), out_(std::move(out)) {}
  bool step(uint64_t) override {
    std::byte rec[64];
    bool any = false;
    while (in_.try_read(rec).ok) {
      out_.publish(rec);
      any = true;
      ++copied;
    }
    ++steps;
    return any;
  }
  uint64_t copied = 0;
  uint64_t steps = 0;

 private:
  ring::Consumer in_;
  ring::Producer out_;
};

// A task on the worker reads, in the iteration a datagram arrived, what
// the mirror wrote from it, and what it publishes into a served ring
// leaves in that same iteration: the echo costs one iteration, no
// hand-off. Removed, it is given back and never stepped again.
TEST(WorkerTaskTest, ATaskAnswersADatagramInTheIterationItArrivedAndOnceRemovedIsNeverSteppedAgain) {
  ScopedRing mirrored(ring::testing::fixed_ring(1024, 64, ring::kFlagSparse));
  ScopedRing served(ring::testing::fixed_ring(1024, 64));
  FakePort port;
  const int efd = eventfd(0, EFD_NONBLOCK);
  const Endpoint source{0xC6120001, 40000};
  MirrorWorkerConfig mc;
  mc.trust.source_ip = source.ip;
  auto mirror = std::make_unique<MirrorSession<FakePort>>(*MirrorWriter::attach(mirrored.open()), mc, 0, 9, efd);
  ServeConfig sc;
  sc.session = 7;
  sc.multicast = kGroup;
  sc.pace_ns = 0;
  auto serve = std::make_unique<ServeSession<FakePort>>(
      std::move(*ring::RawReader::attach(served.open(), ring::StartPosition::latest())), sc);
  CopyTask task(*ring::Consumer::attach(mirrored.open(), ring::StartPosition::latest(), "task"),
                *ring::Producer::attach(served.open()));

  PortWorker<FakePort> w(port);
  using Command = PortWorker<FakePort>::Command;
  FakePort::Prepared pm, ps;
  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kAddMirror, 1, nullptr, mirror.get(), &pm}));
  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kAddServe, 2, serve.get(), nullptr, &ps}));
  Command add_task{Command::Kind::kAddTask, 3};
  add_task.task = &task;
  ASSERT_TRUE(w.commands.try_push(add_task));
  w.step(1000 * kMs);
  ASSERT_EQ(w.task_count(), 1u);
  EXPECT_EQ(w.stats().tasks.get(), 1u);
  PortWorker<FakePort>::Retired r;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(w.retired.try_pop(&r));
    EXPECT_TRUE(r.installed);
    EXPECT_EQ(r.task, nullptr);  // installed: still the worker's to step
  }
  // A task that polls a ring keeps the worker polling: it never sleeps.
  EXPECT_EQ(w.next_deadline_ns(1000 * kMs), 1000 * kMs);
  port.state->sent.clear();  // the serve's first heartbeat

  port.state->inbox.push_back({data_frame(0, 4), source, mirror->binding()});
  w.step(1001 * kMs);  // one iteration: in, copied, out
  EXPECT_EQ(mirror->link().stats.records.get(), 4u);
  EXPECT_EQ(task.copied, 4u);
  ASSERT_EQ(port.state->sent.size(), 1u);
  const proto::Frame f = decode(port.state->sent[0]);
  ASSERT_EQ(f.header.kind, proto::FrameKind::kData);
  EXPECT_EQ(f.header.seq, 0u);
  ASSERT_EQ(f.header.count, 4);
  EXPECT_EQ(port.state->sent[0].peer, kGroup);
  for (uint16_t i = 0; i < 4; ++i) {
    // The mirror's record i, as the source wrote it (sequence i), now the
    // served ring's record i.
    const std::byte* rec = port.state->sent[0].bytes.data() + 16 + i * 64;
    EXPECT_EQ(ring::check_record(rec, 64, i), ring::CheckVerdict::kOk) << "record " << i;
  }

  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kRemove, 3}));
  w.step(1002 * kMs);
  ASSERT_TRUE(w.retired.try_pop(&r));
  EXPECT_EQ(r.id, 3u);
  EXPECT_EQ(r.task, &task);  // back to its owner
  EXPECT_EQ(w.task_count(), 0u);
  const uint64_t steps = task.steps;
  port.state->sent.clear();
  port.state->inbox.push_back({data_frame(4, 2), source, mirror->binding()});
  w.step(1003 * kMs);
  EXPECT_EQ(task.steps, steps);
  EXPECT_EQ(mirror->link().stats.records.get(), 6u);  // the mirror streams on
  for (const auto& d : port.state->sent) EXPECT_NE(decode(d).header.kind, proto::FrameKind::kData);
  close(efd);
}

// group_serve: a serve of `ring` to kGroup from its latest record, for a
// worker's tables (it is not stepped for its datagrams).
std::unique_ptr<ServeSession<FakePort>> group_serve(const ScopedRing& ring) {
  ServeConfig c;
  c.multicast = kGroup;
  return std::make_unique<ServeSession<FakePort>>(
      std::move(*ring::RawReader::attach(ring.open(), ring::StartPosition::latest())), c);
}

// Whether a parked worker is woken by its records: one served ring alone
// (its writer wakes the ring park) or no served ring (the socket wakes the
// poll) — then a kernel worker spins only a few polls; a served ring beside
// other sessions, or a task, is found by polling.
TEST(PortWorkerTest, AParkWakesForRecordsWithOneServeAloneOrNoServe) {
  ScopedRing mirrored(ring::testing::fixed_ring(1024, 64, ring::kFlagSparse));
  ScopedRing served(ring::testing::fixed_ring(1024, 64));
  FakePort port;
  const int efd = eventfd(0, EFD_NONBLOCK);
  MirrorWorkerConfig mc;
  auto mirror = std::make_unique<MirrorSession<FakePort>>(*MirrorWriter::attach(mirrored.open()), mc, 0, 9, efd);
  auto serve = group_serve(served);
  PortWorker<FakePort> w(port);
  using Command = PortWorker<FakePort>::Command;
  FakePort::Prepared pm, ps;
  EXPECT_TRUE(w.park_wakes_for_records());  // nothing on it
  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kAddMirror, 1, nullptr, mirror.get(), &pm}));
  w.step(1000 * kMs);
  EXPECT_TRUE(w.park_wakes_for_records()) << "mirrors only: the socket wakes it";
  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kAddServe, 2, serve.get(), nullptr, &ps}));
  w.step(1001 * kMs);
  EXPECT_FALSE(w.park_wakes_for_records()) << "a served ring beside a mirror: its records are polled for";
  ASSERT_TRUE(w.commands.try_push(Command{Command::Kind::kRemove, 1}));
  w.step(1002 * kMs);
  EXPECT_TRUE(w.park_wakes_for_records()) << "one serve alone: it parks on the ring";
  struct Idle final : WorkerTask {
    bool step(uint64_t) override { return false; }
  } task;
  Command add{Command::Kind::kAddTask, 3};
  add.task = &task;
  ASSERT_TRUE(w.commands.try_push(add));
  w.step(1003 * kMs);
  EXPECT_FALSE(w.park_wakes_for_records()) << "a task: nothing wakes it";
  close(efd);
}

// Every command gets exactly one answer, carrying its command's seq — a
// remove of an id the worker does not hold too — so a sender that gave up
// waiting on one answer (PortRunner::exchange, a stuck worker) tells that
// late answer from the next command's.
TEST(PortWorkerTest, EveryCommandIsAnsweredOnceWithItsOwnSeq) {
  ScopedRing served(ring::testing::fixed_ring(1024, 64));
  FakePort port;
  auto serve = group_serve(served);
  PortWorker<FakePort> w(port);
  using Command = PortWorker<FakePort>::Command;
  FakePort::Prepared ps;
  Command add{Command::Kind::kAddServe, 5, serve.get(), nullptr, &ps};
  add.seq = 41;
  Command stranger{Command::Kind::kRemove, 99};
  stranger.seq = 42;
  Command rm{Command::Kind::kRemove, 5};
  rm.seq = 43;
  ASSERT_TRUE(w.commands.try_push(add));
  ASSERT_TRUE(w.commands.try_push(stranger));
  ASSERT_TRUE(w.commands.try_push(rm));
  w.step(1000 * kMs);
  PortWorker<FakePort>::Retired r;
  ASSERT_TRUE(w.retired.try_pop(&r));
  EXPECT_EQ(r.seq, 41u);
  EXPECT_TRUE(r.installed);
  ASSERT_TRUE(w.retired.try_pop(&r));
  EXPECT_EQ(r.seq, 42u);
  EXPECT_EQ(r.id, 99u);
  EXPECT_FALSE(r.installed) << "a remove of nothing answered as done";
  EXPECT_EQ(r.serve, nullptr);
  ASSERT_TRUE(w.retired.try_pop(&r));
  EXPECT_EQ(r.seq, 43u);
  EXPECT_EQ(r.serve, serve.get());
  EXPECT_FALSE(w.retired.try_pop(&r)) << "an answer too many";
  EXPECT_EQ(w.session_count(), 0u);
}

// A worker carries at most kMaxTasks; the one past it comes back refused.
TEST(WorkerTaskTest, ATaskPastTheTableIsGivenBackRefused) {
  struct Idle final : WorkerTask {
    bool step(uint64_t) override { return false; }
    uint64_t next_deadline_ns(uint64_t now_ns) const override { return now_ns + 5 * kMs; }
  };
  FakePort port;
  PortWorker<FakePort> w(port);
  using Command = PortWorker<FakePort>::Command;
  std::vector<Idle> tasks(PortWorker<FakePort>::kMaxTasks + 1);
  for (uint32_t i = 0; i < tasks.size(); ++i) {
    Command c{Command::Kind::kAddTask, i + 1};
    c.task = &tasks[i];
    ASSERT_TRUE(w.commands.try_push(c));
    w.step(1000 * kMs);
  }
  EXPECT_EQ(w.task_count(), PortWorker<FakePort>::kMaxTasks);
  PortWorker<FakePort>::Retired r;
  size_t refused = 0;
  while (w.retired.try_pop(&r)) {
    if (!r.installed) {
      ++refused;
      EXPECT_EQ(r.task, &tasks.back());
    }
  }
  EXPECT_EQ(refused, 1u);
  // The tasks' own deadline bounds the worker's sleep.
  EXPECT_EQ(w.next_deadline_ns(1000 * kMs), 1005 * kMs);

  // Nothing wakes a worker for a task's work: one whose every other source
  // of work wakes it parks no longer than the backoff's timeouts once a
  // task is on it.
  WaitablePort wp;
  wp.fd = eventfd(0, EFD_NONBLOCK);
  PortWorker<WaitablePort> woken(wp);
  ASSERT_TRUE(woken.wakeable());
  using WCommand = PortWorker<WaitablePort>::Command;
  WCommand c{WCommand::Kind::kAddTask, 1};
  c.task = &tasks[0];
  ASSERT_TRUE(woken.commands.try_push(c));
  woken.step(1000 * kMs);
  EXPECT_FALSE(woken.wakeable());
  close(wp.fd);
}

// The heartbeat a writer's inline step made due (the one that exposes a
// lost last datagram) is the sleeping worker's only wake-up: the writer
// arms the worker's timer for it instead of waking it to re-plan, and the
// worker sends it at its deadline.
TEST(PortWorkerTest, AWritersInlineStepArmsTheSleepersTimerForTheHeartbeatInsteadOfWakingIt) {
  WokenRig r(true, 10 * kMs);
  PortWorker<WaitablePort>& w = *r.worker;
  ASSERT_NO_FATAL_FAILURE(r.install());
  RunnerLoop loop(w);
  std::atomic<int>& parks = loop.parks;
  // Idle, the heartbeats back off (10, 20, 40, 80 ms ...): past 150 ms the
  // worker sleeps at least 80 ms, far beyond the 10 ms a send makes due.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  int parked_before = 0;
  {
    std::lock_guard l(w.step_mutex());
    r.port.state->sent.clear();
    parked_before = parks.load();
  }
  r.publish_one();
  w.wake().run_or_poke();
  {
    std::lock_guard l(w.step_mutex());
    ASSERT_EQ(w.stats().inline_steps.get(), 1u);
    EXPECT_EQ(w.stats().rearms.get(), 1u) << "the writer woke the worker instead of arming its timer";
    ASSERT_EQ(r.port.state->sent.size(), 1u);
  }
  // The heartbeat leaves at its deadline, from the worker, woken once.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard l(w.step_mutex());
      if (r.port.state->sent.size() >= 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard l(w.step_mutex());
  ASSERT_EQ(r.port.state->sent.size(), 2u) << "no heartbeat after the send";
  EXPECT_EQ(decode(r.port.state->sent[1]).header.kind, proto::FrameKind::kHeartbeat);
  EXPECT_EQ(parks.load(), parked_before + 1) << "the worker woke more than once for one heartbeat";
}

}  // namespace
}  // namespace ringfire::dataplane
