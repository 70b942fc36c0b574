// segment_writer.cc — catalog, segments, index, recovery and retention.
#include "archive/segment_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <set>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "archive/batch_io.h"

namespace ringfire::archive {
namespace {

absl::Status io_error(int err, absl::string_view what, absl::string_view path) {
  const std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(absl::StrCat(msg, " (the disk is full: free space or lower --retain-bytes)"));
    case ENOENT: return absl::NotFoundError(msg);
    case ELOOP:  // open_file's refusal
      return absl::FailedPreconditionError(absl::StrCat(
          what, " ", path, ": not a regular file (a symlink, directory or device): the recorder writes only files of its own; move it away"));
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(msg);
    default: return absl::InternalError(msg);
  }
}

absl::Status write_all(int fd, const uint8_t* p, size_t len, uint64_t offset, const std::string& path) {
  while (len > 0) {
    const ssize_t n = pwrite(fd, p, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(errno, "write", path);
    if (n == 0) return io_error(ENOSPC, "write", path);
    p += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// open_file: ::open for a file the recorder writes, refusing any that is
// not a regular file of the archive directory itself (a symlink to a file
// elsewhere, a FIFO, a device): recovery truncates, punches and rewrites
// what it opens, and whoever could write the directory could point it at
// another file (review helper-36). Refused as ELOOP (io_error says why).
int open_file(const std::string& path, int flags) { return open_regular(path, flags | O_NOFOLLOW, ELOOP); }

// open_segment_fd opens a segment for appending with direct I/O (whole
// 4 KiB blocks from a block-aligned buffer: no page cache to write back,
// so an fsync has only the file's metadata left to do), or buffered where
// the filesystem has no direct I/O.
int open_segment_fd(const std::string& path, int flags) {
  const int fd = open_file(path, flags | O_DIRECT);
  if (fd >= 0 || errno != EINVAL) return fd;
  return open_file(path, flags);
}

absl::Status sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error(errno, "open", dir);
  const int rc = fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : io_error(err, "fsync", dir);
}

// is_archive_file: "<20 digits>.seg" or ".idx"; sets *first_seq.
bool is_archive_file(const char* name, uint64_t* first_seq) {
  if (std::strlen(name) != 24) return false;
  if (std::strcmp(name + 20, ".seg") != 0 && std::strcmp(name + 20, ".idx") != 0) return false;
  uint64_t v = 0;
  for (int i = 0; i < 20; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *first_seq = v;
  return true;
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t unix_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

// Flush is a write-behind sync of the open segment on a thread of its own
// (start_flush), joined by finish_flush. The thread touches only this
// object; the writer's thread reads err once done is set.
struct SegmentWriter::Flush {
  int fd = -1;             // a dup of the segment's (closed by finish_flush)
  uint64_t first_seq = 0;  // the segment's
  uint64_t end_seq = 0;    // durable up to here once done,
  uint64_t offset = 0;     // and this far into the segment
  int err = 0;             // the fdatasync's errno (0: done well)
  std::atomic<bool> done{false};
  std::thread thread;
};

absl::StatusOr<Catalog> load_catalog(const std::string& dir) {
  const std::string path = dir + "/catalog";
  const int fd = open_archive_file(path);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(dir, " is not an archive (no catalog)"));
    if (errno == EINVAL) return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
    return io_error(errno, "open", path);
  }
  struct stat st {};
  std::string bytes;
  if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) <= kMaxCatalogBytes) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    bytes.resize(got);
  }
  ::close(fd);
  std::string why;
  auto c = decode_catalog(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &why);
  if (!c) return absl::DataLossError(absl::StrCat(path, ": ", why));
  return *c;
}

