// cmd_create.cc — `ringfire create` and `ringfire remove`.
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "ring/layout.h"
#include "ring/ring_file.h"

namespace ringfire::cli {

static const CommandSpec kCreate{
    "create", "RING", 1, 1,
    "Create a ring file in /dev/shm (or --dir, e.g. a hugetlbfs mount).",
    {
        {"capacity", "N", "slots, a power of two (default 65536)"},
        {"slot-size", "BYTES", "payload bytes per slot (default 64; publish needs >= 24)"},
        {"blob", nullptr, "variable-size records in a byte arena"},
        {"arena", "BYTES", "blob arena size, a power of two (default 16Mi)"},
        {"schema", "N", "schema signature checked by openers (decimal or 0x hex)"},
        {"readers", "N", "reader registry entries (default 64)"},
        {"sparse", nullptr, "allow holes in the sequence (mirror rings)"},
        {"dir", "DIR", "directory for the ring file (default /dev/shm)"},
        {"force", nullptr, "replace an existing ring of that name"},
    }};

static const CommandSpec kRemove{"remove", "RING", 1, 1, "Remove a ring file.", {}};

int cmd_create(int argc, char** argv, int first) {
  auto args = Args::parse(kCreate, argc, argv, first);
  if (!args.ok()) return fail("create", args.status());
  if (args->help()) {
    std::fputs(usage(kCreate).c_str(), stdout);
    return 0;
  }
  ring::RingOptions o;
  o.name = args->positionals()[0];
  o.dir = args->str("dir", "/dev/shm");
  o.replace = args->has("force");
  const bool blob = args->has("blob");
  auto capacity = args->count("capacity", 65536);
  auto slot_size = args->count("slot-size", blob ? sizeof(ring::BlobDescriptor) : 64);
  auto arena = args->count("arena", blob ? (16u << 20) : 0);
  auto readers = args->count("readers", 64);
  for (const auto* s : {&capacity, &slot_size, &arena, &readers}) {
    if (!s->ok()) return fail("create", s->status());
  }
  if (blob && args->has("slot-size") && *slot_size != sizeof(ring::BlobDescriptor)) {
    return fail("create", absl::InvalidArgumentError(
                              "--slot-size does not apply to --blob rings (their slots hold a "
                              "16-byte descriptor); size the arena with --arena"));
  }
  if (!blob && args->has("arena")) {
    return fail("create", absl::InvalidArgumentError("--arena needs --blob"));
  }
  if (*readers < 1 || *readers > 65'536) {
    return fail("create", absl::InvalidArgumentError("--readers: 1 to 65536 (every reader takes a place; 0 left none)"));
  }
  if (*slot_size > UINT32_MAX) {
    return fail("create", absl::InvalidArgumentError("--slot-size is too large"));
  }
  auto sig = parse_schema(args->str("schema", "0"));
  if (!sig.ok()) return fail("create", sig.status());
  o.capacity = *capacity;
  o.slot_size = static_cast<uint32_t>(*slot_size);
  o.arena_size = *arena;
  o.registry_size = static_cast<uint32_t>(*readers);
  o.schema_signature = *sig;
  o.flags = 0;
  if (blob) o.flags |= ring::kFlagBlob;
  if (args->has("sparse")) o.flags |= ring::kFlagSparse;
  auto file = ring::RingFile::create(o);
  if (!file.ok()) return fail("create", file.status());
  std::printf("created %s: %llu slots of %u bytes%s, %llu bytes\n", file->path().c_str(),
              static_cast<unsigned long long>(o.capacity), o.slot_size,
              blob ? absl::StrCat(", blob arena ", o.arena_size).c_str() : "",
              static_cast<unsigned long long>(file->header().file_size));
  return 0;
}

int cmd_remove(int argc, char** argv, int first) {
  auto args = Args::parse(kRemove, argc, argv, first);
  if (!args.ok()) return fail("remove", args.status());
  if (args->help()) {
    std::fputs(usage(kRemove).c_str(), stdout);
    return 0;
  }
  if (absl::Status s = ring::RingFile::remove(args->positionals()[0]); !s.ok()) {
    return fail("remove", s);
  }
  return 0;
}

}  // namespace ringfire::cli
