// config_file.cc — see config_file.h.
#include "cli/config_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
    v.is_array = true;
    if (a->size() > 256) {  // 200,000 items made a 400 KB error line (helper-46)
      return absl::InvalidArgumentError(absl::StrCat(path, ":", v.line, ": ", key, ": an array of ", a->size(),
                                                     " items; at most 256"));
    }
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
  // A regular file or a pipe (`run <(...)`), read up to 1 MiB and a byte:
  // /dev/zero grew the reader without end and a directory read as empty
  // (review helper-35). Opened without waiting for a FIFO's writer; a
  // FIFO no one writes reads as empty.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot read the config file ", path, ": ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode))) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a file; give the config file's path"));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // a pipe's writer may be slower than this reader
  constexpr size_t kMax = 1u << 20;
  std::string text(kMax + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;  // a signal is no end of the file (review helper-38)
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("cannot read the config file ", path, ": ", std::strerror(err)));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > kMax) return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 1 MiB; is it a config file?"));
  text.resize(got);
  return parse_config_text(text, path);
}

}  // namespace ringfire::cli
