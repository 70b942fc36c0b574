// mirror_receiver_test.cc — the mirror side of the protocol, frame by frame,
// with a fake clock: order, hold-back, one NAK per hole and its repeat,
// duplicates, stale retransmissions, sessions, heartbeat tail loss, GAP,
// malformed input, bounded hold-back.
#include "dataplane/mirror_receiver.h"

#include <vector>

#include "gtest/gtest.h"
#include "ring/check_record.h"
#include "ring/consumer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::dataplane {
namespace {

using proto::Nak;
using ring::testing::ScopedRing;

constexpr uint32_t kSlot = 32;
constexpr uint8_t kSession = 0x5a;
constexpr uint64_t kUs = 1'000;
constexpr uint64_t kMs = 1'000'000;

// data_frame builds a DATA frame of fixed records seq..seq+count-1.
std::vector<std::byte> data_frame(uint64_t seq, uint16_t count, uint8_t session = kSession) {
  std::vector<std::byte> f(proto::kFrameHeaderBytes + size_t{count} * kSlot);
  proto::encode_data_header(f.data(), seq, count, count * kSlot, session);
  for (uint16_t i = 0; i < count; ++i) {
    ring::fill_record({f.data() + proto::kFrameHeaderBytes + i * kSlot, kSlot}, seq + i, 0);
  }
  return f;
}

std::vector<std::byte> control_frame(size_t (*enc)(uint64_t, proto::MutableBytes), uint64_t seq) {
  std::vector<std::byte> f(16);
  enc(seq, f);
  return f;
}

std::vector<std::byte> heartbeat(uint64_t next, uint8_t session = kSession) {
  std::vector<std::byte> f(16);
  proto::encode_heartbeat(next, session, f);
  return f;
}

const Endpoint kSource{0xC6120001, 7402};  // 198.18.0.1

void tcp_to(MirrorReceiver& rx, const std::vector<std::byte>& d, uint64_t now = 0) {
  proto::Frame f;
  ASSERT_EQ(proto::decode_frame(d, d.size(), &f), proto::DecodeError::kOk);
  rx.on_tcp_frame(f, d, now);
}

// ring_seqs_of reads a mirror ring from 0 and checks every record.
std::vector<uint64_t> ring_seqs_of(const ScopedRing& r) {
  auto c = ring::Consumer::attach(r.open(), ring::StartPosition::at(0));
  std::vector<uint64_t> out;
  std::byte rec[kSlot];
  for (ring::ReadResult x; (x = c->try_read(rec)).ok;) {
    EXPECT_EQ(ring::check_record(rec, kSlot, x.seq), ring::CheckVerdict::kOk) << x.seq;
    out.push_back(x.seq);
  }
  return out;
}

std::vector<uint64_t> range(uint64_t a, uint64_t b) {
  std::vector<uint64_t> v;
  for (uint64_t s = a; s < b; ++s) v.push_back(s);
  return v;
}

// only: the single range of a NAK.
Nak only(const std::optional<proto::NakRanges>& n) {
  EXPECT_TRUE(n.has_value());
  if (!n) return Nak{};
  EXPECT_EQ(n->count, 1u);
  return n->ranges[0];
}

class MirrorReceiverTest : public ::testing::Test {
 protected:
  MirrorReceiverTest()
      : ring_(ring::testing::fixed_ring(1024, kSlot, ring::kFlagSparse)),
        writer_(*MirrorWriter::attach(ring_.open())),
        rx_(&writer_, MirrorConfig{}, 0, kSession) {}

  void udp(const std::vector<std::byte>& d, uint64_t now = 0) { rx_.on_datagram(d, kSource, now); }
  void tcp(const std::vector<std::byte>& d, uint64_t now = 0) { tcp_to(rx_, d, now); }

  std::vector<uint64_t> ring_seqs() { return ring_seqs_of(ring_); }

