// packet_raw.cc — the packet path alone, without rings or the mirroring
// protocol: the ceiling every mirror figure is stated against. The same
// ports the product uses (KernelUdp or DpdkPort, 64-byte UDP payloads).
//
//   packet_raw reflect  PORT-OPTIONS                 send every datagram back
//   packet_raw ping     PORT-OPTIONS --peer A:P --count N [--json F]
//                        one datagram in flight; the round trip of each
//   packet_raw blast    PORT-OPTIONS --peer A:P --seconds S [--rate R]
//                        bursts of 32 flat out (or R datagrams/s)
//   packet_raw count    PORT-OPTIONS --seconds S [--json F]
//                        datagrams received per second, best second and mean
//
// PORT-OPTIONS: --backend kernel|dpdk --ip ADDR --port N [--eal "ARGS"]
// [--size BYTES] (UDP payload, default 64)
// (kernel: bind ADDR:N; dpdk: the port's address, EAL from --eal).
// Every mode spins: pin it (taskset) to a core of its own.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dataplane/kernel_udp.h"
#include "perf/histogram.h"
#include "perf/json_out.h"
#include "perf/tsc.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include "dataplane/dpdk_port.h"
#endif

namespace ringfire::perf {
namespace {

using net::Endpoint;
using dataplane::RxDatagram;
using dataplane::TxDatagram;
// SIGTERM/SIGINT end the loops, so the process exits normally and DPDK's
// clean-up (an af_xdp port's XDP program, a memif socket) runs.
volatile std::sig_atomic_t g_stop = 0;

struct Options {
  std::string mode;
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  uint64_t num(const std::string& k, uint64_t def) const {
    uint64_t v = def;
    if (kv.count(k) && !absl::SimpleAtoi(kv.at(k), &v)) {
      std::fprintf(stderr, "packet_raw: --%s wants a number\n", k.c_str());
      std::exit(2);
    }
    return v;
  }
};

template <typename Port>
int reflect(Port& port) {
  RxDatagram rx[dataplane::kBurst];
  TxDatagram tx[dataplane::kBurst];
  while (!g_stop) {
    const size_t n = port.rx_burst(rx, dataplane::kBurst);
    for (size_t i = 0; i < n; ++i) tx[i] = TxDatagram{rx[i].payload, rx[i].from};
    if (n) port.tx_burst(tx, n);
  }
  return 0;
}

template <typename Port>
int ping(Port& port, const Options& o, Endpoint peer) {
  const uint64_t count = o.num("count", 100000);
  const size_t size = o.num("size", 64);
  const double per_ns = tsc_per_ns();
  LatencyHistogram h;
  std::byte buf[1472] = {};
  RxDatagram rx[dataplane::kBurst];
  uint64_t lost = 0;
  for (uint64_t i = 0; i < count + 1000; ++i) {  // the first 1000 warm up (and resolve ARP)
    std::memcpy(buf, &i, sizeof(i));
    const TxDatagram tx{proto::ConstBytes(buf, size), peer};
    const uint64_t t0 = tsc();
    port.tx_burst(&tx, 1);
    bool back = false;
    while (!back && tsc() - t0 < static_cast<uint64_t>(per_ns * 50e6)) {  // 50 ms
      const size_t n = port.rx_burst(rx, dataplane::kBurst);
      for (size_t k = 0; k < n; ++k) {
        uint64_t seq;
        if (rx[k].payload.size() < sizeof(seq)) continue;
        std::memcpy(&seq, rx[k].payload.data(), sizeof(seq));
        back |= seq == i;
      }
    }
    const uint64_t t1 = tsc();
    if (i < 1000) continue;
    if (back) {
      h.record(static_cast<uint64_t>(static_cast<double>(t1 - t0) / per_ns));
    } else {
      ++lost;
    }
  }
  const std::string body = absl::StrCat("\"harness\": \"packet_raw ping\", \"lost\": ", lost, ", ",
                                        latency_json(h));
  std::printf("packet_raw ping: %llu round trips, p50 %.1f us, p99 %.1f us, %llu lost\n",
              static_cast<unsigned long long>(h.count()), h.percentile(0.5) / 1e3,
              h.percentile(0.99) / 1e3, static_cast<unsigned long long>(lost));
  return write_json(o.get("json", "/dev/null"), body) ? 0 : 1;
}

template <typename Port>
int blast(Port& port, const Options& o, Endpoint peer) {
  const uint64_t seconds = o.num("seconds", 5);
  const uint64_t rate = o.num("rate", 0);
  const size_t size = o.num("size", 64);
  std::byte buf[1472] = {};
  TxDatagram tx[dataplane::kBurst];
  RxDatagram rx[dataplane::kBurst];
  for (auto& t : tx) t = TxDatagram{proto::ConstBytes(buf, size), peer};
  const uint64_t start = monotonic_ns(), end = start + seconds * 1'000'000'000u;
  uint64_t sent = 0;
  for (uint64_t now = start; now < end; now = monotonic_ns()) {
    port.rx_burst(rx, dataplane::kBurst);  // a DPDK port answers and learns ARP here
    if (rate != 0 && sent * 1'000'000'000u > rate * (now - start)) continue;
    sent += port.tx_burst(tx, dataplane::kBurst);
  }
  std::printf("packet_raw blast: %llu datagrams handed to the port, %.0f/s\n",
              static_cast<unsigned long long>(sent), static_cast<double>(sent) / static_cast<double>(seconds));
  return 0;
}

template <typename Port>
int count(Port& port, const Options& o) {
  const uint64_t seconds = o.num("seconds", 5);
  RxDatagram rx[dataplane::kBurst];
  uint64_t total = 0, best = 0, in_second = 0, counted_seconds = 0;
  uint64_t first = 0, second_end = 0, end = 0;
  const uint64_t give_up = monotonic_ns() + 30'000'000'000u;
  while (!g_stop) {
    const size_t n = port.rx_burst(rx, dataplane::kBurst);
    if (n == 0 && first == 0) {
      if (monotonic_ns() < give_up) continue;
      std::fprintf(stderr, "packet_raw count: nothing arrived in 30 s\n");
      return 1;
    }
    const uint64_t now = monotonic_ns();
    if (first == 0) {  // the clock starts with the first datagram
      first = now;
      second_end = now + 1'000'000'000u;
      end = now + seconds * 1'000'000'000u;
    }
    if (now >= second_end) {
      best = std::max(best, in_second);
      total += in_second;
      ++counted_seconds;
      in_second = 0;
      second_end += 1'000'000'000u;
      if (now >= end) break;
    }
    in_second += n;
  }
  if (counted_seconds == 0) return 1;  // stopped before a whole second
  const double mean = static_cast<double>(total) / static_cast<double>(counted_seconds);
  std::printf("packet_raw count: best second %llu datagrams/s, mean %.0f/s over %llu s\n",
              static_cast<unsigned long long>(best), mean, static_cast<unsigned long long>(counted_seconds));
  const std::string body = absl::StrCat("\"harness\": \"packet_raw count\", \"best_pps\": ", best,
                                        ", \"mean_pps\": ", static_cast<uint64_t>(mean));
  return write_json(o.get("json", "/dev/null"), body) ? 0 : 1;
}

template <typename Port>
int run(Port& port, const Options& o) {
  if (o.mode == "reflect") return reflect(port);
  if (o.mode == "count") return count(port, o);
  auto peer = net::parse_endpoint(o.get("peer"));
  if (!peer.ok()) {
    std::fprintf(stderr, "packet_raw: --peer: %s\n", std::string(peer.status().message()).c_str());
    return 2;
  }
  if (o.mode == "ping") return ping(port, o, *peer);
  if (o.mode == "blast") return blast(port, o, *peer);
  std::fprintf(stderr, "packet_raw: mode: reflect, ping, blast or count\n");
  return 2;
}

int main_(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: packet_raw reflect|ping|blast|count --backend kernel|dpdk --ip A --port N ...\n");
    return 2;
  }
  Options o;
  o.mode = argv[1];
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGINT, [](int) { g_stop = 1; });
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) != 0) {
      std::fprintf(stderr, "packet_raw: unexpected '%s'\n", argv[i]);
      return 2;
    }
    o.kv[argv[i] + 2] = argv[i + 1];
  }
  if (o.num("size", 64) < 8 || o.num("size", 64) > 1472) {
    std::fprintf(stderr, "packet_raw: --size: 8 to 1472 bytes\n");
    return 2;
  }
  auto ip = net::parse_endpoint(o.get("ip", "0.0.0.0"), 0);
  if (!ip.ok()) {
    std::fprintf(stderr, "packet_raw: --ip: %s\n", std::string(ip.status().message()).c_str());
    return 2;
  }
  const auto udp_port = static_cast<uint16_t>(o.num("port", 9000));
  if (o.get("backend", "kernel") == "kernel") {
    dataplane::UdpOptions uo;
    uo.bind = Endpoint{ip->ip, udp_port};
    auto port = dataplane::KernelUdp::open(uo);
    if (!port.ok()) {
      std::fprintf(stderr, "packet_raw: %s\n", std::string(port.status().message()).c_str());
      return 2;
    }
    return run(*port, o);
  }
#if RINGFIRE_HAVE_DPDK
  if (absl::Status st = dataplane::eal_init(o.get("eal")); !st.ok()) {
    std::fprintf(stderr, "packet_raw: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  dataplane::DpdkPortOptions po;
  po.ip = ip->ip;
  po.udp_port = udp_port;
  auto port = dataplane::DpdkPort::open(po);
  if (!port.ok()) {
    std::fprintf(stderr, "packet_raw: %s\n", std::string(port.status().message()).c_str());
    return 2;
  }
  return run(*port, o);
#else
  std::fprintf(stderr, "packet_raw: this build has no DPDK backend\n");
  return 2;
#endif
}

}  // namespace
}  // namespace ringfire::perf

int main(int argc, char** argv) { return ringfire::perf::main_(argc, argv); }
