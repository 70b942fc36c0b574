// hold_back.h — DATA frames that overtook a hole, kept until the hole is
// filled. Bounded twice: in frames (the protocol's hold-back depth, default
// 8192) and in bytes (an arena sized at setup), so holding never allocates.
// Frames are kept sorted by sequence, so the holes between them can be
// listed (multi-range NAKs) and the lowest comes back first. A frame whose
// range is already held is not copied again (`serve --dup N` costs one
// slot, not N). When the arena's free tail is too small, the live frames
// are compacted to its front, so space freed out of order is never lost.
// Worker thread only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ring/lazy_bytes.h"
#include "proto/bytes.h"

namespace ringfire::dataplane {

class HoldBack {
 public:
  // HeldFrame is a held frame: its sequence range and its bytes.
  struct HeldFrame {
    uint64_t first_seq;
    uint64_t end_seq;  // one past the last record
    proto::ConstBytes bytes;
  };
  enum class Hold : uint8_t { kHeld, kDuplicate, kFull };

  HoldBack(uint32_t max_frames, size_t max_bytes) : max_frames_(max_frames), arena_(max_bytes) {
    entries_.reserve(2 * size_t{max_frames});
    scratch_.reserve(max_frames);
  }

  bool empty() const { return head_ == entries_.size(); }
  size_t size() const { return entries_.size() - head_; }
  size_t bytes_used() const { return live_bytes_; }
  // lowest_first is the first sequence of the lowest held frame (non-empty only).
  uint64_t lowest_first() const { return entries_[head_].first_seq; }

  // hold copies a frame in, unless the same range is already held or a
  // bound is reached.
  Hold hold(uint64_t first_seq, uint64_t end_seq, proto::ConstBytes frame) {
    const auto begin = entries_.begin() + static_cast<std::ptrdiff_t>(head_);
    auto pos = std::lower_bound(begin, entries_.end(), first_seq,
                                [](const Entry& e, uint64_t s) { return e.first_seq < s; });
    for (auto it = pos; it != entries_.end() && it->first_seq == first_seq; ++it) {
      if (it->end_seq == end_seq) return Hold::kDuplicate;
    }
    if (size() >= max_frames_) return Hold::kFull;
    if (arena_.size() - used_ < frame.size()) {
      compact();
      if (arena_.size() - used_ < frame.size()) return Hold::kFull;
    }
    if (entries_.size() == entries_.capacity()) {  // never reallocate: drop the popped prefix
      const size_t index = static_cast<size_t>(pos - entries_.begin()) - head_;
      entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
      pos = entries_.begin() + static_cast<std::ptrdiff_t>(index);
    }
    std::memcpy(arena_.data() + used_, frame.data(), frame.size());
    while (pos != entries_.end() && pos->first_seq == first_seq) ++pos;  // after equal firsts
    entries_.insert(pos, Entry{first_seq, end_seq, used_, frame.size()});
    used_ += frame.size();
    live_bytes_ += frame.size();
    return Hold::kHeld;
  }

  // pop removes the lowest frame. Its bytes stay valid until the next hold().
  HeldFrame pop() {
    const Entry e = entries_[head_++];
    live_bytes_ -= e.len;
    if (empty()) clear();
    return HeldFrame{e.first_seq, e.end_seq, proto::ConstBytes(arena_.data() + e.offset, e.len)};
  }

  // for_each calls f(first_seq, end_seq) for every held frame, lowest first.
  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = head_; i < entries_.size(); ++i) f(entries_[i].first_seq, entries_[i].end_seq);
  }

  // clear drops everything (a new session).
  void clear() {
    entries_.clear();
    head_ = 0;
    used_ = 0;
    live_bytes_ = 0;
  }

 private:
  struct Entry {
    uint64_t first_seq;
    uint64_t end_seq;
    size_t offset;
    size_t len;
  };

  // compact moves every live frame to the front of the arena, in arena
  // order, so each move goes downwards and never overwrites a frame not yet
  // moved.
  void compact() {
    scratch_.clear();
    for (size_t i = head_; i < entries_.size(); ++i) scratch_.push_back(i);
    std::sort(scratch_.begin(), scratch_.end(),
              [&](size_t a, size_t b) { return entries_[a].offset < entries_[b].offset; });
    size_t to = 0;
    for (size_t i : scratch_) {
      Entry& e = entries_[i];
      if (e.offset != to) std::memmove(arena_.data() + to, arena_.data() + e.offset, e.len);
      e.offset = to;
      to += e.len;
    }
    used_ = to;
  }

  uint32_t max_frames_;
  ring::LazyBytes arena_;  // pages taken as frames first reach them (the bump pointer restarts when all are popped)
  size_t used_ = 0;        // the arena's bump pointer
  size_t live_bytes_ = 0;  // bytes of frames still held
  std::vector<Entry> entries_;  // sorted by first_seq from head_; popped ones before it
  size_t head_ = 0;
  std::vector<size_t> scratch_;  // compact()'s order, reserved up front
};

}  // namespace ringfire::dataplane
