// main.cc — the `ringfire` command: dispatches to a subcommand.
#include <cstdio>
#include <cstring>

#include "cli/commands.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int, char**, int);
  const char* summary;
};

constexpr Subcommand kSubcommands[] = {
    {"create", ringfire::cli::cmd_create, "create a ring file"},
    {"publish", ringfire::cli::cmd_publish, "publish self-checking records into a ring"},
    {"tail", ringfire::cli::cmd_tail, "follow a ring and verify every record"},
    {"stat", ringfire::cli::cmd_stat, "show a ring's header, writer and readers"},
    {"top", ringfire::cli::cmd_top, "a live view of every ringfire process on this host"},
    {"serve", ringfire::cli::cmd_serve, "serve a ring to mirrors (TCP, UDP multicast, UDP unicast)"},
    {"mirror", ringfire::cli::cmd_mirror, "mirror a served ring into a local ring"},
    {"run", ringfire::cli::cmd_run, "run the ports and sessions of a config file (the daemon)"},
    {"ctl", ringfire::cli::cmd_ctl, "list, add and remove a running daemon's sessions"},
    {"mux-consume", ringfire::cli::cmd_mux_consume, "stream-mux anchors: check what a producer sends, report latency"},
    {"mux-produce", ringfire::cli::cmd_mux_produce, "stream-mux producer: attach to handles and send tokens"},
    {"record", ringfire::cli::cmd_record, "record a ring into an archive directory (segments, index, checksums)"},
    {"replay", ringfire::cli::cmd_replay, "write a range of an archive into a local ring, same sequences"},
    {"archive", ringfire::cli::cmd_archive, "list an archive's segments, ranges and gaps; verify its checksums"},
    {"compare", ringfire::cli::cmd_compare, "compare a mirror with its source, byte for byte"},
    {"remove", ringfire::cli::cmd_remove, "remove a ring file"},
    {"keygen", ringfire::cli::cmd_keygen, "write a new pre-shared key file (--psk-file)"},
};

int print_help(FILE* out) {
  std::fputs("usage: ringfire COMMAND [options]   (ringfire COMMAND --help for details)\n\n", out);
  for (const Subcommand& s : kSubcommands) std::fprintf(out, "  %-10s %s\n", s.name, s.summary);
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return print_help(stderr);
  if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    return print_help(stdout);
  }
  for (const Subcommand& s : kSubcommands) {
    if (std::strcmp(argv[1], s.name) == 0) return s.run(argc, argv, 2);
  }
  std::fprintf(stderr, "ringfire: unknown command '%s'\n", argv[1]);
  return print_help(stderr);
}
