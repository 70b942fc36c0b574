// config_file.h — reading `ringfire run`'s TOML config into plain tables:
// top-level keys, and the [[port]], [[serve]], [[mirror]], [[node]] and
// [[record]] arrays, each
// key with its value as the command line would spell it (integers in
// decimal, arrays joined with commas, booleans as switches) and the line it
// is on, so that every later error can name the file, the line and the key.
// Syntax errors say where. Start-up only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringfire::cli {

struct ConfigValue {
  std::string text;   // the value, as a flag's
  bool is_bool = false;
  bool flag = false;  // is_bool: its value
  bool is_array = false;  // written as an array (text: its items joined by ',')
  int line = 0;
};

struct ConfigTable {
  std::string kind;   // "port", "serve", "mirror", "node", "record"; "" for the top level
  int line = 0;       // where it starts
  std::map<std::string, ConfigValue> values;
  // name: its `name` key, or "<kind> #N".
  std::string name;
};

struct ConfigFile {
  std::string path;
  ConfigTable top;
  std::vector<ConfigTable> ports, serves, mirrors, nodes, records;
  // where: "PATH:LINE" of `key` in `t` (of the table when it has no such key).
  std::string where(const ConfigTable& t, const std::string& key = "") const;
};

// read_config_file parses `path` (or, with `text`, that text, named `path`).
absl::StatusOr<ConfigFile> read_config_file(const std::string& path);
absl::StatusOr<ConfigFile> parse_config_text(const std::string& text, const std::string& path);

}  // namespace ringfire::cli