std::optional<bool> recorder_writing(const std::string& dir) {
  const int fd = ::open((dir + "/" + kWriterLock).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return errno == ENOENT ? std::optional<bool>(false) : std::nullopt;
  struct flock probe{};
  probe.l_type = F_RDLCK;  // conflicts with the recorder's F_WRLCK (SegmentWriter::open): a test, nothing taken
  probe.l_whence = SEEK_SET;
  probe.l_len = 1;
  const bool told = fcntl(fd, F_OFD_GETLK, &probe) == 0;
  ::close(fd);
  if (!told) return std::nullopt;
  return probe.l_type == F_WRLCK;
}

absl::StatusOr<SegmentWriter> SegmentWriter::open(const std::string& dir, const RingShape& shape,
                                                  const ArchiveLayout& layout, RecoveryReport* report) {
  if (layout.segment_bytes < (1u << 16) || layout.segment_bytes % 4096 != 0 ||
      layout.segment_bytes > kMaxSegmentBytes) {
    return absl::InvalidArgumentError(absl::StrCat("segment size ", layout.segment_bytes,
                                                   ": use a multiple of 4 KiB, 64 KiB to 64 GiB"));
  }
  if (pad_block(layout.max_batch_bytes) + kSegmentHeaderBytes > layout.segment_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("a batch of ", layout.max_batch_bytes,
                                                   " bytes does not fit a segment of ", layout.segment_bytes,
                                                   ": raise --segment-size"));
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return io_error(errno, "mkdir", dir);
  SegmentWriter w;
  w.dir_ = dir;
  const std::string lock_path = dir + "/" + kWriterLock;
  w.lock_fd_ = open_file(lock_path, O_RDWR | O_CREAT);
  if (w.lock_fd_ < 0) return io_error(errno, "open", lock_path);
  if (flock(w.lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("another recorder is writing ", dir, " (", lock_path, " is locked): one recorder per archive"));
  }
  // And an OFD write lock on its first byte, which a reader can test
  // without taking anything, whatever its PID namespace (recorder_writing;
  // /proc/locks hides other namespaces' holders, review helper-48).
  // Released with the descriptor, as the flock is.
  struct flock ofd{};
  ofd.l_type = F_WRLCK;
  ofd.l_whence = SEEK_SET;
  ofd.l_len = 1;
  if (fcntl(w.lock_fd_, F_OFD_SETLK, &ofd) != 0) return io_error(errno, "lock", lock_path);
  *report = RecoveryReport{};
  auto existing = load_catalog(dir);
  if (existing.ok()) {
    const std::string why = shape_mismatch(existing->shape, shape);
    if (!why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, " holds an archive of another kind of ring (archive vs ring:", why,
          "): record this ring into another directory"));
    }
    w.catalog_ = std::move(*existing);
    report->existed = true;
  } else if (absl::IsNotFound(existing.status())) {
    w.catalog_.shape = shape;
    w.catalog_.segment_bytes = layout.segment_bytes;
    w.catalog_.index_interval = layout.index_interval;
    w.catalog_.max_batch_bytes = layout.max_batch_bytes;
    w.catalog_.created_unix_ns = unix_ns();
    // What every reader (and this recorder's next start) will check.
    if (std::string why; !geometry_holds(w.catalog_, &why)) {
      return absl::InvalidArgumentError(absl::StrCat(why, ": not an archive a reader would take (see `ringfire record --help`)"));
    }
    if (auto st = w.store_catalog(); !st.ok()) return st;
  } else {
    return existing.status();
  }
  if (w.catalog_.max_batch_bytes < layout.max_batch_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " was created for batches of at most ", w.catalog_.max_batch_bytes, " bytes; this recorder needs ",
        layout.max_batch_bytes, ": lower --batch-bytes or record into another directory"));
  }
  if (auto st = w.recover(report); !st.ok()) return st;
  return w;
}

SegmentWriter::SegmentWriter(SegmentWriter&& o) noexcept { *this = std::move(o); }

