// serve_control.cc — source-side sessions, NAK service, TCP-mode streaming.
#include "control/serve_control.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "control/ring_geometry.h"
#include "dataplane/data_framer.h"

namespace ringfire::control {

using dataplane::Endpoint;
using proto::Frame;
using proto::FrameKind;

namespace {

uint64_t random_token() {
  uint64_t t = 0;
  while (t == 0) {
    if (getrandom(&t, sizeof(t), 0) != sizeof(t)) t = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(getpid());
  }
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServeControl>> ServeControl::start(const ServeControlConfig& c,
                                                                 dataplane::ServeLink* worker) {
  auto info = ring::RingFile::open(c.ring);
  if (!info.ok()) return info.status();
  std::unique_ptr<ServeControl> s(new ServeControl(c, worker, std::move(*info)));
  auto fd = tcp_listen(c.listen);
  if (!fd.ok()) return fd.status();
  s->listen_fd_ = *fd;
  s->listening_ = socket_local(*fd);
  s->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // nullptr marks the listening socket
  epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->listen_fd_, &ev);
  s->notify_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ev.data.ptr = &s->notify_fd_;  // marks the worker's eventfd
  epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->notify_fd_, &ev);
  worker->notify_fd = s->notify_fd_;
  return s;
}

ServeControl::ServeControl(const ServeControlConfig& c, dataplane::ServeLink* worker,
                           ring::RingFile info)
    : config_(c), worker_(worker), info_(std::move(info)) {
  // A TCP frame must hold the largest record the ring can carry.
  const uint64_t largest = info_.blob() ? ring::max_blob_bytes(info_.header().arena_size)
                                        : info_.slot_size();
  frame_buf_.resize(std::max<size_t>(c.tcp_frame_bytes,
                                     proto::kFrameHeaderBytes + proto::kBlobRecordHeader + largest));
}

void ServeControl::send_oversized() {
  uint64_t seq;
  while (worker_->oversized.try_pop(&seq)) {
    if (!oversized_reader_ || oversized_reader_->cursor() > seq) {
      auto file = ring::RingFile::open(info_.path());
      if (!file.ok()) return;
      auto r = ring::RawReader::attach(std::move(*file), ring::StartPosition::at(seq));
      if (!r.ok()) return;
      oversized_reader_.emplace(std::move(*r));
    }
    ring::RawReader& rd = *oversized_reader_;
    uint32_t len = 0;
    ring::ReadResult r;
    do {
      r = rd.next(&len);
    } while (r.ok && r.seq < seq);
    if (!r.ok || r.seq != seq) continue;  // overwritten already: mirrors NAK, get a GAP
    dataplane::DataFramer framer(rd.fixed_size(), 0);
    framer.begin(frame_buf_.data(), frame_buf_.size());
    if (!framer.add(seq, rd.record(), len)) continue;  // cannot happen: sized for the ring
    const size_t n = framer.finish();
    for (auto& m : mirrors_) {
      if (m->streaming && !m->tcp_reader) m->conn.send(proto::ConstBytes(frame_buf_.data(), n));
    }
    ++stats_.oversized;
  }
}

ServeControl::~ServeControl() {
  mirrors_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (notify_fd_ >= 0) close(notify_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

bool ServeControl::has_tcp_mirrors() const {
  return std::any_of(mirrors_.begin(), mirrors_.end(),
                     [](const auto& m) { return m->tcp_reader.has_value(); });
}

void ServeControl::accept_all() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto m = std::make_unique<Mirror>(fd);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = m.get();
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    mirrors_.push_back(std::move(m));
    ++stats_.accepted;
  }
}

void ServeControl::drop(size_t index) {
  Mirror& m = *mirrors_[index];
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, m.conn.fd(), nullptr);
  if (m.token != 0) {
    // Best effort: if the queue is full the token simply stays allowed.
    (void)worker_->commands.try_push(
        dataplane::ServeCommand{dataplane::ServeCommand::Kind::kForgetToken, m.token});
  }
  mirrors_.erase(mirrors_.begin() + static_cast<std::ptrdiff_t>(index));
}

