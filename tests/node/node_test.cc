// node_test.cc — two Nodes in one process on the loopback interface, each
// with its own engine (kernel backend): anchors, attach, send, finish,
// cancel, Manual flush, peer loss, and strangers on the control port. Every
// test asserts what arrived, record by record.
#include "node/node.h"

#include <arpa/inet.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "net/frame_mac.h"
#include "proto/attach.h"
#include "proto/frame.h"
#include "ring/monotonic.h"
#include "tests/temp_dir.h"

namespace ringfire::node {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

NodeOptions options(const std::string& name, mux::FlushPolicy flush = {}) {
  NodeOptions o;
  o.instance_id = absl::StrCat(name, "-", getpid());
  o.control = net::Endpoint{INADDR_LOOPBACK, 0};
  o.mux.enabled = true;
  o.mux.initial_credit = 8;
  o.mux.flush = flush;
  o.channel_records = 1024;
  return o;
}

std::unique_ptr<Node> make(const std::string& name, mux::FlushPolicy flush = {}) {
  auto n = Node::create(options(name, flush));
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? std::move(*n) : nullptr;
}

// make_quiet: a node whose liveness ticks once an hour (a heartbeat is a
// liveness record that moves its batch, and wakes readers): nothing but
// the test's own records moves inside the window it watches.
std::unique_ptr<Node> make_quiet(const std::string& name, mux::FlushPolicy flush = {}) {
  NodeOptions o = options(name, flush);
  o.mux.heartbeat_interval_ns = 3600 * kSecond;
  o.mux.stall_deadline_ns = 7200 * kSecond;
  auto n = Node::create(o);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? std::move(*n) : nullptr;
}


// plain: the handle without its ticket — an attach to it asks by ATTACH,
// and is answered (or refused) before it returns.
mux::AnchorHandle plain(mux::AnchorHandle h) {
  h.ticket = {};
  return h;
}

proto::ConstBytes bytes(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }
std::string text(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// send_all sends every record, retrying kFull (the slot's budget) until
// credit comes back; false once the sender is closed (a stall kill ends a
// slot whose credit never returns, so this always ends).
bool send_all(Sender& s, const std::vector<std::string>& recs) {
  for (const std::string& r : recs) {
    for (;;) {
      const mux::SendStatus st = s.send(bytes(r));
      if (st == mux::SendStatus::kSent) break;
      EXPECT_NE(st, mux::SendStatus::kTooLarge);
      if (st != mux::SendStatus::kFull) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  return true;
}

// expect_through: one record sent on `s` arrives, alone and whole, at `a`.
void expect_through(Sender& s, Anchor& a, const std::string& record) {
  ASSERT_TRUE(send_all(s, {record}));
  Item it;
  ASSERT_TRUE(a.recv(&it, 10 * kSecond)) << record << " did not arrive";
  EXPECT_EQ(it.kind, Item::Kind::kData);
  EXPECT_EQ(text(it.bytes), record);
}

// Joined: a thread joined on every exit path (a failed ASSERT returns early).
struct Joined {
  std::thread t;
  ~Joined() {
    if (t.joinable()) t.join();
  }
};

std::unique_ptr<Node> make_with(const std::string& name, bool mux_on) {
  NodeOptions o = options(name);
  o.mux.enabled = mux_on;
  auto n = Node::create(o);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? std::move(*n) : nullptr;
}

// open_streams: n single-sender anchors on consumer, each attached from producer.
void open_streams(Node& consumer, Node& producer, int n, std::vector<std::unique_ptr<Anchor>>* anchors,
                  std::vector<std::unique_ptr<Sender>>* senders) {
  for (int i = 0; i < n; ++i) {
    anchors->push_back(consumer.create_anchor(AnchorKind::kSingleSender));
    auto s = producer.attach(anchors->back()->handle(), consumer.control_address());
    ASSERT_TRUE(s.ok()) << s.status();
    senders->push_back(std::move(*s));
  }
}

// NodePair: a consumer node and a producer node, and the streams opened
// between them (open: n more, as open_streams).
struct NodePair {
  std::unique_ptr<Node> consumer = make("c");
  std::unique_ptr<Node> producer = make("p");
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<std::unique_ptr<Sender>> senders;
  void open(int n) { open_streams(*consumer, *producer, n, &anchors, &senders); }
};

// stream_all: `streams` streams of `tokens` each from producer to consumer,
// checked in order, finished once; every sender on the path wanted.
void stream_all(Node& consumer, Node& producer, int streams, int tokens, bool per_stream) {
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<std::unique_ptr<Sender>> senders;
  ASSERT_NO_FATAL_FAILURE(open_streams(consumer, producer, streams, &anchors, &senders));
  for (const auto& s : senders) EXPECT_EQ(s->per_stream(), per_stream);
  Joined prod{std::thread([&] {
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < streams; ++i) {
        if (!send_all(*senders[i], {absl::StrCat("s", i, "t", t)})) return;
      }
    }
    for (auto& s : senders) EXPECT_TRUE(s->finish());
  })};
  for (int i = 0; i < streams; ++i) {
    int next = 0;
    for (;;) {
      Item it;
      ASSERT_TRUE(anchors[i]->recv(&it, 10 * kSecond)) << "stream " << i << " stalled at token " << next;
      if (it.kind == Item::Kind::kFinished) break;
      ASSERT_EQ(it.kind, Item::Kind::kData) << "stream " << i << " dropped at " << next << ": " << mux::end_reason_name(it.reason);
      ASSERT_EQ(text(it.bytes), absl::StrCat("s", i, "t", next));
      ++next;
    }
    EXPECT_EQ(next, tokens);
    Item more;
    EXPECT_FALSE(anchors[i]->recv(&more, 50'000'000)) << "an item after the end";
  }
}

// On a host of several addresses, each node is known by the address it
// listens on: the producer's attach and the consumer's channel mirror leave
// from their nodes' control addresses, not the route's choice (between
// 127.0.0.2 and 127.0.0.1 the kernel picks 127.0.0.1 for both; the
// producer's channel serve, on 127.0.0.2, then refused the consumer's
// mirror and every attach timed out).
TEST(Node, NodesOnTwoAddressesOfOneHostStreamFromTheirOwnAddresses) {
  auto consumer = make("c");
  NodeOptions o = options("p");
  o.control = net::Endpoint{INADDR_LOOPBACK + 1, 0};  // 127.0.0.2
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto producer = std::move(*made);
  ASSERT_TRUE(consumer);
  stream_all(*consumer, *producer, 4, 40, false);
  EXPECT_EQ(consumer->stats().in.records, 160u);
  EXPECT_EQ(consumer->stats().in.finished, 4u);
}

// A channel's rings take their pages as batches land (nothing on the
// first token's path), and are reserved whole soon after the channel is
// up: a full /dev/shm is then an error that ends a peer, never a SIGBUS.
TEST(Node, AChannelsLazyRingsAreReservedAndWarmedWholeOnceTheChannelIsUp) {
  const ringfire::testing::TempDir tmp("/dev/shm");  // its rings alone in it
  const std::string& dir = tmp.path();
  NodeOptions co = options("c"), po = options("p");
  co.ring_dir = po.ring_dir = dir;
  co.channel_records = po.channel_records = 1 << 16;  // 8 MiB arenas: sparse shows
  auto consumer = Node::create(co);
  auto producer = Node::create(po);
  ASSERT_TRUE(consumer.ok() && producer.ok());
  stream_all(**consumer, **producer, 4, 20, false);
  auto rings = [&] {
    std::vector<std::pair<uint64_t, uint64_t>> out;  // allocated, size
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      struct stat st {};
      if (stat(e.path().c_str(), &st) == 0) out.emplace_back(static_cast<uint64_t>(st.st_blocks) * 512, st.st_size);
    }
    return out;
  };
  auto r = rings();
  ASSERT_EQ(r.size(), 2u) << "an egress and an ingress ring";
  bool all = false;
  for (int i = 0; i < 100 && !all; ++i) {  // reserved kReserveAfterNs (100 ms) after the channel came up
    usleep(10'000);
    r = rings();
    all = r.size() == 2 && r[0].first >= r[0].second && r[1].first >= r[1].second;
  }
  EXPECT_TRUE(all) << "allocated " << r[0].first << " of " << r[0].second << ", " << r[1].first << " of " << r[1].second;
  // Then warmed, a piece a pass (RingFile::warm): the producer's egress
  // ring and the consumer's ingress one, each counted once.
  for (int i = 0; i < 300 && ((*producer)->stats().rings_warmed < 1 || (*consumer)->stats().rings_warmed < 1); ++i) {
    usleep(10'000);
  }
  usleep(50'000);
  EXPECT_EQ((*producer)->stats().rings_warmed, 1u);
  EXPECT_EQ((*consumer)->stats().rings_warmed, 1u);
  // Each ring is mapped once in this process: the egress ring by its
  // writer (the serve shares it), the ingress ring by its mirror (the
  // node's reader shares it): one set of page tables each, the one warmed.
  std::map<std::string, int> maps;
  std::ifstream in("/proc/self/maps");
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(dir);
    if (at != std::string::npos) ++maps[line.substr(at)];
  }
  ASSERT_EQ(maps.size(), 2u);
  for (const auto& [path, n] : maps) EXPECT_EQ(n, 1) << path << " is mapped " << n << " times";
}

TEST(Node, RefusesABadConfigAtCreate) {
  NodeOptions o = options("bad");
  o.mux.initial_credit = 0;
  EXPECT_FALSE(Node::create(o).ok());
  o = options("bad");
  o.channel_records = 1000;
  auto n = Node::create(o);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("power of two"), std::string::npos) << n.status();
}

TEST(Node, StreamsArriveInOrderAndFinishOnce) {
  auto consumer = make("c");
  auto producer = make("p");
  ASSERT_TRUE(consumer && producer);
  constexpr int kStreams = 20, kTokens = 300;  // 300 tokens against a window of 8: credit must come back
  stream_all(*consumer, *producer, kStreams, kTokens, false);
  const NodeStats ps = producer->stats(), cs = consumer->stats();
  EXPECT_EQ(cs.in.records, uint64_t{kStreams} * kTokens);
  EXPECT_EQ(cs.in.finished, uint64_t{kStreams});
  EXPECT_EQ(cs.in.dropped, 0u);
  EXPECT_EQ(cs.in.reader_stall, 0u);
  EXPECT_GT(ps.out.records, 0u);
  // Batching: 20 streams share batches.
  EXPECT_LT(ps.out.batches, ps.out.records) << "every record went alone";
  EXPECT_EQ(cs.channel_failures, 0u);
}

// The gauges the seed says must return to zero: held up while records wait
// for a reader that does not read, and back to zero (not merely small) once
// every stream ended, was read, and every peer applied what it was sent.
TEST(Node, TheGaugesHoldWhatWaitsAndReturnToZero) {
  auto consumer = make("c");
  auto producer = make("p");
  ASSERT_TRUE(consumer && producer);
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<std::unique_ptr<Sender>> senders;
  ASSERT_NO_FATAL_FAILURE(open_streams(*consumer, *producer, 3, &anchors, &senders));
  // 12 records a stream against a window of 8, nobody reading: 8 go (and
  // wait, buffered, at the consumer), 4 are withheld at the producer.
  for (auto& s : senders) {
    for (int t = 0; t < 12; ++t) ASSERT_EQ(s->send(bytes(absl::StrCat("t", t, "-0123456789"))), mux::SendStatus::kSent);
  }
  NodeStats ps, cs;
  for (int i = 0; i < 500; ++i) {
    ps = producer->stats();
    cs = consumer->stats();
    if (cs.buffered_bytes == 3u * 8 * 13 && ps.withheld_bytes != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ps.live_slots, 3u);
  EXPECT_EQ(ps.outstanding_bytes, 3u * 8 * 13) << "8 records of 13 bytes a stream sent, none credited back";
  EXPECT_GT(ps.withheld_bytes, 0u) << "4 records a stream wait for credit";
  EXPECT_EQ(cs.live_streams, 3u);
  EXPECT_EQ(cs.buffered_bytes, 3u * 8 * 13);
  EXPECT_EQ(cs.anchors, 3u);
  for (auto& s : senders) EXPECT_TRUE(s->finish());
  for (size_t i = 0; i < anchors.size(); ++i) {
    int got = 0;
    for (Item it; anchors[i]->recv(&it, 10 * kSecond);) {
      if (it.kind != Item::Kind::kData) {
        EXPECT_EQ(it.kind, Item::Kind::kFinished);
        break;
      }
      EXPECT_EQ(text(it.bytes), absl::StrCat("t", got++, "-0123456789"));
    }
    EXPECT_EQ(got, 12);
  }
  ASSERT_TRUE(producer->drain(10 * kSecond));
  senders.clear();
  anchors.clear();
  for (int i = 0; i < 500; ++i) {
    ps = producer->stats();
    cs = consumer->stats();
    if (ps.live_slots + ps.outstanding_bytes + ps.withheld_bytes + cs.live_streams + cs.buffered_bytes + cs.anchors == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ps.live_slots, 0u);
  EXPECT_EQ(ps.outstanding_bytes, 0u);
  EXPECT_EQ(ps.withheld_bytes, 0u);
  EXPECT_EQ(cs.live_streams, 0u);
  EXPECT_EQ(cs.buffered_bytes, 0u);
  EXPECT_EQ(cs.anchors, 0u);
  EXPECT_EQ(cs.in.finished, 3u);
}

TEST(Node, ARecordLargerThanADatagramIsFencedAndArrivesInOrderOverTheChannelsTcp) {
  auto consumer = make("c");
  auto producer = make("p");
  auto a1 = consumer->create_anchor(AnchorKind::kSingleSender);
  auto a2 = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s1 = producer->attach(a1->handle(), consumer->control_address());
  auto s2 = producer->attach(a2->handle(), consumer->control_address());
  ASSERT_TRUE(s1.ok() && s2.ok());
  std::string big(200000, 'z');
  for (size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>('a' + i % 26);
  ASSERT_TRUE(send_all(**s1, {"first", big, "last"}));
  ASSERT_TRUE(send_all(**s2, {"other0", "other1"}));
  (*s1)->finish();
  (*s2)->finish();
  std::vector<std::string> got1, got2;
  for (auto [anchor, got] : {std::pair{a1.get(), &got1}, std::pair{a2.get(), &got2}}) {
    for (;;) {
      Item it;
      ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
      if (it.kind != Item::Kind::kData) {
        EXPECT_EQ(it.kind, Item::Kind::kFinished);
        break;
      }
      got->push_back(text(it.bytes));
    }
  }
  ASSERT_EQ(got1.size(), 3u);
  EXPECT_EQ(got1[0], "first");
  EXPECT_TRUE(got1[1] == big) << "the big record differs";
  EXPECT_EQ(got1[2], "last");
  EXPECT_EQ(got2, (std::vector<std::string>{"other0", "other1"}));
  EXPECT_EQ(producer->stats().out.fenced, 1u);
  EXPECT_EQ((*s1)->send(bytes(std::string(300000, 'q'))), mux::SendStatus::kClosed);  // finished
}

TEST(Node, CreditForThousandsOfStreamsGoesBackInBoundedControlFrames) {
  // 4096 streams each owed a grant at once: more than one MUXCTL body
  // (64 KiB) of CreditUpdates, which must be split, never sent oversized.
  NodeOptions o = options("c");
  o.mux.initial_credit = 2;  // a grant is due after every read
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  auto producer = make("p");
  constexpr int kStreams = 4096;
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<std::unique_ptr<Sender>> senders;
  ASSERT_NO_FATAL_FAILURE(open_streams(*consumer, *producer, kStreams, &anchors, &senders));
  for (int round = 0; round < 3; ++round) {  // 3 tokens against a window of 2: the grants must arrive
    for (int i = 0; i < kStreams; ++i) ASSERT_TRUE(send_all(*senders[i], {absl::StrCat(i, ":", round)}));
    for (int i = 0; i < kStreams; ++i) {
      Item it;
      ASSERT_TRUE(anchors[i]->recv(&it, 10 * kSecond)) << "stream " << i << " round " << round;
      ASSERT_EQ(text(it.bytes), absl::StrCat(i, ":", round));
    }
  }
  EXPECT_EQ(producer->stats().peers_lost, 0u) << "the channel died";
  EXPECT_GE(consumer->stats().in.credit_returned, uint64_t{kStreams} * 2);
}

TEST(Node, ChannelsWithAPreSharedKeyOnlyBetweenNodesThatHoldIt) {
  net::Psk key;
  key.key.assign(40, 'k');
  net::Psk other;
  other.key.assign(40, 'o');
  auto with_key = [&](const std::string& name, std::optional<net::Psk> k) {
    NodeOptions o = options(name);
    o.psk = std::move(k);
    o.attach_timeout_ns = 1'500'000'000;
    auto n = Node::create(o);
    EXPECT_TRUE(n.ok()) << n.status();
    return std::move(*n);
  };
  auto consumer = with_key("c", key);
  auto anchor = consumer->create_anchor(AnchorKind::kMultiSender);
  {
    auto producer = with_key("p", key);  // the same key: the channel comes up
    auto s = producer->attach(anchor->handle(), consumer->control_address());
    ASSERT_TRUE(s.ok()) << s.status();
    expect_through(**s, *anchor, "keyed");
    Item it;
    (*s)->finish();
    ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
    EXPECT_EQ(it.kind, Item::Kind::kFinished);
  }
  // No key, or another: the control connection itself is refused, and says why.
  for (auto [k, why] : {std::pair{std::optional<net::Psk>{}, "requires a pre-shared key"},
                        std::pair{std::optional<net::Psk>{other}, "proved another pre-shared key"}}) {
    auto stranger = with_key("s", k);
    auto s = stranger->attach(anchor->handle(), consumer->control_address());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find(why), std::string::npos) << s.status();
    EXPECT_EQ(stranger->stats().peers_out, 1u);
  }
  // A keyed producer refuses a consumer without the key, on either path.
  for (bool mux_on : {true, false}) {
    NodeOptions o = options("bare");
    o.mux.enabled = mux_on;
    auto bare = Node::create(o);
    ASSERT_TRUE(bare.ok()) << bare.status();
    auto a = (*bare)->create_anchor(AnchorKind::kSingleSender);
    auto producer = with_key("p", key);
    auto s = producer->attach(a->handle(), (*bare)->control_address());
    ASSERT_FALSE(s.ok()) << "mux " << mux_on;
    EXPECT_NE(s.status().message().find("holds no pre-shared key"), std::string::npos) << s.status();
    EXPECT_GE(producer->stats().unauthenticated, 1u);
  }
  EXPECT_GE(consumer->stats().unauthenticated, 2u);
  EXPECT_EQ(consumer->stats().peers_in, 1u) << "a channel for a peer without the key";
}

// The per-stream path with a key: the keyed exchange on each stream's own
// connection, the ATTACH after it.
TEST(Node, PerStreamConnectionsWithAPreSharedKey) {
  net::Psk key;
  key.key.assign(40, 'k');
  NodeOptions co = options("c");
  co.mux.enabled = false;
  co.psk = key;
  NodeOptions po = options("p");
  po.psk = key;
  auto consumer = Node::create(co);
  auto producer = Node::create(po);
  ASSERT_TRUE(consumer.ok() && producer.ok());
  stream_all(**consumer, **producer, 3, 20, true);
  NodeOptions so = options("s");
  so.mux.enabled = false;
  auto stranger = Node::create(so);
  ASSERT_TRUE(stranger.ok());
  auto a = (*consumer)->create_anchor(AnchorKind::kSingleSender);
  auto s = (*stranger)->attach(a->handle(), (*consumer)->control_address());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("requires a pre-shared key"), std::string::npos) << s.status();
}

// The per-stream path holds what a producer sent, unread, to the slot
// byte budget (plus a frame), not to its credit in frames: a producer that
// chooses that path cannot make the consumer hold credit x 1 MiB (review:
// helper-28). TCP's window holds the rest at the producer; all of it then
// arrives in order.
TEST(Node, APerStreamConnectionIsReadOnlyToTheSlotByteBudget) {
  NodeOptions co = options("c");
  co.mux.enabled = false;
  co.mux.slot_byte_budget = 64u << 10;
  co.mux.max_batch_bytes = 16u << 10;
  co.mux.max_record_bytes = 16u << 10;
  auto consumer = Node::create(co);
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  auto producer = make("p");
  auto anchor = (*consumer)->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), (*consumer)->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->per_stream());
  std::vector<std::string> records;
  for (int k = 0; k < 20; ++k) {
    records.push_back(absl::StrCat("b", k, "-"));
    records.back().resize(16u << 10, 'x');  // four make the budget
  }
  std::thread sending([&] { EXPECT_TRUE(send_all(**s, records)); });
  // Nobody reads: the consumer takes 64 KiB (four frames) off the socket, no more.
  const uint64_t t0 = monotonic_ns();
  while ((*consumer)->stats().tcp_records_in < 4 && monotonic_ns() < t0 + 10 * kSecond) usleep(10'000);
  usleep(500'000);  // room to read more, were it going to
  EXPECT_EQ((*consumer)->stats().tcp_records_in, 4u) << "read past the byte budget (the window is 256 frames)";
  for (int k = 0; k < 20; ++k) {
    Item it;
    ASSERT_TRUE(anchor->recv(&it, 10 * kSecond)) << k;
    ASSERT_EQ(it.kind, Item::Kind::kData) << k << ": " << mux::end_reason_name(it.reason);
    EXPECT_EQ(text(it.bytes), records[static_cast<size_t>(k)]) << k;
  }
  sending.join();
  EXPECT_TRUE((*s)->finish());
  Item it;
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kFinished);
  EXPECT_EQ(it.frames, 20u);
}

TEST(Node, CancelReachesTheProducer) {
  auto consumer = make("c");
  auto producer = make("p");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "one");
  EXPECT_FALSE((*s)->wait_closed(0)) << "closed before the cancel";
  anchor->cancel();
  // An hour to wait: a cancel that did not wake it would hang the test
  // (failed by its timeout), not pass by looking again later.
  EXPECT_TRUE((*s)->wait_closed(3600 * kSecond)) << "the cancel did not wake the producer's wait";
  EXPECT_EQ(producer->stats().out.closed_by_receiver, 1u);
  EXPECT_EQ((*s)->send(bytes("late")), mux::SendStatus::kClosed);
  // A cancelled anchor refuses later attaches.
  EXPECT_FALSE(producer->attach(plain(anchor->handle()), consumer->control_address()).ok());
}

TEST(Node, SingleSenderRefusesASecondAndUnknownAnchorsAreRefused) {
  auto consumer = make("c");
  auto producer = make("p");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto first = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(first.ok()) << first.status();
  // Its ticket's OpenSlot claims the anchor when it arrives: whichever of
  // it and another producer's ATTACH reaches the consumer first wins.
  expect_through(**first, *anchor, "claimed");
  EXPECT_FALSE(producer->attach(plain(anchor->handle()), consumer->control_address()).ok());
  mux::AnchorHandle unknown = plain(anchor->handle());
  unknown.anchor ^= 1;
  EXPECT_FALSE(producer->attach(unknown, consumer->control_address()).ok());
  // A handle naming another worker at that address: refused by the NODE check.
  auto other = make("o");
  mux::AnchorHandle wrong{other->worker_id(), anchor->handle().anchor, {}};
  EXPECT_FALSE(other->attach(wrong, consumer->control_address()).ok());
  expect_through(**first, *anchor, "still");  // the first stream still works
}

TEST(Node, MultiSenderAnchorTakesManyProducers) {
  auto consumer = make("c");
  auto p1 = make("p1");
  auto p2 = make("p2");
  auto anchor = consumer->create_anchor(AnchorKind::kMultiSender);
  auto a = p1->attach(anchor->handle(), consumer->control_address());
  auto b = p2->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(send_all(**a, {"a0", "a1"}));
  ASSERT_TRUE(send_all(**b, {"b0", "b1"}));
  (*a)->finish();
  (*b)->finish();
  std::map<uint64_t, std::vector<std::string>> got;
  int ends = 0;
  while (ends < 2) {
    Item it;
    ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
    if (it.kind == Item::Kind::kFinished) {
      ++ends;
      continue;
    }
    got[it.session].push_back(text(it.bytes));
  }
  EXPECT_EQ(got[(*a)->session()], (std::vector<std::string>{"a0", "a1"}));
  EXPECT_EQ(got[(*b)->session()], (std::vector<std::string>{"b0", "b1"}));
}

TEST(Node, ManualMovesNothingUntilFlush) {
  auto consumer = make("c");
  // A heartbeat tick is a liveness record, and it moves its batch (staged
  // data with it): none may fall inside the window this test watches.
  auto producer = make_quiet("p", mux::FlushPolicy::manual());
  ASSERT_TRUE(producer);
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(send_all(**s, {"x", "y"}));
  Item it;
  EXPECT_FALSE(anchor->recv(&it, 300'000'000)) << "a record moved without a flush";
  producer->flush_batch();
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
  EXPECT_EQ(text(it.bytes), "x");
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
  EXPECT_EQ(text(it.bytes), "y");
}

// Under Manual, a forward pass (a token on each of 64 streams, then
// flush_batch) leaves its node in one tx_burst, its batches packed many
// tokens to a datagram; both are counted where an operator reads them.
TEST(Node, AManualPassLeavesInOneTxBurstManyTokensToADatagram) {
  auto consumer = make("c");
  NodeOptions o = options("p", mux::FlushPolicy::manual());
  o.mux.heartbeat_interval_ns = 3600 * kSecond;  // no liveness batch inside the window watched
  o.mux.stall_deadline_ns = 7200 * kSecond;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto producer = std::move(*made);
  constexpr int kStreams = 64, kPasses = 5;
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<std::unique_ptr<Sender>> senders;
  ASSERT_NO_FATAL_FAILURE(open_streams(*consumer, *producer, kStreams, &anchors, &senders));
  producer->flush_batch();  // the OpenSlots
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const NodeStats before = producer->stats();
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int i = 0; i < kStreams; ++i) {
      const std::string token = absl::StrCat(std::string(32, 'a' + pass), "s", i, "p", pass);
      ASSERT_EQ(senders[i]->send(bytes(token)), mux::SendStatus::kSent);
    }
    producer->flush_batch();
    for (int i = 0; i < kStreams; ++i) {
      Item it;
      ASSERT_TRUE(anchors[i]->recv(&it, 10 * kSecond)) << "stream " << i << " pass " << pass;
      ASSERT_EQ(it.kind, Item::Kind::kData);
      EXPECT_EQ(text(it.bytes), absl::StrCat(std::string(32, 'a' + pass), "s", i, "p", pass));
    }
  }
  // The worker counts a burst's datagrams once its send returned: the
  // consumer may hold the last pass before the count moves. Read once it
  // stands still (the same over 50 ms), so the bound below sees all five.
  NodeStats after = producer->stats();
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const NodeStats again = producer->stats();
    const bool still = again.channel_datagrams_out == after.channel_datagrams_out &&
                       again.channel_tx_bursts - before.channel_tx_bursts >= uint64_t{kPasses};
    after = again;
    if (still) break;
  }
  const uint64_t bursts = after.channel_tx_bursts - before.channel_tx_bursts;
  const uint64_t datagrams = after.channel_datagrams_out - before.channel_datagrams_out;
  EXPECT_EQ(bursts, uint64_t{kPasses}) << "tx_bursts for " << kPasses << " passes; batches "
                                       << after.channel_batches - before.channel_batches << ", datagrams " << datagrams;
  // 64 tokens of ~38 bytes are two to three datagrams' worth: at least 16 to a datagram.
  EXPECT_GE(datagrams, uint64_t{2} * kPasses);
  EXPECT_LE(datagrams * 16, uint64_t{kStreams} * kPasses) << datagrams << " datagrams";
}

