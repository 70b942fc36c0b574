// tcp_conn.h — one non-blocking TCP control connection: bytes in, whole
// ringfire frames out of the front; frames appended to an output buffer and
// written as the socket takes them. Bounded everywhere a peer could push:
// each frame kind has a largest body (FrameLimits), refused from its header
// before any body byte is read; the input buffer grows only as bytes
// actually arrive (never by a declared length) and each read takes at most
// a budget; the caller bounds the output backlog (pending()). Control thread
// only.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "net/endpoint.h"
#include "net/frame_mac.h"
#include "proto/frame.h"

namespace ringfire::net {

inline constexpr size_t kMaxTcpFrameBody = 64u << 20;
// kUnknownFrameBody: the largest frame of a kind this build does not know
// that a connection skips (forward compatibility); larger is malformed.
inline constexpr uint32_t kUnknownFrameBody = 4096;

// FrameLimits: the largest body a connection accepts, per frame kind (0 for
// a kind that must have none; kinds above kMaxFrameKind get `unknown`).
struct FrameLimits {
  std::array<uint32_t, proto::kMaxFrameKind + 1> max_body{};
  uint32_t unknown = kUnknownFrameBody;
  uint32_t of(proto::FrameKind k) const {
    const auto i = static_cast<uint8_t>(k);
    return i <= proto::kMaxFrameKind ? max_body[i] : unknown;
  }
  // allowed: whether frames of kind k may arrive at all.
  std::array<bool, proto::kMaxFrameKind + 1> allowed{};
};

// tcp_listen opens a listening socket (non-blocking, SO_REUSEADDR).
absl::StatusOr<int> tcp_listen(const Endpoint& at);
// tcp_connect connects with a timeout; the socket is returned non-blocking.
// bind_source: a socket about to connect leaves from `ip` (0: nothing to
// do, the kernel's choice).
absl::Status bind_source(int fd, uint32_t ip);
// from_ip (0: the kernel's choice): the connection leaves from this local
// address — a node on a host of several addresses is then known to its
// peer by the address it listens on, whatever the route's source would be.
absl::StatusOr<int> tcp_connect(const Endpoint& to, int timeout_ms, uint32_t from_ip = 0);
// detect_silent_peer makes the kernel end a connection whose peer went
// silent (a host or link gone without a FIN or reset) within about
// timeout_ms: keepalive probes once it has been idle a half of it, one a
// second after that, and TCP_USER_TIMEOUT for data it sent and never saw
// acknowledged. A reading side otherwise waits forever. 0: left as it is.
void detect_silent_peer(int fd, uint32_t timeout_ms);

class TcpConn {
 public:
  explicit TcpConn(int fd);
  TcpConn(TcpConn&& o) noexcept;
  TcpConn& operator=(TcpConn&&) = delete;
  ~TcpConn();

  int fd() const { return fd_; }
  Endpoint peer() const;
  Endpoint local() const;

  // read_available reads what the socket holds, at most budget_bytes;
  // false on EOF or error.
  bool read_available(size_t budget_bytes = 1u << 20);

