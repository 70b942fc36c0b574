// peer_mux_test.cc — an owner's PeerSender and a receiver's PeerReceiver
// joined by an in-order channel (and the control path back), as MUX.md
// lists the invariants: never more than C frames outstanding against the
// C + 1 buffer; exactly one end per stream, none for a finished one on peer
// loss; terminal-then-close in one batch; Manual moves nothing but liveness
// without a flush; a stale generation is never delivered; byte accounting
// back to zero; a starved slot never delays another; backpressure before
// the kill; a new epoch ends the old one's streams once and its late
// batches move nothing; a linger waits at most its time after a batch's
// first record. A seeded simulation checks them after every step, through
// epoch changes.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mux/peer_receiver.h"
#include "mux/peer_sender.h"

namespace ringfire::mux {
namespace {

using Kind = StreamItem::Kind;
constexpr uint64_t kMs = 1'000'000;

proto::ConstBytes bytes_of(const std::string& s) {
  return proto::ConstBytes(reinterpret_cast<const std::byte*>(s.data()), s.size());
}
std::string text(const StreamItem& i) { return std::string(reinterpret_cast<const char*>(i.bytes.data()), i.bytes.size()); }

// Pair: node A sends to node B. A's PeerSender feeds B's PeerReceiver over
// the channel; B's control (credit, closes) goes back to A's sender under
// the epoch of the channel it came in on (the sender's: as the node does).
struct Pair {
  explicit Pair(MuxConfig c) : config(c), tx(c, 7), rx(c) {}
  // pump carries everything that is due, both ways; returns the batches.
  int pump(uint64_t now) {
    int n = 0;
    for (bool any = true; any;) {
      any = false;
      FlushReason why;
      while (size_t len = tx.build(now, buf, &why)) {
        proto::BatchReader r;
        if (r.open(proto::ConstBytes(buf.data(), len)) == proto::DecodeError::kOk && len > largest_batch) {
          largest_batch = len;
          largest_batch_records = r.header().record_count;
        }
        rx.apply(proto::ConstBytes(buf.data(), len), now);
        last_reason = why;
        ++n;
        any = true;
      }
      while (size_t len = rx.build_control(buf, tx.epoch(), now)) {
        tx.apply_control(proto::ConstBytes(buf.data(), len));
        any = true;
      }
    }
    return n;
  }
  // drain pops everything a stream holds.
  std::vector<StreamItem> drain(PeerReceiver::Stream* s) {
    std::vector<StreamItem> out;
    StreamItem i;
    while (rx.pop(s, &i)) {
      const bool end = i.kind != Kind::kData;
      out.push_back(std::move(i));
      if (end) break;
    }
    return out;
  }
  // expect_through: one record sent on `slot` arrives, alone and whole, in `s`.
  void expect_through(proto::SlotId slot, PeerReceiver::Stream* s, const std::string& record, uint64_t now) {
    ASSERT_EQ(tx.send(slot, bytes_of(record), now), SendStatus::kSent);
    pump(now);
    auto items = drain(s);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(text(items[0]), record);
  }
  MuxConfig config;
  PeerSender tx;
  PeerReceiver rx;
  std::vector<std::byte> buf = std::vector<std::byte>(64 * 1024);
  FlushReason last_reason = FlushReason::kNone;
  size_t largest_batch = 0;           // bytes of the largest batch pumped
  uint32_t largest_batch_records = 0;  // ... and how many records it held
};

MuxConfig small(uint32_t credit) {
  MuxConfig c;
  c.enabled = true;
  c.initial_credit = credit;
  c.heartbeat_interval_ns = 1000 * kMs;
  return c;
}

TEST(PeerMux, OpenSlotGoesAtOnceInItsOwnFlushAndClaimsTheRegisteredStream) {
  Pair p(small(4));
  PeerReceiver::Stream* s = p.rx.expect(11, 22, 4);
  auto id = p.tx.open(11, 22, 4, 0);
  ASSERT_TRUE(id);
  EXPECT_EQ(p.pump(0), 1);  // no data yet: the OpenSlot alone
  EXPECT_EQ(p.last_reason, FlushReason::kLiveness);
  ASSERT_EQ(p.tx.send(*id, bytes_of("tok"), 1), SendStatus::kSent);
  p.pump(1);
  auto items = p.drain(s);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(text(items[0]), "tok");
  EXPECT_EQ(p.rx.stats().unknown_anchor, 0u);
}

// A spare (made ahead, at the request) becomes the registered stream:
// taken when expect() registers it, left with the caller when expect()
// refuses; its buffer holds items past what it reserved, in order.
TEST(PeerMux, ASpareMadeAheadBecomesTheStreamAndARefusedExpectLeavesIt) {
  Pair p(small(8));
  PeerReceiver::Spare spare = PeerReceiver::make_spare(), second = PeerReceiver::make_spare();
  ASSERT_NE(spare, nullptr);
  PeerReceiver::Stream* const made = spare.get();
  PeerReceiver::Stream* s = p.rx.expect(11, 22, 8, 0, nullptr, &spare);
  EXPECT_EQ(s, made) << "the stream was not the spare";
  EXPECT_EQ(spare, nullptr);
  EXPECT_EQ(p.rx.expect(11, 22, 8, 0, nullptr, &second), nullptr);  // registered already
  EXPECT_NE(second, nullptr) << "a refused expect() took the caller's spare";
  auto id = p.tx.open(11, 22, 8, 0);
  ASSERT_TRUE(id);
  const std::vector<std::string> records = {std::string(200, 'a'), std::string(300, 'b'), "c"};  // past its 256 bytes
  for (const auto& r : records) ASSERT_EQ(p.tx.send(*id, bytes_of(r), 1), SendStatus::kSent);
  p.pump(1);
  auto items = p.drain(s);
  ASSERT_EQ(items.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(text(items[i]), records[i]);
}

TEST(PeerMux, NeverMoreThanCFramesOutstandingAndReadingReturnsCredit) {
  Pair p(small(3));
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 3);
  auto id = p.tx.open(1, 1, 3, 0);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(p.tx.send(*id, bytes_of("r" + std::to_string(i)), 0), SendStatus::kSent);
  p.pump(0);
  EXPECT_EQ(p.rx.stats().records, 3u);  // the window, no more
  EXPECT_EQ(p.tx.stats().credit_exhausted, 1u);
  EXPECT_EQ(p.tx.staged_records(), 0u);  // the other 5 wait for credit, withheld
  EXPECT_GT(p.tx.withheld_bytes(*id), 0u);
  std::vector<std::string> got;
  for (int round = 0; round < 6 && got.size() < 8; ++round) {
    for (auto& i : p.drain(s)) got.push_back(text(i));
    p.pump(round + 1);
  }
  ASSERT_EQ(got.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], "r" + std::to_string(i));  // in order
  EXPECT_EQ(p.rx.stats().reader_stall, 0u);
  EXPECT_EQ(p.rx.stats().protocol_errors, 0u);
  EXPECT_GE(p.rx.stats().credit_returned, 5u);
}

TEST(PeerMux, TheTerminalFollowsTheLastRecordInTheSameBatchAndEverythingReturnsToZero) {
  Pair p(small(8));
  PeerReceiver::Stream* s = p.rx.expect(5, 6, 8);
  auto id = p.tx.open(5, 6, 8, 0);
  p.pump(0);
  const uint64_t before = p.tx.stats().batches;
  ASSERT_EQ(p.tx.send(*id, bytes_of("a"), 1), SendStatus::kSent);
  ASSERT_EQ(p.tx.send(*id, bytes_of("b"), 1), SendStatus::kSent);
  ASSERT_TRUE(p.tx.finish(*id));
  EXPECT_EQ(p.tx.send(*id, bytes_of("late"), 1), SendStatus::kClosed);  // behind the terminal: refused
  p.pump(1);
  EXPECT_EQ(p.tx.stats().batches, before + 1);  // data and terminal: one batch
  auto items = p.drain(s);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(text(items[0]), "a");
  EXPECT_EQ(text(items[1]), "b");
  EXPECT_EQ(items[2].kind, Kind::kFinished);
  EXPECT_EQ(p.tx.live_slots(), 0u);
  EXPECT_EQ(p.rx.live_streams(), 0u);
  EXPECT_EQ(p.rx.buffered_bytes(), 0u);
  EXPECT_TRUE(p.tx.closed(*id));
}

TEST(PeerMux, UnderManualNothingButLivenessMovesWithoutAFlushAndAFlushTakesEverythingStaged) {
  MuxConfig c = small(16);
  c.flush = FlushPolicy::manual();
  Pair p(c);
  PeerReceiver::Stream* s1 = p.rx.expect(1, 1, 16);
  PeerReceiver::Stream* s2 = p.rx.expect(2, 1, 16);
  auto a = p.tx.open(1, 1, 16, 0);
  auto b = p.tx.open(2, 1, 16, 0);
  EXPECT_EQ(p.pump(0), 1);  // the two OpenSlots: liveness goes under Manual too
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(p.tx.send(*a, bytes_of("a"), 1), SendStatus::kSent);
    ASSERT_EQ(p.tx.send(*b, bytes_of("b"), 1), SendStatus::kSent);
  }
  EXPECT_EQ(p.pump(2), 0);
  EXPECT_EQ(p.rx.stats().records, 0u);
  EXPECT_EQ(p.tx.staged_records(), 10u);
  p.tx.kick();  // flush_batch()
  EXPECT_EQ(p.pump(3), 1);  // one write for the pass
  EXPECT_EQ(p.last_reason, FlushReason::kManual);
  EXPECT_EQ(p.drain(s1).size(), 5u);
  EXPECT_EQ(p.drain(s2).size(), 5u);
  p.tx.kick();  // nothing staged: a flush is never an error
  EXPECT_EQ(p.pump(4), 0);
}

