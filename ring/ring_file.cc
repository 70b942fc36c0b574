// ring_file.cc — ring file creation, validation and mapping.
#include "ring/ring_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "ring/map_guard.h"

namespace ringfire::ring {
namespace {

absl::Status errno_status(int err, absl::string_view what, absl::string_view path) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT: return absl::NotFoundError(msg);
    case EEXIST: return absl::AlreadyExistsError(msg);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(msg);
    case ENOMEM:
    case ENOSPC: return absl::ResourceExhaustedError(
        absl::StrCat(msg, " (for hugetlbfs: reserve more pages in /proc/sys/vm/nr_hugepages)"));
    default: return absl::InternalError(msg);
  }
}

// map_ring maps a ring file with its page tables filled (MAP_POPULATE): a
// record's first write or read of a page then takes no fault (a minor one
// costs ~1 us; one page holds 64 records of 64 bytes).
// A kFlagLazy ring is mapped as it is: its pages come on first touch.
void* map_ring(int fd, uint64_t size, uint32_t flags) {
  const int populate = (flags & kFlagLazy) != 0 ? 0 : MAP_POPULATE;
  return mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | populate, fd, 0);
}

// no_room: a ring of `bytes` does not fit in `dir`'s filesystem.
absl::Status no_room(const std::string& dir, uint64_t bytes) {
  struct statfs fs {};
  const bool huge = statfs(dir.c_str(), &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC;
  return absl::ResourceExhaustedError(absl::StrCat(
      "no room for a ring of ", bytes, " bytes in ", dir, " (",
      static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_bsize),
      " free): make the ring smaller (capacity, slot size, arena) or ",
      huge ? "reserve more huge pages (/proc/sys/vm/nr_hugepages)" : "its filesystem larger"));
}

// filesystem_block returns the allocation unit files in `dir` must be sized
// to: the huge page size on hugetlbfs, the page size elsewhere.
uint64_t filesystem_block(const std::string& dir) {
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC) {
    return static_cast<uint64_t>(fs.f_bsize);
  }
  return kPage;
}

std::string parent_dir(const std::string& path) {
  const auto pos = path.rfind('/');
  return pos == std::string::npos ? "." : (pos == 0 ? "/" : path.substr(0, pos));
}

// not_a_ring: why what is at `path` is no ring file (a link, another kind
// of file, another file's bytes), or OK for a ring. `missing_ok`: nothing
// there is OK too. Looked at with lstat before it is opened (a device's
// open has effects), and opened without following or waiting. What
// remove() and create(replace) may take away (helper-46, review helper-47).
absl::Status not_a_ring(const std::string& path, bool missing_ok) {
  struct stat st{};
  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT && missing_ok ? absl::OkStatus() : errno_status(errno, "no ring at", path);
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link: name the ring file itself"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file: no ring"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return errno_status(errno, "cannot open", path);
  uint64_t magic = 0;
  const bool ring = ::pread(fd, &magic, sizeof(magic), 0) == static_cast<ssize_t>(sizeof(magic)) && magic == kMagic;
  ::close(fd);
  if (!ring) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a ringfire ring (it does not start with \"RFRING01\"): "
                                                      "left as it is; remove it with rm if you mean to"));
  }
  return absl::OkStatus();
}

absl::Status check_options(const RingOptions& o) {
  if (o.name.empty()) return absl::InvalidArgumentError("ring name is empty");
  // A name is printed in every line about its ring, and read back from
  // `stat`, `top` and the counters files: no control characters in it.
  if (std::any_of(o.name.begin(), o.name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    return absl::InvalidArgumentError("ring name has a control character (a newline, a tab...): give a plain name");
  }
  if (o.dir.empty() && o.name.find('/') == std::string::npos) {
    return absl::InvalidArgumentError("the ring directory is empty: give --dir a directory (default /dev/shm)");
  }
  if (!is_pow2(o.capacity)) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity ", o.capacity, " is not a power of two (try 65536)"));
  }
  if (o.capacity > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("capacity ", o.capacity, " is absurdly large"));
  }
  if ((o.flags & ~kKnownFlags) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown ring flags 0x", absl::Hex(o.flags)));
  }
  if (o.slot_size == 0 || o.slot_size > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot size ", o.slot_size, " must be between 1 and 1048576 bytes"));
  }
  if (o.registry_size > (1u << 16)) {
    return absl::InvalidArgumentError("reader registry size must be at most 65536");
  }
  const bool blob = (o.flags & kFlagBlob) != 0;
  if (blob) {
    if (o.slot_size != sizeof(BlobDescriptor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blob rings have a slot size of ", sizeof(BlobDescriptor), ", not ", o.slot_size));
    }
    if (!is_pow2(o.arena_size) || o.arena_size < 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blob arena size ", o.arena_size, " must be a power of two of at least 4096 bytes"));
    }
  } else if (o.arena_size != 0) {
    return absl::InvalidArgumentError("an arena size was given for a ring without the blob flag");
  }
  return absl::OkStatus();
}

}  // namespace

