// recorder.cc — the recording loop: ring → batch → segment.
#include "archive/recorder.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ring/blob.h"
#include "ring/idle.h"
#include "ring/monotonic.h"

namespace ringfire::archive {
namespace {

constexpr uint64_t kRetryNs = 1'000'000'000;      // after a failed write
constexpr uint64_t kRetentionNs = 1'000'000'000;  // how often retention looks
constexpr uint32_t kReadsPerPoll = 4096;

uint64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Recorder>> Recorder::open(ring::RingFile ring, const RecordOptions& options) {
  const ring::RingHeader& h = ring.header();
  RingShape shape;
  shape.ring_flags = h.flags & (ring::kFlagBlob | ring::kFlagSparse);
  shape.record_size = ring.blob() ? 0 : ring.slot_size();
  shape.max_record = ring.blob() ? ring::max_blob_bytes(h.arena_size) : ring.slot_size();
  shape.schema_signature = h.schema_signature;
  const uint64_t batch_cap = pad8(options.batch_bytes);
  if (options.batch_bytes > kMaxBatchBytes ||
      kBatchHeaderBytes + 64 + pad8(shape.max_record) > kMaxBatchBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a batch holds at most ", kMaxBatchBytes, " bytes: lower --batch-bytes (the ring's largest record is ",
        shape.max_record, " bytes)"));
  }
  ArchiveLayout layout = options.layout;
  layout.max_batch_bytes =
      std::max<uint64_t>(batch_cap, pad8(kBatchHeaderBytes + 2 * (kEntryHeaderBytes + kGapPayloadBytes) +
                                         pad8(shape.max_record)));
  RecoveryReport report;
  auto writer = SegmentWriter::open(options.dir, shape, layout, &report);
  if (!writer.ok()) return writer.status();
  // Acquire: pairs with the release store in SequenceWriter::finish.
  const uint64_t ws = h.write_seq.load(std::memory_order_acquire);
  if (writer->has_batches() && ws < writer->end_seq()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ring.path(), " has published up to ", ws, " but the archive in ", options.dir, " already reaches ",
        writer->end_seq(), ": the ring was re-created; record it into another directory"));
  }
  const ring::StartPosition start =
      writer->has_batches() ? ring::StartPosition::at(writer->end_seq()) : options.start;
  auto reader = ring::RawReader::attach(std::move(ring), start, options.reader_name);
  if (!reader.ok()) return reader.status();
  std::unique_ptr<Recorder> r(new Recorder(std::move(*reader), std::move(*writer), options, shape.max_record));
  r->recovery_ = report;
  return r;
}

Recorder::Recorder(ring::RawReader reader, SegmentWriter writer, const RecordOptions& options,
                   uint32_t max_record)
    : reader_(std::move(reader)),
      writer_(std::move(writer)),
      options_(options),
      header_(&reader_.header()),
      max_record_(max_record),
      batch_(std::min(options.batch_bytes, writer_.catalog().max_batch_bytes), max_record) {
  // Both policies that sync at all sync a segment as it is sealed: an
  // interval's last stretch would otherwise never reach the disk.
  writer_.set_sync_on_seal(options.fsync != FsyncPolicy::kNever);
  stats_.recorded_end.store(writer_.has_batches() ? writer_.end_seq() : reader_.cursor(),
                            std::memory_order_relaxed);
  stats_.segments.store(writer_.segments(), std::memory_order_relaxed);
  stats_.durable_end.store(writer_.durable_end(), std::memory_order_relaxed);
}

uint64_t Recorder::lag() const {
  const uint64_t ws = header_->write_seq.load(std::memory_order_relaxed);
  const uint64_t end = stats_.recorded_end.load(std::memory_order_relaxed);
  return ws > end ? ws - end : 0;
}

std::string Recorder::last_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return error_;
}

