// golden.h — helpers for golden-byte tests: hex strings to bytes and back.
#pragma once

#include <cctype>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace ringfire::proto::testing {

// hex turns "01 02 ab" (spaces and '|' ignored) into bytes.
inline std::vector<std::byte> hex(const std::string& text) {
  std::vector<std::byte> out;
  int hi = -1;
  for (char ch : text) {
    if (!std::isxdigit(static_cast<unsigned char>(ch))) continue;
    const int v = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0' : (std::tolower(ch) - 'a' + 10);
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(std::byte(hi << 4 | v));
      hi = -1;
    }
  }
  return out;
}

inline std::string to_hex(std::span<const std::byte> b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    if (!s.empty()) s += ' ';
    s += digits[std::to_integer<int>(x) >> 4];
    s += digits[std::to_integer<int>(x) & 15];
  }
  return s;
}

}  // namespace ringfire::proto::testing