std::string ring_path(std::string_view name, std::string_view dir) {
  if (name.find('/') != std::string_view::npos) return std::string(name);
  return std::string(dir) + "/" + std::string(name);
}

uint64_t header_checksum(const RingHeader& h) {
  return XXH64(&h, kChecksummedBytes, 0);
}

absl::Status validate_header(const RingHeader& h, uint64_t file_size) {
  if (file_size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("ring file is truncated: ", file_size,
                                            " bytes, the header alone needs ", kHeaderBytes));
  }
  if (h.magic != kMagic) {
    return absl::InvalidArgumentError("not a ringfire ring (bad magic)");
  }
  if (h.version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat("ring version ", h.version,
                                                      ", this build reads version ", kVersion));
  }
  if (h.header_checksum != header_checksum(h)) {
    return absl::DataLossError("ring header is corrupt (checksum mismatch)");
  }
  // The checksum guards against corruption, not against a crafted file:
  // check the geometry as if it were untrusted.
  if (!is_pow2(h.capacity) || h.capacity > (uint64_t{1} << 40)) {
    return absl::DataLossError(absl::StrCat("ring header: capacity ", h.capacity,
                                            " is not a sane power of two"));
  }
  if (h.slot_size == 0 || h.slot_stride != slot_stride_for(h.slot_size)) {
    return absl::DataLossError("ring header: slot size and stride disagree");
  }
  if ((h.flags & ~kKnownFlags) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring uses flags 0x", absl::Hex(h.flags), " this build does not know"));
  }
  const bool blob = (h.flags & kFlagBlob) != 0;
  if (blob != (h.arena_size != 0) || (blob && !is_pow2(h.arena_size))) {
    return absl::DataLossError("ring header: blob flag and arena size disagree");
  }
  const uint64_t registry_end = h.registry_offset + uint64_t{h.registry_size} * sizeof(ReaderEntry);
  const uint64_t slots_end = h.slots_offset + h.capacity * h.slot_stride;
  if (h.registry_offset < kHeaderBytes || registry_end > h.slots_offset ||
      h.slots_offset % kPage != 0 || slots_end > h.arena_offset ||
      h.arena_offset + h.arena_size > h.file_size) {
    return absl::DataLossError("ring header: region offsets are inconsistent");
  }
  if (file_size < h.file_size) {
    return absl::DataLossError(absl::StrCat("ring file is truncated: ", file_size,
                                            " bytes, header says ", h.file_size));
  }
  return absl::OkStatus();
}

absl::Status check_expectation(const RingHeader& h, const RingExpectation& want) {
  std::string problems;
  if (want.slot_size && *want.slot_size != h.slot_size) {
    absl::StrAppend(&problems, "slot size: ring has ", h.slot_size, " bytes, expected ",
                    *want.slot_size, "; ");
  }
  if (want.schema_signature && *want.schema_signature != h.schema_signature) {
    absl::StrAppend(&problems, "schema signature: ring has 0x", absl::Hex(h.schema_signature),
                    ", expected 0x", absl::Hex(*want.schema_signature), "; ");
  }
  if (want.blob && *want.blob != ((h.flags & kFlagBlob) != 0)) {
    absl::StrAppend(&problems, "kind: ring is ", (h.flags & kFlagBlob) ? "a blob" : "a fixed-slot",
                    " ring, expected ", *want.blob ? "a blob" : "a fixed-slot", " ring; ");
  }
  if (problems.empty()) return absl::OkStatus();
  problems.resize(problems.size() - 2);
  return absl::FailedPreconditionError(absl::StrCat("ring does not match: ", problems));
}

RingFile::Mapping::Mapping(int f, std::byte* b, uint64_t n) : fd(f), base(b), size(n) {
  if (base != nullptr) guard_mapping(base, size, fd);  // a cut of the file is not a SIGBUS: its pair is below
}

RingFile::Mapping::~Mapping() {
  if (base != nullptr) unguard_mapping(base);  // before the unmap: pairs with guard_mapping above
  if (base != nullptr) munmap(base, size);
  if (fd >= 0) close(fd);
}

