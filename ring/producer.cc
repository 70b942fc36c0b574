// producer.cc — writer attach (setup only).
#include "ring/producer.h"

#include "absl/strings/str_cat.h"

namespace ringfire::ring {

SequenceWriter::SequenceWriter(RingFile file)
    : file_(std::move(file)),
      header_(&file_.header()),
      sparse_(file_.sparse()) {
  // Acquire: pairs with the previous writer's release of write_seq.
  next_ = header_->write_seq.load(std::memory_order_acquire);
  // A writer killed between committing a slot and storing write_seq left a
  // committed record nobody announced; adopt it rather than rewrite the
  // sequence with different bytes.
  // Acquire: pairs with the slot commit's release (slot.h).
  while (file_.slot(next_)->word.load(std::memory_order_acquire) == committed_word(next_)) {
    ++next_;
  }
  // Release: pairs with readers' acquire loads of write_seq.
  header_->write_seq.store(next_, std::memory_order_release);
}

absl::StatusOr<SequenceWriter> SequenceWriter::attach(RingFile file) {
  if (absl::Status s = file.lock_writer(); !s.ok()) return s;
  return SequenceWriter(std::move(file));
}

absl::StatusOr<Producer> Producer::attach(RingFile file) {
  if (file.blob()) {
    return absl::FailedPreconditionError(
        absl::StrCat(file.path(), " is a blob ring: write it with a BlobProducer"));
  }
  auto w = SequenceWriter::attach(std::move(file));
  if (!w.ok()) return w.status();
  return Producer(std::move(*w));
}

}  // namespace ringfire::ring
