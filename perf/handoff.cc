// handoff.cc — cross-process hand-off latency through a ring, against the
// bare cache-line one-way time between the same two cores in the same run.
//
// A publisher process pinned to one core stamps each record with the TSC and
// publishes it; a reader process pinned to another busy-polls and records
// now - stamp. First the same exchange is done through one shared cache line
// (stamp + sequence word), the floor any hand-off between the two cores pays.
// Prints percentiles and writes JSON. Run on two idle cores: both spin.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "perf/histogram.h"
#include "perf/tsc.h"
#include "ring/consumer.h"
#include "ring/idle.h"
#include "ring/producer.h"

namespace ringfire::perf {
namespace {

struct Options {
  uint64_t samples = 200000;
  uint32_t size = 64;
  uint64_t interval_ns = 2000;
  int cpu_pub = 0;
  int cpu_read = 1;
  std::string json;
};

struct Summary {
  uint64_t count, min, p50, p90, p99, p999, max, skewed;
};

// Sampler records now - stamp, counting (and recording as 0) the samples
// where the reader's TSC is behind the writer's: cross-core TSC skew.
struct Sampler {
  LatencyHistogram hist;
  uint64_t skewed = 0;
  void add(uint64_t now, uint64_t stamp) {
    if (now < stamp) {
      ++skewed;
      hist.record(0);
    } else {
      hist.record(now - stamp);
    }
  }
};

// Shared is mapped before fork: the ping-pong line, phase flags, results.
struct Shared {
  alignas(64) std::atomic<uint64_t> line_seq;
  std::atomic<uint64_t> line_stamp;
  alignas(64) std::atomic<int> phase;  // 0 start, 1 reader ready, 3 done
  alignas(64) Summary line;
  Summary ring;
};

Summary summarize(const Sampler& s, double tpn) {
  const LatencyHistogram& h = s.hist;
  auto ns = [&](uint64_t ticks) { return static_cast<uint64_t>(static_cast<double>(ticks) / tpn); };
  return Summary{h.count(),           ns(h.min()),          ns(h.percentile(0.5)),
                 ns(h.percentile(0.9)), ns(h.percentile(0.99)), ns(h.percentile(0.999)),
                 ns(h.max()),         s.skewed};
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::fprintf(stderr, "handoff: cannot pin to cpu %d (continuing unpinned)\n", cpu);
  }
}

void wait_phase(Shared* s, int at_least) {
  while (s->phase.load(std::memory_order_acquire) < at_least) ring::cpu_relax();
}

// reader runs in the child. Each round the publisher makes one cache-line
// exchange and, half an interval later, one ring hand-off; the reader polls
// both in one loop, so the two are measured under the same core placement
// and scheduler noise (the VM's vCPU placement changes run to run).
void reader(Shared* s, const Options& o, const std::string& ring_name, double tpn) {
  pin(o.cpu_read);
  const uint64_t warmup = o.samples / 10;
  auto c = ring::Consumer::attach(*ring::RingFile::open(ring_name), ring::StartPosition::latest());
  std::vector<std::byte> buf(o.size);
  Sampler line;
  Sampler hand;
  s->phase.store(1, std::memory_order_release);
  uint64_t line_seen = 0;
  for (uint64_t ring_next = 0; ring_next < o.samples;) {
    const uint64_t v = s->line_seq.load(std::memory_order_acquire);
    if (v != line_seen) {
      const uint64_t stamp = s->line_stamp.load(std::memory_order_relaxed);
      const uint64_t now = tsc();
      // A stamp of a later round (the publisher moved on while we read)
      // would under-report: keep only consistent pairs.
      if (s->line_seq.load(std::memory_order_acquire) == v && v > warmup) line.add(now, stamp);
      line_seen = v;
    }
    const ring::ReadResult r = c->try_read(buf.data());
    if (!r.ok) {
      ring::cpu_relax();
      continue;
    }
    const uint64_t now = tsc();
    uint64_t stamp;
    std::memcpy(&stamp, buf.data(), 8);
    if (r.seq >= warmup) hand.add(now, stamp);
    ring_next = r.seq + 1;
  }
  s->line = summarize(line, tpn);
  s->ring = summarize(hand, tpn);
  s->phase.store(3, std::memory_order_release);
}

void publisher(Shared* s, const Options& o, const std::string& ring_name, double tpn) {
  pin(o.cpu_pub);
  const auto half = static_cast<uint64_t>(static_cast<double>(o.interval_ns) * tpn / 2);
  auto p = ring::Producer::attach(*ring::RingFile::open(ring_name));
  wait_phase(s, 1);
  // Both processes have the ring mapped: unlink it now, so that even a
  // killed run leaves nothing in /dev/shm.
  (void)ring::RingFile::remove(ring_name);
  uint64_t next = tsc();
  for (uint64_t i = 0; i < o.samples; ++i) {
    while (tsc() < next) ring::cpu_relax();
    next += half;
    s->line_stamp.store(tsc(), std::memory_order_relaxed);
    s->line_seq.store(i + 1, std::memory_order_release);
    while (tsc() < next) ring::cpu_relax();
    next += half;
    std::byte* rec = p->claim();
    const uint64_t stamp = tsc();
    std::memcpy(rec, &stamp, 8);
    p->commit();
  }
  wait_phase(s, 3);
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    uint64_t v = 0;
    if (a == "--samples" && absl::SimpleAtoi(value(), &v)) {
      o->samples = v;
    } else if (a == "--size" && absl::SimpleAtoi(value(), &v) && v >= 8) {
      o->size = static_cast<uint32_t>(v);
    } else if (a == "--interval-ns" && absl::SimpleAtoi(value(), &v)) {
      o->interval_ns = v;
    } else if (a == "--cpus") {
      std::vector<std::string> cpus = absl::StrSplit(value(), ',');
      if (cpus.size() != 2 || !absl::SimpleAtoi(cpus[0], &o->cpu_pub) ||
          !absl::SimpleAtoi(cpus[1], &o->cpu_read)) {
        return false;
      }
    } else if (a == "--json") {
      o->json = value();
    } else {
      return false;
    }
  }
  return o->samples >= 10;
}