// A batch filled to its cap (2-byte tokens: records of 15 bytes, so a full
// batch ends within 15 bytes of it) still fits one datagram with the TAG
// every channel datagram ends in: none goes by the channel's TCP, where it
// would arrive behind the datagram after it and be NAKed.
TEST(Node, ABatchFilledToItsCapLeavesInOneDatagramWithItsTag) {
  auto consumer = make("c");
  auto producer = make_quiet("p", mux::FlushPolicy::manual());
  ASSERT_TRUE(producer);
  constexpr int kStreams = 64, kPasses = 4, kPerPass = 3;
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<std::unique_ptr<Sender>> senders;
  ASSERT_NO_FATAL_FAILURE(open_streams(*consumer, *producer, kStreams, &anchors, &senders));
  producer->flush_batch();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const NodeStats before = consumer->stats();
  const NodeStats out_before = producer->stats();
  auto token = [](int pass, int k, int i) { return std::string{static_cast<char>('a' + pass * kPerPass + k), static_cast<char>('0' + i % 64)}; };
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int k = 0; k < kPerPass; ++k) {
      for (int i = 0; i < kStreams; ++i) ASSERT_EQ(senders[i]->send(bytes(token(pass, k, i))), mux::SendStatus::kSent);
    }
    producer->flush_batch();
    for (int k = 0; k < kPerPass; ++k) {
      for (int i = 0; i < kStreams; ++i) {
        Item it;
        ASSERT_TRUE(anchors[i]->recv(&it, 10 * kSecond)) << "stream " << i << " pass " << pass;
        ASSERT_EQ(it.kind, Item::Kind::kData);
        EXPECT_EQ(text(it.bytes), token(pass, k, i));
      }
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the conductor refreshes the mirror's counters
  const NodeStats after = consumer->stats();
  const NodeStats out_after = producer->stats();
  // 192 records of 15 bytes a pass: at least one batch a pass was full.
  EXPECT_GE(out_after.channel_batches - out_before.channel_batches, uint64_t{2} * kPasses);
  EXPECT_EQ(after.channel_tcp_records, before.channel_tcp_records) << "a full batch went by the channel's TCP";
  EXPECT_EQ(after.channel_naks, before.channel_naks);
}

