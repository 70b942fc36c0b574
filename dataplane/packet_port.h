// packet_port.h — the one interface every packet I/O backend implements
// (kernel UDP sockets, DPDK ethdevs): bursts of up to kBurst datagrams in and
// out, never blocking. Several sessions share a port: each has a binding (a
// UDP port on the port's address, or a group and port) that its datagrams
// arrive on and are sent from; the port tags what it receives with the
// binding's id, a small dense index, which is how a port worker finds the
// session (an array index, not a lookup). Workers take the backend as a
// template parameter constrained by PacketPort, so the packet path has no
// virtual calls; the backend is chosen once, at start-up.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "net/endpoint.h"
#include "proto/bytes.h"
#include "proto/net/ethernet.h"

namespace ringfire::dataplane {

inline constexpr size_t kBurst = 32;

// The data plane's addresses are net/'s (a port's bindings, a datagram's
// source and destination).
using net::Endpoint;

// StaticNeighbor pins a peer's MAC for a port with its own L2 (DPDK).
struct StaticNeighbor {
  uint32_t ip = 0;  // host order
  proto::net::MacAddr mac{};
};

// BindingId names a binding on a port (1..kMaxBindings); 0 is none (a
// port with one binding may leave it 0).
using BindingId = uint16_t;
inline constexpr size_t kMaxBindings = 1024;

// BindSpec is what a session asks a port to receive: datagrams to ip:udp_port
// (ip 0: the port's address; udp_port 0: one the port picks), and with a
// group, datagrams to group:udp_port too (the port joins the group).
struct BindSpec {
  uint32_t ip = 0;
  uint16_t udp_port = 0;
  uint32_t group = 0;
  // reuse: another process may bind the same port (a group's receivers on
  // one host); otherwise a port in use is an error naming it.
  bool reuse = false;
};

// RxDatagram is one received UDP payload; it points into the port's
// buffers and stays valid until the port's next rx_burst.
struct RxDatagram {
  proto::ConstBytes payload;
  Endpoint from;
  BindingId binding = 0;  // the binding it arrived on
};

// TxDatagram is one UDP payload to send; the port copies it (or builds its
// frame around it) before tx_burst returns.
struct TxDatagram {
  proto::ConstBytes payload;
  Endpoint to;
  BindingId binding = 0;  // sent from this binding's address and UDP port
  // lease: the payload was built in this buffer the port lent (lease_tx),
  // so the port may send it from there, uncopied; nullptr: a buffer of the
  // caller's.
  void* lease = nullptr;
  // trailer: 16 bytes (an unkeyed session's TAG frame, datagram_tag.h) the
  // port sends after `payload`, so one payload leaves to several
  // destinations each with its own tag; nullptr: none. The caller leaves
  // proto::kTagFrameBytes of room in the datagram's size budget for it.
  const std::byte* trailer = nullptr;
};

// TxLease is a TX buffer a port lends (a DPDK port: an mbuf's data room,
// past the bytes its Ethernet/IPv4/UDP headers will take): the caller
// builds a datagram's payload in `room` (at most `capacity` bytes), names
// `handle` as the TxDatagram's lease, and returns it with release_tx once,
// after the last tx_burst that names it. The port takes references of its
// own for what it sends, so the release is the caller's whatever happened.
struct TxLease {
  std::byte* room = nullptr;
  size_t capacity = 0;
  void* handle = nullptr;
};

// PacketPort: rx_burst returns how many datagrams it filled (0..n, n <=
// kBurst); tx_burst returns how many it took (the rest were refused: a full
// queue, counted by the caller); local is the port's own address.
template <typename P>
concept PacketPort = requires(P& p, RxDatagram* rx, const TxDatagram* tx, size_t n) {
  { p.rx_burst(rx, n) } -> std::same_as<size_t>;
  { p.tx_burst(tx, n) } -> std::same_as<size_t>;
  { p.local() } -> std::same_as<Endpoint>;
};

// LendingPort: a port that lends TX buffers (frames are then built in
// place, not staged and copied). lease_tx is false when it has none to
// lend now (the caller uses a buffer of its own); release_tx may be called
// from any thread, and after the port object is gone.
template <typename P>
concept LendingPort = PacketPort<P> && requires(P& p, TxLease* l, void* handle) {
  { p.lease_tx(l) } -> std::same_as<bool>;
  P::release_tx(handle);
};

}  // namespace ringfire::dataplane