SegmentWriter& SegmentWriter::operator=(SegmentWriter&& o) noexcept {
  if (this == &o) return *this;
  (void)finish_flush(true);
  close_files();
  if (lock_fd_ >= 0) ::close(lock_fd_);
  flush_ = std::move(o.flush_);
  write_behind_bytes_ = o.write_behind_bytes_;
  write_behind_ns_ = o.write_behind_ns_;
  write_behind_quiet_ns_ = o.write_behind_quiet_ns_;
  step_error_ = std::move(o.step_error_);
  sync_failed_ = o.sync_failed_;
  datasync_ = o.datasync_;
  flush_started_ns_ = o.flush_started_ns_;
  dir_ = std::move(o.dir_);
  catalog_ = std::move(o.catalog_);
  lock_fd_ = std::exchange(o.lock_fd_, -1);
  seg_fd_ = std::exchange(o.seg_fd_, -1);
  idx_fd_ = std::exchange(o.idx_fd_, -1);
  catalog_dirty_ = o.catalog_dirty_;
  has_batches_ = o.has_batches_;
  dirty_ = o.dirty_;
  sync_on_seal_ = o.sync_on_seal_;
  end_seq_ = o.end_seq_;
  write_offset_ = o.write_offset_;
  next_index_offset_ = o.next_index_offset_;
  index_entries_ = o.index_entries_;
  fsyncs_ = o.fsyncs_;
  durable_end_ = o.durable_end_;
  durable_offset_ = o.durable_offset_;
  return *this;
}

SegmentWriter::~SegmentWriter() {
  (void)finish_flush(true);  // a failure is the next open's to find
  close_files();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void SegmentWriter::close_files() {
  if (seg_fd_ >= 0) ::close(seg_fd_);
  if (idx_fd_ >= 0) ::close(idx_fd_);
  seg_fd_ = idx_fd_ = -1;
}

absl::Status SegmentWriter::store_catalog() {
  const std::string tmp = dir_ + "/catalog.tmp";
  const std::string path = dir_ + "/catalog";
  const std::string bytes = encode_catalog(catalog_);
  const int fd = open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC);
  if (fd < 0) return io_error(errno, "create", tmp);
  absl::Status st = write_all(fd, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0, tmp);
  if (st.ok() && fdatasync(fd) != 0) st = io_error(errno, "fdatasync", tmp);
  ::close(fd);
  if (st.ok() && rename(tmp.c_str(), path.c_str()) != 0) st = io_error(errno, "rename", tmp);
  if (st.ok()) st = sync_dir(dir_);
  if (!st.ok()) {
    unlink(tmp.c_str());
    catalog_dirty_ = true;
    return st;
  }
  catalog_dirty_ = false;
  return st;
}