// More than a batch holds, staged under Manual, waits for the flush too
// (a full batch does not leave on its own: a forward pass is one burst),
// and the flush takes it all, batch after batch.
TEST(PeerMux, UnderManualAFullBatchWaitsForTheFlushAndTheFlushTakesEveryBatch) {
  MuxConfig c = small(64);
  c.flush = FlushPolicy::manual();
  c.max_batch_bytes = 512;
  Pair p(c);
  PeerReceiver::Stream* s1 = p.rx.expect(1, 1, 64);
  auto a = p.tx.open(1, 1, 64, 0);
  EXPECT_EQ(p.pump(0), 1);  // the OpenSlot
  for (int i = 0; i < 40; ++i) ASSERT_EQ(p.tx.send(*a, bytes_of(std::string(40, 'x')), 1), SendStatus::kSent);
  EXPECT_EQ(p.pump(2), 0) << "a full batch left before flush_batch()";
  p.tx.kick();
  EXPECT_GE(p.pump(3), 3);  // 40 records of 40 bytes: more than three 512-byte batches
  EXPECT_EQ(p.drain(s1).size(), 40u);
  EXPECT_EQ(p.tx.staged_records(), 0u);
}

TEST(PeerMux, PeerLossEndsEveryLiveStreamDroppedExactlyOnceAndAFinishedOneNotAtAll) {
  Pair p(small(4));
  std::vector<PeerReceiver::Stream*> s;
  std::vector<proto::SlotId> ids;
  for (uint64_t i = 0; i < 3; ++i) {
    s.push_back(p.rx.expect(i, 0, 4));
    ids.push_back(*p.tx.open(i, 0, 4, 0));
  }
  p.pump(0);
  ASSERT_TRUE(p.tx.finish(ids[0]));
  ASSERT_EQ(p.tx.send(ids[1], bytes_of("x"), 1), SendStatus::kSent);
  p.pump(1);
  p.rx.peer_lost();
  p.rx.peer_lost();  // twice: still one end each
  auto e0 = p.drain(s[0]);
  ASSERT_EQ(e0.size(), 1u);
  EXPECT_EQ(e0[0].kind, Kind::kFinished);
  auto e1 = p.drain(s[1]);
  ASSERT_EQ(e1.size(), 2u);
  EXPECT_EQ(text(e1[0]), "x");
  EXPECT_EQ(e1[1].kind, Kind::kDropped);
  auto e2 = p.drain(s[2]);
  ASSERT_EQ(e2.size(), 1u);
  EXPECT_EQ(e2[0].kind, Kind::kDropped);
  EXPECT_EQ(p.rx.stats().dropped, 2u);
  EXPECT_EQ(p.rx.stats().finished, 1u);
  EXPECT_EQ(p.rx.live_streams(), 0u);
}

TEST(PeerMux, AnOpenSlotForAnUnknownAnchorIsClosedBackWithoutFailingThePeer) {
  Pair p(small(4));
  PeerReceiver::Stream* known = p.rx.expect(1, 1, 4);
  auto good = p.tx.open(1, 1, 4, 0);
  auto stray = p.tx.open(99, 1, 4, 0);
  ASSERT_EQ(p.tx.send(*stray, bytes_of("lost"), 0), SendStatus::kSent);
  p.pump(0);
  EXPECT_EQ(p.rx.stats().unknown_anchor, 1u);
  EXPECT_TRUE(p.tx.closed(*stray));  // the owner learned it: a closed sender
  p.expect_through(*good, known, "ok", 1);
}

// Claims: a consumer that gave (anchor 5, session 6) a ticket registers
// it when its OpenSlot comes, and only then; `claimed` is what it made.
struct Claims {
  PeerReceiver* rx = nullptr;
  uint32_t credit = 0;
  int asked = 0;
  PeerReceiver::Stream* claimed = nullptr;
  static PeerReceiver::Stream* hook(void* self, void* peer, uint64_t anchor, uint64_t session, uint64_t now) {
    auto* c = static_cast<Claims*>(self);
    EXPECT_EQ(peer, c->rx);
    ++c->asked;
    if (anchor != 5 || session != 6 || c->claimed != nullptr) return nullptr;  // the ticket, once
    c->claimed = c->rx->expect(anchor, session, c->credit, now);
    return c->claimed;
  }
};

TEST(PeerMux, AnOpenSlotNobodyRegisteredMayBeClaimedOnceByTheHook) {
  Pair p(small(4));
  Claims c{&p.rx, 2};
  p.rx.set_claim_hook(&Claims::hook, &c, &p.rx);
  // The OpenSlot and its first records in one batch, with no expect() before.
  auto id = p.tx.open(5, 6, 4, 0);  // the owner believes 4
  ASSERT_TRUE(id);
  for (const char* t : {"a", "b"}) ASSERT_EQ(p.tx.send(*id, bytes_of(t), 0), SendStatus::kSent);
  EXPECT_EQ(p.pump(0), 1) << "the OpenSlot and its records went apart";
  ASSERT_NE(c.claimed, nullptr);
  EXPECT_EQ(p.rx.stats().claimed_on_open, 1u);
  auto items = p.drain(c.claimed);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(text(items[0]), "a");
  EXPECT_EQ(text(items[1]), "b");
  // A second OpenSlot naming it finds it spent: answered unknown, the
  // first stream untouched.
  auto again = p.tx.open(5, 6, 4, 1);
  p.pump(1);
  EXPECT_TRUE(p.tx.closed(*again));
  EXPECT_EQ(p.rx.stats().unknown_anchor, 1u);
  EXPECT_EQ(c.asked, 2);
  // Any other pair: asked, refused, closed back.
  auto stray = p.tx.open(5, 7, 4, 1);
  p.pump(1);
  EXPECT_TRUE(p.tx.closed(*stray));
  EXPECT_EQ(p.rx.stats().unknown_anchor, 2u);
  EXPECT_EQ(p.rx.stats().claimed_on_open, 1u);
}

TEST(PeerMux, AClaimedStreamHoldsTheReceiversCreditNotTheOwners) {
  Pair p(small(4));
  Claims c{&p.rx, 2};  // the ticket said 2; this owner was told (or claims) 4
  p.rx.set_claim_hook(&Claims::hook, &c, &p.rx);
  auto id = p.tx.open(5, 6, 4, 0);
  for (const char* t : {"a", "b", "c"}) ASSERT_EQ(p.tx.send(*id, bytes_of(t), 0), SendStatus::kSent);
  p.pump(0);
  ASSERT_NE(c.claimed, nullptr);
  auto items = p.drain(c.claimed);
  // Two data records, then the third past the window ends it: never a third buffered.
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(text(items[0]), "a");
  EXPECT_EQ(text(items[1]), "b");
  EXPECT_EQ(items[2].kind, Kind::kDropped);
  EXPECT_EQ(items[2].reason, EndReason::kProtocolError);
  EXPECT_EQ(p.rx.stats().protocol_errors, 1u);
}