TEST(Node, PeerLossDropsEveryLiveStreamOnce) {
  NodePair pair;
  ASSERT_NO_FATAL_FAILURE(pair.open(3));
  send_all(*pair.senders[0], {"a"});
  pair.senders[1]->finish();  // finished before the loss: no Dropped for it
  Item it;
  ASSERT_TRUE(pair.anchors[0]->recv(&it, 10 * kSecond));
  ASSERT_TRUE(pair.anchors[1]->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kFinished);
  // Stream 0's sender goes without finish: dropped (peer-gone). Stream 2's
  // is still held when the producer node itself goes: dropped (peer lost).
  pair.senders[0].reset();
  ASSERT_TRUE(pair.anchors[0]->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  pair.producer.reset();
  EXPECT_TRUE(pair.senders[2]->closed());
  EXPECT_EQ(pair.senders[2]->send(bytes("late")), mux::SendStatus::kClosed);
  ASSERT_TRUE(pair.anchors[2]->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  for (int i : {0, 2}) EXPECT_FALSE(pair.anchors[i]->recv(&it, 100'000'000)) << "a second end for " << i;
  EXPECT_FALSE(pair.anchors[1]->recv(&it, 100'000'000)) << "a Dropped after Finished";
}

// resume_window: a consumer holding streams for a resume.
std::unique_ptr<Node> make_resuming(const std::string& name, uint64_t window_ns) {
  NodeOptions o = options(name);
  o.resume_window_ns = window_ns;
  auto n = Node::create(o);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? std::move(*n) : nullptr;
}

// wait_until: polls `done` every 10 ms for up to 10 s.
template <typename F>
bool wait_until(F done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// read_tokens: the next items of `a` are data prefix`from`..prefix`to-1`,
// in order, each of `session` (0: any).
void read_tokens(Anchor& a, const std::string& prefix, int from, int to, uint64_t session = 0) {
  for (int k = from; k < to; ++k) {
    Item it;
    ASSERT_TRUE(a.recv(&it, 10 * kSecond)) << prefix << k << " did not arrive";
    ASSERT_EQ(it.kind, Item::Kind::kData) << prefix << k << ": " << mux::end_reason_name(it.reason);
    EXPECT_EQ(text(it.bytes), absl::StrCat(prefix, k));
    if (session != 0) {
      EXPECT_EQ(it.session, session) << prefix << k << ": the reader saw another session";
    }
  }
}

std::vector<std::string> tokens(const std::string& prefix, int from, int to) {
  std::vector<std::string> out;
  for (int k = from; k < to; ++k) out.push_back(absl::StrCat(prefix, k));
  return out;
}

// HeldPair: a resuming consumer, a producer node p1, and two single-sender
// streams from it, a and b, each sent tokens 0..n-1 (a0.., b0..).
struct HeldPair {
  std::unique_ptr<Node> consumer, p1;
  std::unique_ptr<Anchor> a, b;
  std::unique_ptr<Sender> sa, sb;
  void open(uint64_t window_ns, int n) {
    consumer = make_resuming("c", window_ns);
    p1 = make("p1");
    ASSERT_TRUE(consumer && p1);
    a = consumer->create_anchor(AnchorKind::kSingleSender);
    b = consumer->create_anchor(AnchorKind::kSingleSender);
    auto x = p1->attach(a->handle(), consumer->control_address());
    auto y = p1->attach(b->handle(), consumer->control_address());
    ASSERT_TRUE(x.ok() && y.ok());
    sa = std::move(*x);
    sb = std::move(*y);
    ASSERT_TRUE(send_all(*sa, tokens("a", 0, n)));
    ASSERT_TRUE(send_all(*sb, tokens("b", 0, n)));
  }
};

// A stream whose channel ends (its producer's node lost) is held by a
// resuming consumer; another node's producer naming its session takes it
// over from the next frame, and the reader sees one stream: every token
// in order, one end, no Dropped. Both ways: a stream read to its end
// before the resume (its end held), and one with tokens still unread
// (the resumed tokens wait behind them). Anyone else is refused.
TEST(Node, AResumeTakesOverAStreamWhoseChannelEndedFromTheNextFrame) {
  HeldPair h;
  ASSERT_NO_FATAL_FAILURE(h.open(10 * kSecond, 6));
  ASSERT_NO_FATAL_FAILURE(read_tokens(*h.a, "a", 0, 6));
  ASSERT_NO_FATAL_FAILURE(read_tokens(*h.b, "b", 0, 2));
  ASSERT_TRUE(wait_until([&] { return h.consumer->stats().in.records >= 12; }));  // b's other four are in, unread
  const uint64_t session_a = h.sa->session(), session_b = h.sb->session();
  h.p1.reset();  // the producer's node goes: its channel ends
  ASSERT_TRUE(wait_until([&] { return h.consumer->stats().resumes_held == 2; }));
  Item it;
  EXPECT_FALSE(h.a->recv(&it, 200'000'000)) << "a held stream's end was read";
  auto p2 = make("p2");
  ASSERT_TRUE(p2);
  EXPECT_FALSE(p2->attach(plain(h.a->handle()), h.consumer->control_address()).ok()) << "a new stream took a held anchor";
  EXPECT_FALSE(p2->attach(h.a->handle(), h.consumer->control_address(), session_a ^ 1).ok()) << "another session's resume";
  auto ra = p2->attach(h.a->handle(), h.consumer->control_address(), session_a);
  auto rb = p2->attach(h.b->handle(), h.consumer->control_address(), session_b);
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ((*ra)->resume_at(), 6u);
  EXPECT_EQ((*rb)->resume_at(), 6u);
  ASSERT_TRUE(send_all(**ra, tokens("a", 6, 10)));
  ASSERT_TRUE(send_all(**rb, tokens("b", 6, 10)));
  EXPECT_TRUE((*ra)->finish());
  EXPECT_TRUE((*rb)->finish());
  ASSERT_NO_FATAL_FAILURE(read_tokens(*h.a, "a", 6, 10, session_a));  // one stream: the session it had
  ASSERT_NO_FATAL_FAILURE(read_tokens(*h.b, "b", 2, 10, session_b));
  for (Anchor* x : {h.a.get(), h.b.get()}) {
    ASSERT_TRUE(x->recv(&it, 10 * kSecond));
    EXPECT_EQ(it.kind, Item::Kind::kFinished) << mux::end_reason_name(it.reason);
    EXPECT_EQ(it.frames, 10u) << "the end counts the frames before the resume too";
    EXPECT_FALSE(x->recv(&it, 100'000'000)) << "an item after the end";
  }
  const NodeStats st = h.consumer->stats();
  EXPECT_EQ(st.resumes_answered, 2u);
  EXPECT_EQ(st.resumes_refused, 1u);
  EXPECT_EQ(st.resumes_expired, 0u);
}

// A producer whose host goes silent (no FIN: here, its heartbeats an hour
// apart) has its stream ended by the consumer's watchdog, not its channel:
// that stream is held too, and a resume from another node takes it over.
TEST(Node, AStreamTheWatchdogEndedIsHeldAndResumed) {
  NodeOptions co = options("c");
  co.resume_window_ns = 10 * kSecond;
  co.mux.heartbeat_interval_ns = 100'000'000;  // silent after 3 of them
  auto made = Node::create(co);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  auto p1 = make_quiet("p1");
  ASSERT_TRUE(p1);
  auto a = consumer->create_anchor(AnchorKind::kSingleSender);
  auto sa = p1->attach(a->handle(), consumer->control_address());
  ASSERT_TRUE(sa.ok()) << sa.status();
  ASSERT_TRUE(send_all(**sa, tokens("a", 0, 2)));
  ASSERT_NO_FATAL_FAILURE(read_tokens(*a, "a", 0, 2, (*sa)->session()));
  ASSERT_TRUE(wait_until([&] { return consumer->stats().resumes_held == 1; })) << "the silent stream was not held";
  EXPECT_GE(consumer->stats().in.watchdog_dead, 1u);
  auto p2 = make("p2");
  ASSERT_TRUE(p2);
  auto ra = p2->attach(a->handle(), consumer->control_address(), (*sa)->session());
  ASSERT_TRUE(ra.ok()) << ra.status();
  EXPECT_EQ((*ra)->resume_at(), 2u);
  ASSERT_TRUE(send_all(**ra, tokens("a", 2, 4)));
  EXPECT_TRUE((*ra)->finish());
  ASSERT_NO_FATAL_FAILURE(read_tokens(*a, "a", 2, 4, (*sa)->session()));
  Item it;
  ASSERT_TRUE(a->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kFinished) << mux::end_reason_name(it.reason);
  EXPECT_EQ(it.frames, 4u);
}

// With no resume in the window, a held stream ends as it would have:
// dropped (its channel lost), counting its frames, after what it had
// delivered; a resume after the window is refused.
TEST(Node, AHeldStreamWithoutAResumeEndsDroppedWhenTheWindowCloses) {
  HeldPair h;
  ASSERT_NO_FATAL_FAILURE(h.open(300'000'000, 3));
  ASSERT_NO_FATAL_FAILURE(read_tokens(*h.a, "a", 0, 3));
  ASSERT_TRUE(wait_until([&] { return h.consumer->stats().in.records >= 6; }));
  const uint64_t session_a = h.sa->session();
  h.p1.reset();
  ASSERT_TRUE(wait_until([&] { return h.consumer->stats().resumes_held == 2; }));
  Item it;
  EXPECT_FALSE(h.a->recv(&it, 100'000'000)) << "the end went before the window closed";
  ASSERT_TRUE(h.a->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  EXPECT_EQ(it.reason, mux::EndReason::kChannelLost);
  EXPECT_EQ(it.frames, 3u);
  ASSERT_NO_FATAL_FAILURE(read_tokens(*h.b, "b", 0, 3));  // b's unread tokens, then its end
  ASSERT_TRUE(h.b->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  EXPECT_EQ(it.frames, 3u);
  for (Anchor* x : {h.a.get(), h.b.get()}) EXPECT_FALSE(x->recv(&it, 100'000'000)) << "a second end";
  EXPECT_EQ(h.consumer->stats().resumes_expired, 2u);
  auto p2 = make("p2");
  ASSERT_TRUE(p2);
  EXPECT_FALSE(p2->attach(h.a->handle(), h.consumer->control_address(), session_a).ok()) << "a resume after the window";
}

// attach_many: a batch of handles of one peer attached at once (every
// request before any answer), one result each, in order: an unknown anchor
// fails alone, another node's handle is attached alone, and every stream
// that attached carries its tokens in order.
TEST(Node, AttachManySendsTheRequestsAtOnceAndAnswersEachInOrder) {
  NodePair pair;
  auto other = make("c2");
  ASSERT_TRUE(other);
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<mux::AnchorHandle> handles;
  for (int i = 0; i < 40; ++i) {
    anchors.push_back(pair.consumer->create_anchor(AnchorKind::kSingleSender));
    handles.push_back(plain(anchors.back()->handle()));  // by ATTACH: every request at once
  }
  mux::AnchorHandle unknown = handles[7];
  unknown.anchor ^= 1;  // no such anchor there
  handles.insert(handles.begin() + 7, unknown);
  auto elsewhere = other->create_anchor(AnchorKind::kSingleSender);
  handles.insert(handles.begin() + 20, plain(elsewhere->handle()));  // another node's: attached alone, at its own address
  const uint64_t before = pair.consumer->stats().attaches_answered;
  auto got = pair.producer->attach_many(handles, pair.consumer->control_address());
  ASSERT_EQ(got.size(), handles.size());
  EXPECT_FALSE(got[7].ok()) << "an unknown anchor attached";
  EXPECT_FALSE(got[20].ok()) << "another node's handle attached at this node's address";
  EXPECT_EQ(pair.consumer->stats().attaches_answered - before, 40u);
  std::set<uint64_t> sessions;
  for (size_t i = 0, k = 0; i < got.size(); ++i) {
    if (i == 7 || i == 20) continue;
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status();
    sessions.insert((*got[i])->session());
    ASSERT_TRUE(send_all(**got[i], {absl::StrCat("t", k, "-0"), absl::StrCat("t", k, "-1")}));
    EXPECT_TRUE((*got[i])->finish());
    ++k;
  }
  EXPECT_EQ(sessions.size(), 40u);
  for (size_t k = 0; k < anchors.size(); ++k) {
    ASSERT_NO_FATAL_FAILURE(read_tokens(*anchors[k], absl::StrCat("t", k, "-"), 0, 2));
    Item it;
    ASSERT_TRUE(anchors[k]->recv(&it, 10 * kSecond));
    EXPECT_EQ(it.kind, Item::Kind::kFinished);
  }
  // A batch whose first is refused still goes at once on that peer.
  std::vector<mux::AnchorHandle> second = {unknown};
  for (int i = 0; i < 5; ++i) {
    anchors.push_back(pair.consumer->create_anchor(AnchorKind::kSingleSender));
    second.push_back(plain(anchors.back()->handle()));
  }
  auto again = pair.producer->attach_many(second, pair.consumer->control_address());
  ASSERT_EQ(again.size(), 6u);
  EXPECT_FALSE(again[0].ok());
  for (size_t i = 1; i < again.size(); ++i) EXPECT_TRUE(again[i].ok()) << i << ": " << again[i].status();
}

// Tickets (PROTOCOL.md §5.2.1): a single-sender anchor's handle carries
// its attach answered in advance. The producer opens the stream with no
// ATTACH — on a new peer once its NODE answer came, on a known one at
// once — and the consumer claims it when the OpenSlot arrives.
TEST(Node, ATicketOpensTheStreamWithNoAttach) {
  auto consumer = make("c");
  auto producer = make("p");
  for (int round = 0; round < 2; ++round) {  // a new peer, then a known one
    auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
    const mux::AnchorHandle h = anchor->handle();
    ASSERT_NE(h.ticket.session, 0u);
    EXPECT_EQ(h.ticket.credit, 8u);  // the consumer's window, given in advance
    const std::string travelled = h.to_string();  // as a frontend hands it over
    EXPECT_EQ(travelled.size(), 77u);
    auto s = producer->attach(*mux::AnchorHandle::parse(travelled), consumer->control_address());
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->session(), h.ticket.session);
    ASSERT_TRUE(send_all(**s, tokens("r", 0, 3)));
    EXPECT_TRUE((*s)->finish());
    ASSERT_NO_FATAL_FAILURE(read_tokens(*anchor, "r", 0, 3, h.ticket.session));
    Item it;
    ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
    EXPECT_EQ(it.kind, Item::Kind::kFinished);
    EXPECT_EQ(it.frames, 3u);
  }
  const NodeStats c = consumer->stats();
  EXPECT_EQ(c.attaches_answered, 0u) << "a ticket asked by ATTACH";
  EXPECT_EQ(c.tickets_claimed, 2u);
  EXPECT_EQ(c.in.claimed_on_open, 2u);
  EXPECT_EQ(c.in.unknown_anchor, 0u);
  EXPECT_EQ(producer->stats().tickets_opened, 2u);
  // A multi-sender anchor's handle goes to many producers: it has none.
  auto multi = consumer->create_anchor(AnchorKind::kMultiSender);
  EXPECT_EQ(multi->handle().ticket.session, 0u);
  EXPECT_EQ(multi->handle().to_string().size(), 33u);
}

TEST(Node, ANodeWithoutTicketsGivesPlainHandlesAndAnswersByAttach) {
  NodeOptions o = options("c");
  o.tickets = false;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto producer = make("p");
  auto anchor = (*made)->create_anchor(AnchorKind::kSingleSender);
  EXPECT_EQ(anchor->handle().ticket.session, 0u);
  auto s = producer->attach(anchor->handle(), (*made)->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "asked");
  EXPECT_EQ((*made)->stats().attaches_answered, 1u);
  EXPECT_EQ((*made)->stats().tickets_claimed, 0u);
}

// A ticket opens one stream, of the anchor it names, while the anchor
// wants one: spent, guessed, pre-empted by an ATTACH, or cancelled, it
// opens a sender the consumer closes at once (CloseSlot{unknown}), counted,
// and nothing reaches any anchor. A wrong guess does not spend the real one.
TEST(Node, ASpentGuessedPreemptedOrCancelledTicketOpensNothing) {
  auto consumer = make("c");
  auto producer = make("p");
  auto closed_at_once = [&](const mux::AnchorHandle& h, uint64_t unknown_before) {
    auto s = producer->attach(h, consumer->control_address());
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->wait_closed(60 * kSecond)) << "the consumer did not close it";
    EXPECT_EQ((*s)->send(bytes("late")), mux::SendStatus::kClosed);
    EXPECT_EQ(consumer->stats().in.unknown_anchor, unknown_before + 1);
  };
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto first = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(first.ok()) << first.status();
  expect_through(**first, *anchor, "first");
  ASSERT_NO_FATAL_FAILURE(closed_at_once(anchor->handle(), 0));  // spent
  auto fresh = consumer->create_anchor(AnchorKind::kSingleSender);
  mux::AnchorHandle guessed = fresh->handle();
  guessed.ticket.session ^= 1;
  ASSERT_NO_FATAL_FAILURE(closed_at_once(guessed, 1));
  auto real = producer->attach(fresh->handle(), consumer->control_address());
  ASSERT_TRUE(real.ok()) << real.status();
  expect_through(**real, *fresh, "real");  // the guess spent nothing
  auto chosen = consumer->create_anchor(AnchorKind::kSingleSender);
  auto by_attach = producer->attach(plain(chosen->handle()), consumer->control_address());
  ASSERT_TRUE(by_attach.ok()) << by_attach.status();
  ASSERT_NO_FATAL_FAILURE(closed_at_once(chosen->handle(), 2));  // the anchor has its producer
  expect_through(**by_attach, *chosen, "chosen");
  auto gone = consumer->create_anchor(AnchorKind::kSingleSender);
  gone->cancel();
  ASSERT_NO_FATAL_FAILURE(closed_at_once(gone->handle(), 3));
  expect_through(**first, *anchor, "still");
  Item it;
  EXPECT_FALSE(anchor->recv(&it, 100'000'000)) << "a refused ticket's stream reached the anchor";
  EXPECT_FALSE(gone->recv(&it, 100'000'000)) << "a cancelled anchor got a stream";
  EXPECT_EQ(consumer->stats().tickets_claimed, 2u);
}

// A ticket is an attach answered in advance, so it is claimed within the
// accept timeout or it lapses. An anchor no producer reached then reads
// one Dropped{kNeverOpened} under the ticket's session: a frontend whose
// engine took the handle and died before its first flush ends that
// request instead of waiting for ever. A producer that comes later with
// the ticket is closed; a ticketless ATTACH still finds the anchor free.
TEST(Node, AnUnclaimedTicketLapsesAndItsAnchorReadsNeverOpened) {
  NodeOptions o = options("c");
  o.mux.accept_timeout_ns = 3 * kSecond;  // the claimed one's channel comes up well within it, under TSan too
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  Node& consumer = **made;
  auto producer = make("p");
  auto lapsing = consumer.create_anchor(AnchorKind::kSingleSender);
  auto claimed = consumer.create_anchor(AnchorKind::kSingleSender);
  const mux::AnchorHandle h = lapsing->handle();
  ASSERT_NE(h.ticket.session, 0u);
  auto in_time = producer->attach(claimed->handle(), consumer.control_address());
  ASSERT_TRUE(in_time.ok()) << in_time.status();
  ASSERT_TRUE(send_all(**in_time, tokens("t", 0, 3)));
  Item it;
  ASSERT_TRUE(lapsing->recv(&it, 60 * kSecond)) << "an unclaimed ticket's anchor waited for ever";
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  EXPECT_EQ(it.reason, mux::EndReason::kNeverOpened);
  EXPECT_EQ(it.session, h.ticket.session);
  EXPECT_EQ(it.frames, 0u);
  EXPECT_EQ(lapsing->live_streams(), 0u) << "its end read, the anchor holds nothing";
  EXPECT_FALSE(lapsing->recv(&it, 100'000'000)) << "a second end";
  // The claimed one's stream is untouched by the lapse (past its deadline too).
  EXPECT_TRUE((*in_time)->finish());
  ASSERT_NO_FATAL_FAILURE(read_tokens(*claimed, "t", 0, 3, claimed->handle().ticket.session));
  ASSERT_TRUE(claimed->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kFinished);
  const uint64_t unknown = consumer.stats().in.unknown_anchor;
  auto late = producer->attach(h, consumer.control_address());
  ASSERT_TRUE(late.ok()) << late.status();
  ASSERT_TRUE((*late)->wait_closed(60 * kSecond)) << "a lapsed ticket opened a stream";
  EXPECT_EQ(consumer.stats().in.unknown_anchor, unknown + 1);
  auto asked = producer->attach(plain(h), consumer.control_address());
  ASSERT_TRUE(asked.ok()) << asked.status();
  expect_through(**asked, *lapsing, "asked");
  const NodeStats c = consumer.stats();
  EXPECT_EQ(c.tickets_expired, 1u);
  EXPECT_EQ(c.tickets_claimed, 1u);
  EXPECT_EQ(c.attaches_answered, 1u);
}

// A ticket whose OpenSlot arrived before its deadline is claimed, even when
// no reader looked at the channel until after the deadline: the conductor
// applies what the channels hold before it judges a ticket lapsed.
TEST(Node, AnOpenSlotThatArrivedInTimeClaimsItsTicketThoughNoReaderLookedUntilLater) {
  NodeOptions o = options("c");
  o.mux.accept_timeout_ns = 2 * kSecond;
  // The watchdog, which applies the channels too, looks every tenth of
  // this: not again before the ticket's deadline.
  o.mux.heartbeat_interval_ns = 60 * kSecond;
  o.mux.stall_deadline_ns = 2 * o.mux.heartbeat_interval_ns;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  Node& consumer = **made;
  auto producer = make("p");
  auto anchor = consumer.create_anchor(AnchorKind::kSingleSender);
  const mux::AnchorHandle h = anchor->handle();
  ASSERT_NE(h.ticket.session, 0u);
  const uint64_t t0 = monotonic_ns();
  auto s = producer->attach(h, consumer.control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(send_all(**s, tokens("k", 0, 3)));
  EXPECT_TRUE((*s)->finish());
  // In the consumer's channel (its mirror took a datagram: the OpenSlot
  // leads the first batch), not applied: nobody reads.
  while (consumer.stats().channel_datagrams == 0 && monotonic_ns() < t0 + o.mux.accept_timeout_ns) usleep(10'000);
  ASSERT_GT(consumer.stats().channel_datagrams, 0u) << "too slow to test before the deadline";
  EXPECT_EQ(consumer.stats().tickets_claimed, 0u) << "applied before the deadline: the test shows nothing";
  // Nobody reads until the ticket's deadline and a conductor turn passed.
  const uint64_t past = t0 + o.mux.accept_timeout_ns + kSecond;
  while (monotonic_ns() < past) usleep(50'000);
  ASSERT_NO_FATAL_FAILURE(read_tokens(*anchor, "k", 0, 3, h.ticket.session));
  Item it;
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kFinished);
  EXPECT_FALSE(anchor->recv(&it, 100'000'000)) << "a second end";
  const NodeStats c = consumer.stats();
  EXPECT_EQ(c.tickets_claimed, 1u);
  EXPECT_EQ(c.tickets_expired, 0u) << "judged lapsed with its OpenSlot already in the channel";
  EXPECT_EQ(c.in.unknown_anchor, 0u);
}

// An ATTACH answered ok spends the anchor's ticket (PROTOCOL.md 5.2.1):
// that ticket never lapses, so its deadline neither counts it expired nor
// ends the anchor a second time.
TEST(Node, ATicketSpentByAnAttachNeverLapses) {
  NodeOptions o = options("c");
  o.mux.accept_timeout_ns = 2 * kSecond;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  Node& consumer = **made;
  auto producer = make("p");
  auto anchor = consumer.create_anchor(AnchorKind::kSingleSender);
  const mux::AnchorHandle h = anchor->handle();
  ASSERT_NE(h.ticket.session, 0u);
  const uint64_t t0 = monotonic_ns();
  auto asked = producer->attach(plain(h), consumer.control_address());
  ASSERT_TRUE(asked.ok()) << asked.status();
  ASSERT_TRUE(send_all(**asked, tokens("a", 0, 3)));
  EXPECT_TRUE((*asked)->finish());
  ASSERT_NO_FATAL_FAILURE(read_tokens(*anchor, "a", 0, 3, (*asked)->session()));
  Item it;
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kFinished);
  // Past the ticket's deadline, with room for the conductor's turn.
  const uint64_t past = t0 + o.mux.accept_timeout_ns + kSecond;
  while (monotonic_ns() < past) usleep(50'000);
  EXPECT_FALSE(anchor->recv(&it, 300'000'000)) << "the spent ticket's deadline ended the anchor again";
  const NodeStats c = consumer.stats();
  EXPECT_EQ(c.attaches_answered, 1u);
  EXPECT_EQ(c.tickets_expired, 0u) << "a ticket the ATTACH spent was counted as lapsed";
  EXPECT_EQ(c.tickets_claimed, 0u);
}

// The ticket's terms are the consumer's: a producer that claims more
// credit than its ticket gave has that slot ended at the consumer's
// window (protocol error), never buffered past it.
TEST(Node, ATicketsCreditIsTheConsumersNotTheHandles) {
  auto consumer = make("c");
  auto producer = make("p");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  mux::AnchorHandle greedy = anchor->handle();
  greedy.ticket.credit = 64;  // the consumer gave 8
  auto s = producer->attach(greedy, consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(send_all(**s, tokens("g", 0, 20)));
  producer->flush_batch();
  ASSERT_TRUE(wait_until([&] { return consumer->stats().in.protocol_errors >= 1; })) << "the ninth record was taken";
  ASSERT_NO_FATAL_FAILURE(read_tokens(*anchor, "g", 0, 8));
  Item it;
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  EXPECT_EQ(it.reason, mux::EndReason::kProtocolError) << mux::end_reason_name(it.reason);
  EXPECT_TRUE((*s)->wait_closed(60 * kSecond));
}

// A peer that takes the connection and never answers our NODE: a ticket's
// attach (which waits for that answer) fails at attach_timeout, and the
// peer is ended then, not kept with its senders open for good.
TEST(Node, APeerThatNeverAnswersOurNodeFailsATicketsAttachAndIsEnded) {
  NodeOptions o = options("p");
  o.attach_timeout_ns = 300'000'000;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(l, 8), 0);  // connections wait in its backlog: never accepted, never answered
  ASSERT_EQ(getsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const mux::AnchorHandle h{0x1234, 1, mux::Ticket{77, 8, 0, 0}};
  auto s = (*made)->attach(h, net::Endpoint{INADDR_LOOPBACK, ntohs(a.sin_port)});
  EXPECT_FALSE(s.ok());
  // Its own deadline, or the peer's end at the same timeout, whichever the
  // threads see first: either way the attach fails, not later.
  EXPECT_TRUE(s.status().code() == absl::StatusCode::kDeadlineExceeded ||
              absl::StrContains(s.status().message(), "did not answer our NODE"))
      << s.status();
  EXPECT_TRUE(wait_until([&] { return (*made)->stats().peers_lost == 1; })) << "the silent peer was kept";
  EXPECT_EQ((*made)->stats().tickets_opened, 0u) << "an abandoned ticket opened";
  close(l);
}

// attach_many on tickets: no request at all, each stream whole.
TEST(Node, AttachManyOnTicketsSendsNoRequest) {
  NodePair pair;
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<mux::AnchorHandle> handles;
  for (int i = 0; i < 20; ++i) {
    anchors.push_back(pair.consumer->create_anchor(AnchorKind::kSingleSender));
    handles.push_back(anchors.back()->handle());
  }
  auto got = pair.producer->attach_many(handles, pair.consumer->control_address());
  ASSERT_EQ(got.size(), handles.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_TRUE(got[k].ok()) << k << ": " << got[k].status();
    ASSERT_TRUE(send_all(**got[k], {absl::StrCat("m", k, "-0"), absl::StrCat("m", k, "-1")}));
  }
  for (size_t k = 0; k < anchors.size(); ++k) {
    ASSERT_NO_FATAL_FAILURE(read_tokens(*anchors[k], absl::StrCat("m", k, "-"), 0, 2, handles[k].ticket.session));
  }
  EXPECT_EQ(pair.consumer->stats().attaches_answered, 0u);
  EXPECT_EQ(pair.consumer->stats().tickets_claimed, 20u);
}

// A batch for a peer nobody can reach: every handle fails, with the
// first's status (they are not tried again one by one).
TEST(Node, AttachManyToAnUnreachablePeerFailsEveryHandle) {
  NodeOptions o = options("p");
  o.attach_timeout_ns = 300'000'000;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  std::vector<mux::AnchorHandle> handles(20, mux::AnchorHandle{0x1234, 1, {}});
  for (size_t i = 0; i < handles.size(); ++i) handles[i].anchor = i + 1;
  auto got = (*made)->attach_many(handles, net::Endpoint{INADDR_LOOPBACK, 1});  // nothing listens on port 1
  ASSERT_EQ(got.size(), handles.size());
  for (const auto& g : got) {
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status(), got[0].status());
  }
}

// A per-stream connection whose consumer stopped reading a window behind
// is not read, and does not spin the node thread either (its waiting bytes
// made every look of the engine return at once: a core); once the consumer
// reads again every token arrives, whole and in order.
TEST(PerStreamPath, AConsumerAWindowBehindCostsTheNodeThreadNothing) {
  auto consumer = make_with("c", false);
  auto producer = make_with("p", false);
  ASSERT_TRUE(consumer && producer);
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  constexpr int kTokens = 2000;  // far past the window (8) and the sockets' buffers
  Joined prod{std::thread([&] {
    for (int t = 0; t < kTokens; ++t) {
      if (!send_all(**s, {absl::StrCat("t", t)})) return;
    }
    EXPECT_TRUE((*s)->finish());
  })};
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the window fills, the sockets too
  const uint64_t before = consumer->stats().conductor_passes;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const uint64_t passes = consumer->stats().conductor_passes - before;
  EXPECT_LT(passes, 100u) << "the node thread spun on a connection it does not read";
  for (int t = 0; t < kTokens; ++t) {
    Item it;
    ASSERT_TRUE(anchor->recv(&it, 10 * kSecond)) << "stalled at " << t;
    ASSERT_EQ(it.kind, Item::Kind::kData);
    ASSERT_EQ(text(it.bytes), absl::StrCat("t", t));
  }
  Item end;
  ASSERT_TRUE(anchor->recv(&end, 10 * kSecond));
  EXPECT_EQ(end.kind, Item::Kind::kFinished);
}

// A channel's counters outlive it: the consumer's datagram count stays
// what it was once the producer node goes (its channel's mirror session
// and link go first, as the source closes; its peer ends after).
TEST(Node, AChannelsCountersOutliveItsPeer) {
  NodePair pair;
  ASSERT_NO_FATAL_FAILURE(pair.open(2));
  for (int t = 0; t < 20; ++t) {
    for (auto& s : pair.senders) ASSERT_TRUE(send_all(*s, {absl::StrCat("t", t)}));
  }
  Item it;
  for (auto& a : pair.anchors) {
    for (int t = 0; t < 20; ++t) ASSERT_TRUE(a->recv(&it, 10 * kSecond));
  }
  uint64_t before = 0;
  for (int i = 0; i < 200 && before == 0; ++i) {  // the conductor copies them at its next pass
    before = pair.consumer->stats().channel_datagrams;
    if (before == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(before, 0u);
  pair.senders.clear();
  pair.producer.reset();
  for (int i = 0; i < 400 && pair.consumer->stats().peers_lost == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(pair.consumer->stats().peers_lost, 1u);
  EXPECT_GE(pair.consumer->stats().channel_datagrams, before);
}

// Readers blocked in recv, one per anchor, all fed by one channel: one of
// them watches the ingress ring and applies it for all, the others wait on
// the node; each gets exactly its own stream, whole and in order, and the
// readers applied it (no applier hand-off while they wait).
TEST(Node, BlockedReadersOfOneChannelApplyItThemselves) {
  auto consumer = make("c");
  auto producer = make("p");
  constexpr int kStreams = 4, kTokens = 300;
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<std::unique_ptr<Sender>> senders;
  ASSERT_NO_FATAL_FAILURE(open_streams(*consumer, *producer, kStreams, &anchors, &senders));
  std::vector<int> got(kStreams, 0);
  std::vector<char> finished(kStreams, 0);  // a byte each: its own reader writes it (vector<bool> packs them in a word)
  {
    std::vector<Joined> readers(kStreams);
    for (int i = 0; i < kStreams; ++i) {
      readers[i].t = std::thread([&, i] {
        for (;;) {
          Item it;
          if (!anchors[i]->recv(&it, 10 * kSecond)) return;
          if (it.kind != Item::Kind::kData) {
            finished[i] = it.kind == Item::Kind::kFinished;
            return;
          }
          if (text(it.bytes) != absl::StrCat("s", i, "t", got[i])) return;
          ++got[i];
        }
      });
    }
    for (int t = 0; t < kTokens; ++t) {
      for (int i = 0; i < kStreams; ++i) ASSERT_TRUE(send_all(*senders[i], {absl::StrCat("s", i, "t", t)}));
      if (t % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));  // the readers park
    }
    for (auto& s : senders) EXPECT_TRUE(s->finish());
  }
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_EQ(got[i], kTokens) << "stream " << i;
    EXPECT_TRUE(finished[i]) << "stream " << i;
  }
  const NodeStats cs = consumer->stats();
  EXPECT_GT(cs.applied_by_readers, 0u);
  EXPECT_EQ(cs.in.records, uint64_t{kStreams} * kTokens);
}

// A reader parked on its channel's ring when the producer's node goes:
// its stream ends dropped (the loss wakes the ring's watcher).
TEST(Node, AWatchingReaderSeesThePeersLoss) {
  auto consumer = make("c");
  auto producer = make("p");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "first");
  Item it;
  Joined reader{std::thread([&] { EXPECT_TRUE(anchor->recv(&it, 30 * kSecond)); })};
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // parked by now
  producer.reset();
  reader.t.join();
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
}

TEST(Node, NodeLossClosesTheSenders) {
  auto consumer = make("c");
  auto producer = make("p");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  consumer.reset();
  EXPECT_TRUE((*s)->wait_closed(3600 * kSecond)) << "the peer's loss did not wake the producer's wait";
  EXPECT_EQ((*s)->send(bytes("late")), mux::SendStatus::kClosed);
  anchor.reset();  // after its node: allowed (it holds what it needs)
}

// raw_connect: a stranger's TCP connection to a node's control port.
int raw_connect(const net::Endpoint& at, int timeout_s = 5) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(at.port);
  a.sin_addr.s_addr = htonl(at.ip);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// read_until_closed: every byte the node sends until it closes (or 5 s).
std::vector<std::byte> read_until_closed(int fd, bool* closed) {
  std::vector<std::byte> got;
  std::byte b[4096];
  *closed = false;
  for (;;) {
    const ssize_t n = read(fd, b, sizeof(b));
    if (n == 0) *closed = true;
    if (n <= 0) break;
    got.insert(got.end(), b, b + n);
  }
  close(fd);
  return got;
}

TEST(Node, PerStreamStrangersAreAnsweredThenCut) {
  auto consumer = make("c");  // its deadline for a stream is 5 s: case 1 must close well before
  NodeOptions o = options("d");
  o.hello_timeout_ns = 300'000'000;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto short_deadline = std::move(*made);
  std::byte buf[512];
  proto::Node hello;  // flags 0: a per-stream connection
  hello.worker_id = 42;
  // 1. A per-stream attach to an anchor nobody made: the answer (unknown), then the close.
  int fd = raw_connect(consumer->control_address(), 2);  // closed before 2 s, or not at all by the answer
  size_t n = proto::encode_node(hello, {buf, sizeof(buf)});
  proto::AttachRequest req;
  req.anchor_id = 0x1234;
  req.session_id = 1;
  req.supported_keys = proto::kTransportTcp;
  std::byte body[128];
  const size_t bn = proto::encode_attach_request(req, {body, sizeof(body)});
  proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kAttach, 0, 0, static_cast<uint32_t>(bn), 0}, buf + n);
  std::memcpy(buf + n + 16, body, bn);
  n += 16 + bn;
  ASSERT_EQ(write(fd, buf, n), static_cast<ssize_t>(n));
  bool closed = false;
  std::vector<std::byte> got = read_until_closed(fd, &closed);
  EXPECT_TRUE(closed) << "a refused per-stream connection stays open";
  proto::Frame f;
  ASSERT_EQ(proto::decode_frame(got, 1024, &f), proto::DecodeError::kOk);
  EXPECT_EQ(f.header.kind, proto::FrameKind::kNode);
  const size_t first = 16 + f.header.len;
  ASSERT_EQ(proto::decode_frame(proto::ConstBytes(got).subspan(first), 1024, &f), proto::DecodeError::kOk);
  ASSERT_EQ(f.header.kind, proto::FrameKind::kAttach);
  proto::AttachResponse resp;
  ASSERT_EQ(proto::decode_attach_response(f.body, &resp), proto::DecodeError::kOk);
  EXPECT_EQ(resp.status, proto::AttachStatus::kUnknownAnchor);
  // 2. A per-stream NODE and then nothing: cut at the deadline.
  fd = raw_connect(short_deadline->control_address());
  n = proto::encode_node(hello, {buf, sizeof(buf)});
  ASSERT_EQ(write(fd, buf, n), static_cast<ssize_t>(n));
  (void)read_until_closed(fd, &closed);
  EXPECT_TRUE(closed) << "an idle per-stream connection is held";
  EXPECT_GE(short_deadline->stats().refused, 1u);
  EXPECT_GE(consumer->stats().attaches_refused, 1u);
}

// A node without the mux answers a channel's NODE (its producer attaches
// per-stream through that connection), but a NODE alone does not make the
// connection useful: one that attaches nothing is cut at the hello deadline,
// within its source's pending cap (4,096 of them held the node: review
// helper-28), and an honest producer still gets through.
TEST(Node, ANodeWithoutTheMuxCutsAControlConnectionThatAttachesNothing) {
  NodeOptions o = options("c");
  o.mux.enabled = false;
  o.hello_timeout_ns = 300'000'000;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  std::byte buf[512];
  proto::Node hello;
  hello.flags = proto::kNodeChannel;
  hello.worker_id = 42;
  hello.channel_epoch = 1;
  hello.channel_port = 9;
  const size_t n = proto::encode_node(hello, {buf, sizeof(buf)});
  const int fd = raw_connect(consumer->control_address());
  ASSERT_EQ(write(fd, buf, n), static_cast<ssize_t>(n));
  bool closed = false;
  const std::vector<std::byte> got = read_until_closed(fd, &closed);
  EXPECT_TRUE(closed) << "held past the hello deadline with nothing attached";
  proto::Frame f;
  ASSERT_EQ(proto::decode_frame(got, 1024, &f), proto::DecodeError::kOk);
  EXPECT_EQ(f.header.kind, proto::FrameKind::kNode) << "answered first";
  EXPECT_GE(consumer->stats().refused, 1u);
  auto producer = make("p");
  stream_all(*consumer, *producer, 2, 5, true);
}

// A per-stream connection carries one stream: a second ATTACH on it cuts
// the connection, and the stream the first opened ends then, once (it
// stayed live for good: review helper-28).
TEST(Node, ASecondAttachOnAPerStreamConnectionEndsItsStreamOnce) {
  auto consumer = make("c");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  std::byte buf[512];
  proto::Node hello;  // flags 0: a per-stream connection
  hello.worker_id = 42;
  size_t n = proto::encode_node(hello, {buf, sizeof(buf)});
  proto::AttachRequest req;
  req.anchor_id = anchor->handle().anchor;
  req.session_id = 7;
  req.supported_keys = proto::kTransportTcp;
  std::byte body[128];
  const size_t bn = proto::encode_attach_request(req, {body, sizeof(body)});
  for (int i = 0; i < 2; ++i) {
    proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kAttach, 0, 0, static_cast<uint32_t>(bn), 0}, buf + n);
    std::memcpy(buf + n + 16, body, bn);
    n += 16 + bn;
  }
  const int fd = raw_connect(consumer->control_address());
  ASSERT_EQ(write(fd, buf, n), static_cast<ssize_t>(n));
  bool closed = false;
  (void)read_until_closed(fd, &closed);
  EXPECT_TRUE(closed) << "a second ATTACH on a per-stream connection";
  Item it;
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond)) << "the stream never ended";
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  EXPECT_EQ(it.reason, mux::EndReason::kProtocolError) << mux::end_reason_name(it.reason);
  EXPECT_EQ(it.session, 7u);
  EXPECT_FALSE(anchor->recv(&it, 300'000'000)) << "a second end";
  EXPECT_EQ(anchor->live_streams(), 0u);
}

