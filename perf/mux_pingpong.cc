// mux_pingpong.cc — request/response over the stream multiplexer between
// two Nodes in one process (loopback, kernel backend): node A streams a
// token to an anchor on B, B's reader answers on a stream back to an anchor
// on A, and A waits for the answer before the next. Both nodes produce and
// consume, so each one's port worker carries a serve and a mirror session
// (the shape where a worker parks in poll(), not on a ring). Prints the
// round trip's p50/p99/p99.9 (JSON). Not a test: nothing here asserts a time.
//
//   perf/mux_pingpong [ROUNDS] [--per-stream | --manual [--node-thread]]
// --manual: Manual flush, flush_batch() after each send (built on the
// caller's thread; --node-thread: kicked to the node thread instead).
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "node/node.h"
#include "ring/monotonic.h"

using namespace ringfire;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(10, std::atoi(argv[1])) : 2000;
  bool per_stream = false, manual = false, node_thread = false;
  for (int i = 2; i < argc; ++i) {
    per_stream |= std::strcmp(argv[i], "--per-stream") == 0;
    manual |= std::strcmp(argv[i], "--manual") == 0;
    node_thread |= std::strcmp(argv[i], "--node-thread") == 0;
  }
  auto make = [&](const char* name) {
    node::NodeOptions o;
    o.instance_id = std::string(name) + "-" + std::to_string(getpid());
    o.control = net::Endpoint{INADDR_LOOPBACK, 0};
    o.mux.enabled = !per_stream;
    if (manual) o.mux.flush = mux::FlushPolicy::manual();
    o.build_on_flush = !node_thread;
    o.channel_records = 4096;
    auto n = node::Node::create(o);
    if (!n.ok()) {
      std::fprintf(stderr, "mux_pingpong: %s\n", std::string(n.status().message()).c_str());
      std::exit(2);
    }
    return std::move(*n);
  };
  auto a = make("a");
  auto b = make("b");
  auto at_b = b->create_anchor(node::AnchorKind::kSingleSender);
  auto at_a = a->create_anchor(node::AnchorKind::kSingleSender);
  auto to_b = a->attach(at_b->handle(), b->control_address());
  auto to_a = b->attach(at_a->handle(), a->control_address());
  if (!to_b.ok() || !to_a.ok()) {
    std::fprintf(stderr, "mux_pingpong: attach failed\n");
    return 2;
  }
  std::thread echo([&] {  // B: answer every token
    node::Item it;
    for (int i = 0; i < rounds;) {
      if (!at_b->recv(&it, 5'000'000'000)) return;
      if (it.kind != node::Item::Kind::kData) return;
      while ((*to_a)->send({it.bytes.data(), it.bytes.size()}) == mux::SendStatus::kFull) std::this_thread::yield();
      if (manual) b->flush_batch();
      ++i;
    }
  });
  std::vector<uint64_t> rtt;
  std::byte tok[16] = {};
  for (int i = 0; i < rounds; ++i) {
    const uint64_t t0 = monotonic_ns();
    std::memcpy(tok, &i, sizeof(i));
    while ((*to_b)->send({tok, sizeof(tok)}) == mux::SendStatus::kFull) std::this_thread::yield();
    if (manual) a->flush_batch();
    node::Item it;
    if (!at_a->recv(&it, 5'000'000'000) || it.kind != node::Item::Kind::kData) {
      std::fprintf(stderr, "mux_pingpong: no answer to round %d\n", i);
      echo.join();
      return 3;
    }
    rtt.push_back(monotonic_ns() - t0);
  }
  echo.join();
  std::sort(rtt.begin(), rtt.end());
  auto pct = [&](double p) { return static_cast<double>(rtt[static_cast<size_t>(p * static_cast<double>(rtt.size() - 1))]) / 1000.0; };
  std::printf("{\"path\": \"%s%s\", \"rounds\": %d, \"rtt_us\": {\"p50\": %.1f, \"p99\": %.1f, \"p999\": %.1f}}\n",
              per_stream ? "per-stream" : "mux", per_stream ? "" : manual ? (node_thread ? " manual, node thread" : " manual, caller builds") : " auto", rounds, pct(0.5), pct(0.99), pct(0.999));
  return 0;
}
