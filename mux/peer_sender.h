// peer_sender.h — the owner side of the stream multiplexer for one peer
// (the source document's PeerBatcher): every stream this node produces to
// that peer is a slot here, and build() packs what may go into
// `_stream_batch` messages. I/O-free, time passed in, one thread.
//
//   open()     a slot; its OpenSlot goes in a flush of its own (eager).
//   send()     stages a record, never blocks: taken into the slot's withheld
//              queue (bounded by the slot byte budget) and batched once the
//              slot has frame credit; at the budget it is refused (kFull)
//              so the producer slows down, and the slot dies (Dropped,
//              metered) only if no credit comes back within the deadline.
//   finish()   the terminal: CloseSlot{terminal-sent} after the slot's last
//              record, in the same batch, spending the credit reserved for it.
//   on_credit / on_close: what the receiver sent back (CreditUpdate, and
//              closes: unknown slot, protocol error, cancelled).
//   build()    the next batch, when the flush policy (or a liveness record,
//              a clamp, flush_batch()) says one is due.
// Frame credit: a slot opens with C data credits and one reserved for the
// terminal; a record leaves only against a credit. Withheld records stay
// in FIFO order behind the ones sent, so order is never at risk.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "mux/mux_config.h"
#include "mux/slot_table.h"
#include "proto/bytes.h"
#include "proto/stream_batch.h"

namespace ringfire::mux {

enum class SendStatus : uint8_t {
  kSent,      // staged: it will go in order
  kFull,      // not taken: the slot's withheld bytes are at its budget (retry after credit)
  kClosed,    // not taken: the slot is closed (finished, cancelled, dropped)
  kTooLarge,  // not taken: larger than a batch can carry
};

// FlushReason: why build() wrote a batch (metered per reason).
enum class FlushReason : uint8_t { kNone, kLiveness, kClamp, kOnAdmission, kLinger, kManual };

struct PeerSenderStats {
  uint64_t batches = 0;
  uint64_t records = 0;           // data records sent
  uint64_t bytes = 0;             // data bytes sent
  uint64_t by_reason[6] = {};     // batches by FlushReason
  uint64_t credit_exhausted = 0;  // times a slot ran out of frame credit with records withheld
  uint64_t refused_full = 0;      // sends refused at the slot's byte budget
  uint64_t stalled_killed = 0;    // slots dropped: no credit within the deadline
  uint64_t closed_by_receiver = 0;  // live slots the receiver closed (a cancel, its error)
  uint64_t unknown_credit = 0;    // CreditUpdates for no live slot (stale, or a peer's error)
  uint64_t credit_overflow = 0;   // grants past the window the slot opened with (ignored)
  uint64_t heartbeats = 0;        // SlotHeartbeats sent (idle slots only)
  uint64_t fenced = 0;            // records over the record cap, each sent alone in its batch
  uint64_t control_batches = 0;   // control batches applied (credit, closes from the receiver)
  uint64_t control_rejected = 0;  // control batches that did not decode or were of another epoch
  uint64_t control_wrong_kind = 0;  // records a receiver may not send the owner (ignored)
};

class PeerSender {
 public:
  // `credit` and `slot_byte_budget` are the receiver's answer to the attach
  // (slot_byte_budget 0: the config's); `epoch` the channel's.
  PeerSender(const MuxConfig& config, uint64_t epoch);

