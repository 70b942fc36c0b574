// frame.h — the ring-mirroring wire format: a 16-byte little-endian frame
// header (kind u8 | flags u8 | count u16 | len u32 | seq u64) and the bodies
// of the frame kinds. Pure encode/decode over byte spans; no I/O, no
// allocation. Byte-level definitions: proto/PROTOCOL.md.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

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
  kHealth = 10,    // mirror -> source, TCP: the mirror's state every 100 ms
  kAuth = 11,      // either way, TCP: the pre-shared-key handshake
  kMac = 12,       // UDP: the last 16 bytes of an authenticated datagram
  kRefuse = 13,    // source -> mirror, TCP: why the connection is being closed
  kProbe = 14,     // source -> mirror by UDP, echoed mirror -> source on TCP: path validation
  kNode = 15,      // either way, TCP: a stream-mux node introduces itself and its channel
  kMuxControl = 16,  // receiver -> owner, TCP: `_stream_batch` credit and closes; seq = channel position
  kStream = 17,    // owner -> receiver, TCP: one record of a stream on its own connection (the per-stream path)
  kTag = 18,       // UDP: the last 16 bytes of an unkeyed datagram: the session's tag, announced on TCP
};
// STREAM flags: the terminal (no body; the stream finished).
inline constexpr uint8_t kStreamTerminal = 1u << 0;
// kMaxFrameKind is the highest kind this build knows. Higher kinds decode
// (a later version's frames): a TCP receiver skips them, a UDP receiver
// drops the datagram. Kind 0 is always malformed.
inline constexpr uint8_t kMaxFrameKind = 18;
inline bool known_kind(FrameKind k) {
  return static_cast<uint8_t>(k) >= 1 && static_cast<uint8_t>(k) <= kMaxFrameKind;
}
// frame_kind_name: "HELLO", "DATA", ... ("unknown" above kMaxFrameKind).
const char* frame_kind_name(FrameKind k);

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
// decode_frame_header reads 16 bytes; rejects kind 0 and bodies longer than
// max_body (before any body byte is read: no length from the wire ever
// sizes anything).
DecodeError decode_frame_header(ConstBytes in, size_t max_body, FrameHeader* out);
// decode_frame reads one whole frame from the front of `in` (the rest of
// `in` is left for the caller: several frames may share a TCP read).
DecodeError decode_frame(ConstBytes in, size_t max_body, Frame* out);

// kMaxSequence bounds every record sequence on the wire (and in a ring:
// ring::kMaxSeq, the same 2^62): 146 years at a billion records a second.
// A frame reaching at or past it is malformed.
inline constexpr uint64_t kMaxSequence = uint64_t{1} << 62;

