// serve_control.cc — source-side sessions: handshake (and PSK
// challenge/response), NAK service, HEALTH, TCP-mode streaming, bounds.
#include "control/serve_control.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "archive/archive_reader.h"
#include "archive/replay_feed.h"
#include "control/ring_geometry.h"
#include "proto/data_framer.h"
#include "ring/monotonic.h"

namespace ringfire::control {

using net::Endpoint;
using proto::Frame;
using proto::FrameKind;
using proto::RefuseReason;

namespace {

uint64_t range_size(const proto::Nak& n) { return n.last - n.first + 1; }

// What a mirror may send, and how large: a frame over its bound is refused
// from its header alone.
net::FrameLimits mirror_limits() {
  net::FrameLimits l;
  l.max_body.fill(net::kUnknownFrameBody);  // known kinds a mirror never sends: skipped, counted
  l.max_body[static_cast<uint8_t>(FrameKind::kHello)] = 256;
  l.max_body[static_cast<uint8_t>(FrameKind::kNak)] = proto::kMaxNakBody;
  l.max_body[static_cast<uint8_t>(FrameKind::kHealth)] = 256;
  l.max_body[static_cast<uint8_t>(FrameKind::kAuth)] = 256;
  l.max_body[static_cast<uint8_t>(FrameKind::kProbe)] = 0;
  for (FrameKind k : {FrameKind::kHello, FrameKind::kNak, FrameKind::kHealth, FrameKind::kAuth, FrameKind::kProbe}) {
    l.allowed[static_cast<uint8_t>(k)] = true;
  }
  return l;
}

}  // namespace

// Mirror is one connection, from accept to close.
struct ServeControl::Mirror {
  Mirror(int fd, uint64_t now_ns) : conn(fd), peer(conn.peer()), accepted_ns(now_ns), last_rx_ns(now_ns) {}
  enum class State : uint8_t { kHello, kAuth, kStreaming, kClosing };
  State state = State::kHello;
  net::TcpConn conn;
  Endpoint peer;
  uint64_t accepted_ns;
  uint64_t last_rx_ns;
  uint64_t closing_ns = 0;
  bool dead = false;
  bool want_out = false;  // EPOLLOUT registered
  proto::Hello hello;
  std::vector<std::byte> hello_bytes;  // as received: the proofs cover it
  std::vector<std::byte> auth_bytes;   // our AUTH frame as sent
  net::Nonce source_nonce{};
  bool authenticated = false;
  bool udp = false;        // DATA by multicast or unicast
  bool multicast = false;
  bool tcp_mode = false;
  uint64_t token = 0;
  uint64_t loss_reported_ns = 0;  // dup = auto: when its last HEALTH count went to the worker
  uint16_t features = 0;
  uint64_t tcp_cursor = 0;  // TCP mode: the next sequence to stream
  RepairQueue repairs;      // NAKed ranges to answer over TCP
  RecentRepairs recent;     // unicast: ranges repaired by UDP lately
  uint64_t repair_tokens = 0;
  uint64_t tokens_ns = 0;
  uint64_t tokens_seq = 0;
  bool has_health = false;
  proto::Health health;
  bool slow = false;
  uint64_t stall_written = 0;
  uint64_t stall_since_ns = 0;
  // replay: the archive read ahead for this mirror on a thread of its own
  // (at most archive_replays mirrors at once; the conductor never reads
  // the disk for it); replay_next: the sequence it stands at, if known.
  std::unique_ptr<archive::ReplayFeed> replay;
  uint64_t replay_next = UINT64_MAX;
  uint64_t archive_dry = UINT64_MAX;  // a sequence the archive had nothing for (the ring GAPs past it)
  bool archive_held = false;  // its TCP stream waits for the archive's caps (not "behind": no polling for it)
  uint64_t replay_since_ns = 0;  // when it took its replay slot
  uint64_t replay_sent = 0;      // records the archive answered it since then
  // A sequence whose segment the catalog lists but which is not there
  // (being removed, or lost), and since when: held a while, then skipped.
  uint64_t missing_at = UINT64_MAX;
  uint64_t missing_since_ns = 0;
  // Its place in line for a replay slot (0: not in line), and when it last
  // asked for one: slots go in the order mirrors first asked.
  uint64_t archive_place = 0;
  uint64_t archive_asked_ns = 0;
  bool room_wanted = false;   // serve_one had more to send and no room under the watermark
};

absl::StatusOr<std::unique_ptr<ServeControl>> ServeControl::start(const ServeControlConfig& c,
                                                                 dataplane::ServeLink* worker) {
  auto file = ring::RingFile::open(c.ring);
  if (!file.ok()) return file.status();
  return start(c, worker, std::move(*file));
}

absl::StatusOr<std::unique_ptr<ServeControl>> ServeControl::start(const ServeControlConfig& c,
                                                                 dataplane::ServeLink* worker,
                                                                 ring::RingFile file) {
  auto reader = ring::RawReader::attach(file.share(), ring::StartPosition::at(0));
  if (!reader.ok()) return reader.status();
  if (!c.archive_dir.empty()) {
    // An archive of another ring would answer with its records: refused
    // now. One not there yet (its recorder starts later) is looked at
    // again whenever a mirror needs it.
    auto a = archive::ArchiveReader::open(c.archive_dir);
    if (a.ok()) {
      const std::string why = archive::shape_mismatch(a->catalog().shape, archive::shape_of(file));
      if (!why.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--archive ", c.archive_dir, " is an archive of another kind of ring (", why,
            " ): give the directory `ringfire record ", c.ring, "` writes"));
      }
    }
  }
  std::unique_ptr<ServeControl> s(new ServeControl(c, worker, std::move(file), std::move(*reader)));
  auto fd = net::tcp_listen(c.listen);
  if (!fd.ok()) return fd.status();
  s->listen_fd_ = *fd;
  s->listening_ = net::socket_local(*fd);
  s->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  s->notify_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->epoll_fd_ < 0 || s->notify_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // nullptr marks the listening socket
  if (epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->listen_fd_, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  ev.data.ptr = &s->notify_fd_;  // marks the worker's eventfd
  if (epoll_ctl(s->epoll_fd_, EPOLL_CTL_ADD, s->notify_fd_, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  worker->notify_fd.store(s->notify_fd_, std::memory_order_release);  // pairs with the worker's acquire
  return s;
}

ServeControl::ServeControl(const ServeControlConfig& c, dataplane::ServeLink* worker,
                           ring::RingFile info, ring::RawReader reader)
    : config_(c), worker_(worker), info_(std::move(info)), reader_(std::move(reader)),
      limits_(mirror_limits()) {
  // A TCP frame must hold the largest record the ring can carry.
  const uint64_t largest = info_.blob() ? ring::max_blob_bytes(info_.header().arena_size)
                                        : info_.slot_size();
  frame_buf_ = ring::LazyBytes(std::max<size_t>(c.tcp_frame_bytes,
                                               proto::kFrameHeaderBytes + proto::kBlobRecordHeader + largest));
  mirrors_.reserve(c.max_connections);
}

ServeControl::~ServeControl() {
  mirrors_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (notify_fd_ >= 0) close(notify_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void ServeControl::note(const char* reason, const std::string& line) {
  if (!config_.log) return;
  const uint64_t now = monotonic_ns();
  for (auto& [r, at] : last_log_ns_) {
    if (r != reason) continue;
    if (now - at < 1'000'000'000) return;  // at most one line a second per reason; counters have all
    at = now;
    config_.log(line);
    return;
  }
  last_log_ns_.emplace_back(reason, now);
  config_.log(line);
}

void ServeControl::accept_all(uint64_t now_ns) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_in from{};
    socklen_t from_len = sizeof(from);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    ++stats_.accepted;
    if (config_.only_from != 0 && (from.sin_family != AF_INET || ntohl(from.sin_addr.s_addr) != config_.only_from)) {
      ++stats_.foreign;  // not the one peer this ring is served to: no answer
      close(fd);
      note("foreign", absl::StrCat("refused a connection from ", net::to_string(net::Endpoint{
                                                                     ntohl(from.sin_addr.s_addr), ntohs(from.sin_port)}),
                                   ": this ring is served to ", net::to_string(net::Endpoint{config_.only_from, 0}),
                                   " only"));
      continue;
    }
    if (mirrors_.size() >= config_.max_connections) {
      // Over the cap: say so (best effort, the socket's buffer takes it) and close.
      ++stats_.conn_cap;
      std::byte buf[64];
      const std::string text = absl::StrCat("the source takes at most ", config_.max_connections, " connections");
      const size_t n = proto::encode_refuse(proto::Refuse{RefuseReason::kBusy, text}, buf);
      (void)!::send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      note("busy", absl::StrCat("refused a connection: ", config_.max_connections, " already (--max-connections)"));
      continue;
    }
    auto m = std::make_unique<Mirror>(fd, now_ns);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = m.get();
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) continue;  // m closes fd
    mirrors_.push_back(std::move(m));
  }
}

void ServeControl::drop(size_t index) {
  Mirror& m = *mirrors_[index];
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, m.conn.fd(), nullptr);
  if (m.conn.pending() != 0) m.conn.abort();  // cut with output it never took: reset, free it now
  if (m.token != 0) {
    // Best effort: if the queue is full the token stays allowed, still
    // bound to this mirror's address.
    (void)worker_->commands.try_push(
        dataplane::ServeCommand{dataplane::ServeCommand::Kind::kForgetToken, m.token});
    dataplane::poke_worker(*worker_);
  }
  if (m.state == Mirror::State::kStreaming && stats_.mirrors > 0) --stats_.mirrors;
  if (m.replay) --replays_open_;  // its archive feed goes (its thread, and segment lock, after the read in flight)
  mirrors_.erase(mirrors_.begin() + static_cast<std::ptrdiff_t>(index));
}

void ServeControl::refuse(Mirror& m, RefuseReason why, const std::string& text) {
  if (m.state == Mirror::State::kStreaming && stats_.mirrors > 0) --stats_.mirrors;
  std::byte buf[proto::kFrameHeaderBytes + 4 + proto::kMaxRefuseText];
  m.conn.send(proto::ConstBytes(buf, proto::encode_refuse(proto::Refuse{why, text}, buf)));
  m.state = Mirror::State::kClosing;
  m.closing_ns = monotonic_ns();
  m.repairs.clear();
  m.tcp_mode = false;
}

uint64_t ServeControl::position(const Mirror& m) const {
  if (m.tcp_mode) return m.tcp_cursor;
  // Acquire: pairs with the worker's release store after each send.
  return worker_->stats.next_to_send.load(std::memory_order_acquire);
}

void ServeControl::send_position(Mirror& m) {
  std::byte hb[proto::kFrameHeaderBytes];
  proto::encode_heartbeat(position(m), 0, hb);
  m.conn.send(hb);
}

bool ServeControl::on_hello(Mirror& m, const Frame& f, proto::ConstBytes bytes) {
  const proto::DecodeError e = proto::decode_hello(f, &m.hello);
  if (e != proto::DecodeError::kOk) {
    ++stats_.bad_hello;
    note("hello", absl::StrCat("refused ", net::to_string(m.peer), ": malformed HELLO (",
                               proto::decode_error_name(e), ")"));
    refuse(m, e == proto::DecodeError::kBadVersion ? RefuseReason::kVersion : RefuseReason::kMalformedHello,
           e == proto::DecodeError::kBadVersion ? "protocol version 0 does not exist; this source speaks 1"
                                                : "malformed HELLO");
    return true;
  }
  const ring::RingHeader& h = info_.header();
  if (m.hello.expected_schema != 0 && m.hello.expected_schema != h.schema_signature) {
    ++stats_.bad_hello;
    refuse(m, RefuseReason::kSchema,
           absl::StrCat("the ring's schema signature is 0x", absl::Hex(h.schema_signature),
                        ", the mirror expects 0x", absl::Hex(m.hello.expected_schema)));
    return true;
  }
  if (config_.channel_token != 0 && (m.hello.flags & proto::kHelloChannel) != 0 &&
      m.hello.channel_token != config_.channel_token) {
    ++stats_.bad_hello;
    note("hello", absl::StrCat("refused ", net::to_string(m.peer), ": another channel's token"));
    refuse(m, RefuseReason::kWrongChannel,
           "this serve is another node's channel: the NODE that named it was not its owner's");
    return true;
  }
  m.hello_bytes.assign(bytes.begin(), bytes.end());
  if (!config_.psk) return start_streaming(m);
  if ((m.hello.flags & proto::kHelloAuth) == 0) {
    ++stats_.unauthenticated;
    note("unauthenticated", absl::StrCat("refused ", net::to_string(m.peer),
                                         ": not authenticated (this source has --psk-file; so must the mirror)"));
    refuse(m, RefuseReason::kAuthRequired,
           "this source requires authentication: run the mirror with --psk-file (the same key)");
    return true;
  }
  // Step 1: prove we hold the key, over exactly the HELLO we got.
  proto::Auth a;
  a.step = proto::AuthStep::kSourceProof;
  m.source_nonce = net::random_nonce();
  a.nonce = m.source_nonce;
  a.salt = config_.salt;
  // A mirror that asks MACs every control frame after its step 2, and so do we (§1.8.2).
  if ((m.hello.flags & proto::kHelloFrameMac) != 0) a.flags |= proto::kAuthFrameMac;
  a.proof = net::source_proof(*config_.psk, m.hello_bytes, m.source_nonce, config_.salt, a.flags);
  m.auth_bytes.resize(proto::kFrameHeaderBytes + proto::kAuthSourceBody);
  m.auth_bytes.resize(proto::encode_auth(a, m.auth_bytes));
  m.conn.send(m.auth_bytes);
  m.state = Mirror::State::kAuth;
  return true;
}

bool ServeControl::on_auth(Mirror& m, const Frame& f, proto::ConstBytes bytes) {
  proto::Auth a;
  if (proto::decode_auth(f, &a) != proto::DecodeError::kOk || a.step != proto::AuthStep::kMirrorProof ||
      !net::proofs_equal(a.proof, net::mirror_proof(*config_.psk, m.hello_bytes, m.auth_bytes))) {
    ++stats_.bad_auth;
    note("bad-auth", absl::StrCat("refused ", net::to_string(m.peer),
                                  ": authentication failed (another key?)"));
    refuse(m, RefuseReason::kAuthFailed, "authentication failed: the mirror's key is not this source's");
    return true;
  }
  m.authenticated = true;
  if ((m.hello.flags & proto::kHelloFrameMac) != 0) {
    m.conn.start_frame_mac(net::mirror_frame_keys(*config_.psk, m.hello_bytes, m.auth_bytes, bytes, true));
  } else {
    ++stats_.frames_unmaced;  // an older mirror: its datagrams are MACed, its TCP frames are not
    note("frames-unmaced", absl::StrCat("mirror ", net::to_string(m.peer),
                                        " MACs no control frames (an older ringfire): served, its TCP frames unauthenticated"));
  }
  return start_streaming(m);
}

bool ServeControl::start_streaming(Mirror& m) {
  const ring::RingHeader& h = info_.header();
  const proto::Hello& hello = m.hello;
  // Acquire: pairs with the ring writer's release of write_seq.
  const uint64_t ws = h.write_seq.load(std::memory_order_acquire);
  const uint64_t oldest = ws > h.capacity ? ws - h.capacity : 0;
  const uint64_t sending = worker_->stats.next_to_send.load(std::memory_order_acquire);
  // Flag precedence: TCP-only wins; then unicast if asked for (or if it is
  // all the source offers); else multicast; a source with neither UDP path
  // streams over TCP.
  bool tcp_mode = (hello.flags & proto::kHelloTcpOnly) != 0 ||
                        (!config_.multicast && config_.unicast_port == 0);
  const bool unicast = !tcp_mode && config_.unicast_port != 0 &&
                       (!config_.multicast || (hello.flags & proto::kHelloPrefersUnicast) != 0);
  // Unkeyed, a mirror that checks tags gets one (its own on unicast, the
  // group's on multicast). The group's datagrams all carry the group's
  // tag, which a mirror that checks none would drop as an unknown kind:
  // that mirror is served over TCP instead.
  const bool tagged = !config_.psk && (hello.flags & proto::kHelloTag) != 0;
  if (!tcp_mode && !unicast && config_.multicast_tag != 0 && !tagged) {
    tcp_mode = true;
    ++stats_.untagged_to_tcp;
  }
  // The first sequence this mirror will be sent. A resume beyond what the
  // ring has ever held is answered with the ring's end, which the mirror
  // reads as "this is not the ring you were mirroring".
  uint64_t first;
  if (hello.first_wanted == proto::kHelloLatest) {
    first = tcp_mode ? ws : sending;
  } else if (hello.first_wanted == proto::kHelloOldest) {
    first = std::min(oldest, archive_first());  // with an archive, its first record
  } else {
    first = std::min(hello.first_wanted, ws);
  }

  std::byte buf[128];
  const proto::Geometry g = geometry_of(h, first);
  m.conn.send(proto::ConstBytes(buf, proto::encode_geometry(g, buf)));

  proto::Multicast mc;
  mc.mtu = config_.mtu;
  mc.ttl = config_.ttl;
  mc.session = config_.session;
  mc.data_ip = config_.data_ip;
  if ((hello.flags & proto::kHelloMultiNak) != 0) mc.features |= proto::kFeatureMultiNak;
  if ((hello.flags & proto::kHelloHealth) != 0) mc.features |= proto::kFeatureHealth;
  if (config_.psk) mc.features |= proto::kFeatureMac;
  m.udp = !tcp_mode;
  m.tcp_mode = tcp_mode;
  if (tcp_mode) {
    mc.port = 0;
    mc.data_ip = 0;
    m.tcp_cursor = first;
  } else if (unicast) {
    m.token = net::random_tag();  // a PUNCH's token: unguessable, never 0, as a tag
    dataplane::ServeCommand c{dataplane::ServeCommand::Kind::kAllowToken, m.token};
    c.peer_ip = m.peer.ip;
    if (tagged) {
      c.tag = net::random_tag();
      mc.tag = c.tag;
      mc.features |= proto::kFeatureTag;
    }
    if (config_.psk) {
      c.keyed = true;
      c.punch_key = net::punch_key(*config_.psk, hello.nonce, m.source_nonce);
    }
    if (!worker_->commands.try_push(c)) {
      m.token = 0;
      refuse(m, RefuseReason::kBusy, "the source's worker is busy: try again");
      return true;
    }
    dataplane::poke_worker(*worker_);
    mc.port = config_.unicast_port;
    mc.token = m.token;
    mc.features |= proto::kFeatureProbe;
  } else {
    m.multicast = true;
    mc.group = config_.multicast->ip;
    mc.port = config_.multicast->port;
    if (tagged && config_.multicast_tag != 0) {
      mc.tag = config_.multicast_tag;
      mc.features |= proto::kFeatureTag;
    }
  }
  if ((mc.features & proto::kFeatureTag) != 0) ++stats_.tagged;
  m.features = mc.features;
  // Group 0 and port 0: DATA comes on this connection (TCP mode).
  m.conn.send(proto::ConstBytes(buf, proto::encode_multicast(mc, buf)));
  m.tokens_seq = sending;
  m.state = Mirror::State::kStreaming;
  ++stats_.mirrors;
  return true;
}

// TcpDataOut packs records into DATA frames on one mirror's connection —
// tcp_frame_bytes each; a larger record gets a frame of its own, up to the
// largest the ring holds — and sends GAPs between them. What send_range
// (from the ring) and send_archived (from the archive) share.
class TcpDataOut {
 public:
  TcpDataOut(net::TcpConn& conn, ring::LazyBytes& buf, size_t frame_bytes, uint32_t fixed_size, uint64_t& gaps)
      : conn_(conn), buf_(buf), frame_bytes_(frame_bytes), framer_(fixed_size, 0), gaps_(gaps) {
    framer_.begin(buf_.data(), frame_bytes_);
  }
  // add: false if the record fits no frame (larger than the ring's
  // largest, or not a fixed ring's size: never from the ring itself).
  bool add(uint64_t seq, const std::byte* record, size_t len) {
    if (framer_.add(seq, record, len)) return true;
    flush();
    if (framer_.add(seq, record, len)) return true;
    framer_.begin(buf_.data(), buf_.size());
    const bool ok = framer_.add(seq, record, len);
    flush();
    return ok;
  }
  void flush() {
    if (const size_t n = framer_.finish()) conn_.send(proto::ConstBytes(buf_.data(), n));
    framer_.begin(buf_.data(), frame_bytes_);
  }
  // gap: the next sequence that will come is `next`.
  void gap(uint64_t next) {
    flush();
    std::byte g[proto::kFrameHeaderBytes];
    proto::encode_gap(next, g);
    conn_.send(g);
    ++gaps_;
  }

 private:
  net::TcpConn& conn_;
  ring::LazyBytes& buf_;
  size_t frame_bytes_;
  proto::DataFramer framer_;
  uint64_t& gaps_;
};

// in_line: m waits for a replay place and asked within kArchiveLineFreshNs
// of now_ns (it may have asked after now_ns: a turn later in the same pass).
bool ServeControl::in_line(const Mirror& m, uint64_t now_ns) {
  return !m.dead && m.archive_place != 0 && m.archive_asked_ns + kArchiveLineFreshNs >= now_ns;
}

bool ServeControl::next_in_line(const Mirror& m, uint64_t now_ns, uint32_t free) {
  if (free == 0) return false;
  if (free != line_cutoff_free_ || archive_line_ != line_cutoff_line_ || now_ns >= line_cutoff_ns_ + kLineCutoffNs) {
    line_places_.clear();
    for (const auto& p : mirrors_) {
      if (in_line(*p, now_ns)) line_places_.push_back(p->archive_place);
    }
    line_cutoff_ = UINT64_MAX;
    if (line_places_.size() >= free) {
      std::nth_element(line_places_.begin(), line_places_.begin() + (free - 1), line_places_.end());
      line_cutoff_ = line_places_[free - 1];
    }
    line_cutoff_free_ = free;
    line_cutoff_line_ = archive_line_;
    line_cutoff_ns_ = now_ns;
  }
  return m.archive_place <= line_cutoff_;
}

// preempt_replays: while more mirrors wait in line than places are free,
// the holders longest past their slice give theirs back (as many as the
// line needs, no more), each once it was answered something (a feed still
// reading its first records is not judged). Each asks again at the back.
void ServeControl::preempt_replays(uint64_t now_ns) {
  uint32_t waiting = 0;
  for (const auto& p : mirrors_) waiting += in_line(*p, now_ns) ? 1 : 0;
  const uint32_t free = config_.archive_replays > replays_open_ ? config_.archive_replays - replays_open_ : 0;
  if (waiting <= free) return;
  std::vector<Mirror*> past;
  for (const auto& p : mirrors_) {
    Mirror& m = *p;
    if (!m.dead && m.replay && m.replay_sent != 0 && now_ns > m.replay_since_ns + kReplaySliceNs) past.push_back(&m);
  }
  std::sort(past.begin(), past.end(), [](const Mirror* a, const Mirror* b) { return a->replay_since_ns < b->replay_since_ns; });
  for (size_t i = 0; i < past.size() && i < waiting - free; ++i) {
    past[i]->replay.reset();
    --replays_open_;
    ++stats_.archive_preempted;
  }
}

uint64_t ServeControl::archive_first() {
  if (config_.archive_dir.empty()) return UINT64_MAX;
  auto r = archive::ArchiveReader::open(config_.archive_dir);
  if (!r.ok()) return UINT64_MAX;
  auto first = r->first_seq();
  return first.ok() ? *first : UINT64_MAX;
}

uint64_t ServeControl::send_archived(Mirror& m, uint64_t first, uint64_t last, uint64_t ring_oldest, uint64_t below,
                                     uint64_t max_records, uint64_t* records, bool* blocked) {
  *records = 0;
  *blocked = false;
  if (!m.replay && last != UINT64_MAX) {
    // A range wholly older than the archive's first record as last read
    // (at most every 100 ms) is answered by its GAP without a replay place
    // or a feed: a stranger's flood of such NAKs opened a feed (a catalog
    // read and a thread) for each, 40% of a core (helper-42).
    const uint64_t now = monotonic_ns();
    if (archive_first_at_ns_ == 0 || now - archive_first_at_ns_ >= kArchiveFirstFreshNs) {
      archive_first_ = archive_first();
      archive_first_at_ns_ = now;
    }
    if (archive_first_ != UINT64_MAX && last < archive_first_) {
      // The ring holds what the archive does not from its oldest record:
      // its answer (a GAP to that, then records) stands (review helper-44).
      if (archive_first_ > ring_oldest) return first;
      TcpDataOut out(m.conn, frame_buf_, config_.tcp_frame_bytes, reader_.fixed_size(), stats_.gaps);
      out.gap(archive_first_);
      return archive_first_;
    }
  }
  if (!m.replay) {
    // Slots go in the order mirrors asked (a free one is not raced for:
    // review helper-29), counting only those asking still.
    const uint64_t asked = monotonic_ns();
    // A place it stopped asking for is stale: it joins at the back.
    if (m.archive_place != 0 && m.archive_asked_ns + kArchiveLineFreshNs < asked) m.archive_place = 0;
    if (m.archive_place == 0) m.archive_place = ++archive_line_;
    m.archive_asked_ns = asked;
    const uint32_t free = config_.archive_replays > replays_open_ ? config_.archive_replays - replays_open_ : 0;
    if (!next_in_line(m, asked, free)) {
      ++stats_.archive_waits;  // another mirror's replay finishes first
      *blocked = true;
      retry_archive_at(asked + kArchiveSlotRetryNs);
      return first;
    }
    // Its catalog is read here (a small file); the segments, on the feed's thread.
    auto r = archive::ReplayFeed::open(config_.archive_dir);
    if (absl::IsUnavailable(r.status())) {  // earlier replays' readers still finishing a read: wait, as for the cap
      ++stats_.archive_waits;
      *blocked = true;
      retry_archive_at(monotonic_ns() + kArchiveSlotRetryNs);
      return first;
    }
    if (!r.ok()) {
      ++stats_.archive_errors;
      m.archive_place = 0;
      note("archive", absl::StrCat("the archive cannot be read: ", r.status().message()));
      return first;  // the ring's answer (a GAP) stands
    }
    if (const std::string why = archive::shape_mismatch((*r)->catalog().shape, archive::shape_of(info_)); !why.empty()) {
      ++stats_.archive_errors;
      m.archive_place = 0;
      note("archive", absl::StrCat("the archive is of another kind of ring (", why, " ): not served from"));
      return first;
    }
    m.replay = std::move(*r);
    m.replay_next = UINT64_MAX;
    m.replay_since_ns = asked;
    m.replay_sent = 0;
    m.archive_place = 0;  // out of line
    ++replays_open_;
    ++stats_.archive_replays;
  }
  // The byte budget, shared by every mirror: refilled at archive_bytes_per_s,
  // at most a tenth of a second of it banked.
  const uint64_t now = monotonic_ns();
  const uint64_t bank = std::max<uint64_t>(config_.archive_bytes_per_s / 10, 1u << 20);
  if (archive_tokens_ns_ == 0) {
    archive_tokens_ = bank;
  } else {
    const long double refill = static_cast<long double>(now - archive_tokens_ns_) *
                               static_cast<long double>(config_.archive_bytes_per_s) / 1e9L;
    archive_tokens_ = std::min<uint64_t>(bank, archive_tokens_ + static_cast<uint64_t>(refill));
  }
  archive_tokens_ns_ = now;
  // Spent: wait for a quantum of budget (not a record's worth at a time,
  // which would keep the conductor turning), and sleep until then.
  const uint64_t quantum = std::min(bank, kArchiveQuantumBytes);
  if (archive_tokens_ == 0 || (archive_spent_ && archive_tokens_ < quantum)) {
    archive_spent_ = true;
    ++stats_.archive_throttled;
    *blocked = true;
    const uint64_t rate = std::max<uint64_t>(config_.archive_bytes_per_s, 1);
    const long double wait_ns = static_cast<long double>(quantum - archive_tokens_) * 1e9L / static_cast<long double>(rate);
    retry_archive_at(now + std::clamp<uint64_t>(static_cast<uint64_t>(wait_ns), 100'000, 1'000'000'000));
    return first;
  }
  archive_spent_ = false;
  uint64_t want = first;
  TcpDataOut out(m.conn, frame_buf_, config_.tcp_frame_bytes, reader_.fixed_size(), stats_.gaps);
  auto gap = [&](uint64_t next) {
    out.gap(next);
    want = next;
  };
  uint64_t sent = 0;
  // The feed's thread has not read this far yet, or stands at a segment
  // retention is removing (the catalog still lists it): held, tried again
  // in a millisecond; no GAP, nothing marked dry. What went before it this
  // turn is out and counted.
  auto held = [&] {
    out.flush();
    stats_.archive_records += sent;
    m.replay_sent += sent;
    *records = sent;
    *blocked = true;
    m.replay_next = UINT64_MAX;
    retry_archive_at(now + 1'000'000);
    return want;
  };
  // past_damage: what a damaged or missing segment holds after `want` is
  // skipped by a GAP to the first record of the next segment the catalog
  // lists, when the archive holds it below the ring's part; else nothing
  // here, and the ring's answer (a GAP to what it holds) follows. (It was
  // always the ring's: one damaged batch cost a mirror every intact
  // archived record after it, helper-42.)
  auto past_damage = [&] {
    // The catalog now (the feed's is as it opened: segments a recorder
    // added since would be missing, and the GAP go past them to the ring).
    auto now_listed = archive::ArchiveReader::open(config_.archive_dir);
    const archive::Catalog& catalog = now_listed.ok() ? now_listed->catalog() : m.replay->catalog();
    for (const archive::CatalogSegment& seg : catalog.segments) {
      if (seg.first_seq <= want) continue;
      if (seg.first_seq < below) {
        gap(std::min(seg.first_seq, last == UINT64_MAX ? last : last + 1));
        m.replay_next = UINT64_MAX;  // seek there next
      }
      return;
    }
  };
  if (m.replay_next != want) {
    const absl::Status st = m.replay->seek(want);
    if (absl::IsUnavailable(st)) return held();
    if (absl::IsOutOfRange(st)) {
      // Older than the archive: what it never had (or retention removed)
      // is a GAP to its first record, if the ring does not hold it either.
      // Where the archive starts above the ring's oldest record, the ring
      // answers (a GAP to its oldest, then what it holds): a GAP to the
      // archive's first would skip records the ring still has (review
      // helper-44).
      auto oldest = m.replay->first_seq();
      if (!oldest.ok() || *oldest > ring_oldest) return want;
      if (*oldest <= want) {
        // Listed, yet not there: being removed (retention's window is
        // milliseconds), or lost (deleted by hand): it held the replay's
        // place, and this mirror's answer, for good (helper-42). Held for
        // a while, then skipped, counted.
        if (want < lost_from_ || want >= lost_to_) {
          if (m.missing_at != want) {
            m.missing_at = want;
            m.missing_since_ns = now;
          }
          if (now - m.missing_since_ns < kMissingSegmentNs) return held();
          ++stats_.archive_errors;  // once a segment
          note("archive", absl::StrCat("the segment holding ", want, " is listed but not there: skipped"));
          // The whole segment, from its first sequence to the next one
          // listed's (the newest: on, as long as its file is missing, the
          // only time this is read).
          lost_from_ = want;
          lost_to_ = UINT64_MAX;
          for (const archive::CatalogSegment& seg : m.replay->catalog().segments) {
            if (seg.first_seq > want) {
              lost_to_ = seg.first_seq;
              break;
            }
            lost_from_ = seg.first_seq;
          }
        }
        m.missing_at = UINT64_MAX;
        past_damage();
        out.flush();
        return want;
      }
      // A range wholly older than the archive is answered by that GAP
      // alone (it was answered by the ring's, past the whole archive).
      gap(*oldest);
      if (*oldest > last) {
        out.flush();
        return want;
      }
      const absl::Status again = m.replay->seek(want);
      if (absl::IsUnavailable(again)) return held();
      if (!again.ok()) return want;
    } else if (!st.ok()) {
      ++stats_.archive_errors;
      note("archive", std::string(st.message()));
      past_damage();
      out.flush();
      return want;
    }
  }
  m.missing_at = UINT64_MAX;
  m.replay_next = UINT64_MAX;  // where the archive's reader stands, once known
  archive::ArchiveEntry e;
  for (;;) {
    auto got = m.replay->next(&e);
    if (!got.ok() && absl::IsUnavailable(got.status())) return held();
    if (!got.ok()) {
      // Damage: nothing of the damaged batch is sent; past it, the next
      // segment (past_damage), or the ring's answer.
      ++stats_.archive_errors;
      note("archive", std::string(got.status().message()));
      past_damage();
      break;
    }
    if (!*got) break;  // the archive ends here (the recorder is behind the ring)
    if (e.seq >= below || e.seq > last) {  // the ring's (or not asked for): read again next time
      m.replay_next = UINT64_MAX;            // it was consumed: seek before reading on
      break;
    }
    if (e.gap) {
      gap(std::min({e.gap_end, below, last == UINT64_MAX ? last : last + 1}));  // the recorder's own loss
      if (want != e.gap_end) {
        // Cut short (at the ring's part, or the range asked): the reader is
        // past the whole gap, so where it stands is not `want`: seek next time.
        m.replay_next = UINT64_MAX;
        break;
      }
      m.replay_next = want;
      continue;
    }
    if (!out.add(e.seq, reinterpret_cast<const std::byte*>(e.bytes.data()), e.bytes.size())) {
      m.replay_next = UINT64_MAX;  // it was consumed: seek before reading on
      ++stats_.archive_errors;
      note("archive", absl::StrCat("record ", e.seq, " of ", e.bytes.size(), " bytes fits no frame of this ring"));
      break;
    }
    want = e.seq + 1;
    m.replay_next = want;
    ++sent;
    stats_.archive_bytes += e.bytes.size();
    archive_tokens_ -= std::min<uint64_t>(archive_tokens_, e.bytes.size());
    if (sent >= max_records || archive_tokens_ == 0 || m.conn.pending() >= config_.out_watermark_bytes) break;
  }
  out.flush();
  if (archive_tokens_ == 0) archive_spent_ = true;  // the next turn waits for a quantum
  stats_.archive_records += sent;
  m.replay_sent += sent;
  *records = sent;
  return want;
}

uint64_t ServeControl::send_range(Mirror& m, uint64_t first, uint64_t last, uint64_t max_records,
                                  uint64_t* records, bool* blocked) {
  *records = 0;
  *blocked = false;
  const bool archived = !config_.archive_dir.empty();
  const ring::RingHeader& h = info_.header();
  // oldest_now: the ring's oldest record now (acquire: pairs with the
  // writer's release of write_seq).
  auto oldest_now = [&] {
    const uint64_t ws = h.write_seq.load(std::memory_order_acquire);
    return ws > h.capacity ? ws - h.capacity : 0;
  };
  uint64_t want = first;
  uint64_t sent = 0;
  if (archived) {
    // Below the ring's oldest record, and an eighth of the ring above it
    // (where the writer may lap a read), the archive answers.
    const uint64_t oldest = oldest_now();
    const uint64_t below = oldest == 0 ? 0 : oldest + h.capacity / 8;
    if (want < below) {
      const uint64_t asked = want;
      want = send_archived(m, want, last, oldest, below, max_records, &sent, blocked);
      *records = sent;
      if (*blocked || want > last || sent >= max_records) return want;
      // Part of its share sent (the connection's watermark): the rest next
      // turn, from the same reader.
      if (want < below && want != asked) return want;
      // Nothing there (the archive ends, or is damaged, before the ring):
      // the ring's answer, a GAP, must not wait for it again.
      m.archive_dry = want == asked && sent == 0 ? want : UINT64_MAX;
    }
    if (m.replay) {  // past the archive's part: its reader goes
      m.replay.reset();
      --replays_open_;
    }
  }
  TcpDataOut out(m.conn, frame_buf_, config_.tcp_frame_bytes, reader_.fixed_size(), stats_.gaps);
  reader_.seek(want);
  while (want <= last && sent < max_records) {
    uint32_t len = 0;
    const ring::ReadResult r = reader_.next(&len);
    // Lapped while reading: with an archive, it answers next turn.
    if (archived && (r.lost != 0 || (r.ok && r.seq != want)) && want < oldest_now() && m.archive_dry != want) {
      out.flush();
      *records = sent;
      return want;
    }
    if (!r.ok) {
      // Nothing more (yet). If the reader was lapped on the way, everything
      // from `want` is gone: say where the stream resumes.
      if (r.lost != 0 || reader_.cursor() > want) {
        out.gap(reader_.cursor());
        want = reader_.cursor();
      }
      break;
    }
    if (r.seq != want) out.gap(r.seq);  // lapped, or a hole in a sparse (hub) ring
    if (r.seq > last) {
      want = r.seq;
      break;
    }
    out.add(r.seq, reader_.record(), len);
    want = r.seq + 1;
    ++sent;
  }
  out.flush();
  *records = sent;
  return want;
}

bool ServeControl::send_big_records() {
  // Bounded per pass: a writer flat out on a ring of big records refills
  // the queue as fast as this thread drains it, and an unbounded drain
  // kept it from its epoll (NAKs, HEALTH, every mirror's answers) for as
  // long as the writer ran.
  uint64_t seq;
  for (uint32_t i = 0; i < kBigRecordsPerPass; ++i) {
    if (!worker_->oversized.try_pop(&seq)) return false;
    reader_.seek(seq);
    uint32_t len = 0;
    const ring::ReadResult r = reader_.next(&len);
    if (!r.ok || r.seq != seq) continue;  // overwritten already: mirrors NAK, get a GAP
    proto::DataFramer framer(reader_.fixed_size(), 0);
    framer.begin(frame_buf_.data(), frame_buf_.size());
    if (!framer.add(seq, reader_.record(), len)) continue;  // cannot happen: sized for the ring
    const size_t n = framer.finish();
    for (auto& m : mirrors_) {
      if (m->state == Mirror::State::kStreaming && m->udp) m->conn.send(proto::ConstBytes(frame_buf_.data(), n));
    }
    ++stats_.big_records;
  }
  return worker_->oversized.size_approx() != 0;
}

void ServeControl::on_nak(Mirror& m, const proto::NakRanges& nak, uint64_t now_ns) {
  ++stats_.naks;
  stats_.nak_ranges += nak.count;
  const ring::RingHeader& h = info_.header();
  const uint64_t ws = h.write_seq.load(std::memory_order_acquire);  // pairs with the writer's release
  const uint64_t oldest = ws > h.capacity ? ws - h.capacity : 0;
  const uint64_t pos = position(m);
  // The UDP repair budget: what one mirror may have re-sent by datagram,
  // refilled by half of what the stream carried plus 100 k records/s, so a
  // NAK flood costs the source at most that (the rest goes over that
  // mirror's own TCP connection, at the pace it reads).
  const uint64_t cap = std::max<uint64_t>(4 * uint64_t{config_.udp_repair_max}, 65536);
  if (m.tokens_ns == 0) {
    m.repair_tokens = cap;
  } else {
    m.repair_tokens += (now_ns - m.tokens_ns) / 10'000 + (pos > m.tokens_seq ? (pos - m.tokens_seq) / 2 : 0);
  }
  m.repair_tokens = std::min(m.repair_tokens, cap);
  m.tokens_ns = now_ns;
  m.tokens_seq = pos;
  RecentRepairs& recent = m.multicast ? group_repairs_ : m.recent;
  bool beyond = false;
  for (uint32_t i = 0; i < nak.count; ++i) {
    proto::Nak r = nak.ranges[i];
    // What was never sent is not a loss: it is still coming (or the NAK
    // was provoked by a forged heartbeat). Answer with where we are.
    if (r.last >= pos) {
      beyond = true;
      if (r.first >= pos) continue;
      r.last = pos - 1;
    }
    if (m.repairs.covered(r)) continue;  // already being answered over TCP
    // A repeat (the mirror says so, or the range was repaired by UDP for it
    // lately) means the datagram repair was lost: the connection, this time.
    bool by_udp = !nak.repeat && m.udp && config_.udp_repair_max != 0 &&
                  range_size(r) <= config_.udp_repair_max;
    if (by_udp) {
      const RecentRepairs::Overlap o = recent.youngest_overlap(r, now_ns, config_.udp_repair_memory_ns);
      if (o.sent_ns != 0 && o.asker != &m && now_ns - o.sent_ns < config_.udp_repair_grace_ns) {
        ++stats_.nak_shared;  // another mirror's group repair is on its way to this one too
        continue;
      }
      by_udp = o.sent_ns == 0;
    }
    // Only what the ring still holds, with room to spare before it laps.
    if (by_udp && (ws <= h.capacity || r.first >= oldest + h.capacity / 8) && r.last < ws &&
        m.repair_tokens >= range_size(r)) {
      dataplane::ServeCommand c{dataplane::ServeCommand::Kind::kRepair, m.multicast ? 0 : m.token, r.first, r.last};
      if (worker_->commands.try_push(c)) {
        dataplane::poke_worker(*worker_);  // a parked worker repairs now, not at its next deadline
        m.repair_tokens -= range_size(r);
        recent.remember(r, now_ns, &m);
        ++stats_.udp_repairs;
        stats_.udp_repair_records += range_size(r);
        continue;
      }
    }
    if (!m.repairs.add(r)) ++stats_.nak_dropped;
  }
  if (beyond) send_position(m);
}

void ServeControl::on_health(Mirror& m, const proto::Health& h, uint64_t now_ns) {
  m.has_health = true;
  m.health = h;
  send_position(m);
  // dup = "auto": the worker weighs the count against what it sent this
  // mirror (taken at its next step: no poke, an idle worker stays parked).
  // At most one a mirror each 50 ms, and only while the worker's queue is
  // under half full: a mirror that floods HEALTH never crowds out tokens
  // and repairs. One not passed on costs nothing: the counts are
  // cumulative, the next one covers its window.
  if (config_.dup_auto && m.token != 0 && h.has_udp_datagrams && now_ns - m.loss_reported_ns >= kLossReportNs &&
      worker_->commands.size_approx() < worker_->commands.capacity() / 2) {
    dataplane::ServeCommand c{dataplane::ServeCommand::Kind::kLossReport, m.token};
    c.first = h.udp_datagrams;
    c.last = h.naks;
    if (worker_->commands.try_push(c)) m.loss_reported_ns = now_ns;
  }
  const ring::RingHeader& rh = info_.header();
  const uint64_t ws = rh.write_seq.load(std::memory_order_acquire);  // pairs with the writer's release
  const uint64_t lag = ws > h.next_seq ? ws - h.next_seq : 0;
  const double share = static_cast<double>(lag) / static_cast<double>(rh.capacity);
  if (!m.slow && share > config_.slow_mirror_share) {
    m.slow = true;
    ++stats_.slow_warnings;
    note("slow", absl::StrCat("WARNING: mirror ", net::to_string(m.peer), " is slow: ", lag,
                              " records behind, ", static_cast<int>(share * 100), "% of the ring's ",
                              rh.capacity, " (it loses records to a GAP at 100%)"));
  } else if (m.slow && share < config_.slow_mirror_share / 2) {
    m.slow = false;
    note("recovered", absl::StrCat("mirror ", net::to_string(m.peer), " is no longer slow: ", lag, " records behind, ",
                                   static_cast<int>(share * 100), "% of the ring"));
  }
}

bool ServeControl::on_frame(Mirror& m, const Frame& f, proto::ConstBytes bytes, uint64_t now_ns) {
  const FrameKind k = f.header.kind;
  switch (m.state) {
    case Mirror::State::kHello:
      if (k != FrameKind::kHello) {
        ++stats_.wrong_kind;
        refuse(m, RefuseReason::kProtocol, absl::StrCat("expected HELLO, got ", proto::frame_kind_name(k)));
        return true;
      }
      return on_hello(m, f, bytes);
    case Mirror::State::kAuth:
      if (k != FrameKind::kAuth) {
        ++stats_.wrong_kind;
        refuse(m, RefuseReason::kProtocol, absl::StrCat("expected AUTH, got ", proto::frame_kind_name(k)));
        return true;
      }
      return on_auth(m, f, bytes);
    case Mirror::State::kClosing:
      return true;
    case Mirror::State::kStreaming:
      break;
  }
  if (k == FrameKind::kNak) {
    proto::NakRanges nak;
    if (proto::decode_nak_ranges(f, &nak) != proto::DecodeError::kOk) {
      ++stats_.malformed;
      return true;
    }
    on_nak(m, nak, now_ns);
  } else if (k == FrameKind::kProbe) {
    // The echo of a PROBE the worker sent to a PUNCH's address: that
    // address is this mirror's. Only its own token's probe can match.
    if (m.token == 0) {
      ++stats_.wrong_kind;
      return true;
    }
    dataplane::ServeCommand c{dataplane::ServeCommand::Kind::kProbeEcho, m.token, f.header.seq};
    (void)worker_->commands.try_push(c);  // full: the worker probes again, the mirror echoes again
    dataplane::poke_worker(*worker_);
  } else if (k == FrameKind::kHealth) {
    proto::Health h;
    if (proto::decode_health(f, &h) != proto::DecodeError::kOk) {
      ++stats_.malformed;
      return true;
    }
    on_health(m, h, now_ns);
  } else if (proto::known_kind(k)) {
    ++stats_.wrong_kind;  // a kind a mirror never sends (or a second HELLO): ignored
  }
  // Kinds above kMaxFrameKind: a newer mirror's extension, skipped.
  return true;
}

bool ServeControl::on_readable(Mirror& m, uint64_t now_ns) {
  if (!m.conn.read_available(256u << 10)) return false;
  // Bounded work per event: what one read brought (at most 256 KiB).
  bool ok = true;
  const net::TcpConn::Next next = m.conn.read_frames(limits_, [&](const Frame& f, proto::ConstBytes bytes) {
    if (m.state == Mirror::State::kClosing) {
      m.conn.consume(m.conn.buffered());  // discard: nothing it says matters now
      return net::TcpConn::Taken::kLeave;
    }
    m.last_rx_ns = now_ns;
    ok = on_frame(m, f, bytes, now_ns);
    return ok ? net::TcpConn::Taken::kNext : net::TcpConn::Taken::kLast;
  });
  if (next == net::TcpConn::Next::kNeedMore) return true;
  if (next == net::TcpConn::Next::kFrame) return ok;
  if (m.state == Mirror::State::kClosing) {
    m.conn.consume(m.conn.buffered());  // a bad frame after the end: as any other, nothing it says matters
    return true;
  }
  if (next == net::TcpConn::Next::kForged) {
    ++stats_.bad_frame_mac;
    note("bad-frame-mac", absl::StrCat("closed ", net::to_string(m.peer),
                                       ": a control frame failed its MAC (forged, replayed or altered in flight)"));
    return false;  // nothing in it counts; a stream with a forged frame in it cannot be trusted again
  }
  // Malformed or oversized.
  ++(next == net::TcpConn::Next::kMalformed ? stats_.malformed : stats_.oversized);
  const char* why =
      next == net::TcpConn::Next::kMalformed ? "malformed frame" : "a frame longer than its kind allows";
  note("malformed", absl::StrCat("closed ", net::to_string(m.peer), ": ", why));
  refuse(m, RefuseReason::kProtocol, why);
  return true;
}

bool ServeControl::serve_one(Mirror& m) {
  m.room_wanted = false;
  if (m.state != Mirror::State::kStreaming) return false;
  uint64_t budget = config_.tcp_chunk_records;
  bool nak_blocked = false;
  while (budget != 0 && !m.repairs.empty() && m.conn.pending() < config_.out_watermark_bytes) {
    const proto::Nak r = m.repairs.front();
    uint64_t n = 0;
    bool blocked = false;
    const uint64_t next = send_range(m, r.first, r.last, budget, &n, &blocked);
    stats_.nak_records += n;
    budget -= std::min(budget, n);
    if (blocked) {  // the archive's caps: this range waits for a later turn
      if (next > r.first) m.repairs.advance(next);
      nak_blocked = true;
      break;
    }
    if (next <= r.first && n == 0) {
      m.repairs.advance(r.last == UINT64_MAX ? r.last : r.last + 1);  // nothing there to send: done
    } else {
      m.repairs.advance(next);
    }
  }
  // A range the archive's caps hold back is not more work now: the
  // conductor sleeps until archive_retry_at_ns_.
  bool more = !m.repairs.empty() && !nak_blocked;
  if (m.replay && m.repairs.empty() && !m.tcp_mode) {
    // Its NAKs answered: the archive's reader (and its replay slot) goes;
    // a later NAK below the ring opens another.
    m.replay.reset();
    --replays_open_;
  }
  if (m.tcp_mode && budget != 0 && m.conn.pending() < config_.out_watermark_bytes) {
    uint64_t n = 0;
    bool blocked = false;
    m.tcp_cursor = send_range(m, m.tcp_cursor, UINT64_MAX, budget, &n, &blocked);
    m.archive_held = blocked;
    stats_.tcp_records += n;
    more |= n == budget && !blocked;
  } else {
    m.archive_held = false;  // not tried this turn: not known to be held
  }
  // More, but no room: the output's drain (below, in poll) may make room
  // with no event to say so (EPOLLOUT is watched only while output waits).
  m.room_wanted = more && m.conn.pending() >= config_.out_watermark_bytes;
  return more && !m.room_wanted;
}

void ServeControl::check_deadlines(uint64_t now_ns) {
  for (auto& p : mirrors_) {
    Mirror& m = *p;
    const bool handshaking = m.state == Mirror::State::kHello || m.state == Mirror::State::kAuth;
    if (handshaking && now_ns - m.accepted_ns > config_.handshake_timeout_ns) {
      ++stats_.handshake_timeouts;
      note("handshake", absl::StrCat("closed ", net::to_string(m.peer), ": no complete HELLO within ",
                                     config_.handshake_timeout_ns / 1'000'000, " ms"));
      refuse(m, RefuseReason::kHandshakeTimeout, "no complete handshake in time");
      continue;
    }
    if (m.state == Mirror::State::kStreaming && (m.hello.flags & proto::kHelloHealth) != 0 &&
        now_ns - m.last_rx_ns > config_.peer_timeout_ns) {
      ++stats_.peer_timeouts;
      note("silent", absl::StrCat("dropped mirror ", net::to_string(m.peer), ": silent for ",
                                  (now_ns - m.last_rx_ns) / 1'000'000, " ms"));
      m.dead = true;
      continue;
    }
    if (m.state == Mirror::State::kClosing && now_ns - m.closing_ns > 1'000'000'000) {
      m.dead = true;
      continue;
    }
    // A connection with output waiting that took nothing for stall_timeout
    // has stopped reading.
    if (m.conn.pending() == 0 || m.conn.written() != m.stall_written) {
      m.stall_written = m.conn.written();
      m.stall_since_ns = now_ns;
    } else if (now_ns - m.stall_since_ns > config_.stall_timeout_ns) {
      ++stats_.slow_cut;
      note("stalled", absl::StrCat("dropped mirror ", net::to_string(m.peer), ": read nothing for ",
                                   (now_ns - m.stall_since_ns) / 1'000'000, " ms"));
      m.dead = true;
    }
  }
}

bool ServeControl::poll(uint64_t timeout_us) {
  epoll_event events[64];
  const timespec timeout{static_cast<time_t>(timeout_us / 1'000'000),
                         static_cast<long>(timeout_us % 1'000'000) * 1000};
  const int n = epoll_pwait2(epoll_fd_, events, 64, &timeout, nullptr);
  const uint64_t now = monotonic_ns();
  for (int i = 0; i < n; ++i) {
    if (events[i].data.ptr == nullptr) {
      accept_all(now);
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
    if (it == mirrors_.end() || m->dead) continue;
    if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && !on_readable(*m, now)) {
      m->dead = true;
      if (m->state == Mirror::State::kAuth) {
        // It heard our proof and left: its key is not ours.
        ++stats_.bad_auth;
        note("bad-auth", absl::StrCat("mirror ", net::to_string(m->peer),
                                      " gave up authenticating (another key?)"));
      }
    }
  }
  bool more = send_big_records();
  archive_retry_at_ns_ = UINT64_MAX;  // set again by whichever turn the archive's caps hold back
  // Answers, round-robin: each mirror gets one turn (a chunk) per pass.
  const size_t count = mirrors_.size();
  for (size_t k = 0; k < count; ++k) {
    Mirror& m = *mirrors_[(rr_next_ + k) % count];
    if (!m.dead) more |= serve_one(m);
  }
  if (count != 0) rr_next_ = (rr_next_ + 1) % count;
  if (now >= next_deadline_check_ns_) {
    check_deadlines(now);
    preempt_replays(now);
    next_deadline_check_ns_ = now + 100'000'000;
  }
  for (size_t i = 0; i < mirrors_.size();) {
    Mirror& m = *mirrors_[i];
    if (!m.dead && !m.conn.flush()) m.dead = true;
    if (!m.dead && m.conn.pending() > config_.max_backlog_bytes) {
      ++stats_.slow_cut;
      note("backlog", absl::StrCat("dropped mirror ", net::to_string(m.peer), ": over ",
                                   config_.max_backlog_bytes >> 20, " MiB behind"));
      m.dead = true;
    }
    if (!m.dead && m.state == Mirror::State::kClosing && m.conn.pending() == 0) m.dead = true;
    if (m.dead) {
      drop(i);
      continue;
    }
    // Its repairs or stream waited for room, and the flush made it: go on
    // at the next round (the engine polls again on `more`).
    if (m.room_wanted && m.conn.pending() < config_.out_watermark_bytes) more = true;
    // Wake for writability only while output waits.
    const bool want_out = m.conn.pending() != 0;
    if (want_out != m.want_out) {
      epoll_event ev{};
      ev.events = want_out ? EPOLLIN | EPOLLOUT : EPOLLIN;
      ev.data.ptr = &m;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, m.conn.fd(), &ev) == 0) m.want_out = want_out;
    }
    ++i;
  }
  return more;
}

