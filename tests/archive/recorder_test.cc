// recorder_test.cc — recording rings into archives and reading them back:
// every record under its sequence, laps recorded as gaps, lookups through
// the index, recovery after a kill and a power cut, damage found and named,
// retention that leaves a reader's segment alone, a full disk.
#include "archive/recorder.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "archive/archive_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ring/blob.h"
#include "ring/check_record.h"
#include "ring/monotonic.h"
#include "ring/producer.h"
#include "tests/archive/recording.h"
#include "tests/ring/scoped_ring.h"
#include "tests/temp_dir.h"

namespace ringfire::archive {
namespace {

using ring::testing::ScopedRing;
using testing::drain;
using testing::flip_byte;
using testing::iota;
using testing::publish;
using testing::Recorded;
using testing::small_options;
using ::testing::HasSubstr;

using ringfire::testing::TempDir;

// Feed: a 64 Ki-slot ring of 64-byte records, its producer, and a
// temporary directory for a recorder's archive of it.
struct Feed {
  ScopedRing ring{ring::testing::fixed_ring(1u << 16, 64)};
  TempDir tmp;
  absl::StatusOr<ring::Producer> p = ring::Producer::attach(ring.open());
};

struct ReadBack {
  std::vector<uint64_t> seqs;
  std::vector<ArchiveEntry> gaps;
  uint64_t bad = 0;
  absl::Status error;
};

// read_back reads the archive from `from` to its end, checking each record.
ReadBack read_back(const std::string& dir, uint64_t from) {
  ReadBack out;
  auto r = ArchiveReader::open(dir);
  if (!r.ok()) {
    out.error = r.status();
    return out;
  }
  if (auto st = r->seek(from); !st.ok()) {
    out.error = st;
    return out;
  }
  ArchiveEntry e;
  for (;;) {
    auto got = r->next(&e);
    if (!got.ok()) {
      out.error = got.status();
      return out;
    }
    if (!*got) return out;
    if (e.gap) {
      out.gaps.push_back(e);
      continue;
    }
    out.seqs.push_back(e.seq);
    if (ring::check_record(reinterpret_cast<const std::byte*>(e.bytes.data()), e.bytes.size(), e.seq) !=
        ring::CheckVerdict::kOk) {
      ++out.bad;
    }
  }
}

TEST(Recorder, RecordsEveryRecordUnderItsSequenceAcrossSegments) {
  Recorded arc(1u << 16, 20'000);
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  auto& rec = arc.rec;
  EXPECT_EQ((*rec)->snapshot().records, 20'000u);
  EXPECT_EQ((*rec)->snapshot().recorded_end, 20'000u);
  EXPECT_GE((*rec)->snapshot().segments, 6u) << "20,000 x 80 bytes in 256 KiB segments";
  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.seqs, iota(0, 20'000));
  EXPECT_EQ(back.bad, 0u);
  EXPECT_TRUE(back.gaps.empty());
}

TEST(Recorder, BlobRecordsKeepTheirLengthsAndBytes) {
  ScopedRing ring(ring::testing::blob_ring(1u << 12, 1u << 20));
  TempDir tmp;
  auto p = ring::BlobProducer::attach(ring.open());
  ASSERT_TRUE(p.ok());
  RecordOptions o = small_options(tmp.archive());
  o.layout.segment_bytes = 1u << 20;  // a batch holds the ring's largest blob (256 KiB)
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  uint64_t now = 0;
  std::vector<uint64_t> lengths;
  for (uint64_t seq = 0; seq < 3000; ++seq) {
    const uint32_t len = ring::blob_length_for(seq, 24, 3000);
    auto dst = p->reserve(len);
    ring::fill_record(dst, seq, 0);
    p->commit(len);
    lengths.push_back(len);
    if (seq % 100 == 99) drain(**rec, &now);  // within the 1 MiB arena's reach
  }
  drain(**rec, &now);
  EXPECT_EQ((*rec)->snapshot().gaps, 0u);
  EXPECT_GE((*rec)->snapshot().segments, 4u);
  auto r = ArchiveReader::open(tmp.archive());
  ASSERT_TRUE(r.ok());
  ArchiveEntry e;
  uint64_t n = 0;
  while (*r->next(&e)) {
    ASSERT_FALSE(e.gap);
    ASSERT_EQ(e.seq, n);
    ASSERT_EQ(e.bytes.size(), lengths[n]);
    ASSERT_EQ(ring::check_record(reinterpret_cast<const std::byte*>(e.bytes.data()), e.bytes.size(), e.seq),
              ring::CheckVerdict::kOk);
    ++n;
  }
  EXPECT_EQ(n, 3000u);
}

TEST(Recorder, ASparseRingsHolesAreRecordedAsHolesNotGaps) {
  ScopedRing ring(ring::testing::fixed_ring(1u << 12, 64, ring::kFlagSparse));
  TempDir tmp;
  auto p = ring::Producer::attach(ring.open());
  ASSERT_TRUE(p.ok());
  std::vector<uint64_t> want;
  std::vector<std::byte> rec(64);
  for (uint64_t seq = 0; seq < 2000; seq += 1 + seq % 3) {
    ring::fill_record(rec, seq, 0);
    ASSERT_TRUE(p->publish_at(seq, rec.data()));
    want.push_back(seq);
  }
  auto r = Recorder::open(ring.open(), small_options(tmp.archive()));
  ASSERT_TRUE(r.ok()) << r.status();
  uint64_t now = 0;
  drain(**r, &now);
  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.seqs, want);
  EXPECT_TRUE(back.gaps.empty());
  EXPECT_EQ((*r)->snapshot().gaps, 0u);
}

TEST(Recorder, ALapItTookIsRecordedAsAGapOfExactlyTheRecordsLost) {
  Recorded arc(1024, 100);
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  auto& p = arc.p;
  auto& rec = arc.rec;
  auto& now = arc.now;
  publish(*p, 5000);  // 5,100 published; the ring holds 4,076..5,099
  drain(**rec, &now);
  EXPECT_EQ((*rec)->snapshot().gaps, 1u);
  EXPECT_EQ((*rec)->snapshot().lost, 5100u - 1024u - 100u);
  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  ASSERT_EQ(back.gaps.size(), 1u);
  EXPECT_EQ(back.gaps[0].seq, 100u);
  EXPECT_EQ(back.gaps[0].gap_end, 4076u);
  EXPECT_EQ(back.gaps[0].gap_lost, 3976u);
  std::vector<uint64_t> want = iota(0, 100);
  for (uint64_t s = 4076; s < 5100; ++s) want.push_back(s);
  EXPECT_EQ(back.seqs, want);
}

TEST(Recorder, ASeekReadsTheCatalogOneIndexAndFewBatches) {
  Recorded arc(1u << 18, 200'000);
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  auto r = ArchiveReader::open(tmp.archive());
  ASSERT_TRUE(r.ok());
  ASSERT_GT(r->catalog().segments.size(), 50u);
  for (uint64_t seq : {0ull, 1ull, 99'999ull, 123'457ull, 199'999ull, 3'276ull}) {
    const ReaderCounters before = r->counters();
    ASSERT_TRUE(r->seek(seq).ok());
    ArchiveEntry e;
    ASSERT_TRUE(*r->next(&e));
    EXPECT_EQ(e.seq, seq);
    const ReaderCounters& after = r->counters();
    EXPECT_EQ(after.catalog_loads - before.catalog_loads, 0u) << "the catalog did not change";
    EXPECT_EQ(after.segments_opened - before.segments_opened, 1u);
    EXPECT_EQ(after.index_reads - before.index_reads, 1u);
    // An index entry per 8 KiB and 16 KiB batches: the batch found, and the
    // one holding seq.
    EXPECT_LE(after.batches_read - before.batches_read, 2u);
    EXPECT_EQ(after.index_misses, 0u);
  }
  // Past the end: found nothing yet (a recorder may still add it).
  ASSERT_TRUE(r->seek(250'000).ok());
  ArchiveEntry e;
  EXPECT_FALSE(*r->next(&e));
}

// A recorder killed mid-batch leaves a torn tail: a batch header whose
// entries never landed. The next one clears it and resumes exactly where
// the last whole batch ended: nothing lost (the ring still holds it),
// nothing twice.
TEST(Recorder, ATornTailIsClearedAndRecordingResumesWithNoLossAndNoDuplicate) {
  Feed feed;
  ASSERT_TRUE(feed.p.ok());
  auto& [ring, tmp, p] = feed;
  publish(*p, 3000);
  uint64_t now = 0;
  uint64_t tail_offset = 0;
  std::string open_segment;
  {
    auto rec = Recorder::open(ring.open(), small_options(tmp.archive()));
    ASSERT_TRUE(rec.ok());
    drain(**rec, &now);
    tail_offset = (*rec)->writer().open_segment_bytes();
    open_segment = tmp.archive() + "/" + segment_name((*rec)->writer().catalog().segments.back().first_seq);
  }
  // What a kill between the entries and the header of the next batch, or
  // a short write, leaves: a header that promises bytes that are not there.
  BatchHeader torn{4096, 3000, 3050, 50, 0xDEAD};
  uint8_t head[kBatchHeaderBytes];
  encode_batch_header(torn, head);
  const int fd = ::open(open_segment.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, head, sizeof(head), static_cast<off_t>(tail_offset)), static_cast<ssize_t>(sizeof(head)));
  ::close(fd);
  publish(*p, 2000);
  auto rec = Recorder::open(ring.open(), small_options(tmp.archive()));
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_TRUE((*rec)->recovery().existed);
  EXPECT_GT((*rec)->recovery().torn_bytes, 0u);
  EXPECT_EQ((*rec)->snapshot().recorded_end, 3000u);
  drain(**rec, &now);
  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.seqs, iota(0, 5000));
  EXPECT_EQ(back.bad, 0u);
}

// slurp: a whole file's bytes ("" if it cannot be read).
std::string slurp(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// Whoever can write the archive directory can put a symlink where the open
// segment or its index was: recovery, which truncates the index, punches
// the torn tail and rewrites both, must not follow it to another file
// (it overwrote and zeroed such a victim: review helper-36).
TEST(Recorder, RecoveryRefusesASymlinkInPlaceOfTheOpenSegmentOrItsIndexAndLeavesItsTargetAlone) {
  for (const bool the_index : {true, false}) {
    SCOPED_TRACE(the_index ? "the index" : "the segment");
    Feed feed;
    ASSERT_TRUE(feed.p.ok());
    auto& [ring, tmp, p] = feed;
    publish(*p, 3000);
    uint64_t now = 0;
    std::string victim_of;
    uint64_t tail = 0;
    {
      auto rec = Recorder::open(ring.open(), small_options(tmp.archive()));
      ASSERT_TRUE(rec.ok());
      drain(**rec, &now);
      tail = the_index ? 0 : (*rec)->writer().open_segment_bytes();
      const uint64_t first = (*rec)->writer().catalog().segments.back().first_seq;
      victim_of = tmp.archive() + "/" + (the_index ? index_name(first) : segment_name(first));
    }
    // The victim: a copy of the real file with precious bytes past its
    // records (what the torn-tail clearing would zero), then the link.
    const std::string victim = tmp.path() + "/victim";
    std::filesystem::copy_file(victim_of, victim);
    {
      const std::string precious(std::filesystem::file_size(victim) + 4096 - tail, '\xAB');
      const int fd = ::open(victim.c_str(), O_WRONLY);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(pwrite(fd, precious.data(), precious.size(), static_cast<off_t>(tail)),
                static_cast<ssize_t>(precious.size()));
      ::close(fd);
    }
    const std::string before = slurp(victim);
    ASSERT_EQ(::unlink(victim_of.c_str()), 0);
    ASSERT_EQ(::symlink(victim.c_str(), victim_of.c_str()), 0);
    auto rec = Recorder::open(ring.open(), small_options(tmp.archive()));
    ASSERT_FALSE(rec.ok());
    EXPECT_THAT(std::string(rec.status().message()), ::testing::HasSubstr("not a regular file"));
    const std::string after = slurp(victim);
    EXPECT_EQ(after.size(), before.size());
    EXPECT_TRUE(after == before) << "the link's target was written";
  }
}

// cut_power: the power-cut model on one segment: everything from `offset`
// on is zeroes (what the disk never got), the file's size kept.
void cut_power(const std::string& segment, uint64_t offset) {
  struct stat st {};
  ASSERT_EQ(stat(segment.c_str(), &st), 0);
  const int fd = ::open(segment.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(offset)), 0);
  ASSERT_EQ(ftruncate(fd, st.st_size), 0);
  ::close(fd);
}

// The power-cut model: everything after the last fsync is lost (the file
// cut back to what was synced). The recorder resumes at what survived and
// takes the rest from the ring again.
TEST(Recorder, APowerCutLosesOnlyWhatTheFsyncPolicyAllowsAndTheRingRefillsIt) {
  Feed feed;
  ASSERT_TRUE(feed.p.ok());
  auto& [ring, tmp, p] = feed;
  RecordOptions o = small_options(tmp.archive());
  o.sink.fsync = FsyncPolicy::kInterval;
  o.sink.fsync_interval_ns = 10'000'000'000;  // no interval passes in this test
  uint64_t now = 0;
  uint64_t durable = 0;
  uint64_t durable_offset = 0;
  std::string open_segment;
  {
    auto rec = Recorder::open(ring.open(), o);
    ASSERT_TRUE(rec.ok());
    publish(*p, 4000);
    drain(**rec, &now);  // flush() syncs
    publish(*p, 1000);
    // Written, not synced: polls inside one fsync interval.
    for (int i = 0; i < 5000 && (*rec)->snapshot().recorded_end < 5000; ++i) {
      if ((*rec)->poll(now += 1'500'000) == 0) (*rec)->settle();
    }
    ASSERT_LT(now, 10'000'000'000u);
    ASSERT_TRUE((*rec)->settle());
    EXPECT_EQ((*rec)->snapshot().recorded_end, 5000u);
    durable = (*rec)->snapshot().durable_end;
    durable_offset = (*rec)->writer().durable_offset();
    open_segment = tmp.archive() + "/" + segment_name((*rec)->writer().catalog().segments.back().first_seq);
  }
  EXPECT_EQ(durable, 4000u);
  // The cut: what the disk never got is zeroes.
  ASSERT_NO_FATAL_FAILURE(cut_power(open_segment, durable_offset));
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ((*rec)->snapshot().recorded_end, durable);
  drain(**rec, &now);
  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.seqs, iota(0, 5000));
}

// Write-behind: with fsync per segment, the open segment is synced on the
// side in steps (so a seal, or the catalog's sync at a roll, never waits
// for a whole segment to reach the device); what a step synced is durable,
// and a power cut right after it loses nothing before it.
TEST(Recorder, WriteBehindMakesTheOpenSegmentDurableInStepsAndAPowerCutKeepsThem) {
  Feed feed;
  ASSERT_TRUE(feed.p.ok());
  auto& [ring, tmp, p] = feed;
  RecordOptions o = small_options(tmp.archive());
  o.sink.fsync = FsyncPolicy::kSegment;
  o.sink.write_behind_bytes = 32u << 10;  // two 16 KiB batches
  o.sink.write_behind_ns = 0;
  constexpr uint64_t kRecords = 2000;  // 160 KB: inside the first 256 KiB segment, no seal
  constexpr uint64_t kOneBatch = (16u << 10) / 80;  // records of 64 B (80 on disk)
  uint64_t now = 0;
  uint64_t durable = 0;
  uint64_t durable_offset = 0;
  std::string open_segment;
  {
    auto rec = Recorder::open(ring.open(), o);
    ASSERT_TRUE(rec.ok());
    publish(*p, kRecords);
    // Polled, never flushed: the sync is the write-behind's (real time).
    for (int i = 0; i < 5000 && (*rec)->snapshot().durable_end <= kOneBatch; ++i) {
      if ((*rec)->poll(now += 2'000'000) == 0) {
        (*rec)->settle();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    ASSERT_TRUE((*rec)->settle());
    const RecorderSnapshot snap = (*rec)->snapshot();
    EXPECT_EQ(snap.segments, 1u) << "nothing sealed: any sync is the write-behind's";
    durable = snap.durable_end;
    durable_offset = (*rec)->writer().durable_offset();
    open_segment = tmp.archive() + "/" + segment_name((*rec)->writer().catalog().segments.back().first_seq);
    EXPECT_GT(durable, kOneBatch) << "the open segment was synced in steps";
    EXPECT_LE(durable, snap.recorded_end);
    EXPECT_GT(snap.fsyncs, 0u);
  }
  // The cut: everything after what the last step synced is zeroes.
  ASSERT_NO_FATAL_FAILURE(cut_power(open_segment, durable_offset));
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ((*rec)->snapshot().recorded_end, durable);
  drain(**rec, &now);
  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.seqs, iota(0, kRecords));
  EXPECT_EQ(back.bad, 0u);
}

// A quiet feed: far less than a step's bytes written, and nothing more
// coming. With --fsync segment its records are made durable by a quiet
// step (from the writer's housekeeping), not left for the seal.
TEST(Recorder, AQuietTailIsSyncedWithoutWaitingForTheSeal) {
  Feed feed;
  ASSERT_TRUE(feed.p.ok());
  auto& [ring, tmp, p] = feed;
  RecordOptions o = small_options(tmp.archive());
  o.sink.fsync = FsyncPolicy::kSegment;
  o.sink.write_behind_quiet_ns = 50'000'000;  // real time
  constexpr uint64_t kRecords = 300;        // 24 KB: far under a step's 8 MiB and the 256 KiB segment
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok());
  publish(*p, kRecords);
  uint64_t now = 0;
  for (int i = 0; i < 5000 && (*rec)->snapshot().durable_end < kRecords; ++i) {
    if ((*rec)->poll(now += 2'000'000) == 0) {
      (*rec)->settle();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  const RecorderSnapshot snap = (*rec)->snapshot();
  EXPECT_EQ(snap.recorded_end, kRecords);
  EXPECT_EQ(snap.segments, 1u) << "nothing sealed";
  EXPECT_EQ(snap.durable_end, kRecords) << "the tail waited for the seal";
}

// A step claims what was written when it began, no more: a batch written
// while it ran stays unsynced until the next sync.
// SmallSegments: a writer of 256 KiB segments (15 batches of 16 KiB after
// the header) that syncs each seal, and one zeroed batch to append (whole
// blocks from an aligned buffer, as direct I/O wants).
struct SmallSegments {
  static constexpr size_t kBatch = 16u << 10;
  TempDir tmp;
  absl::StatusOr<SegmentWriter> w = open();
  std::unique_ptr<uint8_t, decltype(&std::free)> buf{static_cast<uint8_t*>(std::aligned_alloc(4096, kBatch)), &std::free};
  std::span<const uint8_t> batch() {
    std::memset(buf.get(), 0, kBatch);
    return {buf.get(), kBatch};
  }

 private:
  absl::StatusOr<SegmentWriter> open() {
    ArchiveLayout layout;
    layout.segment_bytes = 256u << 10;
    layout.index_interval = 8u << 10;
    layout.max_batch_bytes = kBatch;
    RecoveryReport report;
    auto opened = SegmentWriter::open(tmp.archive(), RingShape{0, 64, 64, 0}, layout, &report);
    if (opened.ok()) opened->set_sync_on_seal(true);
    return opened;
  }
};

// lost_write: a sync as a device that lost a write answers it.
int lost_write(int) {
  errno = EIO;
  return -1;
}

TEST(SegmentWriter, AWriteBehindStepMakesDurableWhatWasWrittenWhenItBeganNoMore) {
  SmallSegments s;
  auto& w = s.w;
  ASSERT_TRUE(w.ok()) << w.status();
  w->set_write_behind(32u << 10, 0, 0);
  constexpr size_t kBatch = SmallSegments::kBatch;
  const std::span<const uint8_t> batch = s.batch();
  ASSERT_TRUE(w->append(batch, 0, 100, 100).ok());
  EXPECT_FALSE(w->flushing()) << "16 KiB since the last sync: no step yet";
  ASSERT_TRUE(w->append(batch, 100, 200, 100).ok());
  EXPECT_TRUE(w->flushing()) << "32 KiB since the last sync: a step began";
  ASSERT_TRUE(w->append(batch, 200, 300, 100).ok());  // while it may still run
  for (int i = 0; i < 10'000 && w->flushing(); ++i) {
    ASSERT_TRUE(w->reap().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(w->flushing());
  EXPECT_TRUE(w->take_step_error().ok());
  EXPECT_EQ(w->durable_end(), 200u);
  EXPECT_EQ(w->durable_offset(), kSegmentHeaderBytes + 2 * kBatch);
  EXPECT_TRUE(w->dirty()) << "the third batch is not synced yet";
  ASSERT_TRUE(w->sync().ok());
  EXPECT_EQ(w->durable_end(), 300u);
  EXPECT_FALSE(w->dirty());
}

// A failed sync may have lost any write since the last good one, and a
// later sync that succeeds does not say those landed (Linux reports a lost
// write to one sync of the file, not to every later one): from then on
// nothing counts as durable, in this segment or the next.
TEST(SegmentWriter, AfterAFailedSyncNothingLaterCountsAsDurableInThisSegmentOrTheNext) {
  SmallSegments s;
  auto& w = s.w;
  ASSERT_TRUE(w.ok()) << w.status();
  const std::span<const uint8_t> batch = s.batch();
  ASSERT_TRUE(w->append(batch, 0, 100, 100).ok());
  ASSERT_TRUE(w->sync().ok());
  ASSERT_EQ(w->durable_end(), 100u);

  w->set_datasync(lost_write);
  ASSERT_TRUE(w->append(batch, 100, 200, 100).ok());
  const absl::Status failed = w->sync();
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.message()), HasSubstr("fdatasync"));
  EXPECT_EQ(w->durable_end(), 100u);

  w->set_datasync(::fdatasync);  // the device answers again
  ASSERT_TRUE(w->append(batch, 200, 300, 100).ok());
  ASSERT_TRUE(w->sync().ok());
  EXPECT_FALSE(w->dirty());
  EXPECT_EQ(w->durable_end(), 100u) << "a sync after the failed one does not vouch for 100..200";
  const uint64_t fsyncs = w->fsyncs();
  EXPECT_EQ(fsyncs, 2u) << "the good syncs are still counted";

  // Into the next segment: its seal syncs, and still nothing counts.
  uint64_t seq = 300;
  while (w->segments() < 2) {
    ASSERT_TRUE(w->append(batch, seq, seq + 100, 100).ok());
    seq += 100;
  }
  ASSERT_TRUE(w->append(batch, seq, seq + 100, 100).ok());
  ASSERT_TRUE(w->sync().ok());
  EXPECT_GT(w->fsyncs(), fsyncs) << "the seal and the new segment were synced";
  EXPECT_EQ(w->durable_end(), 100u);
}

// The same rule for a write-behind step: its failure is reported once (to
// the housekeeping that reaps it) and moves nothing.
TEST(SegmentWriter, AFailedStepIsReportedOnceAndNothingAfterItCountsAsDurable) {
  SmallSegments s;
  auto& w = s.w;
  ASSERT_TRUE(w.ok()) << w.status();
  w->set_write_behind(32u << 10, 0, 0);
  w->set_datasync(lost_write);
  const std::span<const uint8_t> batch = s.batch();
  ASSERT_TRUE(w->append(batch, 0, 100, 100).ok());
  ASSERT_TRUE(w->append(batch, 100, 200, 100).ok());
  ASSERT_TRUE(w->flushing()) << "32 KiB since the last sync: a step began";
  int failures = 0;
  for (int i = 0; i < 10'000 && w->flushing(); ++i) {
    if (const absl::Status st = w->reap(); !st.ok()) {
      ++failures;
      EXPECT_THAT(std::string(st.message()), HasSubstr("fdatasync"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(w->flushing());
  EXPECT_EQ(failures, 1);
  EXPECT_TRUE(w->reap().ok());
  EXPECT_TRUE(w->take_step_error().ok()) << "reap reported it";
  EXPECT_EQ(w->durable_end(), 0u);
  w->set_datasync(::fdatasync);
  ASSERT_TRUE(w->append(batch, 200, 300, 100).ok());
  ASSERT_TRUE(w->sync().ok());
  EXPECT_EQ(w->durable_end(), 0u) << "the step's lost write comes before 200..300";
}

// Whoever can write into the archive's directory may put a FIFO where a
// segment or the catalog was: a reader refuses it at once, as damage,
// instead of waiting in open() for a writer that never comes (on a serve,
// its conductor, for a HELLO asking for the oldest record: review helper-29).
TEST(ArchiveReader, AFifoInPlaceOfASegmentOrTheCatalogIsRefusedNotWaitedOn) {
  Recorded arc(1u << 16, 10'000);
  ASSERT_TRUE(arc.ok());
  const std::string dir = arc.tmp.archive();
  const Catalog cat = (*arc.rec)->writer().catalog();
  ASSERT_GE(cat.segments.size(), 2u);
  const std::string segment = dir + "/" + segment_name(cat.segments[1].first_seq);
  ASSERT_EQ(unlink(segment.c_str()), 0);
  ASSERT_EQ(mkfifo(segment.c_str(), 0644), 0);
  const ReadBack back = read_back(dir, 0);
  EXPECT_TRUE(absl::IsDataLoss(back.error)) << back.error;
  EXPECT_THAT(std::string(back.error.message()), HasSubstr("not a regular file"));
  EXPECT_EQ(back.seqs, iota(0, cat.segments[1].first_seq)) << "the first segment reads whole";
  const std::string catalog = dir + "/catalog";
  ASSERT_EQ(unlink(catalog.c_str()), 0);
  ASSERT_EQ(mkfifo(catalog.c_str(), 0644), 0);
  auto r = ArchiveReader::open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not a regular file"));
}

TEST(Recorder, AFlippedByteStopsReplayAtTheDamageNamingFileOffsetAndLastGoodSequence) {
  Recorded arc(1u << 16, 10'000);
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  auto& rec = arc.rec;
  const Catalog cat = (*rec)->writer().catalog();
  ASSERT_GE(cat.segments.size(), 3u);
  const std::string victim = tmp.archive() + "/" + segment_name(cat.segments[1].first_seq);
  // A byte inside the third batch of the second segment (16 KiB batches).
  const uint64_t offset = kSegmentHeaderBytes + 2 * (16u << 10) + 5000;
  ASSERT_NO_FATAL_FAILURE(flip_byte(victim, offset));

  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(absl::IsDataLoss(back.error)) << back.error;
  const std::string msg(back.error.message());
  EXPECT_THAT(msg, HasSubstr(victim));
  ASSERT_FALSE(back.seqs.empty());
  // Nothing of the damaged batch was handed out: the last record read is
  // the last good sequence the error names, and every one read is whole.
  EXPECT_THAT(msg, HasSubstr("last good sequence " + std::to_string(back.seqs.back())));
  EXPECT_EQ(back.seqs, iota(0, back.seqs.back() + 1));
  EXPECT_EQ(back.bad, 0u);
  EXPECT_GT(back.seqs.back(), cat.segments[1].first_seq);
  EXPECT_LT(back.seqs.back(), cat.segments[1].end_seq);
  // `ringfire archive`'s scan finds the same damage.
  const SegmentScan scan = scan_segment(tmp.archive(), cat, 1);
  EXPECT_THAT(scan.damage, HasSubstr("offset"));
  EXPECT_TRUE(scan_segment(tmp.archive(), cat, 0).damage.empty());

  // A truncated sealed segment is damage too, never a quiet end.
  ASSERT_EQ(truncate((tmp.archive() + "/" + segment_name(cat.segments[0].first_seq)).c_str(), 40000), 0);
  const ReadBack cut = read_back(tmp.archive(), 0);
  EXPECT_TRUE(absl::IsDataLoss(cut.error)) << cut.error;
  EXPECT_THAT(std::string(cut.error.message()), HasSubstr("truncated"));
}

// The open segment's last batch may be landing while a reader reads it:
// until the recorder writes past it, a batch that does not check out there
// ends the read for now (said, not an error). Restarting the recorder
// clears it as a torn tail and records it again from the ring.
TEST(Recorder, ABadLastBatchOfTheOpenSegmentIsUnsettledUntilTheRecorderWritesPastIt) {
  Feed feed;
  ASSERT_TRUE(feed.p.ok());
  auto& [ring, tmp, p] = feed;
  publish(*p, 1000);
  uint64_t now = 0;
  uint64_t last_batch = 0;
  std::string open_segment;
  {
    auto rec = Recorder::open(ring.open(), small_options(tmp.archive()));
    ASSERT_TRUE(rec.ok());
    drain(**rec, &now);
    open_segment = tmp.archive() + "/" + segment_name((*rec)->writer().catalog().segments.back().first_seq);
  }
  // A flipped byte in its last batch (found by walking the chain).
  {
    const int fd = ::open(open_segment.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> buf;
    BatchHeader h;
    std::string why;
    uint64_t off = kSegmentHeaderBytes;
    const SegmentLimits limits{256u << 10, 1u << 20, 64};
    while (read_batch(fd, off, limits, &buf, &h, &why) == BatchRead::kOk) {
      last_batch = off;
      off += pad_block(h.bytes);
    }
    uint8_t b = 0;
    ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(last_batch + 100)), 1);
    b ^= 0x08;
    ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(last_batch + 100)), 1);
    ::close(fd);
  }
  auto r = ArchiveReader::open(tmp.archive());
  ASSERT_TRUE(r.ok());
  ArchiveEntry e;
  uint64_t n = 0;
  absl::StatusOr<bool> got;
  while ((got = r->next(&e)).ok() && *got) ++n;
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(n, 0u);
  EXPECT_LT(n, 1000u);
  EXPECT_THAT(r->unsettled(), HasSubstr("checksum"));
  auto rec = Recorder::open(ring.open(), small_options(tmp.archive()));
  ASSERT_TRUE(rec.ok());
  EXPECT_GT((*rec)->recovery().torn_bytes, 0u);
  drain(**rec, &now);
  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.seqs, iota(0, 1000));
}

// The newest segment is listed in the catalog as the recorder makes it:
// for a moment its file is missing, or shorter than its header, or
// allocated with a header of zeroes. A reader there (a seek into it, or
// one reading on into it) is told "nothing yet", not damage, and reads on
// once the segment has landed.
TEST(Recorder, TheNewestSegmentBeingCreatedIsNothingYetNotDamage) {
  Recorded arc(1u << 16, 10'000);
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  auto& rec = arc.rec;
  const Catalog cat = (*rec)->writer().catalog();
  ASSERT_GE(cat.segments.size(), 2u);
  ASSERT_FALSE(cat.segments.back().sealed);
  const uint64_t first = cat.segments.back().first_seq;
  const std::string path = tmp.archive() + "/" + segment_name(first);
  const std::string kept = path + ".kept";
  ASSERT_EQ(rename(path.c_str(), kept.c_str()), 0);
  auto restore = [&] {
    unlink(path.c_str());
    ASSERT_EQ(rename(kept.c_str(), path.c_str()), 0);
  };
  for (const char* state : {"missing", "short", "zero header"}) {
    SCOPED_TRACE(state);
    if (std::string(state) != "missing") {
      const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
      ASSERT_GE(fd, 0);
      if (std::string(state) == "zero header") {
        ASSERT_EQ(ftruncate(fd, 1 << 16), 0);
      }
      ::close(fd);
    }
    // A reader that reads on into it, and one that seeks into it.
    auto on = ArchiveReader::open(tmp.archive());
    ASSERT_TRUE(on.ok());
    ASSERT_TRUE(on->seek(first - 10).ok());
    ArchiveEntry e;
    uint64_t got = 0;
    for (;;) {
      auto r = on->next(&e);
      ASSERT_TRUE(r.ok()) << r.status();
      if (!*r) break;
      ++got;
    }
    EXPECT_EQ(got, 10u) << "the records before it";
    EXPECT_THAT(on->unsettled(), HasSubstr("being created"));
    auto into = ArchiveReader::open(tmp.archive());
    ASSERT_TRUE(into.ok());
    ASSERT_TRUE(into->seek(first + 5).ok()) << "a seek into it";
    auto r = into->next(&e);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(*r);
    // Landed: both read on.
    ASSERT_NO_FATAL_FAILURE(restore());
    auto a = on->next(&e);
    ASSERT_TRUE(a.ok() && *a) << a.status();
    EXPECT_EQ(e.seq, first);
    auto b = into->next(&e);
    ASSERT_TRUE(b.ok() && *b) << b.status();
    EXPECT_EQ(e.seq, first + 5);
    ASSERT_EQ(rename(path.c_str(), kept.c_str()), 0);
  }
  ASSERT_NO_FATAL_FAILURE(restore());
  // A segment before the newest that is short is damage, as ever.
  const std::string older = tmp.archive() + "/" + segment_name(cat.segments[0].first_seq);
  ASSERT_EQ(truncate(older.c_str(), 10), 0);  // shorter than its header
  auto d = ArchiveReader::open(tmp.archive());
  ASSERT_TRUE(d.ok());
  const absl::Status st = d->seek(cat.segments[0].first_seq);
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
}

// A recorder on its own thread, as `ringfire record` runs it, behind a
// writer that trickles, then bursts: while records flow it gathers (sleeps)
// instead of parking on the ring, and parks when the ring goes quiet —
// and takes every record, no gap, on a ring a burst fills a quarter of.
TEST(Recorder, GathersWhileRecordsFlowParksWhenQuietAndTakesEveryRecord) {
  Feed feed;
  ASSERT_TRUE(feed.p.ok());
  auto& [ring, tmp, p] = feed;
  RecordOptions o = small_options(tmp.archive());
  o.layout.segment_bytes = 16u << 20;
  o.batch_bytes = 1u << 20;  // batches the size a recording uses: the disk keeps up with a burst
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok());
  std::atomic<bool> done{false};
  std::thread reader([&] {
    for (;;) {
      const uint64_t now = monotonic_ns();
      const bool finished = done.load(std::memory_order_acquire);  // pairs with the writer's release below
      if ((*rec)->poll(now) == 0) {
        if (finished && (*rec)->snapshot().lag == 0) break;
        (*rec)->wait(now, 20'000'000);
      }
    }
  });
  std::vector<std::byte> r(p->record_size());
  auto one = [&] {
    ring::fill_record(r, p->next_seq(), 0);
    p->publish(r.data());
  };
  for (int i = 0; i < 200; ++i) {  // a trickle: a record every 100 us
    one();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (int b = 0; b < 16; ++b) {  // bursts of 16 Ki, a quarter of the ring, 10 ms apart
    for (int i = 0; i < 16 * 1024; ++i) one();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // quiet: it parks
  for (int i = 0; i < 100; ++i) one();
  done.store(true, std::memory_order_release);
  reader.join();
  ASSERT_TRUE((*rec)->flush().ok());
  const uint64_t total = 200 + 16 * 16 * 1024 + 100;
  EXPECT_EQ((*rec)->snapshot().gaps, 0u) << "a lap while it gathered";
  EXPECT_EQ((*rec)->snapshot().records, total);
  EXPECT_GT((*rec)->gathers(), 10u) << "it never gathered";
  EXPECT_GT((*rec)->parks(), 0u) << "it never parked";
  const ReadBack back = read_back(tmp.archive(), 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.seqs, iota(0, total));
  EXPECT_EQ(back.bad, 0u);
}

TEST(Recorder, RetentionRemovesTheOldestSegmentsButNeverOneAReaderHolds) {
  ScopedRing ring(ring::testing::fixed_ring(1u << 18, 64));
  TempDir tmp;
  auto p = ring::Producer::attach(ring.open());
  ASSERT_TRUE(p.ok());
  RecordOptions o = small_options(tmp.archive());
  o.sink.retention.max_bytes = 4 * o.layout.segment_bytes;
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok());
  uint64_t now = 0;
  publish(*p, 10'000);
  drain(**rec, &now);
  // A reader at the oldest segment holds it.
  auto reader = ArchiveReader::open(tmp.archive());
  ASSERT_TRUE(reader.ok());
  const uint64_t first = reader->catalog().segments.front().first_seq;
  ASSERT_TRUE(reader->seek(first).ok());
  publish(*p, 30'000);
  drain(**rec, &now);
  now += 2'000'000'000;
  (*rec)->poll(now);
  ASSERT_TRUE((*rec)->settle());
  EXPECT_GT((*rec)->snapshot().removals_deferred, 0u);
  EXPECT_EQ((*rec)->writer().catalog().segments.front().first_seq, first);
  ArchiveEntry e;
  ASSERT_TRUE(*reader->next(&e));
  EXPECT_EQ(e.seq, first);
  // Let go of it: the oldest go until four segments remain.
  reader = ArchiveReader::open(tmp.archive());
  now += 2'000'000'000;
  (*rec)->poll(now);
  ASSERT_TRUE((*rec)->settle());
  EXPECT_EQ((*rec)->writer().catalog().segments.size(), 4u);
  EXPECT_GT((*rec)->snapshot().segments_removed, 0u);
  struct stat st {};
  EXPECT_NE(stat((tmp.archive() + "/" + segment_name(first)).c_str(), &st), 0);
  const uint64_t oldest = (*rec)->writer().catalog().segments.front().first_seq;
  const ReadBack back = read_back(tmp.archive(), oldest);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.seqs, iota(oldest, 40'000));
  // A range before it is answered as missing, not read from nowhere.
  auto again = ArchiveReader::open(tmp.archive());
  EXPECT_TRUE(absl::IsOutOfRange(again->seek(first)));
}

TEST(Recorder, RefusesAnotherKindOfRingARecreatedRingAndASecondRecorder) {
  ScopedRing ring(ring::testing::fixed_ring(1024, 64));
  ScopedRing other(ring::testing::fixed_ring(1024, 128));
  TempDir tmp;
  auto p = ring::Producer::attach(ring.open());
  ASSERT_TRUE(p.ok());
  publish(*p, 500);
  auto rec = Recorder::open(ring.open(), small_options(tmp.archive()));
  ASSERT_TRUE(rec.ok());
  auto second = Recorder::open(ring.open(), small_options(tmp.archive()));
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("another recorder"));
  uint64_t now = 0;
  drain(**rec, &now);
  rec->reset();
  auto wrong = Recorder::open(other.open(), small_options(tmp.archive()));
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("record size 64 vs 128"));
  ScopedRing fresh(ring::testing::fixed_ring(1024, 64));  // same shape, write_seq 0
  auto recreated = Recorder::open(fresh.open(), small_options(tmp.archive()));
  ASSERT_FALSE(recreated.ok());
  EXPECT_THAT(std::string(recreated.status().message()), HasSubstr("re-created"));
}

// What a reader would refuse is never written: an index interval past
// 64 GiB is refused when the archive is made, not at its first read.
TEST(Recorder, AnArchiveNoReaderWouldTakeIsRefusedWhenItIsMade) {
  TempDir tmp;
  ScopedRing ring(ring::testing::fixed_ring(1024, 64));
  RecordOptions o = small_options(tmp.archive());
  o.layout.index_interval = 1ull << 37;
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_FALSE(rec.ok());
  EXPECT_THAT(std::string(rec.status().message()), HasSubstr("index entry per 137438953472 bytes"));
  EXPECT_FALSE(std::filesystem::exists(tmp.archive() + "/catalog")) << "a catalog was written";
}

// SmallDisk is a 2 MiB tmpfs at `path` (root), unmounted at the end;
// ballast() fills 1,200 KiB of it and says the file's path ("" if it
// could not).
class SmallDisk {
 public:
  explicit SmallDisk(std::string path, const char* size = "size=2m") : path_(std::move(path)) {
    mounted_ = mkdir(path_.c_str(), 0755) == 0 && mount("tmpfs", path_.c_str(), "tmpfs", 0, size) == 0;
  }
  ~SmallDisk() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }
  // fill_but fills all but `leave` bytes into a file named `name`; its path ("" if not).
  std::string fill_but(const std::string& name, uint64_t leave) const {
    struct statvfs fs {};
    if (statvfs(path_.c_str(), &fs) != 0 || fs.f_bavail * fs.f_bsize <= leave) return "";
    const std::string file = path_ + "/" + name;
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd < 0) return "";
    const bool ok = fallocate(fd, 0, 0, static_cast<off_t>(fs.f_bavail * fs.f_bsize - leave)) == 0;
    ::close(fd);
    return ok ? file : "";
  }
  std::string ballast() const {
    const std::string file = path_ + "/ballast";
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd < 0) return "";
    const bool ok = fallocate(fd, 0, 0, 1200 << 10) == 0;
    ::close(fd);
    return ok ? file : "";
  }

 private:
  std::string path_;
  bool mounted_ = false;
};

// record_until_stalled publishes `step` records at a time and records
// them until the disk refuses a write (at most 40 steps); true if it did.
bool record_until_stalled(Recorder& rec, ring::Producer& p, uint64_t step, uint64_t* now) {
  for (int i = 0; i < 40 && !rec.snapshot().stalled; ++i) {
    publish(p, step);
    for (int k = 0; k < 20; ++k) rec.poll(*now += 2'000'000);
    rec.settle();
  }
  return rec.snapshot().stalled;
}

// A full disk stops the recording (counted, said) while the ring goes on;
// recording resumes when space returns, with the lap it took as a gap.
TEST(Recorder, AFullDiskStallsRecordingAndItResumesWhenSpaceReturns) {
  TempDir tmp;
  SmallDisk disk(tmp.path() + "/small");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  const std::string& mnt = disk.path();
  const std::string ballast = disk.ballast();  // most of the 2 MiB, given back later
  ASSERT_FALSE(ballast.empty());
  ScopedRing ring(ring::testing::fixed_ring(4096, 64));
  auto p = ring::Producer::attach(ring.open());
  ASSERT_TRUE(p.ok());
  RecordOptions o = small_options(mnt + "/a");
  o.sink.retry_ns = 5'000'000;
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  uint64_t now = 0;
  // 256 KiB segments: the third does not fit beside the ballast.
  ASSERT_TRUE(record_until_stalled(**rec, *p, 1000, &now));
  EXPECT_GT((*rec)->snapshot().disk_errors, 0u);
  EXPECT_THAT((*rec)->last_error(), HasSubstr("disk is full"));
  const uint64_t stalled_at = (*rec)->snapshot().recorded_end;
  // The ring goes on without it: its writer never waits for a reader.
  const uint64_t before = p->next_seq();
  publish(*p, 10'000);
  EXPECT_EQ(p->next_seq(), before + 10'000);
  ASSERT_EQ(unlink(ballast.c_str()), 0);
  for (int i = 0; i < 2000 && (*rec)->snapshot().stalled; ++i) usleep(1000);
  drain(**rec, &now);
  EXPECT_FALSE((*rec)->snapshot().stalled);
  EXPECT_EQ((*rec)->snapshot().recorded_end, p->next_seq());
  EXPECT_GE((*rec)->snapshot().gaps, 1u) << "the ring lapped it while it waited";
  const ReadBack back = read_back(mnt + "/a", 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.bad, 0u);
  ASSERT_FALSE(back.gaps.empty());
  EXPECT_GE(back.gaps[0].seq, stalled_at);
  EXPECT_EQ(back.seqs.back(), p->next_seq() - 1);
}

// A disk that stalls (here: full, then freed) is taken up by more batch
// buffers, up to the bound: records the ring laps meanwhile are already
// in memory, so nothing is lost while the buffers last, and past the
// bound the ring laps the recorder (a gap) while its memory stays put.
TEST(Recorder, AStallIsTakenUpByMoreBuffersUpToTheirBoundThenTheRingLaps) {
  TempDir tmp;
  SmallDisk disk(tmp.path() + "/small", "size=8m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  const std::string& mnt = disk.path();
  const std::string ballast = disk.fill_but("ballast", 600u << 10);
  ASSERT_FALSE(ballast.empty());
  ScopedRing ring(ring::testing::fixed_ring(1024, 64));
  auto p = ring::Producer::attach(ring.open());
  ASSERT_TRUE(p.ok());
  RecordOptions o = small_options(mnt + "/a");
  o.sink.retry_ns = 5'000'000;
  const uint64_t batch = BatchBuilder::capacity_for(o.batch_bytes, 64);
  o.sink.max_buffer_bytes = 48 * batch;  // ~9,000 records of 64 B
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ((*rec)->snapshot().buffer_bytes, 4 * batch);
  uint64_t now = 0;
  // Fill the disk: the third 256 KiB segment does not fit beside the ballast.
  ASSERT_TRUE(record_until_stalled(**rec, *p, 500, &now));
  // Stalled: 6,000 records (six laps of the ring), each lap read before
  // the next comes: all in buffers made for them.
  for (int i = 0; i < 12; ++i) {
    publish(*p, 500);
    for (int k = 0; k < 4; ++k) (*rec)->poll(now += 2'000'000);
  }
  EXPECT_EQ((*rec)->snapshot().gaps, 0u) << "the buffers took up the stall";
  const uint64_t grown = (*rec)->snapshot().buffer_bytes;
  EXPECT_GT(grown, 4 * batch);
  EXPECT_LE(grown, o.sink.max_buffer_bytes);
  ASSERT_EQ(unlink(ballast.c_str()), 0);
  for (int i = 0; i < 2000 && (*rec)->snapshot().stalled; ++i) usleep(1000);
  drain(**rec, &now);
  EXPECT_EQ((*rec)->snapshot().recorded_end, p->next_seq());
  EXPECT_EQ((*rec)->snapshot().gaps, 0u);
  ReadBack back = read_back(mnt + "/a", 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.bad, 0u);
  EXPECT_TRUE(back.gaps.empty());
  ASSERT_EQ(back.seqs.size(), p->next_seq());
  EXPECT_EQ(back.seqs.back(), p->next_seq() - 1);

  // The grown buffers are kept while a stall may come again, then returned
  // (each its own mapping, unmapped) once none has been needed for
  // trim_after_ns; the first four stay.
  // (Settled after each poll: the simulated 1.5 s between polls is real
  // time the writer has; unsettled, a slow writer's queue needs the extras.)
  for (int i = 0; i < 10; ++i) {
    publish(*p, 100);
    (*rec)->poll(now += o.sink.trim_after_ns / 20);
    ASSERT_TRUE((*rec)->settle(5'000'000'000));
  }
  EXPECT_EQ((*rec)->snapshot().buffer_bytes, grown) << "kept for trim_after_ns";
  for (int i = 0; i < 12; ++i) {
    publish(*p, 100);
    (*rec)->poll(now += o.sink.trim_after_ns / 20);
    ASSERT_TRUE((*rec)->settle(5'000'000'000));
  }
  EXPECT_EQ((*rec)->snapshot().buffer_bytes, 4 * batch) << "returned once unneeded";
  drain(**rec, &now);
  EXPECT_EQ((*rec)->snapshot().recorded_end, p->next_seq());
  EXPECT_EQ((*rec)->snapshot().gaps, 0u);

  // The bound holds: a longer stall (the disk full again) fills every
  // buffer, then the ring laps the recorder, and no buffer is made past it.
  ASSERT_FALSE(disk.fill_but("more", 64u << 10).empty());
  for (int i = 0; i < 200 && !(*rec)->snapshot().stalled; ++i) {
    publish(*p, 500);
    for (int k = 0; k < 4; ++k) (*rec)->poll(now += 2'000'000);
    (*rec)->settle(10'000'000);
  }
  ASSERT_TRUE((*rec)->snapshot().stalled);
  for (int i = 0; i < 60; ++i) {
    publish(*p, 500);
    for (int k = 0; k < 4; ++k) (*rec)->poll(now += 2'000'000);
  }
  EXPECT_LE((*rec)->snapshot().buffer_bytes, o.sink.max_buffer_bytes);
  EXPECT_GT((*rec)->snapshot().buffer_bytes, o.sink.max_buffer_bytes - batch);
  // The lap shows when the recorder reads again.
  ASSERT_EQ(unlink((mnt + "/more").c_str()), 0);
  for (int i = 0; i < 2000 && (*rec)->snapshot().stalled; ++i) usleep(1000);
  drain(**rec, &now);
  EXPECT_EQ((*rec)->snapshot().recorded_end, p->next_seq());
  EXPECT_EQ((*rec)->snapshot().gaps, 1u) << "30,000 records outran the bound";
  back = read_back(mnt + "/a", 0);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.bad, 0u);
  ASSERT_EQ(back.gaps.size(), 1u);
  EXPECT_EQ(back.seqs.size() + (*rec)->snapshot().lost, p->next_seq());
  EXPECT_EQ(back.seqs.back(), p->next_seq() - 1);
}

// A disk that retention can free: a recording stalled on a full disk
// removes its own oldest segments while it retries (it used to wait for
// room that only its retention could make, for good).
TEST(Recorder, AFullDiskIsFreedByTheRecordingsOwnRetentionWhileItRetries) {
  TempDir tmp;
  SmallDisk disk(tmp.path() + "/small");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  const std::string& mnt = disk.path();
  ASSERT_FALSE(disk.ballast().empty());  // it stays: room for three 256 KiB segments beside it
  ScopedRing ring(ring::testing::fixed_ring(4096, 64));
  auto p = ring::Producer::attach(ring.open());
  ASSERT_TRUE(p.ok());
  RecordOptions o = small_options(mnt + "/a");
  o.sink.retry_ns = 5'000'000;
  o.sink.retention.max_bytes = 256u << 10;            // one sealed segment kept
  o.sink.retention_every_ns = 3600'000'000'000ull;     // its schedule never comes in this test
  auto rec = Recorder::open(ring.open(), o);
  ASSERT_TRUE(rec.ok()) << rec.status();
  uint64_t now = 0;
  for (int i = 0; i < 40 && (*rec)->snapshot().segments_removed == 0; ++i) {
    publish(*p, 1000);
    for (int k = 0; k < 20; ++k) (*rec)->poll(now += 2'000'000);
    (*rec)->settle();
    for (int w = 0; w < 200 && (*rec)->snapshot().stalled; ++w) usleep(1000);
  }
  EXPECT_GT((*rec)->snapshot().disk_errors, 0u) << "the disk never filled: the test proves nothing";
  EXPECT_GT((*rec)->snapshot().segments_removed, 0u) << "retention never ran while the write was retried";
  drain(**rec, &now);
  EXPECT_FALSE((*rec)->snapshot().stalled);
  EXPECT_EQ((*rec)->snapshot().recorded_end, p->next_seq());
  // What is kept reads back whole, up to the last record published.
  ArchiveReader r = *ArchiveReader::open(mnt + "/a");
  auto first = r.first_seq();
  ASSERT_TRUE(first.ok()) << first.status();
  const ReadBack back = read_back(mnt + "/a", *first);
  ASSERT_TRUE(back.error.ok()) << back.error;
  EXPECT_EQ(back.bad, 0u);
  ASSERT_FALSE(back.seqs.empty());
  EXPECT_EQ(back.seqs.back(), p->next_seq() - 1);
}

}  // namespace
}  // namespace ringfire::archive