bool ServeControl::on_hello(Mirror& m, const Frame& f) {
  proto::Hello hello;
  if (proto::decode_hello(f, &hello) != proto::DecodeError::kOk) return false;
  const ring::RingHeader& h = info_.header();
  if (hello.expected_schema != 0 && hello.expected_schema != h.schema_signature) return false;
  const uint64_t ws = h.write_seq.load(std::memory_order_acquire);
  const uint64_t oldest = ws > h.capacity ? ws - h.capacity : 0;
  const uint64_t sending = worker_->stats.next_to_send.load(std::memory_order_acquire);
  const bool tcp_mode = (hello.flags & proto::kHelloTcpOnly) != 0 ||
                        (!config_.multicast && config_.unicast_port == 0);
  const bool unicast = !tcp_mode && config_.unicast_port != 0 &&
                       (!config_.multicast || (hello.flags & proto::kHelloPrefersUnicast) != 0);
  // The first sequence this mirror will be sent. A resume beyond what the
  // ring has ever held is answered with the ring's end, which the mirror
  // reads as "this is not the ring you were mirroring".
  uint64_t first;
  if (hello.first_wanted == proto::kHelloLatest) {
    first = tcp_mode ? ws : sending;
  } else if (hello.first_wanted == proto::kHelloOldest) {
    first = oldest;
  } else {
    first = std::min(hello.first_wanted, ws);
  }

  std::vector<std::byte> buf(128);
  const proto::Geometry g = geometry_of(h, first);
  if (!m.conn.send(proto::ConstBytes(buf.data(), proto::encode_geometry(g, buf)))) return false;

  proto::Multicast mc;
  mc.mtu = config_.mtu;
  mc.ttl = config_.ttl;
  mc.session = config_.session;
  m.udp = !tcp_mode;
  if (tcp_mode) {
    mc.port = 0;
  } else if (unicast) {
    m.token = random_token();
    if (!worker_->commands.try_push(
            dataplane::ServeCommand{dataplane::ServeCommand::Kind::kAllowToken, m.token})) {
      return false;
    }
    mc.port = config_.unicast_port;
    mc.token = m.token;
    mc.data_ip = config_.data_ip;
  } else {
    mc.group = config_.multicast->ip;
    mc.port = config_.multicast->port;
  }
  // Group 0 and port 0: DATA comes on this connection (TCP mode).
  const size_t n = proto::encode_multicast(mc, buf);
  if (!m.conn.send(proto::ConstBytes(buf.data(), n))) return false;
  if (tcp_mode) {
    auto r = ring::RawReader::attach(*ring::RingFile::open(info_.path()), ring::StartPosition::at(first));
    if (!r.ok()) return false;
    m.tcp_reader.emplace(std::move(*r));
  }
  m.streaming = true;
  ++stats_.mirrors;
  return true;
}

uint64_t ServeControl::send_range(Mirror& m, ring::RawReader& reader, uint64_t first,
                                  uint64_t last, uint64_t max_records) {
  // Frames are packed to tcp_frame_bytes; a record larger than that gets a
  // frame of its own, up to the largest record the ring can hold.
  dataplane::DataFramer framer(reader.fixed_size(), 0);
  framer.begin(frame_buf_.data(), config_.tcp_frame_bytes);
  uint64_t want = first;
  uint64_t sent = 0;
  auto flush = [&] {
    if (const size_t n = framer.finish()) m.conn.send(proto::ConstBytes(frame_buf_.data(), n));
    framer.begin(frame_buf_.data(), config_.tcp_frame_bytes);
  };
  auto gap = [&](uint64_t next) {
    flush();
    std::byte g[proto::kFrameHeaderBytes];
    proto::encode_gap(next, g);
    m.conn.send(g);
    ++stats_.gaps;
  };
  while (want <= last && sent < max_records) {
    uint32_t len = 0;
    const ring::ReadResult r = reader.next(&len);
    if (!r.ok) {
      // Nothing more (yet). If the reader was lapped on the way, everything
      // from `want` is gone: say where the stream resumes.
      if (r.lost != 0 || reader.cursor() > want) gap(reader.cursor());
      break;
    }
    if (r.seq != want) gap(r.seq);  // lapped, or a hole in a sparse (hub) ring
    if (r.seq > last) break;
    if (!framer.add(r.seq, reader.record(), len)) {
      flush();
      if (!framer.add(r.seq, reader.record(), len)) {
        framer.begin(frame_buf_.data(), frame_buf_.size());
        framer.add(r.seq, reader.record(), len);
        flush();
      }
    }
    want = r.seq + 1;
    ++sent;
  }
  flush();
  return sent;
}

