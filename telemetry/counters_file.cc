// counters_file.cc — create, publish, read the counters file.
#include "telemetry/counters_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <pwd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ring/monotonic.h"

namespace ringfire::telemetry {
namespace {


void copy_text(char* dst, size_t n, std::string_view src) {
  std::memset(dst, 0, n);
  std::memcpy(dst, src.data(), std::min(src.size(), n - 1));
}

std::string text_of(const char* src, size_t n) { return std::string(src, strnlen(src, n)); }

// unlink_if_names removes `path` only while it still names the file of
// inode `ino` (a new process of the same pid renames its own over it).
void unlink_if_names(const std::string& path, uint64_t ino) {
  struct stat st{};
  if (stat(path.c_str(), &st) == 0 && st.st_ino == ino) unlink(path.c_str());
}

}  // namespace

absl::StatusOr<CountersFile> CountersFile::create(const std::string& dir, std::string_view role,
                                                  std::string_view ring, std::string_view detail,
                                                  uint32_t capacity, std::string_view tag) {
  CountersFile f;
  f.path_ = absl::StrCat(dir, "/ringfire-", getpid(), tag.empty() ? "" : "-", std::string(tag), ".counters");
  f.bytes_ = sizeof(CountersHeader) + size_t{capacity} * sizeof(CounterEntry);
  // Made aside (a name readers skip), renamed into place when whole. A new
  // file of a name no one could guess (O_EXCL): a file a stranger made
  // ahead under a fixed name would be theirs to truncate under our mapping.
  std::string aside = f.path_ + ".XXXXXX";
  const int fd = mkostemp(aside.data(), O_CLOEXEC);
  if (fd >= 0) (void)fchmod(fd, 0644);  // readable by other users' top
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create the counters file ", f.path_, ": ",
                                                      std::strerror(errno), " (choose --counters-dir)"));
  }
  void* base = MAP_FAILED;
  struct stat st{};
  if (ftruncate(fd, static_cast<off_t>(f.bytes_)) == 0 && fstat(fd, &st) == 0) {
    base = mmap(nullptr, f.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    unlink(aside.c_str());
    return absl::InternalError(absl::StrCat("counters file ", aside, ": ", std::strerror(err)));
  }
  f.inode_ = st.st_ino;
  f.header_ = static_cast<CountersHeader*>(base);
  f.entries_ = reinterpret_cast<CounterEntry*>(static_cast<std::byte*>(base) + sizeof(CountersHeader));
  f.header_->version = kCountersVersion;
  f.header_->pid = static_cast<uint32_t>(getpid());
  f.header_->capacity = capacity;
  copy_text(f.header_->role, sizeof(f.header_->role), role);
  copy_text(f.header_->ring, sizeof(f.header_->ring), ring);
  copy_text(f.header_->detail, sizeof(f.header_->detail), detail);
  f.header_->updated_ns.store(monotonic_ns(), std::memory_order_relaxed);
  // Release: pairs with the reader's acquire load of the magic: a reader
  // that sees it sees the header above.
  std::atomic_ref<uint64_t>(f.header_->magic).store(kCountersMagic, std::memory_order_release);
  if (rename(aside.c_str(), f.path_.c_str()) != 0) {
    const int e = errno;
    munmap(base, f.bytes_);
    f.header_ = nullptr;
    unlink(aside.c_str());
    return absl::InternalError(absl::StrCat("counters file ", f.path_, ": ", std::strerror(e)));
  }
  for (uint32_t i = capacity; i > 0; --i) f.free_.push_back(i - 1);
  return f;
}

CountersFile::CountersFile(CountersFile&& o) noexcept
    : path_(std::move(o.path_)),
      inode_(o.inode_),
      header_(std::exchange(o.header_, nullptr)),
      entries_(std::exchange(o.entries_, nullptr)),
      bytes_(o.bytes_),
      index_(std::move(o.index_)),
      touched_(std::move(o.touched_)),
      free_(std::move(o.free_)) {}

