// layout.h — the byte layout of a ringfire ring file, shared by every process
// that maps it: header page, reader registry, slots, optional blob arena.
//
//   0      header page (4 KiB): immutable geometry + checksum, then the
//          writer-owned counters, each on its own cache line, then the
//          readers' wake-up words
//   4 KiB  reader registry: registry_size entries of 64 bytes
//   slots_offset   capacity slots of slot_stride bytes: u64 word, payload
//   arena_offset   blob arena of arena_size bytes (blob rings only)
//
// Every offset is a multiple of 4 KiB. Any change to this file bumps kVersion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ringfire::ring {

// kMagic is "RFRING01" read as a little-endian u64.
inline constexpr uint64_t kMagic = 0x3130474E49524652ull;
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kPage = 4096;
inline constexpr size_t kHeaderBytes = kPage;
inline constexpr size_t kSlotWordBytes = 8;

// RingFlags are stored in RingHeader::flags.
enum RingFlags : uint32_t {
  kFlagBlob = 1u << 0,    // slots hold BlobDescriptors into the arena
  kFlagSparse = 1u << 1,  // sequences may have holes (mirror rings)
  // kFlagLazy: the file's pages are taken as they are first written,
  // neither preallocated nor prefaulted by its creator or any opener (a
  // stream mux channel's rings: their set-up is on a first token's path,
  // and a 12 MiB ring costs ~5 ms to allocate and map whole). Local to
  // the file: never sent in a GEOMETRY.
  kFlagLazy = 1u << 2,
};
inline constexpr uint32_t kKnownFlags = kFlagBlob | kFlagSparse | kFlagLazy;

// RingHeader is the first page of every ring file. The fields up to
// header_checksum never change after creation and are covered by the checksum;
// the counters below are written by the single writer only.
struct RingHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t flags;
  uint64_t capacity;        // slots; a power of two
  uint32_t slot_size;       // payload bytes per slot
  uint32_t slot_stride;     // bytes per slot, word included; multiple of 64
  uint64_t schema_signature;
  uint32_t registry_size;   // reader registry entries
  uint32_t reserved0;
  uint64_t registry_offset;
  uint64_t slots_offset;
  uint64_t arena_offset;
  uint64_t arena_size;      // bytes; a power of two, 0 unless kFlagBlob
  uint64_t file_size;
  uint64_t header_checksum;  // xxh64 of every byte before this field

  // write_seq is one past the highest sequence published (0: none yet).
  // Stored with release after the slot is committed; see Producer.
  alignas(kCacheLine) std::atomic<uint64_t> write_seq;
  // arena_reserved is the blob arena's monotonically increasing reservation
  // counter in bytes; see BlobProducer::reserve.
  alignas(kCacheLine) std::atomic<uint64_t> arena_reserved;
  // writer_pid is the pid of the process holding the writer lock, for `stat`.
  alignas(kCacheLine) std::atomic<uint64_t> writer_pid;
  // hole_begin/hole_end (sparse rings) bound the latest hole the writer
  // left, [begin, end): a reader catching up across it counts those
  // sequences as holes, not lost records. See SequenceWriter::begin.
  alignas(kCacheLine) std::atomic<uint64_t> hole_begin;
  std::atomic<uint64_t> hole_end;
  // sleepers is set (1) by a reader about to park in wait_for_write and
  // cleared by the writer, which then bumps wake_word and wakes every
  // parked reader (a futex on wake_word). The writer reads sleepers after a
  // seq_cst fence once per publish, or once per run of them
  // (SequenceWriter::wake_parked), pairing with the parking reader's
  // seq_cst store of it (wait_for_write). A file from before these words
  // (zero) costs one timeout.
  // Added within version 1: zero in older files, which means "nobody parked".
  alignas(kCacheLine) std::atomic<uint32_t> sleepers;
  std::atomic<uint32_t> wake_word;
};
inline constexpr size_t kChecksummedBytes = offsetof(RingHeader, header_checksum);
static_assert(kChecksummedBytes == 88);
static_assert(offsetof(RingHeader, write_seq) == 128);
static_assert(offsetof(RingHeader, arena_reserved) == 192);
static_assert(offsetof(RingHeader, hole_begin) == 320);
static_assert(offsetof(RingHeader, sleepers) == 384);
static_assert(sizeof(RingHeader) <= kHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "ring counters are shared across processes and must be lock-free");

// SlotWord is the first 8 bytes of every slot; the payload follows it.
// Encoding: 0 = never written; ((seq + 1) << 1) = seq committed;
// ((seq + 1) << 1) | 1 = seq being written. See slot.h.
struct SlotWord {
  std::atomic<uint64_t> word;
};
static_assert(sizeof(SlotWord) == kSlotWordBytes);

// BlobDescriptor is the slot payload of a blob ring: where the blob's bytes
// start in the arena's reservation space, and how many there are.
struct BlobDescriptor {
  uint64_t arena_pos;
  uint32_t length;
  uint32_t reserved;
};
static_assert(sizeof(BlobDescriptor) == 16);

// ReaderEntry is one reader registry entry, published by a reader so tools
// can show its lag. owner is the reader's pid, 0 when free.
struct alignas(kCacheLine) ReaderEntry {
  std::atomic<uint64_t> owner;
  std::atomic<uint64_t> cursor;      // next sequence the reader will read
  std::atomic<uint64_t> lost;        // records lost to lapping so far
  std::atomic<uint64_t> updated_ns;  // CLOCK_MONOTONIC of the last update
  char name[32];
};
static_assert(sizeof(ReaderEntry) == 64);

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
constexpr bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// slot_stride_for returns the bytes one slot occupies for a payload size.
constexpr uint32_t slot_stride_for(uint32_t slot_size) {
  return static_cast<uint32_t>(align_up(kSlotWordBytes + slot_size, kCacheLine));
}

}  // namespace ringfire::ring