TEST(Node, ChannelsAreCappedAndAFullNodeRefusesTheNextProducer) {
  NodeOptions o = options("c");
  o.max_channels = 1;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  auto p1 = make("p1");
  auto p2 = make("p2");
  auto a1 = consumer->create_anchor(AnchorKind::kSingleSender);
  auto a2 = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s1 = p1->attach(a1->handle(), consumer->control_address());
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_FALSE(p2->attach(a2->handle(), consumer->control_address()).ok()) << "a second channel past max_channels";
  EXPECT_GE(consumer->stats().refused, 1u);
  expect_through(**s1, *a1, "still");  // the first goes on
}

// Strangers that claim channels nobody serves (a NODE naming a port where
// nothing answers) hold their places only until the hello deadline: then
// they are cut, and a real producer gets a channel.
TEST(Node, ChannelsThatNeverComeUpAreCutAndFreeTheirPlaces) {
  NodeOptions o = options("c");
  o.max_channels = 2;
  o.hello_timeout_ns = 1'000'000'000;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  std::vector<int> strangers;
  for (uint64_t i = 0; i < 2; ++i) {
    const int fd = raw_connect(consumer->control_address(), 10);
    proto::Node m;
    m.flags = proto::kNodeChannel;
    m.worker_id = 100 + i;
    m.channel_epoch = 7 + i;
    m.channel_port = 1;  // nothing serves there
    std::byte b[proto::kFrameHeaderBytes + proto::kNodeMaxBody];
    const size_t n = proto::encode_node(m, {b, sizeof(b)});
    ASSERT_EQ(write(fd, b, n), static_cast<ssize_t>(n));
    strangers.push_back(fd);
  }
  for (int i = 0; i < 100 && consumer->stats().peers_in < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(consumer->stats().peers_in, 2u) << "the strangers' channels were never taken";
  for (int fd : strangers) {
    bool closed = false;
    read_until_closed(fd, &closed);  // the NODE answer, then the cut (at the deadline)
    EXPECT_TRUE(closed) << "a channel that never came up was kept";
  }
  auto producer = make("p");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "in");
}

