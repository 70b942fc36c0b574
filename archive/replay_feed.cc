// replay_feed.cc — see replay_feed.h.
#include "archive/replay_feed.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ringfire::archive {

namespace {
constexpr size_t kChunkBytes = 256u << 10;  // a chunk closes at this many record bytes
constexpr size_t kChunkRecords = 8192;      // ... or entries (gaps and empty records take no bytes)
constexpr auto kRetry = std::chrono::milliseconds(1);    // a segment retention is removing: look again
constexpr auto kEndLook = std::chrono::milliseconds(5);  // at the archive's end: look for what was added
constexpr auto kEndFresh = std::chrono::milliseconds(1);  // an end said only this soon after the look that found it
// A caller that has not taken what was read this long (its mirror reads
// slowly, or not at all) no longer holds the segment: see fill().
constexpr auto kParkAfter = std::chrono::milliseconds(100);
// The feeds' threads alive in this process, a replay stopped or not (a
// stopped one ends after the read in flight): a new feed past this is
// refused (Unavailable: try again), so churn on a slow disk cannot pile
// them up.
constexpr int kMaxThreads = 32;
std::atomic<int> threads_alive{0};
}  // namespace

// One entry of a chunk: a record (bytes [offset, offset + len) of the
// chunk's data) or a gap the recorder took.
struct ReplayFeed::Rec {
  uint64_t seq = 0;
  uint64_t gap_end = 0;
  uint64_t gap_lost = 0;
  uint32_t offset = 0;
  uint32_t len = 0;
  bool gap = false;
  uint64_t end() const { return gap ? gap_end : seq + 1; }
};

struct ReplayFeed::Chunk {
  std::vector<uint8_t> data;
  std::vector<Rec> recs;
  size_t bytes() const { return data.size() + recs.size() * sizeof(Rec); }
};

// Shared: the thread's and the caller's, every field under mu.
struct ReplayFeed::Shared {
  enum class Tail : uint8_t { kReading, kEnd, kError };  // what the thread found past the last chunk queued

  explicit Shared(ArchiveReader r, size_t ahead) : reader(std::move(r)), ahead_bytes(ahead) {}
  void run();              // the thread
  void fill(uint64_t gen);  // the thread: one seek's reading, until told otherwise
  // seek_reader: the reader's seek (the thread's, without mu); OutOfRange
  // sets *first to the archive's first sequence.
  absl::Status seek_reader(uint64_t seq, uint64_t* first);
  bool current(uint64_t g) const { return !stop && gen == g; }

  ArchiveReader reader;  // the thread's alone (never touched under mu by the caller)
  const size_t ahead_bytes;

  std::mutex mu;
  std::condition_variable cv;  // the thread waits on it: a request, room, a look asked for, or stop
  bool stop = false;
  uint64_t gen = 0;            // the latest seek asked of the thread (0: none)
  uint64_t target = 0;         // ... to where (UINT64_MAX: an error said, ask again)
  bool settled = false;        // the thread has answered it: seek_status
  absl::Status seek_status;
  uint64_t first_seq = UINT64_MAX;
  std::deque<Chunk> queue;     // chunks of gen, in order
  size_t queued_bytes = 0;
  std::vector<Chunk> spare;    // chunks handed back, for reuse
  Tail tail = Tail::kReading;  // past the last queued chunk (of gen)
  absl::Status tail_error;
  bool look_again = false;     // the caller met the end: look once more before it is told so
  bool end_confirmed = false;  // a look begun after that ask found the end ...
  std::chrono::steady_clock::time_point end_confirmed_at;  // ... then (stale after kEndFresh: asked again)
  Counters counters;
};

