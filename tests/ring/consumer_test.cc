// consumer_test.cc — readers of a fixed-slot ring: start positions, order,
// lapping with exact loss counts, batch reads, sparse rings with holes.
#include "ring/consumer.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::ring {
namespace {

using testing::ScopedRing;

struct Record {
  uint64_t seq;
  uint64_t pad[3];
};

void publish_n(Producer& p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    Record r{p.next_seq(), {1, 2, 3}};
    p.publish(&r);
  }
}

Consumer reader(const ScopedRing& r, StartPosition start) {
  auto c = Consumer::attach(r.open(), start);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

TEST(Consumer, AnEmptyRingHasNothingToRead) {
  ScopedRing r(testing::fixed_ring(16, sizeof(Record)));
  Consumer c = reader(r, StartPosition::oldest());
  Record out{};
  EXPECT_FALSE(c.try_read(reinterpret_cast<std::byte*>(&out)).ok);
}

TEST(Consumer, ReadsEveryRecordInOrderWithItsSequence) {
  ScopedRing r(testing::fixed_ring(16, sizeof(Record)));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  Consumer c = reader(r, StartPosition::latest());
  publish_n(*p, 10);
  for (uint64_t want = 0; want < 10; ++want) {
    Record out{};
    ReadResult res = c.try_read(reinterpret_cast<std::byte*>(&out));
    ASSERT_TRUE(res.ok);
    EXPECT_EQ(res.seq, want);
    EXPECT_EQ(out.seq, want);
    EXPECT_EQ(res.lost, 0u);
  }
  Record out{};
  EXPECT_FALSE(c.try_read(reinterpret_cast<std::byte*>(&out)).ok);
}

TEST(Consumer, StartPositionsLatestOldestAndSequence) {
  ScopedRing r(testing::fixed_ring(8, sizeof(Record)));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  publish_n(*p, 20);  // ring holds 12..19
  Record out{};
  Consumer latest = reader(r, StartPosition::latest());
  EXPECT_EQ(latest.cursor(), 20u);
  EXPECT_FALSE(latest.try_read(reinterpret_cast<std::byte*>(&out)).ok);

  Consumer oldest = reader(r, StartPosition::oldest());
  ReadResult res = oldest.try_read(reinterpret_cast<std::byte*>(&out));
  ASSERT_TRUE(res.ok);
  EXPECT_EQ(res.seq, 12u);
  EXPECT_EQ(res.lost, 0u);

  Consumer at = reader(r, StartPosition::at(15));
  res = at.try_read(reinterpret_cast<std::byte*>(&out));
  ASSERT_TRUE(res.ok);
  EXPECT_EQ(res.seq, 15u);
}

// Damageable: a 16-slot ring, its writer, a reader from the start, and
// the ring's raw file (to damage it as a broken or hostile writer would).
struct Damageable {
  ScopedRing r{testing::fixed_ring(16, sizeof(Record))};
  RingFile raw = r.open();
  absl::StatusOr<Producer> p = Producer::attach(r.open());
  Consumer c = reader(r, StartPosition::latest());
};

TEST(Consumer, ALappedReaderReportsExactlyWhatItLost) {
  ScopedRing r(testing::fixed_ring(8, sizeof(Record)));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  Consumer c = reader(r, StartPosition::latest());
  publish_n(*p, 3);
  Record out{};
  ASSERT_TRUE(c.try_read(reinterpret_cast<std::byte*>(&out)).ok);  // seq 0
  publish_n(*p, 30);  // seqs 3..32; ring holds 25..32
  ReadResult res = c.try_read(reinterpret_cast<std::byte*>(&out));
  ASSERT_TRUE(res.ok);
  EXPECT_EQ(res.seq, 25u);
  EXPECT_EQ(res.lost, 24u);  // 1..24
  EXPECT_EQ(out.seq, 25u);
  EXPECT_EQ(c.total_lost(), 24u);
}

TEST(Consumer, AStartSequenceOlderThanTheRingIsReportedLost) {
  ScopedRing r(testing::fixed_ring(8, sizeof(Record)));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  publish_n(*p, 20);
  Consumer c = reader(r, StartPosition::at(2));
  Record out{};
  ReadResult res = c.try_read(reinterpret_cast<std::byte*>(&out));
  ASSERT_TRUE(res.ok);
  EXPECT_EQ(res.seq, 12u);
  EXPECT_EQ(res.lost, 10u);
}

TEST(Consumer, ReadBatchReturnsRecordsAndSequences) {
  ScopedRing r(testing::fixed_ring(64, sizeof(Record)));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  Consumer c = reader(r, StartPosition::latest());
  publish_n(*p, 40);
  std::vector<Record> out(32);
  std::vector<uint64_t> seqs(32);
  uint64_t lost = 0;
  EXPECT_EQ(c.read_batch(reinterpret_cast<std::byte*>(out.data()), seqs.data(), 32, &lost), 32u);
  EXPECT_EQ(c.read_batch(reinterpret_cast<std::byte*>(out.data()), seqs.data(), 32, &lost), 8u);
  EXPECT_EQ(seqs[7], 39u);
  EXPECT_EQ(out[7].seq, 39u);
  EXPECT_EQ(lost, 0u);
}

TEST(Consumer, APublishedButUncommittedSlotIsNotARecord) {
  // A writer that dies between begin and commit leaves a busy word: readers
  // must wait, never return the half-written payload.
  ScopedRing r(testing::fixed_ring(16, sizeof(Record)));
  RingFile raw = r.open();
  Consumer c = reader(r, StartPosition::latest());
  slot_begin_write(raw.slot(0), 0);
  std::memset(raw.payload(0), 0xAB, sizeof(Record));
  Record out{};
  EXPECT_FALSE(c.try_read(reinterpret_cast<std::byte*>(&out)).ok);
  auto p = Producer::attach(r.open());  // the restarted writer rewrites seq 0
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->next_seq(), 0u);
  publish_n(*p, 1);
  ReadResult res = c.try_read(reinterpret_cast<std::byte*>(&out));
  ASSERT_TRUE(res.ok);
  EXPECT_EQ(out.seq, 0u);
  EXPECT_EQ(out.pad[0], 1u);
}

