// cmd_keygen.cc — `ringfire keygen`: a pre-shared key file, made right.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "net/auth.h"

namespace ringfire::cli {

static const CommandSpec kKeygen{
    "keygen", "FILE", 1, 1,
    "Write a new pre-shared key to FILE (32 random bytes as hex, mode 600) for --psk-file on\n"
    "serve, mirror, run and the stream mux: copy the same file to every peer (scp -p keeps\n"
    "its mode). With a key every datagram is MACed and every peer proves it holds the key.",
    {
        {"force", nullptr, "replace an existing FILE (every peer then needs the new one)"},
    }};

int cmd_keygen(int argc, char** argv, int first) {
  auto args = Args::parse(kKeygen, argc, argv, first);
  if (!args.ok()) return fail("keygen", args.status());
  if (args->help()) {
    std::fputs(usage(kKeygen).c_str(), stdout);
    return 0;
  }
  const std::string path = args->positionals()[0];
  if (absl::Status s = net::write_new_psk(path, args->has("force")); !s.ok()) return fail("keygen", s);
  // Read back as a peer will: the file is one load_psk takes.
  if (auto k = net::load_psk(path); !k.ok()) return fail("keygen", k.status());
  std::printf("keygen: wrote a key to %s (mode 600): pass --psk-file %s on every peer\n", path.c_str(), path.c_str());
  return 0;
}

}  // namespace ringfire::cli
