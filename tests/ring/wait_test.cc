// wait_test.cc — a parked reader is never left asleep by a publish that
// races its parking (the writer's store of write_seq against its load of
// the sleepers flag, the reader's arming against its check of write_seq:
// the store-buffer race both sides must fence against).
#include "ring/wait.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::ring {
namespace {

using testing::ScopedRing;

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % static_cast<int>(std::thread::hardware_concurrency()), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void spin(uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) __builtin_ia32_pause();
}

// A round: the reader says it is about to park for `seen`, waits a random
// moment and parks; the writer, once told, waits a random moment and
// publishes. The moments are drawn so that the publish often lands inside
// the reader's arming. A lost wake-up is a park that runs out its whole
// timeout though the record was published microseconds after it began:
// the test stops at the first.
TEST(RingWait, APublishRacingAReadersParkingAlwaysWakesIt) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "the race needs two CPUs";
  ScopedRing r(testing::fixed_ring(1 << 16, 64));
  auto writer = Producer::attach(r.open());
  ASSERT_TRUE(writer.ok()) << writer.status();
  RingFile reader_file = r.open();
  RingHeader& h = reader_file.header();

  constexpr uint64_t kRounds = 100'000;
  constexpr uint64_t kTimeoutNs = 2'000'000'000;  // a lost wake-up, not a slow one
  std::atomic<uint64_t> ready{0};  // the round the reader is about to park for (+1)
  std::atomic<bool> stop{false};
  std::thread w([&] {
    pin_to(1);
    std::minstd_rand rnd(7);
    std::byte payload[64]{};
    for (uint64_t round = 0; round < kRounds; ++round) {
      // Acquire: pairs with the reader's release store of ready.
      while (ready.load(std::memory_order_acquire) != round + 1) {
        if (stop.load(std::memory_order_relaxed)) return;
        __builtin_ia32_pause();
      }
      spin(rnd() % 256);
      writer->publish(payload);
    }
  });
  pin_to(0);
  std::minstd_rand rnd(11);
  uint64_t timed_out = 0, parked = 0;
  for (uint64_t round = 0; round < kRounds && timed_out == 0; ++round) {
    ready.store(round + 1, std::memory_order_release);  // pairs with the writer's acquire
    spin(rnd() % 256);
    // Park until record `round` is published (write_seq moves past `round`).
    while (h.write_seq.load(std::memory_order_acquire) == round) {  // pairs with the writer's release
      ++parked;
      if (!wait_for_write(h, round, kTimeoutNs)) {
        if (h.write_seq.load(std::memory_order_acquire) != round) ++timed_out;  // published, yet not woken
      }
    }
  }
  stop.store(true, std::memory_order_relaxed);
  w.join();
  EXPECT_EQ(timed_out, 0u) << "a publish did not wake the reader parked for it (after " << parked << " parks)";
  EXPECT_GT(parked, kRounds / 100) << "the reader hardly ever parked: the race was not tried";
}

}  // namespace
}  // namespace ringfire::ring