// ---- HELLO: mirror -> source. seq = first wanted sequence.
inline constexpr uint64_t kHelloLatest = 0;            // new records only
inline constexpr uint64_t kHelloOldest = ~uint64_t{0};  // oldest retained
inline constexpr uint32_t kHelloMagic = 0x524D4652;    // bytes "RFMR"
inline constexpr uint16_t kProtocolVersion = 1;
enum HelloFlags : uint16_t {
  kHelloUnicastCapable = 1u << 0,  // the mirror can receive DATA by UDP unicast
  kHelloPrefersUnicast = 1u << 1,  // ... and asks for it
  kHelloTcpOnly = 1u << 2,         // the mirror asks for DATA on the TCP connection
  kHelloHealth = 1u << 3,          // the mirror sends HEALTH every 100 ms
  kHelloMultiNak = 1u << 4,        // the mirror's NAKs may name several ranges
  kHelloAuth = 1u << 5,            // a 32-byte challenge follows: authenticate
  kHelloTag = 1u << 6,             // the mirror checks a datagram tag (TAG frame) when unkeyed
  kHelloFrameMac = 1u << 7,        // with kHelloAuth: MAC every control frame after the handshake (§1.8.2)
  kHelloChannel = 1u << 8,         // a channel token follows: the NODE's channel_epoch that named this serve (§5.1)
};
inline constexpr size_t kNonceBytes = 32;
struct Hello {
  uint64_t first_wanted = kHelloLatest;
  uint16_t version = kProtocolVersion;
  uint16_t flags = 0;
  uint64_t expected_schema = 0;  // 0: accept any schema
  std::array<std::byte, kNonceBytes> nonce{};  // with kHelloAuth: the mirror's challenge
  uint64_t channel_token = 0;  // with kHelloChannel (after the challenge, if any)
};
inline constexpr size_t kHelloBody = 16;
inline constexpr size_t kHelloAuthBody = kHelloBody + kNonceBytes;
inline constexpr size_t kHelloTokenBytes = 8;
inline constexpr size_t kHelloMaxBody = kHelloAuthBody + kHelloTokenBytes;  // what ringfire's mirror sends at most

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
enum MulticastFeatures : uint16_t {
  kFeatureMultiNak = 1u << 0,  // NAKs naming several ranges are served
  kFeatureHealth = 1u << 1,    // HEALTH is answered with a TCP HEARTBEAT; liveness applies
  kFeatureMac = 1u << 2,       // every UDP datagram (and PUNCH) carries a MAC frame
  kFeatureProbe = 1u << 3,     // unicast: a PUNCH from another address than the TCP peer's is
                               // answered with a PROBE to echo over TCP before DATA goes there
  kFeatureTag = 1u << 4,       // unkeyed: every UDP datagram to this mirror ends with a TAG frame
};
struct Multicast {
  uint32_t group = 0;     // IPv4, host order; 0 = unicast (punch `port`)
  uint16_t port = 0;
  uint16_t mtu = 0;       // largest UDP payload the source sends
  uint8_t ttl = 0;
  uint8_t session = 0;    // stamped in the flags byte of UDP DATA/HEARTBEAT
  uint16_t features = 0;  // MulticastFeatures the source grants this mirror
  uint64_t token = 0;     // a PUNCH must carry it
  uint32_t data_ip = 0;   // where UDP comes from and PUNCHes go; 0 = the TCP peer
  uint64_t tag = 0;       // kFeatureTag: what every datagram's TAG frame carries
};
inline constexpr size_t kMulticastBody = 32;
inline constexpr size_t kMulticastBodyMin = 20;  // sources before data_ip
inline constexpr size_t kMulticastBodyNoTag = 24;  // sources before the tag

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
//      flags = session byte (UDP) or 0 (TCP: the source's vouched position,
//      the answer to HEALTH and to a NAK beyond what it has sent).
// ---- PUNCH: mirror -> source (UDP). seq = the token from MULTICAST; on an
//      authenticated session an 8-byte body (a counter that only grows),
//      then a MAC frame.
// ---- NAK: mirror -> source. seq = first missing, body = u64 last missing,
//      then (multi-range, kFeatureMultiNak) up to 63 more (first, last) pairs,
//      ascending and apart.
struct Nak {
  uint64_t first = 0;
  uint64_t last = 0;  // inclusive
};
inline constexpr size_t kNakBody = 8;
inline constexpr size_t kMaxNakRanges = 64;
// NakRanges is a decoded NAK: one range, or several in ascending order.
// repeat (flags bit 0): every range was NAKed before and is still missing
// (its first repair was lost): the source answers it over TCP.
inline constexpr uint8_t kNakRepeat = 1u << 0;
struct NakRanges {
  uint32_t count = 0;
  bool repeat = false;
  std::array<Nak, kMaxNakRanges> ranges{};
  void push(const Nak& n) { ranges[count++] = n; }
};
inline constexpr size_t kMaxNakBody = kNakBody + 16 * (kMaxNakRanges - 1);

