// packet_port.h — the one interface every packet I/O backend implements
// (kernel UDP sockets today; DPDK ethdevs and AF_XDP sockets next): bursts
// of up to kBurst datagrams in and out, never blocking. Workers take the
// backend as a template parameter constrained by PacketPort, so the packet
// path has no virtual calls; the backend is chosen once, at start-up.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "proto/bytes.h"
#include "proto/net/ethernet.h"

namespace ringfire::dataplane {

inline constexpr size_t kBurst = 32;

// Endpoint is an IPv4 address and port, host order.
struct Endpoint {
  uint32_t ip = 0;
  uint16_t port = 0;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// StaticNeighbor pins a peer's MAC for a port with its own L2 (DPDK).
struct StaticNeighbor {
  uint32_t ip = 0;  // host order
  proto::net::MacAddr mac{};
};

// RxDatagram is one received UDP payload; it points into the port's
// buffers and stays valid until the port's next rx_burst.
struct RxDatagram {
  proto::ConstBytes payload;
  Endpoint from;
};

// TxDatagram is one UDP payload to send; the port copies it (or builds its
// frame around it) before tx_burst returns.
struct TxDatagram {
  proto::ConstBytes payload;
  Endpoint to;
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

}  // namespace ringfire::dataplane
