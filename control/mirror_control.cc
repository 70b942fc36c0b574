// mirror_control.cc — the mirror session's state machine: connect,
// handshake (and the PSK proofs), ring setup, the data plane asked for,
// relay, health, liveness, reconnect.
#include "control/mirror_control.h"

#include <poll.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "control/ring_geometry.h"
#include "dataplane/kernel_udp.h"
#include "ring/ring_file.h"

namespace ringfire::control {

using net::Endpoint;

namespace {

// refusal turns the source's REFUSE into the error a user acts on.
absl::Status refusal(const proto::Frame& f, const Endpoint& source) {
  proto::Refuse r;
  if (proto::decode_refuse(f, &r) != proto::DecodeError::kOk) {
    return absl::DataLossError(absl::StrCat("the source at ", net::to_string(source),
                                            " sent a malformed REFUSE"));
  }
  const std::string msg = absl::StrCat("the source at ", net::to_string(source), " refused: ",
                                       proto::refuse_reason_name(r.reason), ": ", std::string(r.text));
  switch (r.reason) {
    case proto::RefuseReason::kBusy:
    case proto::RefuseReason::kHandshakeTimeout:
    case proto::RefuseReason::kSlow:
      return absl::UnavailableError(msg);
    case proto::RefuseReason::kAuthRequired:
    case proto::RefuseReason::kAuthFailed:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::FailedPreconditionError(msg);
  }
}

// handshake_limits: what the source may send before streaming begins.
net::FrameLimits handshake_limits() {
  net::FrameLimits l;
  l.max_body.fill(0);
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kGeometry)] = 256;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kMulticast)] = 256;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kAuth)] = 256;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kRefuse)] = 256;
  l.unknown = 0;
  return l;
}

// stream_limits: what the source may send once streaming: DATA up to the
// largest record the ring holds (or 64 KiB of smaller ones), GAP and
// HEARTBEAT with no body, a REFUSE; anything newer is skipped.
net::FrameLimits stream_limits(const ring::RingFile& f) {
  net::FrameLimits l;
  l.max_body.fill(net::kUnknownFrameBody);
  const uint64_t largest = f.blob() ? ring::max_blob_bytes(f.header().arena_size) : f.slot_size();
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kData)] =
      static_cast<uint32_t>(std::max<uint64_t>(64u << 10, proto::kBlobRecordHeader + largest));
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kGap)] = 0;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kHeartbeat)] = 0;
  l.max_body[static_cast<uint8_t>(proto::FrameKind::kRefuse)] = 256;
  return l;
}

// open_or_create_ring returns the mirror ring for `g`: the existing one if
// its geometry matches (and it is a mirror ring), or a new sparse ring.
absl::StatusOr<ring::RingFile> open_or_create_ring(const MirrorOptions& o, const proto::Geometry& g,
                                                   std::optional<ring::RingFile>& existing) {
  const std::string path = ring::ring_path(o.ring, o.dir);
  if (o.max_ring_bytes != 0) {
    // Checked by division: capacity × slot_size may not fit 64 bits.
    const bool over = g.arena_size > o.max_ring_bytes ||
                      (g.slot_size != 0 && g.capacity > (o.max_ring_bytes - g.arena_size) / g.slot_size);
    if (over) {
      return absl::ResourceExhaustedError(absl::StrCat("the source's ring (", g.capacity, " slots of ", g.slot_size,
                                                       " bytes, arena ", g.arena_size, ") is larger than the ",
                                                       o.max_ring_bytes, " bytes this mirror accepts"));
    }
  }
  if (!existing) return ring::RingFile::create(mirror_ring_options(g, path, o.lazy_ring));
  // The mapping connect() made to read where the ring ends: not mapped
  // (and its page tables filled) a second time.
  ring::RingFile f = std::move(*existing);
  existing.reset();
  if (const std::string diff = geometry_mismatch(f, g); !diff.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "existing ring ", path, " does not match the source:", diff,
        " remove it or mirror into another name (nothing was written)"));
  }
  return f;
}