void Recorder::note_error(const absl::Status& st, uint64_t now_ns) {
  stats_.disk_errors.fetch_add(1, std::memory_order_relaxed);
  stats_.stalled.store(true, std::memory_order_relaxed);
  retry_ns_ = now_ns + kRetryNs;
  std::lock_guard<std::mutex> lock(error_mu_);
  error_ = std::string(st.message());
}

// take keeps a record the reader just returned (or notes the lap it took).
void Recorder::take(const ring::ReadResult& r, uint64_t before, uint32_t len, uint64_t now_ns) {
  if (r.lost != 0) {
    if (gap_lost_ == 0) gap_begin_ = before;
    gap_lost_ += r.lost;
  }
  if (!r.ok) return;
  if (batch_.empty()) batch_started_ns_ = now_ns;
  if (gap_lost_ != 0) {
    batch_.commit_record_after_gap(gap_begin_, r.seq, gap_lost_, r.seq, len);
    stats_.gaps.fetch_add(1, std::memory_order_relaxed);
    stats_.lost.fetch_add(gap_lost_, std::memory_order_relaxed);
    gap_lost_ = 0;
  } else {
    batch_.commit_record(r.seq, len);
  }
}

// fill takes what the ring has into the batch. Returns true when the
// batch is full (the next record does not fit).
bool Recorder::fill(uint64_t now_ns, uint64_t* taken) {
  if (!open_) {
    batch_.start(pending_ ? pending_seq_ : reader_.cursor());
    open_ = true;
  }
  if (pending_) {
    std::memcpy(batch_.record_slot(pending_len_), reader_.record(), pending_len_);
    take(ring::ReadResult{true, pending_seq_, 0}, pending_seq_, pending_len_, now_ns);
    pending_ = false;
    ++*taken;
  }
  const uint32_t fixed = reader_.fixed_size();
  for (uint32_t i = 0; i < kReadsPerPoll; ++i) {
    const uint64_t before = reader_.cursor();
    if (fixed != 0) {
      uint8_t* dst = batch_.record_slot(fixed);
      if (dst == nullptr) return true;
      const ring::ReadResult r = reader_.next_into(reinterpret_cast<std::byte*>(dst));
      take(r, before, fixed, now_ns);
      if (!r.ok) return false;
    } else {
      uint32_t len = 0;
      const ring::ReadResult r = reader_.next(&len);
      if (r.ok) {
        uint8_t* dst = batch_.record_slot(len);
        if (dst == nullptr) {
          // Keep it for the next batch; a lap before it ends this one.
          if (r.lost != 0 || gap_lost_ != 0) {
            take(ring::ReadResult{false, 0, r.lost}, before, 0, now_ns);
            batch_.add_gap(gap_begin_, r.seq, gap_lost_);
            stats_.gaps.fetch_add(1, std::memory_order_relaxed);
            stats_.lost.fetch_add(gap_lost_, std::memory_order_relaxed);
            gap_lost_ = 0;
          }
          pending_ = true;
          pending_seq_ = r.seq;
          pending_len_ = len;
          return true;
        }
        std::memcpy(dst, reader_.record(), len);
      }
      take(r, before, len, now_ns);
      if (!r.ok) return false;
    }
    ++*taken;
  }
  return false;
}

