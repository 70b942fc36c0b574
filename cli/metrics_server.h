// metrics_server.h — the daemon's Prometheus endpoint: GET /metrics over
// plain HTTP/1.1 on the address the config names (off by default), served
// from the conductor's loop, never a worker: a scrape reads the same
// single-writer counters `ctl list` does and costs the packet path nothing.
// Every client is a stranger: a request is at most 8 KiB and must arrive
// within 2 s, the answer is written as the socket drains (a client that
// does not read stalls only itself, and is cut at its deadline), at most 16
// at once and 4 from one address (a newcomer past 16 takes the place of a
// client still sending its request, from the address holding the most: 16
// idle connections of one stranger kept every scrape out, review
// helper-32); a body is built at most every 100 ms and shared by the
// scrapes in that window; anything but GET /metrics
// (a query string allowed) is answered 404 or 400. Conductor thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "archive/recorder.h"
#include "dataplane/packet_port.h"
#include "engine/engine.h"
#include "node/node.h"

namespace ringfire::cli {

struct MetricsServerStats {
  uint64_t scrapes = 0;
  uint64_t refused = 0;  // bad requests, over the cap, cut at the deadline
};

class MetricsServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsServer>> listen(const net::Endpoint& at);
  ~MetricsServer();

  int fd() const { return listen_fd_; }
  const net::Endpoint& address() const { return address_; }
  // poll accepts, reads, and answers; `body` makes the exposition text.
  void poll(uint64_t now_ns, const std::function<std::string()>& body);
  const MetricsServerStats& stats() const { return stats_; }
  // stale: what the body shows changed (a ctl add or remove): the next
  // scrape builds it again, not the one of up to 100 ms before.
  void stale() { body_at_ns_ = 0; }

 private:
  struct Client {
    int fd;
    std::string in;
    std::string out;
    size_t sent = 0;
    uint64_t deadline_ns;
    uint32_t source = 0;  // its IPv4 address
  };
  MetricsServer() = default;
  net::Endpoint address_;
  int listen_fd_ = -1;
  std::vector<Client> clients_;
  std::string body_;  // the last body built, and when (0: never)
  uint64_t body_at_ns_ = 0;
  MetricsServerStats stats_;
};

// Exposition: Prometheus text format 0.0.4, one family at a time.
class Exposition {
 public:
  // family starts a metric family (its samples follow, contiguous).
  void family(const std::string& name, const char* type, const char* help);
  // sample adds `name{labels} value` (labels: key, value pairs; values escaped).
  void sample(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels, double value);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// metrics_address parses "A.B.C.D:PORT" for --metrics (the error says what to give).
absl::StatusOr<net::Endpoint> metrics_address(const std::string& text);

// start_metrics: a server at `at` watched by `eng`'s conductor, announced
// as "PREFIX: metrics on http://.../metrics"; an error says what to change.
absl::StatusOr<std::unique_ptr<MetricsServer>> start_metrics(engine::Engine& eng, const net::Endpoint& at,
                                                             const std::string& prefix);

// engine_metrics: every port and session of `eng` in the Prometheus text
// format (the counters `ctl list` shows). Conductor thread.
std::string engine_metrics(const engine::Engine& eng);
// node_metrics: stream-multiplexer Nodes' counters (ringfire_mux_*), with
// each one's data plane's active path; labelled node="NAME" when a daemon
// runs named nodes (a one-node command's name is "": no label).
struct NodeSample {
  std::string name;
  node::NodeStats stats;
  std::string data_path;
};
std::string node_metrics(const std::vector<NodeSample>& nodes);
inline std::string node_metrics(const node::NodeStats& s, const std::string& data_path) {
  return node_metrics({NodeSample{"", s, data_path}});
}

// record_metrics: recordings' counters (ringfire_record_*), labelled
// record="NAME" and ring="RING".
struct RecordSample {
  std::string name;
  std::string ring;
  archive::RecorderSnapshot s;
};
std::string record_metrics(const std::vector<RecordSample>& recordings);

}  // namespace ringfire::cli
