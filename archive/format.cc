// format.cc — encoding and decoding of the archive's on-disk structures.
#include "archive/format.h"

#include <xxhash.h>

#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "ring/blob.h"
#include "ring/layout.h"
#include "ring/ring_file.h"

namespace ringfire::archive {
namespace {

// Catalog: a 72-byte head, 40 bytes per segment, then the XXH3-64 of all
// of that.
constexpr size_t kCatalogHeadBytes = 72;
constexpr size_t kCatalogSegmentBytes = 40;

void put_shape(uint8_t* p, const RingShape& s) {
  put_u32(p, s.ring_flags);
  put_u32(p + 4, s.record_size);
  put_u32(p + 8, s.max_record);
  put_u64(p + 12, s.schema_signature);
}
RingShape get_shape(const uint8_t* p) {
  return RingShape{get_u32(p), get_u32(p + 4), get_u32(p + 8), get_u64(p + 12)};
}

}  // namespace

// Segment header: 0 magic, 8 version, 12 shape (20 bytes), 32 first_seq,
// 40 segment_bytes, 48 max_batch_bytes, 56 XXH3-64 of bytes 0..56.
void encode_segment_header(const SegmentHeader& h, uint8_t out[kSegmentHeaderEncoded]) {
  put_u64(out, kSegmentMagic);
  put_u32(out + 8, kFormatVersion);
  put_shape(out + 12, h.shape);
  put_u64(out + 32, h.first_seq);
  put_u64(out + 40, h.segment_bytes);
  put_u64(out + 48, h.max_batch_bytes);
  put_u64(out + 56, XXH3_64bits(out, 56));
}

std::optional<SegmentHeader> decode_segment_header(const uint8_t* in, size_t len, std::string* why) {
  if (len < kSegmentHeaderEncoded) {
    *why = "shorter than a segment header";
    return std::nullopt;
  }
  if (get_u64(in) != kSegmentMagic) {
    *why = "not a ringfire segment (bad magic)";
    return std::nullopt;
  }
  if (get_u32(in + 8) != kFormatVersion) {
    *why = absl::StrCat("segment format version ", get_u32(in + 8), ", this build reads ", kFormatVersion);
    return std::nullopt;
  }
  if (get_u64(in + 56) != XXH3_64bits(in, 56)) {
    *why = "segment header checksum mismatch";
    return std::nullopt;
  }
  SegmentHeader h;
  h.shape = get_shape(in + 12);
  h.first_seq = get_u64(in + 32);
  h.segment_bytes = get_u64(in + 40);
  h.max_batch_bytes = get_u64(in + 48);
  return h;
}

void encode_batch_header(const BatchHeader& h, uint8_t out[kBatchHeaderBytes]) {
  put_u32(out, kBatchMagic);
  put_u32(out + 4, h.bytes);
  put_u64(out + 8, h.first_seq);
  put_u64(out + 16, h.end_seq);
  put_u32(out + 24, h.entries);
  put_u32(out + 28, 0);
  put_u64(out + 32, h.checksum);
}

BatchHeader decode_batch_header(const uint8_t in[kBatchHeaderBytes], uint32_t* magic) {
  *magic = get_u32(in);
  BatchHeader h;
  h.bytes = get_u32(in + 4);
  h.first_seq = get_u64(in + 8);
  h.end_seq = get_u64(in + 16);
  h.entries = get_u32(in + 24);
  h.checksum = get_u64(in + 32);
  return h;
}

uint64_t batch_checksum(const uint8_t* batch, size_t bytes) {
  return XXH3_64bits_withSeed(batch + kBatchHeaderBytes, bytes - kBatchHeaderBytes, XXH3_64bits(batch, 32));
}

void encode_entry_header(const EntryHeader& e, uint8_t out[kEntryHeaderBytes]) {
  put_u64(out, e.seq);
  put_u32(out + 8, e.len);
  put_u16(out + 12, e.kind);
  put_u16(out + 14, 0);
}

EntryHeader decode_entry_header(const uint8_t in[kEntryHeaderBytes]) {
  return EntryHeader{get_u64(in), get_u32(in + 8), get_u16(in + 12)};
}

void encode_index_entry(const IndexEntry& e, uint8_t out[kIndexEntryBytes]) {
  put_u64(out, e.seq);
  put_u64(out + 8, e.offset);
}

IndexEntry decode_index_entry(const uint8_t in[kIndexEntryBytes]) {
  return IndexEntry{get_u64(in), get_u64(in + 8)};
}

// Catalog head: 0 magic, 8 version, 12 shape (20 bytes), 32 segment_bytes,
// 40 index_interval, 48 max_batch_bytes, 56 created_unix_ns, 64 segment
// count, 68 reserved. Per segment: first, end, records, bytes, u32 flags
// (1: sealed), u32 reserved.
std::string encode_catalog(const Catalog& c) {
  std::string out(kCatalogHeadBytes + c.segments.size() * kCatalogSegmentBytes + 8, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  put_u64(p, kCatalogMagic);
  put_u32(p + 8, kFormatVersion);
  put_shape(p + 12, c.shape);
  put_u64(p + 32, c.segment_bytes);
  put_u64(p + 40, c.index_interval);
  put_u64(p + 48, c.max_batch_bytes);
  put_u64(p + 56, c.created_unix_ns);
  put_u32(p + 64, static_cast<uint32_t>(c.segments.size()));
  uint8_t* e = p + kCatalogHeadBytes;
  for (const CatalogSegment& s : c.segments) {
    put_u64(e, s.first_seq);
    put_u64(e + 8, s.end_seq);
    put_u64(e + 16, s.records);
    put_u64(e + 24, s.bytes);
    put_u32(e + 32, s.sealed ? 1u : 0u);
    e += kCatalogSegmentBytes;
  }
  put_u64(e, XXH3_64bits(p, static_cast<size_t>(e - p)));
  return out;
}

std::optional<Catalog> decode_catalog(const uint8_t* in, size_t len, std::string* why) {
  if (len < kCatalogHeadBytes + 8 || len > kMaxCatalogBytes) {
    *why = absl::StrCat("catalog of ", len, " bytes (a catalog has 80 to ", kMaxCatalogBytes, ")");
    return std::nullopt;
  }
  if (get_u64(in) != kCatalogMagic) {
    *why = "not a ringfire archive catalog (bad magic)";
    return std::nullopt;
  }
  if (get_u32(in + 8) != kFormatVersion) {
    *why = absl::StrCat("archive format version ", get_u32(in + 8), ", this build reads ", kFormatVersion);
    return std::nullopt;
  }
  // The count must match the length read, not the other way round: nothing
  // is sized by what the file declares.
  const uint64_t count = get_u32(in + 64);
  if (kCatalogHeadBytes + count * kCatalogSegmentBytes + 8 != len) {
    *why = absl::StrCat("catalog declares ", count, " segments but holds ", len, " bytes");
    return std::nullopt;
  }
  if (get_u64(in + len - 8) != XXH3_64bits(in, len - 8)) {
    *why = "catalog checksum mismatch";
    return std::nullopt;
  }
  Catalog c;
  c.shape = get_shape(in + 12);
  c.segment_bytes = get_u64(in + 32);
  c.index_interval = get_u64(in + 40);
  c.max_batch_bytes = get_u64(in + 48);
  c.created_unix_ns = get_u64(in + 56);
  if (!geometry_holds(c, why)) return std::nullopt;
  c.segments.reserve(count);
  const uint8_t* e = in + kCatalogHeadBytes;
  for (uint64_t i = 0; i < count; ++i, e += kCatalogSegmentBytes) {
    c.segments.push_back(CatalogSegment{get_u64(e), get_u64(e + 8), get_u64(e + 16),
                                        get_u64(e + 24), (get_u32(e + 32) & 1u) != 0});
    const CatalogSegment& s = c.segments.back();
    if (s.end_seq < s.first_seq || s.bytes > c.segment_bytes) {
      *why = absl::StrCat("catalog segment ", i, " covers [", s.first_seq, ", ", s.end_seq, ") in ", s.bytes,
                          " bytes of a ", c.segment_bytes, "-byte segment");
      return std::nullopt;
    }
    // As a recorder writes it: segments in sequence order, apart, every one
    // sealed but the last (a roll seals one and lists the next in one store).
    if (i != 0) {
      const CatalogSegment& prev = c.segments[i - 1];
      if (!prev.sealed) {
        *why = absl::StrCat("catalog segment ", i - 1, " is open, but not the last");
        return std::nullopt;
      }
      if (s.first_seq < prev.end_seq) {
        *why = absl::StrCat("catalog segment ", i, " starts at ", s.first_seq, ", before segment ", i - 1,
                            " ends (", prev.end_seq, ")");
        return std::nullopt;
      }
    }
  }
  return c;
}

RingShape shape_of(const ring::RingFile& ring) {
  const ring::RingHeader& h = ring.header();
  RingShape shape;
  shape.ring_flags = h.flags & (ring::kFlagBlob | ring::kFlagSparse);
  shape.record_size = ring.blob() ? 0 : ring.slot_size();
  shape.max_record = ring.blob() ? ring::max_blob_bytes(h.arena_size) : ring.slot_size();
  shape.schema_signature = h.schema_signature;
  return shape;
}

std::string shape_mismatch(const RingShape& have, const RingShape& ring) {
  std::string why;
  if (have.ring_flags != ring.ring_flags) absl::StrAppend(&why, " ring flags ", have.ring_flags, " vs ", ring.ring_flags, ";");
  if (have.record_size != ring.record_size) absl::StrAppend(&why, " record size ", have.record_size, " vs ", ring.record_size, ";");
  if (have.max_record != ring.max_record) absl::StrAppend(&why, " largest record ", have.max_record, " vs ", ring.max_record, ";");
  if (have.schema_signature != ring.schema_signature) absl::StrAppend(&why, " schema ", have.schema_signature, " vs ", ring.schema_signature, ";");
  return why;
}

bool geometry_holds(const Catalog& c, std::string* why) {
  const RingShape& r = c.shape;
  const bool blob = (r.ring_flags & ring::kFlagBlob) != 0;
  // What a recorder writes (SegmentWriter::open, Recorder::open): anything
  // else is a damaged or forged catalog, refused before a reader sizes a
  // read, a buffer or a copy by it.
  if (c.segment_bytes < (1u << 16) || c.segment_bytes % kBlock != 0 || c.segment_bytes > kMaxSegmentBytes) {
    *why = absl::StrCat("catalog declares segments of ", c.segment_bytes, " bytes");
    return false;
  }
  if (c.max_batch_bytes < kBatchHeaderBytes || c.max_batch_bytes > kMaxBatchBytes ||
      pad_block(c.max_batch_bytes) + kSegmentHeaderBytes > c.segment_bytes) {
    *why = absl::StrCat("catalog declares batches of ", c.max_batch_bytes, " bytes in segments of ", c.segment_bytes);
    return false;
  }
  if (c.index_interval < kBlock || c.index_interval > kMaxSegmentBytes) {  // past a segment: one entry
    *why = absl::StrCat("catalog declares an index entry per ", c.index_interval, " bytes");
    return false;
  }
  if (r.max_record == 0 || kBatchHeaderBytes + kEntryHeaderBytes + pad8(r.max_record) > c.max_batch_bytes ||
      (blob ? r.record_size != 0 : r.record_size != r.max_record)) {
    *why = absl::StrCat("catalog declares records of ", r.record_size, " bytes, at most ", r.max_record,
                        ", in batches of ", c.max_batch_bytes, blob ? " (a blob ring)" : " (a fixed ring)");
    return false;
  }
  return true;
}

std::string segment_name(uint64_t first_seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRIu64 ".seg", first_seq);
  return buf;
}

std::string index_name(uint64_t first_seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRIu64 ".idx", first_seq);
  return buf;
}

}  // namespace ringfire::archive
