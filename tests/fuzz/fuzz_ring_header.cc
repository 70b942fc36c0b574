// fuzz_ring_header.cc — libFuzzer target for ring header validation: a ring
// file is untrusted input too (corrupted, truncated, or crafted). Oracle: no
// sanitizer report, and a header that validates describes regions that fit
// in the file it claims.
#include <cstring>

#include "ring/ring_file.h"
#include "tests/fuzz/require.h"

using namespace ringfire::ring;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RingHeader h;
  const size_t n = size < kChecksummedBytes + 8 ? size : kChecksummedBytes + 8;
  std::memcpy(static_cast<void*>(&h), data, n);
  // Half the inputs get a correct checksum, so the geometry checks are reached.
  if (size > 0 && (data[0] & 1)) h.header_checksum = header_checksum(h);
  const uint64_t file_size = size > n + 8 ? (uint64_t{data[n]} << 24 | uint64_t{data[n + 1]} << 32) : h.file_size;
  if (!validate_header(h, file_size).ok()) return 0;
  REQUIRE((h.capacity & (h.capacity - 1)) == 0);
  REQUIRE(h.slots_offset + h.capacity * h.slot_stride <= h.file_size);
  REQUIRE(h.arena_offset + h.arena_size <= h.file_size);
  REQUIRE(h.registry_offset + uint64_t{h.registry_size} * sizeof(ReaderEntry) <= h.slots_offset);
  REQUIRE(file_size >= h.file_size);
  (void)check_expectation(h, RingExpectation{64, 1, false});
  return 0;
}