TEST(PeerMux, ATicketMayLowerThePeersByteBudgetNeverRaiseIt) {
  PeerSender tx(small(4), 7);
  tx.set_peer_budget(1000);  // an ATTACH answer's, on the control connection
  tx.limit_peer_budget(5000);
  EXPECT_EQ(tx.peer_budget(), 1000u);
  tx.limit_peer_budget(0);  // none given
  EXPECT_EQ(tx.peer_budget(), 1000u);
  tx.limit_peer_budget(600);
  EXPECT_EQ(tx.peer_budget(), 600u);
  auto id = tx.open(1, 1, 4, 0);
  ASSERT_TRUE(id);
  EXPECT_EQ(tx.send(*id, proto::ConstBytes(std::vector<std::byte>(700).data(), 700), 0), SendStatus::kTooLarge);
}

TEST(PeerMux, ARecordForARecycledSlotIsNeverDeliveredToItsNewOccupant) {
  Pair p(small(4));
  PeerReceiver::Stream* a = p.rx.expect(1, 1, 4);
  auto ida = p.tx.open(1, 1, 4, 0);
  p.pump(0);
  p.tx.finish(*ida);
  p.pump(1);
  p.drain(a);
  PeerReceiver::Stream* b = p.rx.expect(2, 1, 4);
  auto idb = p.tx.open(2, 1, 4, 2);
  p.pump(2);
  ASSERT_EQ(idb->index, ida->index);
  ASSERT_NE(idb->generation, ida->generation);
  // A stale record for A (its generation) arrives late.
  std::vector<std::byte> stale(256);
  proto::BatchWriter w(stale, 7, 1000);
  ASSERT_TRUE(w.add_data(ida->pack(), 0, bytes_of("A's token")));
  const size_t n = w.finish();
  p.rx.apply(proto::ConstBytes(stale.data(), n), 3);
  EXPECT_EQ(p.rx.stats().generation_mismatch, 1u);
  StreamItem i;
  EXPECT_FALSE(p.rx.pop(b, &i));
}

// A batch with a malformed record (here a record type this version does
// not know) is applied up to that record and no further: the records
// before it are delivered, the rest of the batch is not, it counts
// `malformed`, and the channel goes on (PROTOCOL.md §2.2).
TEST(PeerMux, AMalformedRecordEndsItsBatchThereAndTheChannelGoesOn) {
  Pair p(small(8));
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 8);
  auto id = p.tx.open(1, 1, 8, 0);
  p.expect_through(*id, s, "t0", 0);
  std::vector<std::byte> batch(256);
  proto::BatchWriter w(batch, p.tx.epoch(), 1000);
  ASSERT_TRUE(w.add_data(id->pack(), 1, bytes_of("t1")));
  ASSERT_TRUE(w.add_data(id->pack(), 2, bytes_of("t2")));
  size_t n = w.finish();
  // A third record of type 9, and one more Data after it.
  const std::byte bad[13] = {std::byte{9}};
  std::memcpy(batch.data() + n, bad, sizeof(bad));
  n += sizeof(bad);
  proto::BatchWriter tail(std::span<std::byte>(batch).subspan(n), p.tx.epoch(), 1001);
  ASSERT_TRUE(tail.add_data(id->pack(), 3, bytes_of("t3")));
  const size_t tail_n = tail.finish();
  std::memmove(batch.data() + n, batch.data() + n + proto::kBatchHeaderBytes, tail_n - proto::kBatchHeaderBytes);
  n += tail_n - proto::kBatchHeaderBytes;
  proto::store_be16(batch.data() + 2, 4);  // four records
  p.rx.apply(proto::ConstBytes(batch.data(), n), 1);
  EXPECT_EQ(p.rx.stats().malformed, 1u);
  auto items = p.drain(s);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(text(items[0]), "t1");
  EXPECT_EQ(text(items[1]), "t2");
  // The stream goes on from frame 3 in the next batch.
  proto::BatchWriter next(batch, p.tx.epoch(), 1002);
  ASSERT_TRUE(next.add_data(id->pack(), 3, bytes_of("t3")));
  p.rx.apply(proto::ConstBytes(batch.data(), next.finish()), 2);
  items = p.drain(s);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(text(items[0]), "t3");
  EXPECT_EQ(p.rx.stats().malformed, 1u);
}

// A channel a stranger named as its own (review helper-31): its batches
// carry the honest owner's epoch, not the one the stranger's NODE gave.
TEST(PeerMux, APinnedEpochDiscardsAnotherEpochsBatchWholeAndClaimsNothing) {
  Pair p(small(4));
  p.rx.pin_epoch(p.tx.epoch());
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 4);
  PeerSender other(p.config, p.tx.epoch() + 1);
  auto stolen = other.open(1, 1, 4, 0);  // the same anchor and session, another epoch
  ASSERT_EQ(other.send(*stolen, bytes_of("not yours"), 0), SendStatus::kSent);
  other.kick();
  while (size_t n = other.build(0, p.buf)) p.rx.apply({p.buf.data(), n}, 0);
  EXPECT_EQ(p.rx.stats().foreign_epoch, 1u);
  EXPECT_EQ(p.rx.stats().batches, 0u);
  StreamItem i;
  EXPECT_FALSE(p.rx.pop(s, &i));
  // The pinned epoch's own OpenSlot still claims the stream.
  auto mine = p.tx.open(1, 1, 4, 1);
  p.pump(1);
  p.expect_through(*mine, s, "mine", 2);
  EXPECT_EQ(p.rx.stats().foreign_epoch, 1u);
}

// Rebound: stream a bound (one record through) under slot ida, stream b
// registered, and a batch whose OpenSlot claims b under `slot` — what an
// owner reusing a live index sends.
struct Rebound {
  PeerReceiver::Stream* a;
  std::optional<proto::SlotId> ida;
  PeerReceiver::Stream* b;
  std::vector<std::byte> batch = std::vector<std::byte>(256);
  proto::BatchWriter open_b(Pair& p, uint32_t slot) {
    proto::BatchWriter w(batch, p.tx.epoch(), 1000);
    proto::OpenSlotBody open;
    open.anchor_id = 2;
    open.session_id = 1;
    EXPECT_TRUE(w.add_open_slot(slot, 0, open));
    return w;
  }
};
Rebound rebound(Pair& p) {
  Rebound r;
  r.a = p.rx.expect(1, 1, 4);
  r.ida = p.tx.open(1, 1, 4, 0);
  p.expect_through(*r.ida, r.a, "a0", 0);
  r.b = p.rx.expect(2, 1, 4);
  return r;
}

// An OpenSlot on an index still bound here (the owner reused it early)
// ends the old stream, and the owner hears of it: a closed sender, not a
// sender that goes on sending into a slot nobody reads (review helper-31).
TEST(PeerMux, AnOpenSlotOnALiveIndexEndsTheOldStreamAndClosesItAtItsOwner) {
  Pair p(small(4));
  Rebound r = rebound(p);
  auto& [a, ida, b, raw] = r;
  const proto::SlotId reused{ida->index, static_cast<uint8_t>(ida->generation + 1)};
  proto::BatchWriter w = r.open_b(p, reused.pack());
  const size_t n = w.finish();
  p.rx.apply({raw.data(), n}, 1);
  EXPECT_EQ(p.rx.stats().protocol_errors, 1u);
  auto items = p.drain(a);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].kind, Kind::kDropped);
  EXPECT_EQ(items[0].reason, EndReason::kProtocolError);
  EXPECT_FALSE(p.tx.closed(*ida));
  p.pump(2);  // the close goes back
  EXPECT_TRUE(p.tx.closed(*ida)) << "the old stream's owner was not told";
  StreamItem i;
  EXPECT_FALSE(p.rx.pop(b, &i));  // claimed by the reused index, nothing sent on it yet
}

// ... and an OpenSlot under the very id already bound (its generation too):
// the close owed names that id, so the OpenSlot claims nothing (a stream
// bound there would never be fed: its owner closes that id).
TEST(PeerMux, AnOpenSlotUnderTheBoundIdItselfEndsTheOldStreamAndClaimsNothing) {
  Pair p(small(4));
  Rebound r = rebound(p);
  auto& [a, ida, b, raw] = r;
  proto::BatchWriter w = r.open_b(p, ida->pack());
  ASSERT_TRUE(w.add_data(ida->pack(), 0, bytes_of("for b?")));
  const size_t n = w.finish();
  p.rx.apply({raw.data(), n}, 1);
  auto items = p.drain(a);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].reason, EndReason::kProtocolError);
  StreamItem i;
  EXPECT_FALSE(p.rx.pop(b, &i)) << "b was claimed under a closed id";
  p.pump(2);
  EXPECT_TRUE(p.tx.closed(*ida));
  // b is still registered: its own owner's OpenSlot claims it.
  PeerSender other(p.config, p.tx.epoch());
  auto idb = other.open(2, 1, 4, 3);
  ASSERT_EQ(other.send(*idb, bytes_of("b0"), 3), SendStatus::kSent);
  other.kick();
  while (size_t len = other.build(3, p.buf)) p.rx.apply({p.buf.data(), len}, 3);
  auto got = p.drain(b);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(text(got[0]), "b0");
}

