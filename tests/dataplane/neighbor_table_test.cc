// neighbor_table_test.cc — who may set a neighbor's MAC: a forged UDP
// source never moves a known peer; ARP does, but never a pinned entry; the
// table holds its capacity and refuses more; colliding addresses coexist.
#include "dataplane/neighbor_table.h"

#include "gtest/gtest.h"

namespace ringfire::dataplane {
namespace {

using Source = NeighborTable::Source;
constexpr proto::net::MacAddr kPeer{0x02, 0, 0, 0, 0, 0x01};
constexpr proto::net::MacAddr kForger{0x02, 0, 0, 0, 0, 0x66};
constexpr uint32_t kIp = 0xC6120001;  // 198.18.0.1

TEST(NeighborTable, ADatagramFillsAnAbsentEntryButNeverMovesAKnownOne) {
  NeighborTable t;
  EXPECT_EQ(t.get(kIp), nullptr);
  ASSERT_TRUE(t.set(kIp, kPeer, Source::kSeen));
  ASSERT_NE(t.get(kIp), nullptr);
  EXPECT_EQ(*t.get(kIp), kPeer);
  const uint64_t v = t.version();
  ASSERT_TRUE(t.set(kIp, kForger, Source::kSeen));  // a stranger's datagram "from" the peer
  EXPECT_EQ(*t.get(kIp), kPeer);
  EXPECT_EQ(t.version(), v);
}

TEST(NeighborTable, ArpUpdatesALearnedEntryButNotAPinnedOne) {
  NeighborTable t;
  ASSERT_TRUE(t.set(kIp, kPeer, Source::kSeen));
  const uint64_t v = t.version();
  ASSERT_TRUE(t.set(kIp, kForger, Source::kArp));  // the peer moved (or ARP says so)
  EXPECT_EQ(*t.get(kIp), kForger);
  EXPECT_GT(t.version(), v);
  ASSERT_TRUE(t.set(kIp, kPeer, Source::kSeen));  // once ARP set it, datagrams still cannot
  EXPECT_EQ(*t.get(kIp), kForger);

  NeighborTable pinned;
  ASSERT_TRUE(pinned.set(kIp, kPeer, Source::kPinned));
  ASSERT_TRUE(pinned.set(kIp, kForger, Source::kArp));
  ASSERT_TRUE(pinned.set(kIp, kForger, Source::kSeen));
  EXPECT_EQ(*pinned.get(kIp), kPeer);
}

TEST(NeighborTable, RefusesMulticastMacsAndAddressZero) {
  NeighborTable t;
  EXPECT_FALSE(t.set(0, kPeer, Source::kArp));
  EXPECT_FALSE(t.set(kIp, proto::net::MacAddr{0x01, 0x00, 0x5e, 0, 0, 1}, Source::kArp));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.get(0), nullptr);
}

TEST(NeighborTable, HoldsItsCapacityEachFindableAndRefusesMore) {
  NeighborTable t;
  // Addresses a hash may well collide: a /24 and a stride of 512.
  for (uint32_t i = 0; i < NeighborTable::kCapacity; ++i) {
    const uint32_t ip = i < 128 ? 0xC6120000 + i : 0xC6130000 + (i << 9);
    proto::net::MacAddr mac{0x02, 0, 0, 0, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
    ASSERT_TRUE(t.set(ip, mac, Source::kArp)) << i;
  }
  EXPECT_EQ(t.size(), NeighborTable::kCapacity);
  for (uint32_t i = 0; i < NeighborTable::kCapacity; ++i) {
    const uint32_t ip = i < 128 ? 0xC6120000 + i : 0xC6130000 + (i << 9);
    const proto::net::MacAddr* mac = t.get(ip);
    ASSERT_NE(mac, nullptr) << i;
    EXPECT_EQ((*mac)[5], static_cast<uint8_t>(i));
  }
  EXPECT_FALSE(t.set(0xC6140001, kPeer, Source::kArp));
  EXPECT_EQ(t.get(0xC6140001), nullptr);
  EXPECT_TRUE(t.set(0xC6120005, kPeer, Source::kArp));  // an update still works when full
  EXPECT_EQ(*t.get(0xC6120005), kPeer);
}

}  // namespace
}  // namespace ringfire::dataplane
