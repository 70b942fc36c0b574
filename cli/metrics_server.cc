// metrics_server.cc — GET /metrics from the conductor loop (see
// metrics_server.h).
#include "cli/metrics_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "control/mirror_control.h"
#include "control/serve_control.h"
#include "dataplane/kernel_udp.h"

namespace ringfire::cli {
namespace {

constexpr size_t kMaxClients = 16;
constexpr size_t kMaxPerSource = 4;
constexpr size_t kMaxRequest = 8 * 1024;
constexpr uint64_t kDeadlineNs = 2'000'000'000;
// A body is built at most once per kBodyFreshNs and served to every scrape
// in that window: a stranger churning connections costs the conductor a
// copy, not a walk of every session (Prometheus scrapes every second or
// more; 100 ms is far below that).
constexpr uint64_t kBodyFreshNs = 100'000'000;

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

// head_end: where a request's head ends (CRLF CRLF, or bare LF LF from a
// hand-typed client), npos while it has not.
size_t head_end(const std::string& in) {
  const size_t crlf = in.find("\r\n\r\n");
  const size_t lf = in.find("\n\n");
  return std::min(crlf, lf);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::listen(const net::Endpoint& at) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const sockaddr_in a = net::to_sockaddr(at);
  if (bind(s->listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 || ::listen(s->listen_fd_, 16) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("metrics: cannot listen on ", net::to_string(at), ": ",
                                                      std::strerror(errno), " (choose another metrics address)"));
  }
  // Where it listens (port 0 in the address: the one the kernel chose).
  sockaddr_in bound{};
  socklen_t bound_len = sizeof(bound);
  s->address_ = getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_len) == 0
                    ? net::from_sockaddr(bound)
                    : at;
  return s;
}

MetricsServer::~MetricsServer() {
  for (Client& c : clients_) close(c.fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void MetricsServer::poll(uint64_t now_ns, const std::function<std::string()>& body) {
  for (;;) {
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    const uint32_t source = ntohl(from.sin_addr.s_addr);
    auto holds = [&](uint32_t a) {
      return static_cast<size_t>(std::count_if(clients_.begin(), clients_.end(), [&](const Client& c) { return c.source == a; }));
    };
    if (holds(source) >= kMaxPerSource) {
      ++stats_.refused;
      close(fd);
      continue;
    }
    if (clients_.size() == kMaxClients) {
      // Full: a client still sending its request gives its place (those
      // being answered keep theirs), from the address holding the most, the
      // oldest of them: one address's churn evicts its own first, never a
      // lone scraper's; with none such, the newcomer goes.
      auto oldest = clients_.end();
      size_t most = 0;
      for (auto it = clients_.begin(); it != clients_.end(); ++it) {
        if (!it->out.empty()) continue;
        if (const size_t n = holds(it->source); n > most) {
          most = n;
          oldest = it;
        }
      }
      ++stats_.refused;
      if (oldest == clients_.end()) {
        close(fd);
        continue;
      }
      close(oldest->fd);
      clients_.erase(oldest);
    }
    clients_.push_back(Client{fd, {}, {}, 0, now_ns + kDeadlineNs, source});
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
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close_it = head_end(c.in) == std::string::npos;
        break;
      }
      if (c.in.size() > kMaxRequest) {
        c.out = response(413, "Request Entity Too Large", "text/plain", "request too large\n");
        ++stats_.refused;
      } else if (head_end(c.in) != std::string::npos) {
        std::string line = c.in.substr(0, c.in.find('\n'));
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("GET /metrics ", 0) == 0 || line.rfind("GET /metrics?", 0) == 0 || line == "GET /metrics") {
          if (body_at_ns_ == 0 || now_ns - body_at_ns_ >= kBodyFreshNs) {
            body_ = body();
            body_at_ns_ = now_ns == 0 ? 1 : now_ns;
          }
          c.out = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body_);
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
    bool gone = false;
    if (!close_it && !c.out.empty()) {
      while (c.sent < c.out.size()) {
        // MSG_NOSIGNAL: a client that reset mid-answer is an error here,
        // not a SIGPIPE that ends the daemon (review helper-35).
        const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          gone = !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));  // else full: it drains later
          break;
        }
        c.sent += static_cast<size_t>(n);
      }
      close_it = gone || c.sent == c.out.size();  // gone: reset, or closed, mid-answer
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

absl::StatusOr<net::Endpoint> metrics_address(const std::string& text) {
  auto at = net::parse_endpoint(text);
  if (!at.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics ", text, ": ", at.status().message(),
                                                   " (e.g. 198.18.0.1:9464)"));
  }
  return at;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> start_metrics(engine::Engine& eng, const net::Endpoint& at,
                                                             const std::string& prefix) {
  auto m = MetricsServer::listen(at);
  if (!m.ok()) return m.status();
  if (absl::Status st = eng.watch((*m)->fd()); !st.ok()) return st;
  std::printf("%s: metrics on http://%s/metrics\n", prefix.c_str(), net::to_string((*m)->address()).c_str());  // the bound port (0 picks one)
  std::fflush(stdout);
  return m;
}

std::string engine_metrics(const engine::Engine& eng) {
  using L = std::vector<std::pair<std::string, std::string>>;
  Exposition x;
  const std::vector<engine::PortInfo> ports = eng.ports();
  x.family("ringfire_port_info", "gauge", "A port and its active path (the fallback rung it landed on).");
  for (const auto& p : ports) x.sample("ringfire_port_info", L{{"port", p.name}, {"path", p.path}, {"worker", p.worker}}, 1);
  auto port_counter = [&](const char* name, const char* help, auto get) {
    x.family(name, "counter", help);
    for (const auto& p : ports) x.sample(name, L{{"port", p.name}}, static_cast<double>(get(p)));
  };
  port_counter("ringfire_port_rx_datagrams_total", "Datagrams received and routed to a session.",
               [](const engine::PortInfo& p) { return p.datagrams; });
  port_counter("ringfire_port_unrouted_total", "Datagrams on a binding no session holds.",
               [](const engine::PortInfo& p) { return p.unrouted; });
  port_counter("ringfire_port_dropped_total", "Datagrams the port lost, either way.",
               [](const engine::PortInfo& p) { return p.drops; });
  x.family("ringfire_port_worker_busy_seconds_total", "counter", "The workers' time in iterations that did work.");
  for (const auto& p : ports) x.sample("ringfire_port_worker_busy_seconds_total", L{{"port", p.name}}, p.busy_ns / 1e9);
  // Per worker (a queued port runs one a queue): one saturated queue reads
  // as a fraction of the port's sum.
  x.family("ringfire_port_queue_busy_seconds_total", "counter",
           "Each worker's time in iterations that did work, by queue (0 for a port of one worker).");
  for (const auto& p : ports) {
    if (p.queue_busy_ns.empty()) {
      x.sample("ringfire_port_queue_busy_seconds_total", L{{"port", p.name}, {"queue", "0"}}, p.busy_ns / 1e9);
    }
    for (size_t q = 0; q < p.queue_busy_ns.size(); ++q) {
      x.sample("ringfire_port_queue_busy_seconds_total", L{{"port", p.name}, {"queue", std::to_string(q)}},
               p.queue_busy_ns[q] / 1e9);
    }
  }
  x.family("ringfire_port_sessions", "gauge", "Sessions on the port's worker.");
  for (const auto& p : ports) x.sample("ringfire_port_sessions", L{{"port", p.name}}, static_cast<double>(p.sessions));

  auto serve_metric = [&](const char* name, const char* type, const char* help, auto get) {
    x.family(name, type, help);
    for (const auto& s : eng.serves()) {
      x.sample(name, L{{"session", s->spec.name}, {"ring", s->spec.ring}}, static_cast<double>(get(*s)));
    }
  };
  using Serve = engine::Engine::Serve;
  serve_metric("ringfire_serve_records_total", "counter", "Records sent (UDP and TCP).",
               [](const Serve& s) { return s.link->stats.records.get() + s.control->stats().tcp_records; });
  serve_metric("ringfire_serve_datagrams_total", "counter", "Datagrams sent.",
               [](const Serve& s) { return s.link->stats.datagrams.get(); });
  serve_metric("ringfire_serve_send_failures_total", "counter", "Datagrams the port refused.",
               [](const Serve& s) { return s.link->stats.send_failures.get(); });
  serve_metric("ringfire_serve_next_seq", "gauge", "One past the last sequence sent.",
               [](const Serve& s) { return s.link->stats.next_to_send.load(std::memory_order_relaxed); });
  serve_metric("ringfire_serve_mirrors", "gauge", "Mirrors connected.",
               [](const Serve& s) { return s.control->stats().mirrors; });
  serve_metric("ringfire_serve_naks_total", "counter", "NAKs answered.",
               [](const Serve& s) { return s.control->stats().naks; });
  // From each mirror's last HEALTH (a TCP mirror: its cursor), as the
  // source sees it: a mirror starved of CPU does not know it is behind.
  serve_metric("ringfire_serve_slow_mirrors", "gauge",
               "Mirrors more than slow-mirror-pct of the ring behind (each said by a WARNING line); a mirror the "
               "ring laps loses records to a GAP.",
               [](const Serve& s) {
                 uint64_t n = 0;
                 for (const control::MirrorView& v : s.control->mirrors()) n += v.slow ? 1 : 0;
                 return n;
               });
  serve_metric("ringfire_serve_max_mirror_lag_records", "gauge",
               "Records the furthest-behind mirror lacks, by its last HEALTH (a TCP mirror: its cursor).",
               [](const Serve& s) {
                 uint64_t lag = 0;
                 for (const control::MirrorView& v : s.control->mirrors()) lag = std::max(lag, v.lag);
                 return lag;
               });
  serve_metric("ringfire_serve_dup_auto_doubled", "gauge",
               "Unicast mirrors whose datagrams go twice now (dup = auto: their reported loss is above 1 %).",
               [](const Serve& s) { return s.link->stats.dup_auto_doubled.get(); });
  serve_metric("ringfire_serve_dup_auto_copies_total", "counter", "Second copies sent under dup = auto.",
               [](const Serve& s) { return s.link->stats.dup_auto_copies.get(); });
  serve_metric("ringfire_serve_punches_probed_total", "counter",
               "PUNCHes with a known token from another address than its connection's: not served, probed "
               "(a bypass port's own address does this once at a mirror's start; a stolen token, every time).",
               [](const Serve& s) { return s.link->stats.punch_probed.get(); });
  serve_metric("ringfire_serve_paths_validated_total", "counter",
               "Addresses that echoed their PROBE over TCP (then served).",
               [](const Serve& s) { return s.link->stats.paths_validated.get(); });
  serve_metric("ringfire_serve_refused_tcp_total", "counter", "TCP connections and frames refused.",
               [](const Serve& s) { return s.control->stats().refused(); });
  serve_metric("ringfire_serve_archive_records_total", "counter",
               "Records answered from the ring's archive (what the ring no longer held).",
               [](const Serve& s) { return s.control->stats().archive_records; });
  serve_metric("ringfire_serve_archive_waits_total", "counter",
               "Turns a mirror's replay waited for the replay or bandwidth cap.",
               [](const Serve& s) { return s.control->stats().archive_waits + s.control->stats().archive_throttled; });
  serve_metric("ringfire_serve_archive_preempted_total", "counter",
               "Replay places a mirror gave up after 1 s for another in line.",
               [](const Serve& s) { return s.control->stats().archive_preempted; });
  serve_metric("ringfire_serve_archive_errors_total", "counter", "Archive reads that failed (damage).",
               [](const Serve& s) { return s.control->stats().archive_errors; });
  x.family("ringfire_session_unkeyed", "gauge",
           "1 for a session that crosses networks without a pre-shared key (a unicast serve or mirror): make "
           "one with `ringfire keygen` and set psk-file.");
  for (const auto& s : eng.serves()) {
    x.sample("ringfire_session_unkeyed", L{{"session", s->spec.name}, {"role", "serve"}},
             s->spec.unicast && !s->spec.control.psk ? 1 : 0);
  }
  for (const auto& m : eng.mirrors()) {
    x.sample("ringfire_session_unkeyed", L{{"session", m->spec.name}, {"role", "mirror"}},
             m->spec.options.unicast && !m->spec.options.psk ? 1 : 0);
  }
  x.family("ringfire_serve_refused_punches_total", "counter", "PUNCH datagrams refused, by reason.");
  for (const auto& s : eng.serves()) {
    const dataplane::ServeStats& w = s->link->stats;
    const std::pair<const char*, uint64_t> reasons[] = {
        {"malformed", w.punch_malformed.get()},       {"wrong_kind", w.punch_wrong_kind.get()},
        {"unknown_token", w.punch_unknown_token.get()}, {"bad_mac", w.punch_bad_mac.get()},
        {"replayed", w.punch_replayed.get()}};
    for (const auto& [reason, n] : reasons) {
      x.sample("ringfire_serve_refused_punches_total", L{{"session", s->spec.name}, {"reason", reason}},
               static_cast<double>(n));
    }
  }

  auto mirror_metric = [&](const char* name, const char* type, const char* help, auto get) {
    x.family(name, type, help);
    for (const auto& m : eng.mirrors()) {
      const dataplane::MirrorWorkerStats* st = m->control->stats();
      if (st == nullptr) continue;  // not connected yet: no series rather than zeros
      x.sample(name, L{{"session", m->spec.name}, {"ring", m->spec.options.ring},
                       {"source", net::to_string(m->spec.options.source)}},
               static_cast<double>(get(*st)));
    }
  };
  using MS = dataplane::MirrorWorkerStats;
  mirror_metric("ringfire_mirror_records_total", "counter", "Records written into the mirror ring.",
                [](const MS& s) { return s.records.get(); });
  mirror_metric("ringfire_mirror_next_seq", "gauge", "The next sequence the mirror writes.",
                [](const MS& s) { return s.next_seq.get(); });
  mirror_metric("ringfire_mirror_lag_records", "gauge", "Records the source has that the mirror does not yet.",
                [](const MS& s) { return s.known_end.get() > s.next_seq.get() ? s.known_end.get() - s.next_seq.get() : 0; });
  mirror_metric("ringfire_mirror_naks_total", "counter", "NAKs sent.", [](const MS& s) { return s.naks.get(); });
  mirror_metric("ringfire_mirror_gap_records_total", "counter", "Records the source no longer had (GAPs).",
                [](const MS& s) { return s.gap_records.get(); });
  mirror_metric("ringfire_mirror_datagrams_total", "counter", "Datagrams received.",
                [](const MS& s) { return s.datagrams.get(); });
  x.family("ringfire_mirror_rejected_total", "counter", "UDP input rejected, by reason.");
  for (const auto& m : eng.mirrors()) {
    const dataplane::MirrorWorkerStats* st = m->control->stats();
    if (st == nullptr) continue;
    const std::pair<const char*, uint64_t> reasons[] = {
        {"wrong_sender", st->wrong_sender.get()}, {"bad_mac", st->bad_mac.get()},
        {"bad_tag", st->bad_tag.get()},
        {"wrong_kind", st->wrong_kind.get()},     {"wrong_session", st->wrong_session.get()},
        {"implausible", st->implausible.get()},   {"malformed", st->malformed.get()}};
    for (const auto& [reason, n] : reasons) {
      x.sample("ringfire_mirror_rejected_total", L{{"session", m->spec.name}, {"reason", reason}}, static_cast<double>(n));
    }
  }
  x.family("ringfire_mirror_streaming", "gauge", "1 while the mirror has a session with its source.");
  for (const auto& m : eng.mirrors()) {
    x.sample("ringfire_mirror_streaming", L{{"session", m->spec.name}},
             m->control->state() == control::MirrorControl::State::kStreaming ? 1 : 0);
  }
  return x.text();
}

std::string node_metrics(const std::vector<NodeSample>& nodes) {
  using L = std::vector<std::pair<std::string, std::string>>;
  using S = node::NodeStats;
  Exposition x;
  // labels: a node's own (node="NAME" when named), then the sample's.
  auto labels = [](const NodeSample& n, L more) {
    if (!n.name.empty()) more.insert(more.begin(), {"node", n.name});
    return more;
  };
  x.family("ringfire_mux_info", "gauge", "The node's data plane: its active path.");
  for (const NodeSample& n : nodes) x.sample("ringfire_mux_info", labels(n, {{"path", n.data_path}}), 1);
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t (*of)(const S&)) {
    x.family(name, type, help);
    for (const NodeSample& n : nodes) x.sample(name, labels(n, {}), static_cast<double>(of(n.stats)));
  };
  // by: one family, a sample per (node, label value).
  auto by = [&](const char* name, const char* help, const char* key,
                std::vector<std::pair<const char*, uint64_t (*)(const S&)>> values) {
    x.family(name, "counter", help);
    for (const NodeSample& n : nodes) {
      for (const auto& [v, of] : values) x.sample(name, labels(n, {{key, v}}), static_cast<double>(of(n.stats)));
    }
  };
  metric("ringfire_mux_records_sent_total", "counter", "Stream records sent (the mux's and the per-stream path's).",
         [](const S& s) { return s.out.records + s.tcp_records_out; });
  metric("ringfire_mux_batches_sent_total", "counter", "_stream_batch messages published into channels.",
         [](const S& s) { return s.out.batches; });
  metric("ringfire_mux_records_received_total", "counter", "Stream records delivered to anchors.",
         [](const S& s) { return s.in.records + s.tcp_records_in; });
  metric("ringfire_mux_batches_received_total", "counter", "_stream_batch messages applied.",
         [](const S& s) { return s.in.batches; });
  metric("ringfire_mux_streams_finished_total", "counter", "Streams that ended finished.",
         [](const S& s) { return s.in.finished; });
  metric("ringfire_mux_streams_dropped_total", "counter", "Streams that ended dropped (producer or peer gone).",
         [](const S& s) { return s.in.dropped; });
  metric("ringfire_mux_credit_returned_total", "counter", "Frames of credit granted back to owners.",
         [](const S& s) { return s.in.credit_returned; });
  metric("ringfire_mux_reader_stall_total", "counter", "Granted records that found their buffer full (must stay 0).",
         [](const S& s) { return s.in.reader_stall; });
  metric("ringfire_mux_fenced_total", "counter", "Records over the batch cap, sent alone.",
         [](const S& s) { return s.out.fenced; });
  metric("ringfire_mux_channel_failures_total", "counter", "Channels that lost a record (ended as peer loss).",
         [](const S& s) { return s.channel_failures; });
  metric("ringfire_mux_peers_lost_total", "counter", "Control connections that ended.",
         [](const S& s) { return s.peers_lost; });
  metric("ringfire_mux_channel_datagrams_sent_total", "counter",
         "Channel datagrams carrying batches the node's serves sent to peers.",
         [](const S& s) { return s.channel_datagrams_out; });
  metric("ringfire_mux_channel_tx_bursts_total", "counter",
         "tx_burst calls that carried the channels' batches (one per forward pass at best).",
         [](const S& s) { return s.channel_tx_bursts; });
  by("ringfire_mux_channel_applied_total", "Ingress channel batches applied, by the thread that applied them.", "by",
     {{"reader", [](const S& s) { return s.applied_by_readers; }}, {"node", [](const S& s) { return s.applied_by_node; }}});
  by("ringfire_mux_resumes_total", "Streams held for a resume when their channel ended, and what became of them.",
     "outcome",
     {{"held", [](const S& s) { return s.resumes_held; }},
      {"answered", [](const S& s) { return s.resumes_answered; }},
      {"refused", [](const S& s) { return s.resumes_refused; }},
      {"expired", [](const S& s) { return s.resumes_expired; }}});
  by("ringfire_mux_opens_total", "Streams opened: by ATTACH (answered here, consumer side) or on a ticket, with no round trip.",
     "how",
     {{"attach", [](const S& s) { return s.attaches_answered; }},
      {"ticket", [](const S& s) { return s.tickets_claimed; }}});
  metric("ringfire_mux_tickets_opened_total", "counter", "Streams this node opened on a handle's ticket (producer side).",
         [](const S& s) { return s.tickets_opened; });
  metric("ringfire_mux_tickets_expired_total", "counter",
         "Tickets no producer claimed within the accept timeout: lapsed, their anchor told (consumer side).",
         [](const S& s) { return s.tickets_expired; });
  by("ringfire_mux_rejected_total", "What the node refused or dropped, by reason.", "reason",
     {{"refused_connection", [](const S& s) { return s.refused; }},
      {"unauthenticated", [](const S& s) { return s.unauthenticated; }},
      {"bad_frame", [](const S& s) { return s.frames_rejected; }},
      {"bad_frame_mac", [](const S& s) { return s.bad_frame_mac; }},
      {"attach_refused", [](const S& s) { return s.attaches_refused; }},
      {"generation_mismatch", [](const S& s) { return s.in.generation_mismatch; }},
      {"unknown_slot", [](const S& s) { return s.in.unknown_slot; }},
      {"unknown_anchor", [](const S& s) { return s.in.unknown_anchor; }},
      {"protocol_error", [](const S& s) { return s.in.protocol_errors; }},
      {"stale_epoch", [](const S& s) { return s.in.stale_epoch; }},
      {"malformed_batch", [](const S& s) { return s.in.malformed; }},
      {"out_of_fds", [](const S& s) { return s.out_of_fds; }},
      {"by_source", [](const S& s) { return s.refused_by_source; }},
      {"channel_taken", [](const S& s) { return s.refused_channel_taken; }},
      {"foreign_epoch", [](const S& s) { return s.in.foreign_epoch; }},
      {"channel_evicted_idle", [](const S& s) { return s.channels_evicted; }},
      {"over_budget", [](const S& s) { return s.in.over_budget; }},
      {"never_opened", [](const S& s) { return s.in.never_opened; }},
      {"channel_wrong_sender", [](const S& s) { return s.channel_wrong_sender; }},
      {"channel_bad_mac", [](const S& s) { return s.channel_bad_mac; }},
      {"channel_bad_tag", [](const S& s) { return s.channel_bad_tag; }},
      {"channel_wrong_kind", [](const S& s) { return s.channel_wrong_kind; }},
      {"channel_wrong_session", [](const S& s) { return s.channel_wrong_session; }},
      {"channel_implausible", [](const S& s) { return s.channel_implausible; }},
      {"channel_malformed", [](const S& s) { return s.channel_malformed; }}});
  by("ringfire_mux_batches_sent_by_reason_total", "_stream_batch messages sent, by what flushed them.", "reason",
     {{"liveness", [](const S& s) { return s.out.by_reason[static_cast<int>(mux::FlushReason::kLiveness)]; }},
      {"clamp", [](const S& s) { return s.out.by_reason[static_cast<int>(mux::FlushReason::kClamp)]; }},
      {"on_admission", [](const S& s) { return s.out.by_reason[static_cast<int>(mux::FlushReason::kOnAdmission)]; }},
      {"linger", [](const S& s) { return s.out.by_reason[static_cast<int>(mux::FlushReason::kLinger)]; }},
      {"manual", [](const S& s) { return s.out.by_reason[static_cast<int>(mux::FlushReason::kManual)]; }}});
  // The gauges that return to zero once every stream ended, was read, and was applied.
  metric("ringfire_mux_live_slots", "gauge", "Streams this node produces that are open (owner side).",
         [](const S& s) { return s.live_slots; });
  metric("ringfire_mux_withheld_bytes", "gauge", "Bytes staged and not yet sent (owner side).",
         [](const S& s) { return s.withheld_bytes; });
  metric("ringfire_mux_outstanding_bytes", "gauge", "Bytes sent and not yet credited back (owner side).",
         [](const S& s) { return s.outstanding_bytes; });
  metric("ringfire_mux_live_streams", "gauge", "Streams into this node's anchors not yet ended and read (receiver side).",
         [](const S& s) { return s.live_streams; });
  metric("ringfire_mux_buffered_bytes", "gauge", "Bytes received and not yet read (receiver side).",
         [](const S& s) { return s.buffered_bytes; });
  metric("ringfire_mux_anchors", "gauge", "Anchors open.", [](const S& s) { return s.anchors; });
  metric("ringfire_mux_peers_out", "gauge", "Channels this node serves to peers.", [](const S& s) { return s.peers_out; });
  metric("ringfire_mux_peers_in", "gauge", "Channels this node mirrors from peers.", [](const S& s) { return s.peers_in; });
  by("ringfire_mux_channel_datagrams_total", "Channel DATA that came by UDP, and by TCP.", "via",
     {{"udp", [](const S& s) { return s.channel_datagrams; }}, {"tcp", [](const S& s) { return s.channel_tcp_frames; }}});
  return x.text();
}

