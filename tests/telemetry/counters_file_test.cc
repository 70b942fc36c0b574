// counters_file_test.cc — the shared-memory counters file as `ringfire
// stat` and `top` read it: what a writer sets is what a reader gets (role,
// ring, detail, pid, values), a sweep takes away labels not set since the
// last one, a full file drops new labels, the file goes with its writer, a
// dead process's file is reported dead or removed, junk in the
// directory (short, wrong magic, an absurd capacity) is skipped, a file
// another user owns is not read (by root only while that user's process
// lives), and a writer under a dead one's name
// never truncates the file a reader may have mapped.
#include "telemetry/counters_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pwd.h>
#include <signal.h>

#include <cstddef>
#include <cstring>
#include <utility>
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
  const auto fds = [] { return std::distance(std::filesystem::directory_iterator("/proc/self/fd"), {}); };
  const auto open_before = fds();
  EXPECT_EQ(values_of(read_counters(dir.path())[0])["serve.records"], 43u);
  EXPECT_EQ(fds(), open_before) << "a read left a descriptor open";
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

// This user's file that declares a capacity of 16 Mi entries and is as
// large as that says, but sparse (1 GiB of holes on /dev/shm): skipped
// unread. It was mapped and each entry read: 5.2 s, 1 GB of RSS, and 1 GiB
// of /dev/shm filled as its holes were read (a SIGBUS on a fuller tmpfs;
// helper-40). The real file beside it is read.
TEST(CountersFile, ThisUsersSparseHugeFileIsSkippedUnread) {
  testing::TempDir dir("/dev/shm");
  ASSERT_FALSE(dir.path().empty());
  auto f = CountersFile::create(dir.path(), "serve", "/dev/shm/md", "real");
  ASSERT_TRUE(f.ok()) << f.status();
  f->set("serve.records", 7);
  f->sweep();
  std::string header(sizeof(CountersHeader), '\0');
  {
    const int fd = ::open(f->path().c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pread(fd, header.data(), header.size(), 0), static_cast<ssize_t>(header.size()));
    ::close(fd);
  }
  // The header's capacity (u32 at its offset) set to 16 Mi entries.
  const uint32_t capacity = 16u << 20;
  std::memcpy(header.data() + offsetof(CountersHeader, capacity), &capacity, sizeof(capacity));
  const std::string big = dir.path() + "/ringfire-" + std::to_string(getpid()) + "-big.counters";
  const int fd = ::open(big.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, header.data(), header.size(), 0), static_cast<ssize_t>(header.size()));
  // Valid entries as far as a reader would look: state 1 at the far end.
  CounterEntry e;
  std::memset(static_cast<void*>(&e), 0, sizeof(e));
  e.state.store(1);
  std::memcpy(e.label, "far", 3);
  const off_t last = static_cast<off_t>(sizeof(CountersHeader) + (uint64_t{capacity} - 1) * sizeof(CounterEntry));
  ASSERT_EQ(pwrite(fd, &e, sizeof(e), last), static_cast<ssize_t>(sizeof(e)));
  ::close(fd);
  const auto all = read_counters(dir.path(), /*remove_stale=*/false);
  ASSERT_EQ(all.size(), 1u) << "the sparse 1 GiB file was read";
  EXPECT_EQ(all[0].detail, "real");
  EXPECT_EQ(values_of(all[0])["serve.records"], 7u);
  struct stat st {};
  ASSERT_EQ(stat(big.c_str(), &st), 0);
  EXPECT_LT(st.st_blocks * 512, 1 << 20) << "reading filled the file's holes";
  ::unlink(big.c_str());
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
// user (not root) owns could be truncated while a reader maps it. Skipped
// (root reads one only for a live process of its owner, below: this one
// names root's own process).
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

