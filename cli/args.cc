// args.cc — subcommand option parsing.
#include "cli/args.h"

#include <algorithm>
#include <cstring>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ringfire::cli {
namespace {

// args_take: the spec has option `name`; args_take_value: `arg` is one of
// its options that takes a value (so the next word is that value, even if
// it starts with "--").
const OptionSpec* find(const CommandSpec& spec, const std::string& name) {
  for (const OptionSpec& o : spec.options) {
    if (name == o.name) return &o;
  }
  return nullptr;
}
bool args_take(const CommandSpec& spec, const std::string& name) { return find(spec, name) != nullptr; }
bool args_take_value(const CommandSpec& spec, const std::string& arg) {
  if (arg.rfind("--", 0) != 0 || arg.find('=') != std::string::npos) return false;
  const OptionSpec* o = find(spec, arg.substr(2));
  return o != nullptr && o->value != nullptr;
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

// parse: CLI11 (Debian's libcli11-dev) reads the options the spec
// declares; the messages stay ringfire's (they name the option and say
// what to change). `--help` anywhere before `--` asks for usage; what
// follows `--` is passed through untouched (EAL arguments).
absl::StatusOr<Args> Args::parse(const CommandSpec& spec, int argc, char** argv, int first) {
  Args a;
  a.command_ = spec.name;
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      a.rest_.assign(argv + i + 1, argv + argc);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      a.help_ = true;
      return a;
    }
    // An option the command does not have is named as such (CLI11 would
    // call it an extra argument).
    if (arg.rfind("--", 0) == 0 && !args_take(spec, arg.substr(2, arg.find('=') - 2)) &&
        (args.empty() || !args_take_value(spec, args.back()))) {
      const std::string name = arg.substr(2, arg.find('=') - 2);
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", name, " for 'ringfire ", spec.name,
                                                     "' (see ringfire ", spec.name, " --help)"));
    }
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      const OptionSpec* o = find(spec, arg.substr(2, arg.find('=') - 2));
      if (o != nullptr && o->value == nullptr && (args.empty() || !args_take_value(spec, args.back()))) {
        return absl::InvalidArgumentError(absl::StrCat("--", o->name, " takes no value"));
      }
    }
    args.push_back(arg);
  }
  CLI::App app(spec.summary, absl::StrCat("ringfire ", spec.name));
  app.set_help_flag();  // ours, above
  for (const OptionSpec& o : spec.options) {
    const std::string name = o.name;
    if (o.value == nullptr) {
      app.add_flag_callback(absl::StrCat("--", name), [&a, name] { a.values_[name] = "1"; }, o.help)
          ->disable_flag_override();
    } else {
      app.add_option_function<std::string>(
             absl::StrCat("--", name), [&a, name](const std::string& v) { a.values_[name] = v; }, o.help)
          ->type_name(o.value)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
  app.add_option("positionals", a.positionals_)->expected(0, -1);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ArgumentMismatch& e) {  // an option without its value
    for (const OptionSpec& o : spec.options) {
      if (o.value != nullptr && std::string(e.what()).find(absl::StrCat("--", o.name)) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("--", o.name, " needs a value (", o.value, ")"));
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(e.what(), " (see ringfire ", spec.name, " --help)"));
  } catch (const CLI::ParseError& e) {  // a switch given a value (--quiet=1), and the like
    return absl::InvalidArgumentError(absl::StrCat(e.what(), " (see ringfire ", spec.name, " --help)"));
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
