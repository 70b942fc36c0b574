// proto_benchmark.cc — Google Benchmark microbenchmarks of the codecs: frame
// header encode/decode, `_stream_batch` encode/decode over record counts
// (the mux's per-record cost p), and UDP frame headers with checksums.
#include <vector>

#include "benchmark/benchmark.h"
#include "proto/frame.h"
#include "proto/net/packet.h"
#include "proto/stream_batch.h"

namespace ringfire::proto {
namespace {

void BM_FrameHeaderEncode(benchmark::State& state) {
  std::byte buf[16];
  uint64_t seq = 0;
  for (auto _ : state) {
    encode_data_header(buf, seq++, 26, 26 * 56, 7);
    benchmark::DoNotOptimize(buf);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FrameHeaderEncode);

void BM_FrameHeaderDecode(benchmark::State& state) {
  std::byte buf[16];
  encode_data_header(buf, 42, 26, 26 * 56, 7);
  FrameHeader h;
  for (auto _ : state) {
    benchmark::DoNotOptimize(decode_frame_header(buf, 1 << 16, &h));
    benchmark::DoNotOptimize(h);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FrameHeaderDecode);

// A token-sized record body, as in the mux's serving workload.
constexpr size_t kTokenBytes = 40;

void BM_BatchEncode(benchmark::State& state) {
  const auto records = static_cast<uint32_t>(state.range(0));
  std::vector<std::byte> out(kBatchHeaderBytes + records * (kRecordHeaderBytes + kTokenBytes));
  std::vector<std::byte> token(kTokenBytes, std::byte{'t'});
  uint32_t seq = 0;
  for (auto _ : state) {
    BatchWriter w(out, 1, seq++);
    for (uint32_t i = 0; i < records; ++i) w.add_data(SlotId{i, 1}.pack(), seq, token);
    benchmark::DoNotOptimize(w.finish());
  }
  state.SetItemsProcessed(state.iterations() * records);
}
BENCHMARK(BM_BatchEncode)->Arg(1)->Arg(32)->Arg(256)->Arg(1024);

void BM_BatchDecode(benchmark::State& state) {
  const auto records = static_cast<uint32_t>(state.range(0));
  std::vector<std::byte> buf(kBatchHeaderBytes + records * (kRecordHeaderBytes + kTokenBytes));
  std::vector<std::byte> token(kTokenBytes, std::byte{'t'});
  BatchWriter w(buf, 1, 1);
  for (uint32_t i = 0; i < records; ++i) w.add_data(SlotId{i, 1}.pack(), 0, token);
  buf.resize(w.finish());
  for (auto _ : state) {
    BatchReader r;
    r.open(buf);
    BatchRecord rec;
    size_t bytes = 0;
    while (r.next(&rec)) bytes += rec.body.size();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(state.iterations() * records);
}
BENCHMARK(BM_BatchDecode)->Arg(1)->Arg(32)->Arg(256)->Arg(1024);

void BM_UdpFrameHeaders(benchmark::State& state) {
  const auto payload = static_cast<size_t>(state.range(0));
  const bool checksum = state.range(1) != 0;
  std::vector<std::byte> buf(net::kUdpFrameOverhead + payload, std::byte{3});
  net::UdpFlow f;
  f.src_ip = 0xC6120001;
  f.dst_ip = 0xEFFF0001;
  f.src_port = 7400;
  f.dst_port = 7401;
  uint16_t id = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(net::write_udp_headers(f, id++, payload, checksum, buf));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UdpFrameHeaders)->Args({64, 0})->Args({64, 1})->Args({1472, 0})->Args({1472, 1});

}  // namespace
}  // namespace ringfire::proto

BENCHMARK_MAIN();
