// fuzz_stream_batch.cc — libFuzzer target for `_stream_batch` decoding.
// Oracle: a batch that decodes completely re-encodes, record by record, to
// exactly the input bytes.
#include <vector>

#include "proto/stream_batch.h"
#include "tests/fuzz/require.h"

using namespace ringfire::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ConstBytes in(reinterpret_cast<const std::byte*>(data), size);
  BatchReader r;
  if (r.open(in) != DecodeError::kOk) return 0;
  std::vector<std::byte> out(size + 16);
  BatchWriter w(out, r.header().peer_epoch, r.header().batch_seq, r.header().flags);
  BatchRecord rec;
  while (r.next(&rec)) {
    bool added = false;
    const auto& h = rec.header;
    switch (h.type) {
      case RecordType::kData: added = w.add_data(h.slot, h.frame_seq, rec.body); break;
      case RecordType::kOpenSlot: added = w.add_open_slot(h.slot, h.frame_seq, rec.open); break;
      case RecordType::kCloseSlot: added = w.add_close_slot(h.slot, h.frame_seq, rec.reason); break;
      case RecordType::kCreditUpdate:
        // The writer always stamps frame_seq 0 on credit: compare only then.
        if (h.frame_seq != 0) return 0;
        added = w.add_credit_update(h.slot, rec.credit_delta);
        break;
      case RecordType::kSlotHeartbeat: added = w.add_slot_heartbeat(h.slot, h.frame_seq); break;
    }
    REQUIRE(added);
  }
  if (r.status() != DecodeError::kOk) return 0;
  out.resize(w.finish());
  REQUIRE(out.size() == size);
  for (size_t i = 0; i < size; ++i) REQUIRE(out[i] == in[i]);
  return 0;
}
