// slot_test.cc — the slot protocol word encoding, and a writer hammering
// a small ring while a reader checks that no record it accepts is torn.
#include "ring/slot.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ring/consumer.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::ring {
namespace {

TEST(SlotWord, ClassifiesWhatAReaderFinds) {
  EXPECT_EQ(slot_classify(0, 0), SlotState::kNotYet);
  EXPECT_EQ(slot_classify(committed_word(5), 5), SlotState::kRecord);
  EXPECT_EQ(slot_classify(busy_word(5), 5), SlotState::kNotYet);
  EXPECT_EQ(slot_classify(committed_word(4), 5), SlotState::kNotYet);
  EXPECT_EQ(slot_classify(committed_word(6), 5), SlotState::kLapped);
  EXPECT_EQ(slot_classify(busy_word(6), 5), SlotState::kLapped);
  EXPECT_EQ(slot_classify(committed_word(5 + 1024), 5), SlotState::kLapped);
}

TEST(SlotWord, ReadCopiesOnlyACommittedRecord) {
  alignas(64) std::byte slot[64] = {};
  auto* w = reinterpret_cast<SlotWord*>(slot);
  const uint64_t v = 42;
  uint64_t out = 0;
  EXPECT_EQ(slot_read(w, 0, &out, 8), SlotState::kNotYet);
  slot_write(w, 0, &v, 8);
  EXPECT_EQ(slot_read(w, 0, &out, 8), SlotState::kRecord);
  EXPECT_EQ(out, 42u);
  EXPECT_EQ(slot_read(w, 1, &out, 8), SlotState::kNotYet);
}

TEST(SlotProtocol, AReaderRacingAWriterNeverAcceptsATornRecord) {
  // Every byte of record n is (n & 0xff) and the first word is n: a torn
  // copy mixes two records and fails the check.
  constexpr uint32_t kSize = 256;
  testing::ScopedRing r(testing::fixed_ring(4, kSize));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  auto c = Consumer::attach(r.open(), StartPosition::at(0));
  ASSERT_TRUE(c.ok());
  constexpr uint64_t kTotal = 2'000'000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::vector<uint8_t> rec(kSize);
    for (uint64_t n = 0; n < kTotal; ++n) {
      std::fill(rec.begin(), rec.end(), static_cast<uint8_t>(n));
      std::memcpy(rec.data(), &n, 8);
      p->publish(rec.data());
    }
    done.store(true);
  });
  std::vector<uint8_t> out(kSize);
  uint64_t read = 0;
  uint64_t lost = 0;
  uint64_t torn = 0;
  uint64_t last = 0;
  while (!done.load() || c->cursor() < kTotal) {
    ReadResult res = c->try_read(reinterpret_cast<std::byte*>(out.data()));
    lost += res.lost;
    if (!res.ok) continue;
    ++read;
    EXPECT_TRUE(read == 1 || res.seq > last);
    last = res.seq;
    uint64_t n = 0;
    std::memcpy(&n, out.data(), 8);
    bool whole = n == res.seq;
    for (uint32_t i = 8; i < kSize; ++i) whole &= out[i] == static_cast<uint8_t>(res.seq);
    torn += whole ? 0 : 1;
  }
  writer.join();
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(read + lost, kTotal);
}

}  // namespace
}  // namespace ringfire::ring
