// archive_lookup.cc — what finding a sequence in an archive costs as the
// archive grows: builds an archive of the given size in the real format
// (256 MiB segments, an index entry per MiB, 1 MiB batches) as sparse
// files — each batch holds one 64-byte record at its first sequence and
// covers the 16,384 after it, the rest of its MiB zeroes that are never
// written — then times random lookups (ArchiveReader::seek + next) warm,
// and cold (page cache dropped before each), and counts what each touched.
//
//   archive_lookup DIR SIZE_GB [LOOKUPS]
//
// Prints one JSON object. Removes nothing: DIR is the caller's.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "archive/archive_reader.h"
#include "archive/batch_builder.h"
#include "archive/format.h"

namespace {

using namespace ringfire::archive;

constexpr uint64_t kSegmentBytes = 256ull << 20;
constexpr uint64_t kBatchBytes = 1ull << 20;
constexpr uint64_t kSeqsPerBatch = kBatchBytes / 64;  // as if full of 64-byte records
constexpr uint32_t kRecord = 64;

bool write_file(const std::string& path, const void* p, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, p, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

// build writes the archive: catalog, segments, indexes.
bool build(const std::string& dir, uint64_t segments) {
  Catalog cat;
  cat.shape = RingShape{1u << 1 /* sparse */, kRecord, kRecord, 0};
  cat.segment_bytes = kSegmentBytes;
  cat.index_interval = kBatchBytes;
  cat.max_batch_bytes = kBatchBytes;
  const uint64_t batches = (kSegmentBytes - kSegmentHeaderBytes) / kBatchBytes;  // 255 per segment
  // One batch image: a header, one record entry, zeroes to 1 MiB - 4 KiB
  // (so the next starts a MiB later, block-aligned). Only its first block
  // is ever written; the checksum covers the zeroes the sparse file reads.
  const uint64_t batch_bytes = kBatchBytes;
  std::vector<uint8_t> img(batch_bytes, 0);
  uint64_t seq = 0;
  for (uint64_t s = 0; s < segments; ++s) {
    const uint64_t first = seq;
    const std::string seg = dir + "/" + segment_name(first);
    const int fd = ::open(seg.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(kSegmentBytes)) != 0) return false;
    uint8_t head[kSegmentHeaderBytes] = {};
    encode_segment_header(SegmentHeader{cat.shape, first, kSegmentBytes, kBatchBytes}, head);
    if (pwrite(fd, head, sizeof(head), 0) != static_cast<ssize_t>(sizeof(head))) return false;
    std::vector<uint8_t> idx;
    for (uint64_t b = 0; b < batches; ++b) {
      const uint64_t offset = kSegmentHeaderBytes + b * kBatchBytes;
      std::memset(img.data(), 0, kBlock);
      encode_entry_header(EntryHeader{seq, kRecord, kEntryRecord}, img.data() + kBatchHeaderBytes);
      std::memset(img.data() + kBatchHeaderBytes + kEntryHeaderBytes, 0xA5, kRecord);
      BatchHeader h{static_cast<uint32_t>(batch_bytes), seq, seq + kSeqsPerBatch, 1, 0};
      encode_batch_header(h, img.data());
      h.checksum = batch_checksum(img.data(), batch_bytes);
      encode_batch_header(h, img.data());
      if (pwrite(fd, img.data(), kBlock, static_cast<off_t>(offset)) != static_cast<ssize_t>(kBlock)) return false;
      uint8_t ie[kIndexEntryBytes];
      encode_index_entry(IndexEntry{seq, offset}, ie);
      idx.insert(idx.end(), ie, ie + sizeof(ie));
      seq += kSeqsPerBatch;
    }
    ::close(fd);
    if (!write_file(dir + "/" + index_name(first), idx.data(), idx.size())) return false;
    cat.segments.push_back(CatalogSegment{first, seq, batches, batches * kBatchBytes, true});
  }
  const std::string bytes = encode_catalog(cat);
  return write_file(dir + "/catalog", bytes.data(), bytes.size());
}

void drop_caches() {
  sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd >= 0) {
    (void)::write(fd, "3", 1);
    ::close(fd);
  }
}

