// ring_file_test.cc — creating and opening ring files, and every way an open
// can be refused with a message that names the problem.
#include "ring/ring_file.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::ring {
namespace {

using ::testing::HasSubstr;
using testing::ScopedRing;

TEST(RingFile, CreateThenOpenKeepsTheGeometry) {
  RingOptions o = testing::fixed_ring(1024, 100);
  o.schema_signature = 0xfeed;
  o.registry_size = 7;
  ScopedRing r(o);
  RingFile f = r.open();
  EXPECT_EQ(f.capacity(), 1024u);
  EXPECT_EQ(f.slot_size(), 100u);
  EXPECT_EQ(f.header().slot_stride, 128u);
  EXPECT_EQ(f.header().schema_signature, 0xfeedu);
  EXPECT_EQ(f.header().registry_size, 7u);
  EXPECT_EQ(f.header().write_seq.load(), 0u);
  EXPECT_FALSE(f.sparse());
  EXPECT_FALSE(f.blob());
  EXPECT_EQ(f.header().slots_offset % kPage, 0u);
}

// Every page of a ring is allocated when it is created (not on the first
// lap, a page at a time): a ring that does not fit fails at create.
TEST(RingFile, CreateAllocatesEveryPage) {
  ScopedRing r(testing::fixed_ring(1 << 16, 64));
  RingFile f = r.open();
  struct stat st {};
  ASSERT_EQ(stat(f.path().c_str(), &st), 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, f.header().file_size) << "the ring file is sparse";
}

// warm reads its way through the mapping a piece at a time, says where it
// stopped (clipped to the mapping at the end), and changes no byte.
TEST(RingFile, WarmGoesAPieceAtATimeAndWritesNothing) {
  ScopedRing r(testing::fixed_ring(1 << 12, 64));
  RingFile f = r.open();
  const uint64_t size = f.mapped_bytes();
  ASSERT_GE(size, f.header().file_size);
  std::vector<std::byte> before(f.arena() - reinterpret_cast<std::byte*>(&f.header()) + 0);
  std::memcpy(before.data(), &f.header(), before.size());
  uint64_t at = 0;
  int pieces = 0;
  while (at < size) {
    const uint64_t next = f.warm(at, 64 * 1024);
    ASSERT_GT(next, at);
    ASSERT_LE(next - at, 64u * 1024);
    at = next;
    ++pieces;
  }
  EXPECT_EQ(at, size);
  EXPECT_EQ(pieces, static_cast<int>((size + 64 * 1024 - 1) / (64 * 1024)));
  EXPECT_EQ(f.warm(size, 4096), size) << "nothing past the mapping";
  EXPECT_EQ(std::memcmp(before.data(), &f.header(), before.size()), 0);
}

// A lazy ring (a stream mux channel's) takes its pages as they are
// written: created and opened, its file holds only the header's; a write
// takes what it touches.
TEST(RingFile, ALazyRingTakesItsPagesAsTheyAreWritten) {
  ScopedRing r(testing::fixed_ring(1 << 16, 64, kFlagLazy));
  RingFile f = r.open();
  auto blocks = [&] {
    struct stat st {};
    EXPECT_EQ(stat(f.path().c_str(), &st), 0);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  };
  EXPECT_LE(blocks(), 64u << 10) << "a lazy ring was allocated whole (" << f.header().file_size << " bytes)";
  EXPECT_NE(f.header().flags & kFlagLazy, 0u);
  auto again = RingFile::open(f.path());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_LE(blocks(), 64u << 10) << "opening it allocated it";
  auto p = Producer::attach(std::move(*again));
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::byte> rec(64, std::byte{7});
  for (int i = 0; i < 1000; ++i) p->publish(rec.data());
  EXPECT_GE(blocks(), 1000u * 64) << "the records' pages";
  EXPECT_LE(blocks(), (64u << 10) + 1000u * 64 + (16u << 10));
}

// A lazy ring is reserved whole by its owner later: reserve() allocates
// every page; on a filesystem without the room it says so (no SIGBUS at a
// later write), and one that would not fit even now is refused at create.
TEST(RingFile, ALazyRingIsReservedLaterAndAFullFilesystemIsAnErrorNotASigbus) {
  char tmpl[] = "/tmp/rf-lazy.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=12m") != 0) {
    rmdir(dir.c_str());
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  struct Unmount {
    std::string d;
    ~Unmount() {
      umount2(d.c_str(), MNT_DETACH);
      rmdir(d.c_str());
    }
  } unmount{dir};
  auto make = [&](const std::string& name) {
    RingOptions o = testing::fixed_ring(1 << 16, 64, kFlagLazy);  // ~8.4 MB
    o.name = name;
    o.dir = dir;
    return RingFile::create(o);
  };
  auto a = make("a");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->reserve().ok());
  struct stat st {};
  ASSERT_EQ(stat(a->path().c_str(), &st), 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, a->header().file_size) << "reserve left it sparse";
  // A second one fits nowhere: refused at create, as a ring that is not lazy.
  auto b = make("b");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("no room for a ring of"));
  // Made while there was room, reserved once there is none: an error.
  ASSERT_TRUE(RingFile::remove(a->path()).ok());
  a = absl::InternalError("closed");
  auto c = make("c");
  ASSERT_TRUE(c.ok()) << c.status();
  auto d = make("d");  // fits the free space (c is still sparse) ...
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(c->reserve().ok());
  const absl::Status full = d->reserve();  // ... but not beside c reserved
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
}