// tcp_connect_start begins a non-blocking connect; the fd becomes writable
// when it is done (SO_ERROR says how).
absl::StatusOr<int> tcp_connect_start(const Endpoint& to, uint32_t from_ip) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (absl::Status st = net::bind_source(fd, from_ip); !st.ok()) {
    close(fd);
    return st;
  }
  sockaddr_in a = net::to_sockaddr(to);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot reach source ", net::to_string(to), ": ",
                                               std::strerror(err)));
  }
  return fd;
}

}  // namespace

MirrorControl::MirrorControl(const MirrorOptions& o, MirrorPlane* plane,
                             std::function<void(const std::string&)> log)
    : o_(o), plane_(plane), log_(std::move(log)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  nak_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = nak_fd_;
  if (epoll_fd_ < 0 || nak_fd_ < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, nak_fd_, &ev) != 0) {
    fail(absl::InternalError(absl::StrCat("epoll/eventfd: ", std::strerror(errno))));
  }
}

MirrorControl::~MirrorControl() {
  stop();
  if (connecting_fd_ >= 0) close(connecting_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (nak_fd_ >= 0) close(nak_fd_);
}

void MirrorControl::close_link() {
  if (link_ == nullptr) return;
  const dataplane::MirrorWorkerStats& st = link_->stats;
  last_totals_ = SessionTotals{st.records.get(), st.next_seq.get(), st.naks.get(), st.nak_repeats.get(),
                               st.repair_srtt_ns.get(), st.gap_records.get()};
  plane_->close(link_);
  link_ = nullptr;
}

void MirrorControl::stop() {
  close_link();
  if (conn_) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn_->fd(), nullptr);
    conn_.reset();
  }
  if (state_ != State::kFailed) state_ = State::kStopped;
}

void MirrorControl::fail(const absl::Status& why) {
  failure_ = why;
  stop();
  state_ = State::kFailed;
  if (log_) log_(std::string(why.message()));
}

void MirrorControl::end_session(const std::string& why, uint64_t now_ns) {
  end_reason_ = why;
  const bool streamed = state_ == State::kStreaming;
  close_link();
  if (conn_) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn_->fd(), nullptr);
    conn_.reset();
  }
  if (connecting_fd_ >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, connecting_fd_, nullptr);
    close(connecting_fd_);
    connecting_fd_ = -1;
  }
  if (streamed && log_) log_(absl::StrCat("source gone (", why, ")"));
  // Still away: say so now and then (every 25th attempt, 5 s apart).
  if (!streamed && attempts_ % 25 == 1 && log_) log_(absl::StrCat("reconnecting: ", why));
  if (!o_.reconnect) {
    state_ = State::kStopped;
    return;
  }
  // A source that goes away is retried (it restarts); 200 ms apart.
  state_ = State::kWaiting;
  next_attempt_ns_ = now_ns + 200'000'000;
}

void MirrorControl::unavailable(const absl::Status& why, uint64_t now_ns) {
  if (!ever_streamed_ && !o_.wait_for_source) {
    fail(why);
  } else {
    end_session(std::string(why.message()), now_ns);
  }
}

void MirrorControl::connect(uint64_t now_ns) {
  // What the ring already holds decides where a resume starts.
  const std::string path = ring::ring_path(o_.ring, o_.dir);
  have_ = 0;
  existing_.reset();
  if (ring_ && !ring_->still_at(path)) ring_.reset();  // removed (or made again) since: not that ring now
  if (ring_) {
    // The ring this control's last session wrote, through the mapping that
    // session locked (a reader in this process may still share it, and so
    // the lock: a second descriptor could not take it again).
    have_ = ring_->header().write_seq.load(std::memory_order_acquire);  // pairs with the writer's release
    existing_.emplace(ring_->share());
  } else if (auto existing = ring::RingFile::open(path); existing.ok()) {
    have_ = existing->header().write_seq.load(std::memory_order_acquire);  // pairs with the writer's release
    existing_.emplace(std::move(*existing));
  } else if (existing.status().code() != absl::StatusCode::kNotFound) {
    fail(existing.status());
    return;
  }
  auto fd = tcp_connect_start(o_.source, o_.tcp_from_ip);
  if (!fd.ok()) {
    unavailable(fd.status(), now_ns);
    return;
  }
  connecting_fd_ = *fd;
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.fd = connecting_fd_;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, connecting_fd_, &ev) != 0) {
    fail(absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno))));  // out of resources: say so
    return;
  }
  state_ = State::kConnecting;
  deadline_ns_ = now_ns + o_.handshake_timeout_ns;
  ++attempts_;
}

