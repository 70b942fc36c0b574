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

// Guarded: one mapping. Writers (guard, unguard) take g_writers; the
// handler takes no lock: it reads an entry under its sequence (odd while a
// writer changes it), so a base and a size it matches are one mapping's,
// never one's base and a reused entry's size (review helper-37).
struct Guarded {
  std::atomic<uint64_t> seq{0};
  std::atomic<uintptr_t> base{0};  // 0: free
  std::atomic<size_t> size{0};
};
Guarded g_table[kMaxGuarded];
std::mutex g_writers;
std::atomic<uint64_t> g_cut{0};
struct sigaction g_before {};  // the handler before ours: signals not ours go there
std::once_flag g_installed;

// write: an entry's new base and size, under its sequence (g_writers held).
void write(Guarded& g, uintptr_t base, size_t size) {
  const uint64_t s = g.seq.load(std::memory_order_relaxed);
  g.seq.store(s + 1, std::memory_order_relaxed);  // odd: the handler skips it
  std::atomic_thread_fence(std::memory_order_release);
  g.base.store(base, std::memory_order_relaxed);
  g.size.store(size, std::memory_order_relaxed);
  g.seq.store(s + 2, std::memory_order_release);  // pairs with the handler's first acquire load
}

// patch: zeroed private memory from the faulting page to the end of the
// mapping [base, base + size) that holds addr. A hugetlbfs ring's mapping
// splits only at its page size: 4 KiB, then 2 MiB, then 1 GiB (each start
// within the mapping, whose base is aligned to its pages).
bool patch(uintptr_t addr, uintptr_t base, size_t size) {
  const uintptr_t sizes[] = {static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), uintptr_t{2} << 20, uintptr_t{1} << 30};
  for (const uintptr_t align : sizes) {
    const uintptr_t page = addr & ~(align - 1);
    if (page < base) return false;
    if (mmap(reinterpret_cast<void*>(page), base + size - page, PROT_READ | PROT_WRITE,
             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
      return true;
    }
  }
  return false;
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  // Only a touch past a file's end (BUS_ADRERR) is a cut; a SIGBUS sent by
  // kill has no faulting address and must do what it did.
  if (info->si_code == BUS_ADRERR) {
    const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
    for (Guarded& g : g_table) {
      const uint64_t s = g.seq.load(std::memory_order_acquire);  // pairs with write()'s release
      if ((s & 1) != 0) continue;
      const uintptr_t base = g.base.load(std::memory_order_relaxed);
      const size_t size = g.size.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (g.seq.load(std::memory_order_relaxed) != s || base == 0 || addr < base || addr - base >= size) continue;
      // The touch runs again on the patch.
      if (patch(addr, base, size)) {
        g_cut.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      break;
    }
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
  if (g_before.sa_handler == SIG_IGN && info->si_code != BUS_ADRERR) return;  // ignored, as before
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);  // blocked in this handler: it ends the process once the handler returns
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
  const std::lock_guard<std::mutex> lock(g_writers);
  for (Guarded& g : g_table) {
    if (g.base.load(std::memory_order_relaxed) != 0) continue;
    write(g, reinterpret_cast<uintptr_t>(base), size);
    return true;
  }
  return false;
}

void unguard_mapping(void* base) {
  const std::lock_guard<std::mutex> lock(g_writers);
  for (Guarded& g : g_table) {
    if (g.base.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(base)) continue;
    write(g, 0, 0);
    return;
  }
}

uint64_t mappings_cut() { return g_cut.load(std::memory_order_relaxed); }

}  // namespace ringfire::ring
