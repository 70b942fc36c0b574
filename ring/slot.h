// slot.h — the seqlock-style slot protocol every writer and reader of a ring
// uses. A slot's word is stored last, with release, so an uncommitted slot is
// never mistaken for a record, and a reader re-checks the word after copying
// so a record overwritten mid-copy is never returned torn.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "ring/layout.h"

namespace ringfire::ring {

// kMaxSeq bounds every sequence in a ring: a slot word holds seq + 1
// shifted left by one, so this leaves room (146 years at a billion records
// a second; proto::kMaxSequence is the same bound on the wire). A write_seq
// at or past it is a damaged header: readers take it as kMaxSeq.
inline constexpr uint64_t kMaxSeq = uint64_t{1} << 62;

constexpr uint64_t committed_word(uint64_t seq) { return (seq + 1) << 1; }
constexpr uint64_t busy_word(uint64_t seq) { return ((seq + 1) << 1) | 1; }

// SlotState is what a reader finds in the slot it wants for sequence `seq`.
enum class SlotState : uint8_t {
  kRecord,   // seq was committed and copied intact
  kNotYet,   // the slot holds an older sequence, or seq is still being written
  kLapped,   // the slot holds, or is being given, a newer sequence
};

// slot_begin_write marks `slot` as being written with `seq`. Writer only.
inline void slot_begin_write(SlotWord* slot, uint64_t seq) {
  slot->word.store(busy_word(seq), std::memory_order_relaxed);
  // Release fence: pairs with the acquire fence in slot_read. A reader that
  // copied any byte written after this point will see the busy word on its
  // re-check and discard the copy.
  std::atomic_thread_fence(std::memory_order_release);
}

// slot_commit publishes `seq` in `slot`. Writer only.
inline void slot_commit(SlotWord* slot, uint64_t seq) {
  // Release: pairs with the acquire load in slot_read; the payload stores
  // above happen-before any reader that sees this word.
  slot->word.store(committed_word(seq), std::memory_order_release);
}

// slot_write publishes `len` bytes as `seq` in one call. Writer only.
inline void slot_write(SlotWord* slot, uint64_t seq, const void* src, size_t len) {
  slot_begin_write(slot, seq);
  std::memcpy(reinterpret_cast<std::byte*>(slot) + kSlotWordBytes, src, len);
  slot_commit(slot, seq);
}

// slot_classify says what a word means to a reader wanting `seq`.
constexpr SlotState slot_classify(uint64_t word, uint64_t seq) {
  if (word == committed_word(seq)) return SlotState::kRecord;
  return (word >> 1) > seq + 1 ? SlotState::kLapped : SlotState::kNotYet;
}

// slot_read copies `len` payload bytes of `seq` into `dst` if the slot holds
// it, and returns kRecord only if the copy is intact. Any thread, any process.
inline SlotState slot_read(const SlotWord* slot, uint64_t seq, void* dst, size_t len) {
  // Acquire: pairs with the release store in slot_commit.
  const uint64_t before = slot->word.load(std::memory_order_acquire);
  const SlotState state = slot_classify(before, seq);
  if (state != SlotState::kRecord) return state;
  std::memcpy(dst, reinterpret_cast<const std::byte*>(slot) + kSlotWordBytes, len);
  // Acquire fence: pairs with the release fence in slot_begin_write, so if the
  // copy saw a newer writer's bytes, the re-check sees its busy word.
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t after = slot->word.load(std::memory_order_relaxed);
  return after == before ? SlotState::kRecord : SlotState::kLapped;
}

}  // namespace ringfire::ring
