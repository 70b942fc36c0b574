// readiness.cc — the consumer's reads: which anchors have items (their
// ready lists, kept from the receivers' readable hook and the per-stream
// path), the node's descriptor and poll() over every ready anchor, and
// Anchor::recv. Whoever reads applies the channels' ingress rings on its
// own thread, under mu, so an item needs no hand-off; a reader that waits
// arms NodeImpl::ready, which the channels' mirror workers signal after a
// commit. Any thread, under mu (never across a system call: the
// descriptor is drained and written, and other readers notified, outside it).
#include <poll.h>

#include <chrono>
#include <cstring>

#include "node/node_impl.h"
#include "ring/monotonic.h"

namespace ringfire::node {

// ---- the ready lists (under mu) -----------------------------------------

AnchorStream* NodeImpl::add_stream(AnchorState& a, uint64_t session) {
  std::unique_ptr<AnchorStream> s = a.spare_stream != nullptr ? std::move(a.spare_stream) : std::make_unique<AnchorStream>();
  s->anchor = &a;
  s->session = session;
  s->wire_session = session;
  s->at = a.streams.size();
  a.streams.push_back(std::move(s));
  return a.streams.back().get();
}

void NodeImpl::remove_stream(AnchorStream* s) {
  AnchorState& a = *s->anchor;
  if (s->queued) std::erase(a.ready, s);  // a stream cancelled with items left (rare: its anchor goes)
  if (s->tcp) s->tcp->owner = nullptr;
  const size_t at = s->at;
  if (at + 1 != a.streams.size()) {
    a.streams[at] = std::move(a.streams.back());
    a.streams[at]->at = at;
  }
  a.streams.pop_back();  // s is freed here
}

void NodeImpl::stream_readable(AnchorStream* s) {
  if (s->queued) return;
  s->queued = true;
  AnchorState& a = *s->anchor;
  a.ready.push_back(s);
  if (!a.listed && !a.paused) {
    a.listed = true;
    ready_anchors.push_back(a.shared_from_this());
  }
}

bool NodeImpl::take_item(AnchorState& a, Item* item, Polled* polled, std::vector<std::byte>* bytes, bool* wake_node) {
  while (!a.ready.empty()) {
    AnchorStream* s = a.ready.front();
    a.ready.pop_front();
    s->queued = false;
    if (s->behind) continue;  // a resume: its predecessor's items first (it is listed again after them)
    Item::Kind kind;
    mux::EndReason reason = mux::EndReason::kNone;
    uint32_t frames = 0;
    proto::ConstBytes data;
    Item tcp_item;
    if (s->tcp) {  // the per-stream path
      TcpStreamIn& t = *s->tcp;
      if (t.items.empty()) continue;
      *wake_node |= t.full();  // the node thread stopped reading it
      tcp_item = std::move(t.items.front());
      t.items.pop_front();
      t.bytes -= tcp_item.bytes.size();
      kind = tcp_item.kind;
      reason = tcp_item.reason;
      frames = tcp_item.frames;
      data = tcp_item.bytes;
      if (!t.items.empty()) stream_readable(s);  // the rest after the other ready streams: round robin
    } else {
      mux::PeerReceiver::Popped p;
      mux::PeerReceiver& rx = *s->peer->receiver;
      if (!rx.pop(s->stream, &p)) continue;
      kind = p.kind == mux::StreamItem::Kind::kData       ? Item::Kind::kData
             : p.kind == mux::StreamItem::Kind::kFinished ? Item::Kind::kFinished
                                                          : Item::Kind::kDropped;
      reason = p.reason;
      frames = p.frames + (p.kind == mux::StreamItem::Kind::kData ? 0 : a.frames_base);  // an end counts a resume's frames too
      data = p.bytes;
      if (kind == Item::Kind::kData) {
        *wake_node |= rx.grant_due(s->stream) || rx.sweep_due(0);  // credit to send back (0: not by time)
        if (rx.has_items(s->stream)) stream_readable(s);
      } else {
        *wake_node = true;  // a close may be owed, the position moves
      }
    }
    const uint64_t session = s->session;
    if (kind != Item::Kind::kData) {
      // Its end: the stream is over (the receiver freed its state).
      if (AnchorStream* next = s->superseded_by) {
        // A resume took it over: its end is not read; the stream that
        // goes on from it is read from here.
        next->behind = false;
        if (next->peer->receiver->has_items(next->stream)) stream_readable(next);
        remove_stream(s);
        continue;
      }
      if (a.resume_session != 0 && a.resume_from == s) {
        // Its channel ended and a resume may still come: the end is held
        // (read at the window's close if none did).
        a.held_end = Item{kind, session, {}, reason, frames};
        a.resume_from = nullptr;
        remove_stream(s);
        continue;
      }
      if (reason == mux::EndReason::kNeverOpened && s->resumed) {
        reason = mux::EndReason::kProducerGone;  // its resume was answered, then nobody went on: the stream is over
      } else if (reason == mux::EndReason::kNeverOpened) {
        a.attached_once = false;  // a stream no producer ever claimed leaves a single-sender anchor free
      }
      a.frames_base = 0;  // the anchor's stream is over: a later one counts from its own start
      remove_stream(s);
    }
    if (polled != nullptr) {
      *polled = Polled{a.id, session, kind, reason, frames, static_cast<uint32_t>(bytes->size()),
                       static_cast<uint32_t>(data.size())};
      bytes->insert(bytes->end(), data.begin(), data.end());
    }
    if (item != nullptr) {
      item->kind = kind;
      item->session = session;
      item->reason = reason;
      item->frames = frames;
      if (kind != Item::Kind::kData) {
        item->bytes.clear();
      } else if (s->tcp) {  // data: the stream is still there
        item->bytes = std::move(tcp_item.bytes);
      } else {
        item->bytes.assign(data.begin(), data.end());
      }
    }
    return true;
  }
  return false;
}

size_t NodeImpl::apply_all(bool by_reader, bool* wake_node, size_t max) {
  size_t n = 0;
  for (const auto& p : in) n += apply_ingress(*p, max, by_reader, wake_node);
  return n;
}

bool NodeImpl::channels_pending() const {
  for (const auto& p : in) {
    if (!p->dead && !p->failed && p->ingress && p->ingress->published() > p->ingress->cursor()) return true;
  }
  return false;
}

// ---- the node's descriptor and poll() ------------------------------------

int Node::fd() const { return impl_->ready.fd; }

bool Node::wait(uint64_t timeout_ns) const {
  impl_->wake_if_owed();  // before this reader sleeps
  pollfd pfd{impl_->ready.fd, POLLIN, 0};
  const int ms = static_cast<int>(std::min<uint64_t>((timeout_ns + 999'999) / 1'000'000, INT32_MAX));
  return ::poll(&pfd, 1, ms) == 1;
}

void Node::idle() { impl_->wake_if_owed(); }

size_t Node::poll(std::vector<Polled>* items, std::vector<std::byte>* bytes, size_t max) {
  NodeImpl& m = *impl_;
  m.wake_if_owed();  // what the last poll put off: its caller is done with those items
  m.ready.drain();  // before the look: what arrives after it makes the descriptor readable again
  size_t n = 0;
  bool wake_node = false, left = false;
  {
    std::lock_guard l(m.mu);
    ++m.counters.polls;
    // Bounded rounds: a peer whose records make no items (heartbeats, stale
    // slots) must not keep a reader here, holding mu, for as long as it sends.
    for (int round = 0;; ++round) {
      m.apply_all(true, &wake_node);
      while (n < max && !m.ready_anchors.empty()) {
        AnchorState& a = *m.ready_anchors.front();
        Polled p;
        while (n < max && !a.paused && m.take_item(a, nullptr, &p, bytes, &wake_node)) {
          items->push_back(p);
          ++n;
        }
        if (a.ready.empty() || a.paused) {
          a.listed = false;
          m.ready_anchors.pop_front();
        }
      }
      // Arm, then look once more: a commit between the apply and the arm
      // would otherwise be missed (and so would one after a full take: the
      // signal that woke this reader disarmed it).
      m.ready.arm();
      if (m.ready_anchors.empty() && !m.channels_pending()) break;
      m.ready.disarm();
      if (n >= max || round >= 2) {
        left = true;  // the caller comes back for the rest
        break;
      }
    }
    if (left) ++m.counters.ready_wakeups;
  }
  if (left) m.ready.kick();  // the descriptor stays readable
  if (wake_node) m.wake();
  return n;
}

// ---- Anchor --------------------------------------------------------------

bool Anchor::recv(Item* out, uint64_t timeout_ns) {
  NodeImpl& m = *node_;
  m.wake_if_owed();  // what the last recv put off
  std::unique_lock l(m.mu);
  bool wake_node = false;
  bool tell_others = false;  // other readers may have items (notified once mu is released: never under it)
  const uint64_t start = monotonic_ns();
  const uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
  bool got = false;
  for (;;) {
    // The channels are applied here, by the reader, so an item needs no
    // hand-off; what they deliver to other anchors wakes those anchors' readers.
    if (m.apply_all(true, &wake_node) != 0) tell_others = true;
    if ((got = m.take_item(*state_, out, nullptr, nullptr, &wake_node))) {
      // A node read by recv() alone never poll()s its ready list: what it
      // emptied leaves from the front here (a few a call: amortised O(1)).
      for (int k = 0; k < 4 && !m.ready_anchors.empty() && m.ready_anchors.front()->ready.empty(); ++k) {
        m.ready_anchors.front()->listed = false;
        m.ready_anchors.pop_front();
      }
      break;
    }
    const uint64_t now = monotonic_ns();
    if (timeout_ns == 0 || now >= deadline) break;
    const uint64_t slice = std::min(deadline - now, kWatchSliceNs);
    if (tell_others) {  // before this reader waits: mu released, the others told, then look again
      tell_others = false;
      l.unlock();
      m.items_cv.notify_all();
      l.lock();
      continue;
    }
    if (!m.watcher) {
      // This reader waits on the descriptor for every blocked reader: the
      // channels' workers signal it; it applies, the others are notified.
      m.watcher = true;
      m.ready.arm();
      if (m.channels_pending()) {
        m.ready.disarm();
        m.watcher = false;
        continue;
      }
      l.unlock();
      if (wake_node) m.wake();
      wake_node = false;
      m.wake_if_owed();  // before this reader sleeps
      pollfd pfd{m.ready.fd, POLLIN, 0};
      (void)::poll(&pfd, 1, static_cast<int>((slice + 999'999) / 1'000'000));
      m.ready.drain();
      l.lock();
      m.watcher = false;
      tell_others = true;  // another reader may take the watch (and its items may be in)
    } else {
      m.items_cv.wait_for(l, std::chrono::nanoseconds(slice));
    }
  }
  l.unlock();
  if (tell_others) m.items_cv.notify_all();
  if (wake_node) m.wake();
  return got;
}

void Anchor::cancel() {
  NodeImpl& m = *node_;
  {
    std::lock_guard l(m.mu);
    state_->cancelled = true;
    state_->resume_session = 0;  // no resume takes it now (its entry in `resuming` is stale)
    state_->resume_from = nullptr;
    state_->held_end.reset();
    while (!state_->streams.empty()) {
      AnchorStream* s = state_->streams.back().get();
      if (s->tcp) {
        s->tcp->cancelled = true;  // the node thread closes its connection
      } else {
        s->peer->receiver->cancel(s->stream);
      }
      m.remove_stream(s);
    }
  }
  m.wake();
}

void Anchor::pause() {
  std::lock_guard l(node_->mu);
  state_->paused = true;  // poll() drops it from the ready list when it meets it
}

void Anchor::resume() {
  NodeImpl& m = *node_;
  bool kick = false;
  {
    std::lock_guard l(m.mu);
    AnchorState& a = *state_;
    a.paused = false;
    if (!a.ready.empty() && !a.listed) {
      a.listed = true;
      m.ready_anchors.push_back(a.shared_from_this());
      kick = true;
    }
  }
  if (kick) m.ready.kick();  // its items are ready again: the descriptor says so
}

uint32_t Anchor::live_streams() const {
  std::lock_guard l(node_->mu);
  return static_cast<uint32_t>(state_->streams.size());
}

Anchor::~Anchor() {
  cancel();
  std::lock_guard l(node_->mu);
  node_->anchors.erase(state_->id);
  if (state_->listed) {  // gone: off the ready list (for a node poll() never reads, nothing else would take it)
    std::erase_if(node_->ready_anchors, [&](const std::shared_ptr<AnchorState>& a) { return a == state_; });
    state_->listed = false;
  }
}

}  // namespace ringfire::node
