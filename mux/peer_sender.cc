// peer_sender.cc — the owner side of one peer's slots: staging, credit,
// the flush decision and batch packing (see peer_sender.h).
#include "mux/peer_sender.h"

#include <cstring>

namespace ringfire::mux {
namespace {

// A withheld record: [u32 len][u32 stage seq][body] (the seq: what a Manual flush covers).
constexpr size_t kLenPrefix = PeerSender::kEntryHeader;

uint32_t load_len(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

PeerSender::PeerSender(const MuxConfig& config, uint64_t epoch)
    : config_(config),
      epoch_(epoch),
      record_cap_(std::min(config.max_batch_bytes, kMaxBatchCeiling) -
                  static_cast<uint32_t>(proto::kBatchHeaderBytes + proto::kRecordHeaderBytes)),
      slots_(config.max_streams_per_peer),
      next_tick_ns_(config.heartbeat_interval_ns),
      peer_budget_(config.peer_byte_budget) {}


void PeerSender::forget_outstanding(Slot& s) {
  out_bytes_total_ -= s.out_bytes;
  s.out_bytes = 0;
}

std::optional<proto::SlotId> PeerSender::open(uint64_t anchor_id, uint64_t session_id, uint32_t credit,
                                              uint64_t now_ns, uint32_t byte_budget) {
  if (credit == 0) return std::nullopt;  // a zero window is no mux (refused at attach)
  Slot s;
  s.anchor_id = anchor_id;
  s.session_id = session_id;
  s.credit = credit;
  s.window = credit;
  s.byte_budget = byte_budget != 0 ? byte_budget : config_.slot_byte_budget;
  s.open_pending = true;
  s.last_send_ns = now_ns;
  auto id = slots_.open(std::move(s));
  if (!id) return std::nullopt;
  ++liveness_pending_;
  opening_.push_back(*id);  // its OpenSlot leads the next batch
  return id;
}

SendStatus PeerSender::send(proto::SlotId id, proto::ConstBytes record, uint64_t now_ns) {
  Slot* s = slots_.find(id);
  if (s == nullptr || s->state == State::kFinishing || s->state == State::kClosed) return SendStatus::kClosed;
  // Larger than the receiver's budgets (its answer) can ever take: it could never go.
  if (record.size() > config_.max_record_bytes || record.size() > s->byte_budget || record.size() > peer_budget_) {
    return SendStatus::kTooLarge;
  }
  const size_t held = s->withheld.size() - s->head;
  if (held + kLenPrefix + record.size() > s->byte_budget ||
      withheld_total_ + kLenPrefix + record.size() > config_.peer_byte_budget) {
    ++stats_.refused_full;
    if (s->full_since_ns == 0 && !may_send(*s)) {  // no credit, or no byte room, to make any
      s->full_since_ns = now_ns;
      stalling_.push_back(id);
    }
    return SendStatus::kFull;
  }
  if (s->head != 0 && s->head * 2 >= s->withheld.size()) {  // compact the FIFO's consumed prefix
    s->withheld.erase(s->withheld.begin(), s->withheld.begin() + static_cast<std::ptrdiff_t>(s->head));
    s->head = 0;
  }
  const auto len = static_cast<uint32_t>(record.size());
  const size_t at = s->withheld.size();
  s->withheld.resize(at + kLenPrefix + len);
  const uint32_t seq = stage_seq_++;
  std::memcpy(s->withheld.data() + at, &len, 4);
  std::memcpy(s->withheld.data() + at + 4, &seq, 4);
  if (len != 0) std::memcpy(s->withheld.data() + at + kLenPrefix, record.data(), len);
  ++s->withheld_records;
  withheld_total_ += kLenPrefix + len;
  if (len > record_cap_) ++big_withheld_;
  // (last_send_ns moves when a record leaves, in took(): a slot whose
  // records wait for credit is heard from by its heartbeats, or its
  // receiver would take a starved stream for a dead one.)
  if (s->credit != 0) {
    if (staged_since_ns_ == 0) staged_since_ns_ = now_ns;
    enqueue(id, *s);
  }
  return SendStatus::kSent;
}

bool PeerSender::finish(proto::SlotId id) { return close_after_staged(id, proto::CloseReason::kTerminalSent); }

// abort: like finish(), with the other reason; what it staged still goes first.
bool PeerSender::abort(proto::SlotId id) { return close_after_staged(id, proto::CloseReason::kPeerGone); }

bool PeerSender::close_after_staged(proto::SlotId id, proto::CloseReason reason) {
  Slot* s = slots_.find(id);
  if (s == nullptr || s->state == State::kFinishing || s->state == State::kClosed) return false;
  s->state = State::kFinishing;
  s->close_pending = true;
  s->close_reason = reason;
  ++liveness_pending_;
  enqueue(id, *s);
  return true;
}

bool PeerSender::closed(proto::SlotId id) const {
  const Slot* s = slots_.find(id);
  return s == nullptr || s->state == State::kFinishing || s->state == State::kClosed;
}

uint32_t PeerSender::withheld_bytes(proto::SlotId id) const {
  const Slot* s = slots_.find(id);
  return s == nullptr ? 0 : static_cast<uint32_t>(s->withheld.size() - s->head);
}

void PeerSender::on_credit(uint32_t raw, uint32_t delta) {
  const proto::SlotId id = proto::SlotId::unpack(raw);
  Slot* s = slots_.find(id);
  if (s == nullptr || s->state == State::kClosed) {
    ++stats_.unknown_credit;
    return;
  }
  const uint32_t n = std::min(delta, s->outstanding);
  if (n < delta) ++stats_.credit_overflow;  // more than was sent: never past the window
  for (uint32_t i = 0; i < n; ++i) {  // the oldest n records were read: their bytes are free
    const uint32_t len = s->sent_lens[s->sent_head];
    s->sent_head = (s->sent_head + 1) & static_cast<uint32_t>(s->sent_lens.size() - 1);
    s->out_bytes -= len;
    out_bytes_total_ -= len;
  }
  s->outstanding -= n;
  s->credit += n;
  if (n != 0) s->full_since_ns = 0;
  if (has_data(*s) && s->credit != 0) enqueue(id, *s);
  // A slot held back only by the byte budgets stays in ready_ (it has
  // credit): the next build() finds the bytes freed here.
}

void PeerSender::on_close(uint32_t raw, proto::CloseReason reason) {
  (void)reason;  // unknown slot, protocol error, cancelled: the stream is over either way
  const proto::SlotId id = proto::SlotId::unpack(raw);
  Slot* s = slots_.find(id);
  if (s == nullptr) return;
  ++stats_.closed_by_receiver;
  if (s->open_pending) --liveness_pending_;
  if (s->close_pending) --liveness_pending_;
  discard(*s);
  forget_outstanding(*s);
  s->state = State::kClosed;
  s->open_pending = s->close_pending = false;
  slots_.close(id);  // the receiver holds nothing for it: the index is free
}

void PeerSender::peer_lost() {
  std::vector<proto::SlotId> all;
  slots_.for_each([&](proto::SlotId id, Slot&) { all.push_back(id); });
  for (proto::SlotId id : all) {
    discard(*slots_.find(id));
    slots_.close(id);
  }
  ready_.clear();
  opening_.clear();
  stalling_.clear();
  liveness_pending_ = 0;
  staged_since_ns_ = 0;
  withheld_total_ = 0;
  out_bytes_total_ = 0;
  big_withheld_ = 0;
}

void PeerSender::took(Slot& s, uint32_t len, uint64_t now_ns) {
  s.head += kLenPrefix + len;
  withheld_total_ -= kLenPrefix + len;
  if (len > record_cap_) --big_withheld_;
  --s.withheld_records;
  ++s.frame_seq;
  --s.credit;
  if (s.outstanding == s.sent_lens.size()) grow_sent_lens(s);
  s.sent_lens[(s.sent_head + s.outstanding) & (s.sent_lens.size() - 1)] = len;
  ++s.outstanding;
  s.out_bytes += len;
  out_bytes_total_ += len;
  s.last_send_ns = now_ns;
  ++stats_.records;
  stats_.bytes += len;
}

void PeerSender::grow_sent_lens(Slot& s) {
  const size_t size = s.sent_lens.size();
  std::vector<uint32_t> grown(std::max<size_t>(8, 2 * size));
  for (size_t i = 0; i < s.outstanding; ++i) grown[i] = s.sent_lens[(s.sent_head + i) & (size - 1)];
  s.sent_lens = std::move(grown);
  s.sent_head = 0;
}

void PeerSender::discard(Slot& s) {
  for (size_t at = s.head; at < s.withheld.size(); at += kLenPrefix + load_len(s.withheld.data() + at)) {
    if (load_len(s.withheld.data() + at) > record_cap_) --big_withheld_;
  }
  withheld_total_ -= s.withheld.size() - s.head;
  s.withheld.clear();
  s.head = 0;
  s.withheld_records = 0;
}

void PeerSender::enqueue(proto::SlotId id, Slot& s) {
  if (s.queued) return;
  s.queued = true;
  ready_.push_back(id);
}

bool PeerSender::sendable(const Slot& s) const {
  return (has_data(s) && s.credit != 0) || (s.close_pending && !has_data(s));
}

bool PeerSender::due(uint64_t now_ns, FlushReason* why) const {
  if (liveness_pending_ != 0 || now_ns >= next_tick_ns_) {
    *why = FlushReason::kLiveness;
    return true;
  }
  // Manual: nothing but liveness moves before flush_batch(), a full batch
  // included (a forward pass is then one tx_burst); what may be staged
  // meanwhile is bounded by credit and the byte budgets, as always.
  if (ready_.empty()) return false;
  // A flush asked for (flush_batch(), or the Manual policy): build() finds
  // what may go as it writes, and calls a batch it filled kClamp. (A scan
  // here read every slot of the batch a second time.)
  if (kicked_ || config_.flush.kind == FlushPolicy::Kind::kManual) {
    *why = FlushReason::kManual;
    return true;
  }
  // Auto: whether anything may go, and whether a batch's worth may: the
  // scan stops at a full batch (its cost is a batch, never every slot).
  size_t bytes = 0;
  bool any = false;
  for (size_t i = 0; i < ready_.size() && bytes < record_cap_; ++i) {
    const Slot* s = slots_.find(ready_[i]);
    if (s == nullptr || !may_go(*s)) continue;
    any = true;
    bytes += s->withheld.size() - s->head;  // an upper bound of what goes
  }
  if (!any) return false;
  if (bytes >= record_cap_) {
    *why = FlushReason::kClamp;
  } else if (config_.flush.kind == FlushPolicy::Kind::kAuto && config_.flush.on_admission) {
    *why = FlushReason::kOnAdmission;
  } else if (config_.flush.kind == FlushPolicy::Kind::kAuto && config_.flush.max_linger_ns != 0 &&
             now_ns - staged_since_ns_ >= config_.flush.max_linger_ns) {
    *why = FlushReason::kLinger;
  } else {
    return false;
  }
  return true;
}

uint64_t PeerSender::staged_records() const {
  uint64_t n = 0;
  for (const proto::SlotId id : ready_) {
    const Slot* s = slots_.find(id);
    if (s != nullptr) n += std::min<uint64_t>(s->withheld_records, s->credit);
  }
  return n;
}

bool PeerSender::has_staged() const {
  for (size_t i = 0; i < ready_.size(); ++i) {
    const Slot* s = slots_.find(ready_[i]);
    if (s != nullptr && may_go(*s)) return true;
  }
  return false;
}

size_t PeerSender::build(uint64_t now_ns, proto::MutableBytes out, FlushReason* why) {
  FlushReason reason = FlushReason::kNone;
  if (why != nullptr) *why = reason;
  // Stall deadlines: a slot at its byte budget with no credit for too long
  // is killed (its consumer sees Dropped), and only that slot.
  size_t still = 0;
  for (const proto::SlotId id : stalling_) {
    Slot* s = slots_.find(id);
    if (s == nullptr || s->full_since_ns == 0 || s->state == State::kClosed) continue;  // credit came
    if (now_ns - s->full_since_ns < config_.stall_deadline_ns) {
      stalling_[still++] = id;
      continue;
    }
    discard(*s);
    if (!s->close_pending) ++liveness_pending_;
    s->state = State::kClosed;
    s->close_pending = true;
    s->close_reason = proto::CloseReason::kPeerGone;
    s->full_since_ns = 0;
    ++stats_.stalled_killed;
    enqueue(id, *s);
  }
  stalling_.resize(still);
  if (!due(now_ns, &reason)) return 0;
  // A fenced record (larger than the record cap) goes alone in its batch,
  // as soon as it is at its slot's head with credit: the slot's later
  // records wait behind it in its FIFO, the other slots do not. (Looked
  // for only while some slot withholds one.)
  for (size_t i = 0; big_withheld_ != 0 && i < ready_.size(); ++i) {
    const proto::SlotId id = ready_[i];
    Slot* s = slots_.find(id);
    if (s == nullptr || !may_go(*s) || s->open_pending) continue;
    const uint32_t len = head_len(*s);
    if (len <= record_cap_) continue;
    const size_t need = proto::kBatchHeaderBytes + proto::kRecordHeaderBytes + len;
    if (out.size() < need) continue;  // the caller's buffer cannot hold it (see build())
    proto::BatchWriter fw(out.first(need), epoch_, batch_seq_);
    if (!fw.add_data(id.pack(), s->frame_seq, proto::ConstBytes(s->withheld.data() + s->head + kLenPrefix, len))) continue;
    took(*s, len, now_ns);
    ++stats_.fenced;
    ++batch_seq_;
    ++stats_.batches;
    ++stats_.by_reason[static_cast<size_t>(FlushReason::kClamp)];
    if (why != nullptr) *why = FlushReason::kClamp;
    return fw.finish();
  }
  const size_t cap = std::min<size_t>(out.size(), std::min(config_.max_batch_bytes, kMaxBatchCeiling));
  proto::BatchWriter w(out.first(cap), epoch_, batch_seq_);
  // Liveness first: OpenSlots, then heartbeats for the slots idle this
  // interval (one per-peer tick; they spend no credit and never wait
  // behind data).
  size_t opened = 0;
  for (; opened < opening_.size(); ++opened) {
    const proto::SlotId id = opening_[opened];
    Slot* s = slots_.find(id);
    if (s == nullptr || !s->open_pending) continue;
    if (!w.add_open_slot(id.pack(), 0, proto::OpenSlotBody{s->anchor_id, s->session_id})) break;
    s->open_pending = false;
    s->state = s->state == State::kOpening ? State::kOpen : s->state;
    --liveness_pending_;
    if (sendable(*s)) enqueue(id, *s);  // its records staged meanwhile may go now
  }
  opening_.erase(opening_.begin(), opening_.begin() + static_cast<std::ptrdiff_t>(opened));
  if (now_ns >= next_tick_ns_) {
    // The tick at next_tick_ns_ covers the interval before it: a slot that
    // sent (or was sent to) since its start needs no beat.
    const uint64_t interval = config_.heartbeat_interval_ns;
    const uint64_t since = next_tick_ns_ >= interval ? next_tick_ns_ - interval : 0;
    bool all = true;
    slots_.for_each([&](proto::SlotId id, Slot& s) {
      // A finishing slot beats too: its last records (and the terminal) may
      // wait for credit for longer than the receiver's watchdog allows.
      if (!all || id.index < beat_from_ || (s.state != State::kOpen && s.state != State::kFinishing) || s.open_pending ||
          s.last_send_ns >= since) {
        return;
      }
      if (!w.add_slot_heartbeat(id.pack(), s.frame_seq)) {
        all = false;
        beat_from_ = id.index;  // the batch is full: the next one goes on from here
        return;
      }
      ++stats_.heartbeats;  // last_send_ns stays: it tracks records, not beats
    });
    if (all) {
      next_tick_ns_ += ((now_ns - next_tick_ns_) / interval + 1) * interval;  // phase kept
      beat_from_ = 0;
    }
  }
  // Data, a record per slot per turn (no slot monopolises a batch: the
  // ready FIFO is a round robin), then each finishing slot's terminal
  // after its last record. Each record costs O(1): a slot leaves the FIFO
  // when it has nothing more that may go, and a slot held back only by the
  // byte budgets goes to the back once per batch.
  size_t idle_turns = 0;  // turns since the last record or terminal went: a whole lap of them ends the batch
  bool filled = false;    // a record or terminal did not fit: the batch is full
  while (!ready_.empty() && idle_turns < ready_.size()) {
    const proto::SlotId id = ready_.front();
    Slot* s = slots_.find(id);
    if (s == nullptr) {
      ready_.pop_front();
      continue;
    }
    bool wrote = false;
    // A slot whose OpenSlot has not gone yet (the batch was full of them) waits for it.
    if (!s->open_pending && may_go(*s) && head_len(*s) <= record_cap_) {
      const uint32_t len = head_len(*s);
      const proto::ConstBytes body(s->withheld.data() + s->head + kLenPrefix, len);
      if (!w.add_data(id.pack(), s->frame_seq, body)) {  // full: the slot stays at the front
        filled = true;
        break;
      }
      took(*s, len, now_ns);
      if (s->credit == 0 && has_data(*s)) ++stats_.credit_exhausted;  // the rest waits for credit
      wrote = true;
    }
    if (!s->open_pending && s->close_pending && !has_data(*s)) {
      if (!w.add_close_slot(id.pack(), s->frame_seq, s->close_reason)) {  // the terminal leads the next batch
        filled = true;
        break;
      }
      s->close_pending = false;
      --liveness_pending_;
      s->state = State::kClosed;
      forget_outstanding(*s);  // the receiver ends the stream as it applies this: its bytes leave the peer's count
      ready_.pop_front();
      s->queued = false;
      slots_.close(id);  // terminal-then-close is written: the index is free
      idle_turns = 0;
      continue;
    }
    ready_.pop_front();
    if (s->open_pending || sendable(*s)) {
      ready_.push_back(id);  // more to write: its next turn after the others'
    } else {
      s->queued = false;
    }
    idle_turns = wrote ? 0 : idle_turns + 1;
  }
  if (w.record_count() == 0) return 0;
  if (filled && reason == FlushReason::kManual) reason = FlushReason::kClamp;
  const bool staged = has_staged();
  staged_since_ns_ = staged ? now_ns : 0;
  kicked_ = kicked_ && staged;  // Auto: a flush_batch() makes what is staged go now
  ++batch_seq_;
  ++stats_.batches;
  ++stats_.by_reason[static_cast<size_t>(reason)];
  if (why != nullptr) *why = reason;
  return w.finish();
}

uint64_t PeerSender::next_deadline_ns() const {
  uint64_t t = next_tick_ns_;
  for (const proto::SlotId id : stalling_) {
    const Slot* s = slots_.find(id);
    if (s != nullptr && s->full_since_ns != 0) t = std::min(t, s->full_since_ns + config_.stall_deadline_ns);
  }
  // Linger only while something may go (records held back by credit or the
  // byte budgets wait for it: their deadline would be in the past, a spin).
  if (staged_since_ns_ != 0 && config_.flush.kind == FlushPolicy::Kind::kAuto && config_.flush.max_linger_ns != 0 &&
      has_staged()) {
    t = std::min(t, staged_since_ns_ + config_.flush.max_linger_ns);
  }
  return t;
}


void PeerSender::apply_control(proto::ConstBytes batch) {
  proto::BatchReader r;
  if (r.open(batch) != proto::DecodeError::kOk || r.header().peer_epoch != epoch_) {
    ++stats_.control_rejected;
    return;
  }
  ++stats_.control_batches;
  proto::BatchRecord rec;
  while (r.next(&rec)) {
    if (rec.header.type == proto::RecordType::kCreditUpdate) {
      on_credit(rec.header.slot, rec.credit_delta);
    } else if (rec.header.type == proto::RecordType::kCloseSlot && rec.reason != proto::CloseReason::kTerminalSent) {
      on_close(rec.header.slot, rec.reason);
    } else {
      ++stats_.control_wrong_kind;  // data, opens, terminals: only the owner sends those
    }
  }
  if (r.status() != proto::DecodeError::kOk) ++stats_.control_rejected;
}

}  // namespace ringfire::mux
