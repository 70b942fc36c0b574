// args.cc — subcommand option parsing.
#include "cli/args.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ringfire::cli {
namespace {

const OptionSpec* find(const CommandSpec& spec, const std::string& name) {
  for (const OptionSpec& o : spec.options) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

std::optional<uint64_t> scaled(const std::string& digits, uint64_t scale) {
  uint64_t v = 0;
  if (digits.empty() || !absl::SimpleAtoi(digits, &v)) return std::nullopt;
  if (scale != 0 && v > UINT64_MAX / scale) return std::nullopt;
  return v * scale;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

std::optional<uint64_t> parse_count(const std::string& t) {
  static const std::pair<const char*, uint64_t> kSuffixes[] = {
      {"Ki", 1ull << 10}, {"Mi", 1ull << 20}, {"Gi", 1ull << 30},
      {"k", 1000},        {"K", 1000},        {"M", 1000000},     {"G", 1000000000}};
  for (const auto& [suffix, scale] : kSuffixes) {
    if (ends_with(t, suffix)) return scaled(t.substr(0, t.size() - std::strlen(suffix)), scale);
  }
  return scaled(t, 1);
}

std::optional<uint64_t> parse_duration_ns(const std::string& t) {
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"ns", 1}, {"us", 1000}, {"ms", 1000000}, {"s", 1000000000}};
  for (const auto& [unit, scale] : kUnits) {
    if (ends_with(t, unit)) return scaled(t.substr(0, t.size() - std::strlen(unit)), scale);
  }
  return scaled(t, 1000000000);
}

Args Args::from_values(const std::string& command, std::map<std::string, std::string> values,
                       std::vector<std::string> positionals) {
  Args a;
  a.command_ = command;
  a.values_ = std::move(values);
  a.positionals_ = std::move(positionals);
  return a;
}

absl::StatusOr<Args> Args::parse(const CommandSpec& spec, int argc, char** argv, int first) {
  Args a;
  a.command_ = spec.name;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help_ = true;
      return a;
    }
    if (arg == "--") {  // the rest is passed through (EAL arguments)
      a.rest_.assign(argv + i + 1, argv + argc);
      break;
    }
    if (arg.rfind("--", 0) != 0) {
      a.positionals_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const OptionSpec* o = find(spec, name);
    if (o == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", name, " for 'ringfire ",
                                                     spec.name, "' (see ringfire ", spec.name,
                                                     " --help)"));
    }
    if (o->value == nullptr) {
      if (value) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
      a.values_[name] = "1";
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value (", o->value, ")"));
      }
      value = argv[++i];
    }
    a.values_[name] = *value;
  }
  if (a.positionals_.size() < spec.min_positionals || a.positionals_.size() > spec.max_positionals) {
    return absl::InvalidArgumentError(absl::StrCat("usage: ringfire ", spec.name, " ",
                                                   spec.positionals, " [options] (see --help)"));
  }
  return a;
}

std::string Args::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

absl::StatusOr<uint64_t> Args::count(const std::string& name, uint64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto v = parse_count(it->second)) return *v;
  return absl::InvalidArgumentError(absl::StrCat(
      "--", name, " ", it->second, ": expected a whole number, optionally with k/M/G or Ki/Mi/Gi"));
}

absl::StatusOr<uint64_t> Args::duration_ns(const std::string& name, uint64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto v = parse_duration_ns(it->second)) return *v;
  return absl::InvalidArgumentError(absl::StrCat(
      "--", name, " ", it->second, ": expected a duration such as 5s, 250ms, 50us"));
}

std::string usage(const CommandSpec& spec) {
  std::string out = absl::StrCat("usage: ringfire ", spec.name, " ", spec.positionals,
                                 " [options]\n\n", spec.summary, "\n\noptions:\n");
  for (const OptionSpec& o : spec.options) {
    std::string left = absl::StrCat("  --", o.name, o.value ? absl::StrCat(" ", o.value) : "");
    if (left.size() < 26) left.resize(26, ' ');
    absl::StrAppend(&out, left, " ", o.help, "\n");
  }
  absl::StrAppend(&out, "  --help                   this text\n");
  return out;
}

}  // namespace ringfire::cli