// recover removes files the catalog does not list and finds the open
// segment's end: the last batch of an unbroken chain of whole batches.
// Whatever follows it (a batch torn by a kill or a power cut) is cleared,
// and the index is rebuilt from the batches.
absl::Status SegmentWriter::recover(RecoveryReport* report) {
  std::set<uint64_t> listed;
  for (const CatalogSegment& s : catalog_.segments) listed.insert(s.first_seq);
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      uint64_t first = 0;
      if (is_archive_file(e->d_name, &first) && listed.count(first) == 0) {
        unlinkat(dirfd(d), e->d_name, 0);
        ++report->orphans_removed;
      }
    }
    closedir(d);
  }
  unlink((dir_ + "/catalog.tmp").c_str());
  if (catalog_.segments.empty()) return absl::OkStatus();
  CatalogSegment& last = catalog_.segments.back();
  // A segment is named by the first sequence it was opened for: the end
  // of the one before it, so an open segment without batches ends there.
  // Any segment listed fixes where the archive goes on: where its batches
  // end, or (none landed) where it was opened.
  has_batches_ = true;
  end_seq_ = last.end_seq;
  durable_end_ = end_seq_;
  if (last.sealed) return absl::OkStatus();

  const std::string seg_path = dir_ + "/" + segment_name(last.first_seq);
  seg_fd_ = open_file(seg_path, O_RDWR);
  if (seg_fd_ < 0) {
    if (errno != ENOENT) return io_error(errno, "open", seg_path);
    return create_open_segment();  // listed, never created: it was empty
  }
  uint8_t head[kSegmentHeaderEncoded] = {};
  const ssize_t n = pread(seg_fd_, head, sizeof(head), 0);
  bool blank = n < static_cast<ssize_t>(sizeof(head));
  for (size_t i = 0; !blank && i < sizeof(head) && head[i] == 0; ++i) blank = i + 1 == sizeof(head);
  if (blank) {
    ::close(seg_fd_);
    seg_fd_ = -1;
    return create_open_segment();  // killed between its creation and its header
  }
  std::string why;
  auto sh = decode_segment_header(head, sizeof(head), &why);
  if (!sh || sh->first_seq != last.first_seq || sh->segment_bytes != catalog_.segment_bytes) {
    return absl::DataLossError(absl::StrCat(seg_path, ": ", sh ? "header does not match the catalog" : why,
                                            "; move the file away to record past it"));
  }
  const std::string idx_path = dir_ + "/" + index_name(last.first_seq);
  idx_fd_ = open_file(idx_path, O_RDWR | O_CREAT);
  if (idx_fd_ < 0) return io_error(errno, "open", idx_path);
  if (ftruncate(idx_fd_, 0) != 0) return io_error(errno, "truncate", idx_path);

  const SegmentLimits limits = limits_of(catalog_);
  std::vector<uint8_t> buf;
  uint64_t offset = kSegmentHeaderBytes;
  uint64_t records = 0;
  uint64_t expect = last.first_seq;
  bool any = false;
  index_entries_ = 0;
  next_index_offset_ = kSegmentHeaderBytes;
  BatchRead r = BatchRead::kEnd;
  for (;;) {
    BatchHeader h;
    r = read_batch(seg_fd_, offset, limits, &buf, &h, &why);
    if (r != BatchRead::kOk) break;
    if (h.first_seq != expect) {
      r = BatchRead::kDamaged;  // not the batch that follows: stale bytes
      break;
    }
    if (offset >= next_index_offset_) {
      uint8_t ie[kIndexEntryBytes];
      encode_index_entry(IndexEntry{h.first_seq, offset}, ie);
      if (auto st = write_all(idx_fd_, ie, sizeof(ie), index_entries_ * kIndexEntryBytes, idx_path); !st.ok()) {
        return st;
      }
      ++index_entries_;
      next_index_offset_ = offset + catalog_.index_interval;
    }
    EntryWalker walk(buf.data(), h);
    EntryView e;
    while (walk.next(&e)) records += e.h.kind == kEntryRecord ? 1 : 0;
    expect = h.end_seq;
    any = true;
    offset += pad_block(h.bytes);
  }
  if (r == BatchRead::kDamaged) {
    report->torn_bytes = catalog_.segment_bytes - offset;
    // Clear the tail, keeping the space allocated: punch it out, then
    // allocate it again (zeroes); where the filesystem cannot punch, write
    // zeroes over what a torn batch can span.
    const off_t len = static_cast<off_t>(catalog_.segment_bytes - offset);
    if (fallocate(seg_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), len) == 0) {
      (void)fallocate(seg_fd_, 0, static_cast<off_t>(offset), len);
    } else {
      const uint64_t span = std::min<uint64_t>(catalog_.segment_bytes - offset, catalog_.max_batch_bytes);
      std::vector<uint8_t> zeros(static_cast<size_t>(span), 0);
      if (auto st = write_all(seg_fd_, zeros.data(), zeros.size(), offset, seg_path); !st.ok()) return st;
    }
    if (fdatasync(seg_fd_) != 0) return io_error(errno, "fdatasync", seg_path);
  }
  ::close(seg_fd_);
  seg_fd_ = open_segment_fd(seg_path, O_RDWR);
  if (seg_fd_ < 0) return io_error(errno, "open", seg_path);
  write_offset_ = offset;
  // Where its batches end, or (none landed) where it was opened: the
  // catalog's figure may be ahead of what landed.
  end_seq_ = any ? expect : last.first_seq;
  durable_end_ = end_seq_;
  durable_offset_ = offset;
  last.end_seq = any ? expect : last.first_seq;
  last.records = records;
  last.bytes = offset - kSegmentHeaderBytes;
  return absl::OkStatus();
}

