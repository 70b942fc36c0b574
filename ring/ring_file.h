// ring_file.h — creating, opening, validating and mapping a ring file (setup
// code; nothing here is on the hot path). Producers and consumers hold a
// RingFile and use its accessors, which are inline.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ring/layout.h"

namespace ringfire::ring {

// RingOptions describe a ring to create.
struct RingOptions {
  std::string name;                 // file name in `dir`, or a path if it has '/'
  std::string dir = "/dev/shm";     // e.g. a hugetlbfs mount
  uint64_t capacity = 1u << 16;     // slots, a power of two
  uint32_t slot_size = 64;          // payload bytes per slot (16 for blob rings)
  uint64_t schema_signature = 0;    // opaque to ringfire; checked on open
  uint32_t registry_size = 64;      // reader registry entries
  uint64_t arena_size = 0;          // blob arena bytes, a power of two
  uint32_t flags = 0;               // RingFlags
  bool replace = false;             // replace an existing file of that name
};

// RingExpectation is what an opener requires of an existing ring; an empty
// field accepts anything.
struct RingExpectation {
  std::optional<uint32_t> slot_size;
  std::optional<uint64_t> schema_signature;
  std::optional<bool> blob;
};

// ring_path resolves a ring name against a directory: names with '/' are paths.
std::string ring_path(std::string_view name, std::string_view dir = "/dev/shm");

// header_checksum computes the checksum stored in RingHeader::header_checksum.
uint64_t header_checksum(const RingHeader& h);

// validate_header checks a header read from a file of `file_size` bytes and
// returns an error naming the first problem (truncation, magic, version,
// checksum, geometry).
absl::Status validate_header(const RingHeader& h, uint64_t file_size);

// check_expectation compares a valid header with what an opener requires and
// names every mismatch.
absl::Status check_expectation(const RingHeader& h, const RingExpectation& want);

// SlotArray is a view of a ring's slots; it stays valid while the RingFile
// that produced it is alive, even if that RingFile object is moved.
struct SlotArray {
  std::byte* base = nullptr;
  uint64_t mask = 0;
  uint64_t stride = 0;

  SlotWord* slot(uint64_t seq) const {
    return reinterpret_cast<SlotWord*>(base + (seq & mask) * stride);
  }
  std::byte* payload(uint64_t seq) const {
    return reinterpret_cast<std::byte*>(slot(seq)) + kSlotWordBytes;
  }
};

// RingFile is a handle on one mapping of a ring file. Movable, not
// copyable; share() gives another handle on the same mapping, so the parts
// of one process that read one ring (a serve's worker, its repair reader,
// its control) map it once. The last handle to close unmaps and closes the
// descriptor (the file stays).
class RingFile {
 public:
  // create makes a new ring file atomically (readers never see a partial
  // header). Fails with AlreadyExists unless options.replace.
  static absl::StatusOr<RingFile> create(const RingOptions& options);
  // open maps an existing ring after validating its header against `want`.
  static absl::StatusOr<RingFile> open(std::string_view name_or_path,
                                       const RingExpectation& want = {});
  // remove unlinks a ring file; NotFound if it does not exist.
  static absl::Status remove(std::string_view name_or_path);

  RingFile(RingFile&& other) noexcept;
  RingFile& operator=(RingFile&& other) noexcept;
  RingFile(const RingFile&) = delete;
  RingFile& operator=(const RingFile&) = delete;
  ~RingFile();

  // share returns another handle on this mapping (no new mmap, no new
  // descriptor). The writer lock, when taken, is held until every handle
  // on the mapping has closed.
  RingFile share() const;

  // lock_writer takes the ring's exclusive writer lock (flock), so a second
  // writer fails with a clear error. Released when this RingFile closes,
  // including when the process is killed.
  absl::Status lock_writer();

  // reserve allocates every page of the file now. A kFlagLazy ring is made
  // without (its set-up is on a first token's path); its owner reserves it
  // once that token is gone, so a full filesystem is an error there
  // (ResourceExhausted, saying how much room there is), not a SIGBUS at a
  // later write or read of an untouched page; and it fills this mapping's
  // page tables (one call, not a fault a page at first touch). Any thread;
  // system calls.
  absl::Status reserve() const;
  // warm reads a byte of each page of [from, from + bytes) (clipped to the
  // mapping) and returns where it stopped: the mapping's size when done.
  // A populated page can still cost its first touch under a hypervisor
  // that shadows the guest's page tables (~4.5 us a page measured here,
  // 0.1 us once touched): a ring's first lap paid it on its writer's
  // path, ~3 pages a decode step. The owner warms after reserve(), a piece
  // a turn; a read is enough (the page is already writable and dirty).
  // Any thread; no system call.
  uint64_t warm(uint64_t from, uint64_t bytes) const;
  uint64_t mapped_bytes() const { return map_->size; }
  // still_at: the file at `path` is the one this handle maps (the same
  // device and inode: not removed and made again since).
  bool still_at(const std::string& path) const;
  // cut_short: the file is now shorter than this mapping, or was cut under
  // it and patched (map_guard.h: what lies past the cut reads as zeros
  // here, and what is written there no other process sees), so a session
  // on it streams nothing true and is to be ended. The file's size now,
  // rounded up to its pages, in `now_bytes`. One fstat; any thread.
  bool cut_short(uint64_t* now_bytes = nullptr) const;

  RingHeader& header() const { return *header_; }
  uint64_t capacity() const { return header_->capacity; }
  uint64_t mask() const { return slots_.mask; }
  uint32_t slot_size() const { return header_->slot_size; }
  bool sparse() const { return (header_->flags & kFlagSparse) != 0; }
  bool blob() const { return (header_->flags & kFlagBlob) != 0; }
  const std::string& path() const { return path_; }

  // slots views the slot array; slot(seq) is the slot `seq` maps to.
  SlotArray slots() const { return slots_; }
  SlotWord* slot(uint64_t seq) const { return slots_.slot(seq); }
  std::byte* payload(uint64_t seq) const { return slots_.payload(seq); }
  std::byte* arena() const { return base_ + header_->arena_offset; }
  ReaderEntry* reader_entry(uint32_t i) const {
    return reinterpret_cast<ReaderEntry*>(base_ + header_->registry_offset) + i;
  }

 private:
  // Mapping owns the mmap and the descriptor; every handle shares it.
  struct Mapping {
    int fd = -1;
    std::byte* base = nullptr;
    uint64_t size = 0;
    Mapping(int f, std::byte* b, uint64_t n);  // guards the mapping (map_guard.h)
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping();  // unguards, then unmaps
  };
  RingFile(std::string path, int fd, std::byte* base, uint64_t map_size);
  RingFile(std::string path, std::shared_ptr<Mapping> map);

  std::string path_;
  std::shared_ptr<Mapping> map_;
  std::byte* base_ = nullptr;
  RingHeader* header_ = nullptr;
  SlotArray slots_;
};

}  // namespace ringfire::ring
