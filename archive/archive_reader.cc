// archive_reader.cc — lookup and ordered, checked reading of an archive.
#include "archive/archive_reader.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "archive/segment_writer.h"

namespace ringfire::archive {

absl::StatusOr<ArchiveReader> ArchiveReader::open(const std::string& dir) {
  ArchiveReader r;
  r.dir_ = dir;
  if (auto st = r.reload_catalog(); !st.ok()) return st;
  if (!r.catalog_.segments.empty()) r.expected_ = r.catalog_.segments.front().first_seq;
  return r;
}

ArchiveReader::ArchiveReader(ArchiveReader&& o) noexcept { *this = std::move(o); }

ArchiveReader& ArchiveReader::operator=(ArchiveReader&& o) noexcept {
  if (this == &o) return *this;
  close_segment();
  dir_ = std::move(o.dir_);
  catalog_ = std::move(o.catalog_);
  limits_ = o.limits_;
  seg_ = o.seg_;
  seg_fd_ = std::exchange(o.seg_fd_, -1);
  offset_ = o.offset_;
  expected_ = o.expected_;
  skip_below_ = o.skip_below_;
  last_good_ = o.last_good_;
  any_good_ = o.any_good_;
  never_wait_ = o.never_wait_;
  buf_ = std::move(o.buf_);
  batch_ = o.batch_;
  in_batch_ = o.in_batch_;
  walker_ = o.walker_;
  counters_ = o.counters_;
  unsettled_ = std::move(o.unsettled_);
  catalog_ino_ = o.catalog_ino_;
  catalog_size_ = o.catalog_size_;
  catalog_ctime_ = o.catalog_ctime_;
  return *this;
}

ArchiveReader::~ArchiveReader() { close_segment(); }

void ArchiveReader::close_segment() {
  if (seg_fd_ >= 0) ::close(seg_fd_);  // drops the shared flock
  seg_fd_ = -1;
  in_batch_ = false;
}

absl::Status ArchiveReader::reload_catalog(bool force) {
  // The catalog is replaced whole (rename): the same inode, size and
  // change time almost surely mean the same catalog, and a lookup costs a
  // stat. Where being wrong would stall (the end of what it lists), the
  // caller forces a read.
  struct stat st {};
  const std::string path = dir_ + "/catalog";
  if (!force && ::stat(path.c_str(), &st) == 0 && counters_.catalog_loads != 0 && st.st_ino == catalog_ino_ &&
      st.st_size == catalog_size_ && st.st_ctim.tv_sec == catalog_ctime_.tv_sec &&
      st.st_ctim.tv_nsec == catalog_ctime_.tv_nsec) {
    return absl::OkStatus();
  }
  if (force) ::stat(path.c_str(), &st);
  catalog_ino_ = st.st_ino;
  catalog_size_ = st.st_size;
  catalog_ctime_ = st.st_ctim;
  auto c = load_catalog(dir_);
  if (!c.ok()) return c.status();
  // The segment being read keeps its place: find it again by name.
  const uint64_t current = seg_fd_ >= 0 ? catalog_.segments[seg_].first_seq : 0;
  catalog_ = std::move(*c);
  limits_ = limits_of(catalog_);
  ++counters_.catalog_loads;
  if (seg_fd_ >= 0) {
    auto it = std::find_if(catalog_.segments.begin(), catalog_.segments.end(),
                           [&](const CatalogSegment& s) { return s.first_seq == current; });
    if (it == catalog_.segments.end()) {
      return absl::InternalError(absl::StrCat(dir_, ": the segment being read left the catalog"));
    }
    seg_ = static_cast<size_t>(it - catalog_.segments.begin());
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ArchiveReader::first_seq() {
  if (auto st = reload_catalog(); !st.ok()) return st;
  if (catalog_.segments.empty()) return absl::NotFoundError(absl::StrCat(dir_, " has recorded nothing yet"));
  return catalog_.segments.front().first_seq;
}

absl::Status ArchiveReader::damage(const std::string& why) const {
  const std::string path = dir_ + "/" + segment_name(catalog_.segments[seg_].first_seq);
  return absl::DataLossError(absl::StrCat(
      path, ": damaged at offset ", offset_, " (", why, "); last good sequence ",
      any_good_ ? absl::StrCat(last_good_) : std::string("none before it"), ", next expected ", expected_));
}

absl::Status ArchiveReader::open_segment(size_t i) {
  close_segment();
  seg_ = i;
  const CatalogSegment& s = catalog_.segments[i];
  const std::string path = dir_ + "/" + segment_name(s.first_seq);
  const int fd = open_archive_file(path);
  const bool newest = i + 1 == catalog_.segments.size() && !s.sealed;
  if (fd < 0 && errno == ENOENT && newest) {
    // Listed as the recorder makes it, not there yet: nothing to read yet.
    return absl::NotFoundError(absl::StrCat(path, ": being created"));
  }
  if (fd < 0 && errno == EINVAL) return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOMEM)) {
    return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(errno), " (try again)"));
  }
  if (fd < 0 && errno == ENOENT) {
    return absl::OutOfRangeError(absl::StrCat(path, ": ", std::strerror(errno),
                                              " (removed by retention while it was looked up, or deleted: `ringfire archive DIR` tells which)"));
  }
  if (fd < 0) return absl::DataLossError(absl::StrCat(path, ": ", std::strerror(errno)));
  // Shared: pairs with the exclusive try-lock in SegmentWriter::enforce
  // (held while retention removes the segment: the catalog may list it
  // for a few milliseconds more). never_wait (a serve's replay for a
  // remote mirror): not waited for, and not kept either: retention may
  // remove the segment while it is read (the open descriptor still reads
  // it whole), so a mirror that reads slowly, or not at all, never holds
  // retention back: at most the segments its replay has open outlive
  // their removal (review helper-42, helper-44).
  if (flock(fd, never_wait_ ? LOCK_SH | LOCK_NB : LOCK_SH) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": being removed by retention (try again)"));
  }
  if (never_wait_) flock(fd, LOCK_UN);
  seg_fd_ = fd;
  ++counters_.segments_opened;
  uint8_t head[kSegmentHeaderEncoded];
  std::string why;
  const bool got = pread(fd, head, sizeof(head), 0) == static_cast<ssize_t>(sizeof(head));
  auto h = got ? decode_segment_header(head, sizeof(head), &why) : std::nullopt;
  offset_ = 0;
  // A header of zeroes is one not written yet (the file is allocated whole
  // first), as recovery reads it too.
  const bool blank = got && std::all_of(std::begin(head), std::end(head), [](uint8_t b) { return b == 0; });
  if ((!got || blank) && newest) {
    // The newest segment, listed as the recorder made it, its header not
    // landed yet: nothing to read there yet, not damage. Opened again next time.
    close_segment();
    return absl::NotFoundError(absl::StrCat(path, ": being created (its header has not landed yet)"));
  }
  if (!got) why = "shorter than its header";
  if (h && (h->first_seq != s.first_seq || !(h->shape == catalog_.shape) ||
            h->segment_bytes != catalog_.segment_bytes)) {
    why = "its header does not match the catalog";
    h.reset();
  }
  if (!h) return damage(why);
  offset_ = kSegmentHeaderBytes;
  return absl::OkStatus();
}

