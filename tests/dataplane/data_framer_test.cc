// data_framer_test.cc — DATA frames packed from ring records, the pacing
// rule, the SPSC queue, and the fault injector's determinism.
#include "dataplane/data_framer.h"

#include <thread>
#include <vector>

#include "dataplane/fault_injector.h"
#include "dataplane/spsc_queue.h"
#include "gtest/gtest.h"

namespace ringfire::dataplane {
namespace {

TEST(DataFramer, PacksConsecutiveFixedRecordsUpToTheLimit) {
  std::vector<std::byte> buf(16 + 3 * 8 + 5);  // room for 3 records of 8 bytes
  DataFramer f(8, 9);
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
  DataFramer f(0, 1);
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

TEST(Pacer, ALoneRecordAfterAQuietPeriodLeavesAtOnce) {
  Pacer p(50'000);
  p.flushed(1'000'000);
  EXPECT_FALSE(p.due(1'020'000));  // 20 us after the last frame: wait
  EXPECT_EQ(p.deadline(), 1'050'000u);
  EXPECT_TRUE(p.due(1'050'000));
  EXPECT_TRUE(p.due(9'000'000));  // quiet for long: at once
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
