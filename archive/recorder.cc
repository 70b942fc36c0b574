// recorder.cc — the recording loop's reading side: ring → batch buffer.
#include "archive/recorder.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ring/blob.h"
#include "ring/monotonic.h"

namespace ringfire::archive {
namespace {

constexpr uint32_t kReadsPerPoll = 4096;

}  // namespace

absl::StatusOr<std::unique_ptr<Recorder>> Recorder::open(ring::RingFile ring, const RecordOptions& options) {
  const ring::RingHeader& h = ring.header();
  const RingShape shape = shape_of(ring);
  if (options.batch_bytes > kMaxBatchBytes || kBatchHeaderBytes + 64 + pad8(shape.max_record) > kMaxBatchBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a batch holds at most ", kMaxBatchBytes, " bytes: lower --batch-bytes (the ring's largest record is ",
        shape.max_record, " bytes)"));
  }
  // The largest batch: the asked size, or one record of the largest size.
  const uint64_t batch_bytes = BatchBuilder::capacity_for(options.batch_bytes, shape.max_record);
  ArchiveLayout layout = options.layout;
  layout.max_batch_bytes = batch_bytes;
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
  if (!writer->has_batches()) writer->start_at(reader->cursor());
  auto sink = std::make_unique<BatchSink>(std::move(*writer), options.sink, batch_bytes, shape.max_record);
  std::unique_ptr<Recorder> r(new Recorder(std::move(*reader), std::move(sink), options));
  r->recovery_ = report;
  return r;
}

