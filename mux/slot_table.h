// slot_table.h — a dense table of slots indexed by SlotId (a 24-bit index
// and an 8-bit generation), epoch-scoped by its owner: lookup is an array
// index and a generation compare, never a hash. Freeing an index bumps its
// generation, so a stale record for a recycled index finds a different
// generation and is dropped (request A's tokens never surface in request
// B's stream); freed indices are reused last-in first-out. Bounded: at most
// `capacity` live slots, and the table never grows past it. One thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "proto/stream_batch.h"

namespace ringfire::mux {

template <typename T>
class SlotTable {
 public:
  explicit SlotTable(uint32_t capacity) : capacity_(capacity) { entries_.reserve(capacity); }

  // open takes a free index (nullopt when `capacity` slots are live).
  std::optional<proto::SlotId> open(T value) {
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else if (entries_.size() < capacity_ && entries_.size() <= proto::SlotId::kMaxIndex) {
      index = static_cast<uint32_t>(entries_.size());
      entries_.emplace_back();
    } else {
      return std::nullopt;
    }
    Entry& e = entries_[index];
    e.live = true;
    e.value = std::move(value);
    ++live_;
    return proto::SlotId{index, e.generation};
  }

  // find: the live slot `id` names, or nullptr (a free index, or another
  // generation: a stale id).
  T* find(proto::SlotId id) {
    if (id.index >= entries_.size()) return nullptr;
    Entry& e = entries_[id.index];
    return e.live && e.generation == id.generation ? &e.value : nullptr;
  }
  const T* find(proto::SlotId id) const { return const_cast<SlotTable*>(this)->find(id); }

  // close frees `id` (false if it was not live) and bumps its generation.
  bool close(proto::SlotId id) {
    if (find(id) == nullptr) return false;
    Entry& e = entries_[id.index];
    e.live = false;
    e.value = T{};
    ++e.generation;  // wraps at 256: the epoch scopes the table above it
    free_.push_back(id.index);
    --live_;
    return true;
  }

  // for_each calls f(id, value) for every live slot, by index.
  template <typename F>
  void for_each(F&& f) {
    for (uint32_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].live) f(proto::SlotId{i, entries_[i].generation}, entries_[i].value);
    }
  }

  uint32_t live() const { return live_; }
  uint32_t capacity() const { return capacity_; }

 private:
  struct Entry {
    uint8_t generation = 0;
    bool live = false;
    T value{};
  };
  uint32_t capacity_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_;
  uint32_t live_ = 0;
};

}  // namespace ringfire::mux
