// replay_feed.h — an archive read ahead on a thread of its own, for a
// reader that must never wait on the disk (a serve's conductor, which
// answers every session of its engine). The feed's thread runs an
// ArchiveReader and fills a bounded queue of chunks of entries; the caller
// takes them with the reader's own calls — seek, next, first_seq — answered
// from the queue, and Unavailable while the thread has not read that far
// (or looked) yet: try again shortly; no call waits.
//
// Threads: one caller (the conductor) and the feed's thread. They share
// only `Shared` (under its mutex, never held across a read). The caller's
// current chunk is its own. The feed's destructor does not wait for the
// thread: it tells it to stop, and the thread, which co-owns `Shared`,
// frees it once its read in progress is over.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
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
  // started, idle until the first seek. Unavailable while 32 feeds'
  // threads are still alive in the process (stopped ones end after the
  // read in flight): try again. `ahead_bytes`: how far it reads
  // ahead of the caller (it stops once that much waits; a chunk read past
  // the bound is the most it overshoots).
  static absl::StatusOr<std::unique_ptr<ReplayFeed>> open(const std::string& dir, size_t ahead_bytes = 4u << 20);
  ~ReplayFeed();
  ReplayFeed(const ReplayFeed&) = delete;
  ReplayFeed& operator=(const ReplayFeed&) = delete;

  // catalog: as it was when the feed opened.
  const Catalog& catalog() const { return catalog_; }
  // seek: the next entry will be the first at or after `seq`. Ok at once
  // when what was read already says where that is: where the feed stands,
  // ahead of it within what the thread has read (skipped), or back at the
  // last entry handed out (put back: a caller that read one too far).
  // Else the thread is sent there, and Unavailable is answered until it
  // has gone; then what the reader said: Ok, OutOfRange (first_seq() then
  // known; said again for that seq), or an error (said once: the next seek
  // sends the thread again).
  absl::Status seek(uint64_t seq);
  // first_seq: the archive's oldest sequence as the thread found it when a
  // seek answered OutOfRange (else FailedPrecondition: ask after one).
  absl::StatusOr<uint64_t> first_seq();
  // next: as ArchiveReader::next, from what the thread read: true with an
  // entry (its bytes valid until the next call), false at the archive's
  // end — only once the thread has looked after this caller asked (so an
  // end is never older than the question: the first call at the end is
  // answered Unavailable and sends it to look); the error where the thread
  // met one (damage: nothing of the damaged batch was queued; said once).
  // Unavailable when the thread has not read this far, or stands at a
  // segment retention is removing.
  absl::StatusOr<bool> next(ArchiveEntry* e);

  struct Counters {
    uint64_t chunks = 0;    // chunks the thread handed over
    uint64_t seeks = 0;     // seeks it answered
    uint64_t not_yet = 0;   // calls answered Unavailable
    uint64_t skipped = 0;   // seeks ahead answered from what was read (a put back is not counted)
  };
  Counters counters() const;

 private:
  struct Shared;
  struct Rec;
  struct Chunk;
  ReplayFeed() = default;
  bool skip_to(uint64_t seq);  // with sh_'s lock held

  Catalog catalog_;
  std::shared_ptr<Shared> sh_;
  // The caller's own (no lock): the chunk it reads, and where it stands.
  std::unique_ptr<Chunk> cur_;
  size_t cur_at_ = 0;
  uint64_t deliver_pos_ = UINT64_MAX;  // the sequence after the last entry handed out
  uint64_t prev_pos_ = 0;              // ... before it (a put back returns there)
  bool prev_valid_ = false;            // the last entry handed out is cur_'s [cur_at_ - 1]
};

}  // namespace ringfire::archive
