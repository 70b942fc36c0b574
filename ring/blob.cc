// blob.cc — blob producer/consumer attach (setup only).
#include "ring/blob.h"

#include "absl/strings/str_cat.h"

namespace ringfire::ring {

BlobProducer::BlobProducer(SequenceWriter w)
    : w_(std::move(w)),
      header_(&w_.file().header()),
      arena_(w_.file().arena()),
      arena_size_(header_->arena_size),
      arena_mask_(header_->arena_size - 1),
      max_blob_(max_blob_bytes(header_->arena_size)),
      reserved_(header_->arena_reserved.load(std::memory_order_relaxed)) {}

absl::StatusOr<BlobProducer> BlobProducer::attach(RingFile file) {
  if (!file.blob()) {
    return absl::FailedPreconditionError(
        absl::StrCat(file.path(), " is a fixed-slot ring: write it with a Producer"));
  }
  auto w = SequenceWriter::attach(std::move(file));
  if (!w.ok()) return w.status();
  return BlobProducer(std::move(*w));
}

BlobConsumer::BlobConsumer(RingFile file, StartPosition start)
    : file_(std::move(file)),
      cursor_(file_, start),
      header_(&file_.header()),
      arena_(file_.arena()),
      arena_size_(header_->arena_size),
      arena_mask_(header_->arena_size - 1),
      max_blob_(max_blob_bytes(header_->arena_size)) {}

absl::StatusOr<BlobConsumer> BlobConsumer::attach(RingFile file, StartPosition start,
                                                  std::string_view reader_name) {
  if (!file.blob()) {
    return absl::FailedPreconditionError(
        absl::StrCat(file.path(), " is a fixed-slot ring: read it with a Consumer"));
  }
  BlobConsumer c(std::move(file), start);
  if (!reader_name.empty()) {
    auto slot = ReaderSlot::claim(c.file_, reader_name);
    if (!slot.ok()) return slot.status();
    c.registry_ = std::move(*slot);
    c.registry_.publish(c.cursor(), 0);
  }
  return c;
}

}  // namespace ringfire::ring
