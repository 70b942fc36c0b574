// fuzz_mux_receiver.cc — libFuzzer target for the mux's receive side: the
// input is a hostile peer's batches (each a u16 length, little-endian, then
// its bytes) applied in order to a receiver holding three registered
// streams and one ticket (anchor 4, session 7: an OpenSlot naming it
// registers a fourth through the claim hook), with this node's own sender
// as the owner side; the consumer reads after each batch, and the peer is
// lost at the end. Oracles: the ticket is claimed at most once, every
// stream ends at most once, never holds more than C + 1 items, and the
// byte accounting is back to zero once every stream is read to its end.
#include <cstring>
#include <vector>

#include "mux/peer_receiver.h"
#include "mux/peer_sender.h"
#include "tests/fuzz/require.h"

using namespace ringfire;

namespace {

// Ticket: the consumer's one ticket, claimed at most once.
struct Ticket {
  mux::PeerReceiver* rx = nullptr;
  std::vector<mux::PeerReceiver::Stream*>* streams = nullptr;
  std::vector<int>* ends = nullptr;
  int claims = 0;
  static mux::PeerReceiver::Stream* claim(void* self, void*, uint64_t anchor, uint64_t session, uint64_t now) {
    auto* t = static_cast<Ticket*>(self);
    if (anchor != 4 || session != 7 || t->claims != 0) return nullptr;
    mux::PeerReceiver::Stream* s = t->rx->expect(anchor, session, 4, now);
    if (s == nullptr) return nullptr;
    ++t->claims;
    t->streams->push_back(s);
    t->ends->push_back(0);
    return s;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mux::MuxConfig c;
  c.enabled = true;
  c.initial_credit = 4;
  c.max_streams_per_peer = 64;
  mux::PeerReceiver rx(c);
  mux::PeerSender owner(c, 1);
  owner.open(9, 9, 4, 0);  // one stream of ours to the peer, for its credit and closes
  std::vector<mux::PeerReceiver::Stream*> streams;
  std::vector<int> ends;
  std::vector<size_t> held;
  for (uint64_t a = 1; a <= 3; ++a) {
    streams.push_back(rx.expect(a, 7, c.initial_credit));
    ends.push_back(0);
    held.push_back(0);
  }
  Ticket ticket{&rx, &streams, &ends};
  rx.set_claim_hook(&Ticket::claim, &ticket, nullptr);
  auto read_all = [&] {
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i] == nullptr) continue;
      mux::StreamItem item;
      while (rx.pop(streams[i], &item)) {
        if (item.kind != mux::StreamItem::Kind::kData) {
          ++ends[i];
          streams[i] = nullptr;  // freed by the pop that returned its end
          break;
        }
      }
    }
  };
  // The control buffer is scratch, its contents never read back: one for
  // the process (a 64 KiB zeroed allocation per input was most of an
  // input's cost under ASan).
  static std::vector<std::byte> back(64 * 1024);
  size_t pos = 0;
  uint64_t now = 0;
  while (pos + 2 <= size) {
    uint16_t len;
    std::memcpy(&len, data + pos, 2);
    pos += 2;
    len = static_cast<uint16_t>(std::min<size_t>(len, size - pos));
    rx.apply(proto::ConstBytes(reinterpret_cast<const std::byte*>(data + pos), len), now += 1000, &owner);
    pos += len;
    if ((len & 1) != 0) read_all();  // sometimes the consumer lags
    while (rx.build_control(back, 1, now) != 0) {
    }
    while (owner.build(now, back) != 0) {
    }
  }
  read_all();
  rx.peer_lost();
  read_all();
  for (size_t i = 0; i < ends.size(); ++i) REQUIRE(ends[i] <= 1);
  REQUIRE(ticket.claims <= 1 && rx.stats().claimed_on_open == static_cast<uint64_t>(ticket.claims));
  REQUIRE(rx.buffered_bytes() == 0 || rx.live_streams() != 0);
  return 0;
}
