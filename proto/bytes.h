// bytes.h — bounds-checked byte readers and writers with the byte order
// spelled out at every call (ringfire frames are little-endian,
// _stream_batch and the network headers big-endian). No allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace ringfire::proto {

using ConstBytes = std::span<const std::byte>;
using MutableBytes = std::span<std::byte>;

// DecodeError is what every decoder returns; kOk means the value is valid.
enum class DecodeError : uint8_t {
  kOk = 0,
  kTruncated,     // fewer bytes than the format requires
  kBadKind,       // unknown frame kind / record type / message type
  kBadLength,     // a length field disagrees with the bytes or the format
  kBadMagic,      // a magic number or fixed field is wrong
  kBadVersion,    // a version this build does not speak
  kBadValue,      // a field holds a value the format forbids
  kBadChecksum,   // a header checksum does not verify
  kTooLarge,      // a length exceeds a configured bound
};

// decode_error_name returns a short name for logs and counters.
const char* decode_error_name(DecodeError e);

inline uint16_t load_le16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) | std::to_integer<uint16_t>(p[1]) << 8);
}
inline uint32_t load_le32(const std::byte* p) {
  return uint32_t{load_le16(p)} | uint32_t{load_le16(p + 2)} << 16;
}
inline uint64_t load_le64(const std::byte* p) {
  return uint64_t{load_le32(p)} | uint64_t{load_le32(p + 4)} << 32;
}
inline uint16_t load_be16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) << 8 | std::to_integer<uint16_t>(p[1]));
}
inline uint32_t load_be32(const std::byte* p) {
  return uint32_t{load_be16(p)} << 16 | uint32_t{load_be16(p + 2)};
}
inline uint64_t load_be64(const std::byte* p) {
  return uint64_t{load_be32(p)} << 32 | uint64_t{load_be32(p + 4)};
}

inline void store_le16(std::byte* p, uint16_t v) {
  p[0] = std::byte(v & 0xff);
  p[1] = std::byte(v >> 8);
}
inline void store_le32(std::byte* p, uint32_t v) {
  store_le16(p, static_cast<uint16_t>(v));
  store_le16(p + 2, static_cast<uint16_t>(v >> 16));
}
inline void store_le64(std::byte* p, uint64_t v) {
  store_le32(p, static_cast<uint32_t>(v));
  store_le32(p + 4, static_cast<uint32_t>(v >> 32));
}
inline void store_be16(std::byte* p, uint16_t v) {
  p[0] = std::byte(v >> 8);
  p[1] = std::byte(v & 0xff);
}
inline void store_be32(std::byte* p, uint32_t v) {
  store_be16(p, static_cast<uint16_t>(v >> 16));
  store_be16(p + 2, static_cast<uint16_t>(v));
}
inline void store_be64(std::byte* p, uint64_t v) {
  store_be32(p, static_cast<uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<uint32_t>(v));
}

// ByteReader walks a byte span; every read checks the bounds first and a
// failed read leaves the reader failed (ok() false) and returns zero.
class ByteReader {
 public:
  explicit ByteReader(ConstBytes in) : in_(in) {}

  bool ok() const { return ok_; }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }

  uint8_t u8() { return need(1) ? std::to_integer<uint8_t>(in_[pos_++]) : 0; }
  uint16_t le16() { return take(2, load_le16); }
  uint32_t le32() { return take(4, load_le32); }
  uint64_t le64() { return take(8, load_le64); }
  uint16_t be16() { return take(2, load_be16); }
  uint32_t be32() { return take(4, load_be32); }
  uint64_t be64() { return take(8, load_be64); }
  // bytes returns the next n bytes as a view (empty and failed if short).
  ConstBytes bytes(size_t n) {
    if (!need(n)) return {};
    ConstBytes out = in_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  void skip(size_t n) { (void)bytes(n); }

 private:
  bool need(size_t n) {
    if (!ok_ || remaining() < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  template <typename F>
  auto take(size_t n, F load) -> decltype(load(nullptr)) {
    if (!need(n)) return 0;
    auto v = load(in_.data() + pos_);
    pos_ += n;
    return v;
  }

  ConstBytes in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// ByteWriter appends to a caller-owned buffer; a write that does not fit
// marks the writer failed and writes nothing.
class ByteWriter {
 public:
  explicit ByteWriter(MutableBytes out) : out_(out) {}

  bool ok() const { return ok_; }
  void fail() { ok_ = false; }
  size_t size() const { return pos_; }
  std::byte* at(size_t offset) { return out_.data() + offset; }

  void u8(uint8_t v) {
    if (need(1)) out_[pos_++] = std::byte(v);
  }
  void le16(uint16_t v) { put(2, v, store_le16); }
  void le32(uint32_t v) { put(4, v, store_le32); }
  void le64(uint64_t v) { put(8, v, store_le64); }
  void be16(uint16_t v) { put(2, v, store_be16); }
  void be32(uint32_t v) { put(4, v, store_be32); }
  void be64(uint64_t v) { put(8, v, store_be64); }
  void bytes(ConstBytes b) {
    if (!need(b.size())) return;
    if (!b.empty()) std::memcpy(out_.data() + pos_, b.data(), b.size());
    pos_ += b.size();
  }
  void zeros(size_t n) {
    if (!need(n)) return;
    std::memset(out_.data() + pos_, 0, n);
    pos_ += n;
  }

 private:
  bool need(size_t n) {
    if (!ok_ || out_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  template <typename T, typename F>
  void put(size_t n, T v, F store) {
    if (!need(n)) return;
    store(out_.data() + pos_, v);
    pos_ += n;
  }

  MutableBytes out_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace ringfire::proto
