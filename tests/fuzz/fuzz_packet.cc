// fuzz_packet.cc — libFuzzer target for the data plane's frame parser
// (Ethernet, VLAN, ARP, IPv4, IGMP, UDP). Oracle: no sanitizer report, and a
// UDP payload always lies inside the frame.
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
  return 0;
}
