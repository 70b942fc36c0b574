// port_tx_benchmark.cc — what a port costs per datagram sent, and what each
// added destination costs (fan-out to N unicast mirrors; --dup N to one):
// the DPDK port on net_null (the PMD frees what it is given: the cost is
// ringfire's — header, copy, checksum, mbuf — and the mbuf pool's) beside
// the kernel backend sending to unicast peers through a veth in a namespace
// of its own (the kernel's UDP/IP/neighbor path; the far end drops them).
//   ip netns exec NS port_tx_benchmark   (perf/fanout_bench.sh makes NS)
// Counters: ns per datagram; the added cost per mirror is the slope
// between the 1- and 16-destination rows. Benchmarks are never tests.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "dataplane/datagram_tag.h"
#include "dataplane/kernel_udp.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include "dataplane/dpdk_port.h"
#endif

namespace ringfire::perf {
namespace {

using net::Endpoint;
using dataplane::TxDatagram;

constexpr uint32_t kSelf = 0xC612C801;  // 198.18.200.1: the namespace's veth
uint32_t peer(int i) { return 0xC612C802 + static_cast<uint32_t>(i); }  // 198.18.200.2...

// kTags: each destination's TAG frame (an unkeyed session's datagram tag,
// PROTOCOL.md §1.8.1), appended by the port as TxDatagram::trailer.
const std::vector<dataplane::TagFrame>& tags() {
  static const std::vector<dataplane::TagFrame> t = [] {
    std::vector<dataplane::TagFrame> v;
    for (int d = 0; d < 16; ++d) v.push_back(dataplane::TagFrame::of(7, 0x1000 + static_cast<uint64_t>(d)));
    return v;
  }();
  return t;
}

// burst: a serve's transmit of one DATA frame to `dests` mirrors, `dup`
// each, each destination's datagrams tagged if `tagged`.
std::vector<TxDatagram> burst(const std::vector<std::byte>& payload, int dests, int dup, bool tagged = false) {
  std::vector<TxDatagram> tx;
  for (int d = 0; d < dests; ++d) {
    for (int k = 0; k < dup; ++k) {
      tx.push_back(TxDatagram{proto::ConstBytes(payload.data(), payload.size()), Endpoint{peer(d), 7500}, 0,
                              nullptr, tagged ? tags()[static_cast<size_t>(d)].bytes.data() : nullptr});
    }
  }
  return tx;
}

template <typename SendFn>
void run(benchmark::State& state, SendFn send) {
  const auto size = static_cast<size_t>(state.range(0));
  const int dests = static_cast<int>(state.range(1));
  const int dup = static_cast<int>(state.range(2));
  const bool tagged = state.range(3) != 0;
  // A tagged datagram is the same size on the wire: 16 bytes of payload
  // fewer, then the TAG frame.
  std::vector<std::byte> payload(tagged ? size - proto::kTagFrameBytes : size, std::byte{0x5a});
  const std::vector<TxDatagram> tx = burst(payload, dests, dup, tagged);
  uint64_t sent = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < tx.size(); i += dataplane::kBurst) {
      sent += send(tx.data() + i, std::min(dataplane::kBurst, tx.size() - i));
    }
  }
  if (sent != tx.size() * state.iterations()) state.SkipWithError("the port refused datagrams");
  state.counters["ns_per_datagram"] = benchmark::Counter(static_cast<double>(tx.size()) * state.iterations(),
                                                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<int64_t>(tx.size() * state.iterations()));
}

void Kernel(benchmark::State& state) {
  static std::unique_ptr<dataplane::KernelUdp> sock = [] {
    dataplane::UdpOptions o;
    o.bind = Endpoint{kSelf, 7402};
    auto s = dataplane::KernelUdp::open(o);
    if (!s.ok()) {
      std::fprintf(stderr, "kernel: %s (run in the namespace perf/fanout_bench.sh makes)\n",
                   std::string(s.status().message()).c_str());
      return std::unique_ptr<dataplane::KernelUdp>();
    }
    return std::make_unique<dataplane::KernelUdp>(std::move(*s));
  }();
  if (!sock) {
    state.SkipWithError("no socket on 198.18.200.1");
    return;
  }
  run(state, [&](const TxDatagram* t, size_t n) { return sock->tx_burst(t, n); });
}

