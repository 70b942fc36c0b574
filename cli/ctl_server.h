// ctl_server.h — the daemon's local control socket (a Unix stream socket,
// mode 0600: root's): one request per connection, its text up to EOF (at
// most 64 KiB, within 1 s), one JSON answer, then close. The conductor
// polls it between rounds; a client that stalls or floods is cut, and at
// most 8 are served at once (a newcomer past 8 takes the place of the
// oldest idle one: still sending its request, or not reading its answer).
// The answer is written as the socket
// drains, within 2 s: a client that does not read stalls only itself.
// `ringfire ctl` is the client. Conductor thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringfire::cli {

// kDefaultCtlDir: where a config without `ctl` puts its socket (made if missing).
inline constexpr const char* kDefaultCtlDir = "/run/ringfire";
// ctl_path_problem: why a daemon may not take `path` for its socket ("" if
// it may): anything but a socket is there (a stale daemon's socket is
// replaced; any other file stays), or its directory is missing (only
// kDefaultCtlDir is made).
std::string ctl_path_problem(const std::string& path);

class CtlServer {
 public:
  // listen makes the socket at `path` (and kDefaultCtlDir, if that is its directory); a live daemon
  // already there is an error, a stale socket file is replaced.
  static absl::StatusOr<std::unique_ptr<CtlServer>> listen(const std::string& path);
  ~CtlServer();

  int fd() const { return listen_fd_; }
  const std::string& path() const { return path_; }
  // poll accepts, reads, and answers complete requests with `handle`.
  void poll(uint64_t now_ns, const std::function<std::string(const std::string&)>& handle);

 private:
  struct Client {
    int fd;
    std::string in;
    std::string out;  // the answer, once the request is whole
    size_t sent = 0;
    bool answered = false;
    uint64_t deadline_ns;  // for the request, then for the answer
    uint64_t accepted_ns;
    uint64_t moved_ns;  // when its answer was made or last sent on
  };
  // serve reads the clients' requests, answers whole ones, and sends on.
  void serve(uint64_t now_ns, const std::function<std::string(const std::string&)>& handle);
  CtlServer() = default;
  std::string path_;
  int listen_fd_ = -1;
  std::vector<Client> clients_;
};

// ctl_request sends `request` to the socket at `path` and returns the answer.
absl::StatusOr<std::string> ctl_request(const std::string& path, const std::string& request);

}  // namespace ringfire::cli
