// format_test.cc — the archive's on-disk structures byte for byte, and
// decoders that refuse what does not check out without sizing anything by
// what a file declares.
#include "archive/format.h"

#include <stdio.h>
#include <unistd.h>

#include <vector>

#include "archive/batch_builder.h"
#include "archive/batch_io.h"
#include "gtest/gtest.h"
#include "ring/slot.h"

namespace ringfire::archive {
namespace {

TEST(ArchiveFormat, ABatchHeaderIsLittleEndianFieldsInOrder) {
  uint8_t out[kBatchHeaderBytes];
  encode_batch_header(BatchHeader{0x48, 0x0102030405060708ull, 0x1112131415161718ull, 3, 0xA1A2A3A4A5A6A7A8ull},
                      out);
  const std::vector<uint8_t> want = {
      'R', 'F', 'B', '1', 0x48, 0, 0, 0,                   // magic, bytes
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,      // first_seq
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,      // end_seq
      3, 0, 0, 0, 0, 0, 0, 0,                              // entries, flags
      0xA8, 0xA7, 0xA6, 0xA5, 0xA4, 0xA3, 0xA2, 0xA1};     // checksum
  EXPECT_EQ(std::vector<uint8_t>(out, out + kBatchHeaderBytes), want);
  uint32_t magic = 0;
  const BatchHeader back = decode_batch_header(out, &magic);
  EXPECT_EQ(magic, kBatchMagic);
  EXPECT_EQ(back.first_seq, 0x0102030405060708ull);
  EXPECT_EQ(back.end_seq, 0x1112131415161718ull);
  EXPECT_EQ(back.entries, 3u);
}

TEST(ArchiveFormat, AnEntryHeaderIsSeqLenKind) {
  uint8_t out[kEntryHeaderBytes];
  encode_entry_header(EntryHeader{0x0A0B, 0x40, kEntryGap}, out);
  const std::vector<uint8_t> want = {0x0B, 0x0A, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 1, 0, 0, 0};
  EXPECT_EQ(std::vector<uint8_t>(out, out + kEntryHeaderBytes), want);
}

TEST(ArchiveFormat, SegmentNamesSortByFirstSequence) {
  EXPECT_EQ(segment_name(42), "00000000000000000042.seg");
  EXPECT_EQ(index_name(18446744073709551615ull), "18446744073709551615.idx");
  EXPECT_LT(segment_name(999), segment_name(1000));
}

Catalog sample_catalog() {
  Catalog c;
  c.shape = RingShape{1, 0, 4096, 0xFEED};
  c.segment_bytes = 1 << 20;
  c.index_interval = 1 << 16;
  c.max_batch_bytes = 1 << 18;
  c.created_unix_ns = 123;
  c.segments = {{0, 100, 100, 9000, true}, {100, 250, 150, 12000, false}};
  return c;
}

TEST(ArchiveFormat, ACatalogRoundTrips) {
  const std::string bytes = encode_catalog(sample_catalog());
  EXPECT_EQ(bytes.size(), 72u + 2 * 40u + 8u);
  std::string why;
  auto c = decode_catalog(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->shape, sample_catalog().shape);
  ASSERT_EQ(c->segments.size(), 2u);
  EXPECT_EQ(c->segments[1].first_seq, 100u);
  EXPECT_EQ(c->segments[1].end_seq, 250u);
  EXPECT_TRUE(c->segments[0].sealed);
  EXPECT_FALSE(c->segments[1].sealed);
}

TEST(ArchiveFormat, ACatalogWithAFlippedByteIsRefused) {
  std::string bytes = encode_catalog(sample_catalog());
  bytes[90] ^= 0x10;
  std::string why;
  EXPECT_FALSE(decode_catalog(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &why));
  EXPECT_EQ(why, "catalog checksum mismatch");
}

TEST(ArchiveFormat, ACatalogDeclaringMoreSegmentsThanItHoldsIsRefusedBeforeAnyAllocation) {
  std::string bytes = encode_catalog(sample_catalog());
  put_u32(reinterpret_cast<uint8_t*>(bytes.data()) + 64, 0xFFFFFFFFu);
  std::string why;
  EXPECT_FALSE(decode_catalog(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &why));
  EXPECT_NE(why.find("declares 4294967295 segments"), std::string::npos) << why;
}

TEST(ArchiveFormat, ASegmentHeaderFromAnotherVersionSaysWhichVersion) {
  uint8_t out[kSegmentHeaderEncoded];
  encode_segment_header(SegmentHeader{RingShape{0, 64, 64, 0}, 7, 1 << 20, 1 << 18}, out);
  std::string why;
  auto h = decode_segment_header(out, sizeof(out), &why);
  ASSERT_TRUE(h) << why;
  EXPECT_EQ(h->first_seq, 7u);
  put_u32(out + 8, 9);
  EXPECT_FALSE(decode_segment_header(out, sizeof(out), &why));
  EXPECT_EQ(why, "segment format version 9, this build reads 1");
}

// No ring holds a sequence at or past 2^62 (ring::kMaxSeq): a batch that
// reaches past it is damage, however well it checks out otherwise.
TEST(ArchiveFormat, ABatchPastTheSequenceBoundIsDamage) {
  auto sealed = [](uint64_t first, uint64_t end) {
    BatchBuilder b(4096, 64);
    b.start(first);
    std::memset(b.record_slot(8), 1, 8);
    b.commit_record(end - 1, 8);
    auto span = b.seal(end);
    return std::vector<uint8_t>(span.begin(), span.end());
  };
  FILE* f = tmpfile();
  ASSERT_NE(f, nullptr);
  const int fd = fileno(f);
  const std::vector<uint8_t> last = sealed(ring::kMaxSeq - 2, ring::kMaxSeq);
  const std::vector<uint8_t> past = sealed(ring::kMaxSeq - 2, ring::kMaxSeq + 1);
  ASSERT_EQ(pwrite(fd, last.data(), last.size(), 0), static_cast<ssize_t>(last.size()));
  ASSERT_EQ(pwrite(fd, past.data(), past.size(), static_cast<off_t>(last.size())), static_cast<ssize_t>(past.size()));
  const SegmentLimits limits{1 << 20, 4096, 64, 0};
  std::vector<uint8_t> buf;
  BatchHeader h;
  std::string why;
  EXPECT_EQ(read_batch(fd, 0, limits, &buf, &h, &why), BatchRead::kOk) << why;
  EXPECT_EQ(h.end_seq, ring::kMaxSeq);
  EXPECT_EQ(read_batch(fd, last.size(), limits, &buf, &h, &why), BatchRead::kDamaged);
  EXPECT_NE(why.find("batch covers"), std::string::npos) << why;
  fclose(f);
}

// A header declaring more than the file holds is damage found before
// anything is made for it: a forged 1 GiB batch in a short file made every
// reader allocate and zero 1 GiB (review helper-36).
TEST(ArchiveFormat, ABatchDeclaringMoreThanTheFileHoldsIsDamageBeforeAnyAllocation) {
  BatchBuilder b(4096, 64);
  b.start(10);
  std::memset(b.record_slot(8), 1, 8);
  b.commit_record(10, 8);
  auto span = b.seal(11);
  std::vector<uint8_t> batch(span.begin(), span.end());
  uint32_t magic = 0;
  BatchHeader forged = decode_batch_header(batch.data(), &magic);
  forged.bytes = 1u << 30;  // within a forged geometry's cap, far past the file
  encode_batch_header(forged, batch.data());
  FILE* f = tmpfile();
  ASSERT_NE(f, nullptr);
  const int fd = fileno(f);
  ASSERT_EQ(pwrite(fd, batch.data(), batch.size(), 0), static_cast<ssize_t>(batch.size()));
  const SegmentLimits limits{64ull << 30, 1u << 30, 64, 0};
  std::vector<uint8_t> buf;
  BatchHeader h;
  std::string why;
  EXPECT_EQ(read_batch(fd, 0, limits, &buf, &h, &why), BatchRead::kDamaged);
  EXPECT_EQ(why, "the file ends inside a batch (truncated)");
  EXPECT_LT(buf.capacity(), 1u << 20);
  fclose(f);
}

// A built batch passes check_entries; entries out of order, running past
// the batch, or of an unknown kind do not.
TEST(ArchiveFormat, CheckEntriesRefusesWhatABuilderNeverWrites) {
  BatchBuilder b(4096, 64);
  b.start(10);
  for (uint64_t seq : {10u, 11u, 13u}) {
    std::memset(b.record_slot(20), static_cast<int>(seq), 20);
    b.commit_record(seq, 20);
  }
  b.add_gap(14, 20, 6);
  auto span = b.seal(20);
  EXPECT_EQ(span.size(), kBlock) << "sealed batches are whole blocks";
  uint32_t magic = 0;
  BatchHeader h = decode_batch_header(span.data(), &magic);
  std::vector<uint8_t> batch(span.begin(), span.begin() + h.bytes);
  std::string why;
  ASSERT_TRUE(check_entries(batch.data(), h, SegmentLimits{1 << 20, 4096, 64, 0}, &why)) << why;
  EXPECT_EQ(batch_checksum(batch.data(), batch.size()), h.checksum);

  std::vector<uint8_t> bad = batch;
  put_u64(bad.data() + kBatchHeaderBytes + 40, 9);  // the second record's seq: before the first
  EXPECT_FALSE(check_entries(bad.data(), h, SegmentLimits{1 << 20, 4096, 64, 0}, &why));
  bad = batch;
  put_u32(bad.data() + kBatchHeaderBytes + 8, 1u << 20);  // the first record's length
  EXPECT_FALSE(check_entries(bad.data(), h, SegmentLimits{1 << 22, 1 << 21, 1u << 21, 0}, &why));
  EXPECT_NE(why.find("runs past the batch"), std::string::npos) << why;
  bad = batch;
  put_u16(bad.data() + kBatchHeaderBytes + 12, 7);
  EXPECT_FALSE(check_entries(bad.data(), h, SegmentLimits{1 << 20, 4096, 64, 0}, &why));
  EXPECT_FALSE(check_entries(batch.data(), h, SegmentLimits{1 << 20, 4096, 16, 0}, &why)) << "records over the ring's largest";
  // A fixed ring's records are all its slot size: a 20-byte record in a
  // ring of 64-byte records would be copied into a 64-byte slot from 20.
  EXPECT_FALSE(check_entries(batch.data(), h, SegmentLimits{1 << 20, 4096, 64, 64}, &why));
  EXPECT_NE(why.find("of 20 bytes in a ring of 64-byte records"), std::string::npos) << why;
  EXPECT_TRUE(check_entries(batch.data(), h, SegmentLimits{1 << 20, 4096, 20, 20}, &why)) << why;
}

// A catalog whose geometry no recorder writes is refused at decode, before
// a reader sizes a read, a buffer or a copy by it (checksum recomputed: a
// forger's catalog, not a flipped bit).
TEST(ArchiveFormat, ACatalogDeclaringAGeometryNoRecorderWritesIsRefused) {
  struct Case {
    const char* what;
    void (*change)(Catalog*);
    const char* says;
  } cases[] = {
      {"segments of 1 TiB", [](Catalog* c) { c->segment_bytes = 1ull << 40; }, "segments of"},
      {"segments not in 4 KiB", [](Catalog* c) { c->segment_bytes = (1 << 20) + 1; }, "segments of"},
      {"batches of 4 GiB", [](Catalog* c) { c->max_batch_bytes = 4ull << 30; }, "batches of"},
      {"a batch past its segment", [](Catalog* c) { c->max_batch_bytes = c->segment_bytes; }, "batches of"},
      {"records past a batch", [](Catalog* c) { c->shape.max_record = c->shape.record_size = 1 << 30; }, "records of"},
      {"a blob ring with a record size", [](Catalog* c) { c->shape.record_size = 8; }, "records of"},
      {"an index entry per byte", [](Catalog* c) { c->index_interval = 1; }, "index entry per"},
      {"an index entry per 1 TiB", [](Catalog* c) { c->index_interval = 1ull << 40; }, "index entry per"},
      {"a segment over its size", [](Catalog* c) { c->segments[0].bytes = c->segment_bytes + 1; }, "catalog segment 0"},
      {"a segment ending before it starts", [](Catalog* c) { c->segments[1].end_seq = 1; }, "catalog segment 1"},
      // A reader takes an open segment for the archive's end: one in the
      // middle would hide every later one (review: helper-29).
      {"an open segment before the last", [](Catalog* c) { c->segments[0].sealed = false; }, "is open, but not the last"},
      {"segments overlapping", [](Catalog* c) { c->segments[1].first_seq = 99; }, "before segment 0 ends"},
  };
  std::string why;
  const Catalog good = sample_catalog();
  ASSERT_TRUE(geometry_holds(good, &why)) << why;
  Catalog small = good;  // `record --segment-size 512Ki` with the default 1 MiB index interval
  small.segment_bytes = 512u << 10;
  small.index_interval = 1u << 20;
  EXPECT_TRUE(geometry_holds(small, &why)) << why;
  for (const Case& k : cases) {
    Catalog c = good;
    k.change(&c);
    const std::string bytes = encode_catalog(c);
    why.clear();
    EXPECT_FALSE(decode_catalog(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &why)) << k.what;
    EXPECT_NE(why.find(k.says), std::string::npos) << k.what << ": " << why;
  }
}

}  // namespace
}  // namespace ringfire::archive
