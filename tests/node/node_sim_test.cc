// node_sim_test.cc — a seeded simulation of the mux at the node layer: two
// Nodes on loopback (their own engines, kernel backend), driven by one
// random script per seed — anchors made (single- and multi-sender),
// attached by ticket, by ATTACH and by attach_many; records sent alone and
// by send_many, flushed by policy or by hand; senders finished, abandoned
// and cancelled; the producer's node destroyed and made again (a new
// channel epoch each time); and, on half the seeds, the consumer's channels
// losing, duplicating and reordering datagrams (repaired by NAK).
//
// Checked on every item the consumer polls, against a model of what each
// sender was told kSent: each stream's records arrive whole, in order,
// with no gap and no duplicate; each stream ends at most once, Finished
// only after every record it was sent, Dropped only for a cause the script
// made (an abandoned sender, a lost producer). At the end every stream of
// an anchor not cancelled has ended exactly once, every cancelled one's
// sender is closed, and the gauges are back to zero.
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "node/node.h"

namespace ringfire::node {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

// A record of stream `s`, its `n`th: the prefix names it, the filler (its
// length random) is a function of both, so a record that arrives on the
// wrong stream, out of place or torn differs from the one expected.
std::string record(size_t s, size_t n, size_t filler) {
  std::string r = absl::StrCat(s, ":", n, ":");
  for (size_t i = 0; i < filler; ++i) r.push_back(static_cast<char>('a' + (s * 7 + n * 13 + i) % 26));
  return r;
}

proto::ConstBytes bytes(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

struct StreamModel {
  std::unique_ptr<Sender> sender;
  size_t anchor = 0;
  uint64_t session = 0;
  std::vector<std::string> sent;  // the records its send() answered kSent, in order
  size_t got = 0;                 // of them, delivered so far
  bool finished = false;          // finish() returned true
  bool abandoned = false;         // the sender went without finish()
  bool lost = false;              // its producer's node was destroyed
  bool drained = false;           // ... after drain(): everything it was sent had been applied by the consumer
  bool closed_seen = false;       // a send answered kClosed
  bool ticketed = false;          // opened on its handle's ticket: no ATTACH, the OpenSlot goes with its first records
  int ends = 0;
  Item::Kind end = Item::Kind::kData;
  mux::EndReason reason = mux::EndReason::kNone;
  bool live() const { return sender && !finished && !closed_seen; }
};

struct AnchorModel {
  std::unique_ptr<Anchor> anchor;
  bool multi = false;
  bool cancelled = false;
  bool ticket_used = false;
  std::vector<size_t> streams;
};

NodeOptions options(const std::string& name, uint32_t seed) {
  NodeOptions o;
  o.instance_id = absl::StrCat(name, "-", getpid(), "-", seed);
  o.control = net::Endpoint{INADDR_LOOPBACK, 0};
  o.mux.enabled = true;
  o.mux.initial_credit = 8;  // credit runs out often: kFull, and its return, are part of the script
  o.channel_records = 1024;
  o.channel_arena_bytes = 1u << 20;
  return o;
}

class Sim {
 public:
  explicit Sim(uint32_t seed) : seed_(seed), rng_(seed) {}

  void run(int steps) {
    NodeOptions co = options("sim-c", seed_);
    if (seed_ % 2 == 0) {
      faults_ = true;
      co.channel_rx_faults.drop_ppm = 20'000;
      co.channel_rx_faults.duplicate_ppm = 10'000;
      co.channel_rx_faults.reorder_ppm = 10'000;
      co.channel_rx_faults.seed = seed_;
    }
    auto c = Node::create(co);
    ASSERT_TRUE(c.ok()) << c.status();
    consumer_ = std::move(*c);
    ASSERT_NO_FATAL_FAILURE(new_producer());
    for (int step = 0; step < steps; ++step) {
      const uint32_t r = pick(1000);
      if (r < 120) {
        ASSERT_NO_FATAL_FAILURE(open());
      } else if (r < 480) {
        ASSERT_NO_FATAL_FAILURE(send_one());
      } else if (r < 560) {
        ASSERT_NO_FATAL_FAILURE(send_step());
      } else if (r < 600) {
        producer_->flush_batch();
      } else if (r < 640) {
        ASSERT_NO_FATAL_FAILURE(finish_one());
      } else if (r < 660) {
        abandon_one();
      } else if (r < 680) {
        cancel_one();
      } else if (r < 690) {
        ASSERT_NO_FATAL_FAILURE(restart_producer());
      } else {
        ASSERT_NO_FATAL_FAILURE(poll(1 + pick(64)));
      }
    }
    ASSERT_NO_FATAL_FAILURE(finish_all());
  }

  uint64_t delivered() const { return delivered_; }
  uint64_t epochs() const { return producers_made_; }
  uint64_t naks() const { return naks_; }
  uint64_t never_claimed() const { return never_claimed_; }
  uint64_t finished() const { return finished_; }
  uint64_t graceful_restarts() const { return graceful_restarts_; }
  bool faulty() const { return faults_; }

 private:
  uint32_t pick(uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_); }
  std::string where() const { return absl::StrCat("seed ", seed_, " producer ", producers_made_); }

  void new_producer() {
    NodeOptions po = options(absl::StrCat("sim-p", producers_made_), seed_);
    // Manual on odd producers: nothing moves until flush_batch().
    manual_ = (seed_ + producers_made_) % 2 == 1;
    if (manual_) po.mux.flush = mux::FlushPolicy::manual();
    auto p = Node::create(po);
    ASSERT_TRUE(p.ok()) << p.status();
    producer_ = std::move(*p);
    ++producers_made_;
    mine_.clear();
  }

  // open: a new anchor with one stream (by its ticket, by ATTACH, or several
  // anchors by attach_many), or one more sender on a multi-sender anchor.
  void open() {
    const uint32_t how = pick(10);
    if (how < 2 && !anchors_.empty()) {
      const size_t a = pick(anchors_.size());
      if (!anchors_[a].multi || anchors_[a].cancelled) return;
      mux::AnchorHandle h = anchors_[a].anchor->handle();
      h.ticket = {};  // its ticket went with the first producer
      auto s = producer_->attach(h, consumer_->control_address());
      ASSERT_TRUE(s.ok()) << where() << ": " << s.status();
      add_stream(a, std::move(*s), false);
      return;
    }
    const size_t n = how < 4 ? 1 + pick(6) : 1;
    std::vector<mux::AnchorHandle> handles;
    std::vector<size_t> which;
    for (size_t i = 0; i < n; ++i) {
      AnchorModel m;
      m.multi = pick(4) == 0;
      m.anchor = consumer_->create_anchor(m.multi ? AnchorKind::kMultiSender : AnchorKind::kSingleSender);
      ASSERT_TRUE(m.anchor);
      mux::AnchorHandle h = m.anchor->handle();
      if (pick(3) == 0) h.ticket = {};  // by ATTACH, answered before attach returns
      handles.push_back(h);
      which.push_back(anchors_.size());
      anchors_.push_back(std::move(m));
    }
    if (n == 1) {
      auto s = producer_->attach(handles[0], consumer_->control_address());
      ASSERT_TRUE(s.ok()) << where() << ": " << s.status();
      add_stream(which[0], std::move(*s), handles[0].ticket.session != 0);
      return;
    }
    auto got = producer_->attach_many(handles, consumer_->control_address());
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(got[i].ok()) << where() << ": " << got[i].status();
      add_stream(which[i], std::move(*got[i]), handles[i].ticket.session != 0);
    }
  }

