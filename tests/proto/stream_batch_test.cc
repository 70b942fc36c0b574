// stream_batch_test.cc — golden bytes for a batch carrying all five record
// types, slot id packing, and rejection of malformed batches.
#include "proto/stream_batch.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/proto/golden.h"

namespace ringfire::proto {
namespace {

using testing::hex;
using testing::to_hex;

const std::string kGolden =
    "01 00 0005 0102030405060708 0a0b0c0d |"
    "01 00000102 00000000 00000010 0000000000000011 0000000000000022 |"
    "00 00000102 00000001 00000002 6869 |"
    "03 00000102 00000000 00000004 00000100 |"
    "04 00000102 00000002 00000000 |"
    "02 00000102 00000003 00000001 00";

TEST(SlotId, PacksIndexHighGenerationLow) {
  const SlotId id{1, 2};
  EXPECT_EQ(id.pack(), 0x102u);
  EXPECT_EQ(SlotId::unpack(0x102), id);
  EXPECT_LT((SlotId{1, 255}).pack(), (SlotId{2, 0}).pack());  // sorts by index
  EXPECT_EQ(SlotId::unpack(0xFFFFFFFF).index, SlotId::kMaxIndex);
}

TEST(StreamBatchGolden, AllFiveRecordTypes) {
  std::vector<std::byte> buf(256);
  BatchWriter w(buf, 0x0102030405060708, 0x0A0B0C0D);
  const uint32_t slot = SlotId{1, 2}.pack();
  ASSERT_TRUE(w.add_open_slot(slot, 0, OpenSlotBody{0x11, 0x22}));
  const auto hi = hex("68 69");
  ASSERT_TRUE(w.add_data(slot, 1, hi));
  ASSERT_TRUE(w.add_credit_update(slot, 256));
  ASSERT_TRUE(w.add_slot_heartbeat(slot, 2));
  ASSERT_TRUE(w.add_close_slot(slot, 3, CloseReason::kTerminalSent));
  buf.resize(w.finish());
  EXPECT_EQ(to_hex(buf), to_hex(hex(kGolden)));
}

TEST(StreamBatchDecode, ReadsBackEveryRecord) {
  const auto bytes = hex(kGolden);
  BatchReader r;
  ASSERT_EQ(r.open(bytes), DecodeError::kOk);
  EXPECT_EQ(r.header().record_count, 5);
  EXPECT_EQ(r.header().peer_epoch, 0x0102030405060708u);
  EXPECT_EQ(r.header().batch_seq, 0x0A0B0C0Du);
  BatchRecord rec;
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec.header.type, RecordType::kOpenSlot);
  EXPECT_EQ(rec.open.anchor_id, 0x11u);
  EXPECT_EQ(rec.open.session_id, 0x22u);
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec.header.type, RecordType::kData);
  EXPECT_EQ(rec.header.frame_seq, 1u);
  EXPECT_EQ(to_hex(rec.body), "68 69");
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec.header.type, RecordType::kCreditUpdate);
  EXPECT_EQ(rec.credit_delta, 256u);
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec.header.type, RecordType::kSlotHeartbeat);
  ASSERT_TRUE(r.next(&rec));
  EXPECT_EQ(rec.header.type, RecordType::kCloseSlot);
  EXPECT_EQ(rec.reason, CloseReason::kTerminalSent);
  EXPECT_EQ(SlotId::unpack(rec.header.slot), (SlotId{1, 2}));
  EXPECT_FALSE(r.next(&rec));
  EXPECT_EQ(r.status(), DecodeError::kOk);
}

DecodeError decode_all(const std::vector<std::byte>& bytes) {
  BatchReader r;
  if (DecodeError e = r.open(bytes); e != DecodeError::kOk) return e;
  BatchRecord rec;
  while (r.next(&rec)) {
  }
  return r.status();
}

TEST(StreamBatchDecode, RejectsMalformedBatches) {
  auto bytes = hex(kGolden);
  bytes[0] = std::byte{2};
  EXPECT_EQ(decode_all(bytes), DecodeError::kBadVersion);

  bytes = hex(kGolden);
  bytes[3] = std::byte{4};  // claims 4 records, carries 5
  EXPECT_EQ(decode_all(bytes), DecodeError::kBadLength);

  bytes = hex(kGolden);
  bytes[3] = std::byte{6};  // claims 6 records, carries 5
  EXPECT_EQ(decode_all(bytes), DecodeError::kTruncated);

  bytes = hex(kGolden);
  bytes.back() = std::byte{9};  // close reason out of range
  EXPECT_EQ(decode_all(bytes), DecodeError::kBadValue);

  bytes = hex("01 00 0001 0000000000000000 00000000 | 07 00000001 00000000 00000000");
  EXPECT_EQ(decode_all(bytes), DecodeError::kBadKind);

  bytes = hex("01 00 0001 0000000000000000 00000000 | 03 00000001 00000000 00000002 0000");
  EXPECT_EQ(decode_all(bytes), DecodeError::kBadLength);  // credit body must be 4 bytes

  bytes = hex("01 00 0001 0000000000000000 00000000 | 00 00000001 00000000 7fffffff 00");
  EXPECT_EQ(decode_all(bytes), DecodeError::kTruncated);  // length beyond the batch

  const auto golden = hex(kGolden);
  for (size_t n = 0; n < golden.size(); ++n) {
    EXPECT_NE(decode_all(std::vector<std::byte>(golden.begin(), golden.begin() + n)),
              DecodeError::kOk)
        << n;
  }
}

TEST(BatchWriter, RefusesARecordThatDoesNotFitAndKeepsTheBatch) {
  std::vector<std::byte> buf(16 + 13 + 4);
  BatchWriter w(buf, 1, 1);
  ASSERT_TRUE(w.add_credit_update(1, 5));
  EXPECT_FALSE(w.add_slot_heartbeat(1, 0));
  EXPECT_EQ(w.record_count(), 1);
  EXPECT_EQ(w.finish(), buf.size());
}

}  // namespace
}  // namespace ringfire::proto
