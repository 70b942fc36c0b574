// dpdk_eal.cc — the EAL's start and clean-up, device hot-plug, port names.
#include "dataplane/dpdk_eal.h"

#include <rte_eal.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ringfire_config.h"
#if RINGFIRE_HAVE_XDP_STEER
#include "dataplane/xdp_steer.h"
#endif

namespace ringfire::dataplane {

namespace {
bool g_eal_started = false;
}  // namespace

bool driver_is(uint16_t port, const char* name) {
  rte_eth_dev_info info{};
  return rte_eth_dev_info_get(port, &info) == 0 && info.driver_name != nullptr &&
         std::strcmp(info.driver_name, name) == 0;
}

std::string port_driver(uint16_t port) {
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port, &info) != 0 || info.driver_name == nullptr) return "unknown";
  char dev[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(port, dev);
  return absl::StrCat(info.driver_name, " (", dev, ")");
}


namespace {

// clear_stale_memif_sockets removes the socket file of a net_memif server
// (socket-abstract=no) that nothing listens on any more, left by a process
// that was killed: the PMD refuses to start over it ("Address already in
// use"). A live server's socket is left alone, and so is anything that is
// not a socket of this user's (the path comes from a flag: a regular file
// named there was unlinked, helper-40). The connect does not wait: a
// listener that never accepts is a live one (it hung start-up before).
void clear_stale_memif_sockets(const std::vector<std::string>& words) {
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] != "--vdev" || words[i + 1].rfind("net_memif", 0) != 0) continue;
    std::string role = "server", path, abstract_ = "yes";
    for (absl::string_view kv : absl::StrSplit(words[i + 1], ',')) {
      if (absl::ConsumePrefix(&kv, "role=")) role = std::string(kv);
      if (absl::ConsumePrefix(&kv, "socket=")) path = std::string(kv);
      if (absl::ConsumePrefix(&kv, "socket-abstract=")) abstract_ = std::string(kv);
    }
    if (role != "server" || abstract_ != "no" || path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) continue;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) continue;
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size());
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno == ECONNREFUSED) {
      unlink(path.c_str());
    }
    close(fd);
  }
}

// runtime_base: where the EAL keeps its runtime directories (DPDK 22.11's rule).
std::string runtime_base() {
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  return getuid() == 0 ? "/var/run/dpdk" : absl::StrCat(xdg != nullptr ? xdg : "/tmp", "/dpdk");
}

// runtime_dir_of: the runtime directory an EAL started with these words
// makes: its --file-prefix, or DPDK's default "rte"; "" for a prefix that
// is not one plain name (nothing is ever removed outside its own).
std::string runtime_dir_of(const std::vector<std::string>& words) {
  std::string prefix = "rte";
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "--file-prefix" && i + 1 < words.size()) prefix = words[i + 1];
    if (absl::StartsWith(words[i], "--file-prefix=")) prefix = words[i].substr(14);
  }
  if (prefix.empty() || prefix == "." || prefix == ".." || prefix.find('/') != std::string::npos) return "";
  return absl::StrCat(runtime_base(), "/", prefix);
}

// clear_stale_runtime_dirs removes the EAL runtime directories ringfire's
// default file prefix names ("rf<pid>") whose process is gone: a process
// that exits removes its own (see eal_init), one killed (kill -9, a crash)
// cannot. Only flat directories of a dead pid are touched: a live
// process's, or anything not named so, is left alone.
void clear_stale_runtime_dirs() {
  const std::string base = runtime_base();
  DIR* d = opendir(base.c_str());
  if (d == nullptr) return;
  while (const dirent* e = readdir(d)) {
    const absl::string_view name(e->d_name);
    uint64_t pid = 0;
    if (name.size() < 3 || name.substr(0, 2) != "rf" || !absl::SimpleAtoi(name.substr(2), &pid) ||
        name.substr(2).find_first_not_of("0123456789") != absl::string_view::npos || pid == 0 || pid > INT32_MAX) {
      continue;
    }
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    const std::string dir = absl::StrCat(base, "/", name);
    DIR* inner = opendir(dir.c_str());
    if (inner == nullptr) continue;
    bool flat = true;
    while (const dirent* f = readdir(inner)) {
      const absl::string_view fname(f->d_name);
      if (fname == "." || fname == "..") continue;
      if (f->d_type == DT_DIR) {
        flat = false;
        continue;
      }
      unlink(absl::StrCat(dir, "/", fname).c_str());
    }
    closedir(inner);
    if (flat) rmdir(dir.c_str());
  }
  closedir(d);
}
}  // namespace

bool eal_running() { return g_eal_started; }

