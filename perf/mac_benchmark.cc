// mac_benchmark.cc — what authentication costs a datagram: sealing (the
// source: frame + SipHash-2-4 MAC frame) and unsealing (the mirror: check
// and strip), against framing alone, over datagram sizes; and the
// handshake's HMAC-SHA256 proof, once per connection; and the control
// frame MAC (ChaCha20-Poly1305's tag) per frame, against HMAC-SHA256.
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "dataplane/datagram_tag.h"
#include "net/auth.h"
#include "net/datagram_mac.h"
#include "net/frame_mac.h"
#include "proto/data_framer.h"

namespace ringfire::dataplane {
namespace {

// frame fills `buf` with one DATA frame of `records` 64-byte records.
size_t frame(std::vector<std::byte>& buf, size_t records, uint64_t seq) {
  proto::DataFramer f(64, 7);
  f.begin(buf.data(), buf.size());
  std::byte rec[64] = {};
  for (size_t i = 0; i < records; ++i) f.add(seq + i, rec, sizeof(rec));
  return f.finish();
}

void BM_DatagramFrameOnly(benchmark::State& state) {
  std::vector<std::byte> buf(1500);
  uint64_t seq = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(frame(buf, static_cast<size_t>(state.range(0)), seq++));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_DatagramSeal(benchmark::State& state) {
  std::vector<std::byte> buf(1500);
  net::MacKey key;
  key.bytes.fill(3);
  uint64_t seq = 0;
  for (auto _ : state) {
    const size_t n = frame(buf, static_cast<size_t>(state.range(0)), seq++);
    benchmark::DoNotOptimize(seal(key, buf.data(), n, 7));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * (16 + state.range(0) * 64 + 16));
}

void BM_DatagramUnseal(benchmark::State& state) {
  std::vector<std::byte> buf(1500);
  net::MacKey key;
  key.bytes.fill(3);
  const size_t n = seal(key, buf.data(), frame(buf, static_cast<size_t>(state.range(0)), 0), 7);
  proto::ConstBytes inner;
  for (auto _ : state) {
    benchmark::DoNotOptimize(unseal(key, proto::ConstBytes(buf.data(), n), &inner));
    benchmark::DoNotOptimize(inner);
  }
  state.SetItemsProcessed(state.iterations());
}

// The unkeyed session's datagram tag (PROTOCOL.md §1.8.1): the mirror's
// check and strip of the 16-byte TAG frame; the source appends it by
// scatter-gather (no work per datagram beyond an iovec or a 16-byte copy).
void BM_DatagramTagCheck(benchmark::State& state) {
  std::vector<std::byte> buf(1500);
  const TagFrame tag = TagFrame::of(7, 0x8badf00ddeadbeefull);
  size_t n = frame(buf, static_cast<size_t>(state.range(0)), 0);
  std::memcpy(buf.data() + n, tag.bytes.data(), tag.bytes.size());
  n += tag.bytes.size();
  proto::ConstBytes inner;
  for (auto _ : state) {
    benchmark::DoNotOptimize(strip_tag(tag, proto::ConstBytes(buf.data(), n), &inner));
    benchmark::DoNotOptimize(inner);
  }
  state.SetItemsProcessed(state.iterations());
}

// 1, 8 and 22 records of 64 bytes: a lone record, a small frame, a full
// 1472-byte datagram (22 x 64 + 16 + 16 = 1440).
BENCHMARK(BM_DatagramFrameOnly)->Arg(1)->Arg(8)->Arg(22);
BENCHMARK(BM_DatagramSeal)->Arg(1)->Arg(8)->Arg(22);
BENCHMARK(BM_DatagramUnseal)->Arg(1)->Arg(8)->Arg(22);
BENCHMARK(BM_DatagramTagCheck)->Arg(1)->Arg(22);

void BM_HandshakeProof(benchmark::State& state) {
  net::Psk psk;
  psk.key.assign(32, 0x42);
  const net::Nonce a = net::random_nonce(), b = net::random_nonce();
  std::vector<std::byte> hello(64);
  for (auto _ : state) benchmark::DoNotOptimize(net::source_proof(psk, hello, a, b));
}
BENCHMARK(BM_HandshakeProof);

// The control frame MAC (§1.8.2): ChaCha20-Poly1305's tag over one frame,
// per frame size (a 56-byte NAK, a 1 KiB MUXCTL, a 64 KiB TCP-mode DATA
// frame), against HMAC-SHA256 over the same bytes (the other choice a
// per-frame MAC had, and what a TLS 1.3 record would also spend on top of
// encrypting the frame).
void BM_ControlFrameMac(benchmark::State& state) {
  net::FrameKey k;
  k.bytes.fill(7);
  net::FrameMac mac(k);
  std::vector<std::byte> frame(static_cast<size_t>(state.range(0)), std::byte{1});
  std::byte tag[net::kFrameTagBytes];
  for (auto _ : state) {
    mac.seal(frame, tag);
    benchmark::DoNotOptimize(tag);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_ControlFrameMac)->Arg(56)->Arg(1024)->Arg(65536);

void BM_ControlFrameHmacSha256(benchmark::State& state) {
  net::Psk psk;
  psk.key.assign(32, 0x42);
  const net::Nonce a = net::random_nonce();
  std::vector<std::byte> frame(static_cast<size_t>(state.range(0)), std::byte{1});
  for (auto _ : state) benchmark::DoNotOptimize(net::source_proof(psk, frame, a, a));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_ControlFrameHmacSha256)->Arg(56)->Arg(1024)->Arg(65536);

}  // namespace
}  // namespace ringfire::dataplane

BENCHMARK_MAIN();