// A full node makes room for a new channel by ending the oldest one that
// never carried a stream (given the hello deadline to): channels that came
// up and attach nothing, from however many addresses, do not keep real
// producers out (review helper-28). One that carries a stream stays.
TEST(Node, AFullNodeEndsAChannelThatNeverCarriedAStreamToAdmitANewOne) {
  NodeOptions o = options("c");
  o.max_channels = 2;
  o.hello_timeout_ns = 1'000'000'000;  // both channels come up well within it, on a loaded runner too
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  auto busy = make("busy");
  auto kept = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s_kept = busy->attach(plain(kept->handle()), consumer->control_address());
  ASSERT_TRUE(s_kept.ok()) << s_kept.status();
  auto idle = make("idle");  // its channel comes up; its one attach names no anchor here
  mux::AnchorHandle nowhere = plain(kept->handle());
  nowhere.anchor ^= 1;
  EXPECT_FALSE(idle->attach(nowhere, consumer->control_address()).ok());
  ASSERT_EQ(consumer->stats().peers_in, 2u);
  usleep(1'200'000);  // past the hello deadline
  auto late = make("late");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = late->attach(plain(anchor->handle()), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "in");
  expect_through(**s_kept, *kept, "still");  // the channel carrying a stream stayed
  EXPECT_EQ(consumer->stats().channels_evicted, 1u);
}

