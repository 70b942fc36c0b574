// replay_feed.h — an archive read ahead on a thread of its own, for a
// reader that must never wait on the disk (a serve's conductor, which
// answers every session of its engine). The feed's thread runs an
// ArchiveReader and fills a bounded queue of chunks of entries; the caller
// takes them with the reader's own calls — seek, next, first_seq — answered
// from the queue, and Unavailable while the thread has not read that far
// yet (try again shortly: the answer never waits).
//
// Threads: one caller (the conductor) and the feed's thread. They share
// only `mu_`'s fields; the thread holds it to hand over a chunk or take a
// request, never across a read. The caller's current chunk is its own.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "archive/archive_reader.h"
#include "archive/format.h"

namespace ringfire::archive {

class ReplayFeed {
 public:
  // open: the archive at `dir` (its catalog read here, on the caller: the
  // kind of ring it holds is known at once), and its reading thread
  // started, idle until the first seek. `ahead_bytes`: what it reads ahead
  // of the caller at most.
  static absl::StatusOr<std::unique_ptr<ReplayFeed>> open(const std::string& dir, size_t ahead_bytes = 4u << 20);
  ~ReplayFeed();  // stops the thread and joins it
  ReplayFeed(const ReplayFeed&) = delete;
  ReplayFeed& operator=(const ReplayFeed&) = delete;

  // catalog: as it was when the feed opened.
  const Catalog& catalog() const { return catalog_; }
  // seek: the next entry will be the first at or after `seq`. Ok at once
  // when the feed stands there already (what next() hands out next starts
  // at `seq`); else the thread is sent there and Unavailable is answered
  // until it has gone, then what the reader said (Ok, OutOfRange — with
  // first_seq() then known — or the error).
  absl::Status seek(uint64_t seq);
  // first_seq: the archive's oldest sequence as the thread found it when a
  // seek answered OutOfRange (else FailedPrecondition: ask after one).
  absl::StatusOr<uint64_t> first_seq();
  // next: as ArchiveReader::next, from what the thread read: true with an
  // entry (its bytes valid until the next call), false at the archive's
  // end for now (the thread looks again every few milliseconds for what a
  // recorder adds), the error where the thread met one (damage: nothing of
  // the damaged batch was queued); Unavailable when the thread has not
  // read this far yet, or stands at a segment retention is removing.
  absl::StatusOr<bool> next(ArchiveEntry* e);

  struct Counters {
    uint64_t chunks = 0;       // chunks the thread handed over
    uint64_t seeks = 0;        // seeks it was sent on
    uint64_t not_yet = 0;      // next() or seek() calls answered Unavailable
  };
  Counters counters() const;

 private:
  // One entry of a chunk: a record (bytes [offset, offset + len) of the
  // chunk's data) or a gap the recorder took.
  struct Rec {
    uint64_t seq = 0;
    uint64_t gap_end = 0;
    uint64_t gap_lost = 0;
    uint32_t offset = 0;
    uint32_t len = 0;
    bool gap = false;
  };
  struct Chunk {
    std::vector<uint8_t> data;
    std::vector<Rec> recs;
    uint64_t gen = 0;  // the seek it belongs to
  };
  // What the thread found past the last chunk queued.
  enum class Tail : uint8_t { kReading, kEnd, kError };

  ReplayFeed(ArchiveReader reader, size_t ahead_bytes);
  void run();                 // the thread
  void fill(uint64_t gen);    // the thread: reads chunks for seek `gen` until told otherwise
  static bool read_one(ArchiveReader& r, Chunk* c, absl::StatusOr<bool>* got);

  Catalog catalog_;
  const size_t ahead_bytes_;

  mutable std::mutex mu_;
  std::condition_variable cv_;    // the thread waits on it: a request, room, or stop
  bool stop_ = false;
  uint64_t gen_ = 0;              // the latest seek asked of the thread (0: none)
  uint64_t target_ = 0;           // ... to where
  bool settled_ = false;          // the thread has answered it: seek_status_
  absl::Status seek_status_;
  uint64_t first_seq_ = UINT64_MAX;
  std::deque<Chunk> queue_;       // chunks of gen_, in order
  size_t queued_bytes_ = 0;
  std::vector<Chunk> spare_;      // chunks handed back, for reuse
  Tail tail_ = Tail::kReading;    // past the last queued chunk (of gen_)
  absl::Status tail_error_;
  Counters counters_;

  // The caller's own (no lock): the chunk it reads, and where it stands.
  Chunk cur_;
  size_t cur_at_ = 0;
  uint64_t deliver_pos_ = UINT64_MAX;  // the sequence after the last entry handed out (UINT64_MAX: no seek yet)

  ArchiveReader reader_;  // the thread's once it runs
  std::thread thread_;
};

}  // namespace ringfire::archive
