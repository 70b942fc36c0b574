// stream_batch.h — the `_stream_batch` message of the stream multiplexer:
// a 16-byte big-endian batch header then records with 13-byte big-endian
// headers. Every multi-byte field is big-endian. Pure encode/decode, no
// allocation. Byte-level definitions: proto/PROTOCOL.md.
#pragma once

#include <cstdint>

#include "proto/bytes.h"

namespace ringfire::proto {

inline constexpr uint8_t kMuxVersion = 1;
inline constexpr size_t kBatchHeaderBytes = 16;
inline constexpr size_t kRecordHeaderBytes = 13;

// BatchHeader: u8 mux_version | u8 flags | u16 record_count | u64 peer_epoch
// | u32 batch_seq.
struct BatchHeader {
  uint8_t mux_version = kMuxVersion;
  uint8_t flags = 0;
  uint16_t record_count = 0;
  uint64_t peer_epoch = 0;
  uint32_t batch_seq = 0;  // advances within an epoch, compared modulo 2^32
};

// RecordType is the first byte of a record.
enum class RecordType : uint8_t {
  kData = 0,
  kOpenSlot = 1,
  kCloseSlot = 2,
  kCreditUpdate = 3,
  kSlotHeartbeat = 4,
};

// CloseReason is the CloseSlot body. The reason carries the direction:
// kTerminalSent and kPeerGone travel owner -> receiver, kUnknownSlot,
// kProtocolError and kCancelled receiver -> owner. kTerminalSent is the
// stream's terminal itself (the owner's finish()): it spends the slot's
// reserved credit.
enum class CloseReason : uint8_t {
  kTerminalSent = 0,
  kPeerGone = 1,
  kUnknownSlot = 2,
  kProtocolError = 3,
  kCancelled = 4,  // the consumer went away (ringfire's addition)
};

// SlotId packs a 24-bit dense index (high bits, so ids sort by index) and an
// 8-bit generation that changes on every reuse of the index.
struct SlotId {
  uint32_t index = 0;      // < 2^24
  uint8_t generation = 0;

  static constexpr uint32_t kMaxIndex = (1u << 24) - 1;
  constexpr uint32_t pack() const { return index << 8 | generation; }
  static constexpr SlotId unpack(uint32_t raw) {
    return SlotId{raw >> 8, static_cast<uint8_t>(raw & 0xff)};
  }
  friend constexpr bool operator==(SlotId, SlotId) = default;
};

// RecordHeader: u8 type | u32 slot | u32 frame_seq | u32 len.
struct RecordHeader {
  RecordType type = RecordType::kData;
  uint32_t slot = 0;       // SlotId::pack()
  uint32_t frame_seq = 0;  // per slot
  uint32_t len = 0;        // body bytes
};

struct OpenSlotBody {
  uint64_t anchor_id = 0;
  uint64_t session_id = 0;
};
inline constexpr size_t kOpenSlotBody = 16;
inline constexpr size_t kCloseSlotBody = 1;
inline constexpr size_t kCreditUpdateBody = 4;

// BatchRecord is one decoded record: its header and a view of its body. For
// the typed records the body fields are decoded too.
struct BatchRecord {
  RecordHeader header;
  ConstBytes body;
  OpenSlotBody open;                           // kOpenSlot
  CloseReason reason = CloseReason::kTerminalSent;  // kCloseSlot
  uint32_t credit_delta = 0;                   // kCreditUpdate
};

// BatchWriter packs records into a caller-owned buffer; finish() stamps the
// record count. A record that does not fit is refused (returns false) and
// leaves the batch as it was, so the caller can flush and retry.
class BatchWriter {
 public:
  BatchWriter(MutableBytes out, uint64_t peer_epoch, uint32_t batch_seq, uint8_t flags = 0);

  bool add_data(uint32_t slot, uint32_t frame_seq, ConstBytes body);
  bool add_open_slot(uint32_t slot, uint32_t frame_seq, const OpenSlotBody& body);
  bool add_close_slot(uint32_t slot, uint32_t frame_seq, CloseReason reason);
  bool add_credit_update(uint32_t slot, uint32_t delta);
  bool add_slot_heartbeat(uint32_t slot, uint32_t frame_seq);

  uint16_t record_count() const { return count_; }
  size_t size() const { return size_; }
  // finish writes the record count and returns the batch size in bytes.
  size_t finish();

 private:
  std::byte* reserve(RecordType type, uint32_t slot, uint32_t frame_seq, uint32_t len);
  MutableBytes out_;
  size_t size_ = 0;
  uint16_t count_ = 0;
  bool ok_ = true;
};

// BatchReader decodes a batch. open() checks the header; next() returns
// records one by one and fails on the first malformed one. A batch whose
// record_count disagrees with its bytes is malformed: after the last record
// next() reports kBadLength if bytes remain, kTruncated if records are missing.
class BatchReader {
 public:
  DecodeError open(ConstBytes in);
  const BatchHeader& header() const { return header_; }
  // next decodes the next record; returns false at the end (status() kOk)
  // or on error (status() says which).
  bool next(BatchRecord* out);
  DecodeError status() const { return status_; }

 private:
  BatchHeader header_;
  ConstBytes in_;
  size_t pos_ = 0;
  uint16_t seen_ = 0;
  DecodeError status_ = DecodeError::kOk;
};

}  // namespace ringfire::proto
