// blob_test.cc — blob rings: variable sizes round trip, an arena lapped by
// its writer never yields corrupted bytes, sparse blob rings.
#include "ring/blob.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ring/check_record.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::ring {
namespace {

using testing::ScopedRing;

TEST(BlobRing, BlobsOfEverySizeRoundTrip) {
  ScopedRing r(testing::blob_ring(256, 1 << 16));
  auto p = BlobProducer::attach(r.open());
  ASSERT_TRUE(p.ok()) << p.status();
  auto c = BlobConsumer::attach(r.open(), StartPosition::latest());
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::byte> rec(p->max_blob());
  std::vector<std::byte> out(c->max_blob());
  for (uint32_t len = kCheckRecordMin; len < 3000; len += 97) {
    const uint64_t seq = p->next_seq();
    std::span<std::byte> dst = p->reserve(len);
    ASSERT_EQ(dst.size(), len);
    fill_record(dst, seq, 0);
    EXPECT_EQ(p->commit(len), seq);
    uint32_t got = 0;
    ReadResult res = c->try_read(out.data(), &got);
    ASSERT_TRUE(res.ok);
    EXPECT_EQ(got, len);
    EXPECT_EQ(check_record(out.data(), got, res.seq), CheckVerdict::kOk);
  }
}

TEST(BlobRing, ABlobLargerThanAQuarterOfTheArenaIsRefused) {
  ScopedRing r(testing::blob_ring(16, 4096));
  auto p = BlobProducer::attach(r.open());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->max_blob(), 1024u);
  EXPECT_TRUE(p->reserve(1025).empty());
  std::vector<std::byte> big(2000);
  EXPECT_FALSE(p->publish(big));
}

TEST(BlobRing, OverwrittenBlobsAreReportedLostNeverReturned) {
  // 64 slots but a 4 KiB arena: the arena laps long before the slots do, so
  // a reader starting at the oldest slot finds descriptors whose bytes are
  // gone.
  ScopedRing r(testing::blob_ring(64, 4096));
  auto p = BlobProducer::attach(r.open());
  ASSERT_TRUE(p.ok());
  std::vector<std::byte> rec(1000);
  for (int i = 0; i < 40; ++i) {
    fill_record(rec, p->next_seq(), 0);
    ASSERT_TRUE(p->publish(rec));
  }
  auto c = BlobConsumer::attach(r.open(), StartPosition::oldest());
  ASSERT_TRUE(c.ok());
  std::vector<std::byte> out(c->max_blob());
  uint32_t len = 0;
  uint64_t read = 0;
  uint64_t lost = 0;
  for (ReadResult res; (res = c->try_read(out.data(), &len)).ok;) {
    lost += res.lost;
    ++read;
    EXPECT_EQ(check_record(out.data(), len, res.seq), CheckVerdict::kOk);
  }
  lost += c->try_read(out.data(), &len).lost;
  EXPECT_EQ(read + lost, 40u);
  EXPECT_GE(read, 3u);   // the newest blobs survive
  EXPECT_GE(lost, 30u);  // most were overwritten in the arena
  EXPECT_EQ(c->overwritten(), lost);
}

TEST(BlobRing, AWriterLappingTheArenaConcurrentlyNeverYieldsCorruptedBytes) {
  ScopedRing r(testing::blob_ring(1024, 8192));
  auto p = BlobProducer::attach(r.open());
  ASSERT_TRUE(p.ok());
  auto c = BlobConsumer::attach(r.open(), StartPosition::at(0));
  ASSERT_TRUE(c.ok());
  constexpr uint64_t kTotal = 200000;
  std::thread writer([&] {
    for (uint64_t seq = 0; seq < kTotal; ++seq) {
      const uint32_t len = blob_length_for(seq, 24, 2000);
      std::span<std::byte> dst = p->reserve(len);
      fill_record(dst, seq, 0);
      p->commit(len);
    }
  });
  std::vector<std::byte> out(c->max_blob());
  uint64_t read = 0;
  uint64_t lost = 0;
  uint64_t bad = 0;
  uint64_t last = 0;
  while (last + 1 < kTotal) {
    uint32_t len = 0;
    ReadResult res = c->try_read(out.data(), &len);
    lost += res.lost;
    if (!res.ok) continue;
    ++read;
    last = res.seq;
    if (check_record(out.data(), len, res.seq) != CheckVerdict::kOk) ++bad;
  }
  writer.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(read + lost, kTotal);
}

TEST(BlobRing, SparseBlobRingsCarryTheirSequences) {
  ScopedRing r(testing::blob_ring(64, 1 << 14, kFlagSparse));
  auto p = BlobProducer::attach(r.open());
  ASSERT_TRUE(p.ok());
  auto c = BlobConsumer::attach(r.open(), StartPosition::at(0));
  ASSERT_TRUE(c.ok());
  std::vector<std::byte> out(c->max_blob());
  for (uint64_t seq : {3, 4, 9}) {
    std::span<std::byte> dst = p->reserve(100);
    fill_record(dst, seq, 0);
    ASSERT_TRUE(p->commit_at(seq, 100));
  }
  for (uint64_t want : {3, 4, 9}) {
    uint32_t len = 0;
    ReadResult res = c->try_read(out.data(), &len);
    ASSERT_TRUE(res.ok);
    EXPECT_EQ(res.seq, want);
    EXPECT_EQ(check_record(out.data(), len, want), CheckVerdict::kOk);
  }
  EXPECT_EQ(c->holes_skipped(), 3u + 4u);
}

TEST(BlobRing, FixedAndBlobApisRefuseTheOtherKind) {
  ScopedRing blob(testing::blob_ring(16, 4096));
  ScopedRing fixed(testing::fixed_ring(16, 64));
  EXPECT_FALSE(Producer::attach(blob.open()).ok());
  EXPECT_FALSE(Consumer::attach(blob.open(), StartPosition::latest()).ok());
  EXPECT_FALSE(BlobProducer::attach(fixed.open()).ok());
  EXPECT_FALSE(BlobConsumer::attach(fixed.open(), StartPosition::latest()).ok());
}

}  // namespace
}  // namespace ringfire::ring
