// ctl_server.cc — see ctl_server.h.
#include "cli/ctl_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace ringfire::cli {
namespace {

constexpr size_t kMaxRequest = 64u << 10;
constexpr size_t kMaxClients = 8;
constexpr uint64_t kRequestTimeoutNs = 1'000'000'000;
constexpr uint64_t kAnswerTimeoutNs = 2'000'000'000;
constexpr uint64_t kStalledNs = 100'000'000;  // an answer not read this long: its place may be taken

sockaddr_un address_of(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), std::min(path.size(), sizeof(a.sun_path) - 1));
  return a;
}

bool someone_listens(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const sockaddr_un a = address_of(path);
  const bool live = connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return live;
}

}  // namespace

std::string ctl_path_problem(const std::string& path) {
  if (struct stat st{}; lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    return absl::StrCat(path, " is there and is not a socket: give the daemon a path of its own");
  }
  const std::string dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && dir != kDefaultCtlDir && access(dir.c_str(), F_OK) != 0) {
    return absl::StrCat("the directory ", dir, " does not exist: make it, or choose another path");
  }
  return "";
}

absl::StatusOr<std::unique_ptr<CtlServer>> CtlServer::listen(const std::string& path) {
  if (path.empty() || path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("ctl socket path '", path, "': 1 to 107 characters"));
  }
  std::error_code ec;
  // Only the default's directory is made (a config's own path must exist:
  // run_config checks it, and that nothing but a socket is there).
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir == kDefaultCtlDir) std::filesystem::create_directories(dir, ec);
  if (std::string why = ctl_path_problem(path); !why.empty()) return absl::FailedPreconditionError(why);
  if (std::filesystem::exists(path, ec)) {
    if (someone_listens(path)) {
      return absl::AlreadyExistsError(absl::StrCat("another daemon answers on ", path,
                                                   ": give this one its own ctl = \"...\" socket"));
    }
    unlink(path.c_str());  // a stale one, left by a daemon that was killed
  }
  std::unique_ptr<CtlServer> s(new CtlServer());
  s->path_ = path;
  s->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const sockaddr_un a = address_of(path);
  const mode_t old = umask(0177);  // 0600: the socket adds and removes sessions
  const bool bound = s->listen_fd_ >= 0 && bind(s->listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0;
  umask(old);
  if (!bound || ::listen(s->listen_fd_, 16) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot listen on ", path, ": ", std::strerror(errno)));
  }
  return s;
}

CtlServer::~CtlServer() {
  for (Client& c : clients_) close(c.fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
  }
}

void CtlServer::poll(uint64_t now_ns, const std::function<std::string(const std::string&)>& handle) {
  // The clients first: a request that arrived whole since the last pass is
  // answered before a newcomer could take its place (review helper-38).
  serve(now_ns, handle);
  bool accepted = false;
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    accepted = true;
    if (clients_.size() == kMaxClients) {
      // Full: the oldest idle client gives its place: one still sending its
      // request after a pass, or one whose answer has not moved for
      // kStalledNs. Idle clients must not lock the operator out (review
      // helper-35); one accepted in this pass has had no turn yet, and one
      // reading its answer keeps its place (its request may have added a
      // session: review helper-37). With none idle, the newcomer sees its
      // connection closed, and may retry.
      const auto idle = std::find_if(clients_.begin(), clients_.end(), [&](const Client& c) {
        return c.accepted_ns != now_ns && (!c.answered || now_ns - c.moved_ns >= kStalledNs);
      });
      if (idle == clients_.end()) {
        close(fd);
        continue;
      }
      close(idle->fd);
      clients_.erase(idle);
    }
    clients_.push_back(Client{fd, {}, {}, 0, false, now_ns + kRequestTimeoutNs, now_ns, 0});
  }
  if (accepted) serve(now_ns, handle);  // a newcomer's request may be whole already
}

void CtlServer::serve(uint64_t now_ns, const std::function<std::string(const std::string&)>& handle) {
  for (size_t i = 0; i < clients_.size();) {
    Client& c = clients_[i];
    bool close_it = now_ns >= c.deadline_ns;
    if (!close_it && !c.answered) {
      char buf[4096];
      for (;;) {
        const ssize_t n = read(c.fd, buf, sizeof(buf));
        if (n > 0) {
          c.in.append(buf, static_cast<size_t>(n));
          if (c.in.size() > kMaxRequest) {
            close_it = true;
            break;
          }
          continue;
        }
        if (n == 0) {  // the whole request: answered as the socket drains, never waited on
          c.out = handle(c.in) + "\n";
          c.answered = true;
          c.moved_ns = now_ns;
          c.deadline_ns = now_ns + kAnswerTimeoutNs;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          close_it = true;
        }
        break;
      }
    }
    if (!close_it && c.answered) {
      while (c.sent < c.out.size()) {
        // MSG_NOSIGNAL: a client gone before its answer is an error here,
        // not a SIGPIPE that ends the daemon (review helper-35).
        const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n <= 0) {
          close_it = n < 0 && errno != EAGAIN && errno != EWOULDBLOCK;
          break;
        }
        c.sent += static_cast<size_t>(n);
        c.moved_ns = now_ns;
      }
      close_it = close_it || c.sent == c.out.size();
    }
    if (!close_it) {
      ++i;
      continue;
    }
    close(c.fd);
    clients_.erase(clients_.begin() + static_cast<ptrdiff_t>(i));
  }
}

absl::StatusOr<std::string> ctl_request(const std::string& path, const std::string& request) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  const sockaddr_un a = address_of(path);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("no daemon answers on ", path, ": ", std::strerror(err),
                                               " (is `ringfire run` running with that ctl socket?)"));
  }
  const timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  size_t off = 0;
  while (off < request.size()) {
    const ssize_t n = send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (answer.empty()) return absl::UnavailableError(absl::StrCat("the daemon on ", path, " did not answer"));
  return answer;
}

}  // namespace ringfire::cli
