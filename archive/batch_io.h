// batch_io.h — reading and checking one batch of a segment file, and
// walking its entries: what recovery, replay and `ringfire archive` share.
// Nothing here trusts a length it read: every size is checked against the
// segment and kMaxBatchBytes before anything is allocated or read.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "archive/format.h"

namespace ringfire::archive {

// open_archive_file opens a file of an archive directory for reading,
// never waiting on it: anything but a regular file (a FIFO or a device put
// in a segment's or the catalog's place) is refused, -1 with errno EINVAL.
int open_archive_file(const std::string& path);
// open_regular: ::open(path, flags, mode) of a regular file only, never
// waiting (a FIFO's open would): anything else is refused, -1 with errno
// `refused_errno`. The reader's open and the recorder's (which adds
// O_NOFOLLOW) both.
int open_regular(const std::string& path, int flags, int refused_errno, mode_t mode = 0644);

enum class BatchRead : uint8_t {
  kOk,       // a whole batch whose checksum and entries hold
  kEnd,      // zeroes (nothing written here yet) or the segment's end
  kDamaged,  // a batch that does not check out; *why says how
};

// SegmentLimits bound what a batch of one archive may declare.
struct SegmentLimits {
  uint64_t segment_bytes = 0;
  uint64_t max_batch_bytes = 0;
  uint32_t max_record = 0;
  uint32_t record_size = 0;  // a fixed ring's: every record is this size (0: a blob ring)
};
inline SegmentLimits limits_of(const Catalog& c) {
  return SegmentLimits{c.segment_bytes, c.max_batch_bytes, c.shape.max_record, c.shape.record_size};
}

// read_batch reads the batch at `offset` of a segment file into *buf,
// checks its header, checksum and entries (check_entries), and fills
// *header.
BatchRead read_batch(int fd, uint64_t offset, const SegmentLimits& limits, std::vector<uint8_t>* buf,
                     BatchHeader* header, std::string* why);

// EntryView is one entry of a checked batch. For a gap, gap_end and
// gap_lost hold its payload.
struct EntryView {
  EntryHeader h;
  const uint8_t* payload = nullptr;
  uint64_t gap_end = 0;
  uint64_t gap_lost = 0;
};

// check_entries walks a batch's entries and says whether they are well
// formed: lengths inside the batch, sequences increasing inside
// [first_seq, end_seq), records at most max_record bytes and, in a fixed
// ring, exactly record_size; gaps 16 bytes with end > seq, known kinds only.
bool check_entries(const uint8_t* batch, const BatchHeader& h, const SegmentLimits& limits, std::string* why);

// EntryWalker steps through the entries of a batch check_entries passed.
class EntryWalker {
 public:
  EntryWalker(const uint8_t* batch, const BatchHeader& h)
      : p_(batch + kBatchHeaderBytes), end_(batch + h.bytes), left_(h.entries) {}
  bool next(EntryView* e) {
    if (left_ == 0) return false;
    --left_;
    e->h = decode_entry_header(p_);
    e->payload = p_ + kEntryHeaderBytes;
    if (e->h.kind == kEntryGap) {
      e->gap_end = get_u64(e->payload);
      e->gap_lost = get_u64(e->payload + 8);
    }
    p_ += kEntryHeaderBytes + pad8(e->h.len);
    return p_ <= end_;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  uint32_t left_;
};

}  // namespace ringfire::archive