// ---- HEALTH: mirror -> source, TCP, every 100 ms (kHelloHealth). seq = the
// report's number. The source answers each with a TCP HEARTBEAT.
struct Health {
  uint64_t report = 0;
  uint64_t next_seq = 0;       // the next sequence the mirror will write
  uint64_t known_end = 0;      // one past the highest it knows was sent
  uint32_t holes = 0;          // missing ranges below known_end now
  uint32_t held = 0;           // frames in hold-back now
  uint32_t held_high = 0;      // hold-back high water this session
  uint32_t reserved = 0;
  uint64_t naks = 0;           // NAKs sent this session
  uint64_t gap_records = 0;    // records the source no longer had
  uint64_t rx_drops = 0;       // datagrams lost at the port or the hold-back
  uint64_t rejected = 0;       // UDP datagrams rejected, every reason
  // udp_datagrams: the source's UDP datagrams the mirror took in this
  // session, every copy (a duplicate too), once past the sender, MAC and
  // tag checks. A source compares it with what it sent that mirror: the
  // path's loss, which dup = auto acts on. Absent from an older mirror's
  // 64-byte report (has_udp_datagrams false).
  uint64_t udp_datagrams = 0;
  bool has_udp_datagrams = false;
};
inline constexpr size_t kHealthBody = 72;     // what this version sends
inline constexpr size_t kHealthMinBody = 64;  // what it accepts (an older mirror's)

// ---- AUTH: the pre-shared-key handshake (TCP; PROTOCOL.md §1.8).
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256
// Step 3 is the stream mux's: the connecting node's proof (§5.1), laid out as step 2.
enum class AuthStep : uint8_t { kSourceProof = 1, kMirrorProof = 2, kNodeProof = 3 };
// kAuthFrameMac (Auth::flags, step 1): the source answers a HELLO's
// kHelloFrameMac: every control frame after AUTH step 2 is MACed (§1.8.2).
inline constexpr uint8_t kAuthFrameMac = 1u << 0;
struct Auth {
  AuthStep step = AuthStep::kSourceProof;
  uint8_t flags = 0;  // kAuthFrameMac (step 1)
  std::array<std::byte, kNonceBytes> nonce{};  // step 1: the source's nonce
  std::array<std::byte, kNonceBytes> salt{};   // step 1: the data-key salt
  std::array<std::byte, kProofBytes> proof{};
};
inline constexpr size_t kAuthSourceBody = 8 + 2 * kNonceBytes + kProofBytes;  // 104
inline constexpr size_t kAuthMirrorBody = 8 + kProofBytes;                    // 40

// ---- MAC: UDP, the last frame of an authenticated datagram: 16 bytes,
// flags = session byte (0 on a PUNCH), seq = the tag over every byte of the
// datagram before the tag (SipHash-2-4, PROTOCOL.md §1.8).
inline constexpr size_t kMacFrameBytes = kFrameHeaderBytes;

// ---- TAG: UDP, the last frame of every datagram of an unkeyed session that
// granted kFeatureTag: 16 bytes, flags = session byte, count 0, len 0, seq =
// the 64-bit tag announced in MULTICAST (random per mirror on unicast, per
// source incarnation on a group; PROTOCOL.md §1.8.1). Not a MAC: it proves
// only that the sender learned the tag, which a blind spoofer cannot.
inline constexpr size_t kTagFrameBytes = kFrameHeaderBytes;
// encode_tag_frame writes the 16-byte TAG frame.
void encode_tag_frame(uint8_t session, uint64_t tag, std::byte* out);

// ---- PROBE: path validation for unicast. seq = a challenge. By UDP from
// the source to a PUNCH's address (flags = session byte) when that is not
// the mirror's TCP address; the mirror echoes it on TCP (flags 0, same
// seq), and only then does DATA go to that address.
// ---- REFUSE: source -> mirror, TCP, then the source closes.
enum class RefuseReason : uint16_t {
  kMalformedHello = 1,
  kVersion = 2,
  kSchema = 3,
  kAuthRequired = 4,
  kAuthFailed = 5,
  kBusy = 6,              // the connection cap
  kHandshakeTimeout = 7,
  kProtocol = 8,          // a frame that breaks the protocol
  kSlow = 9,              // the mirror did not read what it asked for
  kWrongChannel = 10,     // a channel token that is not this serve's (§5.1): another node's channel
};
inline constexpr size_t kMaxRefuseText = 200;
struct Refuse {
  RefuseReason reason = RefuseReason::kProtocol;
  std::string_view text;  // a view into the frame (decode) or the caller's (encode)
};
const char* refuse_reason_name(RefuseReason r);

