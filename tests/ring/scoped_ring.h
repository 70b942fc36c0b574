// scoped_ring.h — a uniquely named ring file for one test, removed when the
// test ends (pass or fail).
#pragma once

#include <unistd.h>

#include <atomic>
#include <string>

#include "gtest/gtest.h"
#include "ring/ring_file.h"

namespace ringfire::ring::testing {

inline std::string unique_ring_name(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "rf-test-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(counter++);
}

// ScopedRing creates a ring from `o` (its name replaced by a unique one).
class ScopedRing {
 public:
  explicit ScopedRing(RingOptions o) {
    o.name = unique_ring_name("r");
    name_ = o.name;
    auto f = RingFile::create(o);
    EXPECT_TRUE(f.ok()) << f.status();
  }
  ~ScopedRing() { (void)RingFile::remove(name_); }
  ScopedRing(const ScopedRing&) = delete;
  ScopedRing& operator=(const ScopedRing&) = delete;

  const std::string& name() const { return name_; }
  RingFile open() const {
    auto f = RingFile::open(name_);
    EXPECT_TRUE(f.ok()) << f.status();
    return std::move(*f);
  }

 private:
  std::string name_;
};

inline RingOptions fixed_ring(uint64_t capacity, uint32_t slot_size, uint32_t flags = 0) {
  RingOptions o;
  o.capacity = capacity;
  o.slot_size = slot_size;
  o.flags = flags;
  return o;
}

inline RingOptions blob_ring(uint64_t capacity, uint64_t arena, uint32_t flags = 0) {
  RingOptions o;
  o.capacity = capacity;
  o.slot_size = sizeof(BlobDescriptor);
  o.arena_size = arena;
  o.flags = flags | kFlagBlob;
  return o;
}

}  // namespace ringfire::ring::testing
