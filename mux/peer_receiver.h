// peer_receiver.h — the receiver side of the stream multiplexer for one
// peer (the source document's applier): applies that peer's
// `_stream_batch` messages strictly in order into its streams' buffers and
// produces what goes back to it (CreditUpdate, closes). I/O-free, time
// passed in, one thread.
//
// A consumer registers a stream (anchor, session) with a window of C
// frames; the peer's OpenSlot claims it. Each stream's buffer holds C data
// items and one more for its end, so the applier never finds it full
// unless the peer broke its credit (a protocol error on that slot only,
// counted). The buffer's bytes are bounded too: a record that would take
// a slot past its byte budget, or all of the peer's slots past the peer's,
// ends that slot (an owner keeps what it has outstanding under both, so
// only a broken or hostile one meets this): what a peer can make this
// side hold is the peer budget over its streams not yet ended, plus at
// most a slot budget for each ended stream whose consumer has not read it
// yet (the owner forgets a slot once its close is written). Exactly one end per
// registered stream, with its reason: finished (the owner's terminal), or
// dropped (the owner went away, the channel died, a protocol error, the
// budget, silence, or never claimed within the accept timeout). A record
// whose slot generation is not its occupant's is dropped and counted; an
// OpenSlot for a stream nobody registered is answered CloseSlot{unknown}
// and the peer goes on. Credit goes back as the consumer reads, coalesced
// per slot.
//
// Readiness: a stream whose buffer goes from empty to holding something
// is reported to the readable hook (the node's anchors keep their ready
// lists from it), so a reader's cost is the streams that have items,
// never the streams registered.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "mux/mux_config.h"
#include "proto/bytes.h"
#include "proto/stream_batch.h"

namespace ringfire::mux {

class PeerSender;

// EndReason: why a stream ended (kNone: it finished).
enum class EndReason : uint8_t {
  kNone = 0,         // finished: the owner's terminal
  kProducerGone,     // the owner went away without one (aborted, or killed the slot)
  kChannelLost,      // the peer's channel died (its connection, its epoch)
  kProtocolError,    // out of order, past its credit, a rebound index
  kOverBudget,       // a record past the slot's or the peer's byte budget
  kSilent,           // nothing from the owner for three heartbeat intervals
  kNeverOpened,      // attached, but no OpenSlot claimed it within the accept timeout
  kCancelled,        // the consumer cancelled it (per-stream path's own end)
};
const char* end_reason_name(EndReason r);

// StreamItem: what a consumer reads (a copy; see PeerReceiver::Popped).
struct StreamItem {
  enum class Kind : uint8_t { kData, kFinished, kDropped } kind = Kind::kData;
  std::vector<std::byte> bytes;  // kData
  EndReason reason = EndReason::kNone;  // an end's
  uint32_t frames = 0;                  // an end's: data frames the stream delivered before it
};

struct PeerReceiverStats {
  uint64_t batches = 0;
  uint64_t records = 0;               // data records delivered
  uint64_t stale_epoch = 0;           // batches of an epoch that already died
  uint64_t foreign_epoch = 0;         // batches of an epoch other than the one pinned (pin_epoch): discarded
  uint64_t batch_gaps = 0;            // batch_seq jumps (the channel is reliable: a bug or a forgery)
  uint64_t malformed = 0;             // batches that did not decode (applied up to the bad record)
  uint64_t generation_mismatch = 0;   // records for a recycled slot
  uint64_t unknown_slot = 0;          // records for no slot at all
  uint64_t unknown_anchor = 0;        // OpenSlots nobody registered (answered CloseSlot{unknown})
  uint64_t claimed_on_open = 0;       // OpenSlots the claim hook registered (tickets: no ATTACH before them)
  uint64_t protocol_errors = 0;       // out-of-order frame_seq, credit overrun, a rebound index
  uint64_t reader_stall = 0;          // the buffer was full for a granted record: must stay 0
  uint64_t over_budget = 0;           // slots ended: a record past the slot's or the peer's byte budget
  uint64_t never_opened = 0;          // registered streams never claimed (accept timeout, or the peer lost first)
  uint64_t credit_returned = 0;       // frames granted back
  uint64_t credit_held = 0;           // grants held back by a byte budget
  uint64_t dropped = 0;               // streams that ended dropped
  uint64_t watchdog_dead = 0;         // streams ended dropped: nothing from the owner for 3 intervals
  uint64_t finished = 0;
};

class PeerReceiver {
 public:
  // Stream: one registered stream's state; owned by the receiver.
  struct Stream;
  // ReadableHook: called (inside apply, watchdog, peer_lost) when a
  // stream's buffer goes from empty to holding an item; `user` is what
  // expect() was given.
  using ReadableHook = void (*)(void* ctx, void* user);
  // EndedHook: called as a stream's dropped end is queued (it is read
  // later), with its reason and the data frames it delivered.
  using EndedHook = void (*)(void* ctx, void* user, EndReason reason, uint32_t frames);
  // ClaimHook: called (inside apply) for an OpenSlot that claims no
  // registered stream, before it is answered unknown: the consumer may
  // register it now — a ticket (PROTOCOL.md §5.2.1), the attach answered in
  // advance — by expect() on this receiver (`peer`: what set_claim_hook
  // was given for it). Returns what expect() returned, or nullptr.
  using ClaimHook = Stream* (*)(void* ctx, void* peer, uint64_t anchor_id, uint64_t session_id, uint64_t now_ns);