bool MirrorControl::on_writable(uint64_t now_ns) {
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(connecting_fd_, SOL_SOCKET, SO_ERROR, &err, &len);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, connecting_fd_, nullptr);
  const int fd = std::exchange(connecting_fd_, -1);
  if (err != 0) {
    close(fd);
    const absl::Status st = absl::UnavailableError(absl::StrCat(
        "cannot reach source ", net::to_string(o_.source), ": ", std::strerror(err)));
    unavailable(st, now_ns);
    return false;
  }
  conn_.emplace(fd);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    fail(absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno))));
    return false;
  }

  hello_ = proto::Hello{};
  hello_.expected_schema = o_.expected_schema;
  switch (o_.from) {
    case MirrorOptions::From::kResume: hello_.first_wanted = have_; break;  // 0 = latest
    case MirrorOptions::From::kLatest: hello_.first_wanted = proto::kHelloLatest; break;
    case MirrorOptions::From::kOldest: hello_.first_wanted = proto::kHelloOldest; break;
    case MirrorOptions::From::kSequence:
      hello_.first_wanted = o_.from_seq == 0 ? proto::kHelloOldest : o_.from_seq;
      break;
  }
  // A mirror never asks again for what it holds: a ring that already ends
  // past where it would start resumes at its end (a restart with --from
  // oldest would otherwise be sent every record again over TCP).
  resuming_ = have_ != 0 && (hello_.first_wanted == have_ || hello_.first_wanted == proto::kHelloOldest ||
                             (o_.from == MirrorOptions::From::kSequence && hello_.first_wanted < have_));
  if (resuming_) hello_.first_wanted = have_;
  hello_.flags = proto::kHelloHealth;
  if (o_.multi_range_naks) hello_.flags |= proto::kHelloMultiNak;
  if (o_.unicast) hello_.flags |= proto::kHelloUnicastCapable | proto::kHelloPrefersUnicast;
  if (o_.tcp_only) hello_.flags |= proto::kHelloTcpOnly;
  hello_.flags |= proto::kHelloTag;  // unkeyed, every datagram must bear the tag MULTICAST gives
  if (o_.psk) {
    hello_.flags |= proto::kHelloAuth | proto::kHelloFrameMac;
    hello_.nonce = net::random_nonce();
  }
  if (o_.channel_token != 0) {
    hello_.flags |= proto::kHelloChannel;
    hello_.channel_token = o_.channel_token;
  }
  hello_bytes_.resize(proto::kFrameHeaderBytes + proto::kHelloMaxBody);
  hello_bytes_.resize(proto::encode_hello(hello_, hello_bytes_));
  awaiting_auth_ = o_.psk.has_value();
  geometry_.reset();
  data_key_.reset();
  punch_key_.reset();
  authenticated_ = false;
  frames_maced_ = false;
  if (!conn_->send(hello_bytes_)) {
    end_session("the source closed the connection during the handshake", now_ns);
    return false;
  }
  state_ = State::kHandshake;
  deadline_ns_ = now_ns + o_.handshake_timeout_ns;
  return true;
}

void MirrorControl::refused(const proto::Frame& f, uint64_t now_ns) {
  const absl::Status why = refusal(f, o_.source);
  // Busy, a handshake timeout, too slow: worth another try; the rest is final.
  if (why.code() == absl::StatusCode::kUnavailable) {
    unavailable(why, now_ns);
  } else {
    fail(why);
  }
}