  void add_stream(size_t a, std::unique_ptr<Sender> s, bool ticketed) {
    ASSERT_FALSE(s->per_stream()) << where() << ": a mux consumer's stream took the per-stream path";
    StreamModel m;
    m.anchor = a;
    m.session = s->session();
    m.ticketed = ticketed;
    m.sender = std::move(s);
    const size_t idx = streams_.size();
    ASSERT_TRUE(by_key_.emplace(std::make_pair(anchors_[a].anchor->id(), m.session), idx).second)
        << where() << ": two streams of one anchor share session " << m.session;
    streams_.push_back(std::move(m));
    anchors_[a].streams.push_back(idx);
    mine_.push_back(idx);
  }

  // a live stream of the current producer, or -1.
  ptrdiff_t live_stream() {
    std::vector<size_t> live;
    for (size_t i : mine_) {
      if (streams_[i].live()) live.push_back(i);
    }
    return live.empty() ? -1 : static_cast<ptrdiff_t>(live[pick(live.size())]);
  }

  std::string next_record(size_t s) {
    // Mostly a token's size; now and then a record past a datagram, which
    // the channel carries fenced, over its TCP connection.
    const uint32_t r = pick(100);
    const size_t filler = r < 85 ? pick(48) : r < 97 ? 100 + pick(900) : 1500 + pick(2500);
    return record(s, streams_[s].sent.size(), filler);
  }