TEST(RingFile, CreateRefusesAnExistingNameUnlessReplacing) {
  ScopedRing r(testing::fixed_ring(64, 64));
  RingOptions o = testing::fixed_ring(64, 64);
  o.name = r.name();
  auto again = RingFile::create(o);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("already exists"));
  o.replace = true;
  o.capacity = 128;
  ASSERT_TRUE(RingFile::create(o).ok());
  EXPECT_EQ(r.open().capacity(), 128u);
}

TEST(RingFile, BadOptionsSayWhatToChange) {
  RingOptions o = testing::fixed_ring(1000, 64);
  o.name = testing::unique_ring_name("bad");
  auto f = RingFile::create(o);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("not a power of two"));

  o = testing::blob_ring(64, 3000);
  o.name = testing::unique_ring_name("bad");
  f = RingFile::create(o);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("arena size"));
}

TEST(RingFile, OpeningAMissingRingIsNotFound) {
  auto f = RingFile::open(testing::unique_ring_name("missing"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

TEST(RingFile, WrongSchemaSlotSizeAndKindAreNamed) {
  RingOptions o = testing::fixed_ring(64, 64);
  o.schema_signature = 0x1111;
  ScopedRing r(o);
  auto f = RingFile::open(r.name(), RingExpectation{64, 0x2222, std::nullopt});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(f.status().message(), HasSubstr("schema signature: ring has 0x1111, expected 0x2222"));

  f = RingFile::open(r.name(), RingExpectation{32, std::nullopt, true});
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("slot size: ring has 64 bytes, expected 32"));
  EXPECT_THAT(f.status().message(), HasSubstr("expected a blob ring"));

  EXPECT_TRUE(RingFile::open(r.name(), RingExpectation{64, 0x1111, false}).ok());
}

// corrupt flips one byte of the ring file at `offset`.
void corrupt(const std::string& name, off_t offset) {
  const int fd = ::open(ring_path(name).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char b = 0;
  ASSERT_EQ(pread(fd, &b, 1, offset), 1);
  b ^= 0x5a;
  ASSERT_EQ(pwrite(fd, &b, 1, offset), 1);
  close(fd);
}

TEST(RingFile, ACorruptHeaderIsRefused) {
  ScopedRing r(testing::fixed_ring(64, 64));
  corrupt(r.name(), offsetof(RingHeader, capacity));
  auto f = RingFile::open(r.name());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(f.status().message(), HasSubstr("corrupt"));
}

TEST(RingFile, ABadMagicIsNotARing) {
  ScopedRing r(testing::fixed_ring(64, 64));
  corrupt(r.name(), 0);
  auto f = RingFile::open(r.name());
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("not a ringfire ring"));
}

TEST(RingFile, ATruncatedFileIsRefused) {
  ScopedRing r(testing::fixed_ring(1024, 64));
  ASSERT_EQ(truncate(ring_path(r.name()).c_str(), 3 * kPage), 0);
  auto f = RingFile::open(r.name());
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("truncated"));

  ASSERT_EQ(truncate(ring_path(r.name()).c_str(), 100), 0);
  f = RingFile::open(r.name());
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("header alone needs"));
}

