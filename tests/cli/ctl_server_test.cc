// ctl_server_test.cc — the daemon's control socket against clients that
// stall: who gives a place to the operator, and who keeps one (a fake
// clock: CtlServer::poll takes the time it is given).
#include "cli/ctl_server.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/temp_dir.h"

namespace ringfire::cli {
namespace {

constexpr uint64_t kMs = 1'000'000;

// connect_to: a client socket on `path`, optionally with a whole request sent.
int connect_to(const std::string& path, const std::string& request = "", bool whole = false) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) return -1;
  if (!request.empty()) (void)!write(fd, request.data(), request.size());
  if (whole) shutdown(fd, SHUT_WR);
  return fd;
}

// answer: what the server wrote to `fd` until it closed it ("" if it
// closed it unanswered). Non-blocking reads: the server is polled here.
std::string drain(int fd) {
  std::string got;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// closed: the server closed `fd` (EOF once whatever it sent is read).
bool closed(int fd) {
  drain(fd);
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

struct Ctl {
  ringfire::testing::TempDir dir;
  std::unique_ptr<CtlServer> server;
  std::string path = dir.path() + "/ctl.sock";
  int answered = 0;
  Ctl() {
    auto s = CtlServer::listen(path);
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
  }
  void poll(uint64_t now) {
    server->poll(now, [&](const std::string& request) {
      ++answered;
      // "big": an answer no socket buffer holds, left unread by its client.
      return request == "big" ? std::string(4u << 20, 'x') : "ok " + request;
    });
  }
};

TEST(CtlServer, EightClientsNotReadingTheirAnswersGiveTheOperatorAPlaceOnceTheirAnswersStall) {
  Ctl ctl;
  std::vector<int> stalled;
  for (int i = 0; i < 8; ++i) stalled.push_back(connect_to(ctl.path, "big", true));
  ctl.poll(1 * kMs);  // all eight answered: their answers wait on their sockets
  EXPECT_EQ(ctl.answered, 8);
  // Within 100 ms of their answers moving, they keep their places: the
  // newcomer is turned away (it may retry), none of them is cut.
  const int early = connect_to(ctl.path, "list", true);
  ctl.poll(50 * kMs);
  EXPECT_TRUE(closed(early));
  EXPECT_EQ(ctl.answered, 8);
  // Past it, the operator takes the oldest one's place and is answered.
  const int op = connect_to(ctl.path, "list", true);
  ctl.poll(200 * kMs);
  EXPECT_EQ(drain(op), "ok list\n");
  EXPECT_EQ(ctl.answered, 9);
  EXPECT_TRUE(closed(stalled[0]));   // the oldest gave its place
  EXPECT_FALSE(closed(stalled[1]));  // the others keep theirs
  for (int fd : stalled) close(fd);
  close(early);
  close(op);
}

TEST(CtlServer, RequestsThatCameWholeAreAnsweredBeforeANewcomerMayTakeTheirPlace) {
  Ctl ctl;
  std::vector<int> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(connect_to(ctl.path));
  ctl.poll(1 * kMs);  // accepted, nothing sent yet
  for (int fd : clients) {
    ASSERT_EQ(write(fd, "list", 4), 4);
    shutdown(fd, SHUT_WR);
  }
  const int newcomer = connect_to(ctl.path, "list", true);
  ctl.poll(300 * kMs);  // past their request pass: the eight were idle before they sent
  for (int fd : clients) EXPECT_EQ(drain(fd), "ok list\n");
  EXPECT_EQ(drain(newcomer), "ok list\n");
  EXPECT_EQ(ctl.answered, 9);
  for (int fd : clients) close(fd);
  close(newcomer);
}

}  // namespace
}  // namespace ringfire::cli
