// mux_open.cc — what opening a stream costs its first token: two Nodes in
// one process (loopback, kernel backend), a channel already up. Each
// round the consumer makes an anchor, the producer attaches to its handle,
// sends one token and flushes, and the consumer reads it; the clock runs
// from create_anchor to the token read (the request's time to first token
// that the open adds). Rounds alternate between the handle's ticket (no
// round trip: PROTOCOL.md §5.2.1) and the same handle without it (ATTACH,
// answered on the control connection), so both see the same machine.
// Prints p50/p99 of each and their ratio (JSON). Not a test: nothing here
// asserts a time.
//
//   perf/mux_open [ROUNDS] [--auto]
// --auto: the Auto flush policy (the node thread builds) instead of Manual
// with flush_batch() after the token (built on the caller's thread).
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "node/node.h"
#include "ring/monotonic.h"

using namespace ringfire;

namespace {

struct Pct {
  double p50 = 0, p99 = 0;
};

Pct pct(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double p) { return static_cast<double>(v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))]) / 1000.0; };
  return Pct{at(0.5), at(0.99)};
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(20, std::atoi(argv[1])) : 2000;
  bool manual = true;
  for (int i = 2; i < argc; ++i) manual &= std::strcmp(argv[i], "--auto") != 0;
  auto make = [&](const char* name) {
    node::NodeOptions o;
    o.instance_id = std::string(name) + "-" + std::to_string(getpid());
    o.control = net::Endpoint{INADDR_LOOPBACK, 0};
    o.mux.enabled = true;
    if (manual) o.mux.flush = mux::FlushPolicy::manual();
    o.channel_records = 4096;
    auto n = node::Node::create(o);
    if (!n.ok()) {
      std::fprintf(stderr, "mux_open: %s\n", std::string(n.status().message()).c_str());
      std::exit(2);
    }
    return std::move(*n);
  };
  auto producer = make("p");
  auto consumer = make("c");
  std::byte tok[16] = {};
  // one_open: a stream opened (on the ticket or by ATTACH), its first
  // token read; the nanoseconds from create_anchor to that read, or 0.
  auto one_open = [&](bool ticket, int round) -> uint64_t {
    const uint64_t t0 = monotonic_ns();
    auto anchor = consumer->create_anchor(node::AnchorKind::kSingleSender);
    mux::AnchorHandle h = anchor->handle();
    if (!ticket) h.ticket = {};
    auto s = producer->attach(h, consumer->control_address());
    if (!s.ok()) {
      std::fprintf(stderr, "mux_open: attach: %s\n", std::string(s.status().message()).c_str());
      return 0;
    }
    std::memcpy(tok, &round, sizeof(round));
    if ((*s)->send({tok, sizeof(tok)}) != mux::SendStatus::kSent) return 0;
    if (manual) producer->flush_batch();
    node::Item it;
    if (!anchor->recv(&it, 5'000'000'000) || it.kind != node::Item::Kind::kData) return 0;
    const uint64_t took = monotonic_ns() - t0;
    (*s)->finish();
    if (manual) producer->flush_batch();
    anchor->recv(&it, 5'000'000'000);  // its end: the slot is free before the next round
    return took;
  };
  for (int i = 0; i < 50; ++i) {  // the channel up, its rings warm
    if (one_open(i % 2 == 0, i) == 0) return 3;
  }
  std::vector<uint64_t> with_ticket, with_attach;
  for (int i = 0; i < rounds; ++i) {
    const bool ticket = i % 2 == 0;
    const uint64_t took = one_open(ticket, i);
    if (took == 0) {
      std::fprintf(stderr, "mux_open: round %d: no first token\n", i);
      return 3;
    }
    (ticket ? with_ticket : with_attach).push_back(took);
  }
  const node::NodeStats c = consumer->stats();
  const Pct t = pct(with_ticket), a = pct(with_attach);
  std::printf(
      "{\"flush\": \"%s\", \"rounds\": %d, \"open_to_first_token_us\": {\"ticket\": {\"p50\": %.1f, \"p99\": %.1f}, "
      "\"attach\": {\"p50\": %.1f, \"p99\": %.1f}}, \"ticket_vs_attach\": {\"p50\": %.2f, \"p99\": %.2f}, "
      "\"tickets_claimed\": %llu, \"attaches_answered\": %llu}\n",
      manual ? "manual" : "auto", rounds, t.p50, t.p99, a.p50, a.p99, t.p50 / a.p50, t.p99 / a.p99,
      static_cast<unsigned long long>(c.tickets_claimed), static_cast<unsigned long long>(c.attaches_answered));
  return 0;
}
