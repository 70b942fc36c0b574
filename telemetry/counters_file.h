// counters_file.h — the shared-memory counters file each serve or mirror
// process keeps (`<dir>/ringfire-<pid>.counters`, /dev/shm by default; one
// per session, `ringfire-<pid>-<tag>.counters`, for a process with several):
// labelled u64 counters any process can read while the writer runs, the
// way Aeron's counters file lets its tools read a driver without asking it
// anything. `ringfire stat` reads them; so will `ringfire top`.
//
// Layout (host byte order; one host):
//   0    header, 256 bytes: magic "RFCNTR01", version, pid, capacity,
//        updated_ns (CLOCK_MONOTONIC of the last publish), role, ring, detail
//   256  capacity entries of 64 bytes: value u64, state u32 (0 free, 1 live;
//        stored last, with release), generation u32, label (48 bytes, NUL-padded)
// One writer (the process's control thread); readers copy the file twice
// (never map it) and keep the entries both copies agree on (state,
// generation, label). Setup and control thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ringfire::telemetry {

inline constexpr uint64_t kCountersMagic = 0x313052544E434652ull;  // "RFCNTR01"
inline constexpr uint32_t kCountersVersion = 1;
inline constexpr size_t kLabelBytes = 48;

struct CountersHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;
  uint32_t capacity;
  uint32_t reserved;
  std::atomic<uint64_t> updated_ns;
  char role[24];
  char ring[160];
  char detail[40];
};
static_assert(sizeof(CountersHeader) == 256);

struct CounterEntry {
  std::atomic<uint64_t> value;
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> generation;
  char label[kLabelBytes];
};
static_assert(sizeof(CounterEntry) == 64);

// CountersFile is the writer's side.
class CountersFile {
 public:
  // create makes `<dir>/ringfire-<pid>.counters` (`ringfire-<pid>-<tag>.counters`
  // for one of several sessions of a process), removed again on destruction.
  // It is made under another name and renamed into place, never truncated
  // where it stands: a reader that mapped a dead process's file of the same
  // name keeps a whole file (a truncated mapping is a SIGBUS).
  static absl::StatusOr<CountersFile> create(const std::string& dir, std::string_view role,
                                             std::string_view ring, std::string_view detail,
                                             uint32_t capacity = 1024, std::string_view tag = "");
  CountersFile(CountersFile&& o) noexcept;
  CountersFile& operator=(CountersFile&&) = delete;
  ~CountersFile();

  // set publishes `value` under `label` (made on first use; a full file
  // drops new labels). Labels not set since the last sweep() are removed
  // by it: call set for every live counter, then sweep, once a round.
  void set(std::string_view label, uint64_t value);
  void sweep();
  // snapshot: every live label and its value, by label (for a JSON line).
  std::vector<std::pair<std::string, uint64_t>> snapshot() const;
  const std::string& path() const { return path_; }

 private:
  CountersFile() = default;
  std::string path_;
  uint64_t inode_ = 0;  // the file's: the destructor removes path_ only while it names it
  CountersHeader* header_ = nullptr;
  CounterEntry* entries_ = nullptr;
  size_t bytes_ = 0;
  std::map<std::string, uint32_t, std::less<>> index_;
  std::set<std::string, std::less<>> touched_;
  std::vector<uint32_t> free_;
};

// ProcessCounters is one counters file as a reader sees it.
struct ProcessCounters {
  std::string path;
  uint32_t pid = 0;
  bool alive = false;
  uint32_t uid = 0;  // the file's owner
  std::string user;  // another user's session, as root sees it: its owner's name (else empty)
  std::string role, ring, detail;  // another user's: printable ASCII only (anything else read as '?')
  uint64_t updated_ns = 0;
  std::vector<std::pair<std::string, uint64_t>> counters;  // in file order
};

// printable: text for a terminal: anything but printable ASCII becomes
// '?' (labels, rings and details are ASCII; a stranger's could carry
// escape sequences to root's terminal).
std::string printable(std::string s);

// ProcessCounters::ring matches `ring_path` (another user's ring text is
// printable(): compared so).
bool names_ring(const ProcessCounters& p, const std::string& ring_path);

// read_counters reads every counters file in `dir`. Files of processes that
// no longer exist are removed (`remove_stale`) or returned with alive false.
// Every file is copied, twice (an entry counts where both copies agree),
// never mapped: a file cut while mapped would be a SIGBUS, and a sparse
// one's holes would fill /dev/shm as they were read. Files owned by this
// user or root are read up to 4,096 entries; another user's file is
// skipped, except by root, which copies it
// (its header first; at most 4,096 entries, 64 files of one user and
// 16 MiB in all a read) and shows it, with `user` set and its text made
// printable ASCII, only while the pid its name and header both give is a
// live process of its owner; never removes it. A file with more than one
// link is skipped.
std::vector<ProcessCounters> read_counters(const std::string& dir, bool remove_stale = true);

}  // namespace ringfire::telemetry