CountersFile::~CountersFile() {
  if (header_ == nullptr) return;
  munmap(header_, bytes_);
  unlink_if_names(path_, inode_);  // not a later writer's of the same name (a reused pid)
}

void CountersFile::set(std::string_view label, uint64_t value) {
  auto it = index_.find(label);
  if (it == index_.end()) {
    if (free_.empty()) return;
    const uint32_t i = free_.back();
    free_.pop_back();
    CounterEntry& e = entries_[i];
    e.generation.fetch_add(1, std::memory_order_relaxed);
    copy_text(e.label, sizeof(e.label), label);
    e.value.store(value, std::memory_order_relaxed);
    // Release: pairs with the reader's acquire of state; the label is whole.
    e.state.store(1, std::memory_order_release);
    it = index_.emplace(std::string(label), i).first;
  }
  entries_[it->second].value.store(value, std::memory_order_relaxed);
  touched_.insert(it->first);
}

void CountersFile::sweep() {
  for (auto it = index_.begin(); it != index_.end();) {
    if (touched_.count(it->first) != 0) {
      ++it;
      continue;
    }
    // Release: pairs with read_counters' acquire re-check of state: a
    // reader that copied the entry meanwhile sees it gone.
    entries_[it->second].state.store(0, std::memory_order_release);
    free_.push_back(it->second);
    it = index_.erase(it);
  }
  touched_.clear();
  // Release: pairs with read_counters' acquire of updated_ns.
  header_->updated_ns.store(monotonic_ns(), std::memory_order_release);
}

namespace {

// Another user's files, as root reads them: copied, never mapped (their
// owner could truncate one under a mapping: a SIGBUS), each at most
// kForeignBytes (4,096 entries; a session makes 1,024), and at most
// kForeignPerOwner of one user's copied a read (beyond a header's 256
// bytes each): no user makes root copy without bound.
constexpr size_t kForeignBytes = sizeof(CountersHeader) + 4096 * sizeof(CounterEntry);
constexpr size_t kMaxFileBytes = kForeignBytes;  // this user's and root's too (a session makes 1,024 entries)
constexpr size_t kForeignPerOwner = 64;
constexpr size_t kForeignBudget = 16u << 20;  // bytes copied of every other user's files together, a read

// process_owner: the user that owns process `pid`, or -1 when none is seen.
uid_t process_owner(uint32_t pid) {
  struct stat st{};
  if (stat(absl::StrCat("/proc/", pid).c_str(), &st) != 0) return static_cast<uid_t>(-1);
  return st.st_uid;
}

// pid_of_name: the pid a counters file's name gives ("ringfire-PID.counters"
// or "ringfire-PID-TAG.counters"); 0 if it gives none.
uint32_t pid_of_name(const std::string& name) {
  constexpr size_t kFrom = 9;  // after "ringfire-"
  uint64_t v = 0;
  size_t i = kFrom;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && v <= UINT32_MAX; ++i) {
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  // Digits, no leading zero, then ".counters" or "-TAG.counters".
  if (i == kFrom || name[kFrom] == '0' || i == name.size() || v > UINT32_MAX) return 0;
  if (name[i] != '-' && name.compare(i, std::string::npos, ".counters") != 0) return 0;
  return static_cast<uint32_t>(v);
}

// user_name: the login name of `uid`, or its number.
std::string user_name(uid_t uid) {
  char buf[1024];
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) return printable(found->pw_name);
  return std::to_string(uid);
}

// ForeignBudget is what root may still copy of other users' files in one
// read: files per owner, bytes in all.
struct ForeignBudget {
  std::map<uid_t, size_t> files;
  size_t bytes = kForeignBudget;
};

