// json_out.h — the harnesses' JSON: a latency summary from a histogram, in
// nanoseconds, written as one object.
#pragma once

#include <cstdio>
#include <string>

#include "perf/histogram.h"

namespace ringfire::perf {

// latency_json formats count and percentiles (ns) of `h` as JSON fields.
inline std::string latency_json(const LatencyHistogram& h) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "\"count\": %llu, \"min_ns\": %llu, \"p50_ns\": %llu, \"p90_ns\": %llu, "
                "\"p99_ns\": %llu, \"p999_ns\": %llu, \"max_ns\": %llu",
                static_cast<unsigned long long>(h.count()), static_cast<unsigned long long>(h.min()),
                static_cast<unsigned long long>(h.percentile(0.5)),
                static_cast<unsigned long long>(h.percentile(0.9)),
                static_cast<unsigned long long>(h.percentile(0.99)),
                static_cast<unsigned long long>(h.percentile(0.999)),
                static_cast<unsigned long long>(h.max()));
  return buf;
}

// write_json writes `body` (an object's fields) to `path`, or stdout if "-".
inline bool write_json(const std::string& path, const std::string& body) {
  FILE* f = path == "-" ? stdout : std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "{%s}\n", body.c_str());
  if (f != stdout) std::fclose(f);
  return true;
}

}  // namespace ringfire::perf
