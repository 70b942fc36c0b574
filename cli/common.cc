// common.cc — shared subcommand helpers.
#include "cli/common.h"

#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ringfire::cli {
namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }
}  // namespace

int fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "ringfire %s: %s\n", command, std::string(status.message()).c_str());
  return 2;
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

bool is_directory(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string same_path_key(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) p = path;
  std::filesystem::path c = std::filesystem::weakly_canonical(p, ec);
  if (ec) c = p;
  std::string key = c.lexically_normal().string();
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  return key;
}

absl::StatusOr<std::string> counters_dir(const Args& args) {
  std::string dir = args.str("counters-dir", "/dev/shm");
  // A directory that is not there showed an empty view, as if nothing ran (helper-46).
  if (!is_directory(dir)) {
    return absl::InvalidArgumentError(absl::StrCat("--counters-dir ", dir, " is not a directory"));
  }
  return dir;
}

absl::StatusOr<ring::StartPosition> parse_start(const std::string& text) {
  if (text == "latest") return ring::StartPosition::latest();
  if (text == "oldest") return ring::StartPosition::oldest();
  uint64_t seq = 0;
  if (absl::SimpleAtoi(text, &seq)) {
    // Sequences stay below 2^62 (the wire refuses more): a reader put past
    // that read slots as misplaced records (helper-46).
    if (seq >= (uint64_t{1} << 62)) {
      return absl::InvalidArgumentError(absl::StrCat("--from ", text, ": a sequence is below 2^62 (4611686018427387904)"));
    }
    return ring::StartPosition::at(seq);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--from ", text, ": expected latest, oldest or a sequence number"));
}

absl::StatusOr<uint64_t> parse_schema(const std::string& text) {
  uint64_t sig = 0;
  const bool hex = text.rfind("0x", 0) == 0;
  if (hex ? absl::SimpleHexAtoi(text.substr(2), &sig) : absl::SimpleAtoi(text, &sig)) return sig;
  return absl::InvalidArgumentError(
      absl::StrCat("--schema ", text, ": expected a number (decimal or 0x hex)"));
}

absl::StatusOr<ring::IdleMode> parse_idle(const std::string& text) {
  if (auto m = ring::parse_idle_mode(text)) return *m;
  return absl::InvalidArgumentError(
      absl::StrCat("--idle ", text, ": expected spin, yield, backoff or hot"));
}

absl::StatusOr<mux::FlushPolicy> parse_flush(const std::string& text) {
  if (text == "manual") return mux::FlushPolicy::manual();
  if (text == "auto") return mux::FlushPolicy{};
  if (uint64_t us = 0;
      text.rfind("linger:", 0) == 0 && absl::SimpleAtoi(text.substr(7), &us) && us > 0 && us <= 1'000'000) {
    return mux::FlushPolicy::linger(us * 1000);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--flush ", text, ": use auto, manual or linger:MICROSECONDS (1 to 1000000)"));
}

std::vector<OptionSpec> with_fault_options(std::vector<OptionSpec> options) {
  options.push_back({"loss", "PERMILLE", "test: drop this many datagrams per thousand (seeded)"});
  options.push_back({"dup-rate", "PERMILLE", "test: duplicate datagrams per thousand"});
  options.push_back({"reorder", "PERMILLE", "test: reorder datagrams per thousand"});
  options.push_back({"delay", "PERMILLE", "test: delay datagrams per thousand by --delay-us"});
  options.push_back({"delay-us", "US", "test: the delay (default 500)"});
  options.push_back({"seed", "N", "test: fault injection seed (default 1)"});
  return options;
}

absl::StatusOr<dataplane::FaultConfig> parse_faults(const Args& args) {
  auto loss = args.count("loss", 0);
  auto dups = args.count("dup-rate", 0);
  auto reorder = args.count("reorder", 0);
  auto delay = args.count("delay", 0);
  auto delay_us = args.count("delay-us", 500);
  auto seed = args.count("seed", 1);
  for (const auto* s : {&loss, &dups, &reorder, &delay, &delay_us, &seed}) {
    if (!s->ok()) return s->status();
  }
  if (*loss + *dups + *reorder + *delay > 1000) {
    return absl::InvalidArgumentError(
        "fault rates are per thousand and must add up to at most 1000");
  }
  dataplane::FaultConfig f;
  f.drop_ppm = static_cast<uint32_t>(*loss * 1000);
  f.duplicate_ppm = static_cast<uint32_t>(*dups * 1000);
  f.reorder_ppm = static_cast<uint32_t>(*reorder * 1000);
  f.delay_ppm = static_cast<uint32_t>(*delay * 1000);
  f.delay_ns = *delay_us * 1000;
  f.seed = *seed;
  return f;
}

}  // namespace ringfire::cli