// copy_foreign copies another user's counters file (`fd`, `st` its stat,
// `name` its name) for root: its header first, then the rest only if the
// header names the pid the file's name gives, that pid is a live process
// of the file's owner, and the entries it declares fit the file and the
// bounds (charged to `budget` once the header passes, whatever follows).
// *size: the bytes copied.
bool copy_foreign(int fd, const struct stat& st, const std::string& name, ForeignBudget* budget,
                  std::vector<uint64_t>* copy, size_t* size) {
  if (budget->files[st.st_uid] >= kForeignPerOwner) return false;
  if (static_cast<uint64_t>(st.st_size) > kForeignBytes) return false;
  copy->assign(sizeof(CountersHeader) / 8, 0);
  if (pread(fd, copy->data(), sizeof(CountersHeader), 0) != static_cast<ssize_t>(sizeof(CountersHeader))) return false;
  const auto* h = reinterpret_cast<const CountersHeader*>(copy->data());
  const uint32_t pid = h->pid;
  const uint32_t capacity = h->capacity;
  const size_t need = sizeof(CountersHeader) + size_t{capacity} * sizeof(CounterEntry);
  if (h->magic != kCountersMagic || h->version != kCountersVersion || need > static_cast<size_t>(st.st_size)) {
    return false;
  }
  if (pid == 0 || pid > static_cast<uint32_t>(INT_MAX) || pid != pid_of_name(name) ||
      process_owner(pid) != st.st_uid) {
    return false;
  }
  if (need > budget->bytes) return false;
  ++budget->files[st.st_uid];
  budget->bytes -= need;
  copy->assign(need / 8, 0);
  if (pread(fd, copy->data(), need, 0) != static_cast<ssize_t>(need)) return false;
  h = reinterpret_cast<const CountersHeader*>(copy->data());
  if (h->pid != pid || h->capacity != capacity) return false;  // rewritten between the reads
  *size = need;
  return true;
}

}  // namespace

std::string printable(std::string s) {
  for (char& c : s) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return s;
}

bool names_ring(const ProcessCounters& p, const std::string& ring_path) {
  return p.ring == ring_path || (!p.user.empty() && p.ring == printable(ring_path));
}