absl::Status eal_init(const std::string& given, bool devices_later) {
  bool& started = g_eal_started;
  if (started) return absl::OkStatus();
#if RINGFIRE_HAVE_XDP_STEER
  // net_af_xdp gets ringfire's steering program unless the user gave one.
  auto steered = with_steer_program(given);
  if (!steered.ok()) return steered.status();
  const std::string args = *steered;
#else
  const std::string& args = given;
#endif
  static std::vector<std::string> words;  // the EAL keeps pointers into argv
  words = {"ringfire"};
  for (absl::string_view w : absl::StrSplit(args, ' ', absl::SkipEmpty())) words.emplace_back(w);
  clear_stale_memif_sockets(words);
  clear_stale_runtime_dirs();
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  // An EAL that fails after making its runtime directory (no hugepages,
  // say) leaves it behind: remove it then, if it was not there before (a
  // live process's, sharing the prefix, is left alone).
  const std::string dir = runtime_dir_of(words);
  std::error_code ec;
  const bool existed = dir.empty() || std::filesystem::exists(dir, ec);
  if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
    const int err = rte_errno;
    if (!existed) std::filesystem::remove_all(dir, ec);
    rte_errno = err;
    return absl::FailedPreconditionError(absl::StrCat(
        "DPDK EAL did not start with '", given, "': ", rte_strerror(rte_errno),
        " (check --eal: lcores with -l, --no-huge or hugepages, a --vdev or a bound NIC)"));
  }
  started = true;
  // Release the EAL, and remove its runtime directory, when the process
  // exits: --no-huge runs leave one per file prefix otherwise.
  static std::string runtime_dir = rte_eal_get_runtime_dir();
  std::atexit([] {
    // af_xdp ports are stopped and closed: that detaches their XDP program
    // from the interface. A process with a memif port skips the EAL's own
    // clean-up: memif's interrupt thread, handling a peer that exits at the
    // same moment, crashed in it (DPDK 22.11: the EAL unmaps memory the
    // thread still uses). memif needs no hugepages, so nothing is left but
    // the runtime directory, removed below.
    bool memif = false;
    uint16_t port;
    RTE_ETH_FOREACH_DEV(port) {
      memif |= driver_is(port, "net_memif");
      if (driver_is(port, "net_af_xdp")) {
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
      }
    }
    if (!memif) rte_eal_cleanup();
    std::error_code ec2;
    if (runtime_dir.rfind("/var/run/dpdk/", 0) == 0) std::filesystem::remove_all(runtime_dir, ec2);
  });
  if (rte_eth_dev_count_avail() == 0 && !devices_later) {
    return absl::FailedPreconditionError(
        "DPDK started but found no port: give a --vdev (e.g. net_af_packet0,iface=eth0) in --eal");
  }
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> attach_device(const std::string& given) {
  if (!g_eal_started) return absl::FailedPreconditionError("the EAL is not running");
#if RINGFIRE_HAVE_XDP_STEER
  auto steered = with_steer_vdev(given);
  if (!steered.ok()) return steered.status();
  const std::string devargs = *steered;
#else
  const std::string& devargs = given;
#endif
  const std::string name = devargs.substr(0, devargs.find(','));
  if (auto id = port_by_name(name); id.ok()) return id;  // probed already (the EAL's own arguments)
  if (const int rc = rte_dev_probe(devargs.c_str()); rc != 0) {
    return absl::UnavailableError(absl::StrCat("DPDK could not start ", given, ": ", rte_strerror(-rc),
                                               " (the PMD's log above says why)"));
  }
  return port_by_name(name);
}

void detach_device(uint16_t port_id) {
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port_id, &info) != 0 || info.device == nullptr) return;
  rte_eth_dev_stop(port_id);
  rte_eth_dev_close(port_id);
  rte_dev_remove(info.device);
}

absl::StatusOr<uint16_t> port_by_name(const std::string& name) {
  uint16_t id = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0) {
    return absl::NotFoundError(absl::StrCat("DPDK has no port named ", name, " (did its vdev fail to start?)"));
  }
  return id;
}

absl::StatusOr<Pmd> parse_pmd(const std::string& name) {
  if (name == "af_packet") return Pmd::kAfPacket;
  if (name == "af_xdp") return Pmd::kAfXdp;
  return absl::InvalidArgumentError(absl::StrCat("--pmd: af_packet or af_xdp, not '", name,
                                                 "' (other vdevs: give the whole --eal)"));
}

std::string default_eal_args(const std::string& iface, Pmd pmd) {
  // One lcore: the first CPU this process may run on (so taskset/cpusets are
  // honoured rather than everything being moved to CPU 0).
  int cpu = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)) ++cpu;
  }
  return absl::StrCat("-l ", cpu, " --no-huge -m 256 --no-pci --no-shconf --file-prefix rf", getpid(),
                      " --vdev ", pmd == Pmd::kAfXdp ? "net_af_xdp0" : "net_af_packet0", ",iface=", iface,
                      // af_packet's rings default to 512 frames: 5 ms at 100 k datagrams/s
                      // for a worker the scheduler has put aside. 4096, as af_xdp's.
                      pmd == Pmd::kAfPacket ? ",framecnt=4096" : "", " --log-level=lib.eal:error");
}


}  // namespace ringfire::dataplane
