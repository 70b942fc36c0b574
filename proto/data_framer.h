// data_framer.h — packs ring records into one DATA frame at a time, in place
// in a caller-owned buffer (an mbuf's data room or a sendmmsg iovec): fixed
// records back to back, blob records length-prefixed. A frame holds
// consecutive sequences only and never exceeds the payload limit. Its
// owner's thread only (a serve's worker, a serve control's TCP answers); no
// allocation.
#pragma once

#include <cstdint>
#include <cstring>

#include "proto/frame.h"

namespace ringfire::proto {

class DataFramer {
 public:
  // slot_size > 0 for fixed-slot rings, 0 for blob rings.
  DataFramer(uint32_t slot_size, uint8_t session) : slot_size_(slot_size), session_(session) {}

  // begin starts a frame in `buf` (at most `limit` bytes, header included).
  void begin(std::byte* buf, size_t limit) {
    buf_ = buf;
    limit_ = limit;
    used_ = proto::kFrameHeaderBytes;
    count_ = 0;
  }

  bool empty() const { return count_ == 0; }
  std::byte* buffer() const { return buf_; }
  uint16_t count() const { return count_; }
  uint64_t first_seq() const { return first_seq_; }
  uint64_t end_seq() const { return first_seq_ + count_; }

  // room_records: how many more fixed-size records the open frame takes
  // (0 for blob records, whose sizes vary).
  size_t room_records() const { return slot_size_ == 0 ? 0 : (limit_ - used_) / slot_size_; }

  // fits says whether a record of `len` bytes would fit in the open frame.
  bool fits(size_t len) const {
    const size_t need = slot_size_ ? slot_size_ : proto::kBlobRecordHeader + len;
    return count_ < UINT16_MAX && used_ + need <= limit_;
  }

  // add appends record `seq`; false if it does not fit or does not follow
  // the previous record (a hole in a sparse source ring ends the frame).
  bool add(uint64_t seq, const std::byte* record, size_t len) {
    if (!fits(len) || (count_ != 0 && seq != end_seq())) return false;
    if (slot_size_ != 0 && len != slot_size_) return false;
    if (count_ == 0) first_seq_ = seq;
    if (slot_size_ == 0) {
      proto::store_le32(buf_ + used_, static_cast<uint32_t>(len));
      used_ += proto::kBlobRecordHeader;
    }
    if (len != 0) std::memcpy(buf_ + used_, record, len);
    used_ += len;
    ++count_;
    return true;
  }

  // next_slot: where the next fixed-size record goes in the open frame (a
  // reader copies it there straight from the ring: no staging copy), or
  // nullptr when it would not fit (or the ring's records vary in size).
  std::byte* next_slot() { return slot_size_ != 0 && fits(slot_size_) ? buf_ + used_ : nullptr; }
  // placed appends record `seq`, already copied into next_slot(); false
  // (nothing appended) if it does not follow the previous record.
  bool placed(uint64_t seq) {
    if (count_ != 0 && seq != end_seq()) return false;
    if (count_ == 0) first_seq_ = seq;
    used_ += slot_size_;
    ++count_;
    return true;
  }

  // finish writes the header and returns the frame size (0 if empty).
  size_t finish() {
    if (count_ == 0) return 0;
    proto::encode_data_header(buf_, first_seq_, count_,
                              static_cast<uint32_t>(used_ - proto::kFrameHeaderBytes), session_);
    return used_;
  }

 private:
  uint32_t slot_size_;
  uint8_t session_;
  std::byte* buf_ = nullptr;
  size_t limit_ = 0;
  size_t used_ = 0;
  uint16_t count_ = 0;
  uint64_t first_seq_ = 0;
};

}  // namespace ringfire::proto