bool MirrorControl::handshake(uint64_t now_ns) {
  const net::FrameLimits limits = handshake_limits();
  const bool open = conn_->read_available(64u << 10);
  using Taken = net::TcpConn::Taken;
  bool ended = false;  // fail() or unavailable() ended the session (conn_ may be gone)
  std::optional<proto::Multicast> multicast;
  const net::TcpConn::Next next = conn_->read_frames(limits, [&](const proto::Frame& f, proto::ConstBytes bytes) {
    ended = true;  // unless a step below goes on
    if (f.header.kind == proto::FrameKind::kRefuse) {
      refused(f, now_ns);
      return Taken::kGone;
    }
    if (awaiting_auth_) {
      // The source must prove it holds the key before we believe anything.
      proto::Auth a;
      if (f.header.kind != proto::FrameKind::kAuth || proto::decode_auth(f, &a) != proto::DecodeError::kOk ||
          a.step != proto::AuthStep::kSourceProof) {
        fail(absl::PermissionDeniedError(absl::StrCat(
            "the source at ", net::to_string(o_.source),
            " does not authenticate: give its serve the same --psk-file, or drop --psk-file here")));
        return Taken::kGone;
      }
      if (!net::proofs_equal(a.proof, net::source_proof(*o_.psk, hello_bytes_, a.nonce, a.salt, a.flags))) {
        fail(absl::PermissionDeniedError(absl::StrCat(
            "the source at ", net::to_string(o_.source),
            " failed authentication: its key is not this --psk-file's (or it is not the source)")));
        return Taken::kGone;
      }
      proto::Auth mine;
      mine.step = proto::AuthStep::kMirrorProof;
      mine.proof = net::mirror_proof(*o_.psk, hello_bytes_, bytes);
      data_key_ = net::data_key(*o_.psk, a.salt);
      punch_key_ = net::punch_key(*o_.psk, hello_.nonce, a.nonce);
      std::byte buf[proto::kFrameHeaderBytes + proto::kAuthMirrorBody];
      const proto::ConstBytes step2(buf, proto::encode_auth(mine, buf));
      // The source MACs every control frame after our step 2 (it said so in
      // its step 1, which our proof covers): so do we, from here (§1.8.2).
      // (The frame read is consumed after this: its size was read before.)
      frames_maced_ = (a.flags & proto::kAuthFrameMac) != 0;
      const net::FrameKeys keys = net::mirror_frame_keys(*o_.psk, hello_bytes_, bytes, step2, false);
      conn_->send(step2);
      if (frames_maced_) conn_->start_frame_mac(keys);
      awaiting_auth_ = false;
      authenticated_ = true;
      ended = false;
      return Taken::kNext;
    }
    if (!geometry_) {
      proto::Geometry g;
      if (f.header.kind != proto::FrameKind::kGeometry || proto::decode_geometry(f, &g) != proto::DecodeError::kOk ||
          g.first_seq >= proto::kMaxSequence) {
        fail(absl::DataLossError(absl::StrCat("the source's ", f.header.kind == proto::FrameKind::kGeometry
                                                                   ? "GEOMETRY is malformed"
                                                                   : "first frame is not GEOMETRY")));
        return Taken::kGone;
      }
      geometry_ = g;
      ended = false;
      return Taken::kNext;
    }
    proto::Multicast mc;
    if (f.header.kind != proto::FrameKind::kMulticast || proto::decode_multicast(f, &mc) != proto::DecodeError::kOk) {
      fail(absl::DataLossError("the source's MULTICAST is malformed"));
      return Taken::kGone;
    }
    multicast = mc;  // the handshake's last frame: acted on once it is consumed
    ended = false;
    return Taken::kLast;
  });
  if (next == net::TcpConn::Next::kFrame) {
    if (ended) return false;
    if (absl::Status st = on_multicast(*multicast, now_ns); !st.ok()) {
      fail(st);
      return false;
    }
    return true;
  }
  if (next == net::TcpConn::Next::kForged) {
    // Before its first sealed frame a source that refused our step 2 (or
    // timed the handshake out) sends its REFUSE unsealed (§1.8.2): read as
    // such — a refusal only ends the session, as a forger could anyway.
    proto::Frame f;
    if (!geometry_ && conn_->front_unsealed(&f) && f.header.kind == proto::FrameKind::kRefuse) {
      refused(f, now_ns);
      return false;
    }
    ++cstats_.bad_frame_mac;
    unavailable(absl::DataLossError("a control frame failed its MAC (forged, replayed or altered in flight)"), now_ns);
    return false;
  }
  if (next != net::TcpConn::Next::kNeedMore) {
    fail(absl::DataLossError(absl::StrCat("the peer at ", net::to_string(o_.source),
                                          " sent a malformed frame (not a ringfire source?)")));
    return false;
  }
  if (!open) {
    const absl::Status st = absl::UnavailableError(absl::StrCat(
        "the source at ", net::to_string(o_.source), " closed the connection during the handshake",
        o_.expected_schema != 0 ? " (the source refuses a schema mismatch)" : ""));
    unavailable(st, now_ns);
    return false;
  }
  return true;
}