absl::StatusOr<std::unique_ptr<ReplayFeed>> ReplayFeed::open(const std::string& dir, size_t ahead_bytes) {
  auto r = ArchiveReader::open(dir);
  if (!r.ok()) return r.status();
  r->never_wait();  // a segment being removed is answered Unavailable and tried again, never waited for
  std::unique_ptr<ReplayFeed> f(new ReplayFeed());
  f->catalog_ = r->catalog();
  f->cur_ = std::make_unique<Chunk>();
  f->sh_ = std::make_shared<Shared>(std::move(*r), std::max<size_t>(ahead_bytes, kChunkBytes));
  if (threads_alive.fetch_add(1, std::memory_order_relaxed) >= kMaxThreads) {
    threads_alive.fetch_sub(1, std::memory_order_relaxed);
    return absl::UnavailableError(absl::StrCat(kMaxThreads, " archive readers are still running: try again"));
  }
  try {
    // It co-owns sh_: the feed never waits for it; it counts itself out.
    std::thread([sh = f->sh_] {
      sh->run();
      threads_alive.fetch_sub(1, std::memory_order_relaxed);
    }).detach();
  } catch (const std::system_error& e) {
    threads_alive.fetch_sub(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat("no thread to read the archive with: ", e.what()));
  }
  return f;
}

ReplayFeed::~ReplayFeed() {
  {
    std::lock_guard l(sh_->mu);
    sh_->stop = true;
  }
  sh_->cv.notify_all();
}

ReplayFeed::Counters ReplayFeed::counters() const {
  std::lock_guard l(sh_->mu);
  return sh_->counters;
}

bool ReplayFeed::skip_to(uint64_t seq) {
  Shared& s = *sh_;
  for (;;) {
    while (cur_at_ < cur_->recs.size()) {
      const Rec& r = cur_->recs[cur_at_];
      if (r.seq >= seq) {  // the first entry at or after it
        deliver_pos_ = seq;
        prev_valid_ = false;
        return true;
      }
      if (r.gap && r.gap_end > seq) return false;  // inside a recorded gap: the reader says how it answers that
      ++cur_at_;
    }
    if (s.queue.empty()) return false;
    s.spare.push_back(std::move(*cur_));
    *cur_ = std::move(s.queue.front());
    s.queue.pop_front();
    s.queued_bytes -= cur_->bytes();
    cur_at_ = 0;
    s.cv.notify_all();  // room: the thread may read on
  }
}

absl::Status ReplayFeed::seek(uint64_t seq) {
  Shared& s = *sh_;
  std::lock_guard l(s.mu);
  if (s.gen != 0) {
    if (!s.settled && seq == s.target) {
      ++s.counters.not_yet;
      return absl::UnavailableError("the archive's reader is on its way there");
    }
    if (s.settled && s.seek_status.ok()) {
      // Put back the last entry handed out, when the caller read one too far.
      if (seq < deliver_pos_ && prev_valid_ && seq >= prev_pos_) {
        --cur_at_;
        deliver_pos_ = prev_pos_;
        prev_valid_ = false;
      }
      if (seq == deliver_pos_) return absl::OkStatus();
      if (seq > deliver_pos_ && skip_to(seq)) {
        ++s.counters.skipped;
        return absl::OkStatus();
      }
    }
    if (s.settled && !s.seek_status.ok() && seq == s.target) {
      const absl::Status st = s.seek_status;
      if (!absl::IsOutOfRange(st)) s.target = UINT64_MAX;  // said once: the next seek sends the thread again
      return st;
    }
  }
  // Anywhere else: what was read ahead goes, and the thread goes there.
  ++s.gen;
  s.target = seq;
  s.settled = false;
  s.seek_status = absl::OkStatus();
  s.first_seq = UINT64_MAX;
  s.tail = Shared::Tail::kReading;
  s.tail_error = absl::OkStatus();
  s.look_again = false;
  s.end_confirmed = false;
  while (!s.queue.empty()) {
    s.spare.push_back(std::move(s.queue.front()));
    s.queue.pop_front();
  }
  s.queued_bytes = 0;
  cur_->recs.clear();
  cur_at_ = 0;
  deliver_pos_ = seq;
  prev_valid_ = false;
  ++s.counters.not_yet;
  s.cv.notify_all();
  return absl::UnavailableError("the archive's reader is on its way there");
}