// A stranger without the key that plays the exchange by hand: a keyed NODE
// (any nonce) gets the node's keyed answer, and whatever it sends instead
// of a valid proof — an ATTACH, a forged AUTH — is counted and cut, and no
// channel is made for it.
TEST(Node, AKeyedNodeCutsAStrangerThatCannotProveTheKey) {
  net::Psk key;
  key.key.assign(40, 'k');
  NodeOptions o = options("c");
  o.psk = key;
  auto consumer = Node::create(o);
  ASSERT_TRUE(consumer.ok());
  for (bool forged : {false, true}) {
    const int fd = raw_connect((*consumer)->control_address());
    proto::Node m;
    m.flags = proto::kNodeChannel | proto::kNodeKeyed;
    m.worker_id = 7;
    m.channel_epoch = 9;
    m.channel_port = 9;
    std::byte b[proto::kFrameHeaderBytes + proto::kNodeMaxBody];
    const size_t n = proto::encode_node(m, {b, sizeof(b)});
    ASSERT_EQ(write(fd, b, n), static_cast<ssize_t>(n));
    std::byte next[proto::kFrameHeaderBytes + proto::kAuthMirrorBody];
    size_t len = 0;
    if (forged) {
      proto::Auth a;
      a.step = proto::AuthStep::kNodeProof;
      a.proof.fill(std::byte{0x5a});
      len = proto::encode_auth(a, {next, sizeof(next)});
    } else {
      proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kAttach, 0, 0, 0, 0}, next);
      len = proto::kFrameHeaderBytes;
    }
    ASSERT_EQ(write(fd, next, len), static_cast<ssize_t>(len));
    bool closed = false;
    const std::vector<std::byte> got = read_until_closed(fd, &closed);
    EXPECT_TRUE(closed) << "not cut";
    // What it got: the node's NODE, keyed and with a proof, and nothing else.
    ASSERT_EQ(got.size(), proto::kFrameHeaderBytes + proto::kNodeMaxBody);
    proto::Frame f;
    ASSERT_EQ(proto::decode_frame(got, proto::kNodeMaxBody, &f), proto::DecodeError::kOk);
    proto::Node answer;
    ASSERT_EQ(proto::decode_node(f, &answer), proto::DecodeError::kOk);
    EXPECT_EQ(answer.flags & (proto::kNodeKeyed | proto::kNodeProof), proto::kNodeKeyed | proto::kNodeProof);
  }
  EXPECT_EQ((*consumer)->stats().unauthenticated, 2u);
  EXPECT_EQ((*consumer)->stats().peers_in, 0u) << "a channel for a stranger";
}

