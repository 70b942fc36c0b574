// stream_batch.cc — `_stream_batch` encode/decode (big-endian throughout).
#include "proto/stream_batch.h"

#include <cstring>

namespace ringfire::proto {

BatchWriter::BatchWriter(MutableBytes out, uint64_t peer_epoch, uint32_t batch_seq, uint8_t flags)
    : out_(out) {
  if (out.size() < kBatchHeaderBytes) {
    ok_ = false;
    return;
  }
  std::byte* p = out.data();
  p[0] = std::byte(kMuxVersion);
  p[1] = std::byte(flags);
  store_be16(p + 2, 0);
  store_be64(p + 4, peer_epoch);
  store_be32(p + 12, batch_seq);
  size_ = kBatchHeaderBytes;
}

std::byte* BatchWriter::reserve(RecordType type, uint32_t slot, uint32_t frame_seq, uint32_t len) {
  if (!ok_ || count_ == UINT16_MAX || out_.size() - size_ < kRecordHeaderBytes + size_t{len}) {
    return nullptr;
  }
  std::byte* p = out_.data() + size_;
  p[0] = std::byte(static_cast<uint8_t>(type));
  store_be32(p + 1, slot);
  store_be32(p + 5, frame_seq);
  store_be32(p + 9, len);
  size_ += kRecordHeaderBytes + len;
  ++count_;
  return p + kRecordHeaderBytes;
}

bool BatchWriter::add_data(uint32_t slot, uint32_t frame_seq, ConstBytes body) {
  if (body.size() > UINT32_MAX) return false;
  std::byte* p = reserve(RecordType::kData, slot, frame_seq, static_cast<uint32_t>(body.size()));
  if (p == nullptr) return false;
  if (!body.empty()) std::memcpy(p, body.data(), body.size());
  return true;
}

bool BatchWriter::add_open_slot(uint32_t slot, uint32_t frame_seq, const OpenSlotBody& body) {
  std::byte* p = reserve(RecordType::kOpenSlot, slot, frame_seq, kOpenSlotBody);
  if (p == nullptr) return false;
  store_be64(p, body.anchor_id);
  store_be64(p + 8, body.session_id);
  return true;
}

bool BatchWriter::add_close_slot(uint32_t slot, uint32_t frame_seq, CloseReason reason) {
  std::byte* p = reserve(RecordType::kCloseSlot, slot, frame_seq, kCloseSlotBody);
  if (p == nullptr) return false;
  p[0] = std::byte(static_cast<uint8_t>(reason));
  return true;
}

bool BatchWriter::add_credit_update(uint32_t slot, uint32_t delta) {
  std::byte* p = reserve(RecordType::kCreditUpdate, slot, 0, kCreditUpdateBody);
  if (p == nullptr) return false;
  store_be32(p, delta);
  return true;
}

bool BatchWriter::add_slot_heartbeat(uint32_t slot, uint32_t frame_seq) {
  return reserve(RecordType::kSlotHeartbeat, slot, frame_seq, 0) != nullptr;
}

size_t BatchWriter::finish() {
  if (!ok_) return 0;
  store_be16(out_.data() + 2, count_);
  return size_;
}

DecodeError BatchReader::open(ConstBytes in) {
  in_ = in;
  pos_ = kBatchHeaderBytes;
  seen_ = 0;
  if (in.size() < kBatchHeaderBytes) return status_ = DecodeError::kTruncated;
  const std::byte* p = in.data();
  header_.mux_version = std::to_integer<uint8_t>(p[0]);
  header_.flags = std::to_integer<uint8_t>(p[1]);
  header_.record_count = load_be16(p + 2);
  header_.peer_epoch = load_be64(p + 4);
  header_.batch_seq = load_be32(p + 12);
  if (header_.mux_version != kMuxVersion) return status_ = DecodeError::kBadVersion;
  return status_ = DecodeError::kOk;
}

bool BatchReader::next(BatchRecord* out) {
  if (status_ != DecodeError::kOk) return false;
  const size_t left = in_.size() - pos_;
  if (seen_ == header_.record_count) {
    if (left != 0) status_ = DecodeError::kBadLength;
    return false;
  }
  if (left < kRecordHeaderBytes) {
    status_ = DecodeError::kTruncated;
    return false;
  }
  const std::byte* p = in_.data() + pos_;
  const uint8_t type = std::to_integer<uint8_t>(p[0]);
  RecordHeader& h = out->header;
  h.slot = load_be32(p + 1);
  h.frame_seq = load_be32(p + 5);
  h.len = load_be32(p + 9);
  if (left - kRecordHeaderBytes < h.len) {
    status_ = DecodeError::kTruncated;
    return false;
  }
  out->body = in_.subspan(pos_ + kRecordHeaderBytes, h.len);
  auto expect_len = [&](size_t n) {
    if (h.len == n) return true;
    status_ = DecodeError::kBadLength;
    return false;
  };
  switch (type) {
    case static_cast<uint8_t>(RecordType::kData):
      break;
    case static_cast<uint8_t>(RecordType::kOpenSlot):
      if (!expect_len(kOpenSlotBody)) return false;
      out->open.anchor_id = load_be64(out->body.data());
      out->open.session_id = load_be64(out->body.data() + 8);
      break;
    case static_cast<uint8_t>(RecordType::kCloseSlot): {
      if (!expect_len(kCloseSlotBody)) return false;
      const uint8_t reason = std::to_integer<uint8_t>(out->body[0]);
      if (reason > static_cast<uint8_t>(CloseReason::kCancelled)) {
        status_ = DecodeError::kBadValue;
        return false;
      }
      out->reason = static_cast<CloseReason>(reason);
      break;
    }
    case static_cast<uint8_t>(RecordType::kCreditUpdate):
      if (!expect_len(kCreditUpdateBody)) return false;
      out->credit_delta = load_be32(out->body.data());
      break;
    case static_cast<uint8_t>(RecordType::kSlotHeartbeat):
      if (!expect_len(0)) return false;
      break;
    default:
      status_ = DecodeError::kBadKind;
      return false;
  }
  h.type = static_cast<RecordType>(type);
  pos_ += kRecordHeaderBytes + h.len;
  ++seen_;
  return true;
}

}  // namespace ringfire::proto
