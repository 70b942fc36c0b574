// port_runner_test.cc — the conductor's side of a port (PortRunner: a port
// and the worker thread that owns it) over an in-memory port: sessions
// added and removed while another streams, a worker stuck past the
// exchange's patience whose late answer is never taken for the next
// command's, and a stopped port that refuses sessions. The port counts
// what it sends (atomics: the worker's thread and the test's).
#include "engine/port_runner.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "dataplane/mirror_session_impl.h"
#include "dataplane/serve_session_impl.h"
#include "gtest/gtest.h"
#include "ring/check_record.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::engine {
namespace {

using dataplane::BindingId;
using dataplane::RxDatagram;
using dataplane::TxDatagram;

// CountingPort sends nowhere and counts; while `stall` is set its
// rx_burst holds the worker (a worker stuck in its port).
struct CountingPort {
  struct Shared {
    std::atomic<uint64_t> sent{0};
    std::atomic<bool> stall{false};
    std::atomic<bool> stalled{false};  // the worker is held now
    std::atomic<uint32_t> next_binding{1};
  };
  struct Prepared {
    net::Endpoint local;
  };
  static constexpr uint64_t kDefaultPaceNs = 5'000;
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();

  size_t rx_burst(RxDatagram*, size_t) {
    while (shared->stall.load()) {
      shared->stalled.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    shared->stalled.store(false);
    return 0;
  }
  size_t tx_burst(const TxDatagram*, size_t n) {
    shared->sent += n;
    return n;
  }
  net::Endpoint local() const { return net::Endpoint{0xC6120001, 7400}; }
  BindingId install(Prepared) { return static_cast<BindingId>(shared->next_binding++); }
  void uninstall(BindingId) {}
};
static_assert(dataplane::PacketPort<CountingPort>);

using Runner = PortRunner<CountingPort>;

constexpr net::Endpoint kGroup{0xEFFF0001, 7401};

class PortRunnerTest : public ::testing::Test {
 protected:
  PortRunnerTest()
      : ring_(ring::testing::fixed_ring(65536, 64)),  // holds all 10,000 records: never lapped, however late the worker
        producer_(*ring::Producer::attach(ring_.open())),
        runner_(std::make_unique<Runner>(
            "p0", "fake", port_,
            [](const CountingPort&, const dataplane::BindSpec& b, uint32_t, uint16_t) -> absl::StatusOr<CountingPort::Prepared> {
              return CountingPort::Prepared{net::Endpoint{b.ip, b.udp_port}};
            },
            ring::IdleMode::kBackoff, -1)) {}
  ~PortRunnerTest() override { runner_->stop(); }

  absl::StatusOr<ServePlaced> serve() {
    ServeRequest r;
    r.reader = *ring::RawReader::attach(ring_.open(), ring::StartPosition::latest());
    r.config.multicast = kGroup;
    r.config.pace_ns = 0;
    r.pace_given = true;
    r.bind.ip = 0xC6120001;
    return runner_->open_serve(std::move(r));
  }
  void publish(int n) {
    for (int i = 0; i < n; ++i) {
      ring::fill_record({producer_.claim(), 64}, producer_.next_seq(), 0);
      producer_.commit();
    }
  }

  ring::testing::ScopedRing ring_;
  ring::Producer producer_;
  CountingPort port_;
  std::unique_ptr<Runner> runner_;
};

// One serve streams while another is added and removed 200 times: every
// exchange answered, the streaming one's records all sent, the session
// count back to one.
TEST_F(PortRunnerTest, SessionsComeAndGoWhileAnotherStreams) {
  auto a = serve();
  ASSERT_TRUE(a.ok()) << a.status();
  std::thread writer([&] {
    for (int i = 0; i < 200; ++i) {
      publish(50);
      dataplane::poke_worker(*a->link);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  int failed = 0;
  for (int i = 0; i < 200 && failed == 0; ++i) {  // no ASSERT while the writer runs: it is joined below
    auto b = serve();
    if (!b.ok()) {
      ADD_FAILURE() << i << ": " << b.status();
      ++failed;
      continue;
    }
    EXPECT_EQ(runner_->info().sessions, 2u) << i;  // counted before the worker answered
    runner_->close_serve(b->link);
    EXPECT_EQ(runner_->info().sessions, 1u) << i;
  }
  writer.join();
  ASSERT_EQ(failed, 0);
  const uint64_t published = producer_.next_seq();
  ASSERT_EQ(published, 200u * 50);
  for (int i = 0; i < 2000 && a->link->stats.records.get() < published; ++i) {
    dataplane::poke_worker(*a->link);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(a->link->stats.records.get(), published);
  EXPECT_GT(port_.shared->sent.load(), 0u);
  EXPECT_EQ(runner_->info().sessions, 1u);
  EXPECT_EQ(runner_->late_answers(), 0u);
}

// A worker held in its port past the exchange's patience (5 s): the add
// fails with a deadline, nothing it may touch is freed, and once the worker
// comes back its late answer is dropped (counted), never taken for the
// next command's: the next add gets its own answer.
TEST_F(PortRunnerTest, ALateAnswerIsNeverTakenForTheNextCommands) {
  port_.shared->stall = true;
  for (int i = 0; i < 1000 && !port_.shared->stalled.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(port_.shared->stalled.load());
  auto stuck = serve();
  ASSERT_FALSE(stuck.ok());
  EXPECT_EQ(stuck.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(stuck.status().message().find("did not answer"), std::string::npos) << stuck.status();
  port_.shared->stall = false;
  auto next = serve();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(runner_->late_answers(), 1u);
  // Both are on the worker: the stuck add was carried out when it came back.
  EXPECT_EQ(runner_->info().sessions, 2u);
  runner_->close_serve(next->link);
  EXPECT_EQ(runner_->info().sessions, 1u);
}

// A stopped port refuses sessions and tasks with a reason, and stopping
// again is harmless.
TEST_F(PortRunnerTest, AStoppedPortRefusesSessions) {
  auto a = serve();
  ASSERT_TRUE(a.ok()) << a.status();
  runner_->stop();
  auto b = serve();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("port p0 is stopped"), std::string::npos) << b.status();
  dataplane::WorkerTask* none = nullptr;
  EXPECT_FALSE(runner_->add_task(none).ok());
  runner_->stop();
}

}  // namespace
}  // namespace ringfire::engine
