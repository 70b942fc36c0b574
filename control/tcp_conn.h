// tcp_conn.h — one non-blocking TCP control connection: bytes in, whole
// ringfire frames out of the front; frames appended to an output buffer and
// written as the socket takes them. Bounded: a frame longer than
// kMaxTcpFrameBody is malformed, an output backlog over the caller's limit
// means the peer is too slow. Control thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/kernel_udp.h"
#include "proto/frame.h"

namespace ringfire::control {

inline constexpr size_t kMaxTcpFrameBody = 64u << 20;

// tcp_listen opens a listening socket (non-blocking, SO_REUSEADDR).
absl::StatusOr<int> tcp_listen(const dataplane::Endpoint& at);
// socket_local returns the address a socket is bound to.
dataplane::Endpoint socket_local(int fd);
// tcp_connect connects with a timeout; the socket is returned non-blocking.
absl::StatusOr<int> tcp_connect(const dataplane::Endpoint& to, int timeout_ms);

class TcpConn {
 public:
  explicit TcpConn(int fd);
  TcpConn(TcpConn&& o) noexcept;
  TcpConn& operator=(TcpConn&&) = delete;
  ~TcpConn();

  int fd() const { return fd_; }
  dataplane::Endpoint peer() const;
  dataplane::Endpoint local() const;

  // read_available reads what the socket holds; false on EOF or error.
  bool read_available();

  enum class Next : uint8_t { kFrame, kNeedMore, kMalformed };
  // next_frame decodes the frame at the front of the input; *size is its
  // length in bytes, to consume() once handled.
  Next next_frame(proto::Frame* f, size_t* size);
  void consume(size_t n);

  // send queues bytes and writes what the socket takes now; false on error.
  bool send(proto::ConstBytes b);
  // flush writes queued bytes; false on error.
  bool flush();
  size_t pending() const { return out_.size() - out_off_; }

 private:
  int fd_ = -1;
  std::vector<std::byte> in_;
  size_t in_len_ = 0;
  std::vector<std::byte> out_;
  size_t out_off_ = 0;
};

// read_frame_blocking waits up to timeout_ms for one whole frame (setup
// handshakes only). The frame's bytes stay valid until conn.consume(*size).
absl::Status read_frame_blocking(TcpConn& conn, int timeout_ms, proto::Frame* f, size_t* size);

}  // namespace ringfire::control
