// config_file.cc — see config_file.h.
#include "cli/config_file.h"

#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "absl/strings/str_cat.h"

namespace ringfire::cli {
namespace {

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

absl::StatusOr<ConfigValue> value_of(const std::string& path, const std::string& key, const toml::node& n) {
  ConfigValue v;
  v.line = line_of(n);
  if (auto s = n.value<std::string>(); s && n.is_string()) {
    v.text = *s;
  } else if (n.is_integer()) {
    v.text = std::to_string(*n.value<int64_t>());
  } else if (n.is_boolean()) {
    v.is_bool = true;
    v.flag = *n.value<bool>();
  } else if (const toml::array* a = n.as_array()) {
    for (const toml::node& e : *a) {
      if (!e.is_string() && !e.is_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line_of(e), ": ", key,
                                                       ": an array of strings or integers"));
      }
      if (!v.text.empty()) v.text += ",";
      v.text += e.is_string() ? *e.value<std::string>() : std::to_string(*e.value<int64_t>());
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", v.line, ": ", key,
                                                   ": a string, an integer, a boolean or an array of them"));
  }
  return v;
}

absl::StatusOr<ConfigTable> table_of(const std::string& path, const std::string& kind, const toml::table& t,
                                     size_t index) {
  ConfigTable out;
  out.kind = kind;
  out.line = line_of(t);
  for (auto&& [k, node] : t) {
    const std::string key(k.str());
    if (node.is_table() || (node.is_array() && node.as_array()->is_array_of_tables())) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_of(node), ": [[", kind, "]] ", key,
                                                     ": a table has no sub-tables"));
    }
    auto v = value_of(path, key, node);
    if (!v.ok()) return v.status();
    out.values[key] = *v;
  }
  auto it = out.values.find("name");
  out.name = it != out.values.end() ? it->second.text : absl::StrCat(kind, " #", index + 1);
  return out;
}

}  // namespace

std::string ConfigFile::where(const ConfigTable& t, const std::string& key) const {
  auto it = t.values.find(key);
  return absl::StrCat(path, ":", it != t.values.end() ? it->second.line : t.line);
}

absl::StatusOr<ConfigFile> parse_config_text(const std::string& text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.source().begin.line, ":", e.source().begin.column,
                                                   ": ", std::string(e.description())));
  }
  ConfigFile f;
  f.path = path;
  f.top.line = 1;
  for (auto&& [k, node] : root) {
    const std::string key(k.str());
    std::vector<ConfigTable>* into = key == "port" ? &f.ports : key == "serve" ? &f.serves
                                   : key == "mirror" ? &f.mirrors : key == "node" ? &f.nodes
                                   : key == "record" ? &f.records : nullptr;
    if (into != nullptr) {
      const toml::array* a = node.as_array();
      if (a == nullptr || !a->is_array_of_tables()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line_of(node), ": ", key,
                                                       ": write it as [[", key, "]] tables"));
      }
      for (size_t i = 0; i < a->size(); ++i) {
        auto t = table_of(path, key, *a->get(i)->as_table(), i);
        if (!t.ok()) return t.status();
        into->push_back(std::move(*t));
      }
      continue;
    }
    if (node.is_table() || node.is_array_of_tables()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_of(node), ": unknown table [", key,
                                                     "]: the tables are [[port]], [[serve]], [[mirror]], [[node]] and [[record]]"));
    }
    auto v = value_of(path, key, node);
    if (!v.ok()) return v.status();
    f.top.values[key] = *v;
  }
  return f;
}

absl::StatusOr<ConfigFile> read_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the config file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 1 MiB; is it a config file?"));
  }
  return parse_config_text(ss.str(), path);
}

}  // namespace ringfire::cli
