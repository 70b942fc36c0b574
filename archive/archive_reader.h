// archive_reader.h — reading an archive in sequence order: a lookup goes
// catalog → segment (binary search on first sequences) → that segment's
// index (one read) → a scan of at most index_interval bytes; then batches
// follow one another, each checked whole (checksum, entries, the chain of
// sequences) before any of its records is handed out. A reader holds a
// shared flock on the segment it reads, so retention leaves that segment
// (and everything newer) alone. One thread.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "archive/batch_io.h"
#include "archive/format.h"

namespace ringfire::archive {

// ArchiveEntry is what next() hands out: a record, or a gap the recorder
// took ([seq, gap_end), gap_lost records among it). Holes of a sparse ring
// are simply sequences with no entry.
struct ArchiveEntry {
  bool gap = false;
  uint64_t seq = 0;
  uint64_t gap_end = 0;
  uint64_t gap_lost = 0;
  std::span<const uint8_t> bytes;  // valid until the next call
};

// ReaderCounters say what lookups cost (perf/archive_bench checks them).
struct ReaderCounters {
  uint64_t catalog_loads = 0;   // reads of a catalog that changed (or the first)
  uint64_t segments_opened = 0;
  uint64_t index_reads = 0;     // one pread of a segment's index each
  uint64_t batches_read = 0;
  uint64_t index_misses = 0;    // an index entry that did not match its batch
};

class ArchiveReader {
 public:
  static absl::StatusOr<ArchiveReader> open(const std::string& dir);
  ArchiveReader(ArchiveReader&&) noexcept;
  ArchiveReader& operator=(ArchiveReader&&) noexcept;
  ~ArchiveReader();

  const Catalog& catalog() const { return catalog_; }
  // first_seq: the oldest sequence the archive holds (reloads the catalog).
  absl::StatusOr<uint64_t> first_seq();
  // seek makes the next entry the first at or after `seq`. OutOfRange when
  // `seq` is older than the archive's first segment (retention removed it
  // or it was never recorded); reading then starts nowhere.
  absl::Status seek(uint64_t seq);
  // next returns true with the next entry, false when the archive has
  // nothing more yet (a recorder may add more), or an error naming the
  // file, the offset and the last good sequence when a batch is damaged
  // (DataLoss) — no entry of a damaged batch is ever handed out.
  absl::StatusOr<bool> next(ArchiveEntry* e);
  // position: the next sequence the reader covers (holes included).
  uint64_t position() const { return expected_; }
  // unsettled: when next() returned false at a batch of the open segment
  // that does not check out yet (being written, or a damaged tail that
  // the recorder has not written past), why; "" otherwise.
  const std::string& unsettled() const { return unsettled_; }
  const ReaderCounters& counters() const { return counters_; }
  // never_wait: a segment retention holds (it is removing it) is not
  // waited for: seek and next answer Unavailable, and the caller tries
  // again shortly (a serve's conductor). Nor is a segment's shared lock
  // kept once it is open: retention may remove it under this reader (its
  // descriptor still reads it whole), so a remote mirror's replay never
  // holds retention back. Otherwise the reader waits the moment it takes,
  // and holds what it reads (a command-line reader).
  void never_wait() { never_wait_ = true; }
  // release: closes the segment it stands in (its shared lock, if it kept
  // one, goes with it); a seek must come before the next read.
  void release() { close_segment(); }

 private:
  ArchiveReader() = default;
  absl::Status open_segment(size_t i);
  absl::Status reload_catalog(bool force = false);
  absl::Status damage(const std::string& why) const;
  void close_segment();

  std::string dir_;
  Catalog catalog_;
  SegmentLimits limits_;
  size_t seg_ = 0;          // index into catalog_.segments
  int seg_fd_ = -1;
  uint64_t offset_ = 0;     // next batch's offset in the open segment
  uint64_t expected_ = 0;   // next batch's first_seq (the chain)
  uint64_t skip_below_ = 0;
  uint64_t last_good_ = 0;
  bool any_good_ = false;
  bool never_wait_ = false;
  std::vector<uint8_t> buf_;
  BatchHeader batch_;
  bool in_batch_ = false;
  EntryWalker walker_{nullptr, BatchHeader{}};
  ReaderCounters counters_;
  std::string unsettled_;
  ino_t catalog_ino_ = 0;   // the catalog loaded: reloaded only when replaced
  off_t catalog_size_ = 0;
  timespec catalog_ctime_{};
};

// SegmentScan is what scan_segment finds walking one segment's batches.
struct SegmentScan {
  uint64_t end_seq = 0;     // where its chain of whole batches ends
  uint64_t batches = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;       // batch bytes
  uint64_t gaps = 0;
  uint64_t lost = 0;        // records the gaps lost
  std::vector<ArchiveEntry> first_gaps;  // up to 64 of them
  std::string damage;       // empty when every batch checked out
};

// scan_segment checks every batch of segment `i` of `catalog` in `dir`.
SegmentScan scan_segment(const std::string& dir, const Catalog& catalog, size_t i);

}  // namespace ringfire::archive
