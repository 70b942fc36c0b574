// mirror_writer.h — writes records into a mirror ring under their original
// sequence numbers: fixed-slot records verbatim, blobs into the mirror's own
// arena with a descriptor of its own. The ring is SPARSE, so sequences the
// mirror never receives (before it joined, or GAPs) are holes its readers
// skip. Worker thread only.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "proto/bytes.h"
#include "ring/blob.h"
#include "ring/producer.h"

namespace ringfire::dataplane {

class MirrorWriter {
 public:
  // attach takes the writer side of a sparse mirror ring.
  static absl::StatusOr<MirrorWriter> attach(ring::RingFile file);

  bool blob() const { return blob_.has_value(); }
  uint32_t slot_size() const { return slot_size_; }
  uint32_t max_blob() const { return blob_ ? blob_->max_blob() : 0; }
  // next_seq is one past the last sequence written (what a resume asks for).
  uint64_t next_seq() const { return blob_ ? blob_->next_seq() : fixed_->next_seq(); }

  // defer_wakes: write() no longer wakes the ring's parked readers; the
  // owner calls wake_parked() once for a run of writes (a mirror session:
  // once a step, one fence a step rather than one a record).
  void defer_wakes() {
    if (fixed_) fixed_->defer_wakes();
    if (blob_) blob_->defer_wakes();
  }
  // wake_parked: the ring's parked readers woken, if any asked, for what
  // write() announced since.
  void wake_parked() const {
    if (fixed_) fixed_->wake_parked();
    if (blob_) blob_->wake_parked();
  }

  // write stores one record as `seq` (>= next_seq()); false if the record has
  // the wrong size for this ring or the sequence is behind.
  bool write(uint64_t seq, proto::ConstBytes record) {
    if (fixed_) {
      return record.size() == slot_size_ && fixed_->publish_at(seq, record.data());
    }
    if (record.size() > blob_->max_blob()) return false;
    const auto len = static_cast<uint32_t>(record.size());
    std::span<std::byte> dst = blob_->reserve(len);
    if (len != 0) std::memcpy(dst.data(), record.data(), len);
    return blob_->commit_at(seq, len);
  }

 private:
  MirrorWriter() = default;
  std::optional<ring::Producer> fixed_;
  std::optional<ring::BlobProducer> blob_;
  uint32_t slot_size_ = 0;
};

}  // namespace ringfire::dataplane