TEST(Consumer, ARestartedWriterAdoptsACommittedButUnannouncedRecord) {
  ScopedRing r(testing::fixed_ring(16, sizeof(Record)));
  RingFile raw = r.open();
  Record rec{0, {7, 7, 7}};
  slot_write(raw.slot(0), 0, &rec, sizeof(rec));  // committed; write_seq never stored
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->next_seq(), 1u);
  EXPECT_EQ(raw.header().write_seq.load(), 1u);
}

// A writer that damaged the ring (every slot word naming a sequence far
// past write_seq) costs a reader one lap's worth of steps, counted as lost,
// then nothing until write_seq moves: it never walks towards the forged
// sequence one slot at a time (2^48 steps: a process that spins for good).
TEST(Consumer, SlotWordsPastWhatWasPublishedAreNotWalkedThrough) {
  Damageable d;
  ASSERT_TRUE(d.p.ok());
  auto& [r, raw, p, c] = d;
  publish_n(*p, 5);  // write_seq 5
  for (uint64_t i = 0; i < 16; ++i) raw.slot(i)->word.store(committed_word(uint64_t{1} << 47), std::memory_order_relaxed);
  Record out{};
  ReadResult res = c.try_read(reinterpret_cast<std::byte*>(&out));
  EXPECT_FALSE(res.ok);
  EXPECT_EQ(res.lost, 5u) << "seqs 0..4, overwritten as far as the reader can tell";
  EXPECT_EQ(c.cursor(), 5u) << "stopped at write_seq";
  res = c.try_read(reinterpret_cast<std::byte*>(&out));
  EXPECT_FALSE(res.ok);
  EXPECT_EQ(res.lost, 0u);
  EXPECT_EQ(c.cursor(), 5u);
  // The writer goes on: what it writes is read again.
  publish_n(*p, 1);
  res = c.try_read(reinterpret_cast<std::byte*>(&out));
  ASSERT_TRUE(res.ok);
  EXPECT_EQ(res.seq, 5u);
  EXPECT_EQ(out.seq, 5u);
}

// A write_seq at or past 2^62 is a damaged header: readers take it as
// kMaxSeq, so no sequence they hand out (or count lost to) reaches it.
TEST(Consumer, AWriteSeqPastTheSequenceBoundIsTakenAsTheBound) {
  Damageable d;
  ASSERT_TRUE(d.p.ok());
  auto& [r, raw, p, c] = d;
  publish_n(*p, 3);
  Record out{};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.try_read(reinterpret_cast<std::byte*>(&out)).ok);
  // The header says the writer is at 2^64 - 1, and the next slot that it lapped us.
  raw.header().write_seq.store(UINT64_MAX, std::memory_order_release);
  raw.slot(3)->word.store(committed_word(UINT64_MAX >> 2), std::memory_order_release);
  uint64_t lost = 0;
  for (int i = 0; i < 3; ++i) {
    const ReadResult res = c.try_read(reinterpret_cast<std::byte*>(&out));
    EXPECT_FALSE(res.ok);
    lost += res.lost;
  }
  EXPECT_EQ(c.cursor(), kMaxSeq - 16) << "caught up to the oldest the ring could hold below the bound";
  EXPECT_EQ(lost, kMaxSeq - 16 - 3);
}