std::string record_metrics(const std::vector<RecordSample>& recordings) {
  using S = archive::RecorderSnapshot;
  Exposition x;
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t (*of)(const S&)) {
    x.family(name, type, help);
    for (const RecordSample& r : recordings) {
      x.sample(name, {{"record", r.name}, {"ring", r.ring}}, static_cast<double>(of(r.s)));
    }
  };
  metric("ringfire_record_records_total", "counter", "Records written to the archive by this process.",
         [](const S& s) { return s.records; });
  metric("ringfire_record_bytes_total", "counter", "Bytes written to segments (block padding included).",
         [](const S& s) { return s.bytes; });
  metric("ringfire_record_recorded_end", "gauge", "One past the last sequence written.",
         [](const S& s) { return s.recorded_end; });
  metric("ringfire_record_durable_end", "gauge", "One past the last sequence fsynced.",
         [](const S& s) { return s.durable_end; });
  metric("ringfire_record_lag_records", "gauge", "Records the ring's writer published that are not written yet.",
         [](const S& s) { return s.lag; });
  metric("ringfire_record_segments", "gauge", "Segments the archive's catalog lists.",
         [](const S& s) { return s.segments; });
  metric("ringfire_record_gaps_total", "counter", "Laps the recorder took (each recorded as a gap).",
         [](const S& s) { return s.gaps; });
  metric("ringfire_record_lost_total", "counter", "Records those gaps lost.", [](const S& s) { return s.lost; });
  metric("ringfire_record_fsyncs_total", "counter", "fdatasync calls that succeeded.",
         [](const S& s) { return s.fsyncs; });
  metric("ringfire_record_disk_errors_total", "counter", "Failed writes, syncs and removals (a full disk).",
         [](const S& s) { return s.disk_errors; });
  metric("ringfire_record_segments_removed_total", "counter", "Segments retention removed.",
         [](const S& s) { return s.segments_removed; });
  metric("ringfire_record_removals_deferred_total", "counter", "Retention passes stopped by a reader's segment.",
         [](const S& s) { return s.removals_deferred; });
  metric("ringfire_record_buffer_bytes", "gauge",
         "Memory of the recorder's batch buffers (more are made while the disk stalls, up to buffer-bytes).",
         [](const S& s) { return s.buffer_bytes; });
  metric("ringfire_record_stalled", "gauge", "1 while the disk refuses writes (recording waits, the ring goes on).",
         [](const S& s) { return static_cast<uint64_t>(s.stalled ? 1 : 0); });
  return x.text();
}

}  // namespace ringfire::cli
