// batch_sink.cc — the recorder's writing thread.
#include "archive/batch_sink.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>

namespace ringfire::archive {
namespace {

// kFlushLookNs: how soon a write-behind sync is looked at again.
constexpr uint64_t kFlushLookNs = 10'000'000;

uint64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

BatchSink::BatchSink(SegmentWriter writer, const SinkOptions& options, uint64_t batch_bytes, uint32_t max_record)
    : writer_(std::move(writer)),
      options_(options),
      batch_bytes_(batch_bytes),
      max_record_(max_record),
      base_buffers_(std::max<size_t>(options.buffers, 2)) {
  writer_.set_sync_on_seal(options.fsync != FsyncPolicy::kNever);
  // kInterval syncs by time already: no quiet steps.
  writer_.set_write_behind(options.fsync != FsyncPolicy::kNever ? options.write_behind_bytes : 0,
                           options.write_behind_ns,
                           options.fsync == FsyncPolicy::kSegment ? options.write_behind_quiet_ns : 0);
  for (size_t i = 0; i < base_buffers_; ++i) {
    buffers_.push_back(std::make_unique<BatchBuilder>(batch_bytes, max_record));
    free_.push_back(buffers_.back().get());
  }
  count_buffers();
  counters_.recorded_end.store(writer_.end_seq(), std::memory_order_relaxed);
  counters_.durable_end.store(writer_.durable_end(), std::memory_order_relaxed);
  counters_.segments.store(writer_.segments(), std::memory_order_relaxed);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "rf-archive");
    run();
  });
}

BatchSink::~BatchSink() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void BatchSink::count_buffers() {
  counters_.buffer_bytes.store(buffers_.size() * buffers_.front()->capacity(), std::memory_order_relaxed);
}

BatchBuilder* BatchSink::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      BatchBuilder* b = free_.back();
      free_.pop_back();
      // Out now: every buffer but the free ones.
      if (buffers_.size() - free_.size() > base_buffers_) needed_extra_ = true;
      return b;
    }
  }
  needed_extra_ = true;
  // Every buffer is queued: the disk is behind. Another buffer, while the
  // bound allows (made outside mu_: the writer frees buffers meanwhile).
  // Kept while stalls keep coming (trim).
  if ((buffers_.size() + 1) * buffers_.front()->capacity() > options_.max_buffer_bytes) return nullptr;
  try {
    buffers_.push_back(std::make_unique<BatchBuilder>(batch_bytes_, max_record_));
  } catch (const std::bad_alloc&) {
    return nullptr;  // no memory for another: as at the bound
  }
  count_buffers();
  return buffers_.back().get();
}

void BatchSink::submit(BatchBuilder* batch, std::span<const uint8_t> sealed, uint64_t end_seq, uint64_t now_ns) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Job{batch, sealed, end_seq, now_ns, false});
    ++submitted_;
  }
  work_cv_.notify_one();
}

void BatchSink::tick(uint64_t now_ns) {
  if (buffers_.size() > base_buffers_) trim(now_ns);
  // Relaxed: a hint; a tick missed now is taken at the next poll.
  if (now_ns < due_ns_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty()) return;  // the queued job housekeeps too
    queue_.push_back(Job{nullptr, {}, 0, now_ns, false});
    ++submitted_;
  }
  work_cv_.notify_one();
}

void BatchSink::trim(uint64_t now_ns) {
  if (needed_extra_) {
    needed_extra_ = false;
    needed_extra_ns_ = now_ns;
    return;
  }
  if (now_ns - needed_extra_ns_ < options_.trim_after_ns) return;
  // The free ones go, down to the first count (a queued one is the
  // writer's until it comes back free).
  std::vector<BatchBuilder*> going;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (buffers_.size() - going.size() > base_buffers_ && !free_.empty()) {
      going.push_back(free_.back());
      free_.pop_back();
    }
  }
  std::erase_if(buffers_, [&](const std::unique_ptr<BatchBuilder>& b) {
    return std::find(going.begin(), going.end(), b.get()) != going.end();
  });
  count_buffers();
}

bool BatchSink::settle(uint64_t timeout_ns) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = submitted_;
  done_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] {
    return completed_ >= target || counters_.stalled.load(std::memory_order_relaxed);
  });
  return completed_ >= target;
}

absl::Status BatchSink::sync(uint64_t timeout_ns) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Job{nullptr, {}, 0, 0, true});
    ++submitted_;
  }
  work_cv_.notify_one();
  if (!settle(timeout_ns)) return absl::UnavailableError(last_error());
  std::lock_guard<std::mutex> lock(mu_);
  return sync_result_;
}

