// echo.cc — the round-trip harness behind `pingpong` and `stress`, each
// end a process of its own (perf/echo_roles.h has the two roles).
//
//   echo pong IN OUT                 copy every record of IN into OUT, as is
//   echo ping OUT IN (--rate R | --closed) --count N [--json FILE] [--drain-ms MS]
//                                    (--rate 0: flat out, as fast as it can publish)
//
// Reports delivered % and round-trip percentiles as JSON.
#include <cstdio>
#include <string>

#include "perf/echo_roles.h"
#include "ring/idle.h"

namespace ringfire::perf {
namespace {

int pong(const std::string& in, const std::string& out, ring::IdleMode mode) {
  auto rings = open_pair(out, in, "pong");
  if (!rings.ok()) {
    std::fprintf(stderr, "echo pong: %s\n", std::string(rings.status().message()).c_str());
    return 2;
  }
  Pong pong(std::move(*rings));
  ring::IdleStrategy idle(mode);
  for (;;) {
    if (pong.step()) {
      idle.reset();
    } else {
      idle.idle();
    }
  }
}

int ping(const std::string& out, const std::string& in, uint64_t rate, bool closed, uint64_t count,
         uint64_t drain_ms, const std::string& json, ring::IdleMode mode) {
  auto rings = open_pair(out, in, "ping");
  if (!rings.ok()) {
    std::fprintf(stderr, "echo ping: %s\n", std::string(rings.status().message()).c_str());
    return 2;
  }
  Ping ping(std::move(*rings), rate, count, closed);
  ring::IdleStrategy idle(mode);
  while (!ping.finished(ping.last_now(), drain_ms * 1'000'000)) {
    if (ping.step()) {
      idle.reset();
    } else {
      idle.idle();
    }
  }
  return ping.report(json);
}

int run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: echo pong IN OUT [--idle MODE]\n"
                 "       echo ping OUT IN (--rate R | --closed) --count N [--json FILE] [--drain-ms MS] [--idle MODE]\n");
    return 2;
  }
  const std::string role = argv[1], a = argv[2], b = argv[3];
  PingOptions o;
  if (!parse_ping_options(argc, argv, 4, /*idle_ok=*/true, "echo", &o)) return 2;
  auto mode = ring::parse_idle_mode(o.idle);
  if (!mode) return 2;
  if (role == "pong") return pong(a, b, *mode);
  if (role == "ping") return ping(a, b, o.rate, o.closed, o.count, o.drain_ms, o.json, *mode);
  std::fprintf(stderr, "echo: role must be ping or pong\n");
  return 2;
}

}  // namespace
}  // namespace ringfire::perf

int main(int argc, char** argv) { return ringfire::perf::run(argc, argv); }
