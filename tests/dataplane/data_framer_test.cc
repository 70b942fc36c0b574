// data_framer_test.cc — DATA frames packed from ring records, the pacing
// rule, the SPSC queue, and the fault injector's determinism.
#include "proto/data_framer.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "dataplane/fault_injector.h"
#include "dataplane/pacer.h"
#include "dataplane/spsc_queue.h"
#include "gtest/gtest.h"

namespace ringfire::dataplane {
namespace {

TEST(DataFramer, PacksConsecutiveFixedRecordsUpToTheLimit) {
  std::vector<std::byte> buf(16 + 3 * 8 + 5);  // room for 3 records of 8 bytes
  proto::DataFramer f(8, 9);
  f.begin(buf.data(), buf.size());
  std::byte rec[8] = {};
  EXPECT_TRUE(f.add(100, rec, 8));
  EXPECT_TRUE(f.add(101, rec, 8));
  EXPECT_FALSE(f.add(103, rec, 8));  // a hole ends the frame
  EXPECT_TRUE(f.add(102, rec, 8));
  EXPECT_FALSE(f.add(103, rec, 8));  // full
  EXPECT_FALSE(f.add(103, rec, 7));  // and a wrong size is never accepted
  ASSERT_EQ(f.finish(), 16u + 24u);
  proto::Frame fr;
  ASSERT_EQ(proto::decode_frame(std::span(buf).first(40), 1 << 16, &fr), proto::DecodeError::kOk);
  EXPECT_EQ(fr.header.seq, 100u);
  EXPECT_EQ(fr.header.count, 3);
  EXPECT_EQ(fr.header.flags, 9);
  EXPECT_EQ(proto::check_fixed_data(fr.header, 8), proto::DecodeError::kOk);
}

TEST(DataFramer, PacksBlobRecordsLengthPrefixed) {
  std::vector<std::byte> buf(64);
  proto::DataFramer f(0, 1);
  f.begin(buf.data(), buf.size());
  const std::byte a[3] = {std::byte{'a'}, std::byte{'b'}, std::byte{'c'}};
  EXPECT_TRUE(f.add(5, a, 3));
  EXPECT_TRUE(f.add(6, a, 0));
  EXPECT_FALSE(f.fits(64));
  const size_t n = f.finish();
  proto::Frame fr;
  ASSERT_EQ(proto::decode_frame(std::span(buf).first(n), 1 << 16, &fr), proto::DecodeError::kOk);
  ASSERT_EQ(proto::BlobRecords::check(fr, 100), proto::DecodeError::kOk);
  proto::BlobRecords recs(fr.body);
  EXPECT_EQ(recs.next().size(), 3u);
  EXPECT_EQ(recs.next().size(), 0u);
}

// PacedStream: a serve's framing and pacing of one stream, in fake time —
// records arrive at given times; each step takes what has arrived (a
// frame of 22 leaves when full), then sends a partial frame if the pacer
// says so. Reports datagrams and, per record, how long it waited.
struct PacedStream {
  explicit PacedStream(uint64_t interval_ns) : pacer(interval_ns) {}
  Pacer pacer;
  uint64_t datagrams = 0;
  std::vector<uint64_t> open;  // arrival times of the open frame's records
  std::vector<uint64_t> waits;
  void flush(uint64_t now) {
    if (open.empty()) return;
    for (uint64_t t : open) waits.push_back(now - t);
    open.clear();
    ++datagrams;
    pacer.flushed(now);
  }
  // run: records at `arrivals` (sorted), the worker stepping every `step_ns` from the first until `end`.
  void run(const std::vector<uint64_t>& arrivals, uint64_t step_ns, uint64_t end) {
    size_t next = 0;
    for (uint64_t now = arrivals.empty() ? 0 : arrivals[0]; now <= end; now += step_ns) {
      while (next < arrivals.size() && arrivals[next] <= now) {
        open.push_back(arrivals[next++]);
        pacer.took(now);
        if (open.size() == 22) flush(now);
      }
      if (!open.empty() && pacer.due(now)) flush(now);
    }
  }
  uint64_t max_wait() const { return waits.empty() ? 0 : *std::max_element(waits.begin(), waits.end()); }
};

constexpr uint64_t kInterval = 50'000;  // the kernel port's default

TEST(Pacer, ALoneRecordAfterAQuietPeriodLeavesAtOnce) {
  PacedStream s(kInterval);
  s.run({1'000'000, 9'000'000}, 1'000, 9'100'000);
  EXPECT_EQ(s.datagrams, 2u);
  EXPECT_EQ(s.max_wait(), 0u);
}

// The source design's first case: a steady stream near 20 k/s (here one
// record every 45 us, a little faster than the interval) leaves record by
// record, none delayed — the rule "a frame at most once an interval"
// alone would hold each back 5 us.
TEST(Pacer, ASteady22kStreamIsNotDelayed) {
  std::vector<uint64_t> at;
  for (uint64_t i = 0; i < 1000; ++i) at.push_back(1'000'000 + i * 45'000);
  PacedStream s(kInterval);
  s.run(at, 1'000, at.back() + kInterval);
  EXPECT_EQ(s.datagrams, 1000u);
  EXPECT_EQ(s.max_wait(), 0u);
}

// A closed loop (request/response): the next record comes one round trip
// (here 30 us, shorter than the interval) after the previous one left. It
// never waits for the interval.
TEST(Pacer, AClosedLoopFasterThanTheIntervalNeverWaits) {
  PacedStream s(kInterval);
  uint64_t now = 1'000'000;
  for (int i = 0; i < 1000; ++i) {
    s.run({now}, 1'000, now);
    ASSERT_EQ(s.open.size(), 0u) << "request " << i << " held back";
    now += 30'000;  // the answer, then the next request
  }
  EXPECT_EQ(s.datagrams, 1000u);
  EXPECT_EQ(s.max_wait(), 0u);
}

// The second case: the tail of a burst (100 records at once, then quiet)
// waits at most one interval after the burst's last full frame.
TEST(Pacer, TheTailOfABurstWaitsAtMostOneInterval) {
  std::vector<uint64_t> at(100, 1'000'000);
  PacedStream s(kInterval);
  s.run(at, 1'000, 2'000'000);
  EXPECT_EQ(s.datagrams, 5u);  // 4 full frames of 22, then the tail of 12
  EXPECT_LE(s.max_wait(), kInterval);
}

// The third case: at 500 k records/s the frames are batched as before —
// one partial frame an interval at most, over 20 records a datagram.
TEST(Pacer, At500kRecordsASecondFramesCarryOver20Records) {
  std::vector<uint64_t> at;
  for (uint64_t i = 0; i < 100'000; ++i) at.push_back(1'000'000 + i * 2'000);
  PacedStream s(kInterval);
  s.run(at, 1'000, at.back() + 2 * kInterval);
  ASSERT_EQ(s.waits.size(), at.size());
  EXPECT_GE(static_cast<double>(at.size()) / static_cast<double>(s.datagrams), 20.0) << s.datagrams << " datagrams";
  EXPECT_LE(s.max_wait(), kInterval);
}

// Between the two: past kSparseRecords an interval, pacing is the source
// design's; at or below it, records leave one by one.
TEST(Pacer, AStreamIsSparseUpToKSparseRecordsAnInterval) {
  Pacer p(kInterval);
  p.flushed(1'000'000);
  for (uint32_t i = 0; i < Pacer::kSparseRecords; ++i) p.took(1'000'000 + i);
  EXPECT_TRUE(p.due(1'010'000)) << "four records this interval: still sparse";
  p.took(1'010'000);
  EXPECT_FALSE(p.due(1'020'000)) << "a fifth: paced";
  EXPECT_EQ(p.deadline(), 1'050'000u);
  EXPECT_TRUE(p.due(1'050'000));
}

TEST(SpscQueue, IsFifoAndBounded) {
  SpscQueue<int, 4> q;
  int v = 0;
  EXPECT_FALSE(q.try_pop(&v));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(q.try_push(i));
  EXPECT_FALSE(q.try_push(9));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(q.try_pop(&v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(q.try_pop(&v));
}

TEST(SpscQueue, TwoThreadsSeeEveryElementInOrder) {
  SpscQueue<uint64_t, 64> q;
  constexpr uint64_t kN = 1'000'000;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kN;) {
      if (q.try_push(i)) ++i;
    }
  });
  uint64_t want = 0;
  while (want < kN) {
    uint64_t v;
    if (q.try_pop(&v)) {
      ASSERT_EQ(v, want);
      ++want;
    }
  }
  producer.join();
}

TEST(FaultInjector, TheSameSeedGivesTheSameFaultsAtTheConfiguredRates) {
  FaultConfig c;
  c.drop_ppm = 50000;
  c.duplicate_ppm = 20000;
  c.seed = 99;
  FaultInjector a(c), b(c);
  uint64_t drops = 0, dups = 0;
  constexpr int kN = 1'000'000;
  for (int i = 0; i < kN; ++i) {
    const FaultAction x = a.decide();
    ASSERT_EQ(x, b.decide());
    drops += x == FaultAction::kDrop;
    dups += x == FaultAction::kDuplicate;
  }
  EXPECT_NEAR(static_cast<double>(drops) / kN, 0.05, 0.002);
  EXPECT_NEAR(static_cast<double>(dups) / kN, 0.02, 0.002);
  c.seed = 100;
  FaultInjector other(c);
  int same = 0;
  FaultInjector again(FaultConfig{50000, 20000, 0, 0, 0, 99});
  for (int i = 0; i < 1000; ++i) same += other.decide() == again.decide();
  EXPECT_LT(same, 1000);
}

}  // namespace
}  // namespace ringfire::dataplane

#include "dataplane/byte_queue.h"

namespace ringfire::dataplane {
namespace {

TEST(ByteQueue, CarriesVariableSizeMessagesAcrossTheWrapInOrder) {
  ByteQueue q(256);
  std::vector<std::byte> msg(100);
  proto::ConstBytes out;
  EXPECT_FALSE(q.front(&out));
  EXPECT_FALSE(q.try_push(std::vector<std::byte>(200)));  // over max_message
  for (int round = 0; round < 50; ++round) {
    const size_t len = 1 + (round * 37) % 100;
    msg.assign(len, std::byte(round));
    ASSERT_TRUE(q.try_push(msg)) << round;
    ASSERT_TRUE(q.front(&out));
    ASSERT_EQ(out.size(), len);
    EXPECT_EQ(out[len - 1], std::byte(round));
    q.pop();
  }
  EXPECT_FALSE(q.front(&out));
}

// A queue that drains goes back to its start: its pages follow its
// deepest backlog, not its capacity (a TCP-mode mirror's 8 MiB queue, 64
// KiB frames through it for as long as it streams). A backlog still
// reaches as deep as the capacity allows once the consumer has read past
// the restart (until then the bytes before it are what there is).
TEST(ByteQueue, ADrainedQueueRestartsAtItsStartSoItsPagesFollowItsBacklog) {
  ByteQueue q(8 << 20);
  std::vector<std::byte> msg(64 << 10);
  proto::ConstBytes out;
  for (int i = 0; i < 1000; ++i) {  // 64 MiB through, one frame at a time
    msg[0] = std::byte(i & 0xff);
    ASSERT_TRUE(q.try_push(msg)) << i;
    ASSERT_TRUE(q.front(&out));
    ASSERT_EQ(out.size(), msg.size());
    ASSERT_EQ(out[0], std::byte(i & 0xff));
    q.pop();
  }
  EXPECT_LE(q.resident_bytes(), ByteQueue::kRestartAfter + 2 * msg.size())
      << "a queue never more than one frame deep holds " << q.resident_bytes() << " bytes";
  int deep = 0;
  while (q.try_push(msg)) ++deep;  // a backlog, before the consumer looked
  EXPECT_GE(deep, 4);
  ASSERT_TRUE(q.front(&out));  // past the restart
  q.pop();
  --deep;
  while (q.try_push(msg)) ++deep;  // now to its capacity
  EXPECT_GE(deep, 120);
  for (int i = 0; i < deep; ++i) {
    ASSERT_TRUE(q.front(&out)) << i;
    q.pop();
  }
  EXPECT_FALSE(q.front(&out));
}

TEST(ByteQueue, TwoThreadsSeeEveryMessageWhole) {
  ByteQueue q(4096);
  constexpr uint32_t kN = 200000;
  std::thread producer([&] {
    std::vector<std::byte> m;
    for (uint32_t i = 0; i < kN;) {
      m.assign(4 + i % 300, std::byte(i & 0xff));
      std::memcpy(m.data(), &i, 4);
      if (q.try_push(m)) ++i;
    }
  });
  for (uint32_t want = 0; want < kN;) {
    proto::ConstBytes m;
    if (!q.front(&m)) continue;
    ASSERT_EQ(m.size(), 4 + want % 300);
    uint32_t got;
    std::memcpy(&got, m.data(), 4);
    ASSERT_EQ(got, want);
    if (m.size() > 4) {
      ASSERT_EQ(m.back(), std::byte(want & 0xff));
    }
    q.pop();
    ++want;
  }
  producer.join();
}

}  // namespace
}  // namespace ringfire::dataplane