// write_batch seals the open batch (once) and appends it. False when the
// append failed: the sealed batch waits for the retry.
bool Recorder::write_batch(uint64_t now_ns) {
  if (!batch_ready_) {
    sealed_end_ = pending_ ? pending_seq_ : reader_.cursor();
    if (gap_lost_ != 0) {
      // A lap with no record after it yet: the gap ends where the batch does.
      batch_.add_gap(gap_begin_, sealed_end_, gap_lost_);
      stats_.gaps.fetch_add(1, std::memory_order_relaxed);
      stats_.lost.fetch_add(gap_lost_, std::memory_order_relaxed);
      gap_lost_ = 0;
    }
    sealed_ = batch_.seal(sealed_end_);
    batch_ready_ = true;
  }
  const std::span<const uint8_t> bytes = sealed_;
  if (auto st = writer_.append(bytes, batch_.first_seq(), sealed_end_, batch_.records()); !st.ok()) {
    note_error(st, now_ns);
    return false;
  }
  batch_ready_ = false;
  open_ = false;
  stats_.stalled.store(false, std::memory_order_relaxed);
  stats_.records.fetch_add(batch_.records(), std::memory_order_relaxed);
  stats_.bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
  stats_.batches.fetch_add(1, std::memory_order_relaxed);
  stats_.recorded_end.store(sealed_end_, std::memory_order_relaxed);
  stats_.segments.store(writer_.segments(), std::memory_order_relaxed);
  stats_.fsyncs.store(writer_.fsyncs(), std::memory_order_relaxed);
  stats_.durable_end.store(writer_.durable_end(), std::memory_order_relaxed);
  return true;
}

uint64_t Recorder::poll(uint64_t now_ns) {
  uint64_t taken = 0;
  if (batch_ready_) {
    if (now_ns < retry_ns_ || !write_batch(now_ns)) return 0;
  }
  const bool full = fill(now_ns, &taken);
  if (!batch_.empty() && (full || now_ns - batch_started_ns_ >= options_.linger_ns)) write_batch(now_ns);
  if (options_.fsync == FsyncPolicy::kInterval && writer_.dirty() && now_ns >= next_sync_ns_ &&
      !batch_ready_) {
    if (auto st = writer_.sync(); !st.ok()) note_error(st, now_ns);
    next_sync_ns_ = now_ns + options_.fsync_interval_ns;
    stats_.fsyncs.store(writer_.fsyncs(), std::memory_order_relaxed);
    stats_.durable_end.store(writer_.durable_end(), std::memory_order_relaxed);
  }
  if (now_ns >= next_retention_ns_) {
    next_retention_ns_ = now_ns + kRetentionNs;
    if (options_.retention.max_bytes != 0 || options_.retention.max_age_ns != 0) {
      uint64_t deferred = 0;
      auto removed = writer_.enforce(options_.retention, unix_now_ns(), &deferred);
      if (removed.ok()) {
        stats_.segments_removed.fetch_add(*removed, std::memory_order_relaxed);
      } else {
        note_error(removed.status(), now_ns);
      }
      stats_.removals_deferred.fetch_add(deferred, std::memory_order_relaxed);
      stats_.segments.store(writer_.segments(), std::memory_order_relaxed);
    }
  }
  return taken;
}

void Recorder::wait(uint64_t now_ns, uint64_t max_ns) {
  uint64_t deadline = now_ns + max_ns;
  if (batch_ready_) {
    // Stalled on the disk: the ring is not read until the retry.
    ring::sleep_ns(std::min(deadline, retry_ns_) > now_ns ? std::min(deadline, retry_ns_) - now_ns : 0);
    return;
  }
  if (!batch_.empty()) deadline = std::min(deadline, batch_started_ns_ + options_.linger_ns);
  if (options_.fsync == FsyncPolicy::kInterval && writer_.dirty()) deadline = std::min(deadline, next_sync_ns_);
  if (pending_ || deadline <= now_ns) return;
  reader_.park(deadline - now_ns);
}

absl::Status Recorder::flush() {
  if (!batch_.empty() || batch_ready_ || gap_lost_ != 0) {
    if (!open_) batch_.start(reader_.cursor());
    open_ = true;
    if (!write_batch(monotonic_ns())) return absl::UnavailableError(last_error());
  }
  if (options_.fsync == FsyncPolicy::kNever) return absl::OkStatus();
  absl::Status st = writer_.sync();
  stats_.fsyncs.store(writer_.fsyncs(), std::memory_order_relaxed);
  stats_.durable_end.store(writer_.durable_end(), std::memory_order_relaxed);
  return st;
}

}  // namespace ringfire::archive
