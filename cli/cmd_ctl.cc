// cmd_ctl.cc — `ringfire ctl`: talk to a running daemon (`ringfire run`)
// through its control socket: list its ports and sessions with their
// counters, add a session from a file holding one [[serve]] or [[mirror]]
// table, or remove one by name, while the others stream.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/ctl_server.h"

namespace ringfire::cli {
namespace {

const CommandSpec kCtl = {
    "ctl", "SOCKET list | SOCKET remove NAME | SOCKET add FILE", 2, 3,
    "Ask the daemon listening on SOCKET (its config's ctl, by default\n"
    "/run/ringfire/<config name>.sock): list its ports and sessions with their counters\n"
    "(JSON), remove the session NAME, or add the session FILE declares (one [[serve]] or\n"
    "[[mirror]] table, as in the config). Exit 1 when the daemon refuses, with its reason.",
    {}};

}  // namespace

int cmd_ctl(int argc, char** argv, int first) {
  auto args = Args::parse(kCtl, argc, argv, first);
  if (!args.ok()) return fail("ctl", args.status());
  if (args->help()) {
    std::fputs(usage(kCtl).c_str(), stdout);
    return 0;
  }
  const std::vector<std::string>& p = args->positionals();
  std::string request;
  if (p[1] == "list" && p.size() == 2) {
    request = "list";
  } else if (p[1] == "remove" && p.size() == 3) {
    request = "remove " + p[2];
  } else if (p[1] == "add" && p.size() == 3) {
    std::ifstream in(p[2]);
    if (!in) return fail("ctl", absl::NotFoundError(absl::StrCat("cannot read ", p[2])));
    std::stringstream ss;
    ss << in.rdbuf();
    request = "add\n" + ss.str();
  } else {
    return fail("ctl", absl::InvalidArgumentError("expected: SOCKET list, SOCKET remove NAME or SOCKET add FILE"));
  }
  auto answer = ctl_request(p[0], request);
  if (!answer.ok()) return fail("ctl", answer.status());
  std::fputs(answer->c_str(), stdout);
  const nlohmann::json j = nlohmann::json::parse(*answer, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.value("ok", false)) {
    if (j.is_object() && j.contains("error")) {
      std::fprintf(stderr, "ringfire ctl: %s\n", j["error"].get<std::string>().c_str());
    }
    return 1;
  }
  return 0;
}

}  // namespace ringfire::cli