  void answered(size_t s, const std::string& rec, mux::SendStatus st) {
    StreamModel& m = streams_[s];
    switch (st) {
      case mux::SendStatus::kSent:
        m.sent.push_back(rec);
        break;
      case mux::SendStatus::kFull:
        break;  // the slot's byte budget: credit comes back as the consumer reads
      case mux::SendStatus::kClosed:
        m.closed_seen = true;
        ASSERT_TRUE(anchors_[m.anchor].cancelled) << where() << ": stream " << s << " closed, not cancelled, not lost";
        break;
      default:
        FAIL() << where() << ": stream " << s << " send answered " << static_cast<int>(st);
    }
  }

  void send_one() {
    const ptrdiff_t s = live_stream();
    if (s < 0) return;
    const std::string rec = next_record(static_cast<size_t>(s));
    ASSERT_NO_FATAL_FAILURE(answered(static_cast<size_t>(s), rec, streams_[s].sender->send(bytes(rec))));
  }

  // send_step: a decode step, one record on each of several live streams, by send_many.
  void send_step() {
    std::vector<size_t> chosen;
    for (size_t i : mine_) {
      if (streams_[i].live() && pick(2) == 0) chosen.push_back(i);
    }
    std::vector<std::string> recs;
    std::vector<SendOne> sends;
    for (size_t i : chosen) recs.push_back(next_record(i));
    for (size_t k = 0; k < chosen.size(); ++k) sends.push_back(SendOne{streams_[chosen[k]].sender.get(), bytes(recs[k])});
    producer_->send_many(sends);
    for (size_t k = 0; k < chosen.size(); ++k) ASSERT_NO_FATAL_FAILURE(answered(chosen[k], recs[k], sends[k].status));
    if (manual_ && pick(2) == 0) producer_->flush_batch();
  }

  void finish_one() {
    const ptrdiff_t s = live_stream();
    if (s < 0) return;
    StreamModel& m = streams_[s];
    if (m.sender->finish()) {
      m.finished = true;
    } else {
      ASSERT_TRUE(anchors_[m.anchor].cancelled) << where() << ": finish() refused on stream " << s;
      m.closed_seen = true;
    }
    if (manual_) producer_->flush_batch();
  }

  void abandon_one() {
    const ptrdiff_t s = live_stream();
    if (s < 0) return;
    streams_[s].abandoned = true;
    streams_[s].sender.reset();  // without finish(): the consumer reads it dropped
  }

  void cancel_one() {
    if (anchors_.empty()) return;
    AnchorModel& a = anchors_[pick(anchors_.size())];
    if (a.cancelled) return;
    a.cancelled = true;
    a.anchor->cancel();
  }

