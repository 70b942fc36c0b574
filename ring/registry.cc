// registry.cc — reader registry claim/release/list (setup and tools only).
#include "ring/registry.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ring/monotonic.h"

namespace ringfire::ring {
namespace {

bool process_alive(uint64_t pid) {
  if (pid == 0 || pid > INT32_MAX) return false;
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}


}  // namespace

ReaderEntry* ReaderRegistry::claim(const RingFile& file, std::string_view name, uint64_t pid) {
  const uint32_t n = file.header().registry_size;
  for (uint32_t i = 0; i < n; ++i) {
    ReaderEntry* e = file.reader_entry(i);
    // Acquire: pairs with the owner's release when it claimed or released
    // the entry.
    uint64_t owner = e->owner.load(std::memory_order_acquire);
    if (owner != 0 && process_alive(owner)) continue;
    // acq_rel: the acquire pairs with a previous owner's release in
    // ReaderRegistry::release; the release publishes our claim.
    if (!e->owner.compare_exchange_strong(owner, pid, std::memory_order_acq_rel)) continue;
    e->cursor.store(0, std::memory_order_relaxed);
    e->lost.store(0, std::memory_order_relaxed);
    e->updated_ns.store(monotonic_ns(), std::memory_order_relaxed);
    std::memset(e->name, 0, sizeof(e->name));
    std::memcpy(e->name, name.data(), std::min(name.size(), sizeof(e->name) - 1));
    return e;
  }
  return nullptr;
}

void ReaderRegistry::release(ReaderEntry* entry) {
  // Release: pairs with the acquire in claim.
  entry->owner.store(0, std::memory_order_release);
}

absl::StatusOr<ReaderSlot> ReaderSlot::claim(const RingFile& file, std::string_view name) {
  ReaderEntry* e = ReaderRegistry::claim(file, name, static_cast<uint64_t>(getpid()));
  if (e == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "reader registry of ", file.path(), " is full (", file.header().registry_size,
        " entries); recreate the ring with a larger registry"));
  }
  return ReaderSlot(e);
}

std::vector<ReaderInfo> ReaderRegistry::list(const RingFile& file) {
  std::vector<ReaderInfo> out;
  const uint32_t n = file.header().registry_size;
  for (uint32_t i = 0; i < n; ++i) {
    const ReaderEntry* e = file.reader_entry(i);
    const uint64_t owner = e->owner.load(std::memory_order_acquire);  // pairs with claim's release
    if (owner == 0) continue;
    ReaderInfo info;
    info.index = i;
    info.pid = owner;
    info.alive = process_alive(owner);
    info.cursor = e->cursor.load(std::memory_order_relaxed);
    info.lost = e->lost.load(std::memory_order_relaxed);
    info.name.assign(e->name, strnlen(e->name, sizeof(e->name)));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace ringfire::ring
