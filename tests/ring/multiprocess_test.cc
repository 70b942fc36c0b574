// multiprocess_test.cc — the ring across processes: a writer flat out with
// two readers in other processes lapping constantly, every delivered record
// verified, losses consistent with sequence arithmetic; and a writer killed
// with SIGKILL mid-stream leaves nothing torn and can be restarted.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ring/blob.h"
#include "ring/check_record.h"
#include "ring/consumer.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::ring {
namespace {

using testing::ScopedRing;

// ReaderReport is what a reader process sends back through its pipe.
struct ReaderReport {
  uint64_t read = 0;
  uint64_t lost = 0;
  uint64_t torn = 0;
  uint64_t misplaced = 0;
  uint64_t out_of_order = 0;
  uint64_t last_seq = 0;
  uint64_t ok = 0;
};

// run_reader reads from seq 0 until it has seen `total` sequences (read or
// lost), verifying each record; runs in a child process.
ReaderReport run_reader(const std::string& ring, uint64_t total, bool blob) {
  ReaderReport rep;
  auto file = RingFile::open(ring);
  if (!file.ok()) return rep;
  std::vector<std::byte> buf(1 << 16);
  auto account = [&](const ReadResult& r, uint32_t len) {
    rep.lost += r.lost;
    if (!r.ok) return;
    if (rep.read + rep.torn + rep.misplaced > 0 && r.seq <= rep.last_seq) ++rep.out_of_order;
    rep.last_seq = r.seq;
    switch (check_record(buf.data(), len, r.seq)) {
      case CheckVerdict::kOk: ++rep.read; break;
      case CheckVerdict::kWrongSeq: ++rep.misplaced; break;
      default: ++rep.torn; break;
    }
  };
  auto seen = [&] { return rep.read + rep.torn + rep.misplaced + rep.lost; };
  if (blob) {
    auto c = BlobConsumer::attach(std::move(*file), StartPosition::at(0), "mp-reader");
    if (!c.ok()) return rep;
    while (seen() < total) {
      uint32_t len = 0;
      const ReadResult r = c->try_read(buf.data(), &len);
      account(r, len);
    }
  } else {
    auto c = Consumer::attach(std::move(*file), StartPosition::at(0), "mp-reader");
    if (!c.ok()) return rep;
    while (seen() < total) account(c->try_read(buf.data()), c->record_size());
  }
  rep.ok = 1;
  return rep;
}

struct Child {
  pid_t pid;
  int fd;
};

Child spawn_reader(const std::string& ring, uint64_t total, bool blob) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const ReaderReport rep = run_reader(ring, total, blob);
    (void)!write(fds[1], &rep, sizeof(rep));
    _exit(0);
  }
  close(fds[1]);
  return Child{pid, fds[0]};
}

ReaderReport collect(const Child& c) {
  ReaderReport rep;
  EXPECT_EQ(read(c.fd, &rep, sizeof(rep)), static_cast<ssize_t>(sizeof(rep)));
  close(c.fd);
  int status = 0;
  waitpid(c.pid, &status, 0);
  return rep;
}

void publish_fixed(const std::string& ring, uint64_t total) {
  auto p = Producer::attach(*RingFile::open(ring));
  ASSERT_TRUE(p.ok());
  const size_t len = p->record_size();
  for (uint64_t i = 0; i < total; ++i) {
    const uint64_t seq = p->next_seq();
    fill_record({p->claim(), len}, seq, 0);
    p->commit();
  }
}

void expect_consistent(const ReaderReport& rep, uint64_t total) {
  EXPECT_EQ(rep.ok, 1u);
  EXPECT_EQ(rep.torn, 0u);
  EXPECT_EQ(rep.misplaced, 0u);
  EXPECT_EQ(rep.out_of_order, 0u);
  EXPECT_EQ(rep.read + rep.lost, total);
  EXPECT_EQ(rep.last_seq, total - 1);
}

TEST(MultiProcess, TwoLappedReadersVerifyEveryRecordTheyGet) {
  // 64 slots against a writer publishing flat out: the readers are lapped
  // over and over, and every record they do return must be whole.
  ScopedRing r(testing::fixed_ring(64, 128));
  constexpr uint64_t kTotal = 3'000'000;
  Child a = spawn_reader(r.name(), kTotal, false);
  Child b = spawn_reader(r.name(), kTotal, false);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  publish_fixed(r.name(), kTotal);
  const ReaderReport ra = collect(a);
  const ReaderReport rb = collect(b);
  expect_consistent(ra, kTotal);
  expect_consistent(rb, kTotal);
  std::printf("reader a: %llu read, %llu lost; reader b: %llu read, %llu lost\n",
              static_cast<unsigned long long>(ra.read), static_cast<unsigned long long>(ra.lost),
              static_cast<unsigned long long>(rb.read), static_cast<unsigned long long>(rb.lost));
}

TEST(MultiProcess, BlobReadersInOtherProcessesNeverSeeCorruptedBlobs) {
  ScopedRing r(testing::blob_ring(256, 1 << 14));
  constexpr uint64_t kTotal = 500'000;
  Child a = spawn_reader(r.name(), kTotal, true);
  Child b = spawn_reader(r.name(), kTotal, true);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto p = BlobProducer::attach(*RingFile::open(r.name()));
  ASSERT_TRUE(p.ok());
  for (uint64_t seq = 0; seq < kTotal; ++seq) {
    const uint32_t len = blob_length_for(seq, 24, 3000);
    fill_record(p->reserve(len), seq, 0);
    p->commit(len);
  }
  expect_consistent(collect(a), kTotal);
  expect_consistent(collect(b), kTotal);
}

TEST(MultiProcess, AWriterKilledMidStreamLeavesNothingTornAndCanBeRestarted) {
  ScopedRing r(testing::fixed_ring(1024, 200));
  const pid_t writer = fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {
    publish_fixed(r.name(), UINT64_MAX);  // until killed
    _exit(0);
  }
  RingFile view = r.open();
  while (view.header().write_seq.load() < 100000) std::this_thread::yield();
  ASSERT_EQ(kill(writer, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(writer, &status, 0), writer);
  ASSERT_TRUE(WIFSIGNALED(status));

  // Everything retained reads back whole, up to the last announced record.
  const uint64_t killed_at = view.header().write_seq.load();
  auto c = Consumer::attach(r.open(), StartPosition::oldest());
  ASSERT_TRUE(c.ok());
  std::vector<std::byte> buf(200);
  uint64_t read = 0;
  for (ReadResult res; (res = c->try_read(buf.data())).ok;) {
    ASSERT_EQ(check_record(buf.data(), buf.size(), res.seq), CheckVerdict::kOk) << res.seq;
    ++read;
  }
  EXPECT_GE(read, 1023u);
  EXPECT_GE(c->cursor(), killed_at);

  // The lock died with the writer: a new one continues the sequence and the
  // same reader carries on without loss or duplicates.
  const uint64_t resume_at = c->cursor();
  publish_fixed(r.name(), 500);
  uint64_t expect = resume_at;
  for (ReadResult res; (res = c->try_read(buf.data())).ok; ++expect) {
    ASSERT_EQ(res.seq, expect);
    ASSERT_EQ(check_record(buf.data(), buf.size(), res.seq), CheckVerdict::kOk);
  }
  EXPECT_EQ(expect, view.header().write_seq.load());
  EXPECT_EQ(expect, resume_at + 500);
}

}  // namespace
}  // namespace ringfire::ring
