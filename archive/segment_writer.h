// segment_writer.h — the writing side of an archive directory: the catalog,
// the open segment and its index, recovery after a crash, fsync and
// retention. Setup and I/O; the recorder's thread only (one writer per
// directory, held by an flock on the catalog's lock file).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "archive/format.h"

namespace ringfire::archive {

// ArchiveLayout is how a new archive is cut; an existing archive keeps
// the layout it was created with.
struct ArchiveLayout {
  uint64_t segment_bytes = 256ull << 20;  // per segment file, preallocated
  uint64_t index_interval = 1ull << 20;   // one index entry per this many bytes
  uint64_t max_batch_bytes = 0;           // set by the recorder from its batch size
};

// Retention says which sealed segments may go, oldest first. Zero: no bound.
struct Retention {
  uint64_t max_bytes = 0;
  uint64_t max_age_ns = 0;
};

// RecoveryReport says what opening an existing archive found.
struct RecoveryReport {
  bool existed = false;
  uint64_t torn_bytes = 0;        // bytes after the last whole batch, cleared
  uint64_t orphans_removed = 0;   // segment files the catalog did not list
};

// recorder_writing: whether a recorder holds DIR's archive open for
// writing, tested (nothing taken) on the OFD lock SegmentWriter::open puts
// on DIR/writer.lock; nullopt when it cannot be told (no such test here).
std::optional<bool> recorder_writing(const std::string& dir);

class SegmentWriter {
 public:
  // open creates the archive in `dir` (made if missing) or opens the one
  // there, which must have been recorded from a ring of the same shape; it
  // recovers the open segment (the tail after its last whole batch is
  // cleared) and takes the directory's writer lock.
  static absl::StatusOr<SegmentWriter> open(const std::string& dir, const RingShape& shape,
                                            const ArchiveLayout& layout, RecoveryReport* report);
  SegmentWriter(SegmentWriter&&) noexcept;
  SegmentWriter& operator=(SegmentWriter&&) noexcept;
  ~SegmentWriter();

  // has_batches: whether anything was ever recorded (end_seq() is valid).
  bool has_batches() const { return has_batches_; }
  // end_seq: one past the last sequence the archive covers (where a new
  // archive starts, before anything is recorded).
  uint64_t end_seq() const { return end_seq_; }
  // start_at says where a new archive starts (before its first batch).
  void start_at(uint64_t seq) {
    if (!has_batches_) end_seq_ = durable_end_ = seq;
  }
  const Catalog& catalog() const { return catalog_; }
  const std::string& dir() const { return dir_; }

