// map_guard.cc — see map_guard.h.
#include "ring/map_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <mutex>  // call_once

namespace ringfire::ring {
namespace {

constexpr size_t kMaxGuarded = 4096;

// Guarded: one mapping and its file. No lock anywhere: a writer (guard,
// unguard) claims an entry by making its sequence odd (a compare-exchange),
// writes, and makes it even again; the handler reads an entry under its
// sequence, so what it matches is one mapping's, never one's base and a
// reused entry's size (review helper-37). No lock also means nothing a
// fork() could copy held (review helper-38).
struct Guarded {
  std::atomic<uint64_t> seq{0};
  std::atomic<uintptr_t> base{0};  // 0: free
  std::atomic<size_t> size{0};
  std::atomic<int> fd{-1};  // the mapped file: the handler asks its size
  std::atomic<bool> patched{false};  // the handler patched this mapping: its owner ends what reads it
};
Guarded g_table[kMaxGuarded];
std::atomic<uint64_t> g_cut{0};
struct sigaction g_before {};  // the handler before ours: signals not ours go there
std::once_flag g_installed;

// claim: the entry is this writer's (its sequence made odd from `s`, even).
bool claim(Guarded& g, uint64_t s) {
  if ((s & 1) != 0) return false;
  if (!g.seq.compare_exchange_strong(s, s + 1, std::memory_order_relaxed)) return false;
  std::atomic_thread_fence(std::memory_order_release);  // odd before the fields change
  return true;
}

// write: a claimed entry's new fields, then its sequence even again.
void write(Guarded& g, uint64_t s, uintptr_t base, size_t size, int fd) {
  g.base.store(base, std::memory_order_relaxed);
  g.size.store(size, std::memory_order_relaxed);
  g.fd.store(fd, std::memory_order_relaxed);
  g.patched.store(false, std::memory_order_relaxed);
  g.seq.store(s + 2, std::memory_order_release);  // pairs with the handler's first acquire load
}

// past_end: addr lies past the end of the file behind [base, ...), rounded
// up to a page. A fault inside the file (a hole its filesystem cannot fill:
// a full tmpfs, an empty huge page pool) is not a cut: patching it would
// hide the writes that follow (review helper-38). fstat is signal-safe.
bool past_end(uintptr_t addr, uintptr_t base, int fd) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return false;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t end = (static_cast<uintptr_t>(st.st_size) + page - 1) & ~(page - 1);
  return addr - base >= end;
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
      const int fd = g.fd.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (g.seq.load(std::memory_order_relaxed) != s || base == 0 || addr < base || addr - base >= size) continue;
      // The touch runs again on the patch.
      if (past_end(addr, base, fd) && patch(addr, base, size)) {
        g.patched.store(true, std::memory_order_relaxed);
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
  if (g_before.sa_handler == SIG_IGN && info->si_code <= 0) return;  // sent (SI_USER, SI_TKILL, ...): ignored, as before
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

bool guard_mapping(void* base, size_t size, int fd) {
  std::call_once(g_installed, install);
  for (Guarded& g : g_table) {
    const uint64_t s = g.seq.load(std::memory_order_acquire);  // before base: pairs with write()'s release
    if (g.base.load(std::memory_order_relaxed) != 0 || !claim(g, s)) continue;
    if (g.base.load(std::memory_order_relaxed) != 0) {  // taken between the look and the claim
      g.seq.store(s + 2, std::memory_order_release);
      continue;
    }
    write(g, s, reinterpret_cast<uintptr_t>(base), size, fd);
    return true;
  }
  return false;
}

void unguard_mapping(void* base) {
  for (Guarded& g : g_table) {
    if (g.base.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(base)) continue;
    // Its guard's pair: only this mapping's owner frees it, and a claim
    // skips an entry in use, so the claim cannot fail but by a spurious
    // compare; retry it.
    uint64_t s;
    do {
      s = g.seq.load(std::memory_order_acquire);
    } while (!claim(g, s));
    write(g, s, 0, 0, -1);
    return;
  }
}

uint64_t mappings_cut() { return g_cut.load(std::memory_order_relaxed); }

bool mapping_patched(const void* base) {
  for (const Guarded& g : g_table) {
    // The mapping's owner asks: its entry cannot be freed or reused meanwhile.
    if (g.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) {
      return g.patched.load(std::memory_order_relaxed);
    }
  }
  return false;
}

}  // namespace ringfire::ring
