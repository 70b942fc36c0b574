// replay_feed_test.cc — an archive read ahead on the feed's thread, taken
// through the reader's own calls without ever waiting: every record in
// order from any seek, what a recorder adds after the end, a range older
// than the archive answered OutOfRange with the archive's first sequence,
// damage met after the last good record and nothing of the damaged batch,
// and a read-ahead that stops at its bound while nobody reads.
#include "archive/replay_feed.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "archive/recorder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ring/check_record.h"
#include "ring/producer.h"
#include "tests/archive/recording.h"
#include "tests/ring/scoped_ring.h"
#include "tests/temp_dir.h"

namespace ringfire::archive {
namespace {

using testing::drain;
using testing::flip_byte;
using testing::iota;
using testing::publish;
using testing::Recorded;
using ::testing::HasSubstr;

// status_of: a Status, or a StatusOr's (for answered()).
absl::Status status_of(const absl::Status& s) { return s; }
template <typename T>
absl::Status status_of(const absl::StatusOr<T>& s) { return s.status(); }

// Answered: a call retried while it says Unavailable (the thread has not
// got there yet), as the conductor retries it a millisecond later; at most 10 s.
template <typename Call>
auto answered(Call call) {
  auto r = call();
  for (int i = 0; i < 10'000 && absl::IsUnavailable(status_of(r)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    r = call();
  }
  return r;
}

struct Read {
  std::vector<uint64_t> seqs;
  uint64_t bad = 0;
  absl::StatusOr<bool> last = true;  // what ended the read: false (the end), or an error
};

// read_all: from a seek to `from`, every entry to the end (or an error).
Read read_all(ReplayFeed& f, uint64_t from) {
  Read out;
  const absl::Status st = answered([&] { return f.seek(from); });
  if (!st.ok()) {
    out.last = st;
    return out;
  }
  ArchiveEntry e;
  for (;;) {
    out.last = answered([&] { return f.next(&e); });
    if (!out.last.ok() || !*out.last) return out;
    EXPECT_FALSE(e.gap);
    out.seqs.push_back(e.seq);
    if (ring::check_record(reinterpret_cast<const std::byte*>(e.bytes.data()), e.bytes.size(), e.seq) !=
        ring::CheckVerdict::kOk) {
      ++out.bad;
    }
  }
}

TEST(ReplayFeed, HandsEveryRecordInOrderFromAnySeekAndWhatTheRecorderAddsAfterTheEnd) {
  Recorded arc(1u << 16, 20'000);
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  auto& p = arc.p;
  auto& rec = arc.rec;
  auto& now = arc.now;
  auto feed = ReplayFeed::open(tmp.archive());
  ASSERT_TRUE(feed.ok()) << feed.status();
  EXPECT_TRUE(absl::IsUnavailable((*feed)->seek(0))) << "a first seek answered before the thread went there";
  const Read all = read_all(**feed, 0);
  ASSERT_TRUE(all.last.ok()) << all.last.status();
  EXPECT_FALSE(*all.last);
  EXPECT_EQ(all.seqs, iota(0, 20'000));
  EXPECT_EQ(all.bad, 0u);
  // Somewhere else: from there on, read again.
  const Read mid = read_all(**feed, 12'345);
  EXPECT_EQ(mid.seqs, iota(12'345, 20'000));
  // At the end, a seek to where it stands is answered at once (no re-read).
  EXPECT_TRUE((*feed)->seek(20'000).ok());
  // From what was read: back one entry (a caller that read one too far),
  // and ahead within the read-ahead, each answered at once.
  {
    ASSERT_TRUE(answered([&] { return (*feed)->seek(100); }).ok());
    ArchiveEntry x;
    for (uint64_t k = 100; k <= 120; ++k) {
      ASSERT_TRUE(*answered([&] { return (*feed)->next(&x); }));
      ASSERT_EQ(x.seq, k);
    }
    const uint64_t skipped = (*feed)->counters().skipped;
    EXPECT_TRUE((*feed)->seek(120).ok()) << "the last entry was not put back";
    ASSERT_TRUE(*answered([&] { return (*feed)->next(&x); }));
    EXPECT_EQ(x.seq, 120u);
    EXPECT_TRUE((*feed)->seek(3'000).ok()) << "a seek ahead within what was read went to the disk";
    ASSERT_TRUE(*answered([&] { return (*feed)->next(&x); }));
    EXPECT_EQ(x.seq, 3'000u);
    EXPECT_EQ((*feed)->counters().skipped, skipped + 1);
    ASSERT_TRUE(answered([&] { return (*feed)->seek(20'000); }).ok());
  }
  // What the recorder adds is found past the end.
  publish(*p, 5'000);
  drain(**rec, &now);
  std::vector<uint64_t> more;
  ArchiveEntry e;
  for (int i = 0; i < 10'000 && more.size() < 5'000; ++i) {
    auto got = (*feed)->next(&e);
    if (got.ok() && *got) {
      more.push_back(e.seq);
    } else {
      ASSERT_TRUE(got.ok() || absl::IsUnavailable(got.status())) << got.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  EXPECT_EQ(more, iota(20'000, 25'000));
  EXPECT_GT((*feed)->counters().chunks, 2u);
}

TEST(ReplayFeed, ARangeOlderThanTheArchiveIsOutOfRangeWithTheArchivesFirstSequence) {
  Recorded arc(4096, 10'000);  // the ring lapped: a recorder starts at its oldest
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  auto feed = ReplayFeed::open(tmp.archive());
  ASSERT_TRUE(feed.ok());
  const uint64_t first = (*feed)->catalog().segments.front().first_seq;
  ASSERT_GT(first, 0u);
  EXPECT_FALSE((*feed)->first_seq().ok()) << "a first sequence before any seek said so";
  const absl::Status st = answered([&] { return (*feed)->seek(0); });
  EXPECT_TRUE(absl::IsOutOfRange(st)) << st;
  EXPECT_TRUE(absl::IsOutOfRange((*feed)->seek(0))) << "asked again, the answer changed";
  auto f = (*feed)->first_seq();
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, first);
  const Read from_first = read_all(**feed, first);
  EXPECT_EQ(from_first.seqs, iota(first, 10'000));
}

TEST(ReplayFeed, DamageIsMetAfterTheLastGoodRecordAndNothingOfTheDamagedBatch) {
  Recorded arc(1u << 16, 10'000);
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  auto& rec = arc.rec;
  const Catalog cat = (*rec)->writer().catalog();
  ASSERT_GE(cat.segments.size(), 3u);
  const std::string victim = tmp.archive() + "/" + segment_name(cat.segments[1].first_seq);
  const uint64_t offset = kSegmentHeaderBytes + 2 * (16u << 10) + 5000;  // inside its third batch
  ASSERT_NO_FATAL_FAILURE(flip_byte(victim, offset));
  auto feed = ReplayFeed::open(tmp.archive());
  ASSERT_TRUE(feed.ok());
  const Read r = read_all(**feed, 0);
  ASSERT_FALSE(r.last.ok());
  EXPECT_TRUE(absl::IsDataLoss(r.last.status())) << r.last.status();
  EXPECT_THAT(std::string(r.last.status().message()), HasSubstr(victim));
  ASSERT_FALSE(r.seqs.empty());
  EXPECT_THAT(std::string(r.last.status().message()), HasSubstr("last good sequence " + std::to_string(r.seqs.back())));
  EXPECT_EQ(r.seqs, iota(0, r.seqs.back() + 1));
  EXPECT_EQ(r.bad, 0u);
  // Said once: asked again, the thread reads it again (a transient error
  // is not kept for good), and meets the damage again.
  ArchiveEntry e;
  EXPECT_TRUE(absl::IsUnavailable((*feed)->next(&e).status()));
  const Read again = read_all(**feed, r.seqs.back() + 1 - 10);
  EXPECT_TRUE(absl::IsDataLoss(again.last.status())) << again.last.status();
  EXPECT_EQ(again.seqs, iota(r.seqs.back() + 1 - 10, r.seqs.back() + 1));
}

TEST(ReplayFeed, ReadsAheadNoFurtherThanItsBoundWhileNobodyReads) {
  Recorded arc(1u << 18, 200'000);  // ~16 MB of archive
  ASSERT_TRUE(arc.ok());
  auto& tmp = arc.tmp;
  // open_segments: segment files this process has open (the recorder has its newest).
  const auto open_segments = [] {
    int n = 0;
    for (const auto& f : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      n += std::filesystem::read_symlink(f.path(), ec).extension() == ".seg" ? 1 : 0;
    }
    return n;
  };
  const int recorders = open_segments();
  auto feed = ReplayFeed::open(tmp.archive(), 2u << 20);
  ASSERT_TRUE(feed.ok());
  ASSERT_TRUE(answered([&] { return (*feed)->seek(0); }).ok());
  for (int i = 0; i < 10'000 && (*feed)->counters().chunks == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Retention is never held back by it: every segment could be taken by
  // retention's exclusive try-lock, even the one it is reading now (a mirror that
  // did not read held retention back for as long as it liked, helper-42).
  int segments = 0;
  for (const auto& f : std::filesystem::directory_iterator(tmp.archive())) {
    if (f.path().extension() != ".seg") continue;
    ++segments;
    const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0) << f.path() << " is held by the feed";
    ::close(fd);
  }
  EXPECT_GT(segments, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // The archive is 49 chunks (4,096 records of 64 bytes make 256 KiB;
  // ~426 KB each as queued, with their entries); 2 MiB ahead is five of
  // them (the fifth read while four waited): never the whole archive.
  const uint64_t ahead = (*feed)->counters().chunks;
  EXPECT_GE(ahead, 1u);
  EXPECT_LE(ahead, 6u) << "read ahead past its bound";
  // Parked (nobody took anything for 100 ms), it has no segment open
  // either: one retention removed meanwhile is not kept on disk by it.
  for (int i = 0; i < 500 && open_segments() != recorders; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(open_segments(), recorders) << "the parked feed keeps its segment open";
  // Reading lets it go on, in order; a seek while it reads goes there.
  ArchiveEntry e;
  uint64_t next = 0;
  for (; next < 50'000; ++next) {
    auto got = answered([&] { return (*feed)->next(&e); });
    ASSERT_TRUE(got.ok() && *got) << got.status();
    ASSERT_EQ(e.seq, next);
  }
  next = 150'000;
  ASSERT_TRUE(answered([&] { return (*feed)->seek(150'000); }).ok());
  for (;;) {
    auto got = answered([&] { return (*feed)->next(&e); });
    ASSERT_TRUE(got.ok()) << got.status();
    if (!*got) break;
    ASSERT_EQ(e.seq, next);
    ++next;
  }
  EXPECT_EQ(next, 200'000u);
  EXPECT_LT((*feed)->counters().chunks, 40u) << "the seek read the middle it skipped";
}

}  // namespace
}  // namespace ringfire::archive
