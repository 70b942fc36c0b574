// registry.h — the reader registry: readers publish their cursor into an
// entry of the ring file so tools (`ringfire stat`) can show who reads and
// how far behind they are. Entries are claimed by pid with a CAS and
// reclaimed from processes that died without releasing them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ring/ring_file.h"

namespace ringfire::ring {

// ReaderInfo is one registry entry as `stat` shows it.
struct ReaderInfo {
  uint32_t index = 0;
  uint64_t pid = 0;
  bool alive = false;
  uint64_t cursor = 0;
  uint64_t lost = 0;
  std::string name;
};

class ReaderRegistry {
 public:
  // claim takes a free (or dead process's) entry for `pid`; nullptr if full.
  static ReaderEntry* claim(const RingFile& file, std::string_view name, uint64_t pid);
  // release frees an entry claimed by this process.
  static void release(ReaderEntry* entry);
  // list returns every claimed entry.
  static std::vector<ReaderInfo> list(const RingFile& file);
};

// ReaderSlot is a reader's claimed registry entry (or none): it publishes the
// reader's position and releases the entry when destroyed. Reader thread only.
class ReaderSlot {
 public:
  ReaderSlot() = default;
  // claim registers `name` for this process; ResourceExhausted if full.
  static absl::StatusOr<ReaderSlot> claim(const RingFile& file, std::string_view name);
  ReaderSlot(ReaderSlot&& o) noexcept : entry_(std::exchange(o.entry_, nullptr)) {}
  ReaderSlot& operator=(ReaderSlot&& o) noexcept {
    std::swap(entry_, o.entry_);
    return *this;
  }
  ~ReaderSlot() {
    if (entry_ != nullptr) ReaderRegistry::release(entry_);
  }

  // publish stores the reader's cursor and lost count (relaxed: advisory).
  void publish(uint64_t cursor, uint64_t lost) {
    if (entry_ == nullptr) return;
    entry_->cursor.store(cursor, std::memory_order_relaxed);
    entry_->lost.store(lost, std::memory_order_relaxed);
  }

 private:
  explicit ReaderSlot(ReaderEntry* e) : entry_(e) {}
  ReaderEntry* entry_ = nullptr;
};

}  // namespace ringfire::ring