  ScopedRing ring_;
  MirrorWriter writer_;
  MirrorReceiver rx_;
};

TEST_F(MirrorReceiverTest, InOrderFramesLandUnderTheirSequencesAndNeedNoNak) {
  udp(data_frame(0, 4));
  udp(data_frame(4, 6));
  EXPECT_EQ(rx_.next_seq(), 10u);
  EXPECT_FALSE(rx_.poll_nak(0));
  EXPECT_EQ(ring_seqs(), range(0, 10));
  EXPECT_EQ(rx_.stats().records, 10u);
}

TEST_F(MirrorReceiverTest, GivenAHoleAt10To12ADatagramFor13IsHeldAndOneNakIsSent) {
  udp(data_frame(0, 10));
  udp(data_frame(13, 2), 1 * kMs);
  EXPECT_EQ(rx_.next_seq(), 10u);
  EXPECT_EQ(rx_.held_frames(), 1u);
  const Nak nak = only(rx_.poll_nak(1 * kMs));
  EXPECT_EQ(nak.first, 10u);
  EXPECT_EQ(nak.last, 12u);
  udp(data_frame(15, 2), 1 * kMs + 500 * kUs);  // more overtaking data: the same hole, no new NAK
  EXPECT_FALSE(rx_.poll_nak(1 * kMs + 500 * kUs));
  // Unanswered: before any repair was measured the first repeat waits 1 ms
  // (a lost UDP repair is asked for again soon, and comes over TCP) ...
  EXPECT_FALSE(rx_.poll_nak(1 * kMs + 900 * kUs));
  const Nak again = only(rx_.poll_nak(2 * kMs));
  EXPECT_EQ(again.first, 10u);
  EXPECT_EQ(again.last, 12u);
  // ... then the source document's 20 ms, doubling while still unanswered.
  EXPECT_FALSE(rx_.poll_nak(21 * kMs));
  EXPECT_EQ(only(rx_.poll_nak(22 * kMs)).first, 10u);
  EXPECT_FALSE(rx_.poll_nak(61 * kMs));
  EXPECT_EQ(only(rx_.poll_nak(62 * kMs)).first, 10u);
  EXPECT_EQ(rx_.stats().naks, 4u);
  EXPECT_EQ(rx_.stats().nak_repeats, 3u);
}

TEST_F(MirrorReceiverTest, TheRetransmissionFillsTheHoleAndReleasesTheHeldFrames) {
  udp(data_frame(0, 10));
  udp(data_frame(13, 2));
  udp(data_frame(15, 2));
  ASSERT_TRUE(rx_.poll_nak(0));
  tcp(data_frame(10, 3));  // the source's answer, on the TCP connection
  EXPECT_EQ(rx_.next_seq(), 17u);
  EXPECT_EQ(rx_.held_frames(), 0u);
  EXPECT_FALSE(rx_.poll_nak(100 * kMs));
  EXPECT_EQ(ring_seqs(), range(0, 17));
}

TEST_F(MirrorReceiverTest, APartialRepairDoesNotTriggerAnotherNak) {
  udp(data_frame(0, 10));
  udp(data_frame(20, 1));
  EXPECT_EQ(only(rx_.poll_nak(0)).last, 19u);
  tcp(data_frame(10, 5), 800 * kUs);  // 10..14 arrive; 15..19 still on their way
  EXPECT_FALSE(rx_.poll_nak(800 * kUs));
  // The repair is arriving, so its clock restarted: no repeat 1 ms after the NAK.
  EXPECT_FALSE(rx_.poll_nak(1 * kMs + 100 * kUs));
  EXPECT_EQ(rx_.stats().nak_repeats, 0u);
}

TEST_F(MirrorReceiverTest, DuplicatesAndStaleRetransmissionsAreDropped) {
  const auto f = data_frame(0, 5);
  udp(f);
  udp(f);  // dup 2
  udp(f);  // dup 3
  udp(data_frame(5, 5));
  tcp(data_frame(3, 4));  // a retransmission multicast already delivered
  EXPECT_EQ(rx_.next_seq(), 10u);
  EXPECT_EQ(rx_.stats().records, 10u);
  EXPECT_EQ(rx_.stats().duplicates, 5u + 5u + 4u);
  EXPECT_EQ(ring_seqs(), range(0, 10));
}

TEST_F(MirrorReceiverTest, OverlappingFramesWriteEachSequenceOnce) {
  udp(data_frame(0, 5));
  udp(data_frame(3, 5));  // 3,4 old, 5..7 new
  EXPECT_EQ(rx_.next_seq(), 8u);
  EXPECT_EQ(rx_.stats().duplicates, 2u);
  EXPECT_EQ(ring_seqs(), range(0, 8));
}

TEST_F(MirrorReceiverTest, DatagramsOfAnotherSessionAreIgnored) {
  udp(data_frame(0, 5, /*session=*/0x11));
  udp(heartbeat(50, /*session=*/0x11));
  EXPECT_EQ(rx_.next_seq(), 0u);
  EXPECT_EQ(rx_.stats().wrong_session, 2u);
  EXPECT_FALSE(rx_.poll_nak(0));
  EXPECT_TRUE(ring_seqs().empty());
}

TEST_F(MirrorReceiverTest, ALostLastDatagramIsFoundByTheHeartbeat) {
  udp(data_frame(0, 10));
  // 10..11 were sent and lost; the heartbeat says the source sent up to 11.
  udp(heartbeat(12));
  const Nak nak = only(rx_.poll_nak(0));
  EXPECT_EQ(nak.first, 10u);
  EXPECT_EQ(nak.last, 11u);
}

TEST_F(MirrorReceiverTest, AGapSkipsWhatTheSourceNoLongerHasAndReadersSeeAHole) {
  udp(data_frame(0, 10));
  udp(data_frame(30, 3));
  ASSERT_TRUE(rx_.poll_nak(0));
  tcp(control_frame(proto::encode_gap, 30));
  EXPECT_EQ(rx_.next_seq(), 33u);
  EXPECT_EQ(rx_.stats().gap_records, 20u);
  EXPECT_FALSE(rx_.poll_nak(100 * kMs));
  std::vector<uint64_t> want = range(0, 10);
  for (uint64_t s = 30; s < 33; ++s) want.push_back(s);
  EXPECT_EQ(ring_seqs(), want);
}

TEST_F(MirrorReceiverTest, MalformedInputIsCountedAndNeverReachesTheRing) {
  auto bad_len = data_frame(0, 2);
  proto::store_le32(bad_len.data() + 4, 60);  // count 2 but 60 body bytes: not 2 slots
  bad_len.resize(16 + 60);
  udp(bad_len);
  std::vector<std::byte> junk(40, std::byte{0xee});
  udp(junk);
  std::vector<std::byte> nak(24);
  proto::encode_nak(Nak{1, 2}, nak);
  udp(nak);  // a frame a mirror never receives
  EXPECT_EQ(rx_.stats().malformed, 2u);
  EXPECT_EQ(rx_.stats().wrong_kind, 1u);
  EXPECT_EQ(rx_.next_seq(), 0u);
  EXPECT_TRUE(ring_seqs().empty());
  udp(data_frame(0, 3));  // and the session carries on
  EXPECT_EQ(ring_seqs(), range(0, 3));
}

TEST_F(MirrorReceiverTest, SeveralFramesInOneDatagramAreAllApplied) {
  auto d = data_frame(0, 3);
  const auto second = data_frame(3, 2);
  d.insert(d.end(), second.begin(), second.end());
  const auto hb = heartbeat(5);
  d.insert(d.end(), hb.begin(), hb.end());
  udp(d);
  EXPECT_EQ(rx_.next_seq(), 5u);
  EXPECT_FALSE(rx_.poll_nak(0));
}

TEST(MirrorReceiverBounds, AFullHoldBackDropsAndTheNakRecoversWhatItDropped) {
  ScopedRing r(ring::testing::fixed_ring(1024, kSlot, ring::kFlagSparse));
  MirrorWriter w = *MirrorWriter::attach(r.open());
  MirrorConfig cfg;
  cfg.hold_back_frames = 2;
  MirrorReceiver rx(&w, cfg, 0, kSession);
  for (uint64_t s = 1; s <= 4; ++s) rx.on_datagram(data_frame(s, 1), kSource, 0);  // 0 lost
  EXPECT_EQ(rx.held_frames(), 2u);
  EXPECT_EQ(rx.stats().hold_overflow, 2u);
  Nak nak = only(rx.poll_nak(0));
  EXPECT_EQ(nak.first, 0u);
  EXPECT_EQ(nak.last, 0u);
  tcp_to(rx, data_frame(0, 1), 1 * kMs);
  EXPECT_EQ(rx.next_seq(), 3u);  // 1 and 2 were held; 3, 4 were dropped
  nak = only(rx.poll_nak(1 * kMs));  // the heartbeat-free tail: known_end says 5
  EXPECT_EQ(nak.first, 3u);
  EXPECT_EQ(nak.last, 4u);
}

TEST(MirrorReceiverBounds, ANakNeverCoversMoreThanItsLimit) {
  ScopedRing r(ring::testing::fixed_ring(1024, kSlot, ring::kFlagSparse));
  MirrorWriter w = *MirrorWriter::attach(r.open());
  MirrorConfig cfg;
  cfg.nak_max_records = 100;
  MirrorReceiver rx(&w, cfg, 0, kSession);
  rx.on_datagram(heartbeat(1000), kSource, 0);
  const Nak nak = only(rx.poll_nak(0));
  EXPECT_EQ(nak.first, 0u);
  EXPECT_EQ(nak.last, 99u);
}

// ---- trust: nothing from UDP moves state until checked

class TrustTest : public ::testing::Test {
 protected:
  TrustTest() : ring_(ring::testing::fixed_ring(1024, kSlot, ring::kFlagSparse)),
                writer_(*MirrorWriter::attach(ring_.open())) {}
  MirrorReceiver make(UdpTrust trust, MirrorConfig cfg = {}) {
    return MirrorReceiver(&writer_, cfg, 0, kSession, trust);
  }
  ScopedRing ring_;
  MirrorWriter writer_;
};

UdpTrust from_source() {
  UdpTrust t;
  t.source_ip = kSource.ip;
  return t;
}

TEST_F(TrustTest, AGapByUdpIsTheWrongKindAndMovesNothing) {
  MirrorReceiver rx = make(from_source());
  std::vector<std::byte> gap(16);
  proto::encode_gap(0xFFFF'FFFF'FFFF'0000ull, gap);
  for (uint8_t flags : {uint8_t{0}, kSession}) {
    gap[1] = std::byte{flags};
    rx.on_datagram(gap, kSource, 0);
  }
  EXPECT_EQ(rx.stats().wrong_kind, 2u);
  EXPECT_EQ(rx.next_seq(), 0u);
  EXPECT_EQ(rx.known_end(), 0u);
  rx.on_datagram(data_frame(0, 3), kSource, 0);  // and the stream carries on
  EXPECT_EQ(rx.next_seq(), 3u);
  // The same GAP on the connection is the source's word.
  tcp_to(rx, control_frame(proto::encode_gap, 10));
  EXPECT_EQ(rx.next_seq(), 10u);
}

TEST_F(TrustTest, AFarFutureHeartbeatIsImplausibleOpensNoHoleAndAsksWhereTheSourceIs) {
  MirrorConfig cfg;
  cfg.plausible_window = 1000;
  MirrorReceiver rx = make(from_source(), cfg);
  rx.on_datagram(data_frame(0, 5), kSource, 0);
  rx.on_datagram(heartbeat(5 + 1'000'000'000), kSource, 0);
  EXPECT_EQ(rx.stats().implausible, 1u);
  EXPECT_EQ(rx.known_end(), 5u);
  EXPECT_FALSE(rx.poll_nak(0));
  EXPECT_TRUE(rx.take_position_request());
  EXPECT_FALSE(rx.take_position_request());  // once per event
  // Within the window a heartbeat is believed (a lost tail)...
  rx.on_datagram(heartbeat(900), kSource, 1 * kMs);
  EXPECT_EQ(rx.known_end(), 900u);
  // ... and far-future DATA is dropped the same way, never held.
  rx.on_datagram(data_frame(100'000, 2), kSource, 1 * kMs);
  EXPECT_EQ(rx.stats().implausible, 2u);
  EXPECT_EQ(rx.held_frames(), 0u);
}

// A source lapped far ahead of its mirror sends sequences well past its
// last TCP statement before the next one arrives: its own pace, measured
// from those statements, widens the window (twice the pace over the time
// since, plus a slack, capped), and nothing further than that is believed.
TEST_F(TrustTest, TheSourcesStatedPaceWidensTheWindowBetweenStatementsAndNoFurther) {
  MirrorConfig cfg;
  cfg.plausible_window = 1000;
  MirrorReceiver rx = make(from_source(), cfg);
  std::vector<std::byte> hb(16);
  proto::encode_heartbeat(0, 0, hb);
  tcp_to(rx, hb, 0);
  // No pace yet: only the window.
  rx.on_datagram(data_frame(5000, 1), kSource, 50 * kMs);
  EXPECT_EQ(rx.stats().implausible, 1u);
  // 100,000 records in 100 ms: a pace of one per microsecond.
  proto::encode_heartbeat(100'000, 0, hb);
  tcp_to(rx, hb, 100 * kMs);
  // 10 ms later: the window plus 2 x 1/us x (10 + 20) ms = 61,000 past 100,000.
  rx.on_datagram(data_frame(160'000, 1), kSource, 110 * kMs);
  EXPECT_EQ(rx.stats().implausible, 1u);
  EXPECT_EQ(rx.held_frames(), 1u);
  rx.on_datagram(data_frame(162'000, 1), kSource, 110 * kMs);
  EXPECT_EQ(rx.stats().implausible, 2u);
  // Long silence on TCP: the widening stops at its horizon (1 s: 2,000,000).
  rx.on_datagram(data_frame(2'100'000, 1), kSource, 10'000 * kMs);
  EXPECT_EQ(rx.stats().implausible, 2u);
  rx.on_datagram(data_frame(2'102'000, 1), kSource, 10'000 * kMs);
  EXPECT_EQ(rx.stats().implausible, 3u);
  // A source that slows down narrows it: 100 records in the next 100 ms.
  proto::encode_heartbeat(100'100, 0, hb);
  tcp_to(rx, hb, 10'100 * kMs);
  rx.on_datagram(data_frame(160'000, 1), kSource, 10'110 * kMs);  // 2 x 0.75/us x 30 ms = 45,000
  EXPECT_EQ(rx.stats().implausible, 4u);
}

TEST_F(TrustTest, TheSourcesPositionOverTcpWidensTheWindowAndForgetsUnvouchedEnds) {
  MirrorConfig cfg;
  cfg.plausible_window = 1000;
  MirrorReceiver rx = make(from_source(), cfg);
  rx.on_datagram(heartbeat(800), kSource, 0);  // believed: within the window
  EXPECT_EQ(rx.known_end(), 800u);
  // The source says it has sent up to 50: what we believed beyond came from
  // a datagram only, so the NAK shrinks to what the source vouches for.
  std::vector<std::byte> hb(16);
  proto::encode_heartbeat(50, 0, hb);
  tcp_to(rx, hb);
  EXPECT_EQ(rx.known_end(), 50u);
  EXPECT_EQ(only(rx.poll_nak(0)).last, 49u);
  // A position far ahead (the mirror fell behind) makes datagrams there plausible.
  proto::encode_heartbeat(1'000'000, 0, hb);
  tcp_to(rx, hb);
  EXPECT_EQ(rx.vouched_end(), 1'000'000u);
  rx.on_datagram(data_frame(1'000'100, 1), kSource, 0);
  EXPECT_EQ(rx.stats().implausible, 0u);
  EXPECT_EQ(rx.held_frames(), 1u);
}

TEST_F(TrustTest, DatagramsFromAnyoneButTheSourceOrADeclaredRelayAreRefused) {
  UdpTrust t = from_source();
  t.source_port = kSource.port;  // unicast: its data port too
  t.relays[t.relay_count++] = 0xC6120009;
  MirrorReceiver rx = make(t);
  rx.on_datagram(data_frame(0, 2), Endpoint{0xC6120005, kSource.port}, 0);  // another host
  rx.on_datagram(data_frame(0, 2), Endpoint{kSource.ip, 9999}, 0);          // another port
  EXPECT_EQ(rx.stats().wrong_sender, 2u);
  EXPECT_EQ(rx.next_seq(), 0u);
  rx.on_datagram(data_frame(0, 2), Endpoint{0xC6120009, 1234}, 0);  // the relay
  rx.on_datagram(data_frame(2, 2), kSource, 0);
  rx.on_datagram(data_frame(2, 2), kSource, 0);  // a second copy (dup)
  EXPECT_EQ(rx.next_seq(), 4u);
  // HEALTH's count of the source's datagrams: every copy taken in, none of
  // the refused ones (the source's measure of loss for dup = auto).
  EXPECT_EQ(rx.stats().udp_datagrams, 3u);
}

TEST_F(TrustTest, OnAnAuthenticatedSessionOnlyDatagramsWithTheRightMacCount) {
  UdpTrust t = from_source();
  net::MacKey key, other;
  key.bytes.fill(7);
  other.bytes.fill(8);
  t.mac = key;
  MirrorReceiver rx = make(t);
  auto sealed = [](std::vector<std::byte> d, const net::MacKey& k) {
    const size_t n = d.size();
    d.resize(n + proto::kMacFrameBytes);
    d.resize(seal(k, d.data(), n, kSession));
    return d;
  };
  rx.on_datagram(data_frame(0, 2), kSource, 0);              // no MAC
  rx.on_datagram(sealed(data_frame(0, 2), other), kSource, 0);  // another key
  auto tampered = sealed(data_frame(0, 2), key);
  tampered[20] ^= std::byte{1};
  rx.on_datagram(tampered, kSource, 0);
  EXPECT_EQ(rx.stats().bad_mac, 3u);
  EXPECT_EQ(rx.next_seq(), 0u);
  rx.on_datagram(sealed(data_frame(0, 2), key), kSource, 0);
  rx.on_datagram(sealed(heartbeat(3), key), kSource, 0);
  EXPECT_EQ(rx.next_seq(), 2u);
  EXPECT_EQ(rx.known_end(), 3u);
  EXPECT_EQ(ring_seqs_of(ring_), range(0, 2));
}

TEST_F(TrustTest, OnATaggedSessionOnlyDatagramsEndingInItsTagCountAndASpoofersGuessesMoveNothing) {
  UdpTrust t = from_source();
  t.tag = TagFrame::of(kSession, 0x8badf00ddeadbeefull);
  MirrorReceiver rx = make(t);
  auto tagged = [](std::vector<std::byte> d, uint8_t session, uint64_t tag) {
    const TagFrame f = TagFrame::of(session, tag);
    d.insert(d.end(), f.bytes.begin(), f.bytes.end());
    return d;
  };
  // From the source's own address with its session byte, as a spoofer
  // who read the byte off the group would send: untagged, another tag,
  // the tag under another session byte, a tag one bit off, a MAC-shaped
  // trailer, and the tag in front of the frames instead of after them.
  rx.on_datagram(data_frame(0, 2), kSource, 0);
  rx.on_datagram(tagged(data_frame(0, 2), kSession, 0x8badf00ddeadbeeeull), kSource, 0);
  rx.on_datagram(tagged(data_frame(0, 2), kSession ^ 1, 0x8badf00ddeadbeefull), kSource, 0);
  rx.on_datagram(tagged(heartbeat(1000), kSession, 0x8badf00ddeadbeefull ^ (1ull << 63)), kSource, 0);
  std::vector<std::byte> mac_shaped = data_frame(0, 2);
  mac_shaped.resize(mac_shaped.size() + proto::kMacFrameBytes);
  (void)seal(net::MacKey{}, mac_shaped.data(), mac_shaped.size() - proto::kMacFrameBytes, kSession);
  rx.on_datagram(mac_shaped, kSource, 0);
  std::vector<std::byte> in_front(t.tag->bytes.begin(), t.tag->bytes.end());
  const std::vector<std::byte> frame = data_frame(0, 2);
  in_front.insert(in_front.end(), frame.begin(), frame.end());
  rx.on_datagram(in_front, kSource, 0);
  EXPECT_EQ(rx.stats().bad_tag, 6u);
  EXPECT_EQ(rx.stats().udp_rejected(), 6u);
  EXPECT_EQ(rx.next_seq(), 0u);
  EXPECT_EQ(rx.known_end(), 0u);
  EXPECT_TRUE(ring_seqs_of(ring_).empty());
  // The source's own datagrams, tagged: applied, the tag not taken for a frame.
  rx.on_datagram(tagged(data_frame(0, 2), kSession, 0x8badf00ddeadbeefull), kSource, 0);
  rx.on_datagram(tagged(heartbeat(3), kSession, 0x8badf00ddeadbeefull), kSource, 0);
  EXPECT_EQ(rx.stats().bad_tag, 6u);
  EXPECT_EQ(rx.stats().malformed, 0u);
  EXPECT_EQ(rx.stats().wrong_kind, 0u);
  EXPECT_EQ(rx.next_seq(), 2u);
  EXPECT_EQ(rx.known_end(), 3u);
  EXPECT_EQ(ring_seqs_of(ring_), range(0, 2));
}

TEST_F(TrustTest, UnknownKindsByUdpAreDroppedAndCounted) {
  MirrorReceiver rx = make(from_source());
  std::vector<std::byte> later(16);
  proto::encode_frame_header(proto::FrameHeader{static_cast<proto::FrameKind>(42), kSession, 0, 0, 5}, later.data());
  rx.on_datagram(later, kSource, 0);
  EXPECT_EQ(rx.stats().wrong_kind, 1u);
  EXPECT_EQ(rx.stats().udp_rejected(), 1u);
}

// ---- NAK timing

TEST_F(TrustTest, SeveralHolesShareOneNakWhenTheSourceTakesRanges) {
  MirrorConfig cfg;
  cfg.nak_ranges = proto::kMaxNakRanges;
  MirrorReceiver rx = make(from_source(), cfg);
  rx.on_datagram(data_frame(0, 10), kSource, 0);
  rx.on_datagram(data_frame(13, 2), kSource, 0);  // 10..12 lost
  rx.on_datagram(data_frame(20, 1), kSource, 0);  // 15..19 lost
  rx.on_datagram(heartbeat(25), kSource, 0);      // 21..24 lost
  const auto nak = rx.poll_nak(0);
  ASSERT_TRUE(nak);
  ASSERT_EQ(nak->count, 3u);
  EXPECT_FALSE(nak->repeat);
  EXPECT_EQ(nak->ranges[0].first, 10u);
  EXPECT_EQ(nak->ranges[0].last, 12u);
  EXPECT_EQ(nak->ranges[1].first, 15u);
  EXPECT_EQ(nak->ranges[1].last, 19u);
  EXPECT_EQ(nak->ranges[2].first, 21u);
  EXPECT_EQ(nak->ranges[2].last, 24u);
  EXPECT_EQ(rx.stats().holes, 3u);
  // Unanswered: the repeat is one NAK too, marked as a repeat.
  const auto again = rx.poll_nak(5 * kMs);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->repeat);
  EXPECT_EQ(again->count, 3u);
}

TEST_F(TrustTest, ASingleRangeSourceGetsOneRangePerNakLowestFirstAndNewHolesAreNotHeldUp) {
  MirrorReceiver rx = make(from_source());  // nak_ranges 1
  rx.on_datagram(data_frame(0, 10), kSource, 0);
  rx.on_datagram(data_frame(13, 2), kSource, 0);
  rx.on_datagram(data_frame(20, 1), kSource, 0);
  EXPECT_EQ(only(rx.poll_nak(0)).first, 10u);
  EXPECT_FALSE(rx.poll_nak(10 * kUs));  // NAKs at most every 50 us
  EXPECT_EQ(only(rx.poll_nak(60 * kUs)).first, 15u);
  EXPECT_FALSE(rx.poll_nak(200 * kUs));  // both outstanding
}

TEST_F(TrustTest, NewRangesAndRepeatsNeverShareANak) {
  MirrorConfig cfg;
  cfg.nak_ranges = proto::kMaxNakRanges;
  MirrorReceiver rx = make(from_source(), cfg);
  rx.on_datagram(data_frame(0, 10), kSource, 0);
  rx.on_datagram(data_frame(13, 2), kSource, 0);
  ASSERT_TRUE(rx.poll_nak(0));                        // 10..12
  rx.on_datagram(data_frame(20, 1), kSource, 4 * kMs);  // 15..19: new
  const auto a = rx.poll_nak(5 * kMs);                  // 10..12 is due again too (1 ms)
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->repeat);  // the lowest candidate decides
  ASSERT_EQ(a->count, 1u);
  EXPECT_EQ(a->ranges[0].first, 10u);
  const auto b = rx.poll_nak(5 * kMs + 60 * kUs);
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->repeat);
  EXPECT_EQ(b->ranges[0].first, 15u);
}

TEST_F(TrustTest, TheFirstRepeatComesAtTheMeasuredRepairTimeOutThenBacksOffToTheCap) {
  MirrorConfig cfg;
  cfg.nak_repeat_max_ns = 80 * kMs;
  MirrorReceiver rx = make(from_source(), cfg);
  rx.on_datagram(data_frame(0, 1), kSource, 0);
  // A first hole, repaired 300 us after its NAK: the estimate is 300 us.
  rx.on_datagram(data_frame(2, 1), kSource, 0);
  ASSERT_TRUE(rx.poll_nak(0));
  tcp_to(rx, data_frame(1, 1), 300 * kUs);
  EXPECT_FALSE(rx.poll_nak(300 * kUs));
  // The next hole is asked again after max(250 us, 300 + 4 x 150 us).
  rx.on_datagram(data_frame(4, 1), kSource, 1 * kMs);
  ASSERT_TRUE(rx.poll_nak(1 * kMs));
  EXPECT_FALSE(rx.poll_nak(1 * kMs + 890 * kUs));
  const auto r1 = rx.poll_nak(1 * kMs + 900 * kUs);
  ASSERT_TRUE(r1);
  EXPECT_TRUE(r1->repeat);
  // Then 20, 40, 80, 80 ms apart.
  uint64_t t = 1 * kMs + 900 * kUs;
  for (uint64_t wait : {20 * kMs, 40 * kMs, 80 * kMs, 80 * kMs}) {
    EXPECT_FALSE(rx.poll_nak(t + wait - 10 * kUs));
    ASSERT_TRUE(rx.poll_nak(t + wait));
    t += wait;
  }
  EXPECT_EQ(rx.stats().nak_repeats, 5u);
}

TEST_F(TrustTest, ADuplicateDatagramIsHeldOnceSoDupDoesNotDivideTheHoldBack) {
  MirrorConfig cfg;
  cfg.hold_back_frames = 2;
  MirrorReceiver rx = make(from_source(), cfg);
  for (int i = 0; i < 4; ++i) rx.on_datagram(data_frame(5, 1), kSource, 0);  // dup 4
  rx.on_datagram(data_frame(6, 1), kSource, 0);
  EXPECT_EQ(rx.held_frames(), 2u);
  EXPECT_EQ(rx.stats().held_duplicates, 3u);
  EXPECT_EQ(rx.stats().hold_overflow, 0u);
  tcp_to(rx, data_frame(0, 5));
  EXPECT_EQ(rx.next_seq(), 7u);
}

TEST(MirrorWriterTest, RefusesARingThatIsNotSparse) {
  ScopedRing r(ring::testing::fixed_ring(16, kSlot));
  auto w = MirrorWriter::attach(r.open());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("not a sparse ring"), std::string::npos);
}

}  // namespace
}  // namespace ringfire::dataplane
