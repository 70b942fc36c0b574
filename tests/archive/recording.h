// recording.h — what the archive's tests share: records published into a
// ring, a recorder's options sized for tests (small segments and batches,
// so a few thousand records span several), and a drain that runs a
// recorder until it has taken everything the ring holds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "archive/recorder.h"
#include "gtest/gtest.h"
#include "ring/check_record.h"
#include "ring/producer.h"

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
  for (int idle = 0; idle < 3;) {
    *now += 2'000'000;
    const bool quiet = r.poll(*now) == 0;
    if (quiet) r.settle();
    idle = quiet && r.snapshot().lag == 0 ? idle + 1 : 0;
  }
  ASSERT_TRUE(r.flush().ok());
}

// iota: [from, to).
inline std::vector<uint64_t> iota(uint64_t from, uint64_t to) {
  std::vector<uint64_t> v;
  for (uint64_t s = from; s < to; ++s) v.push_back(s);
  return v;
}

}  // namespace ringfire::archive::testing
