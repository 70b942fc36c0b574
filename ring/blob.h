// blob.h — blob rings: variable-size payloads in a byte arena. The slot holds
// a BlobDescriptor; the arena's reservation counter only grows. A reader
// re-checks the counter after copying, so a blob the writer overwrote while
// (or before) it was copied is reported lost, never returned corrupted.
// Header-only hot path.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "ring/consumer.h"
#include "ring/producer.h"

namespace ringfire::ring {

// max_blob_bytes is the largest blob a ring with this arena accepts: a
// quarter of the arena, so a blob survives at least a few successors.
constexpr uint32_t max_blob_bytes(uint64_t arena_size) {
  const uint64_t quarter = arena_size / 4;
  return quarter > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(quarter);
}

// BlobProducer is the single writer of a blob ring.
class BlobProducer {
 public:
  static absl::StatusOr<BlobProducer> attach(RingFile file);

  uint64_t next_seq() const { return w_.next_seq(); }
  uint32_t max_blob() const { return max_blob_; }
  const RingFile& file() const { return w_.file(); }
  // defer_wakes / wake_parked: see SequenceWriter.
  void defer_wakes() { w_.defer_wakes(); }
  void wake_parked() const { w_.wake_parked(); }

  // reserve returns `len` writable arena bytes for the next blob, or an empty
  // span if len > max_blob(). Follow with commit (or reserve again).
  std::span<std::byte> reserve(uint32_t len) {
    if (len > max_blob_) return {};
    uint64_t pos = reserved_;
    const uint64_t offset = pos & arena_mask_;
    if (offset + len > arena_size_) pos += arena_size_ - offset;  // never wrap a blob
    reserved_ = (pos + len + 7) & ~uint64_t{7};
    header_->arena_reserved.store(reserved_, std::memory_order_relaxed);
    // Release fence: pairs with the acquire fence in BlobConsumer::try_read.
    // A reader that copied any byte written below sees the new counter.
    std::atomic_thread_fence(std::memory_order_release);
    pending_pos_ = pos;
    return {arena_ + (pos & arena_mask_), len};
  }

  // commit publishes the reserved blob (its first `len` bytes).
  uint64_t commit(uint32_t len) {
    const uint64_t seq = w_.next_seq();
    write_descriptor(seq, len);
    return seq;
  }

  // commit_at publishes the reserved blob under `seq` (>= next_seq()) on a
  // sparse ring; returns false if the ring cannot take that sequence.
  bool commit_at(uint64_t seq, uint32_t len) {
    if (!w_.accepts(seq)) return false;
    write_descriptor(seq, len);
    return true;
  }

  // publish copies `blob` in and publishes it; false if it is too large.
  bool publish(std::span<const std::byte> blob) {
    std::span<std::byte> dst = reserve(static_cast<uint32_t>(blob.size()));
    if (dst.size() != blob.size() || blob.size() > max_blob_) return false;
    std::memcpy(dst.data(), blob.data(), blob.size());
    commit(static_cast<uint32_t>(blob.size()));
    return true;
  }

 private:
  explicit BlobProducer(SequenceWriter w);
  void write_descriptor(uint64_t seq, uint32_t len) {
    const BlobDescriptor d{pending_pos_, len, 0};
    std::memcpy(w_.begin(seq), &d, sizeof(d));
    w_.finish(seq);
  }

  SequenceWriter w_;
  RingHeader* header_;
  std::byte* arena_;
  uint64_t arena_size_;
  uint64_t arena_mask_;
  uint32_t max_blob_;
  uint64_t reserved_ = 0;
  uint64_t pending_pos_ = 0;
};

// BlobConsumer reads a blob ring.
class BlobConsumer {
 public:
  static absl::StatusOr<BlobConsumer> attach(RingFile file, StartPosition start,
                                             std::string_view reader_name = {});

  uint32_t max_blob() const { return max_blob_; }
  uint64_t cursor() const { return cursor_.cursor(); }
  uint64_t published() const { return cursor_.published(); }
  uint64_t total_lost() const { return lost_; }
  uint64_t overwritten() const { return overwritten_; }
  uint64_t holes_skipped() const { return cursor_.holes_skipped(); }
  const RingFile& file() const { return file_; }
  void seek(uint64_t seq) { cursor_.seek(seq); }
  void park(uint64_t timeout_ns) { cursor_.park(timeout_ns); }

  // try_read copies the next blob into `out` (at least max_blob() bytes) and
  // its length into `*len`. A blob overwritten in the arena before or while
  // it was copied is skipped and counted in `lost` (and in overwritten()).
  ReadResult try_read(std::byte* out, uint32_t* len) { return try_read_within(out, max_blob_, len); }

  // try_read_within is try_read into `room` bytes at `out`: a blob longer
  // than that stays unread (the next call finds it again) and comes back
  // as !ok with its length in *len, so a caller copying into a batch reads
  // each blob once, straight into place.
  ReadResult try_read_within(std::byte* out, uint32_t room, uint32_t* len) {
    ReadResult total;
    *len = 0;
    for (;;) {
      BlobDescriptor d;
      ReadResult r = cursor_.next(reinterpret_cast<std::byte*>(&d), sizeof(d));
      total.lost += r.lost;
      if (!r.ok) break;
      const uint64_t offset = d.arena_pos & arena_mask_;
      if (d.length > room && d.length <= max_blob_) {
        cursor_.seek(r.seq);
        *len = d.length;
        break;
      }
      if (d.length <= max_blob_ && offset + d.length <= arena_size_) {
        std::memcpy(out, arena_ + offset, d.length);
        // Acquire fence: pairs with the release fence in BlobProducer::reserve.
        std::atomic_thread_fence(std::memory_order_acquire);
        const uint64_t reserved = header_->arena_reserved.load(std::memory_order_relaxed);
        if (reserved <= d.arena_pos + arena_size_) {
          *len = d.length;
          total.ok = true;
          total.seq = r.seq;
          break;
        }
      }
      ++total.lost;  // overwritten underneath us (or a descriptor out of range)
      ++overwritten_;
    }
    lost_ += total.lost;
    if (!total.ok) registry_.publish(cursor_.cursor(), lost_);
    return total;
  }

 private:
  BlobConsumer(RingFile file, StartPosition start);

  RingFile file_;
  SlotCursor cursor_;
  const RingHeader* header_;
  const std::byte* arena_;
  uint64_t arena_size_;
  uint64_t arena_mask_;
  uint32_t max_blob_;
  uint64_t lost_ = 0;
  uint64_t overwritten_ = 0;
  ReaderSlot registry_;
};

}  // namespace ringfire::ring
