// metrics_server_test.cc — the daemon's /metrics against a client that
// resets mid-answer: the server goes on (a SIGPIPE ended the whole daemon,
// and every session in it, review helper-35). With SIGPIPE left at its
// default here, a send without MSG_NOSIGNAL ends this test's process.
#include "cli/metrics_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace ringfire::cli {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(MetricsServer, AClientThatResetsMidAnswerLeavesTheServerServing) {
  std::signal(SIGPIPE, SIG_DFL);  // the default: a SIGPIPE kills
  auto server = MetricsServer::listen(net::Endpoint{0x7f000001, 0});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->address().port, 0) << "address() names the port the kernel chose";
  // A body far larger than the socket buffers: the answer goes out in many sends.
  const std::string body(32u << 20, 'x');
  uint64_t built = 0;
  const auto make = [&] {
    ++built;
    return body;
  };
  const int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(c, 0);
  const int small = 4096;
  setsockopt(c, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));  // a tiny window: the server's sends stall
  const sockaddr_in to = net::to_sockaddr((*server)->address());
  ASSERT_EQ(connect(c, reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0);
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(c, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  uint64_t now = 1'000 * kMs;
  for (int i = 0; i < 50; ++i, now += kMs) {
    (*server)->poll(now, make);
    usleep(1000);
  }
  ASSERT_EQ(built, 1u) << "the request was not answered";
  char some[1024];
  ASSERT_GT(recv(c, some, sizeof(some), MSG_DONTWAIT), 0) << "nothing of the answer arrived";
  // Reset (linger 0): the server's next send meets EPIPE or ECONNRESET.
  const linger reset{1, 0};
  setsockopt(c, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(c);
  for (int i = 0; i < 50; ++i, now += kMs) {
    (*server)->poll(now, make);
    usleep(1000);
  }
  // The reset client is let go at once (it was kept, and sent to on
  // every turn, until its 2 s deadline; the fake clock moved 100 ms).
  EXPECT_EQ((*server)->stats().refused, 1u) << "the client that reset mid-answer was not let go";
  // Still here, and a new client is answered.
  const int d = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(d, 0);
  ASSERT_EQ(connect(d, reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0);
  ASSERT_EQ(send(d, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string got;
  for (int i = 0; i < 200 && got.find("HTTP/1.1 200") == std::string::npos; ++i, now += kMs) {
    (*server)->poll(now, make);
    char buf[4096];
    const ssize_t n = recv(d, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) got.append(buf, static_cast<size_t>(n));
    usleep(1000);
  }
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got.substr(0, 200);
  close(d);
}

}  // namespace
}  // namespace ringfire::cli
