// cmd_run.cc — `ringfire run CONFIG`: the daemon (cli/daemon.cc) over the
// ports and sessions a TOML config declares.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/daemon.h"

namespace ringfire::cli {
namespace {

const CommandSpec kRun = {
    "run", "CONFIG", 1, 1,
    "Run the ports and sessions a TOML config declares, in one process: [[port]] tables\n"
    "(backend kernel, dpdk or auto: the fallback ladder), [[serve]] and [[mirror]] tables\n"
    "(their keys are `ringfire serve` and `ringfire mirror`'s options). `ringfire ctl`\n"
    "lists, adds and removes sessions while it runs. See deploy/configs/ for examples.",
    {
        {"check", nullptr, "check the config and exit (nothing is started)"},
    }};

}  // namespace

int cmd_run(int argc, char** argv, int first) {
  auto args = Args::parse(kRun, argc, argv, first);
  if (!args.ok()) return fail("run", args.status());
  if (args->help()) {
    std::fputs(usage(kRun).c_str(), stdout);
    return 0;
  }
  return run_daemon(args->positionals()[0], args->has("check"), {});
}

}  // namespace ringfire::cli
