// counters_file_test.cc — the shared-memory counters file as `ringfire
// stat` and `top` read it: what a writer sets is what a reader gets (role,
// ring, detail, pid, values), a sweep takes away labels not set since the
// last one, a full file drops new labels, the file goes with its writer, a
// dead process's file is reported dead or removed, junk in the
// directory (short, wrong magic, an absurd capacity) is skipped, a file
// another user owns is not read, and a writer under a dead one's name
// never truncates the file a reader may have mapped.
#include "telemetry/counters_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace ringfire::telemetry {
namespace {

std::map<std::string, uint64_t> values_of(const ProcessCounters& p) {
  return std::map<std::string, uint64_t>(p.counters.begin(), p.counters.end());
}

TEST(CountersFile, WhatTheWriterSetsIsWhatAReaderGets) {
  testing::TempDir dir;
  auto f = CountersFile::create(dir.path(), "serve", "/dev/shm/md", "198.18.0.1:7400 kernel");
  ASSERT_TRUE(f.ok()) << f.status();
  f->set("serve.records", 42);
  f->set("serve.mirrors", 3);
  f->sweep();
  const auto all = read_counters(dir.path());
  ASSERT_EQ(all.size(), 1u);
  const ProcessCounters& p = all[0];
  EXPECT_EQ(p.path, f->path());
  EXPECT_EQ(p.pid, static_cast<uint32_t>(getpid()));
  EXPECT_TRUE(p.alive);
  EXPECT_EQ(p.role, "serve");
  EXPECT_EQ(p.ring, "/dev/shm/md");
  EXPECT_EQ(p.detail, "198.18.0.1:7400 kernel");
  EXPECT_GT(p.updated_ns, 0u);
  EXPECT_EQ(values_of(p), (std::map<std::string, uint64_t>{{"serve.mirrors", 3}, {"serve.records", 42}}));
  f->set("serve.records", 43);  // a value moves in place
  f->set("serve.mirrors", 3);
  f->sweep();
  EXPECT_EQ(values_of(read_counters(dir.path())[0])["serve.records"], 43u);
}

TEST(CountersFile, ASweepTakesAwayWhatWasNotSetSinceTheLastOne) {
  testing::TempDir dir;
  auto f = CountersFile::create(dir.path(), "mirror", "r", "d");
  ASSERT_TRUE(f.ok()) << f.status();
  f->set("mirror.198.18.0.2:1.lag", 7);
  f->set("mirror.records", 1);
  f->sweep();
  f->set("mirror.records", 2);  // the mirror at .2 went
  f->sweep();
  EXPECT_EQ(values_of(read_counters(dir.path())[0]), (std::map<std::string, uint64_t>{{"mirror.records", 2}}));
  f->set("mirror.records", 3);
  f->set("mirror.198.18.0.2:1.lag", 9);  // back: its entry made again
  f->sweep();
  EXPECT_EQ(values_of(read_counters(dir.path())[0]),
            (std::map<std::string, uint64_t>{{"mirror.198.18.0.2:1.lag", 9}, {"mirror.records", 3}}));
}

TEST(CountersFile, AFullFileDropsNewLabelsAndALongLabelIsCut) {
  testing::TempDir dir;
  auto f = CountersFile::create(dir.path(), "serve", "r", "d", /*capacity=*/4);
  ASSERT_TRUE(f.ok()) << f.status();
  for (int i = 0; i < 6; ++i) f->set("c" + std::to_string(i), i);
  f->sweep();
  EXPECT_EQ(values_of(read_counters(dir.path())[0]),
            (std::map<std::string, uint64_t>{{"c0", 0}, {"c1", 1}, {"c2", 2}, {"c3", 3}}));
  auto g = CountersFile::create(dir.path(), "serve", "r", "d", 4, "long");
  ASSERT_TRUE(g.ok()) << g.status();
  g->set(std::string(100, 'x'), 5);
  g->sweep();
  bool found = false;
  for (const ProcessCounters& p : read_counters(dir.path())) {
    if (p.path != g->path()) continue;
    found = true;
    ASSERT_EQ(p.counters.size(), 1u);
    EXPECT_EQ(p.counters[0].first, std::string(kLabelBytes - 1, 'x'));  // NUL-terminated within its 48 bytes
  }
  EXPECT_TRUE(found);
}

TEST(CountersFile, TheFileGoesWithItsWriter) {
  testing::TempDir dir;
  std::string path;
  {
    auto f = CountersFile::create(dir.path(), "serve", "r", "d");
    ASSERT_TRUE(f.ok()) << f.status();
    path = f->path();
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(read_counters(dir.path()).empty());
}

// A process killed before it could remove its file (here: a child that
// leaves without running destructors) is dead to a reader, and its file
// is removed when the reader asks for that.
TEST(CountersFile, ADeadProcesssFileIsReportedDeadOrRemoved) {
  testing::TempDir dir;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto f = CountersFile::create(dir.path(), "mirror", "r", "d");
    if (f.ok()) {
      f->set("mirror.records", 5);
      f->sweep();
    }
    _exit(f.ok() ? 0 : 1);  // no destructor: the file stays, as after a kill -9
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto kept = read_counters(dir.path(), /*remove_stale=*/false);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].pid, static_cast<uint32_t>(child));
  EXPECT_FALSE(kept[0].alive);
  EXPECT_EQ(values_of(kept[0])["mirror.records"], 5u);
  EXPECT_TRUE(read_counters(dir.path()).empty());  // removed by this read
  EXPECT_FALSE(std::filesystem::exists(kept[0].path));
}

