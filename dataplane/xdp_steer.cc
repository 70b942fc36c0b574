// xdp_steer.cc — writing the embedded XDP object, pointing the PMD at it,
// and configuring it through its rf_config map once the PMD has attached it.
#include "dataplane/xdp_steer.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
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

// program_file puts the embedded object in a memfd and names it by its
// /proc/self/fd path: the PMD reads it like a file, and nothing is left on
// disk however the process ends.
absl::StatusOr<std::string> program_file() {
  static std::string path;
  if (!path.empty()) return path;
  const int fd = memfd_create("ringfire-steer.bpf.o", MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  if (write(fd, kSteerObject, sizeof(kSteerObject)) != static_cast<ssize_t>(sizeof(kSteerObject))) {
    close(fd);
    return absl::InternalError("cannot write the XDP object to its memfd");
  }
  path = absl::StrCat("/proc/self/fd/", fd);  // kept open for the process's life
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

// map_fd opens the map called `name` of the XDP program on `iface`.
absl::StatusOr<int> map_fd(const std::string& iface, const char* name) {
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
    if (bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0 && std::strcmp(mi.name, name) == 0) return fd;
    close(fd);
  }
  return absl::NotFoundError(absl::StrCat("the XDP program on ", iface, " is not ringfire's (no ", name, " map)"));
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

// kernel_neighbors reads the kernel's complete ARP entries on `iface`
// (/proc/net/arp: "IP HWtype Flags HWaddress Mask Device").
std::vector<StaticNeighbor> kernel_neighbors(const std::string& iface) {
  std::vector<StaticNeighbor> out;
  FILE* f = std::fopen("/proc/net/arp", "r");
  if (f == nullptr) return out;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    char ip[64], mac[64], dev[64];
    unsigned type, flags, m[6];
    if (std::sscanf(line, "%63s 0x%x 0x%x %63s %*s %63s", ip, &type, &flags, mac, dev) != 5) continue;
    if (iface != dev || (flags & 0x2) == 0) continue;  // ATF_COM: the entry is complete
    in_addr a{};
    if (inet_pton(AF_INET, ip, &a) != 1 ||
        std::sscanf(mac, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6) {
      continue;
    }
    StaticNeighbor n;
    n.ip = ntohl(a.s_addr);
    for (int i = 0; i < 6; ++i) n.mac[i] = static_cast<uint8_t>(m[i]);
    out.push_back(n);
  }
  std::fclose(f);
  return out;
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

absl::StatusOr<std::string> with_steer_vdev(const std::string& devargs) { return rewrite_vdev(devargs); }

std::string attached_program_hint(const std::string& iface) {
  const unsigned ifindex = if_nametoindex(iface.c_str());
  uint32_t prog_id = 0;
  if (ifindex == 0 || bpf_xdp_query_id(static_cast<int>(ifindex), 0, &prog_id) != 0 || prog_id == 0) return "";
  std::string name = "?";
  if (const int fd = bpf_prog_get_fd_by_id(prog_id); fd >= 0) {
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) name = info.name;
    close(fd);
  }
  return absl::StrCat("; XDP program ", prog_id, " ('", name, "') is attached to ", iface,
                      ": another af_xdp process uses ", iface, " (one per interface), or one that was killed "
                      "left it. If nothing uses it: ip link set dev ", iface, " xdp off");
}

std::string steered_iface(const std::string& device_name) {
  auto it = steered().find(device_name);
  return it == steered().end() ? std::string() : it->second;
}

absl::StatusOr<SteerResult> steer_to_port(const std::string& iface, uint32_t ip, uint32_t groups) {
  SteerResult r;
  r.shared = is_kernel_address(iface, ip);
  auto fd = map_fd(iface, "rf_config");
  if (!fd.ok()) return fd.status();
  struct {
    uint32_t ip, groups;  // ip in network order, as steer.bpf.c reads it
    uint16_t shared, pad;
  } cfg{htonl(ip), groups, static_cast<uint16_t>(r.shared), 0};
  const uint32_t key = 0;
  const int rc = bpf_map_update_elem(*fd, &key, &cfg, BPF_ANY);
  close(*fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot configure the XDP program on ", iface));
  if (r.shared) r.kernel_neighbors = kernel_neighbors(iface);
  return r;
}

absl::Status steer_binding(const std::string& iface, uint32_t addr, uint16_t udp_port, bool add) {
  auto fd = map_fd(iface, "rf_bindings");
  if (!fd.ok()) return fd.status();
  struct {
    uint32_t addr;  // network order
    uint16_t port, pad;
  } key{htonl(addr), htons(udp_port), 0};
  const uint8_t one = 1;
  const int rc = add ? bpf_map_update_elem(*fd, &key, &one, BPF_ANY) : bpf_map_delete_elem(*fd, &key);
  close(*fd);
  if (rc != 0 && add) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot steer UDP port ", udp_port, " on ", iface,
                                                     ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ringfire::dataplane
