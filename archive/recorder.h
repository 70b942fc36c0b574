// recorder.h — recording a ring into an archive: a registered reader of the
// ring (the writer never waits for it) that copies every record, under its
// sequence, into batches and appends them to segment files. It runs on a
// thread of its own, never on a port worker; stats() may be read from any
// thread.
//
// Durability: a batch is written (to the page cache) at most linger_ns
// after its first record, or when full; what was written survives a kill
// of the recorder. What survives a power cut depends on the fsync policy
// (README, "The archive"): kNever — what the kernel had written back;
// kInterval — all but the last interval; kSegment — every sealed segment.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "archive/batch_builder.h"
#include "archive/segment_writer.h"
#include "ring/raw_reader.h"

namespace ringfire::archive {

enum class FsyncPolicy : uint8_t { kNever, kInterval, kSegment };

// RecordOptions configure one recording.
struct RecordOptions {
  std::string dir;
  ArchiveLayout layout;             // for a new archive
  uint64_t batch_bytes = 256u << 10;
  uint64_t linger_ns = 2'000'000;   // a partial batch is written after this
  FsyncPolicy fsync = FsyncPolicy::kSegment;
  uint64_t fsync_interval_ns = 0;   // kInterval
  Retention retention;
  // start: where a new archive begins (an existing one resumes at its end).
  ring::StartPosition start = ring::StartPosition::oldest();
  std::string reader_name = "record";
};

// RecorderStats are the recorder's counters; written by its thread,
// read (relaxed) by any.
struct RecorderStats {
  std::atomic<uint64_t> recorded_end{0};  // one past the last sequence written
  std::atomic<uint64_t> durable_end{0};   // one past the last sequence fsynced
  std::atomic<uint64_t> records{0};       // records written by this process
  std::atomic<uint64_t> bytes{0};         // batch bytes written by this process
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> segments{0};      // segments the catalog lists now
  std::atomic<uint64_t> gaps{0};          // gap entries written (laps taken)
  std::atomic<uint64_t> lost{0};          // records those gaps lost
  std::atomic<uint64_t> fsyncs{0};
  std::atomic<uint64_t> disk_errors{0};   // failed appends, syncs, rolls
  std::atomic<uint64_t> segments_removed{0};
  std::atomic<uint64_t> removals_deferred{0};  // a reader held the oldest segment
  std::atomic<bool> stalled{false};       // the last write failed; retrying
};

class Recorder {
 public:
  // open opens (or creates) the archive for `ring`, recovering it after a
  // crash, and attaches a registered reader at the archive's end (or at
  // options.start for a new archive). Fails if the ring is behind the
  // archive's end (a re-created ring: record it into another directory).
  static absl::StatusOr<std::unique_ptr<Recorder>> open(ring::RingFile ring, const RecordOptions& options);

  // poll records what the ring has (at most one batch) and writes, syncs
  // and removes segments as due. Returns records taken. Recorder thread.
  uint64_t poll(uint64_t now_ns);
  // wait parks the thread until the ring has more, a deadline is due, or
  // max_ns passes. Recorder thread.
  void wait(uint64_t now_ns, uint64_t max_ns);
  // flush writes a partial batch and syncs (at exit). Recorder thread.
  absl::Status flush();

  const RecorderStats& stats() const { return stats_; }
  const RecoveryReport& recovery() const { return recovery_; }
  // writer: the archive's writing side (tests look at its durable offset).
  const SegmentWriter& writer() const { return writer_; }
  // lag: records the ring has published that the recorder has not taken.
  uint64_t lag() const;
  // last_error: the message of the last failed write ("" when none).
  std::string last_error() const;

 private:
  Recorder(ring::RawReader reader, SegmentWriter writer, const RecordOptions& options, uint32_t max_record);
  bool fill(uint64_t now_ns, uint64_t* taken);
  void take(const ring::ReadResult& r, uint64_t before, uint32_t len, uint64_t now_ns);
  bool write_batch(uint64_t now_ns);
  void note_error(const absl::Status& st, uint64_t now_ns);

  ring::RawReader reader_;
  SegmentWriter writer_;
  RecordOptions options_;
  const ring::RingHeader* header_;
  uint32_t max_record_;
  BatchBuilder batch_;
  bool open_ = false;              // batch_ started
  bool batch_ready_ = false;       // sealed, waiting for append (after an error)
  uint64_t sealed_end_ = 0;
  std::span<const uint8_t> sealed_;
  bool pending_ = false;           // a blob read that did not fit the batch
  uint64_t pending_seq_ = 0;
  uint32_t pending_len_ = 0;
  uint64_t batch_started_ns_ = 0;
  uint64_t next_sync_ns_ = 0;
  uint64_t next_retention_ns_ = 0;
  uint64_t retry_ns_ = 0;          // after a failed write, the next try
  uint64_t gap_begin_ = 0;         // a lap taken, not yet recorded
  uint64_t gap_lost_ = 0;
  RecorderStats stats_;
  RecoveryReport recovery_;
  mutable std::mutex error_mu_;    // guards error_ only
  std::string error_;
};

}  // namespace ringfire::archive
