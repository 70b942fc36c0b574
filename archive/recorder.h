// recorder.h — recording a ring into an archive: a registered reader of the
// ring (the writer never waits for it) that copies every record, under its
// sequence, straight into a batch buffer; full (or lingering) batches go to
// the BatchSink's thread, which appends them to segment files while the
// next fills. The reading side runs on a thread of its own, never on a port
// worker; snapshot() may be called from any thread.
//
// Durability: a batch is written at most linger_ns after its first record,
// or when full; what was written survives a kill of the recorder. What
// survives a power cut depends on the fsync policy (README, "The
// archive"): kNever — what the kernel had written back; kInterval — all
// but the last interval; kSegment — every sealed segment.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "archive/batch_sink.h"
#include "ring/raw_reader.h"

namespace ringfire::archive {

// RecordOptions configure one recording.
struct RecordOptions {
  std::string dir;
  ArchiveLayout layout;             // for a new archive
  uint64_t batch_bytes = 1u << 20;
  uint64_t linger_ns = 2'000'000;   // a partial batch is written after this
  // gather_ns: caught up while records flow, the reader of a fixed-slot
  // ring sleeps this long (at most; less on a ring a fast writer would
  // lap a quarter of meanwhile) instead of parking on the ring, whose
  // writer then pays a wake-up for each record or few. 0, or a blob ring:
  // park at once (the reader is woken by the next record).
  uint64_t gather_ns = 1'000'000;
  SinkOptions sink;                 // fsync policy, retention, buffers
  // start: where a new archive begins (an existing one resumes at its end).
  ring::StartPosition start = ring::StartPosition::oldest();
  std::string reader_name = "record";
};

// RecorderSnapshot is where a recording stands, for stat/top/metrics.
struct RecorderSnapshot {
  uint64_t recorded_end = 0;   // one past the last sequence written
  uint64_t durable_end = 0;    // one past the last sequence fsynced
  uint64_t lag = 0;            // published by the ring's writer, not yet written
  uint64_t records = 0;        // written by this process
  uint64_t bytes = 0;
  uint64_t batches = 0;
  uint64_t segments = 0;
  uint64_t gaps = 0;           // laps taken, each recorded as a gap
  uint64_t lost = 0;           // records those gaps lost
  uint64_t fsyncs = 0;
  uint64_t disk_errors = 0;
  uint64_t segments_removed = 0;
  uint64_t removals_deferred = 0;
  uint64_t buffer_bytes = 0;   // batch buffers made (more while the disk stalls)
  bool stalled = false;        // the disk refused the last write; retrying
};

class Recorder {
 public:
  // open opens (or creates) the archive for `ring`, recovering it after a
  // crash, and attaches a registered reader at the archive's end (or at
  // options.start for a new archive). Fails if the ring is behind the
  // archive's end (a re-created ring: record it into another directory).
  static absl::StatusOr<std::unique_ptr<Recorder>> open(ring::RingFile ring, const RecordOptions& options);

  // poll takes what the ring has into the current batch and hands it to
  // the sink when full or lingering. Returns records taken. Reader thread.
  uint64_t poll(uint64_t now_ns);
  // wait parks the reader until the ring has more, the linger is due, a
  // buffer comes free, or max_ns passes; while records flow (one was taken
  // in the last 2 ms) it sleeps up to gather_ns instead, gathering a
  // burst without asking the writer for a wake-up. Reader thread.
  void wait(uint64_t now_ns, uint64_t max_ns);
  // gathers / parks: the waits that slept gathering a burst, and those
  // that parked on the ring. Reader thread.
  uint64_t gathers() const { return gathers_; }
  uint64_t parks() const { return parks_; }
  // flush hands over a partial batch, waits for everything to be written
  // and syncs (unless the policy is never). Reader thread.
  absl::Status flush(uint64_t timeout_ns = 30'000'000'000);
  // settle waits until what was handed over is written (or the sink is
  // stalled); true when written. Reader thread.
  bool settle(uint64_t timeout_ns = 30'000'000'000) { return sink_->settle(timeout_ns); }

  RecorderSnapshot snapshot() const;
  const RecoveryReport& recovery() const { return recovery_; }
  std::string last_error() const { return sink_->last_error(); }
  // writer: the archive's writing side; look only while settled (tests).
  const SegmentWriter& writer() const { return sink_->writer(); }

 private:
  Recorder(ring::RawReader reader, std::unique_ptr<BatchSink> sink, const RecordOptions& options);
  bool fill(uint64_t now_ns, uint64_t* taken);
  void take(const ring::ReadResult& r, uint64_t before, uint32_t len, uint64_t now_ns);
  void hand_over(uint64_t now_ns);

  ring::RawReader reader_;
  std::unique_ptr<BatchSink> sink_;
  const RecordOptions options_;
  const ring::RingHeader* header_;
  BatchBuilder* batch_ = nullptr;  // the buffer being filled, if any
  uint64_t batch_started_ns_ = 0;
  uint64_t last_took_ns_ = 0;      // when poll last took a record
  uint64_t cursor_at_wait_ = 0;    // the reader's cursor at the last wait
  uint64_t gather_max_ns_ = 0;     // gather_ns, bounded by the ring (0: a blob ring parks)
  uint64_t gather_now_ns_ = 0;     // the sleep in use (adapts to the ring's capacity and the rate)
  uint64_t warm_at_ = 0;           // this mapping warmed up to here (RingFile::warm) ...
  uint64_t warm_end_ = 0;          // ... of this much (0: a lazy ring, not warmed)
  uint64_t gathers_ = 0;
  uint64_t parks_ = 0;
  uint64_t gap_begin_ = 0;         // a lap taken, not yet recorded
  uint64_t gap_lost_ = 0;
  std::atomic<uint64_t> gaps_{0};  // reader thread writes, any reads
  std::atomic<uint64_t> lost_{0};
  RecoveryReport recovery_;
};

}  // namespace ringfire::archive
