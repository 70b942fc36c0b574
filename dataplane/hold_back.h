// hold_back.h — DATA frames that overtook a hole, kept until the hole is
// filled. Bounded twice: in frames (the protocol's hold-back depth, default
// 8192) and in bytes (a bump arena sized at setup), so holding never
// allocates. Frames come back lowest sequence first. Worker thread only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

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

  HoldBack(uint32_t max_frames, size_t max_bytes) : max_frames_(max_frames), arena_(max_bytes) {
    heap_.reserve(max_frames);
  }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // lowest_first is the first sequence of the lowest held frame (non-empty only).
  uint64_t lowest_first() const { return heap_.front().first_seq; }

  // hold copies a frame in; false when either bound is reached.
  bool hold(uint64_t first_seq, uint64_t end_seq, proto::ConstBytes frame) {
    if (heap_.empty()) used_ = 0;  // nothing refers to the arena any more
    if (heap_.size() >= max_frames_ || arena_.size() - used_ < frame.size()) return false;
    std::memcpy(arena_.data() + used_, frame.data(), frame.size());
    heap_.push_back(Entry{first_seq, end_seq, used_, frame.size()});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
    used_ += frame.size();
    return true;
  }

  // pop removes the lowest frame. Its bytes stay valid until the next hold().
  HeldFrame pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    const Entry e = heap_.back();
    heap_.pop_back();
    return HeldFrame{e.first_seq, e.end_seq, proto::ConstBytes(arena_.data() + e.offset, e.len)};
  }

  // clear drops everything (a new session).
  void clear() {
    heap_.clear();
    used_ = 0;
  }

 private:
  struct Entry {
    uint64_t first_seq;
    uint64_t end_seq;
    size_t offset;
    size_t len;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const { return a.first_seq > b.first_seq; }
  };

  uint32_t max_frames_;
  std::vector<std::byte> arena_;
  size_t used_ = 0;
  std::vector<Entry> heap_;
};

}  // namespace ringfire::dataplane
