// ring_geometry.h — the one place a ring's header and the GEOMETRY message
// are mapped onto each other: what a source announces, what a mirror
// creates from it, and how a mirror checks an existing ring against it.
#pragma once

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/frame.h"
#include "ring/ring_file.h"

namespace ringfire::control {

// geometry_of describes a source ring; first_seq is the first sequence the
// mirror will be sent.
inline proto::Geometry geometry_of(const ring::RingHeader& h, uint64_t first_seq) {
  proto::Geometry g;
  g.first_seq = first_seq;
  g.capacity = h.capacity;
  g.slot_size = h.slot_size;
  g.ring_flags = h.flags & (ring::kFlagBlob | ring::kFlagSparse);  // the wire's (PROTOCOL.md §1.3)
  g.schema_signature = h.schema_signature;
  g.registry_size = h.registry_size;
  g.slots_offset = h.slots_offset;
  g.arena_offset = h.arena_offset;
  g.arena_size = h.arena_size;
  return g;
}

// mirror_ring_options is the sparse ring a mirror creates for `g` at `path`.
inline ring::RingOptions mirror_ring_options(const proto::Geometry& g, const std::string& path, bool lazy = false) {
  ring::RingOptions o;
  o.name = path;
  o.capacity = g.capacity;
  o.slot_size = g.slot_size;
  o.schema_signature = g.schema_signature;
  // The registry holds this host's readers of the mirror: the source's size
  // is the source's, and at least the default here (a source announcing 0
  // left a stream mux channel's own reader no place: its batches came and
  // nothing read them, helper-45).
  // (At most 65,536, a ring's own bound: the source's number is information.)
  o.registry_size = std::clamp(g.registry_size, ring::RingOptions{}.registry_size, uint32_t{1} << 16);
  o.arena_size = g.arena_size;
  o.flags = (g.ring_flags & ring::kFlagBlob) | ring::kFlagSparse | (lazy ? ring::kFlagLazy : 0u);
  return o;
}

// geometry_mismatch names every way an existing ring cannot mirror `g`
// (empty when it can).
inline std::string geometry_mismatch(const ring::RingFile& f, const proto::Geometry& g) {
  const ring::RingHeader& h = f.header();
  std::string diff;
  if (!f.sparse()) diff += " it is not a mirror (sparse) ring;";
  if (h.capacity != g.capacity) absl::StrAppend(&diff, " capacity ", h.capacity, " vs ", g.capacity, ";");
  if (h.slot_size != g.slot_size) absl::StrAppend(&diff, " slot size ", h.slot_size, " vs ", g.slot_size, ";");
  if (h.schema_signature != g.schema_signature) diff += " schema signature differs;";
  if (h.arena_size != g.arena_size) absl::StrAppend(&diff, " arena ", h.arena_size, " vs ", g.arena_size, ";");
  return diff;
}

}  // namespace ringfire::control
