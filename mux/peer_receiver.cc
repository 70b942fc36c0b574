// peer_receiver.cc — applying one peer's batches into its streams, and
// what goes back to it (see peer_receiver.h).
#include "mux/peer_receiver.h"

#include <algorithm>
#include <cstring>

#include "mux/peer_sender.h"

namespace ringfire::mux {
namespace {
constexpr size_t kLenPrefix = 4;
}  // namespace

const char* end_reason_name(EndReason r) {
  switch (r) {
    case EndReason::kNone: return "finished";
    case EndReason::kProducerGone: return "producer_gone";
    case EndReason::kChannelLost: return "channel_lost";
    case EndReason::kProtocolError: return "protocol_error";
    case EndReason::kOverBudget: return "over_budget";
    case EndReason::kSilent: return "silent";
    case EndReason::kNeverOpened: return "never_opened";
    case EndReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

struct PeerReceiver::Stream {
  uint64_t anchor_id = 0;
  uint64_t session_id = 0;
  void* user = nullptr;         // the consumer's (expect)
  uint32_t window = 0;          // C
  bool bound = false;           // the peer's OpenSlot claimed it
  bool ended = false;           // its end is queued (finished or dropped)
  uint32_t slot = 0;            // the peer's SlotId, packed, once bound
  uint32_t expected_seq = 0;    // the next frame_seq
  uint32_t first_seq = 0;       // the OpenSlot's frame_seq: frames delivered = expected - first
  uint32_t data_items = 0;      // data items buffered (<= window)
  uint32_t owed = 0;            // frames read, not yet granted back
  uint64_t owed_bytes = 0;      // ... and their data bytes
  bool in_owed = false;
  size_t at = 0;                // its index in streams_ (freed by swap and pop: O(1))
  size_t owed_at = 0;           // in_owed: its index in credit_owed_
  uint64_t bytes = 0;           // data bytes buffered
  uint64_t registered_ns = 0;   // expect()'s time: the accept timeout runs from it
  uint64_t last_seen_ns = 0;    // a record or heartbeat for it
  uint64_t last_data_ns = 0;    // a data record for it
  // The buffer: data items as [u32 len][body] from `head`, in order, then
  // (end_queued) the end. No allocation per item once it has grown.
  std::vector<std::byte> fifo;
  size_t head = 0;
  bool end_queued = false;
  StreamItem::Kind end_kind = StreamItem::Kind::kFinished;
  EndReason end_reason = EndReason::kNone;
  bool empty() const { return head == fifo.size() && !end_queued; }
  uint32_t delivered() const { return expected_seq - first_seq; }  // data frames it delivered (read or not)
};

// A spare's buffer: a few tokens' items before it has to grow.
constexpr size_t kSpareFifoBytes = 256;

void PeerReceiver::SpareDeleter::operator()(Stream* s) const { delete s; }

PeerReceiver::Spare PeerReceiver::make_spare() {
  Spare s(new Stream());
  s->fifo.reserve(kSpareFifoBytes);
  return s;
}

PeerReceiver::PeerReceiver(const MuxConfig& config) : config_(config) {}
PeerReceiver::~PeerReceiver() = default;

PeerReceiver::Stream* PeerReceiver::expect(uint64_t anchor_id, uint64_t session_id, uint32_t credit, uint64_t now_ns,
                                           void* user, Spare* spare) {
  if (streams_.size() >= config_.max_streams_per_peer || credit == 0) return nullptr;
  const auto [entry, fresh] = awaiting_.try_emplace(std::pair{anchor_id, session_id}, nullptr);
  if (!fresh) return nullptr;  // registered already (the spare stays the caller's)
  std::unique_ptr<Stream> s(spare != nullptr && *spare != nullptr ? spare->release() : new Stream());
  entry->second = s.get();
  s->anchor_id = anchor_id;
  s->session_id = session_id;
  s->window = credit;
  s->user = user;
  s->registered_ns = now_ns;
  s->at = streams_.size();
  streams_.push_back(std::move(s));
  ++live_;
  return streams_.back().get();
}

bool PeerReceiver::has_items(const Stream* s) const { return !s->empty(); }

bool PeerReceiver::pop(Stream* s, Popped* out) {
  if (s->head < s->fifo.size()) {
    uint32_t len;
    std::memcpy(&len, s->fifo.data() + s->head, kLenPrefix);
    out->kind = StreamItem::Kind::kData;
    out->reason = EndReason::kNone;
    out->frames = 0;
    out->bytes = proto::ConstBytes(s->fifo.data() + s->head + kLenPrefix, len);
    s->head += kLenPrefix + len;  // an emptied buffer starts over at the front in push_data (the view stays valid)
    --s->data_items;
    s->bytes -= len;
    peer_bytes_ -= len;
    if (!s->ended) live_bytes_ -= len;
    if (s->bound) {
      ++s->owed;
      ++owed_frames_;
      s->owed_bytes += len;
      owed_bytes_ += len;
      if (grant_due(s)) owe_credit(s);  // smaller grants wait (build_control's sweep)
    }
    return true;
  }
  if (!s->end_queued) return false;
  out->kind = s->end_kind;
  out->reason = s->end_reason;
  out->frames = s->delivered();
  out->bytes = {};
  free_stream(s);  // its end was read: nothing more will come
  return true;
}

bool PeerReceiver::pop(Stream* s, StreamItem* out) {
  Popped p;
  if (!pop(s, &p)) return false;
  out->kind = p.kind;
  out->reason = p.reason;
  out->frames = p.frames;
  out->bytes.assign(p.bytes.begin(), p.bytes.end());
  return true;
}

bool PeerReceiver::grant_due(const Stream* s) const {
  // Or what the owner counts outstanding on it (read back, and still
  // buffered here) at 3/4 of the slot's budget: its next record may not fit.
  return uint64_t{s->owed} * 4 >= s->window || s->owed_bytes * 4 >= config_.slot_byte_budget ||
         (s->owed_bytes + s->bytes) * 4 >= uint64_t{config_.slot_byte_budget} * 3;
}

bool PeerReceiver::sweep_due(uint64_t now_ns) const {
  if (owed_frames_ == 0) return false;
  return owed_bytes_ * 4 >= config_.peer_byte_budget ||
         (owed_bytes_ + live_bytes_) * 4 >= uint64_t{config_.peer_byte_budget} * 3 || now_ns >= sweep_at_ns();
}

void PeerReceiver::cancel(Stream* s) {
  if (s->bound) owe_close(s->slot, proto::CloseReason::kCancelled);
  unbind(s);
  free_stream(s);
}

void PeerReceiver::owe_credit(Stream* s) {
  if (s->in_owed) return;
  s->in_owed = true;
  s->owed_at = credit_owed_.size();
  credit_owed_.push_back(s);
}

void PeerReceiver::owe_close(uint32_t raw_slot, proto::CloseReason reason) {
  closes_owed_.push_back(Close{raw_slot, reason});
}

void PeerReceiver::unbind(Stream* s) {
  if (!s->bound) return;
  const proto::SlotId id = proto::SlotId::unpack(s->slot);
  if (id.index < slots_.size() && slots_[id.index].stream == s) slots_[id.index].stream = nullptr;
  s->bound = false;
  forget_owed(s);
}

void PeerReceiver::forget_owed(Stream* s) {
  owed_frames_ -= s->owed;
  s->owed = 0;
  owed_bytes_ -= s->owed_bytes;
  s->owed_bytes = 0;
}

void PeerReceiver::readable(Stream* s, bool was_empty) {
  if (was_empty && hook_ != nullptr) hook_(hook_ctx_, s->user);
}

void PeerReceiver::end(Stream* s, StreamItem::Kind kind, EndReason reason) {
  if (s->ended) return;
  s->ended = true;
  unbind(s);
  if (const auto it = awaiting_.find(std::pair{s->anchor_id, s->session_id}); it != awaiting_.end() && it->second == s) {
    awaiting_.erase(it);  // never claimed: no OpenSlot may claim it now
  }
  live_bytes_ -= s->bytes;  // what it still buffers no longer counts against the peer's budget
  const bool was_empty = s->empty();
  s->end_queued = true;  // the reserved place: never past C + 1
  s->end_kind = kind;
  s->end_reason = kind == StreamItem::Kind::kFinished ? EndReason::kNone : reason;
  ++(kind == StreamItem::Kind::kFinished ? stats_.finished : stats_.dropped);
  if (kind == StreamItem::Kind::kDropped && ended_hook_ != nullptr) {
    ended_hook_(ended_ctx_, s->user, reason, s->delivered());
  }
  readable(s, was_empty);
}

void PeerReceiver::push_data(Stream* s, proto::ConstBytes body) {
  const bool was_empty = s->empty();
  if (s->head == s->fifo.size()) {  // emptied: start over at the front (keeps its capacity)
    s->fifo.resize(0);
    s->head = 0;
  } else if (s->head != 0 && s->head * 2 >= s->fifo.size()) {  // compact the read prefix (amortised O(1))
    s->fifo.erase(s->fifo.begin(), s->fifo.begin() + static_cast<std::ptrdiff_t>(s->head));
    s->head = 0;
  }
  const auto len = static_cast<uint32_t>(body.size());
  const size_t at = s->fifo.size();
  s->fifo.resize(at + kLenPrefix + len);
  std::memcpy(s->fifo.data() + at, &len, kLenPrefix);
  if (len != 0) std::memcpy(s->fifo.data() + at + kLenPrefix, body.data(), len);
  ++s->data_items;
  s->bytes += len;
  peer_bytes_ += len;
  live_bytes_ += len;
  ++stats_.records;
  readable(s, was_empty);
}

void PeerReceiver::free_stream(Stream* s) {
  unbind(s);
  if (const auto it = awaiting_.find(std::pair{s->anchor_id, s->session_id}); it != awaiting_.end() && it->second == s) {
    awaiting_.erase(it);
  }
  peer_bytes_ -= s->bytes;
  if (!s->ended) live_bytes_ -= s->bytes;
  // O(1) whatever the number of streams (thousands may end at once): its
  // credit entry becomes a hole build_control drops, its place in streams_
  // goes to the last stream.
  if (s->in_owed) credit_owed_[s->owed_at] = nullptr;
  const size_t at = s->at;
  if (at < streams_.size() && streams_[at].get() == s) {
    if (at + 1 != streams_.size()) {
      streams_[at] = std::move(streams_.back());
      streams_[at]->at = at;
    }
    streams_.pop_back();  // s is freed here
    --live_;
  }
}

void PeerReceiver::peer_lost() {
  for (auto& s : streams_) {
    if (s->ended) continue;
    if (!s->bound) ++stats_.never_opened;
    end(s.get(), StreamItem::Kind::kDropped, s->bound ? EndReason::kChannelLost : EndReason::kNeverOpened);
  }
  awaiting_.clear();
  slots_.clear();
  credit_owed_.clear();
  for (auto& s : streams_) s->in_owed = false;
  closes_owed_.clear();
  epoch_ = 0;
}

void PeerReceiver::fail_slot(Stream* s, uint32_t raw, EndReason reason) {
  owe_close(raw, proto::CloseReason::kProtocolError);
  end(s, StreamItem::Kind::kDropped, reason);
}

PeerReceiver::Applied PeerReceiver::apply(proto::ConstBytes batch, uint64_t now_ns, PeerSender* owner) {
  proto::BatchReader r;
  if (r.open(batch) != proto::DecodeError::kOk) {
    ++stats_.malformed;
    return Applied::kDone;
  }
  const proto::BatchHeader& h = r.header();
  if (pinned_epoch_ != 0 && h.peer_epoch != pinned_epoch_) {
    ++stats_.foreign_epoch;  // another node's batches, in a channel its NODE did not announce
    return Applied::kForeign;
  }
  if (h.peer_epoch != epoch_) {
    if (epoch_ != 0 && h.peer_epoch < epoch_) {
      ++stats_.stale_epoch;  // a batch from before the peer came back: discarded whole
      return Applied::kDone;
    }
    if (epoch_ != 0) {  // a new epoch: the old one's streams are gone (the new one's attach anew)
      for (auto& s : streams_) {
        if (s->bound) end(s.get(), StreamItem::Kind::kDropped, EndReason::kChannelLost);
      }
      slots_.clear();
      closes_owed_.clear();  // the dead epoch's slots: the new one may reuse their indices
    }
    epoch_ = h.peer_epoch;
    next_batch_seq_ = h.batch_seq;
  }
  if (h.batch_seq != next_batch_seq_) ++stats_.batch_gaps;
  next_batch_seq_ = h.batch_seq + 1;
  ++stats_.batches;

  proto::BatchRecord rec;
  while (r.next(&rec)) {
    const uint32_t raw = rec.header.slot;
    const proto::SlotId id = proto::SlotId::unpack(raw);
    switch (rec.header.type) {
      case proto::RecordType::kCreditUpdate:  // receiver -> owner: for this node's own streams
        if (owner != nullptr) owner->on_credit(raw, rec.credit_delta);
        continue;
      case proto::RecordType::kCloseSlot:
        if (rec.reason != proto::CloseReason::kTerminalSent && rec.reason != proto::CloseReason::kPeerGone) {
          if (owner != nullptr) owner->on_close(raw, rec.reason);  // receiver -> owner, likewise
          continue;
        }
        break;
      case proto::RecordType::kOpenSlot: {
        if (id.index >= config_.max_streams_per_peer) {
          ++stats_.protocol_errors;
          owe_close(raw, proto::CloseReason::kProtocolError);
          continue;
        }
        if (id.index >= slots_.size()) slots_.resize(id.index + 1);
        Bound& b = slots_[id.index];
        if (b.stream != nullptr) {  // the index is still live here: the peer reused it early
          ++stats_.protocol_errors;
          const bool same_id = b.stream->slot == raw;
          fail_slot(b.stream, b.stream->slot, EndReason::kProtocolError);  // its owner is told too
          // The same id again: the close just owed names this OpenSlot's
          // slot too, so nothing may be bound to it (no feed would come).
          if (same_id) continue;
        }
        const std::pair key{rec.open.anchor_id, rec.open.session_id};
        auto it = awaiting_.find(key);
        if (it == awaiting_.end() && claim_hook_ != nullptr &&
            claim_hook_(claim_ctx_, claim_peer_, key.first, key.second, now_ns) != nullptr) {
          ++stats_.claimed_on_open;
          it = awaiting_.find(key);  // expect() put it there
        }
        Stream* found = it == awaiting_.end() ? nullptr : it->second;
        if (found != nullptr) awaiting_.erase(it);  // claimed: a second OpenSlot for it is unknown
        if (found == nullptr) {
          ++stats_.unknown_anchor;
          owe_close(raw, proto::CloseReason::kUnknownSlot);
          continue;
        }
        b = Bound{id.generation, found};
        found->bound = true;
        found->slot = raw;
        found->expected_seq = rec.header.frame_seq;
        found->first_seq = rec.header.frame_seq;
        found->last_seen_ns = now_ns;
        found->last_data_ns = now_ns;
        continue;
      }
      default:
        break;
    }
    // The rest name a slot this side holds.
    Stream* s = id.index < slots_.size() ? slots_[id.index].stream : nullptr;
    if (s == nullptr) {
      ++stats_.unknown_slot;
      continue;
    }
    if (slots_[id.index].generation != id.generation) {
      ++stats_.generation_mismatch;  // a stale record for an index that has a new occupant
      continue;
    }
    s->last_seen_ns = now_ns;
    switch (rec.header.type) {
      case proto::RecordType::kData: {
        if (rec.header.frame_seq != s->expected_seq || s->data_items >= s->window) {
          // Out of order, or past the credit granted: this slot only.
          ++stats_.protocol_errors;
          if (s->data_items >= s->window) ++stats_.reader_stall;
          fail_slot(s, raw, EndReason::kProtocolError);
          continue;
        }
        // The byte budgets are the memory bound: an owner keeps what its open
        // slots have outstanding under both (the peer's: over streams not yet
        // ended, which is what the owner can see), so a record past them is
        // the peer's fault, and only its slot pays.
        if (s->bytes + rec.body.size() > config_.slot_byte_budget ||
            live_bytes_ + rec.body.size() > config_.peer_byte_budget) {
          ++stats_.over_budget;
          fail_slot(s, raw, EndReason::kOverBudget);
          continue;
        }
        ++s->expected_seq;
        s->last_data_ns = now_ns;
        push_data(s, rec.body);
        continue;
      }
      case proto::RecordType::kCloseSlot:
        if (rec.reason == proto::CloseReason::kTerminalSent) {
          end(s, StreamItem::Kind::kFinished, EndReason::kNone);
        } else {
          end(s, StreamItem::Kind::kDropped, EndReason::kProducerGone);
        }
        continue;
      case proto::RecordType::kSlotHeartbeat:
        continue;  // last_seen moved: alive
      default:
        continue;
    }
  }
  if (r.status() != proto::DecodeError::kOk) ++stats_.malformed;
  return Applied::kDone;
}

PeerReceiver::Liveness PeerReceiver::liveness(const Stream* s, uint64_t now_ns) const {
  const uint64_t interval = config_.heartbeat_interval_ns;
  auto since = [&](uint64_t t) { return now_ns > t ? now_ns - t : 0; };  // a clock read before the record: 0
  if (since(s->last_seen_ns) > 3 * interval) return Liveness::kDead;
  return since(s->last_data_ns) <= interval ? Liveness::kAlive : Liveness::kStarved;
}

void PeerReceiver::watchdog(uint64_t now_ns) {
  for (auto& s : streams_) {
    if (s->ended) continue;
    if (s->bound && liveness(s.get(), now_ns) == Liveness::kDead) {
      owe_close(s->slot, proto::CloseReason::kCancelled);  // the owner, if it is there, stops too
      end(s.get(), StreamItem::Kind::kDropped, EndReason::kSilent);
      ++stats_.watchdog_dead;
    } else if (!s->bound && now_ns >= s->registered_ns && now_ns - s->registered_ns >= config_.accept_timeout_ns) {
      ++stats_.never_opened;  // answered, never claimed: it ends, and its anchor is free again
      end(s.get(), StreamItem::Kind::kDropped, EndReason::kNeverOpened);
    }
  }
}

uint64_t PeerReceiver::next_expiry_ns() const {
  uint64_t t = UINT64_MAX;
  for (const auto& [key, s] : awaiting_) t = std::min(t, s->registered_ns + config_.accept_timeout_ns);
  return t;
}

size_t PeerReceiver::build_control(proto::MutableBytes out, uint64_t epoch, uint64_t now_ns, bool sweep) {
  // The sweep: every stream's smaller grants (sweep_due).
  if ((sweep && owed_frames_ != 0) || sweep_due(now_ns)) {
    for (const auto& s : streams_) {
      if (s->owed != 0) owe_credit(s.get());
    }
    swept_ns_ = now_ns;
  }
  if (closes_owed_.empty() && credit_owed_.empty()) return 0;
  proto::BatchWriter w(out, epoch, control_seq_);
  size_t closes = 0;
  for (; closes < closes_owed_.size(); ++closes) {
    if (!w.add_close_slot(closes_owed_[closes].slot, 0, closes_owed_[closes].reason)) break;
  }
  closes_owed_.erase(closes_owed_.begin(), closes_owed_.begin() + static_cast<std::ptrdiff_t>(closes));
  size_t keep = 0;
  bool full = false;
  for (Stream* s : credit_owed_) {
    if (s == nullptr) continue;  // freed since it was owed
    const bool over = s->bytes >= config_.slot_byte_budget || live_bytes_ >= config_.peer_byte_budget;
    if (full || over || !s->bound || s->owed == 0) {
      if (over) ++stats_.credit_held;
      if (s->bound && s->owed != 0) {
        s->owed_at = keep;
        credit_owed_[keep++] = s;
      } else {
        s->in_owed = false;
      }
      continue;
    }
    if (!w.add_credit_update(s->slot, s->owed)) {
      full = true;
      s->owed_at = keep;
      credit_owed_[keep++] = s;
      continue;
    }
    stats_.credit_returned += s->owed;
    forget_owed(s);  // granted
    s->in_owed = false;
  }
  credit_owed_.resize(keep);
  if (w.record_count() == 0) return 0;
  ++control_seq_;
  return w.finish();
}

}  // namespace ringfire::mux
