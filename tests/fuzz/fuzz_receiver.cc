// fuzz_receiver.cc — libFuzzer target for the mirror's receive path: any
// sequence of datagrams and TCP frames, from a stranger, from the source's
// address under another session byte, or from the source itself. Oracle:
// no sanitizer report; nothing from a stranger or another session moves any
// state (next_seq, known_end, the hold-back, the ring); whatever the source
// sends, no datagram reaches past the plausibility window, the hold-back
// stays within its bounds, no sequence reaches 2^62, and every NAK names at most nak_ranges ranges in
// ascending order, none longer than nak_max_records.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "dataplane/mirror_receiver.h"
#include "ring/ring_file.h"
#include "tests/fuzz/require.h"

using namespace ringfire;

namespace {

constexpr uint8_t kSession = 0x5a;
constexpr uint64_t kWindow = 4096;
const net::Endpoint kSource{0xC6120001, 7402};
const net::Endpoint kStranger{0xC6120009, 7402};

// fresh_writer: the writer of an empty sparse ring, the same for every
// input, so that each input is reproducible on its own. The ring is made
// once per process (unlinked at once: nothing is left behind, its
// descriptor held), and its pristine bytes are written back before each
// input: making a ring (fallocate, populate, rename, unlink) was two
// thirds of an input's cost.
std::unique_ptr<dataplane::MirrorWriter> fresh_writer() {
  struct Pristine {
    int fd = -1;
    std::string path;
    std::string image;
  };
  static const Pristine p = [] {
    ring::RingOptions o;
    o.name = "rf-fuzz-receiver-" + std::to_string(getpid());
    o.capacity = 256;
    o.slot_size = 32;
    o.flags = ring::kFlagSparse;
    (void)ring::RingFile::remove(o.name);
    auto f = ring::RingFile::create(o);
    if (!f.ok()) std::abort();
    Pristine q;
    q.fd = open(f->path().c_str(), O_RDWR | O_CLOEXEC);
    (void)ring::RingFile::remove(o.name);
    if (q.fd < 0) std::abort();
    struct stat st {};
    if (fstat(q.fd, &st) != 0) std::abort();
    q.image.resize(static_cast<size_t>(st.st_size));
    if (pread(q.fd, q.image.data(), q.image.size(), 0) != static_cast<ssize_t>(q.image.size())) std::abort();
    q.path = "/proc/self/fd/" + std::to_string(q.fd);
    return q;
  }();
  if (pwrite(p.fd, p.image.data(), p.image.size(), 0) != static_cast<ssize_t>(p.image.size())) std::abort();
  auto opened = ring::RingFile::open(p.path);
  if (!opened.ok()) std::abort();
  auto mw = dataplane::MirrorWriter::attach(std::move(*opened));
  if (!mw.ok()) std::abort();
  return std::make_unique<dataplane::MirrorWriter>(std::move(*mw));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::unique_ptr<dataplane::MirrorWriter> writer = fresh_writer();
  dataplane::MirrorWriter& w = *writer;
  dataplane::MirrorConfig cfg;
  cfg.hold_back_frames = 16;
  cfg.hold_back_bytes = 4096;
  cfg.plausible_window = kWindow;
  cfg.nak_max_records = 100;
  cfg.nak_ranges = 1 + (size % 64);
  dataplane::UdpTrust trust;
  trust.source_ip = kSource.ip;
  const uint64_t start = w.next_seq();
  dataplane::MirrorReceiver rx(&w, cfg, start, kSession, trust);
  proto::ConstBytes in(reinterpret_cast<const std::byte*>(data), size);
  uint64_t now = 1'000'000;
  // Each chunk: a control byte (who sends it, how), a length byte, the bytes.
  while (in.size() >= 2) {
    const uint8_t how = std::to_integer<uint8_t>(in[0]);
    const size_t len = std::min<size_t>(std::to_integer<uint8_t>(in[1]) * 8u, in.size() - 2);
    const proto::ConstBytes chunk = in.subspan(2, len);
    in = in.subspan(2 + len);
    now += 1000 * (how >> 4);
    const uint64_t next = rx.next_seq(), end = rx.known_end();
    const size_t held = rx.held_frames();
    const uint64_t ring_end = w.next_seq();
    switch (how & 3) {
      case 0:  // a stranger: changes nothing
        rx.on_datagram(chunk, kStranger, now);
        REQUIRE(rx.next_seq() == next && rx.known_end() == end && rx.held_frames() == held &&
                w.next_seq() == ring_end);
        break;
      case 1: {  // the source's address, one DATA or HEARTBEAT of another session: changes nothing
        proto::Frame f;
        if (proto::decode_frame(chunk, chunk.size(), &f) != proto::DecodeError::kOk) break;
        if (f.header.kind != proto::FrameKind::kData && f.header.kind != proto::FrameKind::kHeartbeat) break;
        std::vector<std::byte> d(chunk.begin(), chunk.begin() + 16 + f.header.len);
        if (std::to_integer<uint8_t>(d[1]) == kSession) d[1] = std::byte{kSession ^ 1};
        rx.on_datagram(d, kSource, now);
        REQUIRE(rx.next_seq() == next && rx.known_end() == end && rx.held_frames() == held);
        break;
      }
      case 2: {  // the source by UDP: one frame moves nothing past the window
        // (Every held frame was plausible when it came, against a next_seq
        // no later than now: so a frame and what it releases end within
        // the window of today's position. Frames after the first of a
        // datagram count from where the first left it.)
        proto::Frame f;
        const bool one = proto::decode_frame(chunk, chunk.size(), &f) == proto::DecodeError::kOk &&
                         chunk.size() == 16 + f.header.len;
        rx.on_datagram(chunk, kSource, now);
        if (one) {
          const uint64_t base = std::max(next, rx.vouched_end());
          const uint64_t bound = base > UINT64_MAX - kWindow ? UINT64_MAX : base + kWindow;
          REQUIRE(rx.known_end() <= bound || rx.known_end() == end);
          REQUIRE(rx.next_seq() <= bound);
        }
        break;
      }
      case 3: {  // the source over TCP: its word
        proto::Frame f;
        if (proto::decode_frame(chunk, chunk.size(), &f) == proto::DecodeError::kOk &&
            (f.header.kind == proto::FrameKind::kData || f.header.kind == proto::FrameKind::kGap ||
             f.header.kind == proto::FrameKind::kHeartbeat)) {
          rx.on_tcp_frame(f, chunk.first(16 + f.header.len), now);
        }
        break;
      }
    }
    REQUIRE(rx.held_frames() <= cfg.hold_back_frames);
    REQUIRE(rx.next_seq() <= proto::kMaxSequence && w.next_seq() <= proto::kMaxSequence);
    (void)rx.take_position_request();
    (void)rx.take_probe();
    if (auto nak = rx.poll_nak(now)) {
      REQUIRE(nak->count >= 1 && nak->count <= cfg.nak_ranges);
      for (uint32_t i = 0; i < nak->count; ++i) {
        REQUIRE(nak->ranges[i].first <= nak->ranges[i].last);
        REQUIRE(nak->ranges[i].last - nak->ranges[i].first < cfg.nak_max_records);
        REQUIRE(nak->ranges[i].first >= rx.next_seq());
        if (i > 0) REQUIRE(nak->ranges[i].first > nak->ranges[i - 1].last);
      }
    }
  }
  return 0;
}
