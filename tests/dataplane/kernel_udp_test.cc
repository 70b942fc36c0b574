// kernel_udp_test.cc — the kernel backend's bursts on loopback: a run of
// datagrams sent as one UDP GSO send arrives as the same datagrams, byte
// for byte and in order; runs break where they must; a route that refuses
// GSO gets every datagram one send each.
#include "dataplane/kernel_udp.h"

#include "dataplane/kernel_port.h"

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "proto/frame.h"

namespace ringfire::dataplane {
namespace {

constexpr uint32_t kLoopback = 0x7f000001;

KernelUdp open_on_loopback(bool gso = true, bool gro = true) {
  UdpOptions o;
  o.bind = Endpoint{kLoopback, 0};
  o.max_datagram = 9000;
  o.gso = gso;
  o.gro = gro;
  auto s = KernelUdp::open(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// A datagram's bytes: its index, then a counting pattern.
std::vector<std::byte> payload(size_t index, size_t size) {
  std::vector<std::byte> b(size);
  for (size_t i = 0; i < size; ++i) b[i] = static_cast<std::byte>((index * 31 + i) & 0xff);
  return b;
}

using Datagrams = std::vector<std::vector<std::byte>>;

// receive reads from `rx` (a socket or a port), `per_call` datagrams a
// call at most, until *got holds `want` or 5 s passed.
template <typename Rx>
void receive(Rx& rx, size_t want, size_t per_call, Datagrams* got) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  RxDatagram d[kBurst];
  while (got->size() < want && std::chrono::steady_clock::now() < until) {
    const size_t n = rx.rx_burst(d, per_call);
    EXPECT_LE(n, per_call);
    for (size_t i = 0; i < n; ++i) got->emplace_back(d[i].payload.begin(), d[i].payload.end());
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// receive_all: what `rx` receives, until `want` datagrams or 5 s.
Datagrams receive_all(KernelUdp& rx, size_t want) {
  Datagrams got;
  receive(rx, want, kBurst, &got);
  return got;
}

// A burst's datagrams: sizes[i] bytes each (payload + trailer when the
// trailer is on), to `to`.
struct Burst {
  std::vector<std::vector<std::byte>> bodies;
  std::vector<std::array<std::byte, proto::kTagFrameBytes>> trailers;
  std::vector<TxDatagram> tx;
  std::vector<std::vector<std::byte>> expected;  // what each arrives as

  Burst(const std::vector<size_t>& sizes, const std::vector<Endpoint>& to, bool trailer)
      : trailers(sizes.size(), std::array<std::byte, proto::kTagFrameBytes>{}) {
    bodies.reserve(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t body = trailer ? sizes[i] - proto::kTagFrameBytes : sizes[i];
      bodies.push_back(payload(i, body));
      std::vector<std::byte> whole = bodies.back();
      if (trailer) {
        for (size_t k = 0; k < proto::kTagFrameBytes; ++k) trailers[i][k] = static_cast<std::byte>(0xa0 + i + k);
        whole.insert(whole.end(), trailers[i].begin(), trailers[i].end());
      }
      expected.push_back(std::move(whole));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      TxDatagram d;
      d.payload = proto::ConstBytes(bodies[i].data(), bodies[i].size());
      d.to = to[i % to.size()];
      d.trailer = trailer ? trailers[i].data() : nullptr;
      tx.push_back(d);
    }
  }
};

TEST(KernelUdp, ARunOfEqualDatagramsLeavesAsOneGsoSendAndArrivesAsTheSameDatagrams) {
  for (bool trailer : {false, true}) {
    KernelUdp tx = open_on_loopback();
    KernelUdp rx = open_on_loopback();
    // 20 of 1,000 bytes and a shorter last: one run.
    std::vector<size_t> sizes(20, 1000);
    sizes.push_back(300);
    Burst b(sizes, {rx.local()}, trailer);
    ASSERT_EQ(tx.tx_burst(b.tx.data(), b.tx.size()), sizes.size());
    EXPECT_EQ(tx.run_stats().gso_sends, 1u);
    EXPECT_EQ(tx.run_stats().gso_datagrams, sizes.size());
    EXPECT_FALSE(tx.run_stats().gso_refused);
    auto got = receive_all(rx, sizes.size());
    ASSERT_EQ(got.size(), sizes.size()) << "trailer " << trailer;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], b.expected[i]) << "datagram " << i;
    // The receiver took the run whole and handed it out one by one.
    EXPECT_EQ(rx.run_stats().gro_runs, 1u);
    EXPECT_EQ(rx.run_stats().gro_datagrams, sizes.size());
  }
}

// A run taken whole is handed out over as many calls as it takes: a
// caller that asks for a few at a time gets each once, in order.
TEST(KernelUdp, ARunTakenWholeIsHandedOutAFewAtATime) {
  KernelUdp tx = open_on_loopback();
  KernelUdp rx = open_on_loopback();
  std::vector<size_t> sizes(30, 700);
  sizes.push_back(10);
  Burst b(sizes, {rx.local()}, false);
  ASSERT_EQ(tx.tx_burst(b.tx.data(), b.tx.size()), sizes.size());
  Datagrams got;
  receive(rx, sizes.size(), 4, &got);
  ASSERT_EQ(got.size(), sizes.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], b.expected[i]) << "datagram " << i;
  EXPECT_FALSE(rx.rx_pending());
  EXPECT_EQ(rx.run_stats().gro_runs, 1u);
}

TEST(KernelUdp, RunsBreakAtADestinationALargerDatagramAndAfterAShorterOne) {
  KernelUdp tx = open_on_loopback();
  KernelUdp rx1 = open_on_loopback();
  KernelUdp rx2 = open_on_loopback();
  // To rx1: 500 500 200 | 500 500 | 800 ; then to rx2 alone: 500 500.
  std::vector<size_t> sizes = {500, 500, 200, 500, 500, 800, 500, 500};
  std::vector<Endpoint> to = {rx1.local(), rx1.local(), rx1.local(), rx1.local(),
                              rx1.local(), rx1.local(), rx2.local(), rx2.local()};
  Burst b(sizes, {Endpoint{}}, false);
  for (size_t i = 0; i < sizes.size(); ++i) b.tx[i].to = to[i];
  ASSERT_EQ(tx.tx_burst(b.tx.data(), b.tx.size()), sizes.size());
  // Sends of more than one: {500 500 200}, {500 500}, {500 500 to rx2}.
  EXPECT_EQ(tx.run_stats().gso_sends, 3u);
  EXPECT_EQ(tx.run_stats().gso_datagrams, 7u);
  auto got1 = receive_all(rx1, 6);
  auto got2 = receive_all(rx2, 2);
  ASSERT_EQ(got1.size(), 6u);
  ASSERT_EQ(got2.size(), 2u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(got1[i], b.expected[i]) << i;
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(got2[i], b.expected[6 + i]) << i;
}

TEST(KernelUdp, AlternatingDestinationsAndGsoOffSendOneDatagramAMessage) {
  KernelUdp rx1 = open_on_loopback();
  KernelUdp rx2 = open_on_loopback();
  {
    KernelUdp tx = open_on_loopback();
    Burst b(std::vector<size_t>(8, 600), {rx1.local(), rx2.local()}, false);
    ASSERT_EQ(tx.tx_burst(b.tx.data(), b.tx.size()), 8u);
    EXPECT_EQ(tx.run_stats().gso_sends, 0u);
  }
  {
    KernelUdp tx = open_on_loopback(/*gso=*/false);
    Burst b(std::vector<size_t>(8, 600), {rx1.local()}, false);
    ASSERT_EQ(tx.tx_burst(b.tx.data(), b.tx.size()), 8u);
    EXPECT_EQ(tx.run_stats().gso_sends, 0u);
  }
  EXPECT_EQ(receive_all(rx1, 12).size(), 12u);
  EXPECT_EQ(receive_all(rx2, 4).size(), 4u);
}

// A port whose one socket holds part of a run it read when a second
// binding comes (or another goes) still hands the rest out: epoll cannot
// see datagrams already read, so the port must remember the socket.
TEST(KernelPort, DatagramsAlreadyReadSurviveABindingAddedOrRemoved) {
  for (bool add : {true, false}) {
    KernelPortOptions po;
    po.gro = true;
    KernelPort port(po);
    auto prepare = [&] {
      auto p = KernelPort::prepare(po, BindSpec{kLoopback, 0, 0, false});
      EXPECT_TRUE(p.ok()) << p.status();
      return std::move(*p);
    };
    const BindingId a = port.install(prepare());
    BindingId other = 0;
    if (!add) {  // two more: one goes, and the port still reads through epoll
      other = port.install(prepare());
      port.install(prepare());
    }
    KernelUdp tx = open_on_loopback();
    Burst b(std::vector<size_t>(2 * kBurst, 500), {port.local(a)}, false);
    ASSERT_EQ(tx.tx_burst(b.tx.data(), kBurst), kBurst);
    ASSERT_EQ(tx.tx_burst(b.tx.data() + kBurst, kBurst), kBurst);
    Datagrams got;
    receive(port, kBurst, kBurst, &got);
    ASSERT_EQ(got.size(), kBurst) << "add " << add;
    if (add) {
      port.install(prepare());
    } else {
      port.uninstall(other);
    }
    receive(port, 2 * kBurst, kBurst, &got);
    ASSERT_EQ(got.size(), 2 * kBurst) << (add ? "after an install" : "after an uninstall")
                                      << ": datagrams read from the socket were never handed out";
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], b.expected[i]) << i;
  }
}

// In a network namespace of its own whose loopback has a 1,500-byte MTU,
// datagrams of 2,000 bytes cannot be segmented by GSO (the route refuses
// it): each is sent alone (IP fragments it) and every one arrives.
TEST(KernelUdp, ARouteThatRefusesGsoGetsEveryDatagramOneSendEach) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto fail = [](const char* what) {
      std::fprintf(stderr, "child: %s: %s\n", what, std::strerror(errno));
      _exit(2);
    };
    if (unshare(CLONE_NEWNET) != 0) fail("unshare(CLONE_NEWNET) (needs root)");
    const int s = socket(AF_INET, SOCK_DGRAM, 0);
    ifreq r{};
    std::strcpy(r.ifr_name, "lo");
    r.ifr_mtu = 1500;
    if (ioctl(s, SIOCSIFMTU, &r) != 0) fail("SIOCSIFMTU");
    if (ioctl(s, SIOCGIFFLAGS, &r) != 0) fail("SIOCGIFFLAGS");
    r.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &r) != 0) fail("SIOCSIFFLAGS");
    close(s);
    KernelUdp tx = open_on_loopback();
    KernelUdp rx = open_on_loopback();
    Burst b(std::vector<size_t>(6, 2000), {rx.local()}, false);
    const size_t sent = tx.tx_burst(b.tx.data(), b.tx.size());
    auto got = receive_all(rx, 6);
    bool same = got.size() == 6;
    for (size_t i = 0; same && i < 6; ++i) same = got[i] == b.expected[i];
    std::fprintf(stderr, "child: sent %zu, refused %d, gso sends %lu, received %zu, same %d\n", sent,
                 tx.run_stats().gso_refused, static_cast<unsigned long>(tx.run_stats().gso_sends), got.size(), same);
    _exit(sent == 6 && tx.run_stats().gso_refused && tx.run_stats().gso_sends == 0 && same ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's line above";
}

}  // namespace
}  // namespace ringfire::dataplane
