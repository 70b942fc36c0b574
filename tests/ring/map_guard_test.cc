// map_guard_test.cc — a ring whose file is cut under its mapping reads as
// zeros past the cut, and the process goes on; a SIGBUS that is no ring's
// still ends it.
#include "ring/map_guard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

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
}

}  // namespace
}  // namespace ringfire::ring