  // restart_producer: the producer's node goes — at once (what is staged may
  // never leave), or, every other time, once drained (everything it was
  // sent applied at the consumer: then each stream's records all arrive,
  // its OpenSlot with them, and nothing may vanish). Its streams end at
  // the consumer. A new node, a new epoch.
  void restart_producer() {
    const bool graceful = producers_made_ % 2 == 0;
    if (graceful) {
      producer_->flush_batch();
      const uint64_t deadline = monotonic() + 30 * kSecond;
      while (!producer_->drain(10'000'000)) {  // read meanwhile: what waits for credit needs it
        ASSERT_LT(monotonic(), deadline) << where() << ": the producer did not drain before its restart";
        ASSERT_NO_FATAL_FAILURE(poll(1024));
      }
      ++graceful_restarts_;
    }
    for (size_t i : mine_) {
      streams_[i].lost = true;
      streams_[i].drained = graceful;
    }
    producer_.reset();
    for (size_t i : mine_) {
      StreamModel& m = streams_[i];
      if (!m.sender) continue;
      EXPECT_TRUE(m.sender->closed()) << where() << ": stream " << i << " open after its node went";
      EXPECT_EQ(m.sender->send(bytes("late")), mux::SendStatus::kClosed) << where();
      m.sender.reset();
    }
    ASSERT_NO_FATAL_FAILURE(new_producer());
  }

  void poll(size_t max) {
    items_.clear();
    buf_.clear();
    consumer_->poll(&items_, &buf_, max);
    for (const Polled& p : items_) ASSERT_NO_FATAL_FAILURE(check(p));
  }

  void check(const Polled& p) {
    const auto it = by_key_.find({p.anchor, p.session});
    ASSERT_NE(it, by_key_.end()) << where() << ": an item of a stream nobody opened (anchor " << p.anchor << ", session "
                                 << p.session << ")";
    const size_t s = it->second;
    StreamModel& m = streams_[s];
    ASSERT_EQ(m.ends, 0) << where() << ": stream " << s << " has an item after its end";
    if (p.kind == Item::Kind::kData) {
      ASSERT_LT(m.got, m.sent.size()) << where() << ": stream " << s << " delivered more than it was sent";
      const std::string got(reinterpret_cast<const char*>(buf_.data() + p.offset), p.len);
      ASSERT_EQ(got, m.sent[m.got]) << where() << ": stream " << s << " record " << m.got;
      ++m.got;
      ++delivered_;
      return;
    }
    ++m.ends;
    m.end = p.kind;
    m.reason = p.reason;
    EXPECT_EQ(p.frames, m.got) << where() << ": stream " << s << "'s end counts other frames than were read";
    if (p.kind == Item::Kind::kFinished) {
      ASSERT_TRUE(m.finished) << where() << ": stream " << s << " finished, never told to";
      ASSERT_EQ(m.got, m.sent.size()) << where() << ": stream " << s << " finished short";
      ++finished_;
      return;
    }
    // Drained before its node went: everything it was sent had arrived.
    if (m.drained && !m.abandoned && !anchors_[m.anchor].cancelled) {
      ASSERT_EQ(m.got, m.sent.size()) << where() << ": stream " << s << " of a drained node ended short";
      ASSERT_FALSE(m.finished) << where() << ": stream " << s << " finished and drained, yet dropped";
    }
    ASSERT_TRUE(m.abandoned || m.lost) << where() << ": stream " << s << " dropped ("
                                       << mux::end_reason_name(p.reason) << ") with no cause";
    if (m.abandoned && !m.lost) {
      EXPECT_EQ(p.reason, mux::EndReason::kProducerGone) << where() << ": stream " << s;
    } else if (!m.abandoned) {
      // Its channel lost; or, attached by ATTACH with nothing read, never
      // opened (its OpenSlot staged when the node went at once: a ticket's
      // OpenSlot goes with its records, and a drained node sent it).
      const bool never_opened =
          p.reason == mux::EndReason::kNeverOpened && m.got == 0 && !m.ticketed && !m.drained;
      EXPECT_TRUE(p.reason == mux::EndReason::kChannelLost || p.reason == mux::EndReason::kProducerGone || never_opened)
          << where() << ": stream " << s << " of a lost node dropped as " << mux::end_reason_name(p.reason);
    }
  }