  // append writes one sealed batch covering [first_seq, end_seq) holding
  // `records` records, rolling to a new segment when it does not fit. On
  // an error (a full disk) nothing of the batch is kept and the call can
  // be repeated with the same batch.
  absl::Status append(std::span<const uint8_t> batch, uint64_t first_seq, uint64_t end_seq,
                      uint64_t records);
  // sync makes what was appended durable (fdatasync of the open segment).
  absl::Status sync();
  // set_datasync: the call that syncs the open segment, on the writing
  // thread and a step's (fdatasync unless a test gives one that fails as a
  // device that lost a write does: -1, errno EIO).
  using Datasync = int (*)(int fd);
  void set_datasync(Datasync fn) { datasync_ = fn; }
  // dirty: appended since the last sync.
  bool dirty() const { return dirty_; }
  // durable_end: one past the last sequence a sync made durable (the
  // archive's start before any); durable_offset: where in the open
  // segment that sync ended (a power cut loses nothing before it).
  uint64_t durable_end() const { return durable_end_; }
  uint64_t durable_offset() const { return durable_offset_; }
  // set_sync_on_seal: sync each segment as it is sealed (the "segment"
  // policy).
  void set_sync_on_seal(bool on) { sync_on_seal_ = on; }
  // set_write_behind: once `bytes` were appended to the open segment
  // since the last sync, and `every_ns` passed since the last such sync
  // started, a sync of it starts on a thread of its own while appends go
  // on (bytes 0: never). A sync waits for the device to take everything
  // written before it (on this VM ~150 ms for a whole 256 MiB segment),
  // so syncing in steps keeps each stall of the writing thread (a seal,
  // the catalog's sync at a roll) short; the time bound keeps their
  // number, and so their cost at a high rate, down. A tail under `bytes`
  // gets a step too once `quiet_ns` passed since the last step began
  // (step_if_quiet; 0: never): a quiet feed's last records do not wait
  // for the seal.
  void set_write_behind(uint64_t bytes, uint64_t every_ns, uint64_t quiet_ns) {
    write_behind_bytes_ = bytes;
    write_behind_ns_ = every_ns;
    write_behind_quiet_ns_ = quiet_ns;
  }
  // step_if_quiet starts a step for what is unsynced when quiet_ns passed
  // since the last step began (the writer's housekeeping calls it);
  // awaits_quiet_step: one will come (on, none running, something unsynced).
  void step_if_quiet();
  bool awaits_quiet_step() const { return steps_on() && write_behind_quiet_ns_ != 0 && flush_ == nullptr && dirty_; }
  // reap takes a write-behind sync that is done (durable_end moves);
  // append does too. flushing: one is running. take_step_error: a step's
  // failure that an append or a roll found (once).
  absl::Status reap() { return finish_flush(false); }
  bool flushing() const { return flush_ != nullptr; }
  absl::Status take_step_error() { return std::exchange(step_error_, absl::OkStatus()); }

  // enforce removes sealed segments, oldest first, while the archive is
  // over `r`'s size or they are older than its age, skipping none: it stops
  // at a segment a reader holds. Returns how many it removed and counts the
  // stop in *deferred.
  absl::StatusOr<uint32_t> enforce(const Retention& r, uint64_t now_unix_ns, uint64_t* deferred);

  // Statistics for stat/top/metrics.
  uint64_t segments() const { return catalog_.segments.size(); }
  uint64_t open_segment_bytes() const { return write_offset_; }
  uint64_t fsyncs() const { return fsyncs_; }

 private:
  SegmentWriter() = default;
  absl::Status recover(RecoveryReport* report);
  absl::Status store_catalog();
  absl::Status create_open_segment();
  absl::Status roll(uint64_t first_seq);
  bool steps_on() const { return sync_on_seal_ && write_behind_bytes_ != 0; }
  void step_after(uint64_t gap_ns);
  void start_flush();
  absl::Status finish_flush(bool wait);
  void take_step(bool wait);
  void close_files();

  struct Flush;  // a write-behind sync in flight (segment_writer.cc)
  std::unique_ptr<Flush> flush_;
  uint64_t write_behind_bytes_ = 0;
  uint64_t write_behind_ns_ = 0;
  uint64_t write_behind_quiet_ns_ = 0;
  uint64_t flush_started_ns_ = 0;  // CLOCK_MONOTONIC
  absl::Status step_error_;
  bool sync_failed_ = false;  // a sync failed: nothing more counts as durable (until the next open)
  Datasync datasync_ = ::fdatasync;

  std::string dir_;
  Catalog catalog_;
  int lock_fd_ = -1;
  int seg_fd_ = -1;
  int idx_fd_ = -1;
  bool catalog_dirty_ = false;
  bool has_batches_ = false;
  bool dirty_ = false;
  bool sync_on_seal_ = false;
  uint64_t end_seq_ = 0;
  uint64_t write_offset_ = kSegmentHeaderBytes;
  uint64_t next_index_offset_ = kSegmentHeaderBytes;
  uint64_t index_entries_ = 0;
  uint64_t fsyncs_ = 0;
  uint64_t durable_end_ = 0;
  uint64_t durable_offset_ = kSegmentHeaderBytes;
};

// load_catalog reads DIR/catalog (readers and the writer).
absl::StatusOr<Catalog> load_catalog(const std::string& dir);

}  // namespace ringfire::archive
