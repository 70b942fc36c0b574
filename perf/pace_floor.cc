// pace_floor — what a paced decode loop costs with nothing in it: one
// absolute clock_nanosleep a step at --rate steps/s (the way `ringfire
// mux-produce --rate` paces its steps), for --steps steps, and the
// process's CPU per step (getrusage). mux_bench.sh --sweep runs it on the
// producer's host and CPU beside each X: the floor under any producer's
// CPU per token there, whatever its path, is this divided by X.
//
//   pace_floor [--rate STEPS_PER_S] [--steps N]   -> one JSON line
#include <sys/resource.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_nsec);
}

uint64_t cpu_ns() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (static_cast<uint64_t>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1'000'000u +
          static_cast<uint64_t>(u.ru_utime.tv_usec + u.ru_stime.tv_usec)) * 1000u;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t rate = 50, steps = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    char* end = nullptr;
    const uint64_t v = std::strtoull(argv[i + 1], &end, 10);
    if (end == argv[i + 1] || *end != '\0' || v == 0) {
      std::fprintf(stderr, "pace_floor: %s wants a positive integer, not '%s'\n", argv[i], argv[i + 1]);
      return 2;
    }
    if (std::strcmp(argv[i], "--rate") == 0) {
      rate = v;
    } else if (std::strcmp(argv[i], "--steps") == 0) {
      steps = v;
    } else {
      std::fprintf(stderr, "usage: pace_floor [--rate STEPS_PER_S] [--steps N]\n");
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "usage: pace_floor [--rate STEPS_PER_S] [--steps N]\n");
    return 2;
  }
  const uint64_t start = now_ns();
  const uint64_t cpu0 = cpu_ns();
  for (uint64_t t = 0; t < steps; ++t) {
    const uint64_t due = start + t * 1'000'000'000 / rate;
    const timespec at{static_cast<time_t>(due / 1'000'000'000), static_cast<long>(due % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) != 0) {
    }
  }
  const uint64_t cpu = cpu_ns() - cpu0;
  std::printf("{\"rate\": %llu, \"steps\": %llu, \"cpu_ns_per_step\": %.0f}\n", static_cast<unsigned long long>(rate),
              static_cast<unsigned long long>(steps), static_cast<double>(cpu) / static_cast<double>(steps));
  return 0;
}
