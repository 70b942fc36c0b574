// queued_port_test.cc — QueuedPort over fake queues: sessions spread over
// the queues by load, a fixed UDP port's sessions kept on one queue, each
// close (and task removal) sent to the queue that holds it, a refused
// open not counted, and the port's figures the queues' summed.
#include "engine/queued_port.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace ringfire::engine {
namespace {

// FakeQueue: a queue that hands out distinct link pointers (never
// dereferenced) and records what it was asked.
class FakeQueue final : public PortHandle {
 public:
  explicit FakeQueue(uintptr_t base) : base_(base) {}
  absl::StatusOr<ServePlaced> open_serve(ServeRequest) override {
    if (refuse) return absl::ResourceExhaustedError("full");
    ServePlaced p;
    p.link = reinterpret_cast<dataplane::ServeLink*>(base_ + 16 * next_++);
    ++live;
    return p;
  }
  void close_serve(dataplane::ServeLink* link) override {
    closed.push_back(reinterpret_cast<uintptr_t>(link));
    --live;
  }
  absl::StatusOr<dataplane::MirrorLink*> open(control::MirrorPlaneRequest) override {
    if (refuse) return absl::ResourceExhaustedError("full");
    ++live;
    return reinterpret_cast<dataplane::MirrorLink*>(base_ + 16 * next_++);
  }
  void close(dataplane::MirrorLink* link) override {
    closed.push_back(reinterpret_cast<uintptr_t>(link));
    --live;
  }
  absl::Status add_task(dataplane::WorkerTask*) override {
    ++tasks;
    return absl::OkStatus();
  }
  void remove_task(dataplane::WorkerTask*) override { --tasks; }
  uint64_t port_drops() const override { return 3; }
  std::string describe() const override { return "fake"; }
  PortInfo info() const override {
    PortInfo i;
    i.name = "p";
    i.path = "fake";
    i.worker = "a thread";
    i.sessions = static_cast<uint64_t>(live);
    i.datagrams = 10;
    i.summary = "ok";
    return i;
  }
  void stop() override { stopped = true; }

  int live = 0;  // sessions open on it
  int tasks = 0;
  bool refuse = false;
  bool stopped = false;
  std::vector<uintptr_t> closed;

 private:
  uintptr_t base_;
  uintptr_t next_ = 0;
};

struct Two {
  FakeQueue* q[2];
  std::unique_ptr<QueuedPort> port;
  Two() {
    std::vector<std::unique_ptr<PortHandle>> v;
    for (int i = 0; i < 2; ++i) {
      auto f = std::make_unique<FakeQueue>(0x10000 * (i + 1));
      q[i] = f.get();
      v.push_back(std::move(f));
    }
    port = std::make_unique<QueuedPort>(std::move(v));
  }
};

ServeRequest serve_on(uint16_t udp_port) {
  ServeRequest r;
  r.bind.udp_port = udp_port;
  return r;
}

control::MirrorPlaneRequest mirror_on(uint16_t udp_port) {
  control::MirrorPlaneRequest r;
  r.bind = dataplane::BindSpec{};
  r.bind->udp_port = udp_port;
  return r;
}

TEST(QueuedPort, SpreadsSessionsAndClosesEachOnItsQueue) {
  Two t;
  std::vector<dataplane::ServeLink*> serves;
  for (int i = 0; i < 4; ++i) {
    auto s = t.port->open_serve(serve_on(0));
    ASSERT_TRUE(s.ok()) << s.status();
    serves.push_back(s->link);
  }
  EXPECT_EQ(t.q[0]->live, 2);
  EXPECT_EQ(t.q[1]->live, 2);
  auto m = t.port->open(mirror_on(0));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(t.q[0]->live, 3) << "a tie goes to the first queue";
  // Each close reaches the queue that made the link.
  t.port->close_serve(serves[1]);  // queue 1's first
  ASSERT_EQ(t.q[1]->closed.size(), 1u);
  EXPECT_EQ(t.q[1]->closed[0], reinterpret_cast<uintptr_t>(serves[1]));
  EXPECT_TRUE(t.q[0]->closed.empty());
  t.port->close(*m);
  ASSERT_EQ(t.q[0]->closed.size(), 1u);
  EXPECT_EQ(t.q[0]->closed[0], reinterpret_cast<uintptr_t>(*m));
  // Now queue 1 holds the fewest (1 against 2): the next goes there.
  ASSERT_TRUE(t.port->open_serve(serve_on(0)).ok());
  EXPECT_EQ(t.q[1]->live, 2);
  // A link it never placed is no queue's.
  t.port->close_serve(reinterpret_cast<dataplane::ServeLink*>(uintptr_t{0x999}));
  EXPECT_EQ(t.q[0]->closed.size() + t.q[1]->closed.size(), 2u);
}

TEST(QueuedPort, AFixedUdpPortsSessionsShareOneQueue) {
  Two t;
  ASSERT_TRUE(t.port->open(mirror_on(7000)).ok());    // queue 0
  ASSERT_TRUE(t.port->open_serve(serve_on(0)).ok());  // queue 1
  ASSERT_TRUE(t.port->open_serve(serve_on(0)).ok());  // queue 0
  // Two more on UDP port 7000 (a group's mirrors share it): queue 0, the
  // busier, because its bindings for that port are there.
  auto a = t.port->open(mirror_on(7000));
  auto b = t.port->open(mirror_on(7000));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(t.q[0]->live, 4);
  EXPECT_EQ(t.q[1]->live, 1);
  // Once the port's last session closes, it is free to go anywhere.
  t.port->close(*a);
  t.port->close(*b);
  EXPECT_EQ(t.q[0]->live, 2);
  EXPECT_EQ(t.q[1]->live, 1);
}

TEST(QueuedPort, ARefusedOpenIsNotCounted) {
  Two t;
  t.q[0]->refuse = true;
  EXPECT_FALSE(t.port->open_serve(serve_on(0)).ok());
  t.q[0]->refuse = false;
  // Queue 0 still counts as empty: the next goes there, not to queue 1.
  ASSERT_TRUE(t.port->open_serve(serve_on(0)).ok());
  EXPECT_EQ(t.q[0]->live, 1);
  EXPECT_EQ(t.q[1]->live, 0);
}

TEST(QueuedPort, TasksFollowTheLoadAndThePortSumsItsQueues) {
  Two t;
  ASSERT_TRUE(t.port->open_serve(serve_on(0)).ok());  // queue 0
  int task = 0;
  auto* w = reinterpret_cast<dataplane::WorkerTask*>(&task);
  ASSERT_TRUE(t.port->add_task(w).ok());
  EXPECT_EQ(t.q[1]->tasks, 1);
  t.port->remove_task(w);
  EXPECT_EQ(t.q[1]->tasks, 0);
  const PortInfo i = t.port->info();
  EXPECT_EQ(i.path, "fake, 2 queues");
  EXPECT_EQ(i.sessions, 1u);
  EXPECT_EQ(i.datagrams, 20u);
  EXPECT_EQ(i.summary, "queue 0: ok | queue 1: ok");
  EXPECT_EQ(t.port->port_drops(), 6u);
  t.port->stop();
  EXPECT_TRUE(t.q[0]->stopped && t.q[1]->stopped);
}

}  // namespace
}  // namespace ringfire::engine
