// replay_feed.cc — see replay_feed.h.
#include "archive/replay_feed.h"

#include <pthread.h>

#include <chrono>
#include <utility>

namespace ringfire::archive {

namespace {
constexpr size_t kChunkBytes = 256u << 10;  // a chunk closes at this many record bytes
constexpr size_t kChunkRecords = 8192;      // ... or entries (gaps and empty records take no bytes)
constexpr auto kRetry = std::chrono::milliseconds(1);  // a segment retention is removing: look again
constexpr auto kEndLook = std::chrono::milliseconds(5);  // at the archive's end: look for what was added
}  // namespace

absl::StatusOr<std::unique_ptr<ReplayFeed>> ReplayFeed::open(const std::string& dir, size_t ahead_bytes) {
  auto r = ArchiveReader::open(dir);
  if (!r.ok()) return r.status();
  r->never_wait();  // a segment being removed is answered Unavailable and tried again, never waited for
  std::unique_ptr<ReplayFeed> f(new ReplayFeed(std::move(*r), ahead_bytes));
  f->thread_ = std::thread([p = f.get()] { p->run(); });
  return f;
}

ReplayFeed::ReplayFeed(ArchiveReader reader, size_t ahead_bytes)
    : catalog_(reader.catalog()), ahead_bytes_(std::max<size_t>(ahead_bytes, kChunkBytes)), reader_(std::move(reader)) {}

ReplayFeed::~ReplayFeed() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

ReplayFeed::Counters ReplayFeed::counters() const {
  std::lock_guard l(mu_);
  return counters_;
}

absl::Status ReplayFeed::seek(uint64_t seq) {
  std::lock_guard l(mu_);
  if (gen_ != 0) {
    if (!settled_ && seq == target_) {
      ++counters_.not_yet;
      return absl::UnavailableError("the archive's reader is on its way there");
    }
    if (settled_ && seek_status_.ok() && seq == deliver_pos_) return absl::OkStatus();  // there already
    if (settled_ && !seek_status_.ok() && seq == target_) return seek_status_;
  }
  // Somewhere else: everything read ahead is dropped and the thread goes there.
  ++gen_;
  target_ = seq;
  settled_ = false;
  seek_status_ = absl::OkStatus();
  first_seq_ = UINT64_MAX;
  tail_ = Tail::kReading;
  tail_error_ = absl::OkStatus();
  while (!queue_.empty()) {
    spare_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  queued_bytes_ = 0;
  cur_.recs.clear();
  cur_at_ = 0;
  deliver_pos_ = seq;
  ++counters_.not_yet;
  cv_.notify_all();
  return absl::UnavailableError("the archive's reader is on its way there");
}

absl::StatusOr<uint64_t> ReplayFeed::first_seq() {
  std::lock_guard l(mu_);
  if (first_seq_ == UINT64_MAX) return absl::FailedPreconditionError("no seek answered OutOfRange");
  return first_seq_;
}

absl::StatusOr<bool> ReplayFeed::next(ArchiveEntry* e) {
  for (;;) {
    if (cur_at_ < cur_.recs.size()) {
      const Rec& r = cur_.recs[cur_at_++];
      e->gap = r.gap;
      e->seq = r.seq;
      e->gap_end = r.gap_end;
      e->gap_lost = r.gap_lost;
      e->bytes = r.gap ? std::span<const uint8_t>() : std::span<const uint8_t>(cur_.data.data() + r.offset, r.len);
      deliver_pos_ = r.gap ? r.gap_end : r.seq + 1;
      return true;
    }
    std::lock_guard l(mu_);
    if (!queue_.empty()) {
      // The next chunk (of this seek: a new one empties the queue); the
      // one read goes back to the thread for reuse.
      spare_.push_back(std::move(cur_));
      cur_ = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= cur_.data.size() + cur_.recs.size() * sizeof(Rec);
      cur_at_ = 0;
      cv_.notify_all();  // room: the thread may read on
      continue;
    }
    if (settled_ && seek_status_.ok() && tail_ == Tail::kEnd) return false;
    if (settled_ && seek_status_.ok() && tail_ == Tail::kError) return tail_error_;
    // Not read this far yet; or the thread, standing at a segment being
    // removed, found it gone (its seek's answer, for the caller's next seek).
    ++counters_.not_yet;
    return absl::UnavailableError("the archive's reader has not read this far yet");
  }
}

bool ReplayFeed::read_one(ArchiveReader& r, Chunk* c, absl::StatusOr<bool>* got) {
  ArchiveEntry e;
  *got = r.next(&e);
  if (!got->ok() || !**got) return false;
  Rec x;
  x.seq = e.seq;
  x.gap = e.gap;
  x.gap_end = e.gap_end;
  x.gap_lost = e.gap_lost;
  if (!e.gap) {
    x.offset = static_cast<uint32_t>(c->data.size());
    x.len = static_cast<uint32_t>(e.bytes.size());
    c->data.insert(c->data.end(), e.bytes.begin(), e.bytes.end());
  }
  c->recs.push_back(x);
  return true;
}

void ReplayFeed::run() {
  pthread_setname_np(pthread_self(), "rf-replay");
  std::unique_lock l(mu_);
  uint64_t served = 0;
  while (!stop_) {
    if (gen_ == served) {
      cv_.wait(l);
      continue;
    }
    served = gen_;
    l.unlock();
    fill(served);
    l.lock();
  }
}

void ReplayFeed::fill(uint64_t gen) {
  std::unique_lock l(mu_);
  auto current = [&] { return !stop_ && gen_ == gen; };
  uint64_t at = target_;
  // Seek: a segment retention holds is tried again until it is gone or free.
  absl::Status st;
  for (;;) {
    l.unlock();
    st = reader_.seek(at);
    uint64_t first = UINT64_MAX;
    if (absl::IsOutOfRange(st)) {
      if (auto f = reader_.first_seq(); f.ok()) first = *f;
    }
    l.lock();
    if (!current()) return;
    if (absl::IsUnavailable(st)) {
      cv_.wait_for(l, kRetry);
      if (!current()) return;
      continue;
    }
    settled_ = true;
    seek_status_ = st;
    first_seq_ = first;
    ++counters_.seeks;
    if (!st.ok()) return;  // the caller's next seek hears it
    break;
  }
  Chunk c;
  for (;;) {
    // Room: at most ahead_bytes_ read ahead of the caller.
    cv_.wait(l, [&] { return !current() || queued_bytes_ < ahead_bytes_; });
    if (!current()) return;
    if (!spare_.empty()) {
      c = std::move(spare_.back());
      spare_.pop_back();
    }
    l.unlock();
    c.data.clear();
    c.recs.clear();
    c.gen = gen;
    absl::StatusOr<bool> got = true;
    while (c.data.size() < kChunkBytes && c.recs.size() < kChunkRecords && read_one(reader_, &c, &got)) {
    }
    const uint64_t pos = reader_.position();
    l.lock();
    if (!current()) return;
    if (!c.recs.empty()) {
      queued_bytes_ += c.data.size() + c.recs.size() * sizeof(Rec);
      queue_.push_back(std::move(c));
      c = Chunk{};
      ++counters_.chunks;
    }
    if (got.ok() && *got) {
      tail_ = Tail::kReading;  // a chunk filled: read on
      continue;
    }
    if (got.ok()) {
      // The archive's end for now: look again shortly for what a recorder adds.
      tail_ = Tail::kEnd;
      cv_.wait_for(l, kEndLook);
      if (!current()) return;
      continue;
    }
    if (!absl::IsUnavailable(got.status())) {
      tail_ = Tail::kError;  // damage: the caller meets it after the last good entry
      tail_error_ = got.status();
      return;
    }
    // A segment retention is removing: stand there again once it is done.
    tail_ = Tail::kReading;
    for (;;) {
      cv_.wait_for(l, kRetry);
      if (!current()) return;
      l.unlock();
      st = reader_.seek(pos);
      uint64_t first = UINT64_MAX;
      if (absl::IsOutOfRange(st)) {
        if (auto f = reader_.first_seq(); f.ok()) first = *f;
      }
      l.lock();
      if (!current()) return;
      if (absl::IsUnavailable(st)) continue;
      if (!st.ok()) {
        // Gone: what follows the queued chunks is that seek's answer, which
        // the caller hears when it seeks there (next() says Unavailable).
        target_ = pos;
        seek_status_ = st;
        first_seq_ = first;
        return;
      }
      break;
    }
  }
}

}  // namespace ringfire::archive