absl::Status SegmentWriter::create_open_segment() {
  const CatalogSegment& last = catalog_.segments.back();
  const std::string seg_path = dir_ + "/" + segment_name(last.first_seq);
  const std::string idx_path = dir_ + "/" + index_name(last.first_seq);
  close_files();
  seg_fd_ = open_segment_fd(seg_path, O_RDWR | O_CREAT | O_TRUNC);
  if (seg_fd_ < 0) return io_error(errno, "create", seg_path);
  // Preallocated: a full disk shows here, at the segment's start, never in
  // the middle of a batch; and an append does not grow the file's metadata.
  if (fallocate(seg_fd_, 0, 0, static_cast<off_t>(catalog_.segment_bytes)) != 0) {
    const int err = errno;
    if (err != EOPNOTSUPP || ftruncate(seg_fd_, static_cast<off_t>(catalog_.segment_bytes)) != 0) {
      close_files();
      unlink(seg_path.c_str());
      return io_error(err, absl::StrCat("allocate ", catalog_.segment_bytes, " bytes for"), seg_path);
    }
  }
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> block(static_cast<uint8_t*>(std::aligned_alloc(kBlock, kSegmentHeaderBytes)));
  std::memset(block.get(), 0, kSegmentHeaderBytes);
  SegmentHeader sh;
  sh.shape = catalog_.shape;
  sh.first_seq = last.first_seq;
  sh.segment_bytes = catalog_.segment_bytes;
  sh.max_batch_bytes = catalog_.max_batch_bytes;
  encode_segment_header(sh, block.get());
  if (auto st = write_all(seg_fd_, block.get(), kSegmentHeaderBytes, 0, seg_path); !st.ok()) {
    close_files();
    unlink(seg_path.c_str());
    return st;
  }
  idx_fd_ = open_file(idx_path, O_RDWR | O_CREAT | O_TRUNC);
  if (idx_fd_ < 0) {
    const int err = errno;
    close_files();
    unlink(seg_path.c_str());
    return io_error(err, "create", idx_path);
  }
  write_offset_ = kSegmentHeaderBytes;
  next_index_offset_ = kSegmentHeaderBytes;
  index_entries_ = 0;
  if (!dirty_) durable_offset_ = kSegmentHeaderBytes;
  return sync_dir(dir_);
}

// roll seals the open segment (if any) and lists a new one starting at
// first_seq; the catalog is stored before the new file exists, so a reader
// never finds a segment the catalog does not name.
absl::Status SegmentWriter::roll(uint64_t first_seq) {
  take_step(true);
  const Catalog before = catalog_;
  if (!catalog_.segments.empty() && !catalog_.segments.back().sealed) {
    if (sync_on_seal_ && seg_fd_ >= 0) {
      if (auto st = sync(); !st.ok()) return st;
    }
    catalog_.segments.back().sealed = true;
  }
  catalog_.segments.push_back(CatalogSegment{first_seq, first_seq, 0, 0, false});
  if (auto st = store_catalog(); !st.ok()) {
    catalog_ = before;
    catalog_dirty_ = false;
    return st;
  }
  close_files();
  return create_open_segment();
}

