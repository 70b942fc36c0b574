// lazy_bytes.h — a fixed-size byte buffer whose pages cost nothing until
// they are written: an anonymous private mapping (the kernel gives each
// page on its first touch, zeroed), not a std::vector that zeroes every
// byte at construction. A session's bounds (a mirror's hold-back arena,
// the TCP frame queue) are sized for its worst case; with this it holds in
// memory what it used, and setting it up costs no page faults (a stream
// mux channel's mirror is on its first token's path). Construction and
// destruction are setup-time; the bytes are plain memory.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace ringfire::ring {

class LazyBytes {
 public:
  LazyBytes() = default;
  explicit LazyBytes(size_t size) : size_(size) {
    if (size_ == 0) return;
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<std::byte*>(p);
  }
  ~LazyBytes() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  LazyBytes(LazyBytes&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  LazyBytes& operator=(LazyBytes&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) munmap(data_, size_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  LazyBytes(const LazyBytes&) = delete;
  LazyBytes& operator=(const LazyBytes&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // resident_bytes: how much of it holds pages now (mincore; a diagnostic
  // for tests and benchmarks, not for a hot path).
  size_t resident_bytes() const {
    if (data_ == nullptr) return 0;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in((size_ + page - 1) / page);
    if (mincore(data_, size_, in.data()) != 0) return 0;
    size_t n = 0;
    for (unsigned char c : in) n += (c & 1) != 0;
    return n * page;
  }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ringfire::ring
