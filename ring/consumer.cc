// consumer.cc — reader attach and start positions (setup only).
#include "ring/consumer.h"

#include "absl/strings/str_cat.h"

namespace ringfire::ring {

SlotCursor::SlotCursor(const RingFile& file, StartPosition start)
    : slots_(file.slots()),
      header_(&file.header()),
      capacity_(file.capacity()),
      sparse_(file.sparse()) {
  // Acquire: pairs with the release store in SequenceWriter::finish.
  const uint64_t ws = header_->write_seq.load(std::memory_order_acquire);
  switch (start.kind) {
    case StartPosition::Kind::kLatest: cursor_ = ws; break;
    case StartPosition::Kind::kOldest: cursor_ = ws > capacity_ ? ws - capacity_ : 0; break;
    case StartPosition::Kind::kSequence: cursor_ = start.seq; break;
  }
}

Consumer::Consumer(RingFile file, StartPosition start)
    : file_(std::move(file)), cursor_(file_, start), record_size_(file_.slot_size()) {}

absl::StatusOr<Consumer> Consumer::attach(RingFile file, StartPosition start,
                                          std::string_view reader_name) {
  if (file.blob()) {
    return absl::FailedPreconditionError(
        absl::StrCat(file.path(), " is a blob ring: read it with a BlobConsumer"));
  }
  Consumer c(std::move(file), start);
  if (!reader_name.empty()) {
    auto slot = ReaderSlot::claim(c.file_, reader_name);
    if (!slot.ok()) return slot.status();
    c.registry_ = std::move(*slot);
    c.registry_.publish(c.cursor(), 0);
  }
  return c;
}

}  // namespace ringfire::ring
