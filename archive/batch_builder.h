// batch_builder.h — assembling one batch in memory (the recorder's hot
// path; header-only). Records are copied straight from the ring into the
// batch; the header and checksum are written when it is sealed. A batch
// is full at its target size; the buffer is larger only so that a record
// longer than the target fits alone (its pages are touched only then).
// One thread.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>

#include "archive/format.h"

namespace ringfire::archive {

class BatchBuilder {
 public:
  // target: the size a batch is full at; the buffer holds at least one
  // record of max_record bytes (with a gap before it).
  BatchBuilder(uint64_t target, uint32_t max_record)
      : target_(pad8(target)),
        capacity_(capacity_for(target, max_record)),
        buf_(map_buffer(pad_block(capacity_)), Unmap{pad_block(capacity_)}) {}

  // capacity_for: the buffer a builder of this target gets: the largest
  // batch it can seal.
  static uint64_t capacity_for(uint64_t capacity, uint32_t max_record) {
    return pad8(std::max<uint64_t>(capacity, kBatchHeaderBytes + kReserve + kEntryHeaderBytes + pad8(max_record)));
  }

  bool empty() const { return entries_ == 0; }
  // room: the longest record that still fits (with a gap in front of it):
  // up to the target, or the whole buffer for a batch's first record.
  uint64_t room() const {
    const uint64_t limit = entries_ == 0 ? capacity_ : target_;
    const uint64_t need = used_ + kEntryHeaderBytes + kReserve;
    return need >= limit ? 0 : (limit - need) & ~uint64_t{7};
  }
  uint64_t bytes() const { return used_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t first_seq() const { return first_seq_; }
  uint64_t records() const { return records_; }

  // start opens a batch whose first covered sequence is `seq`.
  void start(uint64_t seq) {
    first_seq_ = seq;
    used_ = kBatchHeaderBytes;
    entries_ = 0;
    records_ = 0;
  }

  // record_slot returns where a record of `len` bytes would go, or nullptr
  // when the batch has no room for it (and for a gap in front of it).
  uint8_t* record_slot(uint32_t len) {
    if (used_ + kEntryHeaderBytes + pad8(len) + kReserve > (entries_ == 0 ? capacity_ : target_)) return nullptr;
    return buf_.get() + used_ + kEntryHeaderBytes;
  }
  // commit_record keeps the record record_slot(len) pointed at.
  void commit_record(uint64_t seq, uint32_t len) {
    uint8_t* e = buf_.get() + used_;
    encode_entry_header(EntryHeader{seq, len, kEntryRecord}, e);
    const uint64_t padded = pad8(len);
    if (padded != len) std::memset(e + kEntryHeaderBytes + len, 0, padded - len);
    used_ += kEntryHeaderBytes + padded;
    ++entries_;
    ++records_;
  }
  // commit_record_after_gap keeps the record record_slot(len) pointed at,
  // with a gap entry [gap_seq, gap_end) of `lost` records in front of it.
  void commit_record_after_gap(uint64_t gap_seq, uint64_t gap_end, uint64_t lost, uint64_t seq,
                               uint32_t len) {
    uint8_t* e = buf_.get() + used_;
    std::memmove(e + kReserve + kEntryHeaderBytes, e + kEntryHeaderBytes, len);
    add_gap(gap_seq, gap_end, lost);
    commit_record(seq, len);
  }
  // add_gap records that [seq, end) was lost, `lost` records among it.
  void add_gap(uint64_t seq, uint64_t end, uint64_t lost) {
    uint8_t* e = buf_.get() + used_;
    encode_entry_header(EntryHeader{seq, kGapPayloadBytes, kEntryGap}, e);
    put_u64(e + kEntryHeaderBytes, end);
    put_u64(e + kEntryHeaderBytes + 8, lost);
    used_ += kReserve;
    ++entries_;
  }

  // seal writes the header for a batch covering [first_seq(), end_seq) and
  // returns its bytes padded with zeroes to a whole number of 4 KiB blocks
  // (valid until the next start), block-aligned in memory for direct I/O.
  std::span<const uint8_t> seal(uint64_t end_seq) {
    BatchHeader h;
    h.bytes = static_cast<uint32_t>(used_);
    h.first_seq = first_seq_;
    h.end_seq = end_seq;
    h.entries = entries_;
    encode_batch_header(h, buf_.get());
    h.checksum = batch_checksum(buf_.get(), used_);
    put_u64(buf_.get() + 32, h.checksum);
    const uint64_t padded = pad_block(used_);
    std::memset(buf_.get() + used_, 0, padded - used_);
    return {buf_.get(), padded};
  }

 private:
  static constexpr uint64_t kReserve = kEntryHeaderBytes + kGapPayloadBytes;  // one gap entry
  // The buffer is its own mapping (page-aligned, as O_DIRECT needs), so
  // that a builder the sink lets go gives its memory back to the system
  // (a heap's large chunks stay with the process).
  struct Unmap {
    size_t bytes;
    void operator()(uint8_t* p) const { munmap(p, bytes); }
  };
  static uint8_t* map_buffer(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<uint8_t*>(p);
  }
  uint64_t target_;
  uint64_t capacity_;
  std::unique_ptr<uint8_t, Unmap> buf_;
  uint64_t first_seq_ = 0;
  uint64_t used_ = kBatchHeaderBytes;
  uint32_t entries_ = 0;
  uint64_t records_ = 0;
};

}  // namespace ringfire::archive
