// format.h — the on-disk layout of a ringfire archive: one directory per
// recorded ring. Little-endian throughout, like the ring-mirroring wire;
// every struct is written and read through encode/decode below, never
// cast from a file's bytes.
//
//   DIR/catalog              what the archive is (the ring's shape) and
//                            which segments exist: the only place that says
//                            so. Rewritten whole (temp file + rename).
//   DIR/<first seq>.seg      a segment: a 4 KiB header, then batches, each
//                            starting on a 4 KiB boundary (the one before
//                            it padded with zeroes: the recorder writes
//                            with O_DIRECT); zeroes after the last. Fixed
//                            size (preallocated), named by the first
//                            sequence it holds, 20 decimal digits.
//   DIR/<first seq>.idx      the segment's sparse index: (seq, offset) pairs
//                            of 16 bytes, one per index_interval bytes of
//                            segment; derived data, rebuilt on recovery.
//
// A batch is the unit of writing and of checking:
//
//   0   u32 magic "RFB1"     kBatchMagic
//   4   u32 bytes            the whole batch, header included, padding not;
//                            a multiple of 8. The next batch starts at the
//                            next 4 KiB boundary.
//   8   u64 first_seq        the first sequence the batch covers
//   16  u64 end_seq          one past the last sequence it covers (records,
//                            holes and gaps: where the next batch starts)
//   24  u32 entries
//   28  u32 flags            0
//   32  u64 checksum         XXH3-64 of the entries, seeded with the
//                            XXH3-64 of bytes 0..32
//   40  entries
//
// An entry is a 16-byte header and its payload, padded to 8 bytes:
//
//   0   u64 seq
//   8   u32 len              payload bytes
//   12  u16 kind             kEntryRecord or kEntryGap
//   14  u16 reserved         0
//
// A record entry's payload is the record. A gap entry (len 16) says the
// recorder lost [seq, end) to the ring's writer lapping it: payload u64 end,
// u64 lost (records among them; on a sparse ring an upper bound, as the
// ring's own count is). Sequences a batch covers with neither are holes of
// a sparse ring: recorded as holes.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace ringfire::ring {
class RingFile;
}  // namespace ringfire::ring

namespace ringfire::archive {

// kCatalogMagic is "RFCATLG1", kSegmentMagic "RFSEGMT1", kBatchMagic "RFB1",
// each read as a little-endian integer.
inline constexpr uint64_t kCatalogMagic = 0x31474C5441434652ull;
inline constexpr uint64_t kSegmentMagic = 0x31544D4745534652ull;
inline constexpr uint32_t kBatchMagic = 0x31424652u;
inline constexpr uint32_t kFormatVersion = 1;

inline constexpr uint64_t kSegmentHeaderBytes = 4096;
inline constexpr size_t kBatchHeaderBytes = 40;
inline constexpr size_t kEntryHeaderBytes = 16;
inline constexpr size_t kGapPayloadBytes = 16;
inline constexpr size_t kIndexEntryBytes = 16;
// kMaxBatchBytes bounds what a reader allocates for one batch, whatever a
// damaged or hostile file declares.
inline constexpr uint64_t kMaxBatchBytes = 1ull << 30;
// kMaxSegmentBytes bounds a segment file's declared size (64 GiB).
inline constexpr uint64_t kMaxSegmentBytes = 64ull << 30;
// kMaxCatalogBytes bounds the catalog a reader loads (a million segments).
inline constexpr uint64_t kMaxCatalogBytes = 64ull << 20;

enum EntryKind : uint16_t {
  kEntryRecord = 0,
  kEntryGap = 1,
};

constexpr uint64_t pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }
// kBlock: where batches start, and the unit of the recorder's direct I/O.
inline constexpr uint64_t kBlock = 4096;
// kWriterLock: DIR/writer.lock, the recorder's exclusive flock (one recorder an archive).
inline constexpr const char* kWriterLock = "writer.lock";
constexpr uint64_t pad_block(uint64_t n) { return (n + kBlock - 1) & ~(kBlock - 1); }

