// cmd_stat.cc — `ringfire stat`: a ring's header, writer and readers, with
// each reader's lag behind the writer.
#include <signal.h>
#include <time.h>

#include <cerrno>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/json_text.h"
#include "ring/registry.h"
#include "ring/ring_file.h"
#include "telemetry/counters_file.h"

namespace ringfire::cli {
namespace {

const CommandSpec kStat{"stat", "RING", 1, 1,
                        "Show a ring's geometry, write sequence, writer and readers (with lag),\n"
                        "and the counters of every serve or mirror process of this ring on this host\n"
                        "(rejections by reason among them), read from their counters files.",
                        {
                            {"counters-dir", "DIR", "where processes keep counters files (default /dev/shm)"},
                            {"json", nullptr, "everything as one JSON object (for scripts and monitoring)"},
                        }};

const char* liveness(uint64_t pid) {
  if (pid == 0) return "none";
  return (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) ? "alive" : "gone";
}

}  // namespace

int cmd_stat(int argc, char** argv, int first) {
  auto args = Args::parse(kStat, argc, argv, first);
  if (!args.ok()) return fail("stat", args.status());
  if (args->help()) {
    std::fputs(usage(kStat).c_str(), stdout);
    return 0;
  }
  auto file = ring::RingFile::open(args->positionals()[0]);
  if (!file.ok()) return fail("stat", file.status());
  const ring::RingHeader& h = file->header();
  using ull = unsigned long long;
  const uint64_t ws = h.write_seq.load(std::memory_order_acquire);  // pairs with the writer's release
  const uint64_t writer = h.writer_pid.load(std::memory_order_relaxed);
  const auto readers = ring::ReaderRegistry::list(*file);
  const auto counters = counters_dir(*args);
  if (!counters.ok()) return fail("stat", counters.status());
  const auto processes = telemetry::read_counters(*counters);
  const uint64_t now = now_ns();
  if (args->has("json")) {
    nlohmann::json j = {{"ring", file->path()},
                        {"kind", file->blob() ? "blob" : "fixed-slot"},
                        {"sparse", file->sparse()},
                        {"capacity", h.capacity},
                        {"slot_size", h.slot_size},
                        {"slot_stride", h.slot_stride},
                        {"schema", h.schema_signature},
                        {"file_bytes", h.file_size},
                        {"write_seq", ws},
                        {"oldest_retained", ws > h.capacity ? ws - h.capacity : 0},
                        {"writer", {{"pid", writer}, {"state", liveness(writer)}}},
                        {"registry_size", h.registry_size}};
    if (file->blob()) {
      j["arena_bytes"] = h.arena_size;
      j["arena_reserved"] = h.arena_reserved.load(std::memory_order_relaxed);
    }
    j["readers"] = nlohmann::json::array();
    for (const ring::ReaderInfo& r : readers) {
      j["readers"].push_back({{"index", r.index}, {"name", r.name}, {"pid", r.pid}, {"alive", r.alive},
                              {"cursor", r.cursor}, {"lag", ws > r.cursor ? ws - r.cursor : 0}, {"lost", r.lost}});
    }
    j["processes"] = nlohmann::json::array();
    for (const telemetry::ProcessCounters& p : processes) {
      if (!telemetry::names_ring(p, file->path())) continue;
      nlohmann::json c = nlohmann::json::object();
      for (const auto& [label, value] : p.counters) c[label] = value;
      nlohmann::json proc = {{"pid", p.pid}, {"uid", p.uid}, {"role", p.role}, {"detail", p.detail},
                             {"age_s", now > p.updated_ns ? static_cast<double>(now - p.updated_ns) / 1e9 : 0.0},
                             {"counters", c}};
      if (!p.user.empty()) proc["user"] = p.user;
      j["processes"].push_back(std::move(proc));
    }
    std::printf("%s\n", json_text(j, 2).c_str());
    return 0;
  }
  std::printf("ring        %s\n", file->path().c_str());
  std::printf("kind        %s%s\n", file->blob() ? "blob" : "fixed-slot",
              file->sparse() ? ", sparse (mirror)" : "");
  std::printf("capacity    %llu slots of %u bytes (stride %u)\n", static_cast<ull>(h.capacity),
              h.slot_size, h.slot_stride);
  if (file->blob()) {
    std::printf("arena       %llu bytes, %llu reserved so far\n", static_cast<ull>(h.arena_size),
                static_cast<ull>(h.arena_reserved.load(std::memory_order_relaxed)));
  }
  std::printf("schema      0x%016llx\n", static_cast<ull>(h.schema_signature));
  std::printf("file        %llu bytes\n", static_cast<ull>(h.file_size));
  std::printf("write_seq   %llu (oldest retained %llu)\n", static_cast<ull>(ws),
              static_cast<ull>(ws > h.capacity ? ws - h.capacity : 0));
  std::printf("writer      pid %llu (%s)\n", static_cast<ull>(writer), liveness(writer));
  std::printf("readers     %zu of %u registry entries\n", readers.size(), h.registry_size);
  for (const ring::ReaderInfo& r : readers) {
    std::printf("  #%-3u %-16s pid %-8llu %-5s cursor %-12llu lag %-10llu lost %llu\n", r.index,
                telemetry::printable(r.name).c_str(), static_cast<ull>(r.pid), r.alive ? "alive" : "gone",
                static_cast<ull>(r.cursor), static_cast<ull>(ws > r.cursor ? ws - r.cursor : 0),
                static_cast<ull>(r.lost));
  }
  // Processes serving or mirroring this ring: their counters files.
  for (const telemetry::ProcessCounters& p : processes) {
    if (!telemetry::names_ring(p, file->path())) continue;
    // A counters file's text is made printable on its way to the terminal.
    std::printf("process     pid %u %s (%s)%s%s, counters %.1f s old\n", p.pid, telemetry::printable(p.role).c_str(),
                telemetry::printable(p.detail).c_str(),
                p.user.empty() ? "" : ", user ", p.user.c_str(),
                now > p.updated_ns ? static_cast<double>(now - p.updated_ns) / 1e9 : 0.0);
    for (const auto& [label, value] : p.counters) {
      std::printf("  %-44s %llu\n", telemetry::printable(label).c_str(), static_cast<ull>(value));
    }
  }
  return 0;
}

}  // namespace ringfire::cli
