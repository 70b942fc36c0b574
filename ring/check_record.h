// check_record.h — a self-checking record format used by `ringfire publish`
// and `tail`, the tests and the perf harnesses: any reader, local or on a
// mirror, can verify that a record is whole and sits under the sequence it
// was published with.
//
//   0   u64 seq           the ring sequence it was published under
//   8   u64 stamp_ns      CLOCK_MONOTONIC at publish (latency measurements)
//   16  u64 checksum      xxh64 of bytes 24.., seeded with xxh64 of bytes 0..16
//   24  filler            bytes derived from seq
//
// Little-endian, like the ring-mirroring wire. Minimum size 24 bytes.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <span>

namespace ringfire::ring {

inline constexpr size_t kCheckRecordMin = 24;

// CheckVerdict is what check_record finds.
enum class CheckVerdict : uint8_t {
  kOk,
  kTooShort,     // fewer than 24 bytes
  kBadChecksum,  // torn or corrupted
  kWrongSeq,     // whole, but published under another sequence
};

// record_checksum hashes bytes 24.. seeded with the hash of bytes 0..16.
inline uint64_t record_checksum(const std::byte* rec, size_t len) {
  return XXH64(rec + 24, len - 24, XXH64(rec, 16, 0));
}

// fill_record makes `rec` a complete record; spans shorter than 24 bytes
// (an empty reservation included) are left alone.
inline void fill_record(std::span<std::byte> out, uint64_t seq, uint64_t stamp_ns) {
  if (out.size() < kCheckRecordMin) return;
  std::byte* rec = out.data();
  const size_t len = out.size();
  std::memcpy(rec, &seq, 8);
  std::memcpy(rec + 8, &stamp_ns, 8);
  uint64_t x = seq * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 24; i < len; ++i) {
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    rec[i] = std::byte(static_cast<uint8_t>(x >> 56));
  }
  const uint64_t sum = record_checksum(rec, len);
  std::memcpy(rec + 16, &sum, 8);
}

// check_record verifies a record that should carry sequence `seq`.
inline CheckVerdict check_record(const std::byte* rec, size_t len, uint64_t seq) {
  if (len < kCheckRecordMin) return CheckVerdict::kTooShort;
  uint64_t sum;
  std::memcpy(&sum, rec + 16, 8);
  if (sum != record_checksum(rec, len)) return CheckVerdict::kBadChecksum;
  uint64_t got;
  std::memcpy(&got, rec, 8);
  return got == seq ? CheckVerdict::kOk : CheckVerdict::kWrongSeq;
}

inline uint64_t record_stamp(const std::byte* rec) {
  uint64_t t;
  std::memcpy(&t, rec + 8, 8);
  return t;
}

// blob_length_for gives `publish --blob` records a deterministic length in
// [min, max] so readers exercise every size.
inline uint32_t blob_length_for(uint64_t seq, uint32_t min, uint32_t max) {
  if (max <= min) return min;
  const uint64_t h = (seq + 0x632BE59BD9B4E019ull) * 0x9E3779B97F4A7C15ull;
  return min + static_cast<uint32_t>((h >> 32) % (max - min + 1));
}

}  // namespace ringfire::ring