struct Timing {
  double p50_us = 0, p99_us = 0, mean_us = 0;
};

Timing summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  Timing t;
  double sum = 0;
  for (double v : us) sum += v;
  t.mean_us = sum / static_cast<double>(us.size());
  t.p50_us = us[us.size() / 2];
  t.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: archive_lookup DIR SIZE_GB [LOOKUPS]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t gb = std::strtoull(argv[2], nullptr, 10);
  const int lookups = argc > 3 ? std::atoi(argv[3]) : 2000;
  const uint64_t segments = std::max<uint64_t>(1, (gb << 30) / kSegmentBytes);
  const auto t0 = std::chrono::steady_clock::now();
  if (!build(dir, segments)) {
    std::fprintf(stderr, "archive_lookup: building %s failed: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto reader = ArchiveReader::open(dir);
  if (!reader.ok()) {
    std::fprintf(stderr, "archive_lookup: %s\n", std::string(reader.status().message()).c_str());
    return 1;
  }
  const uint64_t end = reader->catalog().segments.back().end_seq;
  std::mt19937_64 rng(42);
  auto one = [&](bool cold, std::vector<double>* us) -> bool {
    const uint64_t target = (rng() % (end / kSeqsPerBatch)) * kSeqsPerBatch + (rng() % 2 ? rng() % kSeqsPerBatch : 0);
    if (cold) drop_caches();
    const auto a = std::chrono::steady_clock::now();
    if (!reader->seek(target).ok()) return false;
    ArchiveEntry e;
    auto got = reader->next(&e);
    const auto b = std::chrono::steady_clock::now();
    if (!got.ok() || !*got || e.seq < target || e.seq >= target + kSeqsPerBatch) {
      std::fprintf(stderr, "archive_lookup: lookup of %llu found %s\n", static_cast<unsigned long long>(target),
                   got.ok() ? "the wrong record" : std::string(got.status().message()).c_str());
      return false;
    }
    us->push_back(std::chrono::duration<double, std::micro>(b - a).count());
    return true;
  };
  std::vector<double> warm, cold;
  for (int i = 0; i < 200; ++i) {
    if (!one(false, &warm)) return 1;  // warm-up
  }
  warm.clear();
  const ReaderCounters before = reader->counters();
  for (int i = 0; i < lookups; ++i) {
    if (!one(false, &warm)) return 1;
  }
  const ReaderCounters after = reader->counters();
  for (int i = 0; i < std::min(lookups, 100); ++i) {
    if (!one(true, &cold)) return 1;
  }
  const Timing w = summarize(warm);
  const Timing c = summarize(cold);
  const double n = lookups;
  std::printf(
      "{\"size_gb\": %llu, \"segments\": %llu, \"build_s\": %.1f, \"lookups\": %d,\n"
      " \"warm_us\": {\"p50\": %.1f, \"p99\": %.1f, \"mean\": %.1f},\n"
      " \"cold_us\": {\"p50\": %.1f, \"p99\": %.1f, \"mean\": %.1f},\n"
      " \"per_lookup\": {\"catalog_loads\": %.3f, \"segments_opened\": %.3f, \"index_reads\": %.3f, "
      "\"batches_read\": %.3f, \"index_misses\": %.3f}}\n",
      static_cast<unsigned long long>(gb), static_cast<unsigned long long>(segments), build_s, lookups, w.p50_us,
      w.p99_us, w.mean_us, c.p50_us, c.p99_us, c.mean_us,
      static_cast<double>(after.catalog_loads - before.catalog_loads) / n,
      static_cast<double>(after.segments_opened - before.segments_opened) / n,
      static_cast<double>(after.index_reads - before.index_reads) / n,
      static_cast<double>(after.batches_read - before.batches_read) / n,
      static_cast<double>(after.index_misses - before.index_misses) / n);
  return 0;
}
