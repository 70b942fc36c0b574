// ring_benchmark.cc — Google Benchmark microbenchmarks of the ring hot path:
// publish and read of 64 B, 256 B and 1 KiB records, blob publish.
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "ring/blob.h"
#include "ring/consumer.h"
#include "ring/producer.h"

namespace ringfire::ring {
namespace {

// BenchRing is a uniquely named ring removed when the benchmark ends.
struct BenchRing {
  explicit BenchRing(RingOptions o) {
    static int n = 0;
    o.name = "rf-bench-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    name = o.name;
    auto f = RingFile::create(o);
    if (!f.ok()) std::abort();
  }
  ~BenchRing() { (void)RingFile::remove(name); }
  RingFile open() const { return std::move(*RingFile::open(name)); }
  std::string name;
};

RingOptions fixed(uint32_t size) {
  RingOptions o;
  o.capacity = 1 << 16;
  o.slot_size = size;
  return o;
}

// FullRing is a ring filled once with 65,536 records and a reader that
// rewinds to the oldest when it runs dry (outside the timed region).
struct FullRing {
  explicit FullRing(uint32_t size) : ring(fixed(size)), producer(*Producer::attach(ring.open())) {
    std::vector<std::byte> rec(size, std::byte{1});
    for (int i = 0; i < (1 << 16); ++i) producer.publish(rec.data());
    rewind();
  }
  void rewind() { reader.emplace(*Consumer::attach(ring.open(), StartPosition::oldest())); }
  void rewind(benchmark::State& state) {
    state.PauseTiming();
    rewind();
    state.ResumeTiming();
  }
  BenchRing ring;
  Producer producer;
  std::optional<Consumer> reader;
};


void BM_RingPublish(benchmark::State& state) {
  const auto size = static_cast<uint32_t>(state.range(0));
  BenchRing r(fixed(size));
  auto p = Producer::attach(r.open());
  std::vector<std::byte> rec(size, std::byte{1});
  for (auto _ : state) {
    benchmark::DoNotOptimize(p->publish(rec.data()));
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * size);
}
BENCHMARK(BM_RingPublish)->Arg(64)->Arg(256)->Arg(1024);

void BM_RingRead(benchmark::State& state) {
  const auto size = static_cast<uint32_t>(state.range(0));
  FullRing f(size);
  std::vector<std::byte> out(size);
  for (auto _ : state) {
    ReadResult res = f.reader->try_read(out.data());
    if (!res.ok) f.rewind(state);
    benchmark::DoNotOptimize(res);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * size);
}
BENCHMARK(BM_RingRead)->Arg(64)->Arg(256)->Arg(1024);

void BM_RingReadBatch(benchmark::State& state) {
  const uint32_t size = 64;
  FullRing f(size);
  std::vector<std::byte> out(32 * size);
  uint64_t seqs[32];
  uint64_t lost = 0;
  int64_t records = 0;
  for (auto _ : state) {
    const size_t n = f.reader->read_batch(out.data(), seqs, 32, &lost);
    if (n == 0) f.rewind(state);
    records += static_cast<int64_t>(n);
  }
  state.SetItemsProcessed(records);
}
BENCHMARK(BM_RingReadBatch);

void BM_BlobPublish(benchmark::State& state) {
  const auto size = static_cast<uint32_t>(state.range(0));
  RingOptions o;
  o.capacity = 1 << 16;
  o.slot_size = sizeof(BlobDescriptor);
  o.arena_size = 64 << 20;
  o.flags = kFlagBlob;
  BenchRing r(o);
  auto p = BlobProducer::attach(r.open());
  std::vector<std::byte> rec(size, std::byte{1});
  for (auto _ : state) {
    benchmark::DoNotOptimize(p->publish(rec));
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * size);
}
BENCHMARK(BM_BlobPublish)->Arg(64)->Arg(256)->Arg(1024);

}  // namespace
}  // namespace ringfire::ring

BENCHMARK_MAIN();