  // owed: a stream whose end the consumer must still read. Not one the
  // consumer never learned of: opened on a ticket, its producer's node lost
  // before its OpenSlot left (staged with its first records), nothing read —
  // the anchor holds no stream (a single-sender anchor's live_streams() is
  // that stream's), and takes the next attach.
  bool owed(const StreamModel& m) const {
    if (m.ends != 0 || anchors_[m.anchor].cancelled) return false;
    const bool never_claimed =
        m.ticketed && m.lost && !m.drained && m.got == 0 && anchors_[m.anchor].anchor->live_streams() == 0;
    return !never_claimed;
  }

  void finish_all() {
    for (size_t i : mine_) {
      StreamModel& m = streams_[i];
      if (!m.live()) continue;
      if (m.sender->finish()) {
        m.finished = true;
      } else {
        ASSERT_TRUE(anchors_[m.anchor].cancelled) << where() << ": finish() refused on stream " << i;
      }
    }
    producer_->flush_batch();
    // Drained while the consumer reads: what waits for credit needs it to.
    const uint64_t deadline = monotonic() + 30 * kSecond;
    while (!producer_->drain(10'000'000)) {
      ASSERT_LT(monotonic(), deadline) << where() << ": the producer did not drain";
      ASSERT_NO_FATAL_FAILURE(poll(1024));
    }
    for (;;) {
      size_t waiting = 0;
      for (const StreamModel& m : streams_) waiting += owed(m) ? 1 : 0;
      if (waiting == 0) break;
      if (monotonic() >= deadline) {
        for (size_t i = 0; i < streams_.size(); ++i) {
          const StreamModel& m = streams_[i];
          if (!owed(m)) continue;
          ADD_FAILURE() << where() << ": stream " << i << " never ended: anchor " << m.anchor
                        << (anchors_[m.anchor].multi ? " (multi)" : "") << ", sent " << m.sent.size() << ", got " << m.got
                        << (m.finished ? ", finished" : "") << (m.abandoned ? ", abandoned" : "")
                        << (m.lost ? ", lost" : "") << (m.closed_seen ? ", closed" : "");
        }
        FAIL() << where() << ": " << waiting << " streams never ended";
      }
      consumer_->wait(100'000'000);
      ASSERT_NO_FATAL_FAILURE(poll(1024));
    }
    for (size_t i = 0; i < streams_.size(); ++i) {
      const StreamModel& m = streams_[i];
      if (anchors_[m.anchor].cancelled) {
        if (m.sender && !m.lost) {
          EXPECT_TRUE(m.sender->wait_closed(10 * kSecond)) << where() << ": cancelled stream " << i << " never closed";
        }
        continue;
      }
      if (m.ends == 0) {
        ++never_claimed_;  // not owed (the loop above): its consumer never learned of it
        continue;
      }
      if (m.finished && (!m.lost || m.drained)) {
        EXPECT_EQ(m.end, Item::Kind::kFinished) << where() << ": stream " << i << " ("
                                                << mux::end_reason_name(m.reason) << ")";
      }
    }
    const NodeStats cs = consumer_->stats();
    EXPECT_EQ(cs.in.protocol_errors, 0u) << where();
    EXPECT_EQ(cs.in.generation_mismatch, 0u) << where();
    EXPECT_EQ(cs.in.reader_stall, 0u) << where();
    EXPECT_EQ(cs.in.batch_gaps, 0u) << where();
    EXPECT_EQ(cs.in.malformed, 0u) << where();
    EXPECT_EQ(cs.channel_failures, 0u) << where() << ": a channel lost a record";
    naks_ = cs.channel_naks;
    // Everything let go: the gauges return to zero.
    for (StreamModel& m : streams_) m.sender.reset();
    anchors_.clear();
    NodeStats ps;
    for (int i = 0; i < 1000; ++i) {
      ps = producer_->stats();
      const NodeStats now = consumer_->stats();
      if (ps.live_slots + ps.outstanding_bytes + ps.withheld_bytes + now.live_streams + now.buffered_bytes + now.anchors == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const NodeStats cz = consumer_->stats();
    EXPECT_EQ(ps.live_slots, 0u) << where();
    EXPECT_EQ(ps.outstanding_bytes, 0u) << where();
    EXPECT_EQ(ps.withheld_bytes, 0u) << where();
    EXPECT_EQ(cz.live_streams, 0u) << where();
    EXPECT_EQ(cz.buffered_bytes, 0u) << where();
    EXPECT_EQ(cz.anchors, 0u) << where();
  }

  static uint64_t monotonic() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<uint64_t>(t.tv_sec) * kSecond + static_cast<uint64_t>(t.tv_nsec);
  }

  const uint32_t seed_;
  std::mt19937 rng_;
  bool faults_ = false;
  bool manual_ = false;
  std::unique_ptr<Node> consumer_, producer_;
  uint64_t producers_made_ = 0;
  std::vector<AnchorModel> anchors_;
  std::vector<StreamModel> streams_;
  std::map<std::pair<uint64_t, uint64_t>, size_t> by_key_;  // (anchor id, session) -> stream
  std::vector<size_t> mine_;                                // the current producer's streams
  std::vector<Polled> items_;
  std::vector<std::byte> buf_;
  uint64_t delivered_ = 0;
  uint64_t naks_ = 0;
  uint64_t never_claimed_ = 0;
  uint64_t finished_ = 0;
  uint64_t graceful_restarts_ = 0;
};

// RINGFIRE_SIM_SEED=N runs seed N alone (a failure names its seed; its
// script depends on timing through what sends answer, so a rerun is close,
// not identical).
TEST(NodeSim, ASeededScriptKeepsEveryStreamWholeInOrderAndEndedOnce) {
  uint64_t delivered = 0, epochs = 0, naks = 0, never_claimed = 0, finished = 0, graceful = 0;
  uint32_t first = 1, last = 8;
  if (const char* one = std::getenv("RINGFIRE_SIM_SEED")) first = last = static_cast<uint32_t>(std::atoi(one));
  for (uint32_t seed = first; seed <= last; ++seed) {
    Sim sim(seed);
    ASSERT_NO_FATAL_FAILURE(sim.run(1500));
    EXPECT_GT(sim.delivered(), 200u) << "seed " << seed << ": the script moved almost nothing";
    EXPECT_GT(sim.finished(), 5u) << "seed " << seed << ": almost no stream finished";
    if (sim.faulty()) {
      EXPECT_GT(sim.naks(), 0u) << "seed " << seed << ": its lossy channels asked for no repair";
    }
    delivered += sim.delivered();
    epochs += sim.epochs();
    naks += sim.naks();
    never_claimed += sim.never_claimed();
    finished += sim.finished();
    graceful += sim.graceful_restarts();
  }
  if (first != last) {
    EXPECT_GT(epochs, 8u + 8u) << "too few producer restarts to test a new epoch";
    EXPECT_GT(graceful, 8u) << "too few drained restarts to hold lost streams to everything they were sent";
  }
  std::printf("node sim: %llu records delivered, %llu streams finished, %llu producer nodes (%llu drained first), "
              "%llu NAKs, %llu ticketed streams of abruptly lost nodes never claimed\n",
              static_cast<unsigned long long>(delivered), static_cast<unsigned long long>(finished),
              static_cast<unsigned long long>(epochs), static_cast<unsigned long long>(graceful),
              static_cast<unsigned long long>(naks), static_cast<unsigned long long>(never_claimed));
}

}  // namespace
}  // namespace ringfire::node
