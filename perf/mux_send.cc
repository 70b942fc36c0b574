// mux_send.cc — what one `Sender::send()` costs its caller, with T producer
// threads sharing one Node: the decode-engine shape where each thread owns
// a share of the streams, every thread sends a token on each of its streams
// per step, and one of them calls flush_batch() once all have (Manual). A
// consumer Node in the same process (loopback, kernel backend) reads every
// stream and checks it. Prints JSON: tokens/s and the send() call's
// duration p50/p99/p99.9/max, per T. Not a test: nothing here asserts a time.
//
//   perf/mux_send [STREAMS] [STEPS] [THREADS...]     (default 1024 200 1 2)
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "node/node.h"
#include "perf/histogram.h"
#include "ring/monotonic.h"

using namespace ringfire;

namespace {

std::unique_ptr<node::Node> make(const char* name, bool manual) {
  node::NodeOptions o;
  o.instance_id = std::string(name) + "-" + std::to_string(getpid()) + "-" + std::to_string(monotonic_ns());
  o.control = net::Endpoint{INADDR_LOOPBACK, 0};
  o.mux.enabled = true;
  o.mux.initial_credit = 64;
  if (manual) o.mux.flush = mux::FlushPolicy::manual();
  auto n = node::Node::create(o);
  if (!n.ok()) {
    std::fprintf(stderr, "mux_send: %s\n", std::string(n.status().message()).c_str());
    std::exit(2);
  }
  return std::move(*n);
}

int run(int streams, int steps, int threads) {
  auto consumer = make("c", false);
  auto producer = make("p", true);
  std::vector<std::unique_ptr<node::Anchor>> anchors;
  std::vector<std::unique_ptr<node::Sender>> senders;
  for (int i = 0; i < streams; ++i) {
    anchors.push_back(consumer->create_anchor(node::AnchorKind::kSingleSender));
    auto s = producer->attach(anchors.back()->handle(), consumer->control_address());
    if (!s.ok()) {
      std::fprintf(stderr, "mux_send: attach: %s\n", std::string(s.status().message()).c_str());
      return 2;
    }
    senders.push_back(std::move(*s));
  }
  std::atomic<uint64_t> wrong{0}, received{0};
  std::atomic<bool> done{false};
  std::thread reader([&] {  // one reader for every anchor, checking each stream's order
    std::vector<uint32_t> next(streams, 0);
    std::vector<bool> ended(streams, false);
    int live = streams;
    const uint64_t deadline = monotonic_ns() + 120'000'000'000ull;
    while (live > 0 && monotonic_ns() < deadline) {
      bool any = false;
      for (int i = 0; i < streams; ++i) {
        node::Item it;
        while (!ended[i] && anchors[i]->recv(&it, 0)) {
          any = true;
          if (it.kind != node::Item::Kind::kData) {
            ended[i] = true;
            --live;
            if (it.kind != node::Item::Kind::kFinished || next[i] != static_cast<uint32_t>(steps)) ++wrong;
            break;
          }
          uint32_t t = 0;
          std::memcpy(&t, it.bytes.data(), 4);
          if (t != next[i]++) ++wrong;
          ++received;
        }
      }
      if (!any) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    done = true;
  });
  std::vector<perf::LatencyHistogram> hist(threads);
  // The same clock pair around nothing, in the same loop: what preemption
  // alone adds on these cores (a send's max beyond it is waiting).
  std::vector<perf::LatencyHistogram> bare(threads);
  std::barrier step_done(threads, [&]() noexcept { producer->flush_batch(); });
  const uint64_t t0 = monotonic_ns();
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      std::byte tok[40] = {};
      for (int step = 0; step < steps; ++step) {
        std::memcpy(tok, &step, 4);
        for (int i = w; i < streams; i += threads) {
          {
            const uint64_t a = monotonic_ns();
            bare[w].record(monotonic_ns() - a);
          }
          for (;;) {
            const uint64_t a = monotonic_ns();
            const mux::SendStatus st = senders[i]->send({tok, sizeof(tok)});
            hist[w].record(monotonic_ns() - a);
            if (st != mux::SendStatus::kFull) break;
            std::this_thread::yield();  // credit comes back with the reader
          }
        }
        step_done.arrive_and_wait();  // the last to arrive flushes
      }
    });
  }
  for (auto& t : workers) t.join();
  for (auto& s : senders) s->finish();
  producer->flush_batch();
  reader.join();
  const double secs = static_cast<double>(monotonic_ns() - t0) / 1e9;
  perf::LatencyHistogram all, nothing;
  for (auto& h : hist) all.merge(h);
  for (auto& h : bare) nothing.merge(h);
  std::printf(
      "{\"threads\":%d,\"streams\":%d,\"steps\":%d,\"tokens\":%llu,\"wrong\":%llu,\"tokens_per_s\":%.0f,"
      "\"send_ns\":{\"p50\":%llu,\"p99\":%llu,\"p999\":%llu,\"max\":%llu,\"calls\":%llu},"
      "\"nothing_ns\":{\"p99\":%llu,\"p999\":%llu,\"max\":%llu}}\n",
      threads, streams, steps, static_cast<unsigned long long>(received.load()),
      static_cast<unsigned long long>(wrong.load()), static_cast<double>(received.load()) / secs,
      static_cast<unsigned long long>(all.percentile(0.5)), static_cast<unsigned long long>(all.percentile(0.99)),
      static_cast<unsigned long long>(all.percentile(0.999)), static_cast<unsigned long long>(all.max()),
      static_cast<unsigned long long>(all.count()), static_cast<unsigned long long>(nothing.percentile(0.99)),
      static_cast<unsigned long long>(nothing.percentile(0.999)), static_cast<unsigned long long>(nothing.max()));
  return wrong.load() == 0 && received.load() == uint64_t(streams) * uint64_t(steps) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int streams = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1024;
  const int steps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 200;
  std::vector<int> threads;
  for (int i = 3; i < argc; ++i) threads.push_back(std::max(1, std::atoi(argv[i])));
  if (threads.empty()) threads = {1, 2};
  int rc = 0;
  for (int t : threads) rc |= run(streams, steps, t);
  return rc;
}