bool ServeControl::on_nak(Mirror& m, const proto::Nak& nak) {
  ++stats_.naks;
  const bool repeat = nak.first == m.last_nak_first;
  m.last_nak_first = nak.first;
  if (m.udp && !repeat && nak.last >= nak.first && nak.last - nak.first < config_.udp_repair_max) {
    const ring::RingHeader& h = info_.header();
    const uint64_t ws = h.write_seq.load(std::memory_order_acquire);
    const uint64_t oldest = ws > h.capacity ? ws - h.capacity : 0;
    // Only what the ring still holds, with room to spare before it laps.
    if ((ws <= h.capacity || nak.first >= oldest + h.capacity / 8) && nak.last < ws &&
        worker_->commands.try_push(dataplane::ServeCommand{dataplane::ServeCommand::Kind::kRepair, m.token,
                                                           nak.first, nak.last})) {
      ++stats_.udp_repairs;
    }
  }
  // And over TCP, always: the datagram is a second, independent path, the
  // connection the sure one (whichever arrives second is dropped as stale).
  // A lost repair datagram alone would hold the hole, and every record
  // behind it, until the NAK repeats (20 ms).
  auto file = ring::RingFile::open(info_.path());
  if (!file.ok()) return false;
  auto reader = ring::RawReader::attach(std::move(*file), ring::StartPosition::at(nak.first));
  if (!reader.ok()) return false;
  const uint64_t last = std::min<uint64_t>(nak.last, nak.first + 65535);
  stats_.nak_records += send_range(m, *reader, nak.first, last, UINT64_MAX);
  return true;
}

bool ServeControl::on_readable(Mirror& m) {
  if (!m.conn.read_available()) return false;
  for (;;) {
    Frame f;
    size_t size = 0;
    const TcpConn::Next next = m.conn.next_frame(&f, &size);
    if (next == TcpConn::Next::kNeedMore) return true;
    if (next == TcpConn::Next::kMalformed) return false;
    bool ok = true;
    if (!m.streaming) {
      ok = f.header.kind == FrameKind::kHello && on_hello(m, f);
    } else if (f.header.kind == FrameKind::kNak) {
      proto::Nak nak;
      ok = proto::decode_nak(f, &nak) == proto::DecodeError::kOk && on_nak(m, nak);
    }
    // Other frames from a mirror are ignored (a newer mirror's extensions).
    m.conn.consume(size);
    if (!ok) return false;
  }
}

bool ServeControl::poll(uint64_t timeout_us) {
  epoll_event events[64];
  const timespec timeout{static_cast<time_t>(timeout_us / 1'000'000),
                         static_cast<long>(timeout_us % 1'000'000) * 1000};
  const int n = epoll_pwait2(epoll_fd_, events, 64, &timeout, nullptr);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.ptr == nullptr) {
      accept_all();
      continue;
    }
    if (events[i].data.ptr == &notify_fd_) {
      uint64_t ignored;
      (void)!read(notify_fd_, &ignored, sizeof(ignored));
      continue;
    }
    auto* m = static_cast<Mirror*>(events[i].data.ptr);
    const auto it = std::find_if(mirrors_.begin(), mirrors_.end(),
                                 [&](const auto& p) { return p.get() == m; });
    if (it == mirrors_.end()) continue;
    const bool was_streaming = m->streaming;
    if (!on_readable(*m)) {
      if (!was_streaming && !m->streaming) ++stats_.refused;
      if (m->streaming && stats_.mirrors > 0) --stats_.mirrors;
      drop(static_cast<size_t>(it - mirrors_.begin()));
    }
  }
  send_oversized();
  bool more = false;
  for (size_t i = 0; i < mirrors_.size();) {
    Mirror& m = *mirrors_[i];
    if (m.tcp_reader && m.conn.pending() < config_.max_backlog_bytes / 2) {
      const uint64_t sent = send_range(m, *m.tcp_reader, m.tcp_reader->cursor(), UINT64_MAX,
                                       config_.tcp_records_per_poll);
      stats_.tcp_records += sent;
      more |= sent == config_.tcp_records_per_poll;
    }
    if (!m.conn.flush() || m.conn.pending() > config_.max_backlog_bytes) {
      if (m.conn.pending() > config_.max_backlog_bytes) ++stats_.dropped_slow;
      if (m.streaming && stats_.mirrors > 0) --stats_.mirrors;
      drop(i);
      continue;
    }
    ++i;
  }
  return more;
}

}  // namespace ringfire::control