std::vector<ProcessCounters> read_counters(const std::string& dir, bool remove_stale) {
  std::vector<ProcessCounters> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  ForeignBudget budget;
  while (dirent* ent = readdir(d)) {
    const std::string name = ent->d_name;
    if (name.rfind("ringfire-", 0) != 0 || name.size() < 18 || name.substr(name.size() - 9) != ".counters") continue;
    const std::string path = dir + "/" + name;
    // Non-blocking, no links: a FIFO or a link under a counters file's name
    // is skipped, never waited on or followed; only a regular file is read.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st{};
    // One link: not another file (root's, say) linked in under this name.
    const bool shaped = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
                        static_cast<size_t>(st.st_size) >= sizeof(CountersHeader);
    size_t size = shaped ? static_cast<size_t>(st.st_size) : 0;
    // Every file is copied (pread), never mapped: one cut while mapped was
    // a SIGBUS, and a sparse one declaring a large capacity filled /dev/shm
    // as its holes were read (helper-40). This user's and root's files up
    // to kMaxFileBytes; another user's only root reads (copy_foreign), and
    // shows only while a live process of that user has the pid the file
    // names, never removes.
    const bool own = st.st_uid == geteuid() || st.st_uid == 0;
    const bool foreign = shaped && !own && geteuid() == 0;
    std::vector<uint64_t> copy, again;
    bool copied = false;
    if (shaped && own) {
      copied = size <= kMaxFileBytes && (copy.assign((size + 7) / 8, 0),
                                         pread(fd, copy.data(), size, 0) == static_cast<ssize_t>(size));
    } else if (foreign) {
      copied = copy_foreign(fd, st, name, &budget, &copy, &size);
    }
    // A second copy: an entry counts only where both agree on its state,
    // generation and label (the writer may have been mid-change). Root's
    // budget for another user's files is charged for it too.
    if (copied && foreign) budget.bytes -= std::min(budget.bytes, size);
    copied = copied && (again.assign(copy.size(), 0), pread(fd, again.data(), size, 0) == static_cast<ssize_t>(size));
    if (!copied) {
      close(fd);
      continue;
    }
    const void* base = copy.data();
    const auto* h = static_cast<const CountersHeader*>(base);
    // The capacity and pid read once (a writer could change them between
    // reads); a pid that names no single process (0, or past INT_MAX: kill
    // would ask about a group) is not taken as alive.
    const uint32_t capacity = h->capacity;
    const uint32_t pid = h->pid;
    // Acquire: pairs with the writer's release of the magic.
    if (std::atomic_ref<const uint64_t>(h->magic).load(std::memory_order_acquire) == kCountersMagic &&
        h->version == kCountersVersion &&
        sizeof(CountersHeader) + size_t{capacity} * sizeof(CounterEntry) <= size) {
      ProcessCounters p;
      p.path = path;
      p.pid = pid;
      p.alive = pid > 0 && pid <= static_cast<uint32_t>(INT_MAX) &&
                (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
      // Another user's text made printable (this user's and root's as
      // written: a ring's name is matched against them).
      const auto text = [&](const char* src, size_t n) {
        return foreign ? printable(text_of(src, n)) : text_of(src, n);
      };
      p.uid = st.st_uid;
      if (foreign) p.user = user_name(st.st_uid);
      p.role = text(h->role, sizeof(h->role));
      p.ring = text(h->ring, sizeof(h->ring));
      p.detail = text(h->detail, sizeof(h->detail));
      p.updated_ns = h->updated_ns.load(std::memory_order_acquire);  // pairs with publish's release
      const auto entries_of = [](const std::vector<uint64_t>& c) {
        return reinterpret_cast<const CounterEntry*>(reinterpret_cast<const std::byte*>(c.data()) + sizeof(CountersHeader));
      };
      const CounterEntry* first = entries_of(copy);
      const CounterEntry* second = entries_of(again);
      for (uint32_t i = 0; i < capacity; ++i) {
        const CounterEntry& a = first[i];
        const CounterEntry& b = second[i];
        // Copies: nothing writes them; the loads are plain reads.
        if (a.state.load(std::memory_order_relaxed) != 1 || b.state.load(std::memory_order_relaxed) != 1 ||
            a.generation.load(std::memory_order_relaxed) != b.generation.load(std::memory_order_relaxed) ||
            std::memcmp(a.label, b.label, sizeof(a.label)) != 0) {
          continue;
        }
        uint64_t v = b.value.load(std::memory_order_relaxed);
        // A value that moved between the copies is read once more on its
        // own (a copy is not an atomic load: one caught mid-store could be
        // torn); two reads that agree are taken, else the later copy's.
        if (v != a.value.load(std::memory_order_relaxed)) {
          uint64_t once[2] = {0, 0};
          const auto at = static_cast<off_t>(sizeof(CountersHeader) + uint64_t{i} * sizeof(CounterEntry));
          if (pread(fd, &once[0], 8, at) == 8 && pread(fd, &once[1], 8, at) == 8 && once[0] == once[1]) v = once[1];
        }
        p.counters.emplace_back(text(b.label, sizeof(b.label)), v);
      }
      // Another user's: its process lives (copy_foreign); never removed by root.
      if (!foreign && !p.alive && remove_stale) {
        unlink_if_names(path, st.st_ino);  // a killed ringfire process's file
      } else {
        out.push_back(std::move(p));
      }
    }
    close(fd);
  }
  closedir(d);
  return out;
}

std::vector<std::pair<std::string, uint64_t>> CountersFile::snapshot() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [label, i] : index_) out.emplace_back(label, entries_[i].value.load(std::memory_order_relaxed));
  return out;
}

}  // namespace ringfire::telemetry
