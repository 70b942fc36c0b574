// fuzz_packet.cc — libFuzzer target for the data plane's frame parser
// (Ethernet, VLAN, ARP, IPv4, IGMP, UDP), and complete_partial_checksum.
// Oracle: no sanitizer report; a UDP payload always lies inside the frame;
// a frame whose partial checksum was completed changes only in those two
// bytes and then parses with its UDP checksum verified (when it is UDP and
// otherwise well-formed); a second call changes nothing.
#include <vector>

#include "proto/net/packet.h"
#include "tests/fuzz/require.h"

using namespace ringfire::proto;
using namespace ringfire::proto::net;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ConstBytes in(reinterpret_cast<const std::byte*>(data), size);
  for (bool verify : {true, false}) {
    ParsedPacket p;
    if (parse_packet(in, ParseOptions{verify, verify}, &p) != DecodeError::kOk) continue;
    if (p.kind == PacketKind::kUdp) {
      REQUIRE(p.payload.data() >= in.data());
      REQUIRE(p.payload.data() + p.payload.size() <= in.data() + in.size());
    }
  }
  std::vector<std::byte> frame(in.begin(), in.end());
  if (complete_partial_checksum(frame)) {
    size_t changed = 0;
    for (size_t i = 0; i < frame.size(); ++i) changed += frame[i] != in[i];
    REQUIRE(changed <= 2);
    std::vector<std::byte> again = frame;
    REQUIRE(!complete_partial_checksum(again));
    ParsedPacket p, q;
    // Whatever parses without the UDP check parses with it now.
    if (parse_packet(frame, ParseOptions{true, false}, &p) == DecodeError::kOk && p.kind == PacketKind::kUdp) {
      REQUIRE(parse_packet(frame, ParseOptions{true, true}, &q) == DecodeError::kOk);
    }
  }
  return 0;
}