TEST(PeerMux, ACancelledStreamReachesTheProducerAsAClosedSender) {
  Pair p(small(4));
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 4);
  auto id = p.tx.open(1, 1, 4, 0);
  p.pump(0);
  p.rx.cancel(s);
  p.pump(1);
  EXPECT_TRUE(p.tx.closed(*id));
  EXPECT_EQ(p.tx.send(*id, bytes_of("x"), 2), SendStatus::kClosed);
  EXPECT_EQ(p.tx.live_slots(), 0u);
}

TEST(PeerMux, AStarvedSlotNeverDelaysAnother) {
  Pair p(small(2));
  PeerReceiver::Stream* slow = p.rx.expect(1, 1, 2);
  PeerReceiver::Stream* fast = p.rx.expect(2, 1, 2);
  auto ids = p.tx.open(1, 1, 2, 0);
  auto idf = p.tx.open(2, 1, 2, 0);
  p.pump(0);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(p.tx.send(*ids, bytes_of("s"), 1), SendStatus::kSent);  // nobody reads `slow`
    ASSERT_EQ(p.tx.send(*idf, bytes_of("f" + std::to_string(i)), 1), SendStatus::kSent);
    p.pump(1 + i);
    auto got = p.drain(fast);
    ASSERT_EQ(got.size(), 1u) << i;  // each pass's record, at once
    EXPECT_EQ(text(got[0]), "f" + std::to_string(i));
    p.pump(1 + i);  // its credit back
  }
  EXPECT_EQ(p.rx.stats().reader_stall, 0u);
  (void)slow;
}

TEST(PeerMux, AtItsBytebudgetSendIsRefusedFirstAndTheSlotDiesOnlyAfterTheDeadline) {
  MuxConfig c = small(1);
  c.max_batch_bytes = 1024;
  c.slot_byte_budget = 1024;
  c.heartbeat_interval_ns = 10 * kMs;
  c.stall_deadline_ns = 100 * kMs;
  Pair p(c);
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 1);
  auto id = p.tx.open(1, 1, 1, 0);
  p.pump(0);
  const std::string rec(200, 'x');
  int sent = 0;
  while (p.tx.send(*id, bytes_of(rec), 1) == SendStatus::kSent) ++sent;
  EXPECT_GE(sent, 4);
  p.pump(1);  // one goes (the window is 1); the consumer reads nothing
  while (p.tx.send(*id, bytes_of(rec), 2) == SendStatus::kSent) {
  }
  EXPECT_EQ(p.tx.send(*id, bytes_of(rec), 2), SendStatus::kFull);  // backpressure, not death
  EXPECT_FALSE(p.tx.closed(*id));
  p.pump(50 * kMs);
  EXPECT_FALSE(p.tx.closed(*id));  // within the deadline
  p.pump(200 * kMs);
  EXPECT_TRUE(p.tx.closed(*id));  // no credit for the deadline: killed, metered
  EXPECT_EQ(p.tx.stats().stalled_killed, 1u);
  auto items = p.drain(s);
  ASSERT_FALSE(items.empty());
  EXPECT_EQ(items.back().kind, Kind::kDropped);
}

TEST(PeerMux, IdleSlotsGetOneHeartbeatBatchPerIntervalAndBusyOnesNone) {
  MuxConfig c = small(64);
  c.heartbeat_interval_ns = 100 * kMs;
  Pair p(c);
  std::vector<proto::SlotId> ids;
  for (uint64_t i = 0; i < 50; ++i) {
    p.rx.expect(i, 0, 64);
    ids.push_back(*p.tx.open(i, 0, 64, 0));
  }
  p.pump(0);
  const uint64_t b0 = p.tx.stats().batches;
  // Ticks every 100 ms from the start: the one at 100 ms covers 0..100,
  // when every slot opened (no beats); the one at 200 covers 100..200.
  ASSERT_EQ(p.tx.send(ids[0], bytes_of("busy"), 150 * kMs), SendStatus::kSent);
  p.pump(150 * kMs);  // a data batch (the 100 ms tick passes in it, beating none)
  EXPECT_EQ(p.tx.stats().heartbeats, 0u);
  p.pump(210 * kMs);  // the 200 ms tick: the 49 idle slots beat, in one batch; slot 0 sent
  EXPECT_EQ(p.tx.stats().heartbeats, 49u);
  EXPECT_EQ(p.tx.stats().batches, b0 + 2);
  p.pump(250 * kMs);  // not yet the next tick
  EXPECT_EQ(p.tx.stats().heartbeats, 49u);
  EXPECT_EQ(p.tx.stats().batches, b0 + 2);
  p.pump(305 * kMs);  // the 300 ms tick: all 50 idle since 200
  EXPECT_EQ(p.tx.stats().heartbeats, 99u);
  EXPECT_EQ(p.tx.stats().batches, b0 + 3);
}

// The owner's heartbeats keep a stream it has nothing to send on (or no
// credit for) alive: starved, never killed; a stream that hears nothing for
// three intervals is dead and ends dropped, once.
TEST(PeerMux, TheWatchdogTellsAStarvedStreamFromADeadOne) {
  MuxConfig c = small(1);
  c.heartbeat_interval_ns = 100 * kMs;
  Pair p(c);
  PeerReceiver::Stream* starved = p.rx.expect(1, 1, 1);
  PeerReceiver::Stream* silent = p.rx.expect(2, 1, 1);
  auto id1 = p.tx.open(1, 1, 1, 0);
  p.tx.open(2, 1, 1, 0);
  p.pump(0);
  ASSERT_EQ(p.tx.send(*id1, bytes_of("one"), 1), SendStatus::kSent);  // its window, then nothing more
  ASSERT_EQ(p.tx.send(*id1, bytes_of("two"), 1), SendStatus::kSent);  // withheld: no credit (nobody reads)
  p.pump(1);
  EXPECT_EQ(p.rx.liveness(starved, 50 * kMs), PeerReceiver::Liveness::kAlive);
  // The owner keeps beating for both, every 100 ms, for a second.
  for (uint64_t t = 100 * kMs; t <= 1000 * kMs; t += 100 * kMs) {
    p.pump(t + 1);
    p.rx.watchdog(t + 2);
  }
  EXPECT_EQ(p.rx.liveness(starved, 1000 * kMs), PeerReceiver::Liveness::kStarved) << p.tx.stats().heartbeats << " beats, " << p.rx.stats().batches << " batches";
  EXPECT_EQ(p.rx.stats().watchdog_dead, 0u);
  // Now the owner goes silent (its process hangs): no batches at all.
  p.rx.watchdog(1250 * kMs);
  EXPECT_EQ(p.rx.stats().watchdog_dead, 0u);  // 2.5 intervals: not yet
  p.rx.watchdog(1400 * kMs);
  EXPECT_EQ(p.rx.stats().watchdog_dead, 2u);
  p.rx.watchdog(1500 * kMs);
  EXPECT_EQ(p.rx.stats().watchdog_dead, 2u);  // once each
  auto a = p.drain(starved);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(text(a[0]), "one");
  EXPECT_EQ(a[1].kind, Kind::kDropped);
  auto b = p.drain(silent);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].kind, Kind::kDropped);
}

// A finishing slot whose last records wait for credit (its consumer reads
// slowly) keeps beating: the receiver never takes it for a dead owner.
TEST(PeerMux, AFinishingSlotWaitingForCreditKeepsBeating) {
  MuxConfig c = small(2);
  c.heartbeat_interval_ns = 100 * kMs;
  Pair p(c);
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 2);
  auto id = p.tx.open(1, 1, 2, 0);
  p.pump(0);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(p.tx.send(*id, bytes_of("r" + std::to_string(i)), 1), SendStatus::kSent);
  ASSERT_TRUE(p.tx.finish(*id));
  p.pump(1);  // two go; three and the terminal wait for credit nobody returns
  for (uint64_t t = 100 * kMs; t <= 1000 * kMs; t += 100 * kMs) {
    p.pump(t + 1);
    p.rx.watchdog(t + 2);
  }
  EXPECT_EQ(p.rx.stats().watchdog_dead, 0u) << "a finishing slot went silent";
  std::vector<std::string> got;
  for (int round = 0; round < 10 && got.size() < 6; ++round) {
    for (auto& i : p.drain(s)) got.push_back(i.kind == Kind::kData ? text(i) : "<end>");
    p.pump(1100 * kMs + round);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"r0", "r1", "r2", "r3", "r4", "<end>"}));
}

