// map_guard_test.cc — a ring whose file is cut under its mapping reads as
// zeros past the cut, and the process goes on; a SIGBUS that is no ring's
// still ends it.
#include "ring/map_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::ring {
namespace {

using testing::fixed_ring;
using testing::ScopedRing;

// A stranger owning a ring that root's daemon served cut it to one page
// while the serve read it: the SIGBUS ended the daemon (review helper-35).
TEST(MapGuard, ARingCutUnderItsMappingReadsAsZerosPastTheCutAndTheProcessGoesOn) {
  ScopedRing ring(fixed_ring(4096, 64));
  RingFile f = ring.open();
  auto p = Producer::attach(ring.open());
  ASSERT_TRUE(p.ok()) << p.status();
  std::byte rec[64];
  std::memset(rec, 0x5A, sizeof(rec));
  for (int i = 0; i < 4096; ++i) p->publish(rec);
  const uint64_t last = 4095;
  ASSERT_EQ(std::to_integer<int>(f.payload(last)[0]), 0x5A);
  const uint64_t cut_before = mappings_cut();
  ASSERT_EQ(truncate(f.path().c_str(), 4096), 0);  // the header's page stays
  EXPECT_EQ(std::to_integer<int>(f.payload(last)[0]), 0);  // a SIGBUS before the guard
  EXPECT_EQ(mappings_cut(), cut_before + 1);
  EXPECT_EQ(f.capacity(), 4096u);  // what the file still has is still the file's
  f.payload(last)[0] = std::byte{1};  // the patch is writable: a writer goes on too
  EXPECT_EQ(mappings_cut(), cut_before + 1);
  uint64_t now_bytes = 0;
  EXPECT_TRUE(f.cut_short(&now_bytes));
  EXPECT_EQ(now_bytes, 4096u);
  // Grown back to its size, the file is whole again, but this mapping
  // still writes the cut part into its own zeroed memory: still cut
  // (review helper-43: a session went on writing where no one read).
  ASSERT_EQ(truncate(f.path().c_str(), static_cast<off_t>(f.mapped_bytes())), 0);
  EXPECT_TRUE(f.cut_short(&now_bytes));
  EXPECT_EQ(now_bytes, f.mapped_bytes());
  EXPECT_FALSE(ring.open().cut_short()) << "a new mapping of the grown file is whole";
}

// A hugetlbfs ring's mapping splits only at its huge pages: the patch
// starts at the faulting huge page.
TEST(MapGuard, AHugetlbfsRingCutUnderItsMappingReadsAsZerosPastTheCut) {
  const char* dir = std::getenv("RINGFIRE_TEST_HUGETLBFS");
  if (dir == nullptr) GTEST_SKIP() << "RINGFIRE_TEST_HUGETLBFS unset (tests/run.sh mounts one)";
  RingOptions o = fixed_ring(65536, 64);  // 4 MiB of slots: three huge pages with the header
  o.name = testing::unique_ring_name("huge-cut");
  o.dir = dir;
  auto made = RingFile::create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  RingFile f = std::move(*made);
  const uint64_t last = 65535;
  f.payload(last)[0] = std::byte{0x5A};
  const uint64_t cut_before = mappings_cut();
  ASSERT_EQ(truncate(f.path().c_str(), 2 << 20), 0);
  EXPECT_EQ(std::to_integer<int>(f.payload(last)[0]), 0);
  EXPECT_EQ(mappings_cut(), cut_before + 1);
  EXPECT_EQ(f.capacity(), 65536u);
  EXPECT_TRUE(RingFile::remove(f.path()).ok());
}

// The guard takes only faults in a ring's mapping: any other SIGBUS ends
// the process as it would have.
TEST(MapGuardDeathTest, ASigbusOutsideAnyRingStillEndsTheProcess) {
  ScopedRing ring(fixed_ring(64, 64));
  RingFile f = ring.open();  // the guard is installed
  EXPECT_EXIT(
      {
        char path[] = "/tmp/rf-map-guard.XXXXXX";
        const int fd = mkstemp(path);
        unlink(path);
        if (fd < 0 || ftruncate(fd, 8192) != 0) _exit(3);
        auto* m = static_cast<volatile char*>(mmap(nullptr, 8192, PROT_READ, MAP_SHARED, fd, 0));
        if (ftruncate(fd, 0) != 0) _exit(4);
        (void)m[4096];
        _exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
  // Sent, not a fault (kill -BUS): it ends the process the first time
  // (the guard swallowed it once: review helper-37).
  EXPECT_EXIT(
      {
        kill(getpid(), SIGBUS);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace ringfire::ring