absl::Status MirrorControl::on_multicast(const proto::Multicast& mc, uint64_t now_ns) {
  const proto::Geometry& g = *geometry_;
  const std::string path = ring::ring_path(o_.ring, o_.dir);
  if (o_.psk && (mc.features & proto::kFeatureMac) == 0 && mc.port != 0) {
    return absl::PermissionDeniedError("the source authenticated but does not MAC its datagrams");
  }
  features_ = mc.features;
  if (resuming_ && g.first_seq < have_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the source's ring ends at ", g.first_seq, " but this mirror already holds up to ", have_ - 1,
        ": it is not the ring this mirror was made from (recreated?). Remove ", path,
        " or mirror into another name (nothing was written)"));
  }
  auto file = open_or_create_ring(o_, g, existing_);
  if (!file.ok()) return file.status();
  limits_ = stream_limits(*file);
  ring_.emplace(file->share());
  auto writer = dataplane::MirrorWriter::attach(std::move(*file));
  if (!writer.ok()) return writer.status();
  first_seq_ = std::max(g.first_seq, writer->next_seq());

  MirrorPlaneRequest r;
  r.config = o_.worker;
  dataplane::MirrorWorkerConfig& wc = r.config;
  // Whom to believe on UDP: the source's data address (its TCP address if
  // it names none), from its data port for unicast; declared relays too.
  wc.trust.source_ip = mc.data_ip != 0 ? mc.data_ip : o_.source.ip;
  wc.trust.source_port = mc.group == 0 ? mc.port : 0;
  wc.trust.relay_count = 0;
  for (uint32_t ip : o_.accept_from) {
    if (wc.trust.relay_count < wc.trust.relays.size()) wc.trust.relays[wc.trust.relay_count++] = ip;
  }
  wc.trust.mac = data_key_;
  if (!data_key_ && (mc.features & proto::kFeatureTag) != 0) wc.trust.tag = dataplane::TagFrame::of(mc.session, mc.tag);
  const bool tagged = wc.trust.tag.has_value();
  const bool untagged = !data_key_ && mc.port != 0 && !tagged;
  wc.protocol.nak_ranges = (mc.features & proto::kFeatureMultiNak) != 0 ? proto::kMaxNakRanges : 1;
  wc.protocol.plausible_window = std::max<uint64_t>(g.capacity, 4096);
  if (mc.group == 0 && mc.port != 0) {
    wc.punch_to = Endpoint{mc.data_ip != 0 ? mc.data_ip : o_.source.ip, mc.port};
    wc.punch_token = mc.token;
    wc.punch_key = punch_key_;
  }
  if (mc.port != 0) {
    dataplane::BindSpec spec;
    if (mc.group != 0) {
      spec.udp_port = mc.port;
      spec.group = mc.group;
      spec.reuse = true;  // several mirrors of one group on a host share its port
    } else {
      spec.ip = o_.local_ip != 0 ? o_.local_ip : conn_->local().ip;
    }
    r.bind = spec;
  }
  r.writer.emplace(std::move(*writer));
  r.local_ip = o_.local_ip != 0 ? o_.local_ip : conn_->local().ip;
  r.first_seq = first_seq_;
  r.session = mc.session;
  r.nak_fd = nak_fd_;
  r.max_payload = std::max<uint16_t>(mc.mtu, 64);
  auto link = plane_->open(std::move(r));
  if (!link.ok()) return link.status();
  link_ = *link;
  description_ = mc.group != 0 ? absl::StrCat("multicast ", net::to_string(Endpoint{mc.group, mc.port}))
                 : mc.port != 0 ? absl::StrCat("unicast from ", net::to_string(*wc.punch_to))
                                : std::string("TCP");
  if (authenticated_) {
    // An older keyed source: its datagrams are MACed, its TCP frames are not.
    description_ += frames_maced_ ? ", authenticated" : ", authenticated (datagrams only: an older source)";
  } else if (tagged) {
    description_ += ", tagged";
  } else if (untagged) {
    // An older source: its datagrams carry no tag, so the session byte is
    // all a spoofer of its address must guess.
    description_ += ", UNTAGGED (an older source: a spoofer of its address guesses 8 bits; use --psk-file)";
  }
  const std::string where = plane_->describe();
  if (!where.empty()) absl::StrAppend(&description_, " (", where, ")");
  state_ = State::kStreaming;
  ever_streamed_ = true;
  attempts_ = 0;
  ++cstats_.sessions;
  last_rx_ns_ = now_ns;
  last_received_ = conn_->received();
  next_health_ns_ = now_ns;
  end_reason_.clear();
  if (log_) {
    log_(absl::StrCat(net::to_string(o_.source), " -> ", path, " from seq ", first_seq_, " over ",
                      description_));
  }
  // Frames that arrived right behind MULTICAST are already buffered.
  relay_frames();
  return absl::OkStatus();
}

