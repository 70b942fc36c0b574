// frame.h — the ring-mirroring wire format: a 16-byte little-endian frame
// header (kind u8 | flags u8 | count u16 | len u32 | seq u64) and the bodies
// of the nine frame kinds. Pure encode/decode over byte spans; no I/O, no
// allocation. Byte-level definitions: proto/PROTOCOL.md.
#pragma once

#include <cstdint>

#include "proto/bytes.h"

namespace ringfire::proto {

inline constexpr size_t kFrameHeaderBytes = 16;

// FrameKind is the first byte of every frame.
enum class FrameKind : uint8_t {
  kHello = 1,      // mirror -> source, TCP
  kGeometry = 2,   // source -> mirror, TCP
  kData = 3,       // source -> mirror, UDP or TCP
  kGap = 4,        // source -> mirror, TCP
  kHeartbeat = 5,  // source -> mirror, UDP
  kNak = 6,        // mirror -> source, TCP
  kMulticast = 7,  // source -> mirror, TCP
  kPunch = 8,      // mirror -> source, UDP
  kAttach = 9,     // either way, TCP: stream-mux control (proto/attach.h)
};
inline constexpr uint8_t kMaxFrameKind = 9;

// FrameHeader is the decoded 16-byte header.
struct FrameHeader {
  FrameKind kind = FrameKind::kHello;
  uint8_t flags = 0;    // DATA and HEARTBEAT: the session byte
  uint16_t count = 0;   // DATA: records in the body
  uint32_t len = 0;     // body bytes after the header
  uint64_t seq = 0;     // meaning depends on kind
};

// Frame is a header plus a view of its body inside the decoded buffer.
struct Frame {
  FrameHeader header;
  ConstBytes body;
};

void encode_frame_header(const FrameHeader& h, std::byte* out);
// decode_frame_header reads 16 bytes; rejects unknown kinds and bodies
// longer than max_body.
DecodeError decode_frame_header(ConstBytes in, size_t max_body, FrameHeader* out);
// decode_frame reads one whole frame from the front of `in` (the rest of
// `in` is left for the caller: several frames may share a TCP read).
DecodeError decode_frame(ConstBytes in, size_t max_body, Frame* out);

// ---- HELLO: mirror -> source. seq = first wanted sequence.
inline constexpr uint64_t kHelloLatest = 0;            // new records only
inline constexpr uint64_t kHelloOldest = ~uint64_t{0};  // oldest retained
inline constexpr uint32_t kHelloMagic = 0x524D4652;    // bytes "RFMR"
inline constexpr uint16_t kProtocolVersion = 1;
enum HelloFlags : uint16_t {
  kHelloUnicastCapable = 1u << 0,  // the mirror can receive DATA by UDP unicast
  kHelloPrefersUnicast = 1u << 1,  // ... and asks for it
  kHelloTcpOnly = 1u << 2,         // the mirror asks for DATA on the TCP connection
};
struct Hello {
  uint64_t first_wanted = kHelloLatest;
  uint16_t version = kProtocolVersion;
  uint16_t flags = 0;
  uint64_t expected_schema = 0;  // 0: accept any schema
};
inline constexpr size_t kHelloBody = 16;

// ---- GEOMETRY: source -> mirror. seq = first sequence that will be sent.
struct Geometry {
  uint64_t first_seq = 0;
  uint64_t capacity = 0;
  uint32_t slot_size = 0;
  uint32_t ring_flags = 0;
  uint64_t schema_signature = 0;
  uint32_t registry_size = 0;
  uint64_t slots_offset = 0;
  uint64_t arena_offset = 0;
  uint64_t arena_size = 0;
};
inline constexpr size_t kGeometryBody = 56;

// ---- MULTICAST: source -> mirror. How DATA will arrive by UDP.
struct Multicast {
  uint32_t group = 0;     // IPv4, host order; 0 = unicast (punch `port`)
  uint16_t port = 0;
  uint16_t mtu = 0;       // largest UDP payload the source sends
  uint8_t ttl = 0;
  uint8_t session = 0;    // stamped in the flags byte of UDP DATA/HEARTBEAT
  uint64_t token = 0;     // a PUNCH must carry it
  uint32_t data_ip = 0;   // where to PUNCH; 0 = the TCP connection's peer
};
inline constexpr size_t kMulticastBody = 24;
inline constexpr size_t kMulticastBodyMin = 20;  // sources before data_ip

// ---- DATA: source -> mirror. seq = first record's sequence, count records
// of consecutive sequences, flags = session byte.
// encode_data_header writes the header of a DATA frame whose body the caller
// fills (fixed records: count * slot_size bytes; blob records: see
// append_blob_record).
void encode_data_header(std::byte* out, uint64_t first_seq, uint16_t count, uint32_t body_len,
                        uint8_t session);
inline constexpr size_t kBlobRecordHeader = 4;  // u32 length, then the bytes

// FixedRecords walks the body of a DATA frame of a fixed-slot ring.
// decode checks that len == count * slot_size.
DecodeError check_fixed_data(const FrameHeader& h, size_t slot_size);

// BlobRecords walks the body of a DATA frame of a blob ring: count records,
// each u32 length then that many bytes, nothing after the last.
class BlobRecords {
 public:
  // check validates the whole body up front: every length in bounds, the
  // count exact, no trailing bytes; `max_blob` bounds each record.
  static DecodeError check(const Frame& f, uint32_t max_blob);
  explicit BlobRecords(ConstBytes body) : reader_(body) {}
  // next returns the next record (only after check() returned kOk).
  ConstBytes next() { return reader_.bytes(reader_.le32()); }

 private:
  ByteReader reader_;
};

// ---- GAP: source -> mirror. seq = next sequence that will come.
// ---- HEARTBEAT: source -> mirror. seq = one past the last sequence sent;
//      flags = session byte.
// ---- PUNCH: mirror -> source (UDP). seq = the token from MULTICAST.
// ---- NAK: mirror -> source. seq = first missing, body = u64 last missing.
struct Nak {
  uint64_t first = 0;
  uint64_t last = 0;  // inclusive
};
inline constexpr size_t kNakBody = 8;

// Encoders write header + body into `out` and return the frame size, or 0
// if `out` is too small.
size_t encode_hello(const Hello& m, MutableBytes out);
size_t encode_geometry(const Geometry& m, MutableBytes out);
size_t encode_multicast(const Multicast& m, MutableBytes out);
size_t encode_gap(uint64_t next_seq, MutableBytes out);
size_t encode_heartbeat(uint64_t next_seq, uint8_t session, MutableBytes out);
size_t encode_nak(const Nak& m, MutableBytes out);
size_t encode_punch(uint64_t token, MutableBytes out);

// Decoders take a decoded Frame of the matching kind.
DecodeError decode_hello(const Frame& f, Hello* out);
DecodeError decode_geometry(const Frame& f, Geometry* out);
DecodeError decode_multicast(const Frame& f, Multicast* out);
DecodeError decode_nak(const Frame& f, Nak* out);
// decode_empty checks a GAP, HEARTBEAT or PUNCH frame (no body).
DecodeError decode_empty(const Frame& f, FrameKind kind);

}  // namespace ringfire::proto