// A slot that stages a record every step but has no credit (its reader
// stopped) keeps beating: staging is not sending, and the receiver must
// see a starved stream, not a dead one.
TEST(PeerMux, ASlotStagingWithoutCreditKeepsBeating) {
  MuxConfig c = small(2);
  c.heartbeat_interval_ns = 100 * kMs;
  Pair p(c);
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 2);
  auto id = p.tx.open(1, 1, 2, 0);
  p.pump(0);
  for (uint64_t t = 10 * kMs; t <= 1000 * kMs; t += 10 * kMs) {  // a decode step every 10 ms, nobody reads
    ASSERT_EQ(p.tx.send(*id, bytes_of("t"), t), SendStatus::kSent);
    p.pump(t);
    p.rx.watchdog(t + 1);
  }
  EXPECT_EQ(p.rx.stats().watchdog_dead, 0u) << "a credit-starved stream was taken for a dead one";
  EXPECT_EQ(p.rx.liveness(s, 1000 * kMs), PeerReceiver::Liveness::kStarved);
  EXPECT_GT(p.tx.stats().heartbeats, 5u);
}

// An owner keeps what a slot has outstanding within the slot's byte
// budget, and all its slots within the peer's: records wait for credit
// in bytes as they do in frames, and the receiver never finds a slot over.
TEST(PeerMux, TheOwnerKeepsOutstandingBytesWithinBothBudgets) {
  MuxConfig c = small(64);  // frames are plenty: bytes are the limit
  c.slot_byte_budget = 4096;
  c.peer_byte_budget = 16000;  // what either side holds withheld or buffered in all
  c.max_record_bytes = 1000;
  c.max_batch_bytes = 2048;
  Pair p(c);
  PeerReceiver::Stream* s1 = p.rx.expect(1, 1, 64);
  PeerReceiver::Stream* s2 = p.rx.expect(2, 1, 64);
  auto a = p.tx.open(1, 1, 64, 0, 4096);
  auto b = p.tx.open(2, 1, 64, 0, 4096);
  p.tx.set_peer_budget(6000);  // the receiver's answer: its peer budget
  p.pump(0);
  const std::string rec(900, 'x');
  int staged = 0;
  for (int i = 0; i < 5; ++i) {
    staged += p.tx.send(*a, bytes_of(rec), 1) == SendStatus::kSent;
    staged += p.tx.send(*b, bytes_of(rec), 1) == SendStatus::kSent;
  }
  ASSERT_EQ(staged, 8) << "a slot withholds four of 900 B within its 4096";
  p.pump(1);
  EXPECT_EQ(p.rx.stats().records, 6u) << "6 x 900 B fit the peer's 6000 outstanding, a 7th would not";
  EXPECT_LE(p.tx.outstanding_bytes(), 6000u);
  EXPECT_LE(p.rx.buffered_bytes(), 6000u);
  EXPECT_LE(p.tx.outstanding_bytes(), 6000u);
  // Reading frees bytes; the rest follows, nothing is refused.
  size_t got = 0;
  for (int round = 0; round < 20 && got < 8; ++round) {
    got += p.drain(s1).size() + p.drain(s2).size();
    p.pump(2 + round);
  }
  EXPECT_EQ(got, 8u);
  EXPECT_EQ(p.rx.stats().over_budget, 0u);
  EXPECT_EQ(p.rx.stats().protocol_errors, 0u);
  p.pump(PeerReceiver::kCreditSweepNs + 100);  // the smaller grants' sweep
  EXPECT_EQ(p.tx.outstanding_bytes(), 0u) << "credit for every record read came back";
}

// The owner's outstanding bytes follow credit record by record, in order,
// across its length ring growing while its oldest entry is mid-ring.
TEST(PeerMux, OutstandingBytesFollowCreditInOrderAsTheLengthRingGrows) {
  Pair p(small(16));  // a grant is due at 4 records read
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 16);
  const auto id = *p.tx.open(1, 1, 16, 0);
  p.pump(0);
  auto send = [&](uint32_t len) { ASSERT_EQ(p.tx.send(id, bytes_of(std::string(len, 'x')), 1), SendStatus::kSent); };
  auto read = [&](int n, uint64_t now) {
    for (int i = 0; i < n; ++i) {
      StreamItem item;
      ASSERT_TRUE(p.rx.pop(s, &item));
    }
    p.pump(now);
  };
  for (uint32_t len = 1; len <= 5; ++len) send(len);
  p.pump(1);
  read(4, 2);  // 1..4 granted back: the oldest outstanding is 4 places in
  EXPECT_EQ(p.tx.outstanding_bytes(), 5u);
  for (uint32_t len = 10; len <= 17; ++len) send(len);  // nine outstanding: the ring of eight grows
  p.pump(3);
  EXPECT_EQ(p.tx.outstanding_bytes(), 5u + 108u);
  read(4, 4);  // 5, 10, 11, 12
  EXPECT_EQ(p.tx.outstanding_bytes(), 113u - 38u);
  read(5, 5);
  EXPECT_EQ(p.tx.outstanding_bytes(), 0u);
}

// Credit goes back a quarter of the window (or of the byte budgets) at a
// time, not a record at a time: thousands of streams a decode step made a
// grant each, a step. The smaller grants follow at the sweep; the owner is
// never held below 3/4 of its window by them.
TEST(PeerMux, CreditGoesBackAQuarterAtATimeAndTheRestAtTheSweep) {
  MuxConfig c = small(64);
  c.slot_byte_budget = 1 << 20;
  c.peer_byte_budget = 40 * 100;  // the peer's quarter: 10 records of 100 B read back
  Pair p(c);
  std::vector<PeerReceiver::Stream*> s;
  std::vector<proto::SlotId> id;
  for (uint64_t k = 1; k <= 3; ++k) {
    s.push_back(p.rx.expect(k, 1, 64));
    id.push_back(*p.tx.open(k, 1, 64, 0, 1 << 20));
  }
  p.tx.set_peer_budget(c.peer_byte_budget);
  uint64_t t = kMs;
  p.pump(t);
  const std::string small_rec(10, 's');
  auto send_read = [&](size_t k, int n, const std::string& rec) {
    for (int i = 0; i < n; ++i) ASSERT_EQ(p.tx.send(id[k], bytes_of(rec), t), SendStatus::kSent);
    p.pump(t);
    EXPECT_EQ(p.drain(s[k]).size(), static_cast<size_t>(n));
    p.pump(t);
  };
  send_read(0, 15, small_rec);
  EXPECT_EQ(p.rx.stats().credit_returned, 0u) << "15 of 64 read: under a quarter, nothing went back";
  send_read(0, 1, small_rec);
  EXPECT_EQ(p.rx.stats().credit_returned, 16u) << "16 of 64: a quarter, granted at once";
  send_read(1, 5, small_rec);
  t += PeerReceiver::kCreditSweepNs / 2;
  p.pump(t);
  EXPECT_EQ(p.rx.stats().credit_returned, 16u);
  t += PeerReceiver::kCreditSweepNs / 2;
  p.pump(t);
  EXPECT_EQ(p.rx.stats().credit_returned, 21u) << "the sweep grants what is smaller";
  EXPECT_EQ(p.tx.outstanding_bytes(), 0u);
  // Read-back bytes over a quarter of the peer's budget: every grant goes.
  const std::string big(100, 'b');
  send_read(1, 5, big);
  EXPECT_EQ(p.rx.stats().credit_returned, 21u) << "500 B of the peer's 1000 B quarter";
  send_read(2, 5, big);
  EXPECT_EQ(p.rx.stats().credit_returned, 31u) << "1000 B read back: both streams' grants went";
  EXPECT_EQ(p.tx.outstanding_bytes(), 0u);
  // Empty records owe frames and no bytes: the sweep grants them too.
  send_read(2, 3, "");
  t += PeerReceiver::kCreditSweepNs;
  p.pump(t);
  EXPECT_EQ(p.rx.stats().credit_returned, 34u) << "three empty records read, granted at the sweep";
}