absl::StatusOr<uint64_t> ReplayFeed::first_seq() {
  std::lock_guard l(sh_->mu);
  if (sh_->first_seq == UINT64_MAX) return absl::FailedPreconditionError("no seek answered OutOfRange");
  return sh_->first_seq;
}

absl::StatusOr<bool> ReplayFeed::next(ArchiveEntry* e) {
  Shared& s = *sh_;
  for (;;) {
    if (cur_at_ < cur_->recs.size()) {
      const Rec& r = cur_->recs[cur_at_++];
      e->gap = r.gap;
      e->seq = r.seq;
      e->gap_end = r.gap_end;
      e->gap_lost = r.gap_lost;
      e->bytes = r.gap ? std::span<const uint8_t>() : std::span<const uint8_t>(cur_->data.data() + r.offset, r.len);
      prev_pos_ = deliver_pos_;
      prev_valid_ = true;
      deliver_pos_ = r.end();
      return true;
    }
    std::lock_guard l(s.mu);
    if (!s.queue.empty()) {
      // The next chunk (of this seek: a new one empties the queue); the
      // one read goes back to the thread for reuse.
      s.spare.push_back(std::move(*cur_));
      *cur_ = std::move(s.queue.front());
      s.queue.pop_front();
      s.queued_bytes -= cur_->bytes();
      cur_at_ = 0;
      prev_valid_ = false;
      s.cv.notify_all();  // room: the thread may read on
      continue;
    }
    if (s.settled && s.seek_status.ok() && s.tail == Shared::Tail::kEnd) {
      if (s.end_confirmed && std::chrono::steady_clock::now() - s.end_confirmed_at < kEndFresh) {
        s.end_confirmed = false;  // the next end is asked about again
        return false;
      }
      s.end_confirmed = false;  // none, or too old to say: look again
      s.look_again = true;  // not yet: the thread looks once more, now
      s.cv.notify_all();
    } else if (s.settled && s.seek_status.ok() && s.tail == Shared::Tail::kError) {
      const absl::Status st = s.tail_error;
      s.seek_status = st;  // said once: any seek now sends the thread again
      s.target = UINT64_MAX;
      return st;
    }
    // Not read this far yet; or the thread, standing at a segment being
    // removed, found it gone (its seek's answer, for the caller's next seek).
    ++s.counters.not_yet;
    return absl::UnavailableError("the archive's reader has not read this far yet");
  }
}

namespace {

// read_one: the reader's next entry appended to the chunk; false (and
// *got says why: the end, or an error) when there was none.
template <class Chunk>
bool read_one(ArchiveReader& r, Chunk* c, absl::StatusOr<bool>* got) {
  ArchiveEntry e;
  *got = r.next(&e);
  if (!got->ok() || !**got) return false;
  auto& x = c->recs.emplace_back();
  x.seq = e.seq;
  x.gap = e.gap;
  x.gap_end = e.gap_end;
  x.gap_lost = e.gap_lost;
  if (!e.gap) {
    x.offset = static_cast<uint32_t>(c->data.size());
    x.len = static_cast<uint32_t>(e.bytes.size());
    c->data.insert(c->data.end(), e.bytes.begin(), e.bytes.end());
  }
  return true;
}

}  // namespace

void ReplayFeed::Shared::run() {
  pthread_setname_np(pthread_self(), "rf-replay");
  std::unique_lock l(mu);
  uint64_t served = 0;
  while (!stop) {
    if (gen == served) {
      cv.wait(l);
      continue;
    }
    served = gen;
    l.unlock();
    fill(served);
    l.lock();
  }
}

absl::Status ReplayFeed::Shared::seek_reader(uint64_t seq, uint64_t* first) {
  const absl::Status st = reader.seek(seq);
  if (absl::IsOutOfRange(st)) {
    if (auto f = reader.first_seq(); f.ok()) *first = *f;
  }
  return st;
}

