// ctl_server.cc — see ctl_server.h.
#include "cli/ctl_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace ringfire::cli {
namespace {

constexpr size_t kMaxRequest = 64u << 10;
constexpr size_t kMaxClients = 8;
constexpr uint64_t kRequestTimeoutNs = 1'000'000'000;

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

absl::StatusOr<std::unique_ptr<CtlServer>> CtlServer::listen(const std::string& path) {
  if (path.empty() || path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("ctl socket path '", path, "': 1 to 107 characters"));
  }
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
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
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    if (clients_.size() == kMaxClients) {
      close(fd);  // busy: the client sees the connection closed, and may retry
      continue;
    }
    clients_.push_back(Client{fd, {}, now_ns + kRequestTimeoutNs});
  }
  for (size_t i = 0; i < clients_.size();) {
    Client& c = clients_[i];
    bool done = false, cut = false;
    char buf[4096];
    for (;;) {
      const ssize_t n = read(c.fd, buf, sizeof(buf));
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > kMaxRequest) {
          cut = true;
          break;
        }
        continue;
      }
      if (n == 0) done = true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) cut = true;
      break;
    }
    if (!done && !cut && now_ns < c.deadline_ns) {
      ++i;
      continue;
    }
    if (done) {
      const std::string answer = handle(c.in) + "\n";
      // A short answer: the client is waiting for it; 1 s at most.
      const int flags = fcntl(c.fd, F_GETFL);
      fcntl(c.fd, F_SETFL, flags & ~O_NONBLOCK);
      const timeval tv{1, 0};
      setsockopt(c.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      size_t off = 0;
      while (off < answer.size()) {
        const ssize_t n = write(c.fd, answer.data() + off, answer.size() - off);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
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
    const ssize_t n = write(fd, request.data() + off, request.size() - off);
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
