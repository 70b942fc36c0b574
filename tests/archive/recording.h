// recording.h — what the archive's tests share: records published into a
// ring, a recorder's options sized for tests (small segments and batches,
// so a few thousand records span several), and a drain that runs a
// recorder until it has taken everything the ring holds.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "archive/recorder.h"
#include "gtest/gtest.h"
#include "ring/check_record.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"
#include "tests/temp_dir.h"

namespace ringfire::archive::testing {

// publish: n self-checking records (ring/check_record.h), each under its sequence.
inline void publish(ring::Producer& p, uint64_t n) {
  std::vector<std::byte> rec(p.record_size());
  for (uint64_t i = 0; i < n; ++i) {
    ring::fill_record(rec, p.next_seq(), 0);
    p.publish(rec.data());
  }
}

// small_options: 256 KiB segments, an index entry every 8 KiB, 16 KiB batches.
inline RecordOptions small_options(const std::string& dir) {
  RecordOptions o;
  o.dir = dir;
  o.layout.segment_bytes = 256u << 10;
  o.layout.index_interval = 8u << 10;
  o.batch_bytes = 16u << 10;
  o.linger_ns = 1'000'000;
  return o;
}

// drain polls (with a clock it moves itself) until the recorder has taken
// everything the ring holds, then writes the last partial batch.
inline void drain(Recorder& r, uint64_t* now) {
  int rounds = 0;
  for (int idle = 0; idle < 3; ++rounds) {
    ASSERT_LT(rounds, 100'000) << "the recorder never caught up (a disk still full?)";
    *now += 2'000'000;
    const bool quiet = r.poll(*now) == 0;
    if (quiet) r.settle();
    idle = quiet && r.snapshot().lag == 0 ? idle + 1 : 0;
  }
  ASSERT_TRUE(r.flush().ok());
}

// Recorded: a fixed ring of `capacity` 64-byte slots, `n` records
// published into it and recorded into a fresh archive (small_options),
// drained. ok() false (a failure added) if any of it could not be made.
struct Recorded {
  Recorded(uint64_t capacity, uint64_t n)
      : ring(ring::testing::fixed_ring(capacity, 64)), p(ring::Producer::attach(ring.open())) {
    if (!p.ok()) {
      ADD_FAILURE() << p.status();
      return;
    }
    publish(*p, n);
    rec = Recorder::open(ring.open(), small_options(tmp.archive()));
    if (!rec.ok()) {
      ADD_FAILURE() << rec.status();
      return;
    }
    drain(**rec, &now);
  }
  bool ok() const { return p.ok() && rec.ok(); }

  ring::testing::ScopedRing ring;
  ringfire::testing::TempDir tmp;
  absl::StatusOr<ring::Producer> p;
  absl::StatusOr<std::unique_ptr<Recorder>> rec = absl::UnknownError("not made");
  uint64_t now = 0;  // the clock drain() moves
};

// flip_byte: the byte at `offset` of the file at `path`, one bit flipped.
inline void flip_byte(const std::string& path, uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t b = 0;
  const bool read = pread(fd, &b, 1, static_cast<off_t>(offset)) == 1;
  b ^= 0x01;
  const bool written = read && pwrite(fd, &b, 1, static_cast<off_t>(offset)) == 1;
  ::close(fd);
  ASSERT_TRUE(written) << path << " at " << offset;
}

// iota: [from, to).
inline std::vector<uint64_t> iota(uint64_t from, uint64_t to) {
  std::vector<uint64_t> v;
  for (uint64_t s = from; s < to; ++s) v.push_back(s);
  return v;
}

}  // namespace ringfire::archive::testing