// A stream whose read-back and still-buffered bytes reach 3/4 of its byte
// budget has its grant go at once, however small: the owner counts both
// as outstanding, and its next record may not fit.
TEST(PeerMux, AGrantGoesAtOnceWhenReadAndBufferedBytesNearTheSlotsBudget) {
  MuxConfig c = small(64);
  c.slot_byte_budget = 4000;
  Pair p(c);
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 64);
  const auto id = *p.tx.open(1, 1, 64, 0, 4000);
  p.pump(kMs);
  for (size_t len : {500, 1300, 1300}) ASSERT_EQ(p.tx.send(id, bytes_of(std::string(len, 'x')), kMs), SendStatus::kSent);
  p.pump(kMs);
  StreamItem item;
  ASSERT_TRUE(p.rx.pop(s, &item));  // 500 read back, 2,600 still buffered: 3,100 of 4,000
  p.pump(kMs);
  EXPECT_EQ(p.rx.stats().credit_returned, 1u);
  EXPECT_EQ(p.tx.outstanding_bytes(), 2600u);
}

// A record the receiver's answered budget can never take is refused at
// send (too large), not staged to wait forever; and records held back by
// the byte budgets leave no linger deadline in the past (the node thread
// would spin on it until credit came).
TEST(PeerMux, TheReceiversBudgetsBoundWhatASendTakesAndWhatALingerWaitsFor) {
  MuxConfig c = small(64);
  c.flush = FlushPolicy::linger(2 * kMs);
  c.max_record_bytes = 1000;
  Pair p(c);
  p.rx.expect(1, 1, 64);
  auto id = p.tx.open(1, 1, 64, 0, 1500);  // the receiver answered 1500 bytes for this slot
  p.pump(0);
  EXPECT_EQ(p.tx.send(*id, bytes_of(std::string(900, 'a')), 1), SendStatus::kSent);
  p.pump(3 * kMs);  // the first goes after its linger
  EXPECT_EQ(p.rx.stats().records, 1u);
  EXPECT_EQ(p.tx.send(*id, bytes_of(std::string(900, 'b')), 4 * kMs), SendStatus::kSent);  // 1800 outstanding: waits
  p.pump(10 * kMs);
  EXPECT_EQ(p.rx.stats().records, 1u);
  EXPECT_GT(p.tx.next_deadline_ns(), 10 * kMs) << "a linger deadline in the past for a record that cannot go";
  Pair q(c);
  auto small_slot = q.tx.open(1, 1, 64, 0, 500);
  EXPECT_EQ(q.tx.send(*small_slot, bytes_of(std::string(600, 'c')), 1), SendStatus::kTooLarge);
}

// A peer that sends past the byte budget (within its frame credit) ends
// that slot only, dropped as over_budget and answered with a close; the
// receiver holds no more than the budget for it, and other slots go on.
TEST(PeerMux, ARecordPastTheSlotsByteBudgetEndsThatSlotOnly) {
  MuxConfig c = small(256);
  c.slot_byte_budget = 64 * 1024;
  c.max_record_bytes = 1000;
  c.max_batch_bytes = 1024;
  Pair p(c);
  PeerReceiver::Stream* victim = p.rx.expect(1, 1, 256);
  PeerReceiver::Stream* other = p.rx.expect(2, 1, 256);
  auto victim_slot = p.tx.open(1, 1, 256, 0);
  auto b = p.tx.open(2, 1, 256, 0);
  ASSERT_TRUE(victim_slot && b);
  p.pump(0);
  // The hostile batches: the victim's slot gets 100 records of 1000 B with
  // consecutive frame_seqs, within its 256 credits, unread.
  const std::vector<std::byte> body(1000, std::byte{7});
  uint32_t seq = 0;
  for (int batch = 0; batch < 100; ++batch) {
    std::vector<std::byte> out(2048);
    proto::BatchWriter w(out, 7, static_cast<uint32_t>(2 + batch));
    ASSERT_TRUE(w.add_data(victim_slot->pack(), seq++, body));
    out.resize(w.finish());
    p.rx.apply(out, 1);
  }
  EXPECT_EQ(p.rx.stats().over_budget, 1u);
  EXPECT_LE(p.rx.buffered_bytes(), c.slot_byte_budget) << "held past the budget";
  auto v = p.drain(victim);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.back().kind, Kind::kDropped);
  EXPECT_EQ(v.back().reason, EndReason::kOverBudget);
  EXPECT_EQ(v.size(), 66u) << "65 records of 1000 B fit 64 KiB (65,536), then the end";
  EXPECT_EQ(p.rx.buffered_bytes(), 0u);
  // The other slot is untouched (its own batches keep their order: a new
  // batch_seq gap is counted, not fatal).
  p.expect_through(*b, other, "fine", 2);
}

// A stream registered at attach that no OpenSlot claims ends, once, at the
// accept timeout — or when the peer is lost first — as never_opened.
TEST(PeerMux, AnUnclaimedStreamEndsAtTheAcceptTimeoutOrOnPeerLoss) {
  MuxConfig c = small(4);
  c.accept_timeout_ns = 500 * kMs;
  {
    Pair p(c);
    PeerReceiver::Stream* s = p.rx.expect(1, 1, 4, 100 * kMs);
    EXPECT_EQ(p.rx.next_expiry_ns(), 600 * kMs);
    p.rx.watchdog(599 * kMs);
    EXPECT_TRUE(p.drain(s).empty());
    p.rx.watchdog(600 * kMs);
    auto items = p.drain(s);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(items[0].kind, Kind::kDropped);
    EXPECT_EQ(items[0].reason, EndReason::kNeverOpened);
    EXPECT_EQ(p.rx.live_streams(), 0u);
    EXPECT_EQ(p.rx.stats().never_opened, 1u);
    // A late OpenSlot for it is unknown now.
    p.tx.open(1, 1, 4, 700 * kMs);
    p.pump(700 * kMs);
    EXPECT_EQ(p.rx.stats().unknown_anchor, 1u);
  }
  {
    Pair p(c);
    PeerReceiver::Stream* s = p.rx.expect(1, 1, 4, 0);
    p.rx.peer_lost();
    auto items = p.drain(s);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(items[0].reason, EndReason::kNeverOpened);
    EXPECT_EQ(p.rx.live_streams(), 0u);
  }
}

// The readable hook: once per stream when its buffer goes from empty to
// holding something (data, or its end), never per record.
TEST(PeerMux, TheReadableHookFiresOnEachEdgeFromEmpty) {
  Pair p(small(16));
  std::vector<int> fired;
  p.rx.set_readable_hook([](void* ctx, void* user) {
    static_cast<std::vector<int>*>(ctx)->push_back(static_cast<int>(reinterpret_cast<intptr_t>(user)));
  }, &fired);
  PeerReceiver::Stream* s1 = p.rx.expect(1, 1, 16, 0, reinterpret_cast<void*>(intptr_t{1}));
  p.rx.expect(2, 1, 16, 0, reinterpret_cast<void*>(intptr_t{2}));
  auto a = p.tx.open(1, 1, 16, 0);
  auto b = p.tx.open(2, 1, 16, 0);
  p.pump(0);
  EXPECT_TRUE(fired.empty()) << "an OpenSlot is no item";
  for (int i = 0; i < 5; ++i) ASSERT_EQ(p.tx.send(*a, bytes_of("x"), 1), SendStatus::kSent);
  ASSERT_EQ(p.tx.send(*b, bytes_of("y"), 1), SendStatus::kSent);
  p.pump(1);
  std::sort(fired.begin(), fired.end());
  EXPECT_EQ(fired, (std::vector<int>{1, 2})) << "once per stream, not per record";
  fired.clear();
  ASSERT_EQ(p.drain(s1).size(), 5u);
  ASSERT_TRUE(p.tx.finish(*a));
  p.pump(2);
  EXPECT_EQ(fired, (std::vector<int>{1})) << "its end, after it was read empty";
}