absl::Status ArchiveReader::seek(uint64_t seq) {
  close_segment();
  if (auto st = reload_catalog(); !st.ok()) return st;
  const auto& segs = catalog_.segments;
  if (segs.empty()) return absl::NotFoundError(absl::StrCat(dir_, " has recorded nothing yet"));
  if (seq < segs.front().first_seq) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, " is older than the archive's first, ",
                                              segs.front().first_seq, " (removed by retention or never recorded)"));
  }
  // The last segment whose first sequence is at or below seq.
  const auto it = std::upper_bound(segs.begin(), segs.end(), seq,
                                   [](uint64_t s, const CatalogSegment& c) { return s < c.first_seq; });
  const size_t i = static_cast<size_t>(it - segs.begin()) - 1;
  if (auto st = open_segment(i); !st.ok()) {
    if (!absl::IsNotFound(st)) return st;
    // The newest segment, being created: stand at its start; next() says
    // "nothing yet" until it lands, then reads from there.
    expected_ = segs[i].first_seq;
    skip_below_ = seq;
    return absl::OkStatus();
  }
  expected_ = segs[i].first_seq;
  skip_below_ = seq;

  // The index, in one read: the last entry at or below seq.
  const std::string idx_path = dir_ + "/" + index_name(segs[i].first_seq);
  const int fd = open_archive_file(idx_path);
  if (fd < 0) return absl::OkStatus();  // no index: scan from the start
  // Sized by the file (a segment's index is a few KiB), never by what the
  // catalog declares.
  struct stat ist {};
  const uint64_t file_bytes = fstat(fd, &ist) == 0 ? static_cast<uint64_t>(ist.st_size) : 0;
  const uint64_t max_entries = std::min<uint64_t>(file_bytes / kIndexEntryBytes, 1u << 20);
  if (max_entries == 0) {
    ::close(fd);
    return absl::OkStatus();
  }
  std::vector<uint8_t> idx(static_cast<size_t>(max_entries * kIndexEntryBytes));
  const ssize_t n = pread(fd, idx.data(), idx.size(), 0);
  ::close(fd);
  ++counters_.index_reads;
  if (n <= 0) return absl::OkStatus();
  const size_t count = static_cast<size_t>(n) / kIndexEntryBytes;
  size_t lo = 0, hi = count;  // find the last entry with entry.seq <= seq
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (decode_index_entry(&idx[mid * kIndexEntryBytes]).seq <= seq) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return absl::OkStatus();
  const IndexEntry e = decode_index_entry(&idx[(lo - 1) * kIndexEntryBytes]);
  // Trust it only if its batch says the same; else scan from the start.
  BatchHeader h;
  std::string why;
  if (e.offset >= kSegmentHeaderBytes &&
      read_batch(seg_fd_, e.offset, limits_, &buf_, &h, &why) == BatchRead::kOk && h.first_seq == e.seq) {
    // The batch read to check the entry is the one to start in.
    ++counters_.batches_read;
    batch_ = h;
    offset_ = e.offset + pad_block(h.bytes);
    expected_ = h.end_seq;
    walker_ = EntryWalker(buf_.data(), batch_);
    in_batch_ = true;
  } else {
    ++counters_.index_misses;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ArchiveReader::next(ArchiveEntry* out) {
  for (;;) {
    if (in_batch_) {
      EntryView e;
      if (!walker_.next(&e)) {
        in_batch_ = false;
        continue;
      }
      if (e.h.kind == kEntryGap) {
        if (e.gap_end <= skip_below_) continue;
        *out = ArchiveEntry{true, std::max(e.h.seq, skip_below_), e.gap_end, e.gap_lost, {}};
        return true;
      }
      if (e.h.seq < skip_below_) continue;
      last_good_ = e.h.seq;
      any_good_ = true;
      *out = ArchiveEntry{false, e.h.seq, 0, 0, {e.payload, e.h.len}};
      return true;
    }
    if (seg_fd_ < 0) {
      if (catalog_.segments.empty()) {
        if (auto st = reload_catalog(true); !st.ok()) return st;
        if (catalog_.segments.empty()) return false;
        expected_ = catalog_.segments.front().first_seq;
      }
      // (Deferred: a segment that was being created. The catalog is read
      // again first: one no longer the newest is then an error, not a wait.)
      if (!catalog_.segments.empty() && seg_ + 1 == catalog_.segments.size()) {
        if (auto st = reload_catalog(true); !st.ok()) return st;
        if (seg_ >= catalog_.segments.size()) {
          return absl::OutOfRangeError(absl::StrCat("segment ", seg_, " of ", dir_, " left the catalog"));
        }
      }
      if (auto st = open_segment(seg_); !st.ok()) {
        if (!absl::IsNotFound(st)) return st;
        unsettled_ = std::string(st.message());  // the newest segment is being created: nothing more yet
        return false;
      }
    }
    std::string why;
    BatchRead r = read_batch(seg_fd_, offset_, limits_, &buf_, &batch_, &why);
    unsettled_.clear();
    if (r == BatchRead::kDamaged && seg_ + 1 == catalog_.segments.size() && !catalog_.segments[seg_].sealed) {
      // The open segment's last batch may be landing right now (one write,
      // its blocks in any order). Damage is certain only once the recorder
      // has written past it: a sealed segment, or a batch after it.
      if (auto st = reload_catalog(true); !st.ok()) return st;
      const bool still_open = seg_ + 1 == catalog_.segments.size() && !catalog_.segments[seg_].sealed;
      BatchHeader after;
      std::string ignored;
      std::vector<uint8_t> scratch;
      const bool written_past =
          batch_.bytes >= kBatchHeaderBytes && batch_.bytes <= limits_.max_batch_bytes &&
          read_batch(seg_fd_, offset_ + pad_block(batch_.bytes), limits_, &scratch, &after, &ignored) ==
              BatchRead::kOk;
      if (still_open && !written_past) {
        r = read_batch(seg_fd_, offset_, limits_, &buf_, &batch_, &why);  // landed meanwhile?
        if (r == BatchRead::kDamaged) {
          unsettled_ = why;
          return false;
        }
      }
    }
    if (r == BatchRead::kDamaged) return damage(why);
    if (r == BatchRead::kOk) {
      if (batch_.first_seq != expected_) {
        return damage(absl::StrCat("a batch starting at ", batch_.first_seq, " where ", expected_,
                                   " should follow"));
      }
      ++counters_.batches_read;
      offset_ += pad_block(batch_.bytes);
      expected_ = batch_.end_seq;
      walker_ = EntryWalker(buf_.data(), batch_);
      in_batch_ = true;
      continue;
    }
    // The end of this segment's batches.
    const CatalogSegment seg = catalog_.segments[seg_];
    if (!seg.sealed || seg_ + 1 == catalog_.segments.size()) {
      if (auto st = reload_catalog(true); !st.ok()) return st;
      const CatalogSegment now = catalog_.segments[seg_];
      if (!now.sealed) return false;  // the recorder is still writing here
      if (seg_ + 1 == catalog_.segments.size()) {
        // Sealed and last: a recorder between rolls. Look again next time,
        // unless a batch appeared meanwhile.
        if (read_batch(seg_fd_, offset_, limits_, &buf_, &batch_, &why) != BatchRead::kEnd) continue;
        return false;
      }
      continue;  // sealed since: re-read the tail once, then move on
    }
    if (expected_ != seg.end_seq) {
      return damage(absl::StrCat("the segment's batches end at ", expected_, " but the catalog says ",
                                 seg.end_seq, " (truncated)"));
    }
    if (auto st = open_segment(seg_ + 1); !st.ok()) {
      if (!absl::IsNotFound(st)) return st;
      unsettled_ = std::string(st.message());  // the newest segment is being created: nothing more yet (seg_ is it now)
      return false;
    }
    if (catalog_.segments[seg_].first_seq != expected_) {
      return damage(absl::StrCat("segment starts at ", catalog_.segments[seg_].first_seq, " where ",
                                 expected_, " should follow"));
    }
  }
}

SegmentScan scan_segment(const std::string& dir, const Catalog& catalog, size_t i) {
  SegmentScan out;
  const CatalogSegment& s = catalog.segments[i];
  out.end_seq = s.first_seq;
  const std::string path = dir + "/" + segment_name(s.first_seq);
  const int fd = open_archive_file(path);
  if (fd < 0) {
    out.damage = absl::StrCat(path, ": ", errno == EINVAL ? "not a regular file" : std::strerror(errno));
    if (errno == ENOENT && i + 1 == catalog.segments.size() && !s.sealed) {
      // The catalog cannot tell a file never made from one removed: its
      // open segment's end is written only when it is sealed.
      absl::StrAppend(&out.damage, " (the newest segment: never made if its recorder stopped on a full disk, "
                                   "or removed; `ringfire record` resumes at its first sequence and records again "
                                   "what the ring still holds)");
    }
    return out;
  }
  flock(fd, LOCK_SH);  // pairs with the exclusive try-lock in SegmentWriter::enforce
  uint8_t head[kSegmentHeaderEncoded];
  std::string why;
  if (pread(fd, head, sizeof(head), 0) != static_cast<ssize_t>(sizeof(head)) ||
      !decode_segment_header(head, sizeof(head), &why)) {
    out.damage = absl::StrCat(path, ": bad segment header (", why.empty() ? "short file" : why, ")");
    ::close(fd);
    return out;
  }
  const SegmentLimits limits = limits_of(catalog);
  std::vector<uint8_t> buf;
  uint64_t offset = kSegmentHeaderBytes;
  uint64_t last_good = 0;
  bool any = false;
  for (;;) {
    BatchHeader h;
    const BatchRead r = read_batch(fd, offset, limits, &buf, &h, &why);
    if (r == BatchRead::kEnd) break;
    if (r == BatchRead::kOk && h.first_seq != out.end_seq) {
      why = absl::StrCat("a batch starting at ", h.first_seq, " where ", out.end_seq, " should follow");
    }
    if (r != BatchRead::kOk || h.first_seq != out.end_seq) {
      out.damage = absl::StrCat(path, ": damaged at offset ", offset, " (", why, "); last good sequence ",
                                any ? absl::StrCat(last_good) : std::string("none before it"));
      break;
    }
    EntryWalker walk(buf.data(), h);
    EntryView e;
    while (walk.next(&e)) {
      if (e.h.kind == kEntryGap) {
        ++out.gaps;
        out.lost += e.gap_lost;
        if (out.first_gaps.size() < 64) out.first_gaps.push_back(ArchiveEntry{true, e.h.seq, e.gap_end, e.gap_lost, {}});
      } else {
        ++out.records;
        last_good = e.h.seq;
        any = true;
      }
    }
    ++out.batches;
    out.bytes += pad_block(h.bytes);
    out.end_seq = h.end_seq;
    offset += pad_block(h.bytes);
  }
  if (out.damage.empty() && s.sealed && out.end_seq != s.end_seq) {
    out.damage = absl::StrCat(path, ": its batches end at ", out.end_seq, " but the catalog says ", s.end_seq,
                              " (truncated); last good sequence ",
                              any ? absl::StrCat(last_good) : std::string("none before it"));
  }
  ::close(fd);
  return out;
}

}  // namespace ringfire::archive
