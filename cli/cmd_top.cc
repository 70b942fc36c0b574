// cmd_top.cc — `ringfire top`: a live view of every ringfire process on
// this host — each serve and mirror session with its rate, lag, NAKs,
// GAPs, drops, rejections and where its port landed — read once a second
// from the shared-memory counters files the processes keep, so it works
// while a process is busy or stuck (a stuck one shows its counters ageing).
// It never talks to the processes. Rates are the difference between two
// reads over the time between them.
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <chrono>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "telemetry/counters_file.h"

namespace ringfire::cli {
namespace {

const CommandSpec kTop{"top", "", 0, 0,
                       "A live view of every ringfire process on this host (serves and mirrors: rates, lag,\n"
                       "NAKs, GAPs, drops, rejections, the port's path), refreshed once a second from their\n"
                       "counters files. q or Ctrl-C quits.",
                       {
                           {"counters-dir", "DIR", "where processes keep counters files (default /dev/shm)"},
                           {"interval", "DURATION", "refresh interval (default 1s)"},
                           {"once", nullptr, "print one view (after one interval, for the rates) and exit"},
                       }};

uint64_t get(const telemetry::ProcessCounters& p, const std::string& name) {
  for (const auto& [k, v] : p.counters) {
    if (k == name) return v;
  }
  return 0;
}

uint64_t sum_prefix(const telemetry::ProcessCounters& p, const std::string& prefix) {
  uint64_t n = 0;
  for (const auto& [k, v] : p.counters) {
    if (k.rfind(prefix, 0) == 0) n += v;
  }
  return n;
}

std::string shorten(const std::string& s, size_t n) { return s.size() <= n ? s : "~" + s.substr(s.size() - (n - 1)); }

// view renders one screen: `now` and `before` are two reads `seconds` apart.
std::string view(const std::vector<telemetry::ProcessCounters>& now,
                 const std::map<std::string, telemetry::ProcessCounters>& before, double seconds, uint64_t now_ns,
                 std::map<std::string, uint64_t>& rates) {
  std::string out;
  char line[512];
  // The wall clock in the header: a live view visibly moves even when every
  // figure holds still (and a stuck one shows its age).
  char clock[16] = "";
  const time_t wall = time(nullptr);
  tm local{};
  if (localtime_r(&wall, &local) != nullptr) std::strftime(clock, sizeof(clock), "%H:%M:%S", &local);
  std::snprintf(line, sizeof(line), "ringfire top — %zu session(s) on this host, every %.1f s, %s (q quits)\n\n",
                now.size(), seconds, clock);
  out += line;
  std::snprintf(line, sizeof(line), "%-7s %-6s %-24s %-28s %10s %9s %8s %8s %8s %8s %6s\n", "PID", "ROLE", "RING",
                "DETAIL", "REC/S", "LAG", "NAKS", "GAPS", "DROPS", "REJECT", "AGE");
  out += line;
  for (const auto& p : now) {
    const bool serve = p.role == "serve";
    const bool mux = p.role == "mux";  // a stream-mux node: records sent or received, streams dropped
    const std::string rec = p.role + ".records";
    // The rate between the two publishes the reads saw (a process publishes
    // once a second: by its own stamps, not by when top happened to read).
    uint64_t rate = 0;
    if (auto it = before.find(p.path); it != before.end() && p.updated_ns > it->second.updated_ns) {
      const uint64_t a = get(it->second, rec), b = get(p, rec);
      const double dt = static_cast<double>(p.updated_ns - it->second.updated_ns) / 1e9;
      // Clamped: a file's counters are anyone's bytes, and a double past
      // 2^64 cast to u64 is undefined.
      rate = b > a ? static_cast<uint64_t>(std::min(static_cast<double>(b - a) / dt, 1e18)) : 0;
    } else if (auto r = rates.find(p.path); r != rates.end()) {
      rate = r->second;  // not published since: the last rate stands
    }
    rates[p.path] = rate;
    const bool record = p.role == "record";  // a recording: lag behind the writer, records lost to laps, disk errors
    const uint64_t lag = serve || mux ? 0 : get(p, record ? "record.lag" : "mirror.lag");
    const uint64_t naks = get(p, p.role + ".naks");
    const uint64_t gaps = mux ? 0 : serve ? get(p, "serve.gaps") : record ? get(p, "record.lost") : get(p, "mirror.gap_records");
    const uint64_t drops = get(p, mux      ? "mux.streams_dropped"
                                  : serve  ? "serve.port_drops"
                                  : record ? "record.disk_errors"
                                           : "mirror.port_drops");
    const uint64_t rejected = sum_prefix(p, "rejected.") + sum_prefix(p, "refused.");
    const double age = now_ns > p.updated_ns ? static_cast<double>(now_ns - p.updated_ns) / 1e9 : 0.0;
    std::snprintf(line, sizeof(line), "%-7u %-6s %-24s %-28s %10llu %9llu %8llu %8llu %8llu %8llu %5.1fs%s\n", p.pid,
                  // Text from the files is made printable here, on its way to
                  // the terminal: a file's bytes could carry escape sequences.
                  telemetry::printable(shorten(p.role, 6)).c_str(), telemetry::printable(shorten(p.ring, 24)).c_str(),
                  telemetry::printable(shorten(p.user.empty() ? p.detail : p.detail + " [" + p.user + "]", 28)).c_str(),  // the tail stays
                  static_cast<unsigned long long>(rate), static_cast<unsigned long long>(lag),
                  static_cast<unsigned long long>(naks), static_cast<unsigned long long>(gaps),
                  static_cast<unsigned long long>(drops), static_cast<unsigned long long>(rejected), age,
                  age > 3 ? "  stale" : "");
    out += line;
  }
  return out;
}

}  // namespace

int cmd_top(int argc, char** argv, int first) {
  auto args = Args::parse(kTop, argc, argv, first);
  if (!args.ok()) return fail("top", args.status());
  if (args->help()) {
    std::fputs(usage(kTop).c_str(), stdout);
    return 0;
  }
  auto interval = args->duration_ns("interval", 1'000'000'000);
  if (!interval.ok()) return fail("top", interval.status());
  if (*interval < 100'000'000 || *interval > 3'600'000'000'000) {
    return fail("top", absl::InvalidArgumentError("--interval: from 100ms to 1h"));
  }
  const auto counters = counters_dir(*args);
  if (!counters.ok()) return fail("top", counters.status());
  const std::string dir = *counters;
  const bool once = args->has("once");
  install_stop_handlers();
  const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  std::map<std::string, telemetry::ProcessCounters> before;
  std::map<std::string, uint64_t> rates;  // by counters file: the last rate seen
  uint64_t before_ns = now_ns();
  for (const auto& p : telemetry::read_counters(dir)) before[p.path] = p;
  termios saved{};
  const bool raw = tty && !once && tcgetattr(STDIN_FILENO, &saved) == 0;
  if (raw) {  // q without Enter, not echoed; restored on the way out
    termios t = saved;
    t.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &t);
  }
  bool quit = false;
  while (!quit && !stop_requested()) {
    // Wait one interval, watching for q.
    const uint64_t until = now_ns() + *interval;
    while (now_ns() < until && !stop_requested()) {
      char c;
      if (raw && read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q')) {
        quit = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (quit) break;
    const uint64_t t = now_ns();
    auto now = telemetry::read_counters(dir);
    std::sort(now.begin(), now.end(), [](const auto& a, const auto& b) {
      // Other users' sessions (root's view) after this user's and root's.
      if (a.user.empty() != b.user.empty()) return a.user.empty();
      return a.role != b.role ? a.role > b.role : a.ring != b.ring ? a.ring < b.ring : a.pid < b.pid;
    });
    const std::string screen = view(now, before, static_cast<double>(t - before_ns) / 1e9, t, rates);
    if (tty && !once) std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
    std::fputs(screen.c_str(), stdout);
    std::fflush(stdout);
    // Keep a process's older read until it publishes again (its rate spans
    // two of its own publishes).
    std::map<std::string, telemetry::ProcessCounters> next;
    for (const auto& p : now) {
      auto it = before.find(p.path);
      next[p.path] = it != before.end() && it->second.updated_ns == p.updated_ns ? it->second : p;
    }
    before = std::move(next);
    before_ns = t;
    if (once) break;
  }
  if (raw) tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  return 0;
}

}  // namespace ringfire::cli