// An operator's `ringfire top` as root shows the sessions another user
// runs: root copies that user's file (never maps it) while a live process
// of theirs has the pid the file's name and header both give; its text
// comes back printable, its owner named; what that user plants under
// other pids is not shown, nor more than 64 of their files a read; once
// the process is gone nothing of theirs is shown, and root removes none.
TEST(CountersFile, RootReadsAnotherUsersFileWhileTheirProcessLives) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a process as another user";
  testing::TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    close(go[1]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto f = CountersFile::create(dir.path(), "mux", "198.18.0.1:7500", "user's\x1b[2J", 16);
    if (!f.ok()) _exit(1);
    f->set("mux.streams", 11);
    f->set("mux.\x9b" "31m", 1);
    f->sweep();
    // Past the 4,096-entry bound: a whole, valid file of this process.
    auto big = CountersFile::create(dir.path(), "mux", "big", "", 5000, "big");
    if (!big.ok()) _exit(7);
    big->set("mux.streams", 1);
    big->sweep();
    // Plants: its own file under another pid's name; one naming pid 1
    // (root's) in name and header.
    std::string bytes(sizeof(CountersHeader) + 16 * sizeof(CounterEntry), '\0');
    const int own = ::open(f->path().c_str(), O_RDONLY);
    if (own < 0 || pread(own, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) _exit(5);
    close(own);
    auto plant = [&](const std::string& name, const std::string& b) {
      const int fd = ::open((dir.path() + "/" + name).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
      if (fd < 0 || write(fd, b.data(), b.size()) != static_cast<ssize_t>(b.size())) _exit(6);
      close(fd);
    };
    plant("ringfire-1.counters", bytes);
    std::string as_init = bytes;
    const uint32_t init = 1;
    std::memcpy(as_init.data() + offsetof(CountersHeader, pid), &init, sizeof(init));
    plant("ringfire-1-p.counters", as_init);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(3);
    if (read(go[0], &c, 1) != 1) _exit(4);
    // 80 more of its own, each a valid file of this process.
    for (int i = 0; i < 80; ++i) plant("ringfire-" + std::to_string(getpid()) + "-t" + std::to_string(i) + ".counters", bytes);
    if (write(ready[1], &c, 1) != 1) _exit(3);
    if (read(go[0], &c, 1) < 0) _exit(4);  // until the parent closes it
    _exit(0);                              // no destructor: the files stay
  }
  close(ready[1]);
  close(go[0]);
  // Whatever fails below, the child goes (never left blocked on the pipe).
  struct Reap {
    pid_t pid;
    int go;
    ~Reap() {
      if (go >= 0) close(go);
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reap{child, go[1]};
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the child made no counters file";
  auto seen = read_counters(dir.path());
  ASSERT_EQ(seen.size(), 1u) << "root did not show another user's live session, or showed a planted or oversized one";
  EXPECT_EQ(seen[0].pid, static_cast<uint32_t>(child));
  EXPECT_TRUE(seen[0].alive);
  EXPECT_EQ(seen[0].role, "mux");
  EXPECT_EQ(seen[0].uid, 65534u);
  const passwd* pw = getpwuid(65534);
  EXPECT_EQ(seen[0].user, pw != nullptr ? std::string(pw->pw_name) : std::string("65534"));
  EXPECT_EQ(seen[0].detail, "user's?[2J") << "an escape byte reached root's terminal";
  EXPECT_EQ(values_of(seen[0])["mux.streams"], 11u);
  EXPECT_EQ(values_of(seen[0])["mux.?31m"], 1u) << "a label's escape byte reached root's terminal";
  const std::string path = seen[0].path;
  ASSERT_EQ(write(go[1], &c, 1), 1);
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the child did not plant its 80 files";
  EXPECT_EQ(read_counters(dir.path()).size(), 64u) << "one user's files past the bound were copied";
  close(std::exchange(reap.go, -1));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  reap.pid = 0;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(read_counters(dir.path()).empty()) << "a dead process's file, another user's, was shown";
  EXPECT_TRUE(std::filesystem::exists(path)) << "root removed another user's file";
  close(ready[0]);
}

// `stat RING` finds a ring's sessions by name: another user's ring text
// was made printable, so a non-ASCII name is compared so for theirs only.
TEST(CountersFile, AnotherUsersSessionOnANonAsciiRingIsStillItsRings) {
  const std::string ring = "/dev/shm/caf\xc3\xa9";
  ProcessCounters own;
  own.ring = ring;
  EXPECT_TRUE(names_ring(own, ring));
  ProcessCounters theirs;
  theirs.user = "nobody";
  theirs.ring = printable(ring);
  EXPECT_EQ(theirs.ring, "/dev/shm/caf??");
  EXPECT_TRUE(names_ring(theirs, ring));
  EXPECT_FALSE(names_ring(theirs, "/dev/shm/cafe"));
  own.ring = printable(ring);
  EXPECT_FALSE(names_ring(own, ring)) << "this user's text is as written: no loose match";
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