void print(const char* what, const Summary& s) {
  std::printf("%-20s n=%llu min %llu p50 %llu p90 %llu p99 %llu p99.9 %llu max %llu ns"
              " (%llu skewed)\n", what,
              static_cast<unsigned long long>(s.count), static_cast<unsigned long long>(s.min),
              static_cast<unsigned long long>(s.p50), static_cast<unsigned long long>(s.p90),
              static_cast<unsigned long long>(s.p99), static_cast<unsigned long long>(s.p999),
              static_cast<unsigned long long>(s.max), static_cast<unsigned long long>(s.skewed));
}

std::string json_of(const Summary& s) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "{\"count\": %llu, \"min_ns\": %llu, \"p50_ns\": %llu, \"p90_ns\": %llu, "
                "\"p99_ns\": %llu, \"p999_ns\": %llu, \"max_ns\": %llu, \"tsc_skewed\": %llu}",
                static_cast<unsigned long long>(s.count), static_cast<unsigned long long>(s.min),
                static_cast<unsigned long long>(s.p50), static_cast<unsigned long long>(s.p90),
                static_cast<unsigned long long>(s.p99), static_cast<unsigned long long>(s.p999),
                static_cast<unsigned long long>(s.max), static_cast<unsigned long long>(s.skewed));
  return buf;
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: handoff [--samples N] [--size BYTES>=8] [--interval-ns NS] "
                 "[--cpus PUB,READ] [--json FILE]\n");
    return 2;
  }
  const double tpn = tsc_per_ns();
  const std::string ring_name = "rf-handoff-" + std::to_string(getpid());
  ring::RingOptions ro;
  ro.name = ring_name;
  ro.capacity = 4096;
  ro.slot_size = o.size;
  if (auto f = ring::RingFile::create(ro); !f.ok()) {
    std::fprintf(stderr, "handoff: %s\n", std::string(f.status().message()).c_str());
    return 2;
  }
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* s = new (mem) Shared();
  const pid_t child = fork();
  if (child == 0) {
    reader(s, o, ring_name, tpn);
    _exit(0);
  }
  publisher(s, o, ring_name, tpn);
  waitpid(child, nullptr, 0);

  std::printf("handoff: %llu samples, %u-byte records, one every %llu ns, cpus %d -> %d, "
              "TSC %.3f GHz\n",
              static_cast<unsigned long long>(o.samples), o.size,
              static_cast<unsigned long long>(o.interval_ns), o.cpu_pub, o.cpu_read, tpn);
  print("cache line one-way", s->line);
  print("ring hand-off", s->ring);
  const double ratio = static_cast<double>(s->ring.p50) / static_cast<double>(s->line.p50 ? s->line.p50 : 1);
  std::printf("ratio p50 ring/line  %.2f\n", ratio);
  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (f == nullptr) {
      std::perror(o.json.c_str());
      return 2;
    }
    std::fprintf(f,
                 "{\"harness\": \"handoff\", \"samples\": %llu, \"record_bytes\": %u, "
                 "\"interval_ns\": %llu, \"cpus\": [%d, %d],\n \"cacheline\": %s,\n \"ring\": %s,\n"
                 " \"ratio_p50\": %.3f}\n",
                 static_cast<unsigned long long>(o.samples), o.size,
                 static_cast<unsigned long long>(o.interval_ns), o.cpu_pub, o.cpu_read,
                 json_of(s->line).c_str(), json_of(s->ring).c_str(), ratio);
    std::fclose(f);
  }
  return 0;
}

}  // namespace
}  // namespace ringfire::perf

int main(int argc, char** argv) { return ringfire::perf::run(argc, argv); }