// Encoders write header + body into `out` and return the frame size, or 0
// if `out` is too small.
// ---- NODE: either way, the first frame on a stream-mux control connection
// (PROTOCOL.md §5). The connecting node names itself and the channel it
// serves to the other (a blob ring served on `channel_port` of this
// connection's address); the accepting node answers with its own NODE.
inline constexpr uint32_t kNodeMagic = 0x584E4652;  // bytes "RFNX"
enum NodeFlags : uint16_t {
  kNodeChannel = 1u << 0,  // channel_epoch and channel_port are set: mirror my channel
  kNodeKeyed = 1u << 1,    // a 32-byte nonce follows the fixed body: this node holds a pre-shared key
  kNodeProof = 1u << 2,    // (the accepting node's, with kNodeKeyed) a 32-byte proof follows the nonce
  kNodeFrameMac = 1u << 3, // with kNodeKeyed: MAC every control frame after the keyed exchange (§1.8.2), if both set it
};
struct Node {
  uint16_t version = kProtocolVersion;
  uint16_t flags = 0;
  uint64_t worker_id = 0;      // xxh3 of the node's instance id: the upper half of its anchor handles
  uint64_t channel_epoch = 0;  // the peer_epoch of every batch in the channel (non-zero)
  uint16_t channel_port = 0;   // TCP port of the channel's serve, on this connection's address
  std::array<std::byte, kNonceBytes> nonce{};  // kNodeKeyed
  std::array<std::byte, kProofBytes> proof{};  // kNodeProof
};
inline constexpr size_t kNodeBody = 28;                                  // the fixed part
inline constexpr size_t kNodeMaxBody = kNodeBody + kNonceBytes + kProofBytes;  // 92: keyed, with a proof

size_t encode_hello(const Hello& m, MutableBytes out);
size_t encode_geometry(const Geometry& m, MutableBytes out);
size_t encode_multicast(const Multicast& m, MutableBytes out);
size_t encode_gap(uint64_t next_seq, MutableBytes out);
size_t encode_heartbeat(uint64_t next_seq, uint8_t session, MutableBytes out);
size_t encode_nak(const Nak& m, MutableBytes out);
// encode_nak_ranges writes one NAK naming r.count ranges (1 = a plain NAK).
size_t encode_nak_ranges(const NakRanges& r, MutableBytes out);
size_t encode_punch(uint64_t token, MutableBytes out);
// encode_punch_counted writes a PUNCH with its counter body (authenticated
// sessions; the caller appends the MAC frame).
size_t encode_punch_counted(uint64_t token, uint64_t counter, MutableBytes out);
// (A TCP HEARTBEAT is encode_heartbeat with session 0.)
size_t encode_probe(uint64_t challenge, uint8_t session, MutableBytes out);
size_t encode_health(const Health& m, MutableBytes out);
size_t encode_auth(const Auth& m, MutableBytes out);
size_t encode_refuse(const Refuse& m, MutableBytes out);
size_t encode_node(const Node& m, MutableBytes out);

// Decoders take a decoded Frame of the matching kind.
DecodeError decode_hello(const Frame& f, Hello* out);
DecodeError decode_geometry(const Frame& f, Geometry* out);
DecodeError decode_multicast(const Frame& f, Multicast* out);
DecodeError decode_nak(const Frame& f, Nak* out);
// decode_nak_ranges reads a plain or a multi-range NAK.
DecodeError decode_nak_ranges(const Frame& f, NakRanges* out);
// decode_empty checks a GAP, HEARTBEAT or PUNCH frame (no body).
DecodeError decode_empty(const Frame& f, FrameKind kind);
// decode_punch reads a PUNCH: *counter is 0 without a body.
DecodeError decode_punch(const Frame& f, uint64_t* token, uint64_t* counter);
DecodeError decode_health(const Frame& f, Health* out);
DecodeError decode_auth(const Frame& f, Auth* out);
DecodeError decode_refuse(const Frame& f, Refuse* out);
DecodeError decode_node(const Frame& f, Node* out);

}  // namespace ringfire::proto
