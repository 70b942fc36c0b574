// consumer.h — a reader of a fixed-slot ring. Header-only hot path. Each
// reader keeps its own cursor, never blocks the writer, reports how many
// records it lost when lapped, skips holes on sparse (mirror) rings, and
// never returns a torn record.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "ring/registry.h"
#include "ring/ring_file.h"
#include "ring/wait.h"
#include "ring/slot.h"

namespace ringfire::ring {

// StartPosition says where a new reader begins.
struct StartPosition {
  enum class Kind : uint8_t { kLatest, kOldest, kSequence };
  Kind kind = Kind::kLatest;
  uint64_t seq = 0;

  static StartPosition latest() { return {Kind::kLatest, 0}; }
  static StartPosition oldest() { return {Kind::kOldest, 0}; }
  static StartPosition at(uint64_t seq) { return {Kind::kSequence, seq}; }
};

// ReadResult is one try_read outcome. `lost` counts records the writer
// overwrote before this reader got to them, since the previous call. On a
// sparse ring the sequences skipped when lapped may include holes the reader
// cannot tell apart from records, so there `lost` is an upper bound; holes
// stepped over in order are counted separately (holes_skipped).
struct ReadResult {
  bool ok = false;
  uint64_t seq = 0;
  uint64_t lost = 0;
};

// SlotCursor is the cursor logic shared by Consumer and BlobConsumer: it
// reads slot payloads of `len` bytes in sequence order.
class SlotCursor {
 public:
  SlotCursor(const RingFile& file, StartPosition start);

  uint64_t cursor() const { return cursor_; }
  uint64_t holes_skipped() const { return holes_; }
  // published: one past the writer's last sequence. A hint (relaxed): next()
  // itself loads write_seq with acquire before it reads a slot.
  uint64_t published() const { return header_->write_seq.load(std::memory_order_relaxed); }
  // seek moves the cursor to `seq`; the next read finds it, or the lap.
  void seek(uint64_t seq) { cursor_ = seq; }
  // park waits (at most timeout_ns) for the writer to publish past the
  // cursor: what an idle reader does instead of sleeping blind.
  void park(uint64_t timeout_ns) { wait_for_write(*header_, cursor_, timeout_ns); }

  // next copies the next record's `len` payload bytes into `dst`.
  ReadResult next(std::byte* dst, size_t len) {
    ReadResult r;
    for (;;) {
      const uint64_t seq = cursor_;
      switch (slot_read(slots_.slot(seq), seq, dst, len)) {
        case SlotState::kRecord:
          cursor_ = seq + 1;
          r.ok = true;
          r.seq = seq;
          return r;
        case SlotState::kNotYet:
          if (!sparse_ || !skip_hole()) return r;
          break;
        case SlotState::kLapped:
          // A lap the writer has not published past the cursor (write_seq
          // at or below it) is looked at again at the next call: a writer
          // between committing and publishing a later lap publishes it;
          // slot words past anything published — a ring a hostile or
          // broken writer damaged — are never stepped through one at a
          // time. So a call steps over at most a capacity's worth.
          if (!published_past_cursor()) return r;
          r.lost += catch_up();
          break;
      }
    }
  }

 private:
  // published_end: write_seq, never past kMaxSeq (a damaged header's).
  uint64_t published_end() const {
    // Acquire: pairs with the release store in SequenceWriter::finish; every
    // slot committed below write_seq is visible to the reads that follow.
    const uint64_t ws = header_->write_seq.load(std::memory_order_acquire);
    return ws < kMaxSeq ? ws : kMaxSeq;
  }
  bool published_past_cursor() const { return published_end() > cursor_; }

  // skip_hole advances past a sequence a sparse writer never wrote. Returns
  // false when the writer has not yet reached the cursor.
  bool skip_hole() {
    const uint64_t ws = published_end();
    if (ws <= cursor_) return false;
    // Acquire: pairs with slot_commit's release store of the word.
    const uint64_t word = slots_.slot(cursor_)->word.load(std::memory_order_acquire);
    if (slot_classify(word, cursor_) != SlotState::kNotYet) return true;  // re-read it
    cursor_ = ws - cursor_ > capacity_ ? ws - capacity_ : cursor_ + 1;
    ++holes_;
    return true;
  }

  // catch_up jumps to the oldest sequence the ring may still hold and returns
  // how many records were lost.
  uint64_t catch_up() {
    const uint64_t ws = published_end();
    uint64_t oldest = ws > capacity_ ? ws - capacity_ : 0;
    if (oldest <= cursor_) oldest = cursor_ + 1;  // the slot already holds a later record
    uint64_t skipped = oldest - cursor_;
    if (sparse_) {
      // Acquire: pairs with the release store in SequenceWriter::begin. A
      // begin newer than this end makes the pair invalid (begin >= end).
      const uint64_t end = header_->hole_end.load(std::memory_order_acquire);
      const uint64_t begin = header_->hole_begin.load(std::memory_order_relaxed);
      const uint64_t lo = begin > cursor_ ? begin : cursor_;
      const uint64_t hi = end < oldest ? end : oldest;
      if (begin < end && lo < hi) {
        holes_ += hi - lo;
        skipped -= hi - lo;
      }
    }
    cursor_ = oldest;
    return skipped;
  }

  SlotArray slots_;
  RingHeader* header_;
  uint64_t capacity_;
  bool sparse_;
  uint64_t cursor_ = 0;
  uint64_t holes_ = 0;
};

// Consumer reads fixed-size records. It owns its mapping of the ring.
class Consumer {
 public:
  // attach opens a reader at `start`. With a non-empty `reader_name` it also
  // claims a reader-registry entry so `ringfire stat` can show its lag.
  static absl::StatusOr<Consumer> attach(RingFile file, StartPosition start,
                                         std::string_view reader_name = {});

  uint32_t record_size() const { return record_size_; }
  uint64_t cursor() const { return cursor_.cursor(); }
  uint64_t published() const { return cursor_.published(); }
  uint64_t total_lost() const { return lost_; }
  uint64_t holes_skipped() const { return cursor_.holes_skipped(); }
  const RingFile& file() const { return file_; }
  void seek(uint64_t seq) { cursor_.seek(seq); }
  void park(uint64_t timeout_ns) { cursor_.park(timeout_ns); }

  // try_read copies the next record (record_size() bytes) into `out`.
  ReadResult try_read(std::byte* out) {
    ReadResult r = cursor_.next(out, record_size_);
    lost_ += r.lost;
    if (!r.ok) registry_.publish(cursor_.cursor(), lost_);
    return r;
  }

  // read_batch reads up to `max` records into `out` (max * record_size()
  // bytes) and their sequences into `seqs`; returns how many. Lost records
  // are added to `*lost`.
  size_t read_batch(std::byte* out, uint64_t* seqs, size_t max, uint64_t* lost) {
    size_t n = 0;
    while (n < max) {
      ReadResult r = cursor_.next(out + n * record_size_, record_size_);
      *lost += r.lost;
      lost_ += r.lost;
      if (!r.ok) break;
      seqs[n++] = r.seq;
    }
    registry_.publish(cursor_.cursor(), lost_);
    return n;
  }

 private:
  Consumer(RingFile file, StartPosition start);

  RingFile file_;
  SlotCursor cursor_;
  uint32_t record_size_;
  uint64_t lost_ = 0;
  ReaderSlot registry_;
};

}  // namespace ringfire::ring
