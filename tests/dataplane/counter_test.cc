// counter_test.cc — Counter: exact under one writer, readable meanwhile.
#include "dataplane/counter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ringfire::dataplane {
namespace {

TEST(Counter, OneWriterIsExactAndAReaderSeesItGrow) {
  Counter c;
  constexpr uint64_t kN = 2'000'000;
  std::atomic<bool> done{false};
  uint64_t last = 0, went_back = 0;
  std::thread reader([&] {
    while (!done.load()) {
      const uint64_t v = c.get();
      went_back += v < last;
      last = v;
    }
  });
  for (uint64_t i = 0; i < kN; ++i) ++c;
  c += 5;
  done.store(true);
  reader.join();
  EXPECT_EQ(c.get(), kN + 5);
  EXPECT_EQ(went_back, 0u);
}

TEST(Counter, CopiesTakeTheValue) {
  Counter a;
  a += 7;
  Counter b(a);
  Counter c;
  c = a;
  ++a;
  EXPECT_EQ(b.get(), 7u);
  EXPECT_EQ(c.get(), 7u);
  EXPECT_EQ(a.get(), 8u);
}

}  // namespace
}  // namespace ringfire::dataplane
