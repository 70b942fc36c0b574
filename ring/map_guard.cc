// map_guard.cc — see map_guard.h.
#include "ring/map_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace ringfire::ring {
namespace {

constexpr size_t kMaxGuarded = 4096;

struct Guarded {
  std::atomic<uintptr_t> base{0};  // 0: free; set last on guard, cleared first on unguard
  std::atomic<size_t> size{0};
};
Guarded g_table[kMaxGuarded];
std::atomic<uint64_t> g_cut{0};
struct sigaction g_before {};  // the handler before ours: faults not ours go there
std::once_flag g_installed;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Guarded& g : g_table) {
    const uintptr_t base = g.base.load(std::memory_order_acquire);  // pairs with guard_mapping's release
    if (base == 0 || addr < base) continue;
    const size_t size = g.size.load(std::memory_order_relaxed);
    if (addr - base >= size) continue;
    // From the faulting page to the mapping's end: zeroed private memory in
    // place of what the file no longer has. The touch then runs again. A
    // hugetlbfs ring's mapping splits only at its page size: 4 KiB, then
    // 2 MiB, then 1 GiB (each start within the mapping, whose base is
    // aligned to its pages).
    const uintptr_t sizes[] = {static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), uintptr_t{2} << 20, uintptr_t{1} << 30};
    for (const uintptr_t align : sizes) {
      const uintptr_t page = addr & ~(align - 1);
      if (page < base) break;
      if (mmap(reinterpret_cast<void*>(page), base + size - page, PROT_READ | PROT_WRITE,
               MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
        g_cut.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
    break;
  }
  // Not a guarded mapping's (or no memory to patch it): as it would have been.
  if ((g_before.sa_flags & SA_SIGINFO) != 0 && g_before.sa_sigaction != nullptr) {
    g_before.sa_sigaction(sig, info, context);
    return;
  }
  if (g_before.sa_handler != SIG_DFL && g_before.sa_handler != SIG_IGN && g_before.sa_handler != nullptr) {
    g_before.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);  // the touch runs again and ends the process, as without the guard
}

void install() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &g_before);
}

}  // namespace

bool guard_mapping(void* base, size_t size) {
  std::call_once(g_installed, install);
  for (Guarded& g : g_table) {
    uintptr_t free = 0;
    if (g.size.load(std::memory_order_relaxed) != 0 || g.base.load(std::memory_order_relaxed) != 0) continue;
    size_t no_size = 0;
    if (!g.size.compare_exchange_strong(no_size, size, std::memory_order_relaxed)) continue;  // claimed by size
    g.base.compare_exchange_strong(free, reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return true;
  }
  return false;
}

void unguard_mapping(void* base) {
  for (Guarded& g : g_table) {
    if (g.base.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(base)) continue;
    g.base.store(0, std::memory_order_release);  // first: the handler no longer matches it
    g.size.store(0, std::memory_order_relaxed);   // then the entry is free again
    return;
  }
}

uint64_t mappings_cut() { return g_cut.load(std::memory_order_relaxed); }

}  // namespace ringfire::ring
