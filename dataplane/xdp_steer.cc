// xdp_steer.cc — writing the embedded XDP object, pointing the PMD at it,
// and configuring it through its rf_config map once the PMD has attached it.
#include "dataplane/xdp_steer.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dataplane/xdp/steer_object.h"

namespace ringfire::dataplane {
namespace {

std::map<std::string, std::string>& steered() {  // vdev name -> interface
  static std::map<std::string, std::string> m;
  return m;
}

absl::StatusOr<std::string> program_file() {
  static std::string path;
  if (!path.empty()) return path;
  std::string p = absl::StrCat("/tmp/ringfire-steer-", getpid(), ".bpf.o");
  const int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", p, ": ", std::strerror(errno)));
  const bool ok = write(fd, kSteerObject, sizeof(kSteerObject)) == static_cast<ssize_t>(sizeof(kSteerObject));
  close(fd);
  if (!ok) {
    unlink(p.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", p));
  }
  path = std::move(p);
  std::atexit([] { unlink(path.c_str()); });
  return path;
}

// rewrite_vdev adds xdp_prog= to one "--vdev" value if it is an af_xdp
// device without one, and records its interface.
absl::StatusOr<std::string> rewrite_vdev(const std::string& vdev) {
  if (!absl::StartsWith(vdev, "net_af_xdp")) return vdev;
  std::vector<std::string> parts = absl::StrSplit(vdev, ',');
  std::string iface;
  for (const std::string& kv : parts) {
    if (absl::StartsWith(kv, "xdp_prog=")) return vdev;  // the user's own program
    if (absl::StartsWith(kv, "iface=")) iface = kv.substr(6);
  }
  if (iface.empty()) return vdev;  // the PMD will say what is missing
  auto prog = program_file();
  if (!prog.ok()) return prog.status();
  steered()[parts[0]] = iface;
  return absl::StrCat(vdev, ",xdp_prog=", *prog);
}

absl::StatusOr<int> config_map_fd(const std::string& iface) {
  const unsigned ifindex = if_nametoindex(iface.c_str());
  if (ifindex == 0) return absl::NotFoundError(absl::StrCat("no interface ", iface));
  uint32_t prog_id = 0;
  if (bpf_xdp_query_id(static_cast<int>(ifindex), 0, &prog_id) != 0 || prog_id == 0) {
    return absl::NotFoundError(absl::StrCat("no XDP program is attached to ", iface));
  }
  const int prog_fd = bpf_prog_get_fd_by_id(prog_id);
  if (prog_fd < 0) return absl::InternalError(absl::StrCat("cannot open XDP program ", prog_id));
  uint32_t map_ids[8] = {};
  bpf_prog_info info{};
  info.nr_map_ids = 8;
  info.map_ids = reinterpret_cast<uint64_t>(map_ids);
  uint32_t len = sizeof(info);
  const int rc = bpf_obj_get_info_by_fd(prog_fd, &info, &len);
  close(prog_fd);
  if (rc != 0) return absl::InternalError("cannot read the XDP program's maps");
  for (uint32_t i = 0; i < std::min<uint32_t>(info.nr_map_ids, 8); ++i) {
    const int fd = bpf_map_get_fd_by_id(map_ids[i]);
    if (fd < 0) continue;
    bpf_map_info mi{};
    uint32_t mlen = sizeof(mi);
    if (bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0 && std::strcmp(mi.name, "rf_config") == 0) return fd;
    close(fd);
  }
  return absl::NotFoundError(absl::StrCat("the XDP program on ", iface, " is not ringfire's (no rf_config map)"));
}

bool is_kernel_address(const std::string& iface, uint32_t ip) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return false;
  bool found = false;
  for (ifaddrs* a = all; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || iface != a->ifa_name) continue;
    found = ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr) == ip;
  }
  freeifaddrs(all);
  return found;
}

}  // namespace

absl::StatusOr<std::string> with_steer_program(const std::string& args) {
  std::vector<std::string> words = absl::StrSplit(args, ' ', absl::SkipEmpty());
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "--vdev" && i + 1 < words.size()) {
      auto v = rewrite_vdev(words[i + 1]);
      if (!v.ok()) return v.status();
      words[++i] = *v;
    } else if (absl::StartsWith(words[i], "--vdev=")) {
      auto v = rewrite_vdev(words[i].substr(7));
      if (!v.ok()) return v.status();
      words[i] = absl::StrCat("--vdev=", *v);
    }
  }
  return absl::StrJoin(words, " ");
}

std::string steered_iface(const std::string& device_name) {
  auto it = steered().find(device_name);
  return it == steered().end() ? std::string() : it->second;
}

absl::Status steer_to_port(const std::string& iface, uint32_t ip, uint32_t group) {
  if (is_kernel_address(iface, ip)) {
    in_addr a{htonl(ip)};
    return absl::InvalidArgumentError(absl::StrCat(
        "net_af_xdp on ", iface, " would take ", inet_ntoa(a),
        " away from the kernel, which carries the control connection on it: give the DPDK port an "
        "address of its own on that subnet with --dpdk-ip"));
  }
  auto fd = config_map_fd(iface);
  if (!fd.ok()) return fd.status();
  struct {
    uint32_t ip, group;  // network order, as steer.bpf.c reads them
  } cfg{htonl(ip), htonl(group)};
  const uint32_t key = 0;
  const int rc = bpf_map_update_elem(*fd, &key, &cfg, BPF_ANY);
  close(*fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot configure the XDP program on ", iface));
  return absl::OkStatus();
}

}  // namespace ringfire::dataplane
