// args.h — command-line parsing for the `ringfire` subcommands: declared
// options only, `--name value` or `--name=value`, numbers with k/M/G (x1000)
// or Ki/Mi/Gi (x1024) suffixes, durations with ns/us/ms/s. Every error names
// the option and says what to change.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringfire::cli {

// OptionSpec declares one option of a subcommand.
struct OptionSpec {
  const char* name;   // without the leading "--"
  const char* value;  // placeholder for --help ("N", "SEQ"); nullptr: a switch
  const char* help;
};

// CommandSpec declares a subcommand for parsing and --help.
struct CommandSpec {
  const char* name;
  const char* positionals;  // usage text for positionals, e.g. "RING"
  size_t min_positionals;
  size_t max_positionals;
  const char* summary;
  std::vector<OptionSpec> options;
};

class Args {
 public:
  // from_values is what parse would make of `--name value` for each entry
  // (a switch: an empty value); the caller has checked the names.
  static Args from_values(const std::string& command, std::map<std::string, std::string> values,
                          std::vector<std::string> positionals = {});
  // parse reads argv[first..argc); `--help` sets help().
  static absl::StatusOr<Args> parse(const CommandSpec& spec, int argc, char** argv, int first);

  bool help() const { return help_; }
  const std::vector<std::string>& positionals() const { return positionals_; }
  // rest: the words after a bare "--", untouched (EAL arguments).
  const std::vector<std::string>& rest() const { return rest_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string str(const std::string& name, const std::string& def = "") const;
  // count parses an integer with an optional k/M/G/Ki/Mi/Gi suffix.
  absl::StatusOr<uint64_t> count(const std::string& name, uint64_t def) const;
  // duration_ns parses "250us", "5s", "100ms", "10ns" (bare numbers: seconds).
  absl::StatusOr<uint64_t> duration_ns(const std::string& name, uint64_t def) const;

 private:
  std::string command_;
  bool help_ = false;
  std::vector<std::string> positionals_;
  std::vector<std::string> rest_;
  std::map<std::string, std::string> values_;
};

// usage formats --help text for a command.
std::string usage(const CommandSpec& spec);

// parse_count and parse_duration_ns are the number parsers behind Args.
std::optional<uint64_t> parse_count(const std::string& text);
std::optional<uint64_t> parse_duration_ns(const std::string& text);

}  // namespace ringfire::cli
