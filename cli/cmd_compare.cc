// cmd_compare.cc — `ringfire compare`: is a mirror identical to its source?
// Walks both rings in sequence order over the range both still hold and
// compares every record byte for byte. Exit 3 if any record differs, or
// (with --exact) if either ring has a record the other lacks.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "ring/raw_reader.h"

namespace ringfire::cli {
namespace {

const CommandSpec kCompare{
    "compare", "SOURCE MIRROR", 2, 2,
    "Compare two rings record by record (same sequence, same bytes) over the sequences\n"
    "both still retain. Exit 3 if a record differs; with --exact, also if one ring holds a\n"
    "sequence the other does not.",
    {
        {"exact", nullptr, "records missing on either side are failures too"},
    }};

uint64_t oldest(const ring::RingFile& f) {
  const uint64_t ws = f.header().write_seq.load(std::memory_order_acquire);  // pairs with the writer's release
  return ws > f.capacity() ? ws - f.capacity() : 0;
}

}  // namespace

int cmd_compare(int argc, char** argv, int first) {
  auto args = Args::parse(kCompare, argc, argv, first);
  if (!args.ok()) return fail("compare", args.status());
  if (args->help()) {
    std::fputs(usage(kCompare).c_str(), stdout);
    return 0;
  }
  auto fa = ring::RingFile::open(args->positionals()[0]);
  if (!fa.ok()) return fail("compare", fa.status());
  auto fb = ring::RingFile::open(args->positionals()[1]);
  if (!fb.ok()) return fail("compare", fb.status());
  if (fa->blob() != fb->blob() || fa->slot_size() != fb->slot_size()) {
    return fail("compare", absl::FailedPreconditionError("the rings have different geometry"));
  }
  const uint64_t start = std::max(oldest(*fa), oldest(*fb));
  auto a = ring::RawReader::attach(std::move(*fa), ring::StartPosition::at(start));
  auto b = ring::RawReader::attach(std::move(*fb), ring::StartPosition::at(start));
  if (!a.ok() || !b.ok()) return fail("compare", !a.ok() ? a.status() : b.status());
  std::vector<std::byte> held;
  uint64_t same = 0, differ = 0, only_a = 0, only_b = 0, lost = 0;
  uint32_t len_a = 0, len_b = 0;
  ring::ReadResult ra = a->next(&len_a);
  held.assign(a->record(), a->record() + len_a);
  ring::ReadResult rb = b->next(&len_b);
  lost += ra.lost + rb.lost;
  while (ra.ok && rb.ok) {
    if (ra.seq == rb.seq) {
      const bool eq = len_a == len_b && std::memcmp(held.data(), b->record(), len_a) == 0;
      if (eq) {
        ++same;
      } else {
        ++differ;
        if (differ <= 5) std::printf("compare: seq %llu differs\n", static_cast<unsigned long long>(ra.seq));
      }
      ra = a->next(&len_a);
      held.assign(a->record(), a->record() + len_a);
      rb = b->next(&len_b);
    } else if (ra.seq < rb.seq) {
      if (++only_a <= 5) std::printf("compare: seq %llu only in %s\n", static_cast<unsigned long long>(ra.seq), args->positionals()[0].c_str());
      ra = a->next(&len_a);
      held.assign(a->record(), a->record() + len_a);
    } else {
      if (++only_b <= 5) std::printf("compare: seq %llu only in %s\n", static_cast<unsigned long long>(rb.seq), args->positionals()[1].c_str());
      rb = b->next(&len_b);
    }
    lost += ra.lost + rb.lost;
  }
  while (ra.ok) {
    ++only_a;
    ra = a->next(&len_a);
  }
  while (rb.ok) {
    ++only_b;
    rb = b->next(&len_b);
  }
  std::printf("compare: from seq %llu: %llu identical, %llu differ, %llu only in %s, %llu only in %s, "
              "%llu overwritten while reading\n",
              static_cast<unsigned long long>(start), static_cast<unsigned long long>(same),
              static_cast<unsigned long long>(differ), static_cast<unsigned long long>(only_a),
              args->positionals()[0].c_str(), static_cast<unsigned long long>(only_b),
              args->positionals()[1].c_str(), static_cast<unsigned long long>(lost));
  const bool bad = differ != 0 || (args->has("exact") && (only_a != 0 || only_b != 0 || lost != 0));
  return bad ? 3 : 0;
}

}  // namespace ringfire::cli