// The simulation: random opens, sends, finishes, reads, cancels and peer
// losses over many slots; after every step the invariants hold, and at the
// end every stream's records arrived in order, ended exactly once.
TEST(PeerMux, ARecordOverTheCapGoesAloneInItsBatchAndItsSlotsLaterRecordsWaitBehindIt) {
  MuxConfig c = small(8);
  c.max_batch_bytes = 1024;  // a datagram-sized cap, as a node's channel has
  Pair p(c);
  p.buf.resize(c.max_record_bytes + 64);
  PeerReceiver::Stream* s1 = p.rx.expect(1, 1, 8);
  PeerReceiver::Stream* s2 = p.rx.expect(2, 2, 8);
  auto a = p.tx.open(1, 1, 8, 0);
  auto b = p.tx.open(2, 2, 8, 0);
  p.pump(0);
  const std::string big(100000, 'x');
  for (const std::string& r : {std::string("a0"), big, std::string("a2")}) {
    ASSERT_EQ(p.tx.send(*a, bytes_of(r), 1), SendStatus::kSent);
  }
  ASSERT_EQ(p.tx.send(*b, bytes_of("b0"), 1), SendStatus::kSent);
  ASSERT_EQ(p.tx.send(*b, bytes_of("b1"), 1), SendStatus::kSent);
  p.pump(1);
  EXPECT_EQ(p.tx.stats().fenced, 1u);
  EXPECT_GT(p.largest_batch, big.size());
  EXPECT_EQ(p.largest_batch_records, 1u) << "the fenced record shared its batch";
  std::vector<std::string> got1, got2;
  for (auto& i : p.drain(s1)) got1.push_back(text(i));
  for (auto& i : p.drain(s2)) got2.push_back(text(i));
  EXPECT_EQ(got1, (std::vector<std::string>{"a0", big, "a2"}));
  EXPECT_EQ(got2, (std::vector<std::string>{"b0", "b1"}));
  // Over max_record_bytes: refused, nothing staged.
  EXPECT_EQ(p.tx.send(*a, bytes_of(std::string(c.max_record_bytes + 1, 'y')), 2), SendStatus::kTooLarge);
  // A caller buffer too small for it leaves it staged (and its slot's later records behind it).
  ASSERT_EQ(p.tx.send(*a, bytes_of(big), 3), SendStatus::kSent);
  ASSERT_EQ(p.tx.send(*a, bytes_of("after"), 3), SendStatus::kSent);
  p.buf.resize(c.max_batch_bytes);
  p.pump(3);
  EXPECT_TRUE(p.drain(s1).empty());
  p.buf.resize(c.max_record_bytes + 64);
  p.pump(4);
  got1.clear();
  for (auto& i : p.drain(s1)) got1.push_back(text(i));
  EXPECT_EQ(got1, (std::vector<std::string>{big, "after"}));
}

// Thousands of streams ending in an interleaved order — some finished and
// read to their end, some cancelled, with credit owed while they end —
// leave every other stream whole, and free in O(1) each (a freed stream's
// owed credit is dropped, never granted, and never touches another's).
TEST(PeerMux, ManyStreamsEndingInAnyOrderKeepTheOthersWhole) {
  constexpr int kStreams = 2048;
  MuxConfig c = small(4);
  c.max_streams_per_peer = kStreams;
  Pair p(c);
  std::vector<PeerReceiver::Stream*> rx(kStreams);
  std::vector<proto::SlotId> tx(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    rx[i] = p.rx.expect(1000 + i, 1, 4);
    auto id = p.tx.open(1000 + i, 1, 4, 0);
    ASSERT_TRUE(rx[i] && id);
    tx[i] = *id;
  }
  std::vector<int> got(kStreams, 0);
  std::vector<bool> gone(kStreams, false);
  uint64_t now = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kStreams; ++i) {
      if (gone[i]) continue;
      ASSERT_EQ(p.tx.send(tx[i], bytes_of(std::to_string(i) + ":" + std::to_string(round)), now), SendStatus::kSent);
    }
    p.pump(++now);
    // Read one record of every stream (credit becomes owed), then end a
    // stride of them before the control goes back: every fifth cancelled,
    // every seventh finished and read to its end (other ones each round).
    for (int i = 0; i < kStreams; ++i) {
      if (gone[i]) continue;
      StreamItem it;
      ASSERT_TRUE(p.rx.pop(rx[i], &it)) << i;
      ASSERT_EQ(text(it), std::to_string(i) + ":" + std::to_string(round));
      ++got[i];
    }
    for (int i = round; i < kStreams; i += 5) {
      if (!gone[i]) {
        p.rx.cancel(rx[i]);
        gone[i] = true;
      }
    }
    for (int i = round + 3; i < kStreams; i += 7) {
      if (gone[i]) continue;
      p.tx.finish(tx[i]);
      p.pump(++now);
      for (auto& it : p.drain(rx[i])) ASSERT_EQ(it.kind, Kind::kFinished) << i;
      gone[i] = true;
    }
    p.pump(++now);
  }
  uint32_t live = 0;
  for (int i = 0; i < kStreams; ++i) {
    if (gone[i]) continue;
    ++live;
    EXPECT_EQ(got[i], 3) << i;
    p.tx.finish(tx[i]);
  }
  EXPECT_EQ(p.rx.live_streams(), live);
  EXPECT_GT(live, 0u);
  p.pump(++now);
  for (int i = 0; i < kStreams; ++i) {
    if (gone[i]) continue;
    auto items = p.drain(rx[i]);
    ASSERT_FALSE(items.empty()) << i;
    EXPECT_EQ(items.back().kind, Kind::kFinished) << i;
  }
  EXPECT_EQ(p.rx.live_streams(), 0u);
  EXPECT_EQ(p.rx.buffered_bytes(), 0u);
  EXPECT_EQ(p.rx.stats().reader_stall, 0u);
  EXPECT_EQ(p.rx.stats().protocol_errors, 0u);
}

// max_linger: under Auto with a linger, a record waits at most the linger
// after its batch's first record — a later record does not push the
// deadline on — and the batch that goes at the deadline holds both, by
// reason linger; the next batch's clock starts at its own first record.
TEST(PeerMux, ALingerWritesAtMostTheLingerAfterItsBatchsFirstRecord) {
  MuxConfig c = small(64);
  c.flush = FlushPolicy::linger(2 * kMs);
  Pair p(c);
  PeerReceiver::Stream* s = p.rx.expect(1, 1, 64);
  auto id = p.tx.open(1, 1, 64, kMs);
  ASSERT_EQ(p.pump(kMs), 1);  // the OpenSlot goes at once: liveness never lingers
  ASSERT_EQ(p.tx.send(*id, bytes_of("a"), 10 * kMs), SendStatus::kSent);
  EXPECT_EQ(p.tx.next_deadline_ns(), 12 * kMs);
  EXPECT_EQ(p.pump(11 * kMs), 0);
  ASSERT_EQ(p.tx.send(*id, bytes_of("b"), 11 * kMs + kMs / 2), SendStatus::kSent);
  EXPECT_EQ(p.tx.next_deadline_ns(), 12 * kMs) << "a later record moved the batch's deadline on";
  EXPECT_EQ(p.pump(12 * kMs - 1), 0);
  EXPECT_EQ(p.rx.stats().records, 0u);
  EXPECT_EQ(p.pump(12 * kMs), 1);
  EXPECT_EQ(p.last_reason, FlushReason::kLinger);
  auto items = p.drain(s);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(text(items[0]), "a");
  EXPECT_EQ(text(items[1]), "b");
  ASSERT_EQ(p.tx.send(*id, bytes_of("c"), 20 * kMs), SendStatus::kSent);
  EXPECT_EQ(p.tx.next_deadline_ns(), 22 * kMs);
  EXPECT_EQ(p.pump(22 * kMs), 1);
  EXPECT_EQ(text(p.drain(s).at(0)), "c");
}

