// engine.cc — see engine.h.
#include "engine/engine.h"

#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ring/monotonic.h"

namespace ringfire::engine {
namespace {


}  // namespace

Engine::Engine(Log log) : log_(std::move(log)), epoll_fd_(epoll_create1(EPOLL_CLOEXEC)) {}

Engine::~Engine() {
  stop_all();
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void Engine::stop_all() {
  // Sessions first (each leaves its worker), then the workers.
  while (!mirrors_.empty()) (void)remove(mirrors_.back()->spec.name);
  while (!serves_.empty()) (void)remove(serves_.back()->spec.name);
  for (auto& [name, port] : ports_) port->stop();
}

absl::Status Engine::add_port(const std::string& name, std::unique_ptr<PortHandle> port) {
  if (port_named(name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("a port named ", name, " exists already: give each a new name"));
  }
  ports_.emplace_back(name, std::move(port));
  return absl::OkStatus();
}

PortHandle* Engine::port_named(const std::string& name) const {
  for (const auto& [n, p] : ports_) {
    if (n == name) return p.get();
  }
  return nullptr;
}

std::vector<PortInfo> Engine::ports() const {
  std::vector<PortInfo> out;
  for (const auto& [name, port] : ports_) out.push_back(port->info());
  return out;
}

bool Engine::name_taken(const std::string& name) const {
  for (const auto& s : serves_) {
    if (s->spec.name == name) return true;
  }
  for (const auto& m : mirrors_) {
    if (m->spec.name == name) return true;
  }
  return false;
}

absl::Status Engine::watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_fd_ < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void Engine::unwatch(int fd) { epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr); }

bool Engine::ready(int fd) const { return std::find(ready_fds_.begin(), ready_fds_.end(), fd) != ready_fds_.end(); }

absl::StatusOr<Engine::Serve*> Engine::add_serve(ServeSpec spec, std::optional<ring::RingFile> mapped) {
  if (name_taken(spec.name)) {
    return absl::AlreadyExistsError(absl::StrCat("a session named ", spec.name, " exists already"));
  }
  PortHandle* port = port_named(spec.port);
  if (port == nullptr) {
    return absl::NotFoundError(absl::StrCat("session ", spec.name, ": no port named ", spec.port));
  }
  // One mapping of the ring for the whole session: the worker's reader, its
  // repair reader and the control each hold a handle on it (a ring mapped
  // four times is four sets of page tables and four RSS charges).
  if (!mapped) {
    auto file = ring::RingFile::open(spec.ring);
    if (!file.ok()) return file.status();
    mapped.emplace(std::move(*file));
  }
  ServeRequest r;
  r.config = spec.worker;
  r.pace_given = spec.pace_given;
  auto reader = ring::RawReader::attach(
      mapped->share(), spec.from_oldest ? ring::StartPosition::oldest() : ring::StartPosition::latest());
  if (!reader.ok()) return reader.status();
  r.reader.emplace(std::move(*reader));
  if (spec.control.udp_repair_max != 0) {
    // The worker's second reader, for NAK repair through the data plane.
    auto rr = ring::RawReader::attach(mapped->share(), ring::StartPosition::at(0));
    if (!rr.ok()) return rr.status();
    r.repair_reader.emplace(std::move(*rr));
  }
  r.bind.ip = spec.bind_ip;
  r.bind.udp_port = spec.udp_port;
  auto placed = port->open_serve(std::move(r));
  if (!placed.ok()) return placed.status();

  control::ServeControlConfig cc = spec.control;
  cc.ring = spec.ring;
  cc.multicast = spec.worker.multicast;
  cc.unicast_port = spec.unicast ? placed->local.port : 0;
  // Where the worker's datagrams come from (mirrors believe only that
  // address): its binding's, or for a socket on any address the multicast
  // interface's.
  cc.data_ip = placed->local.ip != 0 ? placed->local.ip : spec.iface_ip;
  cc.mtu = spec.worker.mtu;
  cc.session = spec.worker.session;
  const std::string name = spec.name;
  cc.log = [this, name](const std::string& line) { log_(name, line); };
  auto control = control::ServeControl::start(cc, placed->link, std::move(*mapped));
  if (!control.ok()) {
    port->close_serve(placed->link);
    return control.status();
  }
  if (absl::Status st = watch((*control)->wait_fd()); !st.ok()) {
    port->close_serve(placed->link);
    return st;
  }
  auto s = std::make_unique<Serve>();
  s->spec = std::move(spec);
  s->port = port;
  s->link = placed->link;
  s->udp_local = placed->local;
  s->pace_ns = placed->pace_ns;
  s->control = std::move(*control);
  serves_.push_back(std::move(s));
  return serves_.back().get();
}

absl::StatusOr<Engine::Mirror*> Engine::add_mirror(MirrorSpec spec) {
  if (name_taken(spec.name)) {
    return absl::AlreadyExistsError(absl::StrCat("a session named ", spec.name, " exists already"));
  }
  PortHandle* port = port_named(spec.port);
  if (port == nullptr) {
    return absl::NotFoundError(absl::StrCat("session ", spec.name, ": no port named ", spec.port));
  }
  auto m = std::make_unique<Mirror>();
  m->port = port;
  const std::string name = spec.name;
  m->control = std::make_unique<control::MirrorControl>(spec.options, port,
                                                        [this, name](const std::string& line) { log_(name, line); });
  if (m->control->state() == control::MirrorControl::State::kFailed) return m->control->failure();
  if (absl::Status st = watch(m->control->wait_fd()); !st.ok()) return st;
  m->spec = std::move(spec);
  mirrors_.push_back(std::move(m));
  return mirrors_.back().get();
}

absl::Status Engine::remove(const std::string& name) {
  for (size_t i = 0; i < serves_.size(); ++i) {
    if (serves_[i]->spec.name != name) continue;
    Serve& s = *serves_[i];
    // The worker lets go of the session before its control (whose eventfd
    // the worker writes) goes.
    s.port->close_serve(s.link);
    unwatch(s.control->wait_fd());
    serves_.erase(serves_.begin() + static_cast<ptrdiff_t>(i));
    return absl::OkStatus();
  }
  for (size_t i = 0; i < mirrors_.size(); ++i) {
    if (mirrors_[i]->spec.name != name) continue;
    mirrors_[i]->control->stop();  // takes the session off its worker
    unwatch(mirrors_[i]->control->wait_fd());
    mirrors_.erase(mirrors_.begin() + static_cast<ptrdiff_t>(i));
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("no session named ", name));
}

void Engine::add_agent(ConductorAgent* agent) { agents_.push_back(agent); }

void Engine::remove_agent(ConductorAgent* agent) { std::erase(agents_, agent); }

void Engine::run_once(uint64_t max_wait_ns) {
  uint64_t now = monotonic_ns();
  uint64_t until = now + max_wait_ns;
  bool more = false;
  // Only the sessions with something to do: a poll is a system call, and
  // a node's turn for one channel's report polled every channel's control.
  // due: its time came, or (its time only kPollEveryNs's, no deadline of
  // its own) the conductor is up anyway and that time is within half of it.
  const auto due = [&](uint64_t at, uint64_t set_at) {
    return now >= at || (at - set_at == kPollEveryNs && now + kPollEveryNs / 2 >= at);
  };
  for (const auto& s : serves_) {
    if (due(s->poll_at, s->polled_ns) || ready(s->control->wait_fd())) {
      const bool again = s->control->poll(0);
      more |= again;
      // TCP-mode mirrors are streamed from here: come back when the ring
      // moves, or when a replay the archive's caps held back may go on.
      s->polled_ns = now;
      s->poll_at = again ? now : std::min(s->control->next_poll_at(now), now + kPollEveryNs);
    }
    until = std::min(until, s->poll_at);
  }
  for (const auto& m : mirrors_) {
    if (due(m->poll_at, m->polled_ns) || ready(m->control->wait_fd())) {
      m->polled_ns = now;
      m->poll_at = std::min(m->control->poll(now), now + kPollEveryNs);
    }
    until = std::min(until, m->poll_at);
  }
  // The agents after the sessions' turn (they may add and remove sessions).
  // By index: an agent may remove itself.
  const size_t sessions = serves_.size() + mirrors_.size();
  for (size_t i = 0; i < agents_.size(); ++i) until = std::min(until, agents_[i]->conduct(monotonic_ns()));
  ready_fds_.clear();
  // A session an agent added (its poll_at 0) takes its turn at once, even
  // when another went in the same pass (the count alone would not say).
  for (const auto& s : serves_) until = std::min(until, s->poll_at);
  for (const auto& m : mirrors_) until = std::min(until, m->poll_at);
  // A session an agent added takes its first turn (a mirror's connect) now,
  // not after the wait planned without it (a stream mux's channel: its
  // first batch waits for it).
  // No wait then, but a look all the same: which sessions' descriptors are
  // ready is what the next round polls.
  now = monotonic_ns();
  const bool wait = !more && serves_.size() + mirrors_.size() == sessions && until > now;
  const uint64_t wait_ns = wait ? until - now : 0;
  epoll_event events[64];
  const timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000), static_cast<long>(wait_ns % 1'000'000'000)};
  // Level-triggered: a descriptor not reported here (past 64) is at the next look.
  const int n = epoll_pwait2(epoll_fd_, events, 64, &ts, nullptr);
  for (int i = 0; i < n; ++i) ready_fds_.push_back(events[i].data.fd);
}

}  // namespace ringfire::engine
