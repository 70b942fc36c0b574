// peer_receiver.cc — applying one peer's batches into its streams, and
// what goes back to it (see peer_receiver.h).
#include "mux/peer_receiver.h"

#include <algorithm>

#include "mux/peer_sender.h"

namespace ringfire::mux {

struct PeerReceiver::Stream {
  uint64_t anchor_id = 0;
  uint64_t session_id = 0;
  uint32_t window = 0;          // C
  bool bound = false;           // the peer's OpenSlot claimed it
  bool ended = false;           // its end is queued (finished or dropped)
  uint32_t slot = 0;            // the peer's SlotId, packed, once bound
  uint32_t expected_seq = 0;    // the next frame_seq
  uint32_t data_items = 0;      // data items buffered (<= window)
  uint32_t owed = 0;            // frames read, not yet granted back
  bool in_owed = false;
  size_t at = 0;                // its index in streams_ (freed by swap and pop: O(1))
  size_t owed_at = 0;           // in_owed: its index in credit_owed_
  uint64_t bytes = 0;           // data bytes buffered
  uint64_t last_seen_ns = 0;    // a record or heartbeat for it
  uint64_t last_data_ns = 0;    // a data record for it
  std::deque<StreamItem> items;
};

PeerReceiver::PeerReceiver(const MuxConfig& config) : config_(config) {}
PeerReceiver::~PeerReceiver() = default;

PeerReceiver::Stream* PeerReceiver::expect(uint64_t anchor_id, uint64_t session_id, uint32_t credit) {
  if (streams_.size() >= config_.max_streams_per_peer || credit == 0) return nullptr;
  auto s = std::make_unique<Stream>();
  s->anchor_id = anchor_id;
  s->session_id = session_id;
  s->window = credit;
  if (!awaiting_.emplace(std::pair{anchor_id, session_id}, s.get()).second) return nullptr;  // registered already
  s->at = streams_.size();
  streams_.push_back(std::move(s));
  ++live_;
  return streams_.back().get();
}

bool PeerReceiver::pop(Stream* s, StreamItem* out) {
  if (s->items.empty()) return false;
  *out = std::move(s->items.front());
  s->items.pop_front();
  if (out->kind == StreamItem::Kind::kData) {
    --s->data_items;
    s->bytes -= out->bytes.size();
    peer_bytes_ -= out->bytes.size();
    if (s->bound) {
      ++s->owed;
      owe_credit(s);
    }
    return true;
  }
  free_stream(s);  // its end was read: nothing more will come
  return true;
}

bool PeerReceiver::grant_due(const Stream* s) const { return uint64_t{s->owed} * 4 >= s->window; }

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
  s->owed = 0;
}

void PeerReceiver::end(Stream* s, StreamItem::Kind kind) {
  if (s->ended) return;
  s->ended = true;
  unbind(s);
  s->items.push_back(StreamItem{kind, {}});  // the reserved place: never past C + 1
  ++(kind == StreamItem::Kind::kFinished ? stats_.finished : stats_.dropped);
}

void PeerReceiver::free_stream(Stream* s) {
  unbind(s);
  if (const auto it = awaiting_.find(std::pair{s->anchor_id, s->session_id}); it != awaiting_.end() && it->second == s) {
    awaiting_.erase(it);
  }
  peer_bytes_ -= s->bytes;
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
    if (s->bound) end(s.get(), StreamItem::Kind::kDropped);
  }
  slots_.clear();
  credit_owed_.clear();
  for (auto& s : streams_) s->in_owed = false;
  closes_owed_.clear();
  epoch_ = 0;
}

void PeerReceiver::apply(proto::ConstBytes batch, uint64_t now_ns, PeerSender* owner) {
  proto::BatchReader r;
  if (r.open(batch) != proto::DecodeError::kOk) {
    ++stats_.malformed;
    return;
  }
  const proto::BatchHeader& h = r.header();
  if (h.peer_epoch != epoch_) {
    if (epoch_ != 0 && h.peer_epoch < epoch_) {
      ++stats_.stale_epoch;  // a batch from before the peer came back: discarded whole
      return;
    }
    if (epoch_ != 0) peer_lost();  // a new epoch: the old one's streams are gone
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
          end(b.stream, StreamItem::Kind::kDropped);
        }
        const auto it = awaiting_.find(std::pair{rec.open.anchor_id, rec.open.session_id});
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
          owe_close(raw, proto::CloseReason::kProtocolError);
          end(s, StreamItem::Kind::kDropped);
          continue;
        }
        ++s->expected_seq;
        ++s->data_items;
        s->last_data_ns = now_ns;
        s->bytes += rec.body.size();
        peer_bytes_ += rec.body.size();
        s->items.push_back(StreamItem{StreamItem::Kind::kData, {rec.body.begin(), rec.body.end()}});
        ++stats_.records;
        continue;
      }
      case proto::RecordType::kCloseSlot:
        end(s, rec.reason == proto::CloseReason::kTerminalSent ? StreamItem::Kind::kFinished
                                                               : StreamItem::Kind::kDropped);
        continue;
      case proto::RecordType::kSlotHeartbeat:
        continue;  // last_seen moved: alive
      default:
        continue;
    }
  }
  if (r.status() != proto::DecodeError::kOk) ++stats_.malformed;
}

PeerReceiver::Liveness PeerReceiver::liveness(const Stream* s, uint64_t now_ns) const {
  const uint64_t interval = config_.heartbeat_interval_ns;
  auto since = [&](uint64_t t) { return now_ns > t ? now_ns - t : 0; };  // a clock read before the record: 0
  if (since(s->last_seen_ns) > 3 * interval) return Liveness::kDead;
  return since(s->last_data_ns) <= interval ? Liveness::kAlive : Liveness::kStarved;
}

void PeerReceiver::watchdog(uint64_t now_ns) {
  for (auto& s : streams_) {
    if (s->bound && !s->ended && liveness(s.get(), now_ns) == Liveness::kDead) {
      owe_close(s->slot, proto::CloseReason::kCancelled);  // the owner, if it is there, stops too
      end(s.get(), StreamItem::Kind::kDropped);
      ++stats_.watchdog_dead;
    }
  }
}

size_t PeerReceiver::build_control(proto::MutableBytes out, uint64_t epoch) {
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
    const bool over = s->bytes >= config_.slot_byte_budget || peer_bytes_ >= config_.peer_byte_budget;
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
    s->owed = 0;
    s->in_owed = false;
  }
  credit_owed_.resize(keep);
  if (w.record_count() == 0) return 0;
  ++control_seq_;
  return w.finish();
}

}  // namespace ringfire::mux