TEST(RingFile, ValidateHeaderRejectsInconsistentGeometryEvenWithAGoodChecksum) {
  ScopedRing r(testing::fixed_ring(64, 64));
  RingFile f = r.open();
  RingHeader h;
  std::memcpy(static_cast<void*>(&h), &f.header(), kChecksummedBytes);
  h.slots_offset = h.file_size;  // slots past the end of the file
  h.header_checksum = header_checksum(h);
  const absl::Status s = validate_header(h, h.file_size);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("offsets"));
}

TEST(RingFile, ASecondWriterIsRefusedAndTheLockDiesWithTheFirst) {
  ScopedRing r(testing::fixed_ring(64, 64));
  {
    auto first = Producer::attach(r.open());
    ASSERT_TRUE(first.ok()) << first.status();
    auto second = Producer::attach(r.open());
    ASSERT_FALSE(second.ok());
    EXPECT_THAT(second.status().message(), HasSubstr("already has a writer"));
  }
  EXPECT_TRUE(Producer::attach(r.open()).ok());
}

// mappings_of counts this process's mappings of `path` (/proc/self/maps).
int mappings_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0) ++n;
  }
  return n;
}

// share() is a handle on the same mapping: one mmap however many readers a
// process has of a ring, alive until its last handle closes.
TEST(RingFile, ASharedHandleIsTheSameMappingAndOutlivesTheFirst) {
  ScopedRing r(testing::fixed_ring(1024, 64));
  std::optional<RingFile> first(r.open());
  const std::string path = first->path();
  ASSERT_EQ(mappings_of(path), 1);
  RingFile second = first->share();
  RingFile third = second.share();
  EXPECT_EQ(mappings_of(path), 1);
  EXPECT_EQ(second.payload(5), first->payload(5));
  first.reset();
  EXPECT_EQ(mappings_of(path), 1) << "closing one handle unmapped the others'";
  third.header().write_seq.store(42);
  EXPECT_EQ(second.header().write_seq.load(), 42u);
  {
    RingFile moved = std::move(third);
    EXPECT_EQ(moved.capacity(), 1024u);
  }
  EXPECT_EQ(mappings_of(path), 1);
  second = r.open();  // the last handle of the old mapping closes here
  EXPECT_EQ(mappings_of(path), 1);
  EXPECT_EQ(second.header().write_seq.load(), 42u);
}

// The writer lock taken through one handle is held while any handle of
// its mapping is open.
TEST(RingFile, TheWriterLockLastsAsLongAsAnyShareOfItsMapping) {
  ScopedRing r(testing::fixed_ring(64, 64));
  std::optional<RingFile> kept;
  {
    auto writer = Producer::attach(r.open());
    ASSERT_TRUE(writer.ok()) << writer.status();
    kept.emplace(writer->file().share());
  }
  auto second = Producer::attach(r.open());
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("already has a writer"));
  kept.reset();
  EXPECT_TRUE(Producer::attach(r.open()).ok());
}

}  // namespace
}  // namespace ringfire::ring

namespace ringfire::ring {
namespace {

TEST(RingFile, CreatesOnHugetlbfsWhenAsked) {
  const char* dir = std::getenv("RINGFIRE_TEST_HUGETLBFS");
  if (dir == nullptr) GTEST_SKIP() << "RINGFIRE_TEST_HUGETLBFS unset (tests/run.sh mounts one)";
  RingOptions o = testing::fixed_ring(4096, 64);
  o.name = testing::unique_ring_name("huge");
  o.dir = dir;
  auto f = RingFile::create(o);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->header().file_size % (2u << 20), 0u);  // sized to whole huge pages
  auto p = Producer::attach(std::move(*f));
  ASSERT_TRUE(p.ok());
  std::byte rec[64] = {std::byte{7}};
  p->publish(rec);
  auto again = RingFile::open(ring_path(o.name, dir));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->header().write_seq.load(), 1u);
  EXPECT_TRUE(RingFile::remove(ring_path(o.name, dir)).ok());
}

}  // namespace
}  // namespace ringfire::ring