Recorder::Recorder(ring::RawReader reader, std::unique_ptr<BatchSink> sink, const RecordOptions& options)
    : reader_(std::move(reader)), sink_(std::move(sink)), options_(options), header_(&reader_.header()) {
  const bool lazy = (header_->flags & ring::kFlagLazy) != 0;
  warm_end_ = lazy ? 0 : reader_.file().mapped_bytes();
  gather_max_ns_ = reader_.blob() ? 0 : std::min<uint64_t>(options_.gather_ns, header_->capacity / 4 * 25);
  if (gather_max_ns_ < 50'000) gather_max_ns_ = 0;  // a ring too small to sleep beside: park
  cursor_at_wait_ = reader_.cursor();
}

RecorderSnapshot Recorder::snapshot() const {
  const SinkCounters& c = sink_->counters();
  RecorderSnapshot s;
  s.recorded_end = c.recorded_end.load(std::memory_order_relaxed);
  s.durable_end = c.durable_end.load(std::memory_order_relaxed);
  const uint64_t ws = header_->write_seq.load(std::memory_order_relaxed);
  s.lag = ws > s.recorded_end ? ws - s.recorded_end : 0;
  s.records = c.records.load(std::memory_order_relaxed);
  s.bytes = c.bytes.load(std::memory_order_relaxed);
  s.batches = c.batches.load(std::memory_order_relaxed);
  s.segments = c.segments.load(std::memory_order_relaxed);
  s.gaps = gaps_.load(std::memory_order_relaxed);
  s.lost = lost_.load(std::memory_order_relaxed);
  s.fsyncs = c.fsyncs.load(std::memory_order_relaxed);
  s.disk_errors = c.disk_errors.load(std::memory_order_relaxed);
  s.segments_removed = c.segments_removed.load(std::memory_order_relaxed);
  s.removals_deferred = c.removals_deferred.load(std::memory_order_relaxed);
  s.buffer_bytes = c.buffer_bytes.load(std::memory_order_relaxed);
  s.stalled = c.stalled.load(std::memory_order_relaxed);
  return s;
}

// take keeps a record the reader just returned (or notes the lap it took).
void Recorder::take(const ring::ReadResult& r, uint64_t before, uint32_t len, uint64_t now_ns) {
  if (r.lost != 0) {
    if (gap_lost_ == 0) gap_begin_ = before;
    gap_lost_ += r.lost;
  }
  if (!r.ok) return;
  if (batch_->empty()) batch_started_ns_ = now_ns;
  if (gap_lost_ != 0) {
    batch_->commit_record_after_gap(gap_begin_, r.seq, gap_lost_, r.seq, len);
    gaps_.fetch_add(1, std::memory_order_relaxed);
    lost_.fetch_add(gap_lost_, std::memory_order_relaxed);
    gap_lost_ = 0;
  } else {
    batch_->commit_record(r.seq, len);
  }
}

// fill takes what the ring has into the batch, each record copied once,
// straight into place. Returns true when the batch is full (the next
// record does not fit).
bool Recorder::fill(uint64_t now_ns, uint64_t* taken) {
  const uint32_t fixed = reader_.fixed_size();
  for (uint32_t i = 0; i < kReadsPerPoll; ++i) {
    const uint64_t before = reader_.cursor();
    uint32_t len = fixed;
    ring::ReadResult r;
    if (fixed != 0) {
      uint8_t* dst = batch_->record_slot(fixed);
      if (dst == nullptr) return true;
      r = reader_.next_into(reinterpret_cast<std::byte*>(dst));
    } else {
      const uint64_t room = batch_->room();
      uint8_t* dst = batch_->record_slot(0);
      if (dst == nullptr) return true;
      r = reader_.next_within(reinterpret_cast<std::byte*>(dst),
                              static_cast<uint32_t>(std::min<uint64_t>(room, UINT32_MAX)), &len);
      if (!r.ok && len != 0) {  // the next blob is longer than the room left
        take(r, before, 0, now_ns);
        return true;
      }
    }
    take(r, before, len, now_ns);
    if (!r.ok) return false;
    ++*taken;
  }
  return false;
}

// hand_over seals the batch and gives it to the sink. A lap with no
// record after it yet ends in this batch: the gap ends where it does.
void Recorder::hand_over(uint64_t now_ns) {
  const uint64_t end = reader_.cursor();
  if (gap_lost_ != 0) {
    batch_->add_gap(gap_begin_, end, gap_lost_);
    gaps_.fetch_add(1, std::memory_order_relaxed);
    lost_.fetch_add(gap_lost_, std::memory_order_relaxed);
    gap_lost_ = 0;
  }
  sink_->submit(batch_, batch_->seal(end), end, now_ns);
  batch_ = nullptr;
}

uint64_t Recorder::poll(uint64_t now_ns) {
  uint64_t taken = 0;
  if (batch_ == nullptr) {
    batch_ = sink_->acquire();
    if (batch_ == nullptr) {  // every buffer is queued: the disk is behind (or full)
      sink_->tick(now_ns);
      return 0;
    }
    batch_->start(reader_.cursor());
  }
  const bool full = fill(now_ns, &taken);
  if (taken != 0) last_took_ns_ = now_ns;
  if (!batch_->empty() && (full || now_ns - batch_started_ns_ >= options_.linger_ns)) hand_over(now_ns);
  sink_->tick(now_ns);
  return taken;
}

void Recorder::wait(uint64_t now_ns, uint64_t max_ns) {
  if (batch_ == nullptr) {
    sink_->wait_for_buffer(max_ns);
    return;
  }
  // This mapping's first lap over the ring costs a page's first touch
  // under a hypervisor that shadows page tables (~4.5 us each here: 390
  // ns a 64-B record on the first lap, 59 on the next). Warmed here, when
  // there is nothing to read, 256 KiB (~0.3 ms) at a time, instead of
  // waiting; not at open (a daemon opens recordings on its conductor),
  // and never a lazy ring, whose unwritten pages a read would allocate.
  if (warm_at_ < warm_end_) {
    warm_at_ = reader_.file().warm(warm_at_, 256u << 10);
    return;
  }
  uint64_t deadline = now_ns + max_ns;
  if (!batch_->empty()) deadline = std::min(deadline, batch_started_ns_ + options_.linger_ns);
  if (deadline <= now_ns) return;
  constexpr uint64_t kFlowingNs = 2'000'000;  // a record taken this recently: the stream flows
  // The sequences the cursor moved since the last wait (records, holes
  // and laps alike: what the ring's capacity is counted in).
  const uint64_t cursor = reader_.cursor();
  const uint64_t burst = cursor - std::min(cursor, cursor_at_wait_);
  cursor_at_wait_ = cursor;
  // Fixed-slot rings only: a blob ring laps by arena bytes, which a count
  // of sequences does not bound.
  if (gather_max_ns_ != 0 && last_took_ns_ != 0 && now_ns - last_took_ns_ < kFlowingNs) {
    // Gather: sleep, no wake-up asked of the writer. The sleep halves when
    // the cursor moved over a quarter of the ring since the last one (a lap
    // comes near), and grows back while it moves under a sixteenth; never
    // longer than a writer at 40 M records/s takes to fill a quarter.
    const uint64_t cap = header_->capacity;
    if (gather_now_ns_ == 0) gather_now_ns_ = std::max<uint64_t>(gather_max_ns_ / 4, 1);
    if (burst > cap / 4) {
      gather_now_ns_ = std::max<uint64_t>(gather_now_ns_ / 2, 10'000);
    } else if (burst < cap / 16) {
      gather_now_ns_ = std::min(gather_now_ns_ * 2, gather_max_ns_);
    }
    const uint64_t ns = std::min(deadline - now_ns, gather_now_ns_);
    const timespec t{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    nanosleep(&t, nullptr);
    ++gathers_;
    return;
  }
  ++parks_;
  reader_.park(deadline - now_ns);
}

absl::Status Recorder::flush(uint64_t timeout_ns) {
  if (batch_ != nullptr && (!batch_->empty() || gap_lost_ != 0)) hand_over(monotonic_ns());
  if (!sink_->settle(timeout_ns)) {
    return absl::UnavailableError(absl::StrCat("not everything was written: ", sink_->last_error()));
  }
  if (options_.sink.fsync == FsyncPolicy::kNever) return absl::OkStatus();
  return sink_->sync(timeout_ns);
}

}  // namespace ringfire::archive
