// packet.h — whole frames as the data plane sends and receives them:
// Ethernet + IPv4 + UDP built in one call (checksums in software or left
// for offload), and one parser that classifies a received frame as ringfire
// UDP, ARP, IGMP or other, checking every layer.
#pragma once

#include <cstdint>

#include "proto/bytes.h"
#include "proto/net/arp.h"
#include "proto/net/ethernet.h"
#include "proto/net/igmp.h"
#include "proto/net/ipv4.h"
#include "proto/net/udp.h"

namespace ringfire::proto::net {

inline constexpr size_t kUdpFrameOverhead = kEtherHeaderBytes + kIpv4HeaderBytes + kUdpHeaderBytes;

// UdpFlow is everything about a UDP frame but its payload.
struct UdpFlow {
  MacAddr src_mac{};
  MacAddr dst_mac{};
  uint32_t src_ip = 0;  // host order
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t ttl = 64;
  uint8_t tos = 0;
};

// write_udp_headers fills the 42 bytes in front of a payload of
// `payload_len` bytes that already sits at out[kUdpFrameOverhead]; computes
// the IPv4 checksum, and the UDP checksum if compute_udp_checksum (else sends 0).
// Returns the frame size or 0 if `out` is too small.
size_t write_udp_headers(const UdpFlow& f, uint16_t ip_id, size_t payload_len, bool compute_udp_checksum,
                         MutableBytes out);

// PacketKind classifies a received frame.
enum class PacketKind : uint8_t {
  kUdp,       // IPv4 UDP, not fragmented: payload is the UDP payload
  kArp,
  kIgmp,
  kFragment,  // an IPv4 fragment (ringfire never sends them)
  kOther,     // any other ethertype or IP protocol
};

struct ParsedPacket {
  PacketKind kind = PacketKind::kOther;
  EtherHeader eth;
  Ipv4Header ip;
  UdpHeader udp;
  ArpPacket arp;
  IgmpMessage igmp;
  ConstBytes payload;
};

struct ParseOptions {
  bool verify_ip_checksum = true;   // false when the NIC verified it
  bool verify_udp_checksum = true;
};

// parse_packet decodes an Ethernet frame; any malformed layer is an error.
DecodeError parse_packet(ConstBytes frame, const ParseOptions& opt, ParsedPacket* out);

// complete_partial_checksum finishes the TCP or UDP checksum of an untagged
// IPv4 frame whose checksum field holds only the pseudo-header's sum: what a
// veth sends when the kernel left the sum to a NIC that never ran
// (CHECKSUM_PARTIAL), as af_packet and af_xdp read it raw. Returns whether
// it changed the frame; a checksum that is right, or wrong in any other way,
// is left for the receiver to judge.
bool complete_partial_checksum(MutableBytes frame);

}  // namespace ringfire::proto::net
