// tcp_conn.cc — non-blocking TCP connections for the control plane.
#include "net/tcp_conn.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ringfire::net {

absl::StatusOr<int> tcp_listen(const Endpoint& at) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = to_sockaddr(at);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 64) != 0) {
    const int err = errno;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on ", to_string(at), ": ", std::strerror(err),
        err == EADDRNOTAVAIL ? " (that address is not on this host)" : ""));
  }
  return fd;
}

absl::Status bind_source(int fd, uint32_t ip) {
  if (ip == 0) return absl::OkStatus();
  // The port is chosen at connect, per destination (not one of the
  // host's ephemeral ports held per address whatever the destination).
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
  sockaddr_in a = to_sockaddr(Endpoint{ip, 0});
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot connect from ", net::to_string(Endpoint{ip, 0}),
                                                      ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> tcp_connect(const Endpoint& to, int timeout_ms, uint32_t from_ip) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (absl::Status st = bind_source(fd, from_ip); !st.ok()) {
    close(fd);
    return st;
  }
  sockaddr_in a = to_sockaddr(to);
  int err = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
    } else {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, timeout_ms) != 1) {
        err = ETIMEDOUT;
      } else {
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
  }
  if (err != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot reach source ", net::to_string(to),
                                               ": ", std::strerror(err)));
  }
  return fd;
}