void ReplayFeed::Shared::fill(uint64_t g) {
  std::unique_lock l(mu);
  const uint64_t at = target;
  // Seek: a segment retention holds is tried again until it is gone or free.
  absl::Status st;
  for (;;) {
    l.unlock();
    uint64_t first = UINT64_MAX;
    st = seek_reader(at, &first);
    l.lock();
    if (!current(g)) return;
    if (absl::IsUnavailable(st)) {
      cv.wait_for(l, kRetry);
      if (!current(g)) return;
      continue;
    }
    settled = true;
    seek_status = st;
    first_seq = first;
    ++counters.seeks;
    if (!st.ok()) return;  // the caller's next seek hears it
    break;
  }
  // stand_again: the reader at `pos` again after it let its segment go (or
  // found it being removed); false: this seek's reading is over (told
  // otherwise, or the segment is gone: the caller hears that seek's answer
  // when it seeks there; next() says Unavailable).
  auto stand_again = [&](uint64_t pos) {
    for (;;) {
      l.unlock();
      uint64_t first = UINT64_MAX;
      st = seek_reader(pos, &first);
      l.lock();
      if (!current(g)) return false;
      if (absl::IsUnavailable(st)) {  // being removed: once it is done
        cv.wait_for(l, kRetry);
        if (!current(g)) return false;
        continue;
      }
      if (!st.ok()) {
        target = pos;
        seek_status = st;
        first_seq = first;
        return false;
      }
      return true;
    }
  };
  Chunk c;
  // resume: the sequence after the last entry queued (the reader's
  // position() is its batch's end, past entries a full chunk left unread).
  uint64_t resume = at;
  for (;;) {
    // Room: at most ahead_bytes read ahead of the caller (and a chunk more).
    const auto room = [&] { return !current(g) || queued_bytes < ahead_bytes || (look_again && queue.empty()); };
    if (!cv.wait_for(l, kParkAfter, room)) {
      // Parked: the segment it has open goes (the reader keeps no lock on
      // it, never_wait; but retention may have removed it, and its space
      // stays taken while it is open: one stranger's mirror reading a
      // trickle held an archive past its bound, review helper-42). The
      // reader stands there again once there is room; if retention removed
      // it meanwhile, that seek's answer (OutOfRange) is what the caller
      // hears next.
      l.unlock();
      reader.release();
      l.lock();
      cv.wait(l, room);
      if (!current(g) || !stand_again(resume)) return;
    }
    if (!current(g)) return;
    if (!spare.empty()) {
      c = std::move(spare.back());
      spare.pop_back();
    }
    const bool asked = look_again;  // a look begun after the caller met the end
    l.unlock();
    c.data.clear();
    c.recs.clear();
    absl::StatusOr<bool> got = true;
    while (c.data.size() < kChunkBytes && c.recs.size() < kChunkRecords && read_one(reader, &c, &got)) {
    }
    l.lock();
    if (!current(g)) return;
    if (!c.recs.empty()) {
      resume = c.recs.back().end();
      queued_bytes += c.bytes();
      queue.push_back(std::move(c));
      c = Chunk{};
      ++counters.chunks;
      end_confirmed = false;  // the caller reads these first, then asks about the end again
    }
    if (got.ok() && *got) {
      tail = Tail::kReading;  // a chunk filled: read on
      continue;
    }
    if (got.ok()) {
      // The archive's end for now: said to a caller that asked before this
      // look began; then a look again shortly for what a recorder adds, or
      // at once when the caller asks.
      tail = Tail::kEnd;
      if (asked) {
        look_again = false;
        end_confirmed = true;
        end_confirmed_at = std::chrono::steady_clock::now();
      }
      cv.wait_for(l, kEndLook, [&] { return !current(g) || look_again; });
      if (!current(g)) return;
      continue;
    }
    if (!absl::IsUnavailable(got.status())) {
      tail = Tail::kError;  // damage: the caller meets it after the last good entry
      tail_error = got.status();
      return;
    }
    // A segment retention is removing: stand there again once it is done.
    tail = Tail::kReading;
    cv.wait_for(l, kRetry);
    if (!current(g) || !stand_again(resume)) return;
  }
}

}  // namespace ringfire::archive