uint64_t ServeControl::next_poll_at(uint64_t now_ns) { return std::min(tcp_poll_at(now_ns), archive_retry_at_ns_); }

uint64_t ServeControl::tcp_poll_at(uint64_t now_ns) {
  const ring::RingHeader& h = info_.header();
  bool any = false;
  bool behind = false;
  // Acquire: pairs with the writer's release store of write_seq.
  const uint64_t ws = h.write_seq.load(std::memory_order_acquire);
  for (const auto& m : mirrors_) {
    if (!m->tcp_mode || m->state != Mirror::State::kStreaming || m->dead || m->archive_held) continue;
    // Held by its socket (output at the watermark): EPOLLOUT, watched while
    // output waits, wakes us when it drains; nothing to poll for.
    if (m->conn.pending() >= config_.out_watermark_bytes) continue;
    any = true;
    behind |= m->tcp_cursor < ws;
  }
  if (!any) return UINT64_MAX;
  // Behind, or caught up for less than kTcpQuietNs (a stream at mid rates:
  // asking would cost the worker an eventfd write a record), or the
  // worker itself behind the ring (its tell would come late): poll soon.
  if (behind) tcp_caught_up_ns_ = 0;
  if (!behind && tcp_caught_up_ns_ == 0) tcp_caught_up_ns_ = now_ns;
  // Acquire: pairs with the worker's release store of next_to_send.
  const bool worker_behind = worker_->stats.next_to_send.load(std::memory_order_acquire) < ws;
  if (behind || worker_behind || now_ns - tcp_caught_up_ns_ < kTcpQuietNs) return now_ns + kTcpBehindPollNs;
  // Quiet: the worker tells us once it has taken record `ws`. Seq_cst
  // store, then a second look at the ring: a record the worker took before
  // it saw the request is seen here (pairs with tell_control_if_asked's
  // seq_cst load).
  worker_->tell_control_at.store(ws, std::memory_order_seq_cst);
  if (h.write_seq.load(std::memory_order_seq_cst) != ws) return now_ns + kTcpBehindPollNs;
  return now_ns + kTcpCaughtUpPollNs;
}

std::vector<MirrorView> ServeControl::mirrors() const {
  std::vector<MirrorView> out;
  const ring::RingHeader& h = info_.header();
  const uint64_t ws = h.write_seq.load(std::memory_order_acquire);  // pairs with the writer's release
  for (const auto& p : mirrors_) {
    const Mirror& m = *p;
    if (m.state != Mirror::State::kStreaming) continue;
    MirrorView v;
    v.peer = m.peer;
    v.mode = m.tcp_mode ? "tcp" : m.multicast ? "multicast" : "unicast";
    v.authenticated = m.authenticated;
    v.has_health = m.has_health;
    v.health = m.health;
    const uint64_t at = m.has_health ? m.health.next_seq : m.tcp_mode ? m.tcp_cursor : ws;
    v.lag = ws > at ? ws - at : 0;
    v.slow = m.slow;
    v.repairs_queued = m.repairs.size();
    v.output_bytes = m.conn.pending();
    out.push_back(v);
  }
  return out;
}

}  // namespace ringfire::control