// Relay: one TCP connection relayed between two nodes on a thread of its
// own, and a way to put a stranger's bytes into the consumer's side of it
// (an on-path attacker without the key).
class Relay {
 public:
  // hold: what the connector sends is kept (held()), not passed on, until release().
  explicit Relay(const net::Endpoint& upstream, bool hold = false) : upstream_(upstream), holding_(hold) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listen_fd_, 4), 0);
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    for (int fd : {listen_fd_, down_, up_}) {
      if (fd >= 0) close(fd);
    }
  }
  net::Endpoint address() const { return {INADDR_LOOPBACK, port_}; }
  // inject: bytes into the connection toward the consumer (its acceptor side).
  void inject(const std::vector<std::byte>& b) {
    std::lock_guard l(mu_);
    ASSERT_GE(up_, 0);
    ASSERT_EQ(write(up_, b.data(), b.size()), static_cast<ssize_t>(b.size()));
  }
  // held: what the connector sent while holding (see the constructor).
  std::vector<std::byte> held() {
    std::lock_guard l(mu_);
    return held_;
  }
  // release: what was held goes on, and so does everything after it.
  void release() {
    std::lock_guard l(mu_);
    holding_ = false;
    if (!held_.empty()) {
      ASSERT_EQ(write(up_, held_.data(), held_.size()), static_cast<ssize_t>(held_.size()));
    }
  }

 private:
  void run() {
    down_ = accept(listen_fd_, nullptr, nullptr);
    up_ = raw_connect(upstream_);
    for (int fd : {down_, up_}) fcntl(fd, F_SETFL, O_NONBLOCK);
    std::byte buf[65536];
    while (!stop_) {
      pollfd p[2] = {{down_, POLLIN, 0}, {up_, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP)) == 0) continue;
        const int from = i == 0 ? down_ : up_, to = i == 0 ? up_ : down_;
        const ssize_t n = read(from, buf, sizeof(buf));
        if (n <= 0) {
          shutdown(to, SHUT_WR);
          continue;
        }
        std::lock_guard l(mu_);
        if (i == 0 && holding_) {
          held_.insert(held_.end(), buf, buf + n);
          continue;
        }
        for (ssize_t done = 0; done < n;) {
          const ssize_t w = write(to, buf + done, static_cast<size_t>(n - done));
          if (w > 0) done += w;
        }
      }
    }
  }
  net::Endpoint upstream_;
  int listen_fd_ = -1, down_ = -1, up_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  bool holding_;                 // under mu_
  std::vector<std::byte> held_;  // under mu_
  std::thread thread_;
};

// node_of: the NODE frame at the front of what a connector sent.
proto::Node node_of(const std::vector<std::byte>& sent) {
  proto::Frame f;
  proto::Node m;
  EXPECT_EQ(proto::decode_frame({sent.data(), sent.size()}, proto::kNodeMaxBody, &f), proto::DecodeError::kOk);
  EXPECT_EQ(proto::decode_node(f, &m), proto::DecodeError::kOk);
  return m;
}

// colocated_node: a NODE from the producer's own address (another process
// on its host) that names the producer's channel serve as its own, under an
// epoch of its own; returns the socket.
int colocated_node(const net::Endpoint& consumer, uint16_t channel_port) {
  const int fd = raw_connect(consumer);
  proto::Node m;
  m.flags = proto::kNodeChannel;
  m.worker_id = 0xBAD;
  m.channel_epoch = 0xBAD0BAD0;
  m.channel_port = channel_port;
  std::byte b[proto::kFrameHeaderBytes + proto::kNodeMaxBody];
  const size_t n = proto::encode_node(m, {b, sizeof(b)});
  EXPECT_EQ(write(fd, b, n), static_cast<ssize_t>(n));
  return fd;
}

// A process beside the producer (review helper-31) names the producer's
// live channel serve in a NODE of its own: refused and counted; it takes
// none of that serve's connections, and the honest stream goes on.
TEST(Node, ANodeNamingTheServeALiveChannelMirrorsIsRefused) {
  auto consumer = make("c");
  auto producer = make("p");
  ASSERT_TRUE(consumer && producer);
  Relay relay(consumer->control_address(), /*hold=*/true);  // only to read the producer's NODE: released at once
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  absl::StatusOr<std::unique_ptr<Sender>> s = absl::UnavailableError("not yet");
  std::thread attaching([&] { s = producer->attach(anchor->handle(), relay.address()); });  // waits for the NODE answer
  ASSERT_TRUE(wait_until([&] { return relay.held().size() >= proto::kFrameHeaderBytes + proto::kNodeBody; }));
  const proto::Node honest = node_of(relay.held());
  relay.release();
  attaching.join();
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "t0");
  const int fd = colocated_node(consumer->control_address(), honest.channel_port);
  bool closed = false;
  EXPECT_TRUE(read_until_closed(fd, &closed).empty() && closed) << "a NODE naming a live channel's serve was answered";
  EXPECT_EQ(consumer->stats().refused_channel_taken, 1u);
  EXPECT_EQ(consumer->stats().peers_in, 1u) << "the serve was mirrored twice";
  expect_through(**s, *anchor, "t1");
}

// The same, the stranger's NODE first (it reached the consumer before the
// producer's, so nothing yet says whose the serve is): the consumer's
// mirror presents the stranger's epoch as its channel token, the
// producer's serve refuses it (REFUSE 10), and the stranger's channel
// never comes up: cut at the hello deadline, having mirrored nothing. The
// producer's channel opens, its stream whole.
TEST(Node, AStrangersNodeNamingAnotherNodesServeGetsNoChannel) {
  NodeOptions o = options("c");
  o.hello_timeout_ns = kSecond;
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  auto producer = make("p");
  ASSERT_TRUE(producer);
  Relay relay(consumer->control_address(), /*hold=*/true);
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  absl::StatusOr<std::unique_ptr<Sender>> s = absl::UnavailableError("not yet");
  std::thread attaching([&] { s = producer->attach(anchor->handle(), relay.address()); });  // waits for the NODE answer
  ASSERT_TRUE(wait_until([&] { return relay.held().size() >= proto::kFrameHeaderBytes + proto::kNodeBody; }));
  const proto::Node honest = node_of(relay.held());
  const int fd = colocated_node(consumer->control_address(), honest.channel_port);
  std::byte answer[256];
  ASSERT_GT(read(fd, answer, sizeof(answer)), 0) << "the first NODE naming the serve was not answered";
  relay.release();
  attaching.join();
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(send_all(**s, {"first"}));
  Item it;
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond)) << "the honest stream never opened";
  ASSERT_EQ(it.kind, Item::Kind::kData) << mux::end_reason_name(it.reason);
  EXPECT_EQ(text(it.bytes), "first");
  bool closed = false;
  read_until_closed(fd, &closed);
  EXPECT_TRUE(closed) << "the stranger's channel was not cut";
  EXPECT_EQ(consumer->stats().in.foreign_epoch, 0u) << "the stranger's channel mirrored the producer's serve";
  EXPECT_EQ(consumer->stats().tickets_claimed, 1u);
  expect_through(**s, *anchor, "second");
}

// Keyed nodes MAC every control frame after the keyed exchange (§1.8.2): a
// stream runs through a relay; then an ATTACH injected into the live
// connection (well formed, for a real anchor, its tag made up) is counted,
// answers nothing, registers nothing, and ends the connection — the
// stream it carried ends dropped, once.
TEST(Node, KeyedControlFramesAreMacedAndAnInjectedAttachMovesNothing) {
  net::Psk key;
  key.key.assign(40, 'k');
  NodeOptions co = options("c"), po = options("p");
  co.psk = po.psk = key;
  auto consumer = Node::create(co);
  auto producer = Node::create(po);
  ASSERT_TRUE(consumer.ok() && producer.ok());
  Relay relay((*consumer)->control_address());
  auto anchor = (*consumer)->create_anchor(AnchorKind::kSingleSender);
  auto victim = (*consumer)->create_anchor(AnchorKind::kSingleSender);
  auto s = (*producer)->attach(plain(anchor->handle()), relay.address());  // by ATTACH: one answered
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "sealed");
  const NodeStats before = (*consumer)->stats();
  EXPECT_EQ(before.frames_unmaced, 0u);
  EXPECT_EQ((*producer)->stats().frames_unmaced, 0u);
  EXPECT_EQ(before.attaches_answered, 1u);
  proto::AttachRequest req{victim->id(), 77, proto::kTransportMux};
  std::vector<std::byte> forged(proto::kFrameHeaderBytes + 256);
  std::byte body[256];
  const size_t n = proto::encode_attach_request(req, {body, sizeof(body)});
  proto::encode_frame_header(
      proto::FrameHeader{proto::FrameKind::kAttach, 0, 0, static_cast<uint32_t>(n + net::kFrameTagBytes), 0},
      forged.data());
  std::memcpy(forged.data() + proto::kFrameHeaderBytes, body, n);
  forged.resize(proto::kFrameHeaderBytes + n);
  forged.resize(forged.size() + net::kFrameTagBytes, std::byte{0x42});
  relay.inject(forged);
  Item it;
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kDropped) << "the connection the forged frame was in should have ended";
  EXPECT_EQ(it.reason, mux::EndReason::kChannelLost);
  const NodeStats after = (*consumer)->stats();
  EXPECT_EQ(after.bad_frame_mac, 1u);
  EXPECT_EQ(after.attaches_answered, 1u) << "the forged ATTACH was answered";
  EXPECT_EQ(victim->live_streams(), 0u) << "the forged ATTACH registered a stream";
  EXPECT_FALSE(anchor->recv(&it, 100'000'000)) << "a second end";
}

// Two channels under one epoch (the epoch names a channel's ring and
// session): the second is refused and cut, the first is untouched, and the
// node goes on (it once tried to place a second session of that name, failed,
// and stepped a connection it had closed).
TEST(Node, ASecondChannelUnderALiveChannelsEpochIsRefused) {
  auto consumer = make("c");
  auto producer = make("p");
  ASSERT_TRUE(consumer && producer);
  proto::Node m;
  m.flags = proto::kNodeChannel;
  m.worker_id = 0x51;
  m.channel_epoch = 0x7777;
  m.channel_port = 9;  // nothing serves there: the channel never comes up (cut after hello_timeout)
  std::byte b[proto::kFrameHeaderBytes + proto::kNodeMaxBody];
  const size_t n = proto::encode_node(m, {b, sizeof(b)});
  const int first = raw_connect(consumer->control_address());
  ASSERT_EQ(write(first, b, n), static_cast<ssize_t>(n));
  std::byte answer[256];
  ASSERT_GT(read(first, answer, sizeof(answer)), 0) << "the first channel was not answered";
  const uint64_t refused = consumer->stats().refused;
  const int second = raw_connect(consumer->control_address());
  ASSERT_EQ(write(second, b, n), static_cast<ssize_t>(n));
  bool closed = false;
  EXPECT_TRUE(read_until_closed(second, &closed).empty() && closed) << "the second channel of the epoch was answered";
  EXPECT_EQ(consumer->stats().refused, refused + 1);
  close(first);
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "still here");
}

TEST(Node, StrangersOnTheControlPortAreCountedAndCut) {
  auto consumer = make("c");
  auto producer = make("p");
  const net::Endpoint at = consumer->control_address();
  auto connect_to = [&] { return raw_connect(at); };
  // Junk, a header declaring 64 MiB, and an ATTACH before any NODE.
  const int junk = connect_to();
  const char j[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(write(junk, j, sizeof(j) - 1), static_cast<ssize_t>(sizeof(j) - 1));
  const int big = connect_to();
  std::byte h[16];
  proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kMuxControl, 0, 0, 64u << 20, 0}, h);
  ASSERT_EQ(write(big, h, sizeof(h)), 16);
  const int early = connect_to();
  proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kAttach, 0, 0, 0, 0}, h);
  ASSERT_EQ(write(early, h, sizeof(h)), 16);
  for (int fd : {junk, big, early}) {
    bool closed = false;
    EXPECT_TRUE(read_until_closed(fd, &closed).empty() && closed) << "not cut";
  }
  EXPECT_GE(consumer->stats().refused + consumer->stats().frames_rejected, 3u);
  // A real producer still gets through.
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "ok");
}

// ---- the per-stream TCP path: negotiation picks it when either side has
// the mux off; the same API, one connection per stream.

// raw_connect_from: a stranger's connection from another loopback address
// (the node's per-source caps tell it from the honest 127.0.0.1).
int raw_connect_from(uint32_t from_ip, const net::Endpoint& at) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(from_ip);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(at.port);
  a.sin_addr.s_addr = htonl(at.ip);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;  // refused at once (the kernel's backlog): the node would have cut it anyway
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// stranger_channel: a NODE naming a channel nobody serves (port 1), then
// (anchor != 0) an ATTACH for that anchor; returns the socket.
int stranger_channel(uint32_t from_ip, const net::Endpoint& at, uint64_t worker, uint64_t anchor) {
  const int fd = raw_connect_from(from_ip, at);
  if (fd < 0) return fd;
  proto::Node m;
  m.flags = proto::kNodeChannel;
  m.worker_id = worker;
  m.channel_epoch = worker + 1;
  m.channel_port = 1;
  std::byte b[512];
  size_t n = proto::encode_node(m, {b, sizeof(b)});
  if (anchor != 0) {
    std::byte body[256];
    const size_t len = proto::encode_attach_request(proto::AttachRequest{anchor, 77, proto::kTransportMux | proto::kTransportTcp},
                                                    {body, sizeof(body)});
    proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kAttach, 0, 0, static_cast<uint32_t>(len), 0}, b + n);
    std::memcpy(b + n + proto::kFrameHeaderBytes, body, len);
    n += proto::kFrameHeaderBytes + len;
  }
  EXPECT_EQ(write(fd, b, n), static_cast<ssize_t>(n));
  return fd;
}