// ---- sparse rings (mirrors)

TEST(SparseRing, ReadersSkipHolesToTheNextPresentRecord) {
  ScopedRing r(testing::fixed_ring(64, sizeof(Record), kFlagSparse));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  Consumer c = reader(r, StartPosition::at(0));
  for (uint64_t seq : {0, 1, 5, 6, 40}) {
    Record rec{seq, {}};
    ASSERT_TRUE(p->publish_at(seq, &rec));
  }
  std::vector<uint64_t> got;
  Record out{};
  for (ReadResult res; (res = c.try_read(reinterpret_cast<std::byte*>(&out))).ok;) {
    EXPECT_EQ(out.seq, res.seq);
    EXPECT_EQ(res.lost, 0u);
    got.push_back(res.seq);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 5, 6, 40}));
  EXPECT_EQ(c.holes_skipped(), 3u + 33u);  // 2..4 and 7..39
}

TEST(SparseRing, AReaderDoesNotSkipWhatTheWriterHasNotReachedYet) {
  ScopedRing r(testing::fixed_ring(64, sizeof(Record), kFlagSparse));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  Consumer c = reader(r, StartPosition::at(0));
  Record out{};
  EXPECT_FALSE(c.try_read(reinterpret_cast<std::byte*>(&out)).ok);
  EXPECT_EQ(c.cursor(), 0u);
  Record rec{0, {}};
  ASSERT_TRUE(p->publish_at(0, &rec));
  EXPECT_TRUE(c.try_read(reinterpret_cast<std::byte*>(&out)).ok);
}

TEST(SparseRing, AMirrorJoiningMidStreamIsReadFromItsFirstRecordWithoutLoss) {
  // A mirror that joins at sequence 1,000,000 leaves everything below it a
  // hole; a reader starting at the oldest retained record loses nothing.
  ScopedRing r(testing::fixed_ring(8, sizeof(Record), kFlagSparse));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  Consumer waiting = reader(r, StartPosition::latest());
  for (uint64_t seq : {1000000, 1000001}) {
    Record rec{seq, {}};
    ASSERT_TRUE(p->publish_at(seq, &rec));
  }
  Consumer c = reader(r, StartPosition::oldest());
  for (Consumer* rd : {&c, &waiting}) {
    Record out{};
    ReadResult res = rd->try_read(reinterpret_cast<std::byte*>(&out));
    ASSERT_TRUE(res.ok);
    EXPECT_EQ(res.seq, 1000000u);
    EXPECT_EQ(out.seq, 1000000u);
    EXPECT_EQ(res.lost, 0u);
  }
}

TEST(SparseRing, AReaderLappedOnASparseRingReportsAnUpperBoundOfLoss) {
  // Records 0..19 then a jump to 100 on an 8-slot ring: a reader still at 0
  // lost 0..19 for certain, and cannot tell whether 20..91 were holes.
  ScopedRing r(testing::fixed_ring(8, sizeof(Record), kFlagSparse));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  Consumer c = reader(r, StartPosition::at(0));
  for (uint64_t seq = 0; seq < 20; ++seq) {
    Record rec{seq, {}};
    ASSERT_TRUE(p->publish_at(seq, &rec));
  }
  for (uint64_t seq = 30; seq <= 100; seq += 10) {  // jumps shorter than the ring
    Record rec{seq, {}};
    ASSERT_TRUE(p->publish_at(seq, &rec));
  }
  Record out{};
  ReadResult res = c.try_read(reinterpret_cast<std::byte*>(&out));
  ASSERT_TRUE(res.ok);
  EXPECT_GE(res.lost, 20u);
  EXPECT_LE(res.lost + c.holes_skipped(), res.seq);
  EXPECT_EQ(out.seq, res.seq);
}

TEST(SparseRing, PublishAtRefusesGoingBackwardsAndHolesOnDenseRings) {
  ScopedRing sparse(testing::fixed_ring(8, sizeof(Record), kFlagSparse));
  auto p = Producer::attach(sparse.open());
  ASSERT_TRUE(p.ok());
  Record rec{};
  ASSERT_TRUE(p->publish_at(10, &rec));
  EXPECT_FALSE(p->publish_at(10, &rec));
  EXPECT_FALSE(p->publish_at(3, &rec));

  ScopedRing dense(testing::fixed_ring(8, sizeof(Record)));
  auto d = Producer::attach(dense.open());
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->publish_at(5, &rec));
  EXPECT_TRUE(d->publish_at(0, &rec));
}

}  // namespace
}  // namespace ringfire::ring
