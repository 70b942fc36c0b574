// registry_test.cc — readers publish their cursor; entries of dead
// processes are shown as gone and reclaimed.
#include "ring/registry.h"

#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "ring/consumer.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::ring {
namespace {

using testing::ScopedRing;

TEST(ReaderRegistry, ReadersAppearWithTheirCursorAndLeaveWhenDestroyed) {
  ScopedRing r(testing::fixed_ring(16, 64));
  auto p = Producer::attach(r.open());
  ASSERT_TRUE(p.ok());
  std::byte rec[64] = {};
  for (int i = 0; i < 5; ++i) p->publish(rec);
  RingFile view = r.open();
  {
    auto c = Consumer::attach(r.open(), StartPosition::at(0), "strategy-a");
    ASSERT_TRUE(c.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(c->try_read(rec).ok);
    auto list = ReaderRegistry::list(view);
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0].name, "strategy-a");
    EXPECT_EQ(list[0].pid, static_cast<uint64_t>(getpid()));
    EXPECT_TRUE(list[0].alive);
    while (c->try_read(rec).ok) {
    }
    EXPECT_EQ(ReaderRegistry::list(view)[0].cursor, 5u);
  }
  EXPECT_TRUE(ReaderRegistry::list(view).empty());
}

TEST(ReaderRegistry, AFullRegistryIsAClearError) {
  RingOptions o = testing::fixed_ring(16, 64);
  o.registry_size = 1;
  ScopedRing r(o);
  auto a = Consumer::attach(r.open(), StartPosition::latest(), "a");
  ASSERT_TRUE(a.ok());
  auto b = Consumer::attach(r.open(), StartPosition::latest(), "b");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("registry"), std::string::npos);
}

TEST(ReaderRegistry, ADeadProcessEntryIsShownGoneAndReclaimed) {
  RingOptions o = testing::fixed_ring(16, 64);
  o.registry_size = 1;
  ScopedRing r(o);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto f = RingFile::open(r.name());
    if (!f.ok()) _exit(1);
    ReaderRegistry::claim(*f, "doomed", static_cast<uint64_t>(getpid()));
    _exit(0);  // never releases
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  RingFile view = r.open();
  auto list = ReaderRegistry::list(view);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, "doomed");
  EXPECT_FALSE(list[0].alive);
  auto c = Consumer::attach(r.open(), StartPosition::latest(), "heir");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ReaderRegistry::list(view)[0].name, "heir");
}

}  // namespace
}  // namespace ringfire::ring