// A channel that comes back under a new epoch: the new epoch's first batch
// ends every stream of the old one dropped (channel lost, with the frames
// it delivered) exactly once, the new epoch's streams go on, a batch of the
// dead epoch that arrives late moves nothing (counted), and the new sender
// takes no control of the dead epoch.
TEST(PeerMux, ANewEpochEndsTheOldStreamsOnceAndALateBatchOfTheDeadEpochMovesNothing) {
  MuxConfig c = small(8);
  Pair p(c);  // the sender is epoch 7
  PeerReceiver::Stream* old_s = p.rx.expect(1, 1, 8);
  auto old_id = p.tx.open(1, 1, 8, kMs);
  ASSERT_EQ(p.tx.send(*old_id, bytes_of("e7-0"), kMs), SendStatus::kSent);
  p.pump(kMs);
  ASSERT_EQ(p.tx.send(*old_id, bytes_of("e7-late"), 2 * kMs), SendStatus::kSent);
  p.tx.kick();
  std::vector<std::byte> late(64 * 1024);
  const size_t late_len = p.tx.build(2 * kMs, late);  // in flight when the channel died
  ASSERT_GT(late_len, 0u);
  // A stream of the old epoch its consumer cancelled just before: the close
  // it owes is the dead epoch's, for a slot the new epoch may reuse.
  PeerReceiver::Stream* cancelled = p.rx.expect(3, 1, 8);
  ASSERT_TRUE(p.tx.open(3, 1, 8, 2 * kMs));
  p.pump(2 * kMs);
  p.rx.cancel(cancelled);
  ASSERT_TRUE(p.rx.closes_owed());

  PeerSender next(c, 8);
  PeerReceiver::Stream* new_s = p.rx.expect(2, 1, 8);
  auto new_id = next.open(2, 1, 8, 3 * kMs);
  for (const char* r : {"e8-0", "e8-1"}) ASSERT_EQ(next.send(*new_id, bytes_of(r), 3 * kMs), SendStatus::kSent);
  next.kick();
  while (size_t n = next.build(3 * kMs, p.buf)) p.rx.apply({p.buf.data(), n}, 3 * kMs);

  auto old_items = p.drain(old_s);  // old_s is freed by its end
  ASSERT_EQ(old_items.size(), 2u);
  EXPECT_EQ(text(old_items[0]), "e7-0");
  EXPECT_EQ(old_items[1].kind, Kind::kDropped);
  EXPECT_EQ(old_items[1].reason, EndReason::kChannelLost);
  EXPECT_EQ(old_items[1].frames, 1u);

  const uint64_t records = p.rx.stats().records;
  p.rx.apply({late.data(), late_len}, 4 * kMs);
  EXPECT_EQ(p.rx.stats().stale_epoch, 1u);
  EXPECT_EQ(p.rx.stats().records, records) << "a batch of the dead epoch was applied";

  auto new_items = p.drain(new_s);
  ASSERT_EQ(new_items.size(), 2u);
  EXPECT_EQ(text(new_items[0]), "e8-0");
  EXPECT_EQ(text(new_items[1]), "e8-1");
  EXPECT_EQ(p.rx.stats().protocol_errors, 0u);
  EXPECT_EQ(p.rx.stats().dropped, 1u);

  // What goes back now is the new epoch's credit, never the old one's close.
  // Sent back under the dead epoch, it is refused whole.
  const size_t n = p.rx.build_control(p.buf, 7, 0);
  ASSERT_GT(n, 0u);
  proto::BatchReader r;
  ASSERT_EQ(r.open({p.buf.data(), n}), proto::DecodeError::kOk);
  proto::BatchRecord rec;
  while (r.next(&rec)) EXPECT_NE(rec.header.type, proto::RecordType::kCloseSlot) << "a dead epoch's close went to the new one";
  next.apply_control({p.buf.data(), n});
  EXPECT_EQ(next.stats().control_rejected, 1u);
  EXPECT_EQ(next.stats().control_batches, 0u);
}

TEST(PeerMux, ASeededSimulationKeepsEveryInvariantAfterEveryStep) {
  int epochs_total = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    int epochs = 0;
    std::mt19937 rng(seed);
    MuxConfig c = small(1 + seed % 5);
    if (seed % 3 == 0) c.flush = FlushPolicy::manual();
    Pair p(c);
    struct Model {
      PeerReceiver::Stream* s;
      proto::SlotId id;
      uint32_t sent = 0;
      uint32_t got = 0;
      int ends = 0;
      bool finished = false;
      bool gone = false;  // cancelled or ended
    };
    std::vector<Model> m;
    uint64_t next_anchor = 1;
    uint64_t now = 0;
    uint64_t epoch = p.tx.epoch();
    int delivered = 0;
    for (int step = 0; step < 3000; ++step) {
      now += kMs;
      const int op = static_cast<int>(rng() % 100);
      if (op < 10 && p.tx.live_slots() < 64) {
        Model x{p.rx.expect(next_anchor, 0, c.initial_credit), {}};
        ASSERT_NE(x.s, nullptr);
        x.id = *p.tx.open(next_anchor++, 0, c.initial_credit, now);
        m.push_back(x);
      } else if (op < 60 && !m.empty()) {
        Model& x = m[rng() % m.size()];
        if (!x.finished && !x.gone) {
          const std::string r = std::to_string(x.sent);
          const SendStatus st = p.tx.send(x.id, bytes_of(r), now);
          if (st == SendStatus::kSent) ++x.sent;
        }
      } else if (op < 65 && !m.empty()) {
        Model& x = m[rng() % m.size()];
        if (!x.finished && !x.gone) x.finished = p.tx.finish(x.id);
      } else if (op < 90 && !m.empty()) {
        Model& x = m[rng() % m.size()];
        if (!x.gone) {
          StreamItem i;
          while (p.rx.pop(x.s, &i)) {
            if (i.kind == Kind::kData) {
              ASSERT_EQ(text(i), std::to_string(x.got)) << "seed " << seed << " out of order";
              ++x.got;
              ++delivered;
            } else {
              ++x.ends;
              x.gone = true;
              if (i.kind == Kind::kFinished) {
                ASSERT_EQ(x.got, x.sent) << "finished before its records";
              }
              break;
            }
          }
        }
      } else if (op < 92 && !m.empty()) {
        Model& x = m[rng() % m.size()];
        if (!x.gone) {
          p.rx.cancel(x.s);
          x.gone = true;
        }
      } else if (op < 93) {
        p.rx.peer_lost();  // the epoch dies: every open stream ends dropped (tx forgets too)
        p.tx.peer_lost();
        for (Model& x : m) {
          if (x.gone) continue;
          StreamItem i;
          while (p.rx.pop(x.s, &i)) {
            if (i.kind == Kind::kData) {
              ++x.got;
              continue;
            }
            ++x.ends;
            x.gone = true;
            break;
          }
          // A stream not yet opened by the peer has no end to read: it is abandoned.
          if (!x.gone) x.gone = true;
        }
        m.clear();
        continue;
      } else if (op < 94) {
        // The channel comes back under a new epoch (no peer_lost here: the
        // receiver learns it from the new epoch's first batch). A batch of
        // the old epoch still in flight arrives after it.
        p.tx.kick();
        std::vector<std::byte> late(64 * 1024);
        const size_t late_len = p.tx.build(now, late);
        p.tx = PeerSender(c, ++epoch);
        Model x{p.rx.expect(next_anchor, 0, c.initial_credit), {}};
        ASSERT_NE(x.s, nullptr);
        x.id = *p.tx.open(next_anchor++, 0, c.initial_credit, now);
        p.pump(now);  // the new epoch's OpenSlot ends every stream of the old one
        for (Model& y : m) {
          StreamItem i;
          while (!y.gone && p.rx.pop(y.s, &i)) {
            if (i.kind == Kind::kData) {
              ASSERT_EQ(text(i), std::to_string(y.got)) << "seed " << seed << " out of order";
              ++y.got;
              ++delivered;
              continue;
            }
            ++y.ends;
            y.gone = true;
            // Finished only if its terminal went before the epoch died.
            if (i.kind == Kind::kDropped) {
              ASSERT_EQ(i.reason, EndReason::kChannelLost) << "seed " << seed;
            }
          }
          ASSERT_TRUE(y.gone) << "seed " << seed << ": a stream of the dead epoch never ended";
        }
        m.clear();
        m.push_back(x);
        ++epochs;
        if (late_len != 0) {
          const uint64_t records = p.rx.stats().records, stale = p.rx.stats().stale_epoch;
          p.rx.apply({late.data(), late_len}, now);
          ASSERT_EQ(p.rx.stats().stale_epoch, stale + 1) << "seed " << seed;
          ASSERT_EQ(p.rx.stats().records, records) << "seed " << seed << ": a dead epoch's batch delivered";
        }
        continue;
      } else if (op < 97) {
        p.tx.kick();
      }
      p.pump(now);
      ASSERT_EQ(p.rx.stats().reader_stall, 0u) << "seed " << seed;
      ASSERT_EQ(p.rx.stats().protocol_errors, 0u) << "seed " << seed;
      ASSERT_EQ(p.rx.stats().generation_mismatch, 0u) << "seed " << seed;
      for (const Model& x : m) ASSERT_LE(x.ends, 1) << "seed " << seed;
    }
    EXPECT_GT(delivered, 100) << "seed " << seed << ": the simulation moved almost nothing";
    epochs_total += epochs;
  }
  EXPECT_GT(epochs_total, 100) << "the simulation changed epochs too rarely to test them";
}

}  // namespace
}  // namespace ringfire::mux