RingFile::RingFile(std::string path, int fd, std::byte* base, uint64_t map_size)
    : RingFile(std::move(path), std::make_shared<Mapping>(fd, base, map_size)) {}

RingFile::RingFile(std::string path, std::shared_ptr<Mapping> map)
    : path_(std::move(path)), map_(std::move(map)), base_(map_->base) {
  header_ = reinterpret_cast<RingHeader*>(base_);
  slots_ = SlotArray{base_ + header_->slots_offset, header_->capacity - 1, header_->slot_stride};
}

RingFile::RingFile(RingFile&& o) noexcept { *this = std::move(o); }

RingFile& RingFile::operator=(RingFile&& o) noexcept {
  if (this != &o) {
    path_ = std::move(o.path_);
    map_ = std::move(o.map_);
    base_ = std::exchange(o.base_, nullptr);
    header_ = std::exchange(o.header_, nullptr);
    slots_ = std::exchange(o.slots_, SlotArray{});
  }
  return *this;
}

RingFile::~RingFile() = default;

RingFile RingFile::share() const { return RingFile(path_, map_); }

absl::StatusOr<RingFile> RingFile::create(const RingOptions& o) {
  if (absl::Status s = check_options(o); !s.ok()) return s;
  const std::string path = ring_path(o.name, o.dir);
  if (o.replace) {
    if (absl::Status st = not_a_ring(path, /*missing_ok=*/true); !st.ok()) return st;
  }
  const std::string dir = parent_dir(path);
  const uint64_t block = filesystem_block(dir);

  RingHeader h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.flags = o.flags;
  h.capacity = o.capacity;
  h.slot_size = o.slot_size;
  h.slot_stride = slot_stride_for(o.slot_size);
  h.schema_signature = o.schema_signature;
  h.registry_size = o.registry_size;
  h.registry_offset = kHeaderBytes;
  h.slots_offset = align_up(h.registry_offset + uint64_t{o.registry_size} * sizeof(ReaderEntry), kPage);
  h.arena_offset = align_up(h.slots_offset + o.capacity * h.slot_stride, kPage);
  h.arena_size = o.arena_size;
  h.file_size = align_up(h.arena_offset + h.arena_size, block);

  // Build the file under a temporary name and link it into place, so no
  // opener ever sees a half-written header.
  const std::string tmp = absl::StrCat(path, ".creating.", getpid());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
  if (fd < 0) return errno_status(errno, "cannot create ring file", tmp);
  auto fail = [&](absl::Status s) {
    close(fd);
    unlink(tmp.c_str());
    return s;
  };
  if (ftruncate(fd, static_cast<off_t>(h.file_size)) != 0) {
    return fail(errno_status(errno, "cannot size ring file", tmp));
  }
  // Every page allocated now: a full /dev/shm (or hugetlbfs pool) is a
  // start-up error here, not a SIGBUS in the writer on its first lap, and
  // the first lap does not pay for allocating and zeroing a page every 64
  // records. (A filesystem without fallocate keeps the file sparse.)
  // A lazy ring is not allocated here (its owner reserves it later), but
  // one that would not fit now is refused now, as any other.
  int room = 0;
  if ((h.flags & kFlagLazy) == 0) {
    room = posix_fallocate(fd, 0, static_cast<off_t>(h.file_size));
  } else if (struct statfs fs {}; fstatfs(fd, &fs) == 0 &&
             static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_bsize) < h.file_size) {
    room = ENOSPC;
  }
  if (room == ENOSPC || room == ENOMEM) return fail(no_room(dir, h.file_size));
  void* base = map_ring(fd, h.file_size, h.flags);
  if (base == MAP_FAILED) return fail(errno_status(errno, "cannot map ring file", tmp));
  h.header_checksum = header_checksum(h);
  auto* header = new (base) RingHeader();
  std::memcpy(static_cast<void*>(header), &h, kChecksummedBytes + sizeof(uint64_t));
  header->write_seq.store(0, std::memory_order_relaxed);
  header->arena_reserved.store(0, std::memory_order_relaxed);
  header->writer_pid.store(0, std::memory_order_relaxed);
  header->hole_begin.store(0, std::memory_order_relaxed);
  header->hole_end.store(0, std::memory_order_relaxed);
  RingFile file(path, fd, static_cast<std::byte*>(base), h.file_size);

  if (o.replace) {
    if (rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      unlink(tmp.c_str());
      return errno_status(err, "cannot install ring file", path);
    }
  } else {
    const int rc = link(tmp.c_str(), path.c_str());
    const int err = errno;
    unlink(tmp.c_str());
    if (rc != 0) {
      if (err == EEXIST) {
        return absl::AlreadyExistsError(
            absl::StrCat("ring ", path, " already exists (remove it, or pass replace/--force)"));
      }
      return errno_status(err, "cannot install ring file", path);
    }
  }
  return file;
}

