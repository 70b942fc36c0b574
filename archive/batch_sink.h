// batch_sink.h — the recorder's writing thread: sealed batches go in, in
// order, and are appended to the archive (SegmentWriter), synced as the
// fsync policy says, and old segments removed as retention says, while the
// recorder's reading thread fills the next buffer. Batch buffers pass
// between the two: the reader takes a free one (acquire), hands it back
// sealed (submit); the writer frees it once it is on disk. When every
// buffer is queued (the disk stalls: a journal commit at a segment's roll
// took 130 ms here), the reader makes another, up to max_buffer_bytes, so
// that a stall is taken up in memory before the ring's slack; past that
// (a full disk) the reader stops reading, and the ring laps it: the gap
// it takes is recorded, the ring's writer never waits. The buffers made
// beyond the first `buffers` are returned once none has been needed for
// trim_after_ns (a load that rolls segments more often keeps them).
//
// Time is passed in: each job carries the reader's `now`, and the writer
// syncs and enforces retention by it; the retry after a failed write
// waits on the real clock (retry_ns), and the write-behind steps' spacing
// is the real clock's (SegmentWriter::set_write_behind).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "archive/batch_builder.h"
#include "archive/segment_writer.h"

namespace ringfire::archive {

enum class FsyncPolicy : uint8_t { kNever, kInterval, kSegment };

// SinkOptions say when the writer syncs, removes and retries.
struct SinkOptions {
  FsyncPolicy fsync = FsyncPolicy::kSegment;
  uint64_t fsync_interval_ns = 0;       // kInterval
  // Not kNever: the open segment synced on the side once this much was
  // written since the last sync and this long since the last such sync
  // began, and (kSegment) what is unsynced once quiet_ns passed since
  // then (SegmentWriter::set_write_behind). Bytes 0: never.
  uint64_t write_behind_bytes = 8u << 20;
  uint64_t write_behind_ns = 100'000'000;
  uint64_t write_behind_quiet_ns = 1'000'000'000;
  Retention retention;
  uint64_t retention_every_ns = 1'000'000'000;
  uint64_t retry_ns = 1'000'000'000;    // after a failed write (real time)
  size_t buffers = 4;                   // made at the start
  uint64_t max_buffer_bytes = 64u << 20;  // more made while the disk stalls, up to this
  uint64_t trim_after_ns = 30'000'000'000;  // those returned once unneeded this long
};

// SinkCounters are the writer's counters; written by its thread, read
// (relaxed) by any.
struct SinkCounters {
  std::atomic<uint64_t> recorded_end{0};  // one past the last sequence written
  std::atomic<uint64_t> durable_end{0};   // one past the last sequence fsynced
  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> bytes{0};         // on disk, block padding included
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> segments{0};      // the catalog lists now
  std::atomic<uint64_t> fsyncs{0};
  std::atomic<uint64_t> disk_errors{0};   // failed appends, syncs, removals
  std::atomic<uint64_t> segments_removed{0};
  std::atomic<uint64_t> removals_deferred{0};  // a reader held the oldest segment
  std::atomic<bool> stalled{false};       // the last write failed; retrying
  std::atomic<uint64_t> buffer_bytes{0};  // batch buffers made, in bytes (reader thread)
};

class BatchSink {
 public:
  // BatchSink starts the writing thread on `writer`; buffers hold batches
  // of batch_bytes with room for one record of max_record.
  BatchSink(SegmentWriter writer, const SinkOptions& options, uint64_t batch_bytes, uint32_t max_record);
  ~BatchSink();  // writes what was submitted (bounded by one retry), then joins
  BatchSink(const BatchSink&) = delete;
  BatchSink& operator=(const BatchSink&) = delete;

  // Reader thread.
  // acquire returns a free buffer; when every one is queued, a new one
  // while max_buffer_bytes allows, else nullptr.
  BatchBuilder* acquire();
  // submit queues a sealed buffer: the batch covers [first_seq, end_seq).
  void submit(BatchBuilder* batch, std::span<const uint8_t> sealed, uint64_t end_seq, uint64_t now_ns);
  // tick lets the writer sync and enforce retention by `now_ns` when due,
  // and returns the buffers made beyond the first `buffers` once unneeded.
  void tick(uint64_t now_ns);
  // settle waits (at most timeout_ns) until everything submitted so far is
  // written, or the writer is stalled on an error. True when written.
  bool settle(uint64_t timeout_ns);
  // sync asks for an fsync now and waits for it (settling first).
  absl::Status sync(uint64_t timeout_ns);
  // wait_for_buffer waits at most timeout_ns for a buffer to come free.
  void wait_for_buffer(uint64_t timeout_ns);

  const SinkCounters& counters() const { return counters_; }
  std::string last_error() const;
  // writer: the archive's writing side; look only while settled (tests).
  const SegmentWriter& writer() const { return writer_; }

 private:
  struct Job {
    BatchBuilder* batch = nullptr;  // nullptr: a tick
    std::span<const uint8_t> sealed;
    uint64_t end_seq = 0;
    uint64_t now_ns = 0;
    bool sync = false;
  };
  void run();
  void count_buffers();  // buffer_bytes from buffers_ (reader thread)
  void trim(uint64_t now_ns);  // the grown buffers returned when unneeded (reader thread)
  void retain();
  void housekeep(uint64_t now_ns, bool force_sync);
  void note_error(const absl::Status& st);

  SegmentWriter writer_;  // writer thread (and construction) only
  const SinkOptions options_;
  uint64_t next_sync_ns_ = 0;       // writer thread
  uint64_t next_retention_ns_ = 0;  // writer thread
  // due_ns_: when housekeeping next has work; the writer stores it, tick
  // loads it (relaxed: a hint, see tick).
  std::atomic<uint64_t> due_ns_{0};
  const uint64_t batch_bytes_;
  const uint32_t max_record_;
  std::vector<std::unique_ptr<BatchBuilder>> buffers_;  // reader thread (and construction) only
  const size_t base_buffers_;    // made at the start; never returned
  bool needed_extra_ = false;    // reader thread: more than base_buffers_ were out since the last trim()
  uint64_t needed_extra_ns_ = 0; // reader thread: the trim() that last saw it
  SinkCounters counters_;

  // mu_ guards everything below; never held across I/O.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // the writer waits for jobs
  std::condition_variable done_cv_;   // the reader waits for buffers, settles
  std::deque<Job> queue_;
  std::vector<BatchBuilder*> free_;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  absl::Status sync_result_;
  std::string error_;
  bool stop_ = false;
  std::thread thread_;                // last: started when the rest exists
};

}  // namespace ringfire::archive
