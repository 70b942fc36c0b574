// metrics_server.cc — GET /metrics from the conductor loop (see
// metrics_server.h).
#include "cli/metrics_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dataplane/kernel_udp.h"

namespace ringfire::cli {
namespace {

constexpr size_t kMaxClients = 16;
constexpr size_t kMaxRequest = 8 * 1024;
constexpr uint64_t kDeadlineNs = 2'000'000'000;

std::string response(int code, const char* reason, const std::string& type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", type, "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::listen(const dataplane::Endpoint& at) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const sockaddr_in a = dataplane::to_sockaddr(at);
  if (bind(s->listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 || ::listen(s->listen_fd_, 16) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("metrics: cannot listen on ", dataplane::to_string(at), ": ",
                                                      std::strerror(errno), " (choose another metrics address)"));
  }
  s->address_ = at;
  return s;
}

MetricsServer::~MetricsServer() {
  for (Client& c : clients_) close(c.fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void MetricsServer::poll(uint64_t now_ns, const std::function<std::string()>& body) {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    if (clients_.size() == kMaxClients) {
      ++stats_.refused;
      close(fd);
      continue;
    }
    clients_.push_back(Client{fd, {}, {}, 0, now_ns + kDeadlineNs});
  }
  for (size_t i = 0; i < clients_.size();) {
    Client& c = clients_[i];
    bool close_it = now_ns >= c.deadline_ns;
    if (!close_it && c.out.empty()) {
      char buf[2048];
      for (;;) {
        const ssize_t n = read(c.fd, buf, sizeof(buf));
        if (n > 0) {
          c.in.append(buf, static_cast<size_t>(n));
          if (c.in.size() > kMaxRequest) break;
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close_it = c.in.find("\r\n\r\n") == std::string::npos;
        break;
      }
      if (c.in.size() > kMaxRequest) {
        c.out = response(413, "Request Entity Too Large", "text/plain", "request too large\n");
        ++stats_.refused;
      } else if (c.in.find("\r\n\r\n") != std::string::npos) {
        const std::string line = c.in.substr(0, c.in.find("\r\n"));
        if (line.rfind("GET /metrics ", 0) == 0 || line == "GET /metrics") {
          c.out = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body());
          ++stats_.scrapes;
        } else if (line.rfind("GET ", 0) == 0) {
          c.out = response(404, "Not Found", "text/plain", "ringfire serves /metrics only\n");
          ++stats_.refused;
        } else {
          c.out = response(400, "Bad Request", "text/plain", "GET /metrics\n");
          ++stats_.refused;
        }
      }
    }
    if (!close_it && !c.out.empty()) {
      while (c.sent < c.out.size()) {
        const ssize_t n = write(c.fd, c.out.data() + c.sent, c.out.size() - c.sent);
        if (n <= 0) break;  // full (it drains later) or gone (the deadline cuts it)
        c.sent += static_cast<size_t>(n);
      }
      close_it = c.sent == c.out.size();
    }
    if (close_it) {
      if (c.sent != c.out.size() || c.out.empty()) ++stats_.refused;
      close(c.fd);
      clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
}

void Exposition::family(const std::string& name, const char* type, const char* help) {
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void Exposition::sample(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels,
                        double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i != 0) text_ += ',';
      absl::StrAppend(&text_, labels[i].first, "=\"", escape(labels[i].second), "\"");
    }
    text_ += '}';
  }
  char v[32];
  if (std::floor(value) == value && std::fabs(value) < 1e15) {
    std::snprintf(v, sizeof(v), "%.0f", value);
  } else {
    std::snprintf(v, sizeof(v), "%.9g", value);
  }
  absl::StrAppend(&text_, " ", v, "\n");
}

}  // namespace ringfire::cli