  // kForged: a connection whose frames are MACed (start_frame_mac) got a
  // frame whose tag does not verify — forged, replayed, reordered, or one
  // missing before it: nothing in it may count, and the connection is over.
  enum class Next : uint8_t { kFrame, kNeedMore, kMalformed, kOversized, kForged };
  // next_frame decodes the frame at the front of the input; *size is its
  // length in bytes, to consume() once handled. kOversized: its header
  // declares a body over limits' bound for its kind (nothing was reserved).
  // On a MACed connection the body excludes the tag (checked once per frame)
  // and the header before it says so: the 16 + body.size() bytes from the
  // header on are the plain frame; *size still counts the tag (consume it).
  Next next_frame(proto::Frame* f, size_t* size, const FrameLimits& limits);
  // next_frame with one bound for every kind, kMaxTcpFrameBody (a peer
  // trusted with that: tests and tools).
  Next next_frame(proto::Frame* f, size_t* size);
  void consume(size_t n);
  // Taken: what a reader of frames (read_frames) did with the front one.
  enum class Taken : uint8_t {
    kNext,   // handled: consume it and read on
    kLast,   // handled: consume it and stop reading
    kLeave,  // not taken (no room for it yet): leave it at the front and stop
    kGone,   // the handler ended the connection (this object may be gone): touch nothing
  };
  // read_frames is the loop every reader of a control connection runs: it
  // hands each whole frame at the front of the input, in order, to
  // `on_frame(const proto::Frame& f, proto::ConstBytes plain)` (plain: the
  // frame from its header on, without a MAC tag) and does what it answers,
  // until no whole frame is left (kNeedMore), the handler stops (kFrame),
  // or the front frame is malformed, oversized or forged (that Next;
  // nothing of it consumed, nothing of it handed over).
  template <class OnFrame>
  Next read_frames(const FrameLimits& limits, OnFrame&& on_frame) {
    for (;;) {
      proto::Frame f;
      size_t size = 0;
      const Next n = next_frame(&f, &size, limits);
      if (n != Next::kFrame) return n;
      const proto::ConstBytes plain(f.body.data() - proto::kFrameHeaderBytes,
                                    proto::kFrameHeaderBytes + f.body.size());
      switch (on_frame(static_cast<const proto::Frame&>(f), plain)) {
        case Taken::kNext:
          consume(size);
          continue;
        case Taken::kLast:
          consume(size);
          return Next::kFrame;
        case Taken::kLeave:
        case Taken::kGone:
          return Next::kFrame;
      }
    }
  }
  // front_unsealed: the front frame read as if nothing sealed it (no check,
  // nothing consumed): for a REFUSE a peer sends before its side of the
  // frame MAC began (§1.8.2); false if no whole frame is there.
  bool front_unsealed(proto::Frame* f) const;
  // buffered: input bytes held (for memory accounting).
  size_t buffered() const { return in_len_ - in_off_; }

  // send queues bytes and writes what the socket takes now; false on error.
  bool send(proto::ConstBytes b);
  // queue only appends bytes to the output (no system call): a flush()
  // writes them. For a caller that builds frames under a lock and writes
  // once it let go of it.
  void queue(proto::ConstBytes b);
  // start_frame_mac: from now on every frame written is sealed and every
  // frame read must verify (PROTOCOL.md §1.8.2): called by each side at the
  // point of its handshake where the protocol says MACs begin — the bytes
  // given to send/queue after it must then be whole frames, in any pieces.
  void start_frame_mac(const FrameKeys& keys);
  // flush writes queued bytes; false on error.
  bool flush();
  size_t pending() const { return out_.size() - out_off_; }
  // abort makes the close a reset: the kernel drops what the peer never
  // read instead of holding it (for a peer cut for not reading).
  void abort();
  // written: bytes the socket has taken since the connection opened;
  // received: bytes read from it.
  uint64_t written() const { return written_; }
  uint64_t received() const { return received_; }

 private:
  // room makes space to read into: compacts, and grows (doubling) only
  // when the buffer is full of bytes that arrived.
  void room();

  int fd_ = -1;
  std::vector<std::byte> in_;
  size_t in_off_ = 0;  // consumed
  size_t in_len_ = 0;  // filled
  size_t want_ = 0;    // the front frame's size, once its header has arrived
  std::vector<std::byte> out_;
  size_t out_off_ = 0;
  uint64_t written_ = 0;
  uint64_t received_ = 0;
  // The frame MAC (start_frame_mac): a direction each. Bytes to send wait
  // in stage_ until a whole frame is there, then go to out_ sealed; the
  // front input frame is checked once (front_opened_, until consume).
  std::optional<FrameMac> seal_, open_;
  std::vector<std::byte> stage_;
  bool front_opened_ = false;
};

}  // namespace ringfire::net