// A stranger that attaches to a real anchor (the mux answers ok: its
// stream is registered) and never opens it holds nothing for good: when
// its connection ends the stream ends once, dropped as never_opened, and
// the single-sender anchor takes an honest producer, whose tokens arrive.
TEST(Node, AnAttachAnsweredButNeverClaimedEndsOnceAndFreesItsAnchor) {
  NodeOptions o = options("c");
  o.hello_timeout_ns = 1'000'000'000;  // its channel never comes up: cut after this
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  const int fd = stranger_channel(0x7F000002, consumer->control_address(), 500, anchor->id());
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 200 && anchor->live_streams() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(anchor->live_streams(), 1u) << "the stranger's attach was not registered";
  auto producer = make("p");
  EXPECT_FALSE(producer->attach(plain(anchor->handle()), consumer->control_address()).ok()) << "a single-sender anchor took two";
  // The stranger's channel never comes up: it is cut, its stream ends once.
  Item it;
  ASSERT_TRUE(anchor->recv(&it, 10 * kSecond)) << "the unclaimed stream never ended";
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  EXPECT_EQ(it.reason, mux::EndReason::kNeverOpened) << mux::end_reason_name(it.reason);
  EXPECT_EQ(it.session, 77u);
  EXPECT_FALSE(anchor->recv(&it, 100'000'000)) << "a second end";
  EXPECT_EQ(anchor->live_streams(), 0u);
  close(fd);
  // Free again for an ATTACH (the stranger's, answered ok, spent the
  // anchor's ticket: PROTOCOL.md 5.2.1).
  auto s = producer->attach(plain(anchor->handle()), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "honest");
  EXPECT_GE(consumer->stats().in.never_opened, 1u);
}

// One address opening connections that say nothing, and naming channels
// nobody serves, takes only its own share: past its caps it is refused
// (counted by source), and an honest producer from another address gets
// a channel and streams while the stranger still holds everything it was given.
TEST(Node, OneSourceCannotTakeTheNodesConnectionsOrChannels) {
  NodeOptions o = options("c");
  o.max_pending_per_source = 4;
  o.max_channels_per_source = 2;
  o.hello_timeout_ns = 20 * kSecond;  // the stranger's places outlive the test: only the caps help
  auto made = Node::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  auto consumer = std::move(*made);
  std::vector<int> held;
  for (int i = 0; i < 12; ++i) held.push_back(raw_connect_from(0x7F000002, consumer->control_address()));  // silent
  for (uint64_t i = 0; i < 6; ++i) held.push_back(stranger_channel(0x7F000003, consumer->control_address(), 900 + i, 0));
  for (int i = 0; i < 200 && consumer->stats().refused_by_source < 12; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const NodeStats st = consumer->stats();
  // 127.0.0.2: 4 held, 8 refused; 127.0.0.3: its NODEs settle nothing while
  // their channels are down: 4 pending at most, and 2 channels among them.
  EXPECT_GE(st.refused_by_source, 8u + 2u) << "a source took more than its share";
  EXPECT_LE(st.peers_in, 2u) << "one source took more channels than its cap";
  auto producer = make("p");
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << "an honest producer was kept out: " << s.status();
  expect_through(**s, *anchor, "through");
  for (int fd : held) {
    if (fd >= 0) close(fd);
  }
}

// Datagrams at a channel's UDP port from anyone but the channel's source
// move nothing: counted by reason, and the stream arrives whole.
TEST(Node, ChannelDatagramsFromStrangersAreCountedByReasonAndMoveNothing) {
  auto consumer = make("c");
  auto producer = make("p");
  ASSERT_TRUE(consumer && producer);
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  expect_through(**s, *anchor, "before");
  // Every UDP socket of this process on loopback (both nodes' data planes):
  // junk and a forged-looking DATA header from 127.0.0.2 to each.
  const int out = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(0x7F000002);
  ASSERT_EQ(bind(out, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
  int targets = 0;
  for (int fd = 3; fd < 4096; ++fd) {
    int type = 0;
    socklen_t tl = sizeof(type);
    sockaddr_in a{};
    socklen_t al = sizeof(a);
    if (fd == out || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_DGRAM) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &al) != 0 || a.sin_family != AF_INET || a.sin_port == 0) continue;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::byte data[64] = {};
    proto::encode_frame_header(proto::FrameHeader{proto::FrameKind::kData, 0, 1, 8, 1000}, data);
    for (int k = 0; k < 20; ++k) {
      sendto(out, data, sizeof(data), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
      sendto(out, "junk", 4, 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    }
    ++targets;
  }
  close(out);
  ASSERT_GE(targets, 2) << "no data-plane sockets found";
  for (int i = 0; i < 100 && consumer->stats().channel_wrong_sender == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const NodeStats st = consumer->stats();
  EXPECT_GT(st.channel_wrong_sender, 0u) << "a stranger's datagrams were not refused as such";
  expect_through(**s, *anchor, "after");
  EXPECT_EQ(consumer->stats().channel_failures, 0u);
}

// poll() returns exactly what is ready, across many anchors, each
// stream's items in order: three anchors of a thousand have items.
TEST(Node, PollReturnsOnlyTheReadyAnchorsItemsInOrder) {
  auto consumer = make("c");
  auto producer = make("p", mux::FlushPolicy::manual());
  ASSERT_TRUE(consumer && producer);
  std::vector<std::unique_ptr<Anchor>> anchors;
  std::vector<std::unique_ptr<Sender>> senders;
  ASSERT_NO_FATAL_FAILURE(open_streams(*consumer, *producer, 1000, &anchors, &senders));
  std::vector<Polled> items;
  std::vector<std::byte> buf;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the OpenSlots are in
  consumer->poll(&items, &buf, 100000);
  ASSERT_TRUE(items.empty()) << "items before anything was sent";
  const int ready[] = {3, 500, 999};
  for (int i : ready) {
    for (int k = 0; k < 3; ++k) ASSERT_EQ(senders[i]->send(bytes(absl::StrCat(i, ":", k))), mux::SendStatus::kSent);
  }
  producer->flush_batch();
  std::map<uint64_t, std::vector<std::string>> got;
  for (int tries = 0; tries < 100 && items.size() < 9; ++tries) {
    ASSERT_TRUE(consumer->wait(5 * kSecond)) << "the descriptor never became readable";
    consumer->poll(&items, &buf, 100000);
  }
  for (const Polled& p : items) {
    EXPECT_EQ(p.kind, Item::Kind::kData);
    got[p.anchor].push_back(std::string(reinterpret_cast<const char*>(buf.data() + p.offset), p.len));
  }
  ASSERT_EQ(items.size(), 9u);
  for (int i : ready) {
    EXPECT_EQ(got[anchors[i]->id()], (std::vector<std::string>{absl::StrCat(i, ":0"), absl::StrCat(i, ":1"), absl::StrCat(i, ":2")}));
  }
  // Nothing left: the descriptor is not readable — or, when an idle slot's
  // heartbeat batch came meanwhile (a channel record with no item: node.h),
  // readable once with poll() returning nothing, then quiet.
  bool quiet = false;
  for (int tries = 0; tries < 3 && !quiet; ++tries) {
    quiet = !consumer->wait(200'000'000);
    if (!quiet) {
      items.clear();
      EXPECT_EQ(consumer->poll(&items, &buf, 100000), 0u) << "an item after all nine were taken";
    }
  }
  EXPECT_TRUE(quiet) << "readable with nothing left, again and again";
}

// A poll() that takes exactly what was ready leaves the descriptor armed:
// the next token makes it readable (the signal that woke the reader had
// disarmed it, and a full take must arm it again).
TEST(Node, APollThatTakesExactlyMaxLeavesTheDescriptorArmed) {
  auto consumer = make("c");
  auto producer = make("p", mux::FlushPolicy::manual());
  ASSERT_TRUE(consumer && producer);
  auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s = producer->attach(anchor->handle(), consumer->control_address());
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<Polled> items;
  std::vector<std::byte> buf;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the OpenSlot is in
  consumer->poll(&items, &buf, 100);
  for (int round = 0; round < 3; ++round) {
    items.clear();
    for (int k = 0; k < 3; ++k) ASSERT_EQ((*s)->send(bytes(absl::StrCat(round, ":", k))), mux::SendStatus::kSent);
    producer->flush_batch();
    ASSERT_TRUE(consumer->wait(5 * kSecond)) << "round " << round << ": not readable";
    size_t got = 0;
    for (int tries = 0; tries < 50 && got < 3; ++tries) {
      got += consumer->poll(&items, &buf, 3 - got);  // exactly what is there, no more
      if (got < 3) consumer->wait(100'000'000);
    }
    ASSERT_EQ(got, 3u) << "round " << round;
  }
}

TEST(PerStreamPath, BothSidesWithoutTheMux) {
  auto consumer = make_with("c", false);
  auto producer = make_with("p", false);
  stream_all(*consumer, *producer, 10, 300, true);  // 300 tokens past a window of 8: TCP's flow control
  EXPECT_EQ(consumer->stats().tcp_streams_in, 10u);
  EXPECT_EQ(consumer->stats().tcp_records_in, 3000u);
  EXPECT_EQ(consumer->stats().in.records, 0u);  // nothing went by a channel
}

TEST(PerStreamPath, AConsumerWithoutTheMuxMakesAMuxProducerFallBack) {
  auto consumer = make_with("c", false);
  auto producer = make_with("p", true);
  stream_all(*consumer, *producer, 3, 50, true);
}

TEST(PerStreamPath, AProducerWithoutTheMuxAttachesToAMuxConsumer) {
  auto consumer = make_with("c", true);
  auto producer = make_with("p", false);
  stream_all(*consumer, *producer, 3, 50, true);
}

TEST(PerStreamPath, CancelAndAbandonedSenders) {
  auto consumer = make_with("c", false);
  auto producer = make_with("p", false);
  auto a1 = consumer->create_anchor(AnchorKind::kSingleSender);
  auto a2 = consumer->create_anchor(AnchorKind::kSingleSender);
  auto s1 = producer->attach(a1->handle(), consumer->control_address());
  auto s2 = producer->attach(a2->handle(), consumer->control_address());
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_FALSE(producer->attach(a1->handle(), consumer->control_address()).ok()) << "a second sender on a single-sender anchor";
  ASSERT_TRUE(send_all(**s1, {"one"}));
  Item it;
  ASSERT_TRUE(a1->recv(&it, 10 * kSecond));
  EXPECT_EQ(text(it.bytes), "one");
  a1->cancel();  // reaches the producer as a closed sender
  EXPECT_TRUE((*s1)->wait_closed(3600 * kSecond)) << "the per-stream cancel did not wake the producer's wait";
  s2->reset();  // gone without finish: the consumer sees the stream dropped
  ASSERT_TRUE(a2->recv(&it, 10 * kSecond));
  EXPECT_EQ(it.kind, Item::Kind::kDropped);
  EXPECT_FALSE(a2->recv(&it, 100'000'000));
}

}  // namespace
}  // namespace ringfire::node

namespace ringfire::node {
namespace {

// A first token sent the moment attach returns reaches a reader waiting on
// the descriptor: the channel's first batches are committed into the
// ingress ring before this node has it open, and opening it wakes a reader
// to apply them (no later commit, heartbeat or position report does here:
// liveness every hour). And none of them went before the consumer's mirror
// took the channel by UDP (it would have come by TCP catch-up, and the
// token behind it waited for a NAK).
TEST(Node, TheFirstTokenSentAsAttachReturnsWakesAReaderOnTheDescriptor) {
  auto consumer = make_quiet("c");
  auto producer = make_quiet("p", mux::FlushPolicy::manual());
  ASSERT_TRUE(consumer && producer);
  for (int round = 0; round < 3; ++round) {  // each on a new channel: its ring opened anew
    auto anchor = consumer->create_anchor(AnchorKind::kSingleSender);
    auto s = producer->attach(anchor->handle(), consumer->control_address());
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ((*s)->send(bytes("first")), mux::SendStatus::kSent);
    producer->flush_batch();
    std::vector<Polled> items;
    std::vector<std::byte> b;
    const uint64_t deadline = monotonic_ns() + 10 * kSecond;
    while (items.empty() && monotonic_ns() < deadline) {
      consumer->wait(deadline - monotonic_ns());
      consumer->poll(&items, &b, 100);
    }
    ASSERT_EQ(items.size(), 1u) << "round " << round << ": no reader was woken for the first token";
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data() + items[0].offset), items[0].len), "first");
    (*s)->finish();
    producer->flush_batch();
    items.clear();
    while (items.empty() && monotonic_ns() < deadline) {
      consumer->wait(deadline - monotonic_ns());
      consumer->poll(&items, &b, 100);
    }
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(items[0].kind, Item::Kind::kFinished);
    // Nothing went before the peer's mirror took the channel by UDP: no
    // batch came by the channel's TCP catch-up, none waited for a NAK.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the conductor refreshes the mirror's counters
    const NodeStats st = consumer->stats();
    EXPECT_EQ(st.channel_tcp_records, 0u) << "round " << round;
    EXPECT_EQ(st.channel_naks, 0u) << "round " << round;
    // A new channel for the next round: the producer node goes and comes back.
    producer.reset();
    producer = make_quiet("p", mux::FlushPolicy::manual());
    ASSERT_TRUE(producer);
  }
}

}  // namespace
}  // namespace ringfire::node