  // Spare: a stream's state made ahead of its registration, its buffer
  // reserved; expect() given one allocates neither. A consumer makes one
  // with each anchor (make_spare, at the request), so the poll that reads
  // a burst of first tokens does not also make all their streams.
  struct SpareDeleter {
    void operator()(Stream* s) const;
  };
  using Spare = std::unique_ptr<Stream, SpareDeleter>;
  static Spare make_spare();

  explicit PeerReceiver(const MuxConfig& config);
  ~PeerReceiver();

  void set_readable_hook(ReadableHook hook, void* ctx) {
    hook_ = hook;
    hook_ctx_ = ctx;
  }
  void set_ended_hook(EndedHook hook, void* ctx) {
    ended_hook_ = hook;
    ended_ctx_ = ctx;
  }
  void set_claim_hook(ClaimHook hook, void* ctx, void* peer) {
    claim_hook_ = hook;
    claim_ctx_ = ctx;
    claim_peer_ = peer;
  }

  // expect registers a stream the peer will open (the attach answered it
  // with `credit`); nullptr if max_streams_per_peer are registered. It
  // must be claimed by an OpenSlot within the config's accept timeout.
  // `spare` (or a null one): its state is taken when the stream registers.
  Stream* expect(uint64_t anchor_id, uint64_t session_id, uint32_t credit, uint64_t now_ns = 0, void* user = nullptr,
                 Spare* spare = nullptr);
  // pin_epoch: every batch must carry this peer_epoch (the channel_epoch
  // its control connection announced); one that does not is discarded
  // whole and counted (foreign_epoch): it came through a channel that is
  // not this peer's. 0 (the default): any epoch, a later one replacing
  // the earlier (a peer that came back).
  void pin_epoch(uint64_t epoch) { pinned_epoch_ = epoch; }
  // has_room: another stream may be registered (max_streams_per_peer not reached).
  bool has_room() const { return streams_.size() < config_.max_streams_per_peer; }

  // Popped: one item, its bytes a view of the stream's buffer that holds
  // until this receiver's next call.
  struct Popped {
    StreamItem::Kind kind = StreamItem::Kind::kData;
    EndReason reason = EndReason::kNone;
    uint32_t frames = 0;
    proto::ConstBytes bytes;
  };
  // pop: the stream's next item (false: none now). After its end the
  // stream is freed: the pointer is dead once pop returned an end.
  bool pop(Stream* s, Popped* out);
  bool pop(Stream* s, StreamItem* out);  // a copy
  bool has_items(const Stream* s) const;
  // grant_due: the stream has read back a quarter of its window, or of its
  // byte budget, since its last grant, or what it has read back and still
  // buffers is 3/4 of its byte budget — time to send credit. Smaller
  // grants wait for the sweep: a credit record per stream per decode step
  // (thousands a step) cost both ends more than the records did.
  bool grant_due(const Stream* s) const;
  // sweep_due: every stream's grants go now — the peer's read-back bytes
  // are a quarter of its budget, or with what its live streams buffer 3/4
  // of it, or kCreditSweepNs passed since the last sweep with anything owed.
  bool sweep_due(uint64_t now_ns) const;
  // sweep_at_ns: when the next sweep falls due by time (with anything owed).
  uint64_t sweep_at_ns() const { return swept_ns_ + kCreditSweepNs; }
  bool owes_credit() const { return owed_frames_ != 0; }
  // kCreditSweepNs: the longest a read record waits to be granted back
  // (then the node thread's next turn: it plans one for sweep_at_ns()).
  static constexpr uint64_t kCreditSweepNs = 100'000'000;
  // cancel: the consumer went away (the owner gets CloseSlot{cancelled});
  // frees the stream.
  void cancel(Stream* s);