  // open a slot for the consumer's (anchor, session), holding `credit`
  // frames (> 0) and at most `byte_budget` data bytes outstanding (the
  // receiver's answer; 0: the config's slot_byte_budget). nullopt when
  // max_streams_per_peer are live.
  std::optional<proto::SlotId> open(uint64_t anchor_id, uint64_t session_id, uint32_t credit, uint64_t now_ns,
                                    uint32_t byte_budget = 0);
  // set_peer_budget: the receiver's peer_byte_budget (its ATTACH answer):
  // the data bytes all open slots may have outstanding together.
  void set_peer_budget(uint32_t bytes) { peer_budget_ = bytes != 0 ? bytes : config_.peer_byte_budget; }
  // limit_peer_budget: a ticket's peer_byte_budget (PROTOCOL.md §5.2.1):
  // lowers the budget to it, never raises it (0: unchanged).
  void limit_peer_budget(uint32_t bytes) {
    if (bytes != 0 && bytes < peer_budget_) peer_budget_ = bytes;
  }
  uint64_t peer_budget() const { return peer_budget_; }
  // outstanding_bytes: what the open slots have sent and not had credited back.
  uint64_t outstanding_bytes() const { return out_bytes_total_; }
  // withheld_total_bytes: what every slot holds that has not gone yet.
  uint64_t withheld_total_bytes() const { return withheld_total_; }
  SendStatus send(proto::SlotId slot, proto::ConstBytes record, uint64_t now_ns);
  // finish: the terminal; later sends are kClosed. false if not live.
  bool finish(proto::SlotId slot);
  // abort: the producer went away without a terminal. What it staged still
  // goes (in order, against credit), then CloseSlot{peer-gone} ends the
  // stream dropped at the receiver. false if not live or already finishing.
  bool abort(proto::SlotId slot);
  // closed: the producer's view (a closed sender: finished, cancelled, dropped).
  bool closed(proto::SlotId slot) const;
  // withheld_bytes: what the slot holds that has not gone yet.
  uint32_t withheld_bytes(proto::SlotId slot) const;

  void on_credit(uint32_t raw_slot, uint32_t delta);
  void on_close(uint32_t raw_slot, proto::CloseReason reason);
  // peer_lost: the channel's epoch died; every slot is gone (the receiver
  // side injects Dropped for each).
  void peer_lost();
  // apply_control takes one control batch the receiver sent back on the TCP
  // control connection (CreditUpdate and receiver-to-owner closes, PROTOCOL.md
  // §2.3). A batch that does not decode, or is not of this channel's epoch,
  // is counted and changes nothing; records up to a malformed one apply.
  void apply_control(proto::ConstBytes batch);

  // kick: flush_batch() — whatever is staged goes in the next build()s:
  // under Manual, every record staged before it goes as credit allows
  // (those that wait for credit need no second flush); under Auto, the
  // next build() writes at once (no linger).
  void kick() {
    kicked_ = true;
    flushed_seq_ = stage_seq_;
  }
  // build writes the next batch into `out` and returns its size, or 0 when
  // nothing is due. Call until 0. `out` must hold max_batch_bytes, and
  // max_record_bytes + 29 for fenced records (a smaller buffer leaves them
  // staged).
  size_t build(uint64_t now_ns, proto::MutableBytes out, FlushReason* why = nullptr);
  // next_deadline_ns: when build() may next have work without new input
  // (linger, heartbeats, stall deadlines); UINT64_MAX if none.
  uint64_t next_deadline_ns() const;

  uint32_t live_slots() const { return slots_.live(); }
  // idle: nothing staged, withheld or owed (opens, closes) is left to write.
  bool idle() const { return withheld_total_ == 0 && liveness_pending_ == 0; }
  uint64_t epoch() const { return epoch_; }
  // has_staged: some record may go now (withheld, with credit and byte room).
  bool has_staged() const;
  // staged_records: how many records may go now, at most (a walk of every ready slot: tests, not the hot path).
  uint64_t staged_records() const;
  const PeerSenderStats& stats() const { return stats_; }