// RingShape is what an archive records about its ring: enough to replay
// into a ring of the same kind and to refuse recording another ring into it.
struct RingShape {
  uint32_t ring_flags = 0;     // ring::RingFlags (blob, sparse)
  uint32_t record_size = 0;    // a fixed ring's slot size; 0 for a blob ring
  uint32_t max_record = 0;     // the largest record: slot size or max blob
  uint64_t schema_signature = 0;
  bool operator==(const RingShape&) const = default;
};

// shape_of: the shape of a ring (what its archive records, and what an
// archive served for it must match).
RingShape shape_of(const ring::RingFile& ring);
// shape_mismatch: "" when an archive of shape `have` holds records of a
// ring of shape `ring`; else what differs, for a message.
std::string shape_mismatch(const RingShape& have, const RingShape& ring);

// SegmentHeader is the first bytes of a segment file (the rest of its
// 4 KiB is zero). 56 bytes on disk.
struct SegmentHeader {
  RingShape shape;
  uint64_t first_seq = 0;
  uint64_t segment_bytes = 0;
  uint64_t max_batch_bytes = 0;
};
inline constexpr size_t kSegmentHeaderEncoded = 64;

// BatchHeader is a batch's first 40 bytes.
struct BatchHeader {
  uint32_t bytes = 0;
  uint64_t first_seq = 0;
  uint64_t end_seq = 0;
  uint32_t entries = 0;
  uint64_t checksum = 0;
};

// EntryHeader is an entry's first 16 bytes.
struct EntryHeader {
  uint64_t seq = 0;
  uint32_t len = 0;
  uint16_t kind = kEntryRecord;
};

// IndexEntry: the batch starting at `offset` of its segment begins at `seq`.
struct IndexEntry {
  uint64_t seq = 0;
  uint64_t offset = 0;
};

// CatalogSegment is one segment as the catalog lists it. A sealed segment's
// end_seq, records and bytes are final; the open (last) one's are what the
// catalog knew when last rewritten (its batches say more).
struct CatalogSegment {
  uint64_t first_seq = 0;
  uint64_t end_seq = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;      // batch bytes written into it
  bool sealed = false;
};

// Catalog is an archive's identity and its segments, oldest first.
struct Catalog {
  RingShape shape;
  uint64_t segment_bytes = 0;
  uint64_t index_interval = 0;
  uint64_t max_batch_bytes = 0;
  uint64_t created_unix_ns = 0;
  std::vector<CatalogSegment> segments;
};

// encode_* write into `out` (exactly the encoded size); decode_* read from
// `in`. decode_segment_header and decode_catalog check the magic, version
// and checksum and return nullopt with `*why` set when they do not hold.
void encode_segment_header(const SegmentHeader& h, uint8_t out[kSegmentHeaderEncoded]);
std::optional<SegmentHeader> decode_segment_header(const uint8_t* in, size_t len, std::string* why);

// encode_batch_header writes the header with checksum field as given;
// batch_checksum computes it over a whole encoded batch (header + entries).
void encode_batch_header(const BatchHeader& h, uint8_t out[kBatchHeaderBytes]);
BatchHeader decode_batch_header(const uint8_t in[kBatchHeaderBytes], uint32_t* magic);
uint64_t batch_checksum(const uint8_t* batch, size_t bytes);

void encode_entry_header(const EntryHeader& e, uint8_t out[kEntryHeaderBytes]);
EntryHeader decode_entry_header(const uint8_t in[kEntryHeaderBytes]);

void encode_index_entry(const IndexEntry& e, uint8_t out[kIndexEntryBytes]);
IndexEntry decode_index_entry(const uint8_t in[kIndexEntryBytes]);

std::string encode_catalog(const Catalog& c);
std::optional<Catalog> decode_catalog(const uint8_t* in, size_t len, std::string* why);
// geometry_holds: the catalog's sizes are ones a recorder writes (segments
// 64 KiB to kMaxSegmentBytes in 4 KiB units, a batch within a segment and
// kMaxBatchBytes, the largest record within a batch, a fixed ring's
// records all its slot size); decode_catalog refuses a catalog without.
bool geometry_holds(const Catalog& c, std::string* why);

// segment_name is "<first_seq, 20 digits>.seg"; index_name the ".idx".
std::string segment_name(uint64_t first_seq);
std::string index_name(uint64_t first_seq);

inline void put_u16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v); p[1] = uint8_t(v >> 8); }
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace ringfire::archive