bool MirrorControl::relay_frames() {
  queue_full_ = false;
  bool pushed = false;
  // A parked worker is woken once, after the frames are in its queue.
  auto wake = [&] {
    if (!pushed) return;
    if (dataplane::WorkerWake* w = link_->wake.load(std::memory_order_acquire)) w->poke();  // pairs with attach's release
  };
  using Taken = net::TcpConn::Taken;
  bool ended = false;
  const net::TcpConn::Next next = conn_->read_frames(limits_, [&](const proto::Frame& f, proto::ConstBytes plain) {
    const auto kind = f.header.kind;
    if (kind == proto::FrameKind::kRefuse) {
      end_reason_ = std::string(refusal(f, Endpoint{}).message());
      ended = true;
      return Taken::kLeave;
    }
    if (kind == proto::FrameKind::kData || kind == proto::FrameKind::kGap ||
        kind == proto::FrameKind::kHeartbeat) {
      if (plain.size() > link_->tcp_frames.max_message()) {  // can never be relayed
        end_reason_ = "the source sent a frame larger than this ring's records";
        ended = true;
        return Taken::kLeave;
      }
      if (!link_->tcp_frames.try_push(plain)) {
        queue_full_ = true;  // the worker is behind: leave it in the buffer
        return Taken::kLeave;
      }
      pushed = true;
    } else if (proto::known_kind(kind)) {
      ++cstats_.tcp_wrong_kind;  // a kind a source never sends here: ignored
    }
    return Taken::kNext;
  });
  if (next == net::TcpConn::Next::kForged) {
    ++cstats_.bad_frame_mac;
    end_reason_ = "a control frame failed its MAC (forged, replayed or altered in flight): nothing in it was taken";
    return false;
  }
  if (next != net::TcpConn::Next::kFrame && next != net::TcpConn::Next::kNeedMore) {
    end_reason_ = "the source sent a malformed frame";
    return false;
  }
  if (ended) return false;
  wake();
  return true;
}

void MirrorControl::send_naks() {
  proto::NakRanges nak;
  while (link_->naks.try_pop(&nak)) {
    std::byte buf[proto::kFrameHeaderBytes + proto::kMaxNakBody];
    conn_->send(proto::ConstBytes(buf, proto::encode_nak_ranges(nak, buf)));
  }
  // PROBEs heard at our data address, echoed: the source may send DATA there.
  uint64_t challenge;
  while (link_->probes.try_pop(&challenge)) {
    std::byte buf[proto::kFrameHeaderBytes];
    conn_->send(proto::ConstBytes(buf, proto::encode_probe(challenge, 0, buf)));
  }
}

void MirrorControl::send_health(uint64_t now_ns) {
  const dataplane::MirrorWorkerStats& st = link_->stats;
  proto::Health h;
  h.report = ++health_seq_;
  h.next_seq = st.next_seq.get();
  h.known_end = st.known_end.get();
  h.holes = static_cast<uint32_t>(st.holes.get());
  h.held = static_cast<uint32_t>(st.held.get());
  h.held_high = static_cast<uint32_t>(st.held_high.get());
  h.naks = st.naks.get();
  h.gap_records = st.gap_records.get();
  h.rx_drops = plane_->port_drops() + st.hold_overflow.get();
  h.rejected = st.udp_rejected();
  h.udp_datagrams = st.udp_datagrams.get();
  std::byte buf[proto::kFrameHeaderBytes + proto::kHealthBody];
  conn_->send(proto::ConstBytes(buf, proto::encode_health(h, buf)));
  ++cstats_.health_reports;
  last_health_ns_ = now_ns;
  next_health_ns_ = now_ns + o_.health_interval_ns;
}

