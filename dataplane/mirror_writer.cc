// mirror_writer.cc — mirror ring writer attach (setup only).
#include "dataplane/mirror_writer.h"

#include "absl/strings/str_cat.h"

namespace ringfire::dataplane {

absl::StatusOr<MirrorWriter> MirrorWriter::attach(ring::RingFile file) {
  if (!file.sparse()) {
    return absl::FailedPreconditionError(absl::StrCat(
        file.path(), " is not a sparse ring: a mirror writes only into rings created as mirrors"));
  }
  MirrorWriter w;
  w.slot_size_ = file.slot_size();
  if (file.blob()) {
    auto p = ring::BlobProducer::attach(std::move(file));
    if (!p.ok()) return p.status();
    w.blob_.emplace(std::move(*p));
  } else {
    auto p = ring::Producer::attach(std::move(file));
    if (!p.ok()) return p.status();
    w.fixed_.emplace(std::move(*p));
  }
  return w;
}

}  // namespace ringfire::dataplane