absl::Status SegmentWriter::append(std::span<const uint8_t> batch, uint64_t first_seq, uint64_t end_seq,
                                   uint64_t records) {
  take_step(false);
  if (catalog_dirty_) {
    if (auto st = store_catalog(); !st.ok()) return st;
  }
  const bool open_listed = !catalog_.segments.empty() && !catalog_.segments.back().sealed;
  if (!open_listed) {
    if (auto st = roll(first_seq); !st.ok()) return st;
  } else if (seg_fd_ < 0) {
    // Listed, its file not made yet (a full disk at the roll): make it.
    if (auto st = create_open_segment(); !st.ok()) return st;
  }
  if (write_offset_ + batch.size() > catalog_.segment_bytes) {
    if (auto st = roll(first_seq); !st.ok()) return st;
  }
  const std::string seg_path = dir_ + "/" + segment_name(catalog_.segments.back().first_seq);
  // One write of whole blocks (direct I/O). A reader of the open segment
  // may catch it half-landed: its checksum fails, and the reader looks
  // again (ArchiveReader::next). Writing the header's block last instead
  // costs a second, small synchronous write per batch: with it the
  // recorder fell behind 1 KiB records offered at 0.75x of dd's bandwidth
  // (110 k records lost after warm-up), without it kept up (none lost);
  // perf/README.md, "The archive".
  if (auto st = write_all(seg_fd_, batch.data(), batch.size(), write_offset_, seg_path); !st.ok()) return st;
  if (write_offset_ >= next_index_offset_) {
    uint8_t ie[kIndexEntryBytes];
    encode_index_entry(IndexEntry{first_seq, write_offset_}, ie);
    // The index is derived (recovery rebuilds it): an entry that fails to
    // land only makes lookups in this segment scan further.
    if (write_all(idx_fd_, ie, sizeof(ie), index_entries_ * kIndexEntryBytes, seg_path).ok()) {
      ++index_entries_;
      next_index_offset_ = write_offset_ + catalog_.index_interval;
    }
  }
  write_offset_ += batch.size();
  CatalogSegment& open = catalog_.segments.back();
  open.end_seq = end_seq;
  open.records += records;
  open.bytes += batch.size();
  end_seq_ = end_seq;
  has_batches_ = true;
  dirty_ = true;
  if (write_offset_ - durable_offset_ >= write_behind_bytes_) step_after(write_behind_ns_);
  return absl::OkStatus();
}

void SegmentWriter::step_if_quiet() {
  if (write_behind_quiet_ns_ != 0) step_after(write_behind_quiet_ns_);
}

// step_after starts a step when steps are on, none runs, something is
// unsynced, and `gap_ns` passed since the last step began. Only where every
// seal syncs (else dirty_ and durable_offset_ would carry over a roll, and
// a step claim the last segment's tail).
void SegmentWriter::step_after(uint64_t gap_ns) {
  if (!steps_on() || flush_ != nullptr || !dirty_ || seg_fd_ < 0) return;
  const uint64_t now = monotonic_ns();
  if (now - flush_started_ns_ < gap_ns) return;
  flush_started_ns_ = now;
  start_flush();
}

// start_flush starts a sync of the open segment as it stands (joined by
// finish_flush). Without a spare fd the next sync or seal does the work;
// without a thread the sync runs here.
void SegmentWriter::start_flush() {
  std::unique_ptr<Flush> f;
  try {
    f = std::make_unique<Flush>();
  } catch (const std::bad_alloc&) {
    return;
  }
  f->fd = fcntl(seg_fd_, F_DUPFD_CLOEXEC, 0);
  if (f->fd < 0) return;
  f->first_seq = catalog_.segments.back().first_seq;
  f->end_seq = end_seq_;
  f->offset = write_offset_;
  Flush* raw = f.get();
  auto run = [raw, datasync = datasync_] {
    raw->err = datasync(raw->fd) == 0 ? 0 : errno;
    raw->done.store(true, std::memory_order_release);  // pairs with the acquire in finish_flush
  };
  try {
    f->thread = std::thread(run);
  } catch (...) {  // no thread (system_error, bad_alloc): synced here
    run();
  }
  flush_ = std::move(f);
}

