// producer.h — the single writer of a fixed-slot ring. Header-only hot path:
// publish copies one record into the next slot with the slot protocol and then
// advances write_seq. The writer never waits for readers (latest wins).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

#include "absl/status/statusor.h"
#include "ring/ring_file.h"
#include "ring/slot.h"
#include "ring/wait.h"

namespace ringfire::ring {

// SequenceWriter owns the writer side of any ring: the writer lock, the next
// sequence, and the write_seq publication. Producer and BlobProducer build on
// it. Writer thread only.
class SequenceWriter {
 public:
  // attach takes the writer lock and continues at the ring's write_seq. A
  // record that a killed writer committed but did not announce is adopted.
  static absl::StatusOr<SequenceWriter> attach(RingFile file);

  // next_seq is the sequence the next publish will use.
  uint64_t next_seq() const { return next_; }
  const RingFile& file() const { return file_; }

  // accepts says whether `seq` may be published next: exactly next_seq(), or
  // any later sequence on a sparse ring.
  bool accepts(uint64_t seq) const { return seq == next_ || (seq > next_ && sparse_); }

  // begin opens slot `seq` for writing and returns its payload.
  std::byte* begin(uint64_t seq) {
    if (seq != next_) {
      header_->hole_begin.store(next_, std::memory_order_relaxed);
      // Release: pairs with the acquire load of hole_end in
      // SlotCursor::catch_up, which then sees this hole_begin or a later one.
      header_->hole_end.store(seq, std::memory_order_release);
    }
    slot_begin_write(file_.slot(seq), seq);
    return file_.payload(seq);
  }
  // finish commits `seq` and announces it.
  void finish(uint64_t seq) {
    slot_commit(file_.slot(seq), seq);
    next_ = seq + 1;
    // Release: pairs with the acquire loads of write_seq in Consumer (start
    // position, hole detection, lap recovery).
    header_->write_seq.store(next_, std::memory_order_release);
    // A parked reader asked to be woken (see RingHeader::sleepers).
    if (!defer_wakes_) wake_parked();
  }
  // defer_wakes: finish() never wakes a parked reader; the writer calls
  // wake_parked() itself, once for a run of records (a mirror's step: one
  // fence a step, not one a record) or once it may make a system call (a
  // writer that publishes under a lock held by others: the stream mux's node).
  void defer_wakes() { defer_wakes_ = true; }
  // wake_parked wakes the ring's parked readers, if any asked (any thread
  // that holds the ring open may call it, after the write_seq it announces).
  void wake_parked() const {
    // Seq_cst fence: pairs with the parking reader's seq_cst store of
    // sleepers before its look at write_seq (wait_for_write): a store-load
    // pair on each side, so either that look sees this write_seq or this
    // load sees sleepers set. Without it the CPU ran the load before the
    // store was visible and a reader slept through a publish (about one
    // park in 50,000-300,000 of tests/ring/wait_test.cc on this VM, 2 us
    // or 20 us of looking after arming alike). ~25-35 ns per call across
    // cores (perf/ring_crosscore).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (header_->sleepers.load(std::memory_order_relaxed) != 0) wake_readers(*header_);
  }

 private:
  explicit SequenceWriter(RingFile file);
  RingFile file_;
  RingHeader* header_;
  uint64_t next_ = 0;
  bool sparse_ = false;
  bool defer_wakes_ = false;
};

// Producer publishes fixed-size records (exactly slot_size bytes each).
class Producer {
 public:
  static absl::StatusOr<Producer> attach(RingFile file);

  uint64_t next_seq() const { return w_.next_seq(); }
  uint32_t record_size() const { return record_size_; }
  const RingFile& file() const { return w_.file(); }
  // defer_wakes / wake_parked: see SequenceWriter.
  void defer_wakes() { w_.defer_wakes(); }
  void wake_parked() const { w_.wake_parked(); }

  // publish writes one record of record_size() bytes and returns its sequence.
  uint64_t publish(const void* record) {
    const uint64_t seq = w_.next_seq();
    std::memcpy(w_.begin(seq), record, record_size_);
    w_.finish(seq);
    return seq;
  }
  // claim opens the next slot for writing in place; commit publishes it.
  std::byte* claim() { return w_.begin(w_.next_seq()); }
  uint64_t commit() {
    const uint64_t seq = w_.next_seq();
    w_.finish(seq);
    return seq;
  }
  // publish_at writes `record` under `seq` (>= next_seq()) on a sparse ring;
  // the sequences skipped become holes. Returns false if seq is behind, or
  // ahead on a ring that is not sparse (its readers would wait forever).
  bool publish_at(uint64_t seq, const void* record) {
    if (!w_.accepts(seq)) return false;
    std::memcpy(w_.begin(seq), record, record_size_);
    w_.finish(seq);
    return true;
  }

 private:
  explicit Producer(SequenceWriter w) : w_(std::move(w)), record_size_(w_.file().slot_size()) {}
  SequenceWriter w_;
  uint32_t record_size_;
};

}  // namespace ringfire::ring
