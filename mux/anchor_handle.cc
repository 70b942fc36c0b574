// anchor_handle.cc — worker ids and the handle's text form.
#include "mux/anchor_handle.h"

#include <cstdio>

#include <xxhash.h>

namespace ringfire::mux {

uint64_t worker_id(std::string_view instance_id) { return XXH3_64bits(instance_id.data(), instance_id.size()); }

std::string AnchorHandle::to_string() const {
  char buf[34];
  std::snprintf(buf, sizeof(buf), "%016llx:%016llx", static_cast<unsigned long long>(worker),
                static_cast<unsigned long long>(anchor));
  return buf;
}

std::optional<AnchorHandle> AnchorHandle::parse(std::string_view s) {
  if (s.size() != 33 || s[16] != ':') return std::nullopt;
  auto hex = [](std::string_view h, uint64_t* out) {
    uint64_t v = 0;
    for (char c : h) {
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return false;
      }
      v = v << 4 | static_cast<uint64_t>(d);
    }
    *out = v;
    return true;
  };
  AnchorHandle a;
  if (!hex(s.substr(0, 16), &a.worker) || !hex(s.substr(17), &a.anchor)) return std::nullopt;
  return a;
}

}  // namespace ringfire::mux