// take_step finishes a write-behind step (waiting for it when `wait`); its
// failure is kept for take_step_error, not returned: the append or roll
// that found it goes on (its batch is not what failed).
void SegmentWriter::take_step(bool wait) {
  if (absl::Status st = finish_flush(wait); !st.ok()) step_error_ = st;
}

// finish_flush takes a write-behind sync that is done (waiting for it when
// `wait`): what it covered counts as durable. Every caller that syncs or
// seals waits for it first, so it always covers the open segment. After a
// failed sync nothing more counts as durable, in this segment or a later
// one (Linux reports a lost write to one of the file's syncs, not to every
// later one: a later success does not say the lost bytes landed, and
// they come before everything written after them).
absl::Status SegmentWriter::finish_flush(bool wait) {
  if (flush_ == nullptr) return absl::OkStatus();
  // Acquire: pairs with the release in start_flush's thread (err is set).
  if (!wait && !flush_->done.load(std::memory_order_acquire)) return absl::OkStatus();
  if (flush_->thread.joinable()) flush_->thread.join();  // pairs with start_flush's thread
  const std::unique_ptr<Flush> f = std::move(flush_);
  ::close(f->fd);
  if (f->err != 0) {
    sync_failed_ = true;
    return io_error(f->err, "fdatasync", dir_ + "/" + segment_name(f->first_seq));
  }
  ++fsyncs_;
  dirty_ = write_offset_ != f->offset;
  if (sync_failed_) return absl::OkStatus();
  durable_end_ = f->end_seq;
  durable_offset_ = f->offset;
  return absl::OkStatus();
}

absl::Status SegmentWriter::sync() {
  if (auto st = finish_flush(true); !st.ok()) return st;
  if (seg_fd_ < 0 || !dirty_) return absl::OkStatus();
  if (datasync_(seg_fd_) != 0) {
    sync_failed_ = true;
    return io_error(errno, "fdatasync", dir_ + "/" + segment_name(catalog_.segments.back().first_seq));
  }
  ++fsyncs_;
  dirty_ = false;
  if (sync_failed_) return absl::OkStatus();  // see finish_flush
  durable_end_ = end_seq_;
  durable_offset_ = write_offset_;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> SegmentWriter::enforce(const Retention& r, uint64_t now_unix_ns, uint64_t* deferred) {
  uint32_t removed = 0;
  // The newest segment always stays, sealed or open.
  while (catalog_.segments.size() > 1 && catalog_.segments.front().sealed) {
    const CatalogSegment oldest = catalog_.segments.front();
    const std::string seg_path = dir_ + "/" + segment_name(oldest.first_seq);
    const bool over_size = r.max_bytes != 0 && catalog_.segments.size() * catalog_.segment_bytes > r.max_bytes;
    bool too_old = false;
    struct stat st {};
    if (r.max_age_ns != 0 && stat(seg_path.c_str(), &st) == 0) {
      const uint64_t mtime = static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000u +
                             static_cast<uint64_t>(st.st_mtim.tv_nsec);
      too_old = mtime + r.max_age_ns < now_unix_ns;
    }
    if (!over_size && !too_old) break;
    // A reader holds a shared flock on each segment it has open
    // (ArchiveReader): such a segment stays, and so does everything newer.
    const int fd = ::open(seg_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      ++*deferred;
      break;
    }
    std::vector<CatalogSegment> before = catalog_.segments;
    catalog_.segments.erase(catalog_.segments.begin());
    if (auto st2 = store_catalog(); !st2.ok()) {
      catalog_.segments = std::move(before);
      catalog_dirty_ = false;
      if (fd >= 0) ::close(fd);
      return st2;
    }
    unlink(seg_path.c_str());
    unlink((dir_ + "/" + index_name(oldest.first_seq)).c_str());
    if (fd >= 0) ::close(fd);
    ++removed;
  }
  return removed;
}

}  // namespace ringfire::archive