uint64_t MirrorControl::poll(uint64_t now_ns) {
  epoll_event events[4];
  const int n = epoll_wait(epoll_fd_, events, 4, 0);
  bool readable = false, writable = false;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == nak_fd_) {
      uint64_t ignored;
      (void)!read(nak_fd_, &ignored, sizeof(ignored));
    } else if (events[i].data.fd == connecting_fd_) {
      writable = true;
    } else {
      readable = true;
    }
  }
  switch (state_) {
    case State::kFailed:
    case State::kStopped:
      return UINT64_MAX;
    case State::kWaiting:
      if (now_ns < next_attempt_ns_) return next_attempt_ns_;
      connect(now_ns);
      return state_ == State::kConnecting ? deadline_ns_ : next_attempt_ns_;
    case State::kConnecting:
      if (writable) {
        if (!on_writable(now_ns)) return next_attempt_ns_;
        return deadline_ns_;
      }
      if (now_ns >= deadline_ns_) {
        const absl::Status st = absl::UnavailableError(absl::StrCat(
            "cannot reach source ", net::to_string(o_.source), ": ", std::strerror(ETIMEDOUT)));
        unavailable(st, now_ns);
        return next_attempt_ns_;
      }
      return deadline_ns_;
    case State::kHandshake:
      if (readable && !handshake(now_ns)) return state_ == State::kWaiting ? next_attempt_ns_ : UINT64_MAX;
      if (state_ == State::kHandshake && now_ns >= deadline_ns_) {
        const absl::Status st = absl::UnavailableError(absl::StrCat(
            "no answer from the source at ", net::to_string(o_.source), " within ",
            o_.handshake_timeout_ns / 1'000'000, " ms"));
        unavailable(st, now_ns);
        return next_attempt_ns_;
      }
      if (state_ != State::kStreaming) return deadline_ns_;
      break;
    case State::kStreaming:
      break;
  }
  // Streaming.
  bool alive = true;
  if (readable && !conn_->read_available(4u << 20)) {
    alive = false;
    end_reason_ = "the source closed the connection";
  }
  if (conn_->received() != last_received_) {
    last_received_ = conn_->received();
    last_rx_ns_ = now_ns;
  }
  if (!relay_frames()) alive = false;
  send_naks();
  const bool health = (features_ & proto::kFeatureHealth) != 0;
  if (health) {
    // Acquire: pairs with the worker's release when it raised the flag.
    const bool ask = link_->position_wanted.exchange(false, std::memory_order_acquire);
    if (ask && now_ns - last_health_ns_ >= 1'000'000) {
      ++cstats_.position_asks;
      send_health(now_ns);
    } else if (ask) {
      link_->position_wanted.store(true, std::memory_order_relaxed);  // ask at the next report
    }
    if (now_ns >= next_health_ns_) send_health(now_ns);
    if (now_ns - last_rx_ns_ > o_.peer_timeout_ns) {
      alive = false;
      end_reason_ = absl::StrCat("nothing heard from the source for ", (now_ns - last_rx_ns_) / 1'000'000,
                                 " ms: the source or the path is down, or this host is too busy to read it");
    }
  }
  if (alive && !conn_->flush()) {
    alive = false;
    end_reason_ = "the connection to the source failed";
  }
  if (!alive) {
    end_session(end_reason_, now_ns);
    return next_attempt_ns_;
  }
  // A full relay queue: come back at once; output the socket did not take
  // yet (only EPOLLIN is watched) or a position request held back by the
  // 1 ms spacing: within a millisecond; else at the next report.
  if (queue_full_) return now_ns;
  uint64_t at = health ? next_health_ns_ : now_ns + 100'000'000;
  if (conn_->pending() != 0) at = std::min(at, now_ns + 1'000'000);
  if (health && link_->position_wanted.load(std::memory_order_relaxed)) at = std::min(at, last_health_ns_ + 1'000'000);
  return at;
}

}  // namespace ringfire::control