#if RINGFIRE_HAVE_DPDK
dataplane::DpdkPort* dpdk_port(bool share) {
  static std::unique_ptr<dataplane::DpdkPort> ports[2];
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (absl::Status st = dataplane::eal_init("-l 0 --no-huge -m 512 --no-pci --file-prefix=rf-txbench --vdev=net_null0 "
                                              "--vdev=net_null1 --log-level=*:error");
        !st.ok()) {
      std::fprintf(stderr, "dpdk: %s\n", std::string(st.message()).c_str());
      return nullptr;
    }
    for (int k = 0; k < 2; ++k) {
      auto id = dataplane::port_by_name(k == 0 ? "net_null0" : "net_null1");
      if (!id.ok()) return nullptr;
      dataplane::DpdkPortOptions o;
      o.port_id = *id;
      o.ip = kSelf;
      o.udp_port = static_cast<uint16_t>(7403 + k);  // the kernel socket holds 7402
      o.share_duplicates = k == 1;
      for (int i = 0; i < 16; ++i) o.neighbors.push_back({peer(i), {0x02, 0, 0, 0, 0xC8, static_cast<uint8_t>(2 + i)}});
      auto p = dataplane::DpdkPort::open(o);
      if (!p.ok()) {
        std::fprintf(stderr, "dpdk: %s\n", std::string(p.status().message()).c_str());
        return nullptr;
      }
      ports[k] = std::make_unique<dataplane::DpdkPort>(std::move(*p));
    }
  }
  return ports[share ? 1 : 0].get();
}

void Dpdk(benchmark::State& state, bool share) {
  dataplane::DpdkPort* p = dpdk_port(share);
  if (p == nullptr) {
    state.SkipWithError("no DPDK port on net_null");
    return;
  }
  run(state, [&](const TxDatagram* t, size_t n) { return p->tx_burst(t, n); });
}
void DpdkCopy(benchmark::State& state) { Dpdk(state, false); }
void DpdkShared(benchmark::State& state) { Dpdk(state, true); }

// A serve's frame from the framer's writes on: Staged writes the payload
// into a buffer of its own and the port copies it into an mbuf (before
// lease_tx); InPlace writes it into an mbuf the port lent, and the port
// sends that mbuf (other destinations still get a copy each). Duplicates
// shared in both. ns per datagram, the framer's one write included.
void DpdkFramed(benchmark::State& state, bool in_place) {
  dataplane::DpdkPort* p = dpdk_port(true);
  if (p == nullptr) {
    state.SkipWithError("no DPDK port on net_null");
    return;
  }
  const auto size = static_cast<size_t>(state.range(0));
  const int dests = static_cast<int>(state.range(1));
  const int dup = static_cast<int>(state.range(2));
  const std::vector<std::byte> records(size, std::byte{0x5a});
  std::vector<std::byte> staging(size);
  std::vector<TxDatagram> tx = burst(staging, dests, dup, state.range(3) != 0);
  uint64_t sent = 0, want = 0;
  for (auto _ : state) {
    dataplane::TxLease lease;
    std::byte* room = staging.data();
    if (in_place) {
      if (!p->lease_tx(&lease)) {
        state.SkipWithError("no mbuf to lend");
        return;
      }
      room = lease.room;
    }
    const size_t body = state.range(3) != 0 ? size - proto::kTagFrameBytes : size;
    std::memcpy(room, records.data(), body);  // the framer's writes
    for (TxDatagram& t : tx) {
      t.payload = proto::ConstBytes(room, body);
      t.lease = lease.handle;
    }
    for (size_t i = 0; i < tx.size(); i += dataplane::kBurst) {
      sent += p->tx_burst(tx.data() + i, std::min(dataplane::kBurst, tx.size() - i));
    }
    if (in_place) dataplane::DpdkPort::release_tx(lease.handle);
    want += tx.size();
  }
  if (sent != want) state.SkipWithError("the port refused datagrams");
  state.counters["ns_per_datagram"] = benchmark::Counter(static_cast<double>(want), benchmark::Counter::kIsRate |
                                                                                       benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<int64_t>(want));
}
void DpdkStaged(benchmark::State& state) { DpdkFramed(state, false); }
void DpdkInPlace(benchmark::State& state) { DpdkFramed(state, true); }
#endif

// Args: UDP payload bytes, destinations, datagrams per destination (dup),
// tagged (each destination's TAG frame as the port's trailer; the same
// bytes on the wire).
void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t size : {64, 1472}) {
    for (int64_t dests : {1, 4, 16}) {
      b->Args({size, dests, 1, 0});
      b->Args({size, dests, 1, 1});
    }
    b->Args({size, 1, 2, 0});
    b->Args({size, 1, 4, 0});
  }
}

BENCHMARK(Kernel)->Apply(Shapes);
#if RINGFIRE_HAVE_DPDK
BENCHMARK(DpdkCopy)->Apply(Shapes);
BENCHMARK(DpdkShared)->Apply(Shapes);
BENCHMARK(DpdkStaged)->Apply(Shapes);
BENCHMARK(DpdkInPlace)->Apply(Shapes);
#endif

}  // namespace
}  // namespace ringfire::perf

BENCHMARK_MAIN();
