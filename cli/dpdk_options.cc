// dpdk_options.cc — see dpdk_options.h.
#include "cli/dpdk_options.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/kernel_udp.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_DPDK
#include "dataplane/dpdk_eal.h"
#endif

namespace ringfire::cli {

std::vector<OptionSpec> with_backend_options(std::vector<OptionSpec> options, const char* ip_default) {
  options.push_back({"backend", "NAME", "packet I/O: kernel (default) or dpdk"});
  options.push_back({"eal", "ARGS",
                     "dpdk: EAL arguments, or give them after -- (default: one lcore, --no-huge, a --pmd vdev "
                     "on --iface)"});
  options.push_back({"pmd", "NAME",
                     "dpdk: the default vdev on --iface: af_packet (default) or af_xdp"});
  options.push_back({"dpdk-ip", "ADDR", ip_default});
  options.push_back({"neighbor", "IP=MAC,...",
                     "dpdk: peers' MACs, pinned: never ARPed for (e.g. 198.18.0.1=02:00:00:00:00:01)"});
  options.push_back({"exception-tap", "NAME",
                     "dpdk: hand every frame that is not ringfire's to tap NAME (an existing persistent "
                     "multi_queue tap keeps its addresses), and send what it sends: give NAME the port's "
                     "address and the kernel answers ping, ARP and TCP for it"});
  return options;
}

absl::StatusOr<uint32_t> iface_address(const Args& args, uint32_t fallback) {
  if (!args.has("iface")) return fallback;
  auto ip = net::interface_address(args.str("iface"));
  if (!ip.ok() && args.has("dpdk-ip")) return fallback;
  return ip;
}

absl::StatusOr<Backend> start_backend(const Args& args) {
  Backend b;
  const std::string backend = args.str("backend", "kernel");
  if (backend == "kernel") {
    for (const char* o : {"eal", "pmd", "dpdk-ip", "neighbor", "exception-tap"}) {
      if (args.has(o)) {
        return absl::InvalidArgumentError(absl::StrCat("--", o, " needs --backend dpdk"));
      }
    }
    if (!args.rest().empty()) {
      return absl::InvalidArgumentError("the words after -- are EAL arguments: they need --backend dpdk");
    }
    return b;
  }
  if (backend != "dpdk") return absl::InvalidArgumentError("--backend: kernel or dpdk");
#if RINGFIRE_HAVE_DPDK
  b.dpdk = true;
  // EAL arguments: --eal "...", or the words after --, as DPDK's own tools
  // take them; without either, a default built from --pmd and --iface.
  std::string eal;
  const bool after_dashes = !args.rest().empty();
  if (after_dashes && args.has("eal")) {
    return absl::InvalidArgumentError("give EAL arguments with --eal or after --, not both");
  }
  if (after_dashes || args.has("eal")) {
    if (args.has("pmd")) {
      return absl::InvalidArgumentError("--pmd chooses the default vdev: with EAL arguments, name the vdev there");
    }
    eal = after_dashes ? absl::StrJoin(args.rest(), " ") : args.str("eal");
  } else {
    if (!args.has("iface")) {
      return absl::InvalidArgumentError("--backend dpdk needs --iface (for the default vdev), --eal, or EAL "
                                        "arguments after --");
    }
    auto pmd = dataplane::parse_pmd(args.str("pmd", "af_packet"));
    if (!pmd.ok()) return pmd.status();
    eal = dataplane::default_eal_args(args.str("iface"), *pmd);
  }
  if (args.has("dpdk-ip")) {
    auto ip = net::parse_endpoint(args.str("dpdk-ip"), 0);
    if (!ip.ok()) return ip.status();
    b.dpdk_ip = ip->ip;
  }
  if (args.has("neighbor")) {
    auto n = dataplane::parse_neighbors(args.str("neighbor"));
    if (!n.ok()) return n.status();
    b.neighbors = std::move(*n);
  }
  // The exception tap is one more vdev, after the data port's (port 0).
  const std::string tap = args.str("exception-tap");
  constexpr const char* kTapDev = "net_tap_rf_exception";
  if (args.has("exception-tap")) {
    if (tap.empty() || tap.size() >= 16 || tap.find_first_of(" ,=") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--exception-tap: an interface name of 1 to 15 characters, "
                                                     "no spaces, commas or '=', not '", tap, "'"));
    }
    absl::StrAppend(&eal, " --vdev ", kTapDev, ",iface=", tap);
  }
  if (absl::Status st = dataplane::eal_init(eal); !st.ok()) return st;
  if (args.has("exception-tap")) {
    auto port = dataplane::port_by_name(kTapDev);
    if (!port.ok()) return port.status();
    b.exception_port = *port;
  }
  return b;
#else
  return absl::FailedPreconditionError("this build has no DPDK backend (-Ddpdk=enabled)");
#endif
}

}  // namespace ringfire::cli