// Anything else in the directory that looks like a counters file by name
// is read only as far as its header vouches for, or skipped: short, no
// magic, an absurd capacity, a FIFO, a link, a pid of 0.
TEST(CountersFile, JunkInTheDirectoryIsSkipped) {
  testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& bytes) {
    const int fd = ::open((dir.path() + "/" + name).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  };
  write("ringfire-1111111.counters", "short");
  write("ringfire-2222222.counters", std::string(4096, 'j'));  // no magic
  // The right magic and version, and a capacity far past the file's size.
  std::string big(512, '\0');
  const uint64_t magic = kCountersMagic;
  const uint32_t version = kCountersVersion, pid = static_cast<uint32_t>(getpid()), capacity = 0xFFFFFFFF;
  std::memcpy(big.data(), &magic, 8);
  std::memcpy(big.data() + 8, &version, 4);
  std::memcpy(big.data() + 12, &pid, 4);
  std::memcpy(big.data() + 16, &capacity, 4);
  write("ringfire-3333333.counters", big);
  // A FIFO and a link under a counters file's name: skipped, never waited
  // on (a FIFO's open would block) nor followed.
  ASSERT_EQ(mkfifo((dir.path() + "/ringfire-4444444.counters").c_str(), 0600), 0);
  ASSERT_EQ(symlink("/dev/zero", (dir.path() + "/ringfire-5555555.counters").c_str()), 0);
  // A well-formed file whose pid is 0 (kill(0, 0) asks about a group): dead.
  std::string zero(sizeof(CountersHeader), '\0');
  const uint32_t no_pid = 0, no_capacity = 0;
  std::memcpy(zero.data(), &magic, 8);
  std::memcpy(zero.data() + 8, &version, 4);
  std::memcpy(zero.data() + 12, &no_pid, 4);
  std::memcpy(zero.data() + 16, &no_capacity, 4);
  write("ringfire-6666666.counters", zero);
  auto kept = read_counters(dir.path(), /*remove_stale=*/false);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].pid, 0u);
  EXPECT_FALSE(kept[0].alive);
  EXPECT_TRUE(read_counters(dir.path()).empty());  // and removed as stale
  auto f = CountersFile::create(dir.path(), "serve", "r", "d");
  ASSERT_TRUE(f.ok()) << f.status();
  f->set("serve.records", 1);
  f->sweep();
  const auto all = read_counters(dir.path());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].path, f->path());
}

// Anyone can write in /dev/shm: a file under a counters name that another
// user (not root) owns could be truncated while a reader maps it. Skipped.
TEST(CountersFile, AFileAnotherUserOwnsIsNotRead) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file away";
  testing::TempDir dir;
  auto f = CountersFile::create(dir.path(), "serve", "/dev/shm/md", "", 16, "a");
  ASSERT_TRUE(f.ok()) << f.status();
  f->set("serve.records", 7);
  f->sweep();
  ASSERT_EQ(read_counters(dir.path(), false).size(), 1u);
  ASSERT_EQ(chown(f->path().c_str(), 65534, 65534), 0);
  EXPECT_TRUE(read_counters(dir.path(), false).empty()) << "a stranger's file was read";
  ASSERT_EQ(chown(f->path().c_str(), 0, 0), 0);
  EXPECT_EQ(read_counters(dir.path(), false).size(), 1u);
}

// A reused pid: the new writer of the same name makes a new file and
// renames it over the old one. The old file (which a reader may have
// mapped) keeps its size; the old writer's end leaves the new file alone.
TEST(CountersFile, AWriterUnderADeadOnesNameNeverTruncatesItsFile) {
  testing::TempDir dir;
  auto old = std::make_unique<CountersFile>(*CountersFile::create(dir.path(), "serve", "r", "", 16, "same"));
  old->set("serve.records", 1);
  old->sweep();
  const int held = ::open(old->path().c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  struct stat before {};
  ASSERT_EQ(fstat(held, &before), 0);
  auto next = CountersFile::create(dir.path(), "serve", "r", "", 16, "same");
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ(next->path(), old->path());
  next->set("serve.records", 2);
  next->sweep();
  struct stat after {};
  ASSERT_EQ(fstat(held, &after), 0);
  EXPECT_EQ(after.st_size, before.st_size) << "the old file was truncated under its readers";
  struct stat named {};
  ASSERT_EQ(stat(next->path().c_str(), &named), 0);
  EXPECT_NE(named.st_ino, before.st_ino);
  ::close(held);
  old.reset();  // the old writer ends: the name is the new one's now
  const auto all = read_counters(dir.path(), false);
  ASSERT_EQ(all.size(), 1u) << "the old writer removed the new one's file";
  EXPECT_EQ(values_of(all[0]).at("serve.records"), 2u);
}

}  // namespace
}  // namespace ringfire::telemetry
