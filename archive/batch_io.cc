// batch_io.cc — reading and checking batches.
#include "archive/batch_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ring/slot.h"

namespace ringfire::archive {
namespace {

bool pread_all(int fd, uint8_t* dst, size_t len, uint64_t offset) {
  while (len > 0) {
    const ssize_t n = pread(fd, dst, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    dst += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace

int open_regular(const std::string& path, int flags, int refused_errno, mode_t mode) {
  // O_NONBLOCK: a FIFO's open would wait for a writer (on the serve's
  // conductor, for a HELLO asking for the oldest record); cleared once the
  // file is known to be regular.
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, mode);
  if (fd < 0) return -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = refused_errno;
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int open_archive_file(const std::string& path) { return open_regular(path, O_RDONLY, EINVAL); }

BatchRead read_batch(int fd, uint64_t offset, const SegmentLimits& limits, std::vector<uint8_t>* buf,
                     BatchHeader* header, std::string* why) {
  const uint64_t segment_bytes = limits.segment_bytes;
  const uint64_t max_batch_bytes = limits.max_batch_bytes;
  if (offset + kBatchHeaderBytes > segment_bytes) return BatchRead::kEnd;
  uint8_t head[kBatchHeaderBytes];
  if (!pread_all(fd, head, sizeof(head), offset)) {
    // A file shorter than its segment size: truncated (or never grown).
    *why = "the file ends inside a batch header (truncated)";
    return BatchRead::kDamaged;
  }
  if (all_zero(head, sizeof(head))) return BatchRead::kEnd;
  uint32_t magic = 0;
  *header = decode_batch_header(head, &magic);
  const uint64_t bytes = header->bytes;
  if (magic != kBatchMagic) {
    *why = "no batch header where one should start";
    return BatchRead::kDamaged;
  }
  if (bytes < kBatchHeaderBytes || bytes % 8 != 0 || bytes > max_batch_bytes ||
      bytes > kMaxBatchBytes || offset + bytes > segment_bytes) {
    *why = absl::StrCat("batch declares ", bytes, " bytes");
    return BatchRead::kDamaged;
  }
  if (header->end_seq <= header->first_seq || header->end_seq > ring::kMaxSeq) {
    *why = absl::StrCat("batch covers [", header->first_seq, ", ", header->end_seq, ")");
    return BatchRead::kDamaged;
  }
  // The file must hold what the header declares before anything is made
  // for it: a forged header in a short file made readers allocate and zero
  // up to the 1 GiB cap (review helper-36).
  if (struct stat st {}; fstat(fd, &st) != 0 || offset + bytes > static_cast<uint64_t>(st.st_size)) {
    *why = "the file ends inside a batch (truncated)";
    return BatchRead::kDamaged;
  }
  buf->resize(bytes);
  std::memcpy(buf->data(), head, sizeof(head));
  if (!pread_all(fd, buf->data() + kBatchHeaderBytes, bytes - kBatchHeaderBytes,
                 offset + kBatchHeaderBytes)) {
    *why = "the file ends inside a batch (truncated)";
    return BatchRead::kDamaged;
  }
  if (batch_checksum(buf->data(), bytes) != header->checksum) {
    *why = "batch checksum mismatch";
    return BatchRead::kDamaged;
  }
  if (!check_entries(buf->data(), *header, limits, why)) return BatchRead::kDamaged;
  return BatchRead::kOk;
}

bool check_entries(const uint8_t* batch, const BatchHeader& h, const SegmentLimits& limits, std::string* why) {
  const uint32_t max_record = limits.max_record;
  const uint8_t* p = batch + kBatchHeaderBytes;
  const uint8_t* end = batch + h.bytes;
  uint64_t next_min = h.first_seq;
  for (uint32_t i = 0; i < h.entries; ++i) {
    if (end - p < static_cast<ptrdiff_t>(kEntryHeaderBytes)) {
      *why = absl::StrCat("entry ", i, " runs past the batch");
      return false;
    }
    const EntryHeader e = decode_entry_header(p);
    const uint64_t padded = pad8(e.len);
    if (static_cast<uint64_t>(end - p) - kEntryHeaderBytes < padded) {
      *why = absl::StrCat("entry ", i, " of ", e.len, " bytes runs past the batch");
      return false;
    }
    if (e.seq < next_min || e.seq >= h.end_seq) {
      *why = absl::StrCat("entry ", i, " has sequence ", e.seq, " outside [", next_min, ", ", h.end_seq, ")");
      return false;
    }
    if (e.kind == kEntryRecord) {
      if (e.len > max_record) {
        *why = absl::StrCat("record ", e.seq, " of ", e.len, " bytes (the ring's records are at most ",
                            max_record, ")");
        return false;
      }
      if (limits.record_size != 0 && e.len != limits.record_size) {
        *why = absl::StrCat("record ", e.seq, " of ", e.len, " bytes in a ring of ", limits.record_size,
                            "-byte records");
        return false;
      }
      next_min = e.seq + 1;
    } else if (e.kind == kEntryGap) {
      if (e.len != kGapPayloadBytes) {
        *why = absl::StrCat("gap entry at ", e.seq, " is malformed");
        return false;
      }
      const uint64_t gap_end = get_u64(p + kEntryHeaderBytes);
      if (gap_end <= e.seq || gap_end > h.end_seq) {
        *why = absl::StrCat("gap entry at ", e.seq, " is malformed");
        return false;
      }
      next_min = gap_end;
    } else {
      *why = absl::StrCat("entry ", i, " has unknown kind ", e.kind);
      return false;
    }
    p += kEntryHeaderBytes + padded;
  }
  return true;
}

}  // namespace ringfire::archive