 private:
  enum class State : uint8_t { kOpening, kOpen, kFinishing, kClosed };
  struct Slot {
    uint64_t anchor_id = 0;
    uint64_t session_id = 0;
    State state = State::kOpening;
    uint32_t frame_seq = 0;      // the next record's
    uint32_t credit = 0;         // data frames it may still send
    uint32_t window = 0;         // the credit it opened with: grants past it are ignored
    uint32_t outstanding = 0;    // data frames sent, not yet credited back
    uint32_t byte_budget = 0;    // data bytes it may have outstanding (the receiver's answer)
    uint64_t out_bytes = 0;      // data bytes sent, not yet credited back
    // sent_lens: the outstanding records' lengths, oldest first from
    // sent_head: credit returns records in order. A ring a power of two
    // long, grown as records are in flight (grow_sent_lens): its memory
    // follows what is outstanding, not the window (4,096 slots of a
    // 256-record window took 4 MiB, zeroed, at their first records).
    std::vector<uint32_t> sent_lens;
    uint32_t sent_head = 0;
    bool open_pending = false;   // its OpenSlot is not yet written
    bool close_pending = false;  // its terminal (or a kill) is not yet written
    proto::CloseReason close_reason = proto::CloseReason::kTerminalSent;
    bool queued = false;         // in ready_
    // withheld: length-prefixed records in FIFO order from `head`.
    std::vector<std::byte> withheld;
    size_t head = 0;
    uint32_t withheld_records = 0;
    uint64_t full_since_ns = 0;  // at its byte budget with no credit, since (0: not)
    uint64_t last_send_ns = 0;
  };
  static bool has_data(const Slot& s) { return s.withheld_records != 0; }
 public:
  static constexpr size_t kEntryHeader = 8;  // a withheld record's [u32 len][u32 stage seq]

 private:
  static uint32_t head_len(const Slot& s) {
    uint32_t v;
    std::memcpy(&v, s.withheld.data() + s.head, sizeof(v));
    return v;
  }
  // may_go: may_send, and (Manual) its head record was staged before the last flush_batch().
  bool may_go(const Slot& s) const {
    if (!may_send(s)) return false;
    if (config_.flush.kind != FlushPolicy::Kind::kManual) return true;
    uint32_t seq;
    std::memcpy(&seq, s.withheld.data() + s.head + 4, sizeof(seq));
    return static_cast<int32_t>(seq - flushed_seq_) < 0;  // modular: a flush covers what was staged before it
  }
  // may_send: the slot's head record may go now: a credit, and room in
  // both byte budgets for it.
  bool may_send(const Slot& s) const {
    if (!has_data(s) || s.credit == 0) return false;
    const uint32_t len = head_len(s);
    return s.out_bytes + len <= s.byte_budget && out_bytes_total_ + len <= peer_budget_;
  }
  // forget_outstanding: the slot closes; its outstanding bytes no longer count.
  void forget_outstanding(Slot& s);
  // grow_sent_lens: room for one more outstanding record's length.
  static void grow_sent_lens(Slot& s);
  bool sendable(const Slot& s) const;
  void enqueue(proto::SlotId id, Slot& s);
  void discard(Slot& s);  // drop what it withholds
  // took: the slot's head record (len bytes) went into a batch against one credit.
  void took(Slot& s, uint32_t len, uint64_t now_ns);
  // close_after_staged: the slot takes no more; CloseSlot{reason} follows its last staged record.
  bool close_after_staged(proto::SlotId id, proto::CloseReason reason);
  bool due(uint64_t now_ns, FlushReason* why) const;

  MuxConfig config_;
  uint64_t epoch_;
  uint32_t batch_seq_ = 0;
  uint32_t record_cap_ = 0;  // the largest record body a batch carries
  SlotTable<Slot> slots_;
  std::deque<proto::SlotId> ready_;    // slots with records or a terminal to write: a round robin
  std::vector<proto::SlotId> opening_; // slots whose OpenSlot is not yet written, in order
  uint32_t big_withheld_ = 0;          // withheld records over the record cap (fenced): looked for only then
  std::vector<proto::SlotId> stalling_;  // slots refused at their budget without credit
  bool kicked_ = false;
  uint32_t stage_seq_ = 0;    // the next staged record's
  uint32_t flushed_seq_ = 0;  // Manual: records staged before this (the last flush_batch()) may go
  uint64_t staged_since_ns_ = 0;        // the oldest staged data record (0: none)
  uint64_t next_tick_ns_;               // the per-peer heartbeat tick
  uint32_t beat_from_ = 0;              // this tick's beats go on from this index (a full batch)
  size_t withheld_total_ = 0;           // bytes withheld over all slots (the peer budget)
  uint64_t out_bytes_total_ = 0;        // data bytes the open slots have outstanding
  uint64_t peer_budget_ = 0;            // ... at most this (the receiver's peer_byte_budget)
  uint32_t liveness_pending_ = 0;       // OpenSlots and closes not yet written
  PeerSenderStats stats_;
};

}  // namespace ringfire::mux
