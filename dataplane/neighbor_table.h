// neighbor_table.h — a kernel-bypass port's IPv4 → MAC table, looked up
// per transmitted datagram (open addressing: one or two probes, never a
// scan). Who may set an entry, strongest first:
//   pinned   the operator's (--neighbor, `neighbors = ...`): never changed;
//   arp      an ARP frame (a reply, or a request naming its sender): updates
//            any entry but a pinned one;
//   seen     a UDP datagram to one of the port's bindings (an af_xdp port
//            never sees ARP, the kernel does): fills an absent entry only, so
//            a stranger's datagram with a forged source address cannot
//            redirect a peer the port already knows.
// A full table refuses new entries (counted by the caller). `version`
// changes whenever any entry's MAC does, so header templates built from
// the table know when to rebuild. Worker thread only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "proto/net/ethernet.h"

namespace ringfire::dataplane {

class NeighborTable {
 public:
  enum class Source : uint8_t { kSeen, kArp, kPinned };
  static constexpr size_t kCapacity = 256;  // entries; the table has twice as many slots

  // set records `mac` for `ip` from `source`; false if the table is full
  // (or ip is 0, or mac a multicast one). An entry a stronger source set is
  // kept; a `seen` datagram never changes an existing entry.
  bool set(uint32_t ip, const proto::net::MacAddr& mac, Source source) {
    if (ip == 0 || proto::net::is_multicast_mac(mac)) return false;
    Slot& s = slots_[index(ip)];
    if (s.ip == ip) {
      if (s.source == Source::kPinned || source == Source::kSeen) return true;
      if (s.mac != mac) ++version_;
      s.mac = mac;
      s.source = std::max(s.source, source);
      return true;
    }
    if (size_ == kCapacity) return false;
    s = Slot{ip, mac, source};
    ++size_;
    ++version_;
    return true;
  }

  const proto::net::MacAddr* get(uint32_t ip) const {
    const Slot& s = slots_[index(ip)];
    return s.ip == ip && ip != 0 ? &s.mac : nullptr;
  }

  size_t size() const { return size_; }
  uint64_t version() const { return version_; }

 private:
  struct Slot {
    uint32_t ip = 0;  // 0: empty
    proto::net::MacAddr mac{};
    Source source = Source::kSeen;
  };
  static constexpr size_t kSlots = 2 * kCapacity;

  // index: ip's slot, or the empty slot where it would go (there is
  // always one: at most half the slots are used).
  size_t index(uint32_t ip) const {
    static_assert(kSlots == 512);
    size_t i = (ip * 0x9E3779B1u) >> (32 - 9);  // Fibonacci hash onto 512 slots
    while (slots_[i].ip != 0 && slots_[i].ip != ip) i = (i + 1) & (kSlots - 1);
    return i;
  }

  std::array<Slot, kSlots> slots_{};
  size_t size_ = 0;
  uint64_t version_ = 0;
};

}  // namespace ringfire::dataplane
