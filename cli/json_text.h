// json_text.h — a JSON value as text for people and tools. A string that
// is not valid UTF-8 (a request's bytes quoted in an error, a name from a
// ring header or a peer) has its bad bytes replaced by U+FFFD: never an
// exception, which the daemon's ctl answer once turned into an abort.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ringfire::cli {

// json_text: j.dump(indent), bad UTF-8 replaced (indent -1: one line).
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ringfire::cli
