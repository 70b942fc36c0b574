// protocol_sim_test.cc — a deterministic simulation of a whole mirroring
// session on a fake clock: a producer writes the source ring, a serve loop
// frames and paces it into datagrams, a seeded fault injector drops,
// duplicates, reorders and delays them, the mirror receiver holds and NAKs,
// and the source answers NAKs from its ring over an in-order "TCP" path.
// The mirror ring must end identical to the source, record for record.
#include <cstdio>
#include <deque>
#include <optional>
#include <vector>

#include "dataplane/fault_shaper.h"
#include "dataplane/mirror_receiver.h"
#include "dataplane/pacer.h"
#include "gtest/gtest.h"
#include "proto/data_framer.h"
#include "ring/check_record.h"
#include "ring/consumer.h"
#include "ring/producer.h"
#include "tests/ring/scoped_ring.h"

namespace ringfire::dataplane {
namespace {

using ring::testing::ScopedRing;

constexpr uint32_t kSlot = 32;
constexpr uint8_t kSession = 7;
constexpr uint64_t kUs = 1000;
const Endpoint kSource{0xC6120001, 7402};

struct InFlight {
  uint64_t at_ns;
  std::vector<std::byte> bytes;
};

struct SimResult {
  MirrorStats stats;
  uint64_t datagrams = 0;
  uint64_t retransmit_frames = 0;
  uint64_t gaps_sent = 0;
  uint64_t end_ns = 0;
};

SimResult simulate(const ScopedRing& source, const ScopedRing& mirror, uint64_t total,
                   const FaultConfig& faults) {
  SimResult res;
  auto producer = *ring::Producer::attach(source.open());
  auto serve = *ring::Consumer::attach(source.open(), ring::StartPosition::at(0));
  MirrorWriter writer = *MirrorWriter::attach(mirror.open());
  MirrorReceiver rx(&writer, MirrorConfig{}, 0, kSession);
  proto::DataFramer framer(kSlot, kSession);
  Pacer pacer(50 * kUs);
  std::vector<std::byte> frame_buf(1472);
  framer.begin(frame_buf.data(), frame_buf.size());
  std::deque<InFlight> udp;                // unordered: delivered by time
  std::deque<InFlight> tcp_to_mirror;      // in order
  std::deque<std::pair<uint64_t, proto::Nak>> tcp_to_source;
  uint64_t last_send_ns = 0;
  std::byte rec[kSlot];

  FaultShaper shaper(faults);
  auto send_udp = [&](std::vector<std::byte> d, uint64_t now) {
    ++res.datagrams;
    last_send_ns = now;
    shaper.offer(d, kSource, now, [&](proto::ConstBytes b, const Endpoint&) {
      udp.push_back({now + 20 * kUs, {b.begin(), b.end()}});
    });
  };
  auto flush = [&](uint64_t now) {
    const size_t n = framer.finish();
    if (n == 0) return;
    send_udp(std::vector<std::byte>(frame_buf.begin(), frame_buf.begin() + n), now);
    pacer.flushed(now);
    framer.begin(frame_buf.data(), frame_buf.size());
  };
  // answer_nak reads the source ring for the NAK'd range, as the source's
  // control thread will: DATA for what it holds, GAP for what it lost.
  auto answer_nak = [&](const proto::Nak& nak, uint64_t now) {
    auto c = *ring::Consumer::attach(source.open(), ring::StartPosition::at(nak.first));
    std::vector<std::byte> big(64 * 1024);
    proto::DataFramer tcp_framer(kSlot, 0);
    tcp_framer.begin(big.data(), big.size());
    for (uint64_t want = nak.first; want <= nak.last;) {
      ring::ReadResult r = c.try_read(rec);
      if (r.lost != 0 || (r.ok && r.seq != want)) {
        std::vector<std::byte> gap(16);
        proto::encode_gap(r.ok ? r.seq : c.cursor(), gap);
        tcp_to_mirror.push_back({now + 30 * kUs, gap});
        ++res.gaps_sent;
        return;
      }
      if (!r.ok) return;
      if (!tcp_framer.add(r.seq, rec, kSlot)) {
        const size_t n = tcp_framer.finish();
        tcp_to_mirror.push_back({now + 30 * kUs, {big.begin(), big.begin() + n}});
        ++res.retransmit_frames;
        tcp_framer.begin(big.data(), big.size());
        tcp_framer.add(r.seq, rec, kSlot);
      }
      ++want;
    }
    if (const size_t n = tcp_framer.finish()) {
      tcp_to_mirror.push_back({now + 30 * kUs, {big.begin(), big.begin() + n}});
      ++res.retransmit_frames;
    }
  };

  uint64_t now = 1'000'000;
  uint64_t published = 0;
  for (uint64_t tick = 0; tick < 2'000'000 && rx.next_seq() < total; ++tick, now += 10 * kUs) {
    // The producer: bursts of 0..7 records per 10 us (~350 k records/s).
    for (uint64_t i = 0; i < (tick * 2654435761u >> 7) % 8 && published < total; ++i, ++published) {
      ring::fill_record({producer.claim(), kSlot}, producer.next_seq(), now);
      producer.commit();
    }
    // The serve loop: at most 32 records per step, paced frames, heartbeats.
    for (int i = 0; i < 32; ++i) {
      ring::ReadResult r = serve.try_read(rec);
      if (!r.ok) break;
      if (!framer.add(r.seq, rec, kSlot)) {
        flush(now);
        framer.add(r.seq, rec, kSlot);
      }
      pacer.took(now);
    }
    if (!framer.empty() && pacer.due(now)) flush(now);
    if (framer.empty() && now - last_send_ns >= 1000 * kUs) {
      std::vector<std::byte> hb(16);
      proto::encode_heartbeat(serve.cursor(), kSession, hb);
      send_udp(hb, now);
    }
    // The network (delayed datagrams leave the shaper when due).
    shaper.release(now, [&](proto::ConstBytes b, const Endpoint&) {
      udp.push_back({now + 20 * kUs, {b.begin(), b.end()}});
    });
    for (auto it = udp.begin(); it != udp.end();) {
      if (it->at_ns <= now) {
        rx.on_datagram(it->bytes, kSource, now);
        it = udp.erase(it);
      } else {
        ++it;
      }
    }
    while (!tcp_to_mirror.empty() && tcp_to_mirror.front().at_ns <= now) {
      proto::Frame f;
      const auto& b = tcp_to_mirror.front().bytes;
      EXPECT_EQ(proto::decode_frame(b, b.size(), &f), proto::DecodeError::kOk);
      rx.on_tcp_frame(f, b, now);
      tcp_to_mirror.pop_front();
    }
    if (auto nak = rx.poll_nak(now)) {
      for (uint32_t i = 0; i < nak->count; ++i) tcp_to_source.emplace_back(now + 30 * kUs, nak->ranges[i]);
    }
    while (!tcp_to_source.empty() && tcp_to_source.front().first <= now) {
      answer_nak(tcp_to_source.front().second, now);
      tcp_to_source.pop_front();
    }
  }
  res.stats = rx.stats();
  res.end_ns = now;
  const MirrorStats& st = res.stats;
  std::printf("sim: %llu records in %llu datagrams, %llu held, %llu dup, %llu NAKs (%llu repeats), "
              "%llu retransmitted frames, %llu GAPs (%llu records), %.1f ms simulated\n",
              static_cast<unsigned long long>(st.records), static_cast<unsigned long long>(res.datagrams),
              static_cast<unsigned long long>(st.frames_held), static_cast<unsigned long long>(st.duplicates),
              static_cast<unsigned long long>(st.naks), static_cast<unsigned long long>(st.nak_repeats),
              static_cast<unsigned long long>(res.retransmit_frames),
              static_cast<unsigned long long>(res.gaps_sent),
              static_cast<unsigned long long>(st.gap_records), static_cast<double>(now - 1'000'000) / 1e6);
  EXPECT_EQ(rx.next_seq(), total) << "the mirror did not catch up";
  return res;
}

// expect_identical reads both rings from 0 and compares every record.
void expect_identical(const ScopedRing& source, const ScopedRing& mirror, uint64_t total) {
  auto a = *ring::Consumer::attach(source.open(), ring::StartPosition::at(0));
  auto b = *ring::Consumer::attach(mirror.open(), ring::StartPosition::at(0));
  std::byte ra[kSlot], rb[kSlot];
  uint64_t n = 0;
  for (ring::ReadResult x, y; (x = a.try_read(ra)).ok; ++n) {
    y = b.try_read(rb);
    ASSERT_TRUE(y.ok) << "mirror ends at " << n;
    ASSERT_EQ(x.seq, y.seq);
    ASSERT_EQ(x.lost + y.lost, 0u);
    ASSERT_EQ(std::memcmp(ra, rb, kSlot), 0) << "record " << x.seq << " differs";
    ASSERT_EQ(ring::check_record(rb, kSlot, y.seq), ring::CheckVerdict::kOk);
  }
  EXPECT_EQ(n, total);
  EXPECT_FALSE(b.try_read(rb).ok);
}

TEST(ProtocolSimulation, ACleanNetworkNeedsNoRepair) {
  constexpr uint64_t kTotal = 20000;
  ScopedRing source(ring::testing::fixed_ring(32768, kSlot));
  ScopedRing mirror(ring::testing::fixed_ring(32768, kSlot, ring::kFlagSparse));
  const SimResult r = simulate(source, mirror, kTotal, FaultConfig{});
  expect_identical(source, mirror, kTotal);
  EXPECT_EQ(r.stats.naks, 0u);
  EXPECT_EQ(r.stats.duplicates, 0u);
  EXPECT_GT(r.stats.records / r.datagrams, 2u);  // paced frames carry several records
}

TEST(ProtocolSimulation, FivePercentLossWithReorderingAndDuplicationLosesNothing) {
  constexpr uint64_t kTotal = 20000;
  ScopedRing source(ring::testing::fixed_ring(32768, kSlot));
  ScopedRing mirror(ring::testing::fixed_ring(32768, kSlot, ring::kFlagSparse));
  FaultConfig faults;
  faults.drop_ppm = 50000;
  faults.duplicate_ppm = 50000;
  faults.reorder_ppm = 50000;
  faults.delay_ppm = 20000;
  faults.delay_ns = 300 * kUs;
  faults.seed = 42;
  const SimResult r = simulate(source, mirror, kTotal, faults);
  expect_identical(source, mirror, kTotal);
  EXPECT_GT(r.stats.naks, 10u);
  EXPECT_GT(r.stats.duplicates, 0u);
  EXPECT_GT(r.stats.frames_held, 0u);
  EXPECT_EQ(r.stats.gap_records, 0u);
  EXPECT_EQ(r.gaps_sent, 0u);
}

TEST(ProtocolSimulation, ASourceThatNoLongerHoldsAHoleAnswersWithAGap) {
  // A 256-slot source ring and 50 % loss: repairs fall behind the writer,
  // the source answers GAP, and the mirror skips exactly those records.
  constexpr uint64_t kTotal = 20000;
  ScopedRing source(ring::testing::fixed_ring(256, kSlot));
  ScopedRing mirror(ring::testing::fixed_ring(32768, kSlot, ring::kFlagSparse));
  FaultConfig faults;
  faults.drop_ppm = 500000;
  faults.delay_ppm = 400000;
  faults.delay_ns = 2000 * kUs;
  faults.seed = 7;
  const SimResult r = simulate(source, mirror, kTotal, faults);
  EXPECT_GT(r.gaps_sent, 0u);
  EXPECT_GT(r.stats.gap_records, 0u);
  auto c = *ring::Consumer::attach(mirror.open(), ring::StartPosition::at(0));
  std::byte rec[kSlot];
  uint64_t read = 0;
  for (ring::ReadResult x; (x = c.try_read(rec)).ok; ++read) {
    ASSERT_EQ(ring::check_record(rec, kSlot, x.seq), ring::CheckVerdict::kOk);
  }
  EXPECT_EQ(read + c.holes_skipped(), kTotal);
  EXPECT_EQ(c.holes_skipped(), r.stats.gap_records);
  EXPECT_EQ(c.total_lost(), 0u);
}

}  // namespace
}  // namespace ringfire::dataplane
