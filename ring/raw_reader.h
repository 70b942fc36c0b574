// raw_reader.h — reads any ring as raw records without knowing its element
// type: a fixed ring's slot payloads, or a blob ring's blobs (re-checked
// against the arena, so an overwritten blob is lost, never shipped torn).
// What `serve` ships and what NAK repair re-reads. One thread.
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "ring/blob.h"
#include "ring/consumer.h"
#include "ring/lazy_bytes.h"

namespace ringfire::ring {

class RawReader {
 public:
  // attach opens a reader at `start`; with a reader_name it also claims a
  // registry entry (`ringfire stat` shows its lag).
  static absl::StatusOr<RawReader> attach(RingFile file, StartPosition start,
                                          std::string_view reader_name = {}) {
    RawReader r;
    if (file.blob()) {
      auto c = BlobConsumer::attach(std::move(file), start, reader_name);
      if (!c.ok()) return c.status();
      r.blob_.emplace(std::move(*c));
      r.buf_ = LazyBytes(r.blob_->max_blob());
    } else {
      auto c = Consumer::attach(std::move(file), start, reader_name);
      if (!c.ok()) return c.status();
      r.fixed_.emplace(std::move(*c));
      r.buf_ = LazyBytes(r.fixed_->record_size());
    }
    return r;
  }

  // next reads the next record into record(); its length into *len.
  ReadResult next(uint32_t* len) {
    if (fixed_) {
      *len = fixed_->record_size();
      return fixed_->try_read(buf_.data());
    }
    return blob_->try_read(buf_.data(), len);
  }
  // next_within (blob rings only) reads the next blob straight into `dst`
  // when it fits `room` bytes; a longer one stays unread and comes back
  // !ok with its length in *len (BlobConsumer::try_read_within).
  ReadResult next_within(std::byte* dst, uint32_t room, uint32_t* len) {
    return blob_->try_read_within(dst, room, len);
  }
  // next_into (fixed-slot rings only) reads the next record's
  // fixed_size() bytes straight into `dst` (a frame being built), not into
  // record(). On !ok, `dst` may hold a torn or stale copy: ignore it.
  ReadResult next_into(std::byte* dst) { return fixed_->try_read(dst); }
  const std::byte* record() const { return buf_.data(); }
  uint64_t cursor() const { return fixed_ ? fixed_->cursor() : blob_->cursor(); }
  // published: one past the writer's last sequence (a hint, see SlotCursor).
  uint64_t published() const { return fixed_ ? fixed_->published() : blob_->published(); }
  // seek makes `seq` the next record to read (NAK repair re-reads a range).
  void seek(uint64_t seq) {
    if (fixed_) {
      fixed_->seek(seq);
    } else {
      blob_->seek(seq);
    }
  }
  // park waits at most timeout_ns for the writer to publish (see wait.h).
  void park(uint64_t timeout_ns) {
    if (fixed_) {
      fixed_->park(timeout_ns);
    } else {
      blob_->park(timeout_ns);
    }
  }
  uint64_t holes_skipped() const { return fixed_ ? fixed_->holes_skipped() : blob_->holes_skipped(); }
  // header: the ring's (a worker that parks on the ring with a word read
  // earlier calls wait_for_write itself).
  RingHeader& header() const { return fixed_ ? fixed_->file().header() : blob_->file().header(); }
  // file: the ring's mapping (to warm it: RingFile::warm).
  const RingFile& file() const { return fixed_ ? fixed_->file() : blob_->file(); }
  bool blob() const { return blob_.has_value(); }
  // fixed_size is the record size of a fixed-slot ring, 0 for a blob ring.
  uint32_t fixed_size() const { return fixed_ ? fixed_->record_size() : 0; }

 private:
  RawReader() = default;
  std::optional<Consumer> fixed_;
  std::optional<BlobConsumer> blob_;
  LazyBytes buf_;  // a blob ring's largest record: pages taken as records reach them
};

}  // namespace ringfire::ring
