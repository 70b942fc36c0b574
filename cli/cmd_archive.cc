// cmd_archive.cc — reading archives: `ringfire archive` (segments, ranges,
// gaps, checksum state), `ringfire replay` (a range into a local ring under
// the same sequences) and `ringfire tail --archive` (verify records).

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "archive/archive_reader.h"
#include "archive/segment_writer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "ring/blob.h"
#include "ring/check_record.h"
#include "ring/producer.h"

namespace ringfire::cli {
namespace {

using ull = unsigned long long;

// fail_reading: as fail(), but damage (a DataLoss from the reader) exits 3
// as damage found while reading does, wherever it is found (a damaged
// first segment exited 2, a later one 3: review helper-36).
int fail_reading(const char* command, const absl::Status& status) {
  const int rc = fail(command, status);
  return absl::IsDataLoss(status) ? 3 : rc;
}

// settle_tail: what the reader left unsettled at its end, said; 3 when it
// is damage. Damage only when no recorder writes the archive (the OFD lock
// test, archive::recorder_writing) and a fresh look still finds that batch
// unfinished: its recorder may have finished it and gone since the first.
int settle_tail(const char* command, const archive::ArchiveReader& reader, const std::string& dir) {
  if (reader.unsettled().empty()) return 0;
  const std::optional<bool> live = archive::recorder_writing(dir);
  const char* why = !live.has_value() ? "whether a recorder writes it cannot be told" : "its recorder may be writing it";
  if (live.has_value() && !*live) {
    // A fresh look: finished since (an entry, or the end with nothing
    // unsettled), still unfinished (damage), damage found (DataLoss), or
    // it cannot be told (any other error).
    auto again = archive::ArchiveReader::open(dir);
    absl::StatusOr<bool> got = false;
    if (!again.ok()) {
      got = again.status();
    } else if (const absl::Status at = again->seek(reader.position()); !at.ok()) {
      got = at;
    } else {
      archive::ArchiveEntry e;
      got = again->next(&e);
    }
    if (got.ok() && (*got || again->unsettled().empty())) {
      std::fprintf(stderr, "ringfire %s: stopped before the archive's last batch, which its recorder finished since: "
                           "run again for it\n", command);
      return 0;
    }
    if (got.ok() || absl::IsDataLoss(got.status())) {
      std::fprintf(stderr, "ringfire %s: the last batch is DAMAGED (no recorder is writing this archive): %s\n", command,
                   got.ok() ? reader.unsettled().c_str() : std::string(got.status().message()).c_str());
      return 3;
    }
    why = "a second look failed, so whether it is damage cannot be told";
  }
  std::fprintf(stderr, "ringfire %s: stopped before the open segment's last batch, which does not check out (%s): %s\n",
               command, why, reader.unsettled().c_str());
  return 0;
}

const CommandSpec kArchive{
    "archive", "DIR", 1, 1,
    "List an archive's segments: sequence ranges, records, bytes, the gaps the recorder\n"
    "took, and whether every batch checks out (checksum and sequence chain). Exit code 3\n"
    "if any is damaged: the line names the file, the offset and the last good sequence.",
    {
        {"no-verify", nullptr, "list what the catalog says without reading the segments"},
    }};

const CommandSpec kReplay{
    "replay", "DIR", 1, 1,
    "Write a range of an archive into a local ring under the same sequences. The ring is\n"
    "created (sparse, the archive's record size or blob arena) unless it exists. What the\n"
    "archive does not hold is reported as a gap: [from, to) and why.",
    {
        {"into", "RING", "the ring to write (required)"},
        {"from", "SEQ", "first sequence (default: the archive's first)"},
        {"to", "SEQ", "stop before this sequence (default: the archive's end)"},
        {"capacity", "N", "slots of a created ring, a power of two (default 1Mi)"},
        {"arena", "BYTES", "blob arena of a created blob ring (default: 4x the largest record, at least 16Mi)"},
    }};

// describe_shape says what kind of ring an archive holds.
std::string describe_shape(const archive::RingShape& s) {
  std::string out = (s.ring_flags & ring::kFlagBlob) != 0
                        ? absl::StrCat("blob ring, records up to ", s.max_record, " bytes")
                        : absl::StrCat("fixed ring, ", s.record_size, "-byte records");
  if ((s.ring_flags & ring::kFlagSparse) != 0) out += ", sparse";
  if (s.schema_signature != 0) absl::StrAppend(&out, ", schema ", absl::Hex(s.schema_signature));
  return out;
}

void print_gap(const char* who, uint64_t from, uint64_t to, const std::string& why) {
  std::printf("%s: gap [%llu, %llu) %s\n", who, static_cast<ull>(from), static_cast<ull>(to), why.c_str());
}

}  // namespace

int cmd_archive(int argc, char** argv, int first) {
  auto args = Args::parse(kArchive, argc, argv, first);
  if (!args.ok()) return fail("archive", args.status());
  if (args->help()) {
    std::fputs(usage(kArchive).c_str(), stdout);
    return 0;
  }
  const std::string dir = args->positionals()[0];
  auto reader = archive::ArchiveReader::open(dir);
  if (!reader.ok()) return fail_reading("archive", reader.status());
  const archive::Catalog& c = reader->catalog();
  std::printf("archive %s: %s; segments of %llu bytes, an index entry per %llu bytes\n", dir.c_str(),
              describe_shape(c.shape).c_str(), static_cast<ull>(c.segment_bytes),
              static_cast<ull>(c.index_interval));
  if (c.segments.empty()) {
    std::printf("nothing recorded yet\n");
    return 0;
  }
  const bool verify = !args->has("no-verify");
  uint64_t records = 0, bytes = 0, gaps = 0, lost = 0, damaged = 0;
  uint64_t expect = c.segments.front().first_seq;
  for (size_t i = 0; i < c.segments.size(); ++i) {
    const archive::CatalogSegment& s = c.segments[i];
    if (s.first_seq != expect) {
      print_gap("archive", expect, s.first_seq, "between segments (damaged catalog)");
      ++damaged;
    }
    if (!verify) {
      std::printf("  %s  [%llu, %llu)  %llu records  %llu bytes  %s\n", archive::segment_name(s.first_seq).c_str(),
                  static_cast<ull>(s.first_seq), static_cast<ull>(s.end_seq), static_cast<ull>(s.records),
                  static_cast<ull>(s.bytes), s.sealed ? "sealed" : "open (catalog figures)");
      records += s.records;
      bytes += s.bytes;
      expect = s.end_seq;
      continue;
    }
    const archive::SegmentScan scan = archive::scan_segment(dir, c, i);
    std::printf("  %s  [%llu, %llu)  %llu records  %llu bytes  %llu batches  %s  %s\n",
                archive::segment_name(s.first_seq).c_str(), static_cast<ull>(s.first_seq),
                static_cast<ull>(scan.end_seq), static_cast<ull>(scan.records), static_cast<ull>(scan.bytes),
                static_cast<ull>(scan.batches), s.sealed ? "sealed" : "open",
                scan.damage.empty() ? "ok" : "DAMAGED");
    for (const archive::ArchiveEntry& g : scan.first_gaps) {
      print_gap("    ", g.seq, g.gap_end, absl::StrCat(g.gap_lost, " records lost: the writer lapped the recorder"));
    }
    if (scan.gaps > scan.first_gaps.size()) {
      std::printf("    ... %llu more gaps\n", static_cast<ull>(scan.gaps - scan.first_gaps.size()));
    }
    if (!scan.damage.empty()) {
      std::printf("    %s\n", scan.damage.c_str());
      ++damaged;
    }
    records += scan.records;
    bytes += scan.bytes;
    gaps += scan.gaps;
    lost += scan.lost;
    expect = scan.damage.empty() ? scan.end_seq : s.end_seq;
  }
  std::printf("archive: %zu segments, sequences [%llu, %llu), %llu records, %llu bytes", c.segments.size(),
              static_cast<ull>(c.segments.front().first_seq), static_cast<ull>(expect), static_cast<ull>(records),
              static_cast<ull>(bytes));
  if (verify) {
    std::printf(", %llu gaps (%llu lost), %s\n", static_cast<ull>(gaps), static_cast<ull>(lost),
                damaged == 0 ? "every batch checks out" : absl::StrCat(damaged, " DAMAGED").c_str());
  } else {
    std::printf(" (not verified)\n");
  }
  return damaged == 0 ? 0 : 3;
}

int cmd_replay(int argc, char** argv, int first) {
  auto args = Args::parse(kReplay, argc, argv, first);
  if (!args.ok()) return fail("replay", args.status());
  if (args->help()) {
    std::fputs(usage(kReplay).c_str(), stdout);
    return 0;
  }
  if (!args->has("into")) return fail("replay", absl::InvalidArgumentError("--into RING is required"));
  auto reader = archive::ArchiveReader::open(args->positionals()[0]);
  if (!reader.ok()) return fail_reading("replay", reader.status());
  auto oldest = reader->first_seq();
  if (!oldest.ok()) return fail_reading("replay", oldest.status());
  auto from = args->count("from", *oldest);
  auto to = args->count("to", UINT64_MAX);
  auto capacity = args->count("capacity", 1u << 20);
  const archive::RingShape shape = reader->catalog().shape;
  const bool blob = (shape.ring_flags & ring::kFlagBlob) != 0;
  uint64_t arena_default = 16u << 20;
  while (blob && arena_default / 4 < shape.max_record) arena_default *= 2;
  auto arena = args->count("arena", arena_default);
  for (const auto* s : {&from, &to, &capacity, &arena}) {
    if (!s->ok()) return fail("replay", s->status());
  }
  if (*to <= *from) return fail("replay", absl::InvalidArgumentError("--to must be past --from"));

  uint64_t start = *from;
  uint64_t gaps = 0;
  if (start < *oldest) {
    print_gap("replay", start, *oldest, "not in the archive (removed by retention, or recorded from later)");
    ++gaps;
    start = *oldest;
  }
  if (auto st = reader->seek(start); !st.ok()) return fail_reading("replay", st);
  // The first entry is read before any ring is made: a --from at or past
  // what the archive holds, or damage where it starts, makes no empty ring
  // and is not a success. (A last batch that does not check out is not
  // the end: settle_tail says what it is.)
  archive::ArchiveEntry e;
  absl::StatusOr<bool> head = reader->next(&e);
  if (!head.ok()) return fail_reading("replay", head.status());
  if (!*head && !reader->unsettled().empty()) {
    // Nothing to replay before a batch that does not check out: said (3
    // when it is damage), and no ring made.
    return settle_tail("replay", *reader, args->positionals()[0]);
  }
  if (!*head && reader->position() <= start) {
    return fail("replay", absl::OutOfRangeError(absl::StrCat("--from ", start, " is at or past the archive's end, ",
                                                             reader->position(), ": nothing to replay")));
  }

  const std::string target = args->str("into");
  auto file = ring::RingFile::open(target);
  if (absl::IsNotFound(file.status())) {
    ring::RingOptions o;
    o.name = target;
    o.capacity = *capacity;
    o.slot_size = blob ? sizeof(ring::BlobDescriptor) : shape.record_size;
    o.arena_size = blob ? *arena : 0;
    o.schema_signature = shape.schema_signature;
    o.flags = ring::kFlagSparse | (blob ? ring::kFlagBlob : 0u);
    file = ring::RingFile::create(o);
  }
  if (!file.ok()) return fail("replay", file.status());
  if (file->blob() != blob || (!blob && file->slot_size() != shape.record_size) ||
      (blob && ring::max_blob_bytes(file->header().arena_size) < shape.max_record)) {
    return fail("replay", absl::FailedPreconditionError(absl::StrCat(
                              target, " is not a ring this archive's records fit (the archive holds a ",
                              describe_shape(shape), ")")));
  }
  std::optional<ring::Producer> fixed;
  std::optional<ring::BlobProducer> blobs;
  if (blob) {
    auto p = ring::BlobProducer::attach(std::move(*file));
    if (!p.ok()) return fail("replay", p.status());
    blobs.emplace(std::move(*p));
  } else {
    auto p = ring::Producer::attach(std::move(*file));
    if (!p.ok()) return fail("replay", p.status());
    fixed.emplace(std::move(*p));
  }
  const uint64_t next = blob ? blobs->next_seq() : fixed->next_seq();
  if (next > *from) {
    return fail("replay", absl::FailedPreconditionError(absl::StrCat(
                              target, " has already published up to ", next, ": replay from ", next,
                              " or into a new ring")));
  }

  install_stop_handlers();
  uint64_t replayed = 0;
  uint64_t last = start;
  int rc = 0;
  for (absl::StatusOr<bool> got = std::move(head); !stop_requested(); got = reader->next(&e)) {
    if (!got.ok()) {
      std::fprintf(stderr, "ringfire replay: %s\n", std::string(got.status().message()).c_str());
      rc = 3;
      break;
    }
    if (!*got || e.seq >= *to) break;
    if (e.gap) {
      print_gap("replay", e.seq, std::min(e.gap_end, *to),
                absl::StrCat(e.gap_lost, " records lost: the writer lapped the recorder"));
      ++gaps;
      continue;
    }
    const bool ok = blob ? [&] {
      auto dst = blobs->reserve(static_cast<uint32_t>(e.bytes.size()));
      if (dst.size() != e.bytes.size()) return false;
      std::memcpy(dst.data(), e.bytes.data(), e.bytes.size());
      return blobs->commit_at(e.seq, static_cast<uint32_t>(e.bytes.size()));
    }()
                         : fixed->publish_at(e.seq, e.bytes.data());
    if (!ok) {
      return fail("replay", absl::InternalError(absl::StrCat("the ring refused sequence ", e.seq)));
    }
    ++replayed;
    last = e.seq + 1;
  }
  if (const int settled = settle_tail("replay", *reader, args->positionals()[0]); rc == 0) rc = settled;
  const uint64_t covered = std::max(last, reader->position());
  if (rc == 0 && *to != UINT64_MAX && covered < *to) {
    print_gap("replay", covered, *to, "not recorded (yet): the archive ends there");
    ++gaps;
  }
  std::printf("replay: %llu records into %s, sequences [%llu, %llu), %llu gaps\n", static_cast<ull>(replayed),
              target.c_str(), static_cast<ull>(start), static_cast<ull>(std::min(covered, *to)),
              static_cast<ull>(gaps));
  return rc;
}

// tail_archive is `ringfire tail --archive DIR`: read the archive in order
// and verify every record (check_record format), as tail does a ring.
int tail_archive(const Args& args) {
  auto reader = archive::ArchiveReader::open(args.str("archive"));
  if (!reader.ok()) return fail_reading("tail", reader.status());
  auto oldest = reader->first_seq();
  if (!oldest.ok()) return fail_reading("tail", oldest.status());
  const std::string from_text = args.str("from", "oldest");
  uint64_t from = *oldest;
  if (from_text != "oldest") {
    auto f = args.count("from", 0);
    if (!f.ok()) return fail("tail", absl::InvalidArgumentError("--from with --archive: oldest or a sequence"));
    from = *f;
  }
  auto count = args.count("count", UINT64_MAX);
  // At the end: stop (the default), or follow the recorder (--follow), for
  // --idle-exit without a record if given.
  auto idle_exit = args.duration_ns("idle-exit", args.has("follow") ? UINT64_MAX : 0);
  if (!count.ok()) return fail("tail", count.status());
  if (!idle_exit.ok()) return fail("tail", idle_exit.status());
  if (from < *oldest) {
    print_gap("tail", from, *oldest, "not in the archive (removed by retention, or recorded from later)");
    from = *oldest;
  }
  if (auto st = reader->seek(from); !st.ok()) return fail_reading("tail", st);
  install_stop_handlers();
  const bool print = args.has("print");
  uint64_t read = 0, torn = 0, misplaced = 0, gaps = 0, lost = 0, holes = 0, last_seq = 0;
  uint64_t expect = from;
  uint64_t idle_since = now_ns();
  int rc = 0;
  archive::ArchiveEntry e;
  while (read < *count && !stop_requested()) {
    auto got = reader->next(&e);
    if (!got.ok()) {
      std::fprintf(stderr, "ringfire tail: %s\n", std::string(got.status().message()).c_str());
      rc = 3;
      break;
    }
    if (!*got) {
      if (now_ns() - idle_since >= *idle_exit) break;
      ring::sleep_ns(1'000'000);
      continue;
    }
    idle_since = now_ns();
    if (e.gap) {
      ++gaps;
      lost += e.gap_lost;
      holes += e.seq - expect;
      holes += e.gap_end - e.seq - e.gap_lost;
      expect = e.gap_end;
      continue;
    }
    holes += e.seq - expect;
    expect = e.seq + 1;
    ++read;
    last_seq = e.seq;
    switch (ring::check_record(reinterpret_cast<const std::byte*>(e.bytes.data()), e.bytes.size(), e.seq)) {
      case ring::CheckVerdict::kOk: break;
      case ring::CheckVerdict::kWrongSeq: ++misplaced; break;
      default: ++torn; break;
    }
    if (print) std::printf("seq %llu len %zu\n", static_cast<ull>(e.seq), e.bytes.size());
  }
  if (const int settled = settle_tail("tail", *reader, args.str("archive")); rc == 0) rc = settled;
  std::printf(
      "tail: %llu records verified, %llu lost in %llu gaps, %llu holes skipped, %llu torn, %llu misplaced, "
      "last seq %llu\n",
      static_cast<ull>(read - torn - misplaced), static_cast<ull>(lost), static_cast<ull>(gaps),
      static_cast<ull>(holes), static_cast<ull>(torn), static_cast<ull>(misplaced), static_cast<ull>(last_seq));
  return (rc != 0 || torn != 0 || misplaced != 0) ? 3 : 0;
}

}  // namespace ringfire::cli
