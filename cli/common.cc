// common.cc — shared subcommand helpers.
#include "cli/common.h"

#include <signal.h>

#include <atomic>
#include <cstdio>

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

absl::StatusOr<ring::StartPosition> parse_start(const std::string& text) {
  if (text == "latest") return ring::StartPosition::latest();
  if (text == "oldest") return ring::StartPosition::oldest();
  uint64_t seq = 0;
  if (absl::SimpleAtoi(text, &seq)) return ring::StartPosition::at(seq);
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
      absl::StrCat("--idle ", text, ": expected spin, yield or backoff"));
}

}  // namespace ringfire::cli
