// dpdk_telemetry.cc — /ringfire/* telemetry commands (see dpdk_telemetry.h).
#include "cli/dpdk_telemetry.h"

#include <cstdlib>
#include <mutex>

#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include <rte_telemetry.h>
#endif

namespace ringfire::cli {
namespace {

std::mutex g_mu;  // conductor (publish) <-> DPDK's telemetry thread (the commands)
TelemetrySnapshot g_snapshot;
constexpr size_t kPage = 100;  // names per /ringfire/sessions page (the dict holds 256 entries)

#if RINGFIRE_HAVE_DPDK
// fit: a string short enough for a telemetry value.
std::string fit(const std::string& s) { return s.substr(0, RTE_TEL_MAX_STRING_LEN - 1); }

int ports_cmd(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> l(g_mu);
  rte_tel_data_start_dict(d);
  for (const auto& p : g_snapshot.ports) {
    rte_tel_data* c = rte_tel_data_alloc();
    if (c == nullptr) return -1;
    rte_tel_data_start_dict(c);
    rte_tel_data_add_dict_string(c, "path", fit(p.path).c_str());
    rte_tel_data_add_dict_string(c, "worker", fit(p.worker).c_str());
    for (const auto& [k, v] : p.counters) rte_tel_data_add_dict_u64(c, k.c_str(), v);
    rte_tel_data_add_dict_container(d, fit(p.name).c_str(), c, 0);
  }
  return 0;
}

int sessions_cmd(const char*, const char* params, rte_tel_data* d) {
  size_t page = 0;
  if (params != nullptr && *params != '\0') {
    char* end = nullptr;
    page = std::strtoul(params, &end, 10);
    if (end == params || *end != '\0') return -1;  // not a page number
    if (page > 1'000'000) return -1;                  // page * kPage must not wrap to an early page
  }
  std::lock_guard<std::mutex> l(g_mu);
  rte_tel_data_start_dict(d);
  const size_t first = page * kPage;
  rte_tel_data* names = rte_tel_data_alloc();
  if (names == nullptr) return -1;
  rte_tel_data_start_dict(names);
  for (size_t i = first; i < g_snapshot.sessions.size() && i < first + kPage; ++i) {
    rte_tel_data_add_dict_string(names, fit(g_snapshot.sessions[i].name).c_str(), g_snapshot.sessions[i].kind.c_str());
  }
  rte_tel_data_add_dict_container(d, "sessions", names, 0);
  rte_tel_data_add_dict_u64(d, "total", g_snapshot.sessions.size());
  rte_tel_data_add_dict_u64(d, "page", page);
  if (first + kPage < g_snapshot.sessions.size()) rte_tel_data_add_dict_u64(d, "next", page + 1);
  return 0;
}

int session_cmd(const char*, const char* params, rte_tel_data* d) {
  if (params == nullptr) return -1;
  std::lock_guard<std::mutex> l(g_mu);
  for (const auto& s : g_snapshot.sessions) {
    if (s.name != params) continue;
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_string(d, "name", fit(s.name).c_str());
    rte_tel_data_add_dict_string(d, "kind", s.kind.c_str());
    rte_tel_data_add_dict_string(d, "ring", fit(s.ring).c_str());
    rte_tel_data_add_dict_string(d, "state", fit(s.state).c_str());
    for (const auto& [k, v] : s.counters) rte_tel_data_add_dict_u64(d, k.c_str(), v);
    return 0;
  }
  return -1;  // no such session: the client sees null
}
#endif

}  // namespace

bool telemetry_register() {
#if RINGFIRE_HAVE_DPDK
  static bool done = false;
  if (done) return true;
  done = rte_telemetry_register_cmd("/ringfire/ports", ports_cmd,
                                    "Every port: its active path, worker and counters. No parameters.") == 0 &&
         rte_telemetry_register_cmd("/ringfire/sessions", sessions_cmd,
                                    "Session names and kinds, 100 a page. Parameter: the page (default 0).") == 0 &&
         rte_telemetry_register_cmd("/ringfire/session", session_cmd,
                                    "One session's counters. Parameter: its name.") == 0;
  return done;
#else
  return false;
#endif
}

void telemetry_publish(TelemetrySnapshot snapshot) {
  std::lock_guard<std::mutex> l(g_mu);
  g_snapshot = std::move(snapshot);
}

}  // namespace ringfire::cli