void BatchSink::wait_for_buffer(uint64_t timeout_ns) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] { return !free_.empty(); });
}

std::string BatchSink::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void BatchSink::note_error(const absl::Status& st) {
  counters_.disk_errors.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  error_ = std::string(st.message());
}

// housekeep syncs and removes segments when due by `now_ns`, and says
// when it next has work (due_ns_). Writer thread.
void BatchSink::housekeep(uint64_t now_ns, bool force_sync) {
  const bool interval = options_.fsync == FsyncPolicy::kInterval;
  if (force_sync || (interval && writer_.dirty() && now_ns >= next_sync_ns_)) {
    absl::Status st = writer_.sync();
    if (!st.ok()) note_error(st);
    if (!force_sync) next_sync_ns_ = now_ns + options_.fsync_interval_ns;
    std::lock_guard<std::mutex> lock(mu_);
    sync_result_ = st;
  }
  if (writer_.flushing()) {
    if (absl::Status st = writer_.reap(); !st.ok()) note_error(st);
  }
  if (absl::Status st = writer_.take_step_error(); !st.ok()) note_error(st);
  writer_.step_if_quiet();
  const bool retains = options_.retention.max_bytes != 0 || options_.retention.max_age_ns != 0;
  if (retains && now_ns >= next_retention_ns_ && !force_sync) {
    next_retention_ns_ = now_ns + options_.retention_every_ns;
    retain();
  }
  counters_.segments.store(writer_.segments(), std::memory_order_relaxed);
  counters_.fsyncs.store(writer_.fsyncs(), std::memory_order_relaxed);
  counters_.durable_end.store(writer_.durable_end(), std::memory_order_relaxed);
  uint64_t due = UINT64_MAX;
  if (interval && writer_.dirty()) due = next_sync_ns_;
  if (retains) due = std::min(due, next_retention_ns_);
  // A write-behind sync is looked at again soon (reap), so that what it
  // made durable shows without waiting for the next batch.
  if (writer_.flushing()) due = std::min(due, now_ns + kFlushLookNs);
  // An unsynced tail gets its quiet step without waiting for a batch.
  if (writer_.awaits_quiet_step()) due = std::min(due, now_ns + options_.write_behind_quiet_ns);
  due_ns_.store(due, std::memory_order_relaxed);
}

// retain removes what the retention policy lets go. Writer thread.
void BatchSink::retain() {
  uint64_t deferred = 0;
  auto removed = writer_.enforce(options_.retention, unix_now_ns(), &deferred);
  if (removed.ok()) {
    counters_.segments_removed.fetch_add(*removed, std::memory_order_relaxed);
  } else {
    note_error(removed.status());
  }
  counters_.removals_deferred.fetch_add(deferred, std::memory_order_relaxed);
}

void BatchSink::run() {
  // abandoned: a batch was dropped on the way out (the disk still full at
  // stop); the ones queued behind it are dropped too, or the archive's
  // chain would skip it. The next recorder re-reads them from the ring.
  bool abandoned = false;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped, everything written
      job = queue_.front();
    }
    if (job.batch != nullptr && !abandoned) {
      for (bool last_try = false;;) {
        const absl::Status st =
            writer_.append(job.sealed, job.batch->first_seq(), job.end_seq, job.batch->records());
        if (st.ok()) {
          counters_.stalled.store(false, std::memory_order_relaxed);
          counters_.records.fetch_add(job.batch->records(), std::memory_order_relaxed);
          counters_.bytes.fetch_add(job.sealed.size(), std::memory_order_relaxed);
          counters_.batches.fetch_add(1, std::memory_order_relaxed);
          counters_.recorded_end.store(job.end_seq, std::memory_order_relaxed);
          break;
        }
        note_error(st);
        counters_.stalled.store(true, std::memory_order_relaxed);
        done_cv_.notify_all();  // a settle waiting on this batch returns
        if (last_try) {         // stopping: the next recorder re-reads it from the ring
          abandoned = true;
          break;
        }
        {
          std::unique_lock<std::mutex> lock(mu_);
          work_cv_.wait_for(lock, std::chrono::nanoseconds(options_.retry_ns), [&] { return stop_; });
          last_try = stop_;
        }
        // Retention may be what frees the room (mu_ released: enforce is I/O).
        if (options_.retention.max_bytes != 0 || options_.retention.max_age_ns != 0) retain();
      }
    }
    housekeep(job.now_ns, job.sync);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      if (job.batch != nullptr) free_.push_back(job.batch);
      ++completed_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace ringfire::archive