  // apply takes one batch from the peer, in channel order. Credit and
  // receiver-to-owner closes in it are for this node's own streams to the
  // peer: they go to `owner` (may be null). kForeign: the batch carried
  // another epoch than the pinned one (pin_epoch), discarded whole: its
  // channel is not its NODE's owner's, and the caller ends it.
  enum class Applied : uint8_t { kDone, kForeign };  // kDone: applied, or counted and dropped
  Applied apply(proto::ConstBytes batch, uint64_t now_ns, PeerSender* owner = nullptr);
  // peer_lost: the channel's epoch died; every registered stream ends
  // dropped (claimed or not).
  void peer_lost();
  // Liveness, per stream: kAlive (data this interval), kStarved (only the
  // owner's heartbeats: it is there but has nothing to send, or no credit —
  // never killed for it), kDead (nothing at all for three heartbeat
  // intervals). watchdog() ends the dead ones dropped, and the registered
  // streams no OpenSlot claimed within the accept timeout; time passed in.
  enum class Liveness : uint8_t { kAlive, kStarved, kDead };
  Liveness liveness(const Stream* s, uint64_t now_ns) const;
  void watchdog(uint64_t now_ns);
  // next_expiry_ns: when the oldest unclaimed stream's accept timeout
  // runs out (UINT64_MAX: none waits).
  uint64_t next_expiry_ns() const;
  // build_control writes what goes back (credit that is due, closes) into
  // `out`; returns its size, 0 when nothing is owed. Call until 0. Time
  // passed in: every grant goes once the peer's read-back bytes reach a
  // quarter of its budget, or kCreditSweepNs after the last sweep.
  // `sweep`: every grant goes now, whatever is due (the node's position
  // report by time: the two go in one frame).
  size_t build_control(proto::MutableBytes out, uint64_t epoch, uint64_t now_ns, bool sweep = false);
  // closes_owed: build_control has closes to write (credit is due by grant_due).
  bool closes_owed() const { return !closes_owed_.empty(); }

  uint32_t live_streams() const { return live_; }
  uint64_t buffered_bytes() const { return peer_bytes_; }
  const PeerReceiverStats& stats() const { return stats_; }

 private:
  struct Bound {
    uint8_t generation = 0;
    Stream* stream = nullptr;  // nullptr: the index is free
  };
  void end(Stream* s, StreamItem::Kind kind, EndReason reason);  // queue the stream's one end
  void push_data(Stream* s, proto::ConstBytes body);
  void readable(Stream* s, bool was_empty);
  void unbind(Stream* s);
  void free_stream(Stream* s);
  void owe_close(uint32_t raw_slot, proto::CloseReason reason);
  void owe_credit(Stream* s);
  // forget_owed: the stream's reads not granted back leave the counts (granted, or unbound).
  void forget_owed(Stream* s);
  // fail_slot: this slot only broke the protocol (or its budget): ended, and the owner told.
  void fail_slot(Stream* s, uint32_t raw, EndReason reason);

  MuxConfig config_;
  ReadableHook hook_ = nullptr;
  void* hook_ctx_ = nullptr;
  EndedHook ended_hook_ = nullptr;
  void* ended_ctx_ = nullptr;
  ClaimHook claim_hook_ = nullptr;
  void* claim_ctx_ = nullptr;
  void* claim_peer_ = nullptr;
  std::vector<std::unique_ptr<Stream>> streams_;  // registered, by pointer
  // awaiting: registered streams no OpenSlot has claimed yet, by (anchor, session).
  struct KeyHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& k) const { return k.first * 0x9E3779B97F4A7C15ull ^ k.second; }
  };
  std::unordered_map<std::pair<uint64_t, uint64_t>, Stream*, KeyHash> awaiting_;
  std::vector<Bound> slots_;                      // by the peer's slot index
  std::vector<Stream*> credit_owed_;              // streams with credit to return
  struct Close {
    uint32_t slot;
    proto::CloseReason reason;
  };
  std::vector<Close> closes_owed_;
  uint64_t epoch_ = 0;      // the peer's current epoch (0: none yet)
  uint64_t pinned_epoch_ = 0;  // pin_epoch's (0: none)
  uint32_t next_batch_seq_ = 0;
  uint32_t control_seq_ = 0;  // the batches build_control wrote
  uint64_t peer_bytes_ = 0;  // buffered in every stream
  uint64_t live_bytes_ = 0;  // ... in streams not yet ended (the peer budget's measure)
  uint64_t owed_bytes_ = 0;  // read by the consumer, not yet granted back (every bound stream)
  uint64_t owed_frames_ = 0; // ... their frames (a zero-length record owes a frame and no byte)
  uint64_t swept_ns_ = 0;    // build_control's last sweep of the smaller grants
  uint32_t live_ = 0;
  PeerReceiverStats stats_;
};

}  // namespace ringfire::mux
