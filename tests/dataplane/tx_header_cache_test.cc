// tx_header_cache_test.cc — a destination's header is built once and
// reused; a neighbor whose MAC changes gets a rebuilt header; an unknown
// unicast neighbor has none; a group needs no neighbor; colliding
// destinations each get their own header.
#include "dataplane/tx_header_cache.h"

#include <vector>

#include "gtest/gtest.h"

namespace ringfire::dataplane {
namespace {

constexpr proto::net::MacAddr kSelf{0x02, 0, 0, 0, 0, 0x02};
constexpr proto::net::MacAddr kPeer{0x02, 0, 0, 0, 0, 0x01};
constexpr proto::net::MacAddr kMoved{0x02, 0, 0, 0, 0, 0x11};

// dst_mac: the destination MAC a template writes.
proto::net::MacAddr dst_mac(const proto::net::UdpTemplate& t) {
  std::vector<std::byte> b(proto::net::kUdpFrameOverhead + 4);
  t.stamp(b.data(), 1, 4, false);
  proto::net::MacAddr m;
  for (size_t i = 0; i < 6; ++i) m[i] = std::to_integer<uint8_t>(b[i]);
  return m;
}

TEST(TxHeaderCache, BuildsOnceRebuildsWhenTheNeighborMoves) {
  NeighborTable n;
  TxHeaderCache c({kSelf, 0xC6120002, 1});
  const Endpoint peer{0xC6120001, 7500};
  EXPECT_EQ(c.lookup(7402, peer, n), nullptr);  // not resolved yet
  ASSERT_TRUE(n.set(peer.ip, kPeer, NeighborTable::Source::kArp));
  const proto::net::UdpTemplate* t = c.lookup(7402, peer, n);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(dst_mac(*t), kPeer);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(c.lookup(7402, peer, n), t);
  EXPECT_EQ(c.builds(), 1u);
  EXPECT_EQ(c.hits(), 10u);
  ASSERT_TRUE(n.set(peer.ip, kMoved, NeighborTable::Source::kArp));
  t = c.lookup(7402, peer, n);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(dst_mac(*t), kMoved);
  EXPECT_EQ(c.builds(), 2u);
}

TEST(TxHeaderCache, AGroupNeedsNoNeighborAndCollidingDestinationsStayApart) {
  NeighborTable n;
  TxHeaderCache c({kSelf, 0xC6120002, 1});
  const proto::net::UdpTemplate* g = c.lookup(7402, Endpoint{0xEFFF0001, 7401}, n);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(dst_mac(*g), proto::net::multicast_mac(0xEFFF0001));
  // More destinations than entries: every lookup is still right.
  for (uint32_t i = 1; i <= 2 * TxHeaderCache::kEntries; ++i) {
    ASSERT_TRUE(n.set(0xC6120000 + (i % 250) + 1, proto::net::MacAddr{0x02, 0, 0, 0, 1, static_cast<uint8_t>(i % 250 + 1)},
                      NeighborTable::Source::kArp));
  }
  for (int round = 0; round < 2; ++round) {
    for (uint32_t i = 1; i <= 250; ++i) {
      const proto::net::UdpTemplate* t = c.lookup(static_cast<uint16_t>(7000 + round), Endpoint{0xC6120000 + i, 9000}, n);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(dst_mac(*t)[5], static_cast<uint8_t>(i));
    }
  }
}

}  // namespace
}  // namespace ringfire::dataplane