void detect_silent_peer(int fd, uint32_t timeout_ms) {
  if (timeout_ms == 0) return;
  const int on = 1;
  const int idle_s = std::max<int>(1, static_cast<int>(timeout_ms / 2000));
  const int interval_s = 1;
  const int probes = std::max<int>(1, (static_cast<int>(timeout_ms / 1000) - idle_s) / interval_s);
  const unsigned user_timeout = timeout_ms;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

TcpConn::TcpConn(int fd) : fd_(fd), in_(16u << 10) {
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

TcpConn::TcpConn(TcpConn&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      in_(std::move(o.in_)),
      in_off_(o.in_off_),
      in_len_(o.in_len_),
      want_(o.want_),
      out_(std::move(o.out_)),
      out_off_(o.out_off_),
      written_(o.written_),
      received_(o.received_),
      seal_(o.seal_),
      open_(o.open_),
      stage_(std::move(o.stage_)),
      front_opened_(o.front_opened_) {}

TcpConn::~TcpConn() {
  if (fd_ >= 0) close(fd_);
}

Endpoint TcpConn::peer() const {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  return from_sockaddr(a);
}

Endpoint TcpConn::local() const { return socket_local(fd_); }


void TcpConn::room() {
  if (in_off_ == in_len_) {
    in_off_ = in_len_ = 0;
  } else if (in_off_ != 0 && (in_len_ == in_.size() || in_off_ > in_.size() / 2)) {
    std::memmove(in_.data(), in_.data() + in_off_, in_len_ - in_off_);
    in_len_ -= in_off_;
    in_off_ = 0;
  }
  // Full of real bytes and the front frame needs more: double. The frame's
  // declared size was checked against its kind's bound already, and the
  // buffer never exceeds twice what actually arrived.
  if (in_len_ == in_.size() && want_ > in_.size()) in_.resize(std::min(2 * in_.size(), want_ + 4096));
}

bool TcpConn::read_available(size_t budget_bytes) {
  size_t taken = 0;
  while (taken < budget_bytes) {
    room();
    if (in_len_ == in_.size()) return true;  // the caller must consume first
    const size_t ask = std::min(in_.size() - in_len_, budget_bytes - taken);
    const ssize_t n = ::read(fd_, in_.data() + in_len_, ask);
    if (n > 0) {
      in_len_ += static_cast<size_t>(n);
      taken += static_cast<size_t>(n);
      received_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
  return true;
}

TcpConn::Next TcpConn::next_frame(proto::Frame* f, size_t* size, const FrameLimits& limits) {
  const proto::ConstBytes in(in_.data() + in_off_, in_len_ - in_off_);
  if (in.size() < proto::kFrameHeaderBytes) return Next::kNeedMore;
  proto::FrameHeader h;
  const proto::DecodeError e = proto::decode_frame_header(in, kMaxTcpFrameBody, &h);
  if (e == proto::DecodeError::kTooLarge) return Next::kOversized;
  if (e != proto::DecodeError::kOk) return Next::kMalformed;
  // A MACed frame's len counts its tag; once checked, its header in our
  // buffer says the plain body's (front_opened_), the tag still after it.
  const uint32_t tag = open_ ? static_cast<uint32_t>(kFrameTagBytes) : 0;
  const uint32_t body = front_opened_ ? h.len : h.len < tag ? 0 : h.len - tag;
  if (!front_opened_ && h.len < tag) return Next::kForged;  // no room for its tag
  if (body > limits.of(h.kind)) return Next::kOversized;
  want_ = proto::kFrameHeaderBytes + body + tag;
  if (in.size() < want_) {
    room();  // a frame larger than the buffer: make way as it arrives
    return Next::kNeedMore;
  }
  if (open_ && !front_opened_) {
    // Checked once (the counter moves with it), before anything reads the body.
    if (!open_->open({in.data(), want_ - tag}, in.data() + want_ - tag)) return Next::kForged;
    front_opened_ = true;
    // The frame as the caller sees it is the plain one: its header's len
    // rewritten (in our own buffer) to the body's, so that header and body
    // relay as a frame of their own (a TCP-borne DATA to the worker).
    std::memcpy(in_.data() + in_off_ + 4, &body, 4);
  }
  if (proto::decode_frame(in.first(want_ - tag), body, f) != proto::DecodeError::kOk) return Next::kMalformed;
  *size = want_;
  return Next::kFrame;
}

TcpConn::Next TcpConn::next_frame(proto::Frame* f, size_t* size) {
  FrameLimits all;
  all.max_body.fill(static_cast<uint32_t>(kMaxTcpFrameBody));
  all.unknown = static_cast<uint32_t>(kMaxTcpFrameBody);
  return next_frame(f, size, all);
}

bool TcpConn::front_unsealed(proto::Frame* f) const {
  const proto::ConstBytes in(in_.data() + in_off_, in_len_ - in_off_);
  proto::FrameHeader h;
  if (proto::decode_frame_header(in, kMaxTcpFrameBody, &h) != proto::DecodeError::kOk) return false;
  return in.size() >= proto::kFrameHeaderBytes + h.len && proto::decode_frame(in, h.len, f) == proto::DecodeError::kOk;
}

void TcpConn::consume(size_t n) {
  in_off_ += n;
  want_ = 0;
  front_opened_ = false;
  if (in_off_ == in_len_) in_off_ = in_len_ = 0;
}

void TcpConn::abort() {
  const linger l{1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

bool TcpConn::send(proto::ConstBytes b) {
  queue(b);
  return flush();
}

void TcpConn::queue(proto::ConstBytes b) {
  if (!seal_) {
    out_.insert(out_.end(), b.begin(), b.end());
    return;
  }
  // Sealed: each whole frame leaves with its tag, its len counting it.
  stage_.insert(stage_.end(), b.begin(), b.end());
  size_t at = 0;
  while (stage_.size() - at >= proto::kFrameHeaderBytes) {
    uint32_t len;
    std::memcpy(&len, stage_.data() + at + 4, 4);  // the header's len (u32 LE at byte 4)
    if (stage_.size() - at < proto::kFrameHeaderBytes + len) break;
    const size_t start = out_.size();
    out_.insert(out_.end(), stage_.begin() + static_cast<std::ptrdiff_t>(at),
                stage_.begin() + static_cast<std::ptrdiff_t>(at + proto::kFrameHeaderBytes + len));
    const uint32_t sealed_len = len + static_cast<uint32_t>(kFrameTagBytes);
    std::memcpy(out_.data() + start + 4, &sealed_len, 4);
    out_.resize(out_.size() + kFrameTagBytes);
    seal_->seal({out_.data() + start, proto::kFrameHeaderBytes + len}, out_.data() + start + proto::kFrameHeaderBytes + len);
    at += proto::kFrameHeaderBytes + len;
  }
  stage_.erase(stage_.begin(), stage_.begin() + static_cast<std::ptrdiff_t>(at));
}

void TcpConn::start_frame_mac(const FrameKeys& keys) {
  seal_.emplace(keys.send);
  open_.emplace(keys.recv);
  front_opened_ = false;
}

bool TcpConn::flush() {
  while (out_off_ < out_.size()) {
    const ssize_t n = ::send(fd_, out_.data() + out_off_, out_.size() - out_off_, MSG_NOSIGNAL);
    if (n > 0) {
      out_off_ += static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
  if (out_off_ == out_.size()) {
    out_.clear();
    out_off_ = 0;
  } else if (out_off_ > (1u << 20)) {
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(out_off_));
    out_off_ = 0;
  }
  return true;
}

}  // namespace ringfire::net
