// map_guard.h — a ring's mapping outlives a cut of its file.
//
// A ring is a shared mapping of a file. If the file is cut shorter under
// it (its owner truncates it, by mistake or not), the next touch past the
// new end is a SIGBUS, which ends the process and every session in it: a
// stranger who owned one ring that root's daemon served could end them all
// (review helper-35). A guarded mapping instead gets zeroed private memory
// from the faulting page to its end: what was cut reads as zeros (records
// no sequence check accepts), the process goes on, and the cut is counted
// for it to report. Signal-safe: the handler reads a fixed table of atomics
// and makes one mmap call.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringfire::ring {

// guard_mapping: [base, base + size) is a ring's mapping (RingFile's) of
// the file open as `fd` (a fault past that file's end is a cut; one inside
// it, a hole its filesystem cannot fill, is not, and kills as before);
// the first call installs the SIGBUS handler (a fault elsewhere goes to the
// handler before it, or kills as it would have). False if the table of
// guarded mappings is full (the mapping is then as unguarded as before).
bool guard_mapping(void* base, size_t size, int fd);
// unguard_mapping: before the mapping is unmapped (its pair).
void unguard_mapping(void* base);
// mappings_cut: how many times a guarded mapping's file was found cut.
uint64_t mappings_cut();
// mapping_patched: part of the guarded mapping at `base` is zeroed private
// memory now (its file was cut under it, even if it has grown back since:
// what the session writes there no other process sees). Its owner asks.
bool mapping_patched(const void* base);

}  // namespace ringfire::ring