absl::StatusOr<RingFile> RingFile::open(std::string_view name_or_path, const RingExpectation& want) {
  const std::string path = ring_path(name_or_path);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "cannot open ring", path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return errno_status(err, "cannot stat ring", path);
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  RingHeader h{};
  if (file_size >= kHeaderBytes) {
    if (pread(fd, &h, kChecksummedBytes + sizeof(uint64_t), 0) !=
        static_cast<ssize_t>(kChecksummedBytes + sizeof(uint64_t))) {
      const int err = errno;
      close(fd);
      return errno_status(err, "cannot read ring header", path);
    }
  }
  absl::Status s = validate_header(h, file_size);
  if (s.ok()) s = check_expectation(h, want);
  if (!s.ok()) {
    close(fd);
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  void* base = map_ring(fd, h.file_size, h.flags);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return errno_status(err, "cannot map ring", path);
  }
  return RingFile(path, fd, static_cast<std::byte*>(base), h.file_size);
}

absl::Status RingFile::remove(std::string_view name_or_path) {
  const std::string path = ring_path(name_or_path);
  // Only a ring goes (it removed whatever it named, helper-46).
  if (absl::Status st = not_a_ring(path, /*missing_ok=*/false); !st.ok()) return st;
  if (unlink(path.c_str()) != 0) return errno_status(errno, "cannot remove ring", path);
  return absl::OkStatus();
}

absl::Status RingFile::lock_writer() {
  if (flock(map_->fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ring ", path_, " already has a writer (pid ",
          header_->writer_pid.load(std::memory_order_relaxed), "); a ring has exactly one"));
    }
    return errno_status(errno, "cannot lock ring", path_);
  }
  header_->writer_pid.store(static_cast<uint64_t>(getpid()), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status RingFile::reserve() const {
  const int err = posix_fallocate(map_->fd, 0, static_cast<off_t>(header_->file_size));
  if (err == ENOSPC || err == ENOMEM) return no_room(parent_dir(path_), header_->file_size);
  if (err != 0 && err != EOPNOTSUPP) return errno_status(err, "cannot allocate ring", path_);
  // This mapping's page tables too, in one call (MADV_POPULATE_WRITE,
  // Linux 5.14): whoever uses this mapping (a node's egress ring: its
  // writer and the serve; its ingress ring: the mirror that writes it and
  // the node's reader, one mapping) then takes no fault a page on the first lap (~5 us each
  // on a VM: 3,072 of them on a stream mux channel's 12 MiB ring). Best
  // effort: an older kernel leaves them to the first touch.
  (void)madvise(map_->base, map_->size, MADV_POPULATE_WRITE);
  return absl::OkStatus();
}

bool RingFile::still_at(const std::string& path) const {
  struct stat here {}, there {};
  return fstat(map_->fd, &here) == 0 && stat(path.c_str(), &there) == 0 && here.st_dev == there.st_dev &&
         here.st_ino == there.st_ino;
}

bool RingFile::cut_short(uint64_t* now_bytes) const {
  struct stat st {};
  if (fstat(map_->fd, &st) != 0) return false;
  const auto block = static_cast<uint64_t>(st.st_blksize > 0 ? st.st_blksize : kPage);  // hugetlbfs: its page size
  const uint64_t size = (static_cast<uint64_t>(st.st_size) + block - 1) / block * block;
  if (now_bytes != nullptr) *now_bytes = size;
  return size < map_->size || mapping_patched(map_->base);
}

// Reads what another thread may be writing (the ring's writer): the value
// is thrown away, so the race is harmless and the sanitizer is told so.
__attribute__((no_sanitize("thread"))) uint64_t RingFile::warm(uint64_t from, uint64_t bytes) const {
  const uint64_t end = std::min(map_->size, from + bytes);
  uint8_t sum = 0;
  for (uint64_t at = from; at < end; at += kPage) sum += *reinterpret_cast<const volatile uint8_t*>(map_->base + at);
  (void)sum;
  return end;
}

}  // namespace ringfire::ring
