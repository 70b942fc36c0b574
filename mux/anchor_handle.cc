// anchor_handle.cc — worker ids and the handle's text form.
#include "mux/anchor_handle.h"

#include <cstdio>

#include <xxhash.h>

namespace ringfire::mux {

uint64_t worker_id(std::string_view instance_id) { return XXH3_64bits(instance_id.data(), instance_id.size()); }

std::string AnchorHandle::to_string() const {
  char buf[80];
  if (ticket.session == 0) {
    std::snprintf(buf, sizeof(buf), "%016llx:%016llx", static_cast<unsigned long long>(worker),
                  static_cast<unsigned long long>(anchor));
  } else {
    std::snprintf(buf, sizeof(buf), "%016llx:%016llx:%016llx:%08x:%08x:%08x", static_cast<unsigned long long>(worker),
                  static_cast<unsigned long long>(anchor), static_cast<unsigned long long>(ticket.session),
                  ticket.credit, ticket.slot_byte_budget, ticket.peer_byte_budget);
  }
  return buf;
}

namespace {

// hex: exactly `digits` hex digits at the front of *s, then (unless at the
// end) one ':'; consumed.
bool hex(std::string_view* s, size_t digits, uint64_t* out) {
  if (s->size() < digits) return false;
  uint64_t v = 0;
  for (char c : s->substr(0, digits)) {
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
  s->remove_prefix(digits);
  if (!s->empty()) {
    if (s->front() != ':') return false;
    s->remove_prefix(1);
    if (s->empty()) return false;  // a trailing ':'
  }
  *out = v;
  return true;
}

}  // namespace

std::optional<AnchorHandle> AnchorHandle::parse(std::string_view s) {
  AnchorHandle a;
  if (!hex(&s, 16, &a.worker) || !hex(&s, 16, &a.anchor)) return std::nullopt;
  if (s.empty()) return a;
  uint64_t credit = 0, slot = 0, peer = 0;
  if (!hex(&s, 16, &a.ticket.session) || !hex(&s, 8, &credit) || !hex(&s, 8, &slot) || !hex(&s, 8, &peer) ||
      !s.empty() || a.ticket.session == 0 || credit == 0) {
    return std::nullopt;
  }
  a.ticket.credit = static_cast<uint32_t>(credit);
  a.ticket.slot_byte_budget = static_cast<uint32_t>(slot);
  a.ticket.peer_byte_budget = static_cast<uint32_t>(peer);
  return a;
}

}  // namespace ringfire::mux
