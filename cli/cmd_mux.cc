// cmd_mux.cc — `ringfire mux-consume` and `ringfire mux-produce`: the
// stream multiplexer end to end between two processes (a Node each), as an
// inference server uses it: the consumer makes N anchors and writes their
// handles to a file; the producer attaches to every one and, step by step
// (one decode step: one token for every stream, then flush_batch), sends T
// tokens per stream and finishes them. The consumer checks every stream
// record by record (its tokens in order, exactly T, then one end) and
// reports per-token latency, time to first token, batching and CPU per
// token. Exit 3 when a check fails.
#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/daemon.h"
#include "cli/dpdk_options.h"
#include "cli/json_text.h"
#include "cli/metrics_server.h"
#include "cli/session_report.h"
#include "dataplane/kernel_udp.h"
#include "node/node.h"
#include "telemetry/counters_file.h"

namespace ringfire::cli {
namespace {

std::vector<OptionSpec> node_options(std::vector<OptionSpec> o) {
  o.push_back({"streams", "N", "streams (anchors) (default 100)"});
  o.push_back({"tokens", "T", "tokens per stream (default 100)"});
  o.push_back({"size", "BYTES", "bytes per token, 16 to 1024 (default 16): the stream's index u32 LE (its handle's line in "
                                   "HANDLES_FILE, from 0), the token's u32 LE (from 0), the send time u64 LE (CLOCK_MONOTONIC ns), "
                                   "zeros (PROTOCOL.md §2.4)"});
  o.push_back({"credit", "C", "frames a slot may have in flight (default 256)"});
  o.push_back({"flush", "POLICY", "auto, manual (flush_batch after each step) or linger:US (default manual)"});
  o.push_back({"timeout", "S", "give up after S seconds (default 60)"});
  o.push_back({"json", nullptr, "the report as one JSON object"});
  o.push_back({"psk-file", "FILE", "authenticate every channel with this pre-shared key (>= 32 bytes, mode 600)"});
  o.push_back({"metrics", "ADDR:PORT", "serve the node's Prometheus metrics at http://ADDR:PORT/metrics"});
  o.push_back({"iface", "IF", "with --backend dpdk and --pmd: the interface the vdev is made on"});
  o.push_back({"silent-peer-ms", "MS", "end a connection whose peer went silent (no FIN) within about MS (default 6000; 0: TCP's defaults)"});
  o.push_back({"idle", "MODE", "the data plane's workers when idle: spin (a dedicated core), yield, backoff (default) or hot (yield for 50 ms after the last work, then back off: no wake-up on a streaming path)"});
  o.push_back({"no-mux", nullptr, "turn the mux off: every stream its own TCP connection (the per-stream path)"});
  o.push_back({"no-tickets", nullptr, "mux-consume: handles without tickets (the short form, for producers older than "
                                      "tickets: every stream then opens by ATTACH, a round trip)"});
  o.push_back({"config", "FILE", "run inside FILE's engine (`ringfire run FILE`: its ports, serves, mirrors, ctl and "
                                 "/metrics) on its [[node]] listening at CONTROL_ADDR:PORT; the node options are the config's"});
  return with_backend_options(std::move(o), "the data plane's IPv4 address (default: the control address)");
}

const CommandSpec kConsume = {
    "mux-consume", "CONTROL_ADDR:PORT HANDLES_FILE", 2, 2,
    "Make --streams anchors on a node listening at CONTROL_ADDR:PORT, write their handles\n"
    "to HANDLES_FILE (one handle a line), and check what `ringfire mux-produce` sends: --tokens\n"
    "tokens per stream, in order, then one end (a token's layout: --size). Reports latency,\n"
    "time to first token and batching.",
    node_options({{"slow-stream", "MS", "read stream 0 at most once every MS milliseconds (a slow client: "
                                        "the report says how many others finished before it)"}})};

const CommandSpec kProduce = {
    "mux-produce", "CONTROL_ADDR:PORT PEER_ADDR:PORT HANDLES_FILE [PEER_ADDR:PORT HANDLES_FILE ...]", 3, 33,
    "Attach to every handle in each HANDLES_FILE at the node PEER_ADDR:PORT before it (up to\n"
    "16 frontends) and send --tokens tokens to each, one decode step at a time (a token for\n"
    "every stream, then flush_batch), paced to --rate steps per second; then finish every stream.",
    node_options({{"rate", "STEPS", "decode steps per second (default 0: as fast as credit allows)"}})};

struct Common {
  node::NodeOptions node;
  std::optional<net::Endpoint> metrics;
  uint64_t streams = 100, tokens = 100, size = 16, timeout_s = 60;
  bool json = false;
};

absl::StatusOr<Common> parse_common(const Args& args, const std::string& control) {
  Common c;
  if (args.has("config")) {
    // The node is the config's: an option that would shape it here is refused, not ignored.
    for (const char* o : {"psk-file", "credit", "flush", "no-mux", "no-tickets", "metrics", "idle", "silent-peer-ms", "backend", "eal",
                          "pmd", "dpdk-ip", "neighbor", "exception-tap", "iface"}) {
      if (args.has(o)) {
        return absl::InvalidArgumentError(absl::StrCat("--", o, " with --config: the [[node]] (and its [[port]]) in the "
                                                       "config say that; set it there"));
      }
    }
  }
  auto at = net::parse_endpoint(control);
  if (!at.ok()) return at.status();
  c.node.control = *at;
  c.node.instance_id = absl::StrCat("rf-", getpid(), "-", control);
  c.node.mux.enabled = !args.has("no-mux");
  c.node.tickets = !args.has("no-tickets");
  // Bounds checked before anything is made (a 2^32 + 1 cut to 32 bits
  // made one stream; taken whole it made 4 Gi anchors: helper-46).
  for (auto [name, dst, lo, hi] :
       {std::tuple{"streams", &c.streams, uint64_t{1}, uint64_t{1} << 24}, std::tuple{"tokens", &c.tokens, uint64_t{1}, uint64_t{UINT32_MAX}},
        std::tuple{"size", &c.size, uint64_t{16}, uint64_t{1024}}, std::tuple{"timeout", &c.timeout_s, uint64_t{1}, uint64_t{86'400}}}) {
    auto v = args.count(name, *dst);
    if (!v.ok()) return v.status();
    if (*v < lo || *v > hi) return absl::InvalidArgumentError(absl::StrCat("--", name, " must be ", lo, " to ", hi));
    *dst = *v;
  }
  // What the run holds: each token's latency (8 bytes) for the report, a
  // token buffer a stream, and ~256 bytes a stream of its own (anchor,
  // maps, counters); at most 1 GiB (reviews helper-47, helper-48: the
  // bounds alone let 16 Gi of buffers through).
  if (c.streams * (c.tokens * 8 + c.size + 256) > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--streams ", c.streams, " × (--tokens ", c.tokens, " × 8 + --size ", c.size,
                                                   " + 256) bytes is over 1 GiB (each token's latency is kept for the "
                                                   "report): fewer streams, tokens or bytes a token"));
  }
  auto silent = args.count("silent-peer-ms", c.node.silent_peer_ms);
  if (!silent.ok()) return silent.status();
  if (*silent > 3'600'000) return absl::InvalidArgumentError("--silent-peer-ms must be at most 3600000 (an hour)");
  c.node.silent_peer_ms = static_cast<uint32_t>(*silent);
  auto credit = args.count("credit", 256);
  if (!credit.ok()) return credit.status();
  if (*credit < 1 || *credit > 65'535) return absl::InvalidArgumentError("--credit must be 1 to 65535 (frames in flight a stream)");
  c.node.mux.initial_credit = static_cast<uint32_t>(*credit);
  c.node.mux.max_streams_per_peer = static_cast<uint32_t>(std::max<uint64_t>(c.streams, 4096));
  auto flush = parse_flush(args.str("flush", "manual"));
  if (!flush.ok()) return flush.status();
  c.node.mux.flush = *flush;
  if (absl::Status st = mux::validate(c.node.mux); !st.ok()) return st;
  c.json = args.has("json");
  if (args.has("psk-file")) {
    auto k = net::load_psk(args.str("psk-file"));
    if (!k.ok()) return k.status();
    c.node.psk = std::move(*k);
  }
  if (args.has("metrics")) {
    auto m = metrics_address(args.str("metrics"));
    if (!m.ok()) return m.status();
    c.metrics = *m;
  }
  if (args.has("config")) return c;  // the daemon starts the config's ports (and the EAL, if they need it)
  // The kernel backend's node binds its control address: an --iface there
  // was ignored (helper-46).
  if (args.has("iface") && args.str("backend", "kernel") == "kernel") {
    return absl::InvalidArgumentError("--iface needs --backend dpdk (the interface its vdev is made on); the kernel "
                                      "backend uses the interface of CONTROL_ADDR");
  }
  auto backend = start_backend(args);
  if (!backend.ok()) return backend.status();
  engine::PortSpec& ps = c.node.port;
  ps.name = "data";
  auto idle = parse_idle(args.str("idle", "backoff"));
  if (!idle.ok()) return idle.status();
  ps.idle = *idle;
  if (backend->dpdk) {
    ps.backend = engine::PortSpec::Backend::kDpdk;
    ps.dpdk_port_id = 0;
    ps.ip = backend->dpdk_ip;
    ps.neighbors = backend->neighbors;
  }
  return c;
}

// Token layout: stream u32 | token u32 | sent_ns u64 | filler.
void put_token(std::vector<std::byte>& b, uint32_t stream, uint32_t token, uint64_t sent) {
  std::memcpy(b.data(), &stream, 4);
  std::memcpy(b.data() + 4, &token, 4);
  std::memcpy(b.data() + 8, &sent, 8);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// peak_rss_kib: the process's peak resident set (getrusage).
uint64_t peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss);
}

// thread_cpu_ns: each thread's CPU so far (/proc/self/task/*/schedstat's
// first field), summed by thread name (`rf-node`, `rf-worker`, the
// command's own). Threads that ended before the call are not in it.
std::map<std::string, uint64_t> thread_cpu_ns() {
  std::map<std::string, uint64_t> by_name;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return by_name;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string dir = absl::StrCat("/proc/self/task/", e->d_name);
    std::string name;
    uint64_t ns = 0;
    std::ifstream comm(dir + "/comm");
    std::ifstream stat(dir + "/schedstat");
    if (std::getline(comm, name) && (stat >> ns)) by_name[name] += ns;
  }
  closedir(d);
  return by_name;
}

// cpu_by_thread: ns per item of each thread name between two thread_cpu_ns() calls.
nlohmann::json cpu_by_thread(const std::map<std::string, uint64_t>& before, const std::map<std::string, uint64_t>& after,
                             uint64_t items) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, ns] : after) {
    // A name whose total went down lost a thread between the two looks:
    // what it spent is not known (0), never the whole of the later total.
    const auto b = before.find(name);
    const uint64_t was = b != before.end() ? b->second : 0;
    const uint64_t spent = ns >= was ? ns - was : 0;
    j[name] = items ? static_cast<double>(spent) / static_cast<double>(items) : 0;
  }
  return j;
}

// open_fds: descriptors the process holds now.
uint64_t open_fds() {
  uint64_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n > 3 ? n - 3 : 0;  // ".", "..", and the one opendir holds
}

double percentile(std::vector<uint64_t>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]) / 1000.0;
}

// Metrics: the node's /metrics, answered from the command's own loop.
struct Metrics {
  std::unique_ptr<MetricsServer> server;
  void poll(node::Node& n) {
    if (server) server->poll(now_ns(), [&] { return node_metrics(n.stats(), n.data_path()); });
  }
};

absl::StatusOr<Metrics> start_node_metrics(const Common& c, const char* command) {
  Metrics m;
  if (!c.metrics) return m;
  auto s = MetricsServer::listen(*c.metrics);
  if (!s.ok()) return s.status();
  std::printf("%s: metrics on http://%s/metrics\n", command, net::to_string((*s)->address()).c_str());
  m.server = std::move(*s);
  return m;
}

// Target: one stream a producer attaches to: its frontend, its handle,
// and its index in that frontend's file (what the consumer checks).
struct Target {
  net::Endpoint peer;
  mux::AnchorHandle handle;
  uint32_t index;
};

// in_daemon runs `run` on the [[node]] of --config's engine that listens at
// the command's CONTROL_ADDR:PORT, on a thread of its own, while this
// thread is the daemon's conductor (its ports, serves, mirrors and nodes:
// `ringfire run CONFIG`, ctl and /metrics included). The daemon stops
// when `run` returns; its exit status is run's.
int in_daemon(const Args& args, const Common& c, const std::function<int(node::Node&)>& run) {
  node::Node* mine = nullptr;
  std::atomic<bool> done{false};
  int rc = 1;
  std::thread harness;
  DaemonHooks hooks;
  hooks.node_up = [&](const std::string&, node::Node& n) {
    if (n.control_address().ip == c.node.control.ip && n.control_address().port == c.node.control.port) mine = &n;
  };
  hooks.started = [&](engine::Engine&) -> absl::Status {
    if (mine == nullptr) {
      return absl::NotFoundError(absl::StrCat(args.str("config"), ": no [[node]] listens at ",
                                              net::to_string(c.node.control), ": give its listen address"));
    }
    harness = std::thread([&] {
      rc = run(*mine);
      done.store(true);
    });
    return absl::OkStatus();
  };
  hooks.tick = [&](engine::Engine&, uint64_t) { return !done.load(); };
  hooks.stopping = [&](engine::Engine& eng) {
    // A stop signal ends the harness's loop too (stop_requested), but what it
    // does last (finish, drain) needs the conductor: it keeps turning until
    // the harness is done.
    while (harness.joinable() && !done.load()) eng.run_once(10'000'000);
    if (harness.joinable()) harness.join();
  };
  const int daemon_rc = run_daemon(args.str("config"), false, hooks);
  if (harness.joinable()) harness.join();
  std::fflush(stdout);
  return daemon_rc != 0 ? daemon_rc : rc;
}

// Run: a command's harness on a node, with the node's /metrics and counters
// file when the node is the command's own (a daemon has its own of both).
using Run = std::function<int(node::Node&, Metrics*, NodeReport*)>;

// run_on_node: `run` on the config's node (--config, in_daemon), or on a
// node of the command's own with its /metrics and its counters file
// (`role` names it in `ringfire top`).
int run_on_node(const char* command, const Args& args, const Common& c, const char* role, NodeReport::Records records,
                const Run& run) {
  if (args.has("config")) return in_daemon(args, c, [&](node::Node& n) { return run(n, nullptr, nullptr); });
  auto n = node::Node::create(c.node);
  if (!n.ok()) return fail(command, n.status());
  auto metrics = start_node_metrics(c, command);
  if (!metrics.ok()) return fail(command, metrics.status());
  auto counters = NodeReport::start(**n, role, "/dev/shm", records);
  if (!counters.ok()) return fail(command, counters.status());
  return run(**n, &*metrics, counters->get());
}

}  // namespace

// consume: the consumer's run on node `n` (its own, or a daemon's): the
// anchors, their handles in HANDLES_FILE, every stream checked, the report.
static int consume(node::Node& n, const Common& c, const Args& args, uint64_t slow_ms, Metrics* metrics, NodeReport* counters) {
  std::vector<std::unique_ptr<node::Anchor>> anchors;
  const std::string file = args.positionals()[1];
  {
    std::ofstream f(file + ".tmp");
    for (uint64_t i = 0; i < c.streams; ++i) {
      anchors.push_back(n.create_anchor(node::AnchorKind::kSingleSender));
      f << anchors.back()->handle().to_string() << "\n";
    }
    if (!f.good()) return fail("mux-consume", absl::InternalError(absl::StrCat("cannot write ", file)));
  }
  std::rename((file + ".tmp").c_str(), file.c_str());  // whole, or not there
  std::printf("mux-consume: %lu anchors on %s (data path %s); handles in %s\n", static_cast<unsigned long>(c.streams),
              net::to_string(n.control_address()).c_str(), n.data_path().c_str(), file.c_str());
  std::fflush(stdout);

  std::vector<uint64_t> next(c.streams, 0), latency, ttft;
  latency.reserve(c.streams * c.tokens);
  uint64_t finished = 0, dropped = 0, wrong = 0, items = 0, first_ns = 0, last_ns = 0;
  uint64_t first_sent_ns = UINT64_MAX;  // the earliest send time a token carried (the hosts share the clock)
  std::vector<bool> ended(c.streams, false);
  // CPU from here: the attaches (a connection or an ATTACH each) and a
  // channel's set-up count, as they do for a server whose requests each
  // attach; cpu_from_first_token leaves out what came before the first
  // token (the ring's warming too when it was done by then: it begins
  // 100 ms after the channel).
  const double cpu0 = cpu_seconds();
  double cpu_first = 0;  // at the first token
  const uint64_t deadline = now_ns() + c.timeout_s * 1'000'000'000;
  uint64_t live = c.streams;
  uint64_t next_tick_ns = 0, peak_fds = open_fds();
  // One reader for all anchors, as an API server's event loop is: it
  // waits on the node's descriptor and takes every ready item of every
  // anchor in one poll() (the cost is the items ready, not the anchors).
  std::unordered_map<uint64_t, uint64_t> index_of;  // anchor id -> stream
  for (uint64_t i = 0; i < c.streams; ++i) index_of[anchors[i]->id()] = i;
  uint64_t slow_next_ns = 0, finished_before_slow = 0;
  std::deque<node::Item> slow_items;  // stream 0's, when it is read slowly: one every --slow-stream ms
  std::vector<node::Polled> polled;
  std::vector<std::byte> bytes;
  // A step's items, their pages touched here (a server's loop keeps its
  // buffers too): not faulted in by the poll that reads the first tokens.
  polled.resize(c.streams);
  polled.clear();
  bytes.resize(c.streams * c.size);
  bytes.clear();
  // take: one item of stream i (its bytes at `data`); `timed`: its latency counts.
  auto take = [&](uint64_t i, node::Item::Kind kind, proto::ConstBytes data, uint64_t now, bool timed) {
    if (kind != node::Item::Kind::kData) {
      ended[i] = true;
      --live;
      (kind == node::Item::Kind::kFinished ? finished : dropped) += 1;
      if (slow_ms != 0 && i != 0 && !ended[0]) ++finished_before_slow;
      return;
    }
    uint32_t stream, token;
    uint64_t sent;
    if (data.size() != c.size) {
      ++wrong;
      return;
    }
    std::memcpy(&stream, data.data(), 4);
    std::memcpy(&token, data.data() + 4, 4);
    std::memcpy(&sent, data.data() + 8, 8);
    if (stream != i || token != next[i]) ++wrong;
    next[i] = token + 1;
    ++items;
    if (first_ns == 0) {
      first_ns = now;
      cpu_first = cpu_seconds();
    }
    first_sent_ns = std::min(first_sent_ns, sent);
    last_ns = now;
    if (!timed) return;  // a slow reader's latency is its own, not the path's (left out)
    latency.push_back(now > sent ? now - sent : 0);
    if (token == 0) ttft.push_back(now > sent ? now - sent : 0);
  };
  while (live != 0 && now_ns() < deadline && !stop_requested()) {
    polled.clear();
    bytes.clear();
    const size_t got = n.poll(&polled, &bytes, 65536);
    const uint64_t now = now_ns();
    for (const node::Polled& p : polled) {
      const auto it = index_of.find(p.anchor);
      if (it == index_of.end()) continue;
      const uint64_t i = it->second;
      const proto::ConstBytes data(bytes.data() + p.offset, p.len);
      if (i == 0 && slow_ms != 0) {  // held back, and the anchor paused: its credit stops
        node::Item held{p.kind, p.session, std::vector<std::byte>(data.begin(), data.end())};
        slow_items.push_back(std::move(held));
        anchors[0]->pause();
        continue;
      }
      take(i, p.kind, data, now, true);
    }
    if (!slow_items.empty() && now >= slow_next_ns) {
      const node::Item& it = slow_items.front();
      take(0, it.kind, it.bytes, now, false);
      slow_items.pop_front();
      slow_next_ns = now + slow_ms * 1'000'000;
      if (slow_items.empty() && !ended[0]) anchors[0]->resume();
    }
    if (got == 0) {
      uint64_t wait_ns = next_tick_ns > now ? next_tick_ns - now : 0;
      if (!slow_items.empty()) wait_ns = std::min(wait_ns, slow_next_ns > now ? slow_next_ns - now : 0);
      n.wait(wait_ns);
    }
    if (now >= next_tick_ns) {  // the counters file and /metrics, ten times a second
      next_tick_ns = now + 100'000'000;
      peak_fds = std::max(peak_fds, open_fds());  // the peak, not the end's
      if (metrics != nullptr) metrics->poll(n);
      if (counters != nullptr) counters->tick(n, now);
    }
  }
  const double cpu = cpu_seconds() - cpu0;
  uint64_t short_streams = 0;
  for (uint64_t i = 0; i < c.streams; ++i) short_streams += next[i] != c.tokens;
  const node::NodeStats s = n.stats();
  const double secs = static_cast<double>(last_ns - first_ns) / 1e9;
  // From the first send to the last arrival: what the path moved in the
  // time it took. (From the first arrival only, a run whose first token
  // waited — its tokens then arrive in one burst — read 3× faster.)
  const double sent_secs = first_sent_ns < last_ns ? static_cast<double>(last_ns - first_sent_ns) / 1e9 : 0;
  nlohmann::json j = {
      {"streams", c.streams},
      {"tokens", items},
      {"expected_tokens", c.streams * c.tokens},
      {"finished", finished},
      {"dropped", dropped},
      {"out_of_order", wrong},
      {"short_streams", short_streams},
      {"tokens_per_s", sent_secs > 0 ? static_cast<double>(items) / sent_secs : 0},
      {"tokens_per_s_from_first_arrival", secs > 0 ? static_cast<double>(items) / secs : 0},
      {"latency_us", {{"p50", percentile(latency, 0.5)}, {"p99", percentile(latency, 0.99)}, {"p999", percentile(latency, 0.999)}}},
      {"ttft_us", {{"p50", percentile(ttft, 0.5)}, {"p99", percentile(ttft, 0.99)}}},
      {"batches", s.in.batches},
      {"records_per_batch", s.in.batches ? static_cast<double>(s.in.records) / static_cast<double>(s.in.batches) : 0},
      {"credit_returned", s.in.credit_returned},
      {"reader_stall", s.in.reader_stall},
      {"protocol_errors", s.in.protocol_errors},
      {"watchdog_dead", s.in.watchdog_dead},
      {"unknown_slot", s.in.unknown_slot},
      {"unknown_anchor", s.in.unknown_anchor},
      {"attaches_answered", s.attaches_answered},
      {"tickets_claimed", s.tickets_claimed},
      {"tickets_expired", s.tickets_expired},
      {"batch_gaps", s.in.batch_gaps},
      {"malformed", s.in.malformed},
      {"generation_mismatch", s.in.generation_mismatch},
      {"channel_failures", s.channel_failures},
      {"applied_by_readers", s.applied_by_readers},
      {"applied_by_node", s.applied_by_node},
      {"unauthenticated", s.unauthenticated},
      {"cpu_ns_per_token", items ? cpu * 1e9 / static_cast<double>(items) : 0},
      {"cpu_from_first_token_ns_per_token", items ? (cpu0 + cpu - cpu_first) * 1e9 / static_cast<double>(items) : 0},
      {"data_path", n.data_path()},
      {"finished_before_slow", finished_before_slow},
      {"per_stream_streams", s.tcp_streams_in},
      {"peak_rss_kib", peak_rss_kib()},
      {"fds", std::max(peak_fds, open_fds())},
      {"out_of_fds", s.out_of_fds},
      {"channel", {{"datagrams", s.channel_datagrams}, {"tcp_frames", s.channel_tcp_frames}, {"tcp_records", s.channel_tcp_records}, {"naks", s.channel_naks}, {"held", s.channel_held}}},
  };
  if (c.json) {
    std::printf("%s\n", json_text(j).c_str());
  } else {
    std::printf("mux-consume: %s\n", json_text(j, 1).c_str());
  }
  std::fflush(stdout);
  anchors.clear();
  const bool ok = items == c.streams * c.tokens && finished == c.streams && wrong == 0 && short_streams == 0;
  return ok ? 0 : 3;
}


int cmd_mux_consume(int argc, char** argv, int first) {
  auto args = Args::parse(kConsume, argc, argv, first);
  if (!args.ok()) return fail("mux-consume", args.status());
  if (args->help()) {
    std::fputs(usage(kConsume).c_str(), stdout);
    return 0;
  }
  auto c = parse_common(*args, args->positionals()[0]);
  if (!c.ok()) return fail("mux-consume", c.status());
  auto slow_ms = args->count("slow-stream", 0);
  if (!slow_ms.ok()) return fail("mux-consume", slow_ms.status());
  install_stop_handlers();
  return run_on_node("mux-consume", *args, *c, "consumer", NodeReport::Records::kReceived,
                     [&](node::Node& n, Metrics* m, NodeReport* r) { return consume(n, *c, *args, *slow_ms, m, r); });
}

// produce: the producer's run on node `n`: attach to every target, then the decode loop and the report.
static int produce(node::Node& n, const Common& c, const std::vector<Target>& targets, size_t frontends, const std::string& first_peer,
            uint64_t rate, Metrics* metrics, NodeReport* counters) {
  std::vector<std::unique_ptr<node::Sender>> senders;
  const uint64_t warmed_before = n.stats().rings_warmed;  // a daemon's node may have warmed others before
  // Each frontend's handles at once (a run of targets with one peer):
  // every request sent before any answer is awaited.
  for (size_t from = 0; from < targets.size();) {
    size_t to = from;
    std::vector<mux::AnchorHandle> handles;
    for (; to < targets.size() && targets[to].peer == targets[from].peer; ++to) handles.push_back(targets[to].handle);
    for (auto& s : n.attach_many(handles, targets[from].peer)) {
      if (!s.ok()) return fail("mux-produce", s.status());
      senders.push_back(std::move(*s));
    }
    from = to;
  }
  const uint64_t fds_attached = open_fds();
  std::printf("mux-produce: %zu streams attached to %zu frontend(s), first %s (data path %s)\n", senders.size(),
              frontends, first_peer.c_str(), n.data_path().c_str());
  std::fflush(stdout);
  // The clock starts once the channels' rings are warm (RingFile::warm;
  // ~12 ms a 12 MiB ring on this VM, once): their first lap is not a
  // decode step's cost. (A per-stream run has no rings: it starts at once;
  // so does a run whose consumer answered per-stream, after the 3 s here.)
  std::set<std::string> peers;
  for (const Target& t : targets) peers.insert(net::to_string(t.peer));
  const auto warm = [&] { return n.stats().rings_warmed - warmed_before >= peers.size(); };
  for (int i = 0; i < 300 && c.node.mux.enabled && !warm(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool rings_warm = warm();  // reported: false if the clock started without
  const bool manual = n.flush_policy().kind == mux::FlushPolicy::Kind::kManual;  // the node's (a config's, with --config)
  std::vector<std::byte> tok(c.size);
  uint64_t full_waits = 0, closed = 0;
  std::vector<uint64_t> step_ns;  // one decode step's sends and flush
  uint64_t flushes = 0;           // flush_batch() calls, one per decode step (Manual)
  const uint64_t start = now_ns();
  const double cpu0 = cpu_seconds();
  const auto threads0 = thread_cpu_ns();
  const node::NodeStats before = n.stats();  // the decode loop's own bursts and datagrams (attach's OpenSlots apart)
  node::NodeStats loop_end = before;
  for (uint64_t t = 0; t < c.tokens && !stop_requested(); ++t) {
    if (rate != 0) {  // pace the decode steps
      // One sleep to the step's time (a poll every few microseconds would
      // be the harness's CPU, charged to every token of either path).
      const uint64_t due = start + t * 1'000'000'000 / rate;
      if (now_ns() < due) {
        const timespec at{static_cast<time_t>(due / 1'000'000'000), static_cast<long>(due % 1'000'000'000)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR && !stop_requested()) {
        }
      }
    }
    const uint64_t step_start = now_ns();
    for (size_t i = 0; i < senders.size(); ++i) {
      put_token(tok, targets[i].index, static_cast<uint32_t>(t), now_ns());
      for (;;) {
        const mux::SendStatus st = senders[i]->send({tok.data(), tok.size()});
        if (st == mux::SendStatus::kSent) break;
        if (st != mux::SendStatus::kFull) {
          ++closed;
          break;
        }
        ++full_waits;
        if (manual) n.flush_batch();  // what is staged must go for credit to come back
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    if (manual) {
      n.flush_batch();
      ++flushes;
    }
    step_ns.push_back(now_ns() - step_start);
    if (metrics != nullptr) metrics->poll(n);
    if (counters != nullptr) counters->tick(n, now_ns());
  }
  // The serve sends a flush's last burst within microseconds: let it, then look.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  loop_end = n.stats();
  for (auto& s : senders) s->finish();
  if (manual) n.flush_batch();
  const double cpu = cpu_seconds() - cpu0;
  const auto threads1 = thread_cpu_ns();
  // Everything sent must be applied by the peer before the node goes.
  if (!n.drain(c.timeout_s * 1'000'000'000)) std::printf("mux-produce: not drained within --timeout\n");
  const node::NodeStats s = n.stats();
  const uint64_t sent = s.out.records + s.tcp_records_out;  // the mux's and the per-stream path's
  nlohmann::json j = {{"streams", senders.size()},
                      {"records", sent},
                      {"batches", s.out.batches},
                      {"records_per_batch", s.out.batches ? static_cast<double>(sent) / static_cast<double>(s.out.batches) : 0},
                      {"full_waits", full_waits},
                      {"datagrams", s.channel_datagrams_out},
                      {"tx_bursts", s.channel_tx_bursts},
                      // Over the decode loop only (attach's OpenSlots and the terminals apart):
                      {"loop_tokens_per_datagram", loop_end.channel_datagrams_out > before.channel_datagrams_out
                           ? static_cast<double>(loop_end.out.records - before.out.records) /
                                 static_cast<double>(loop_end.channel_datagrams_out - before.channel_datagrams_out) : 0},
                      {"loop_tx_bursts_per_flush", flushes ? static_cast<double>(loop_end.channel_tx_bursts - before.channel_tx_bursts) /
                                                                 static_cast<double>(flushes) : 0},
                      {"records_per_flush", flushes ? static_cast<double>(sent) / static_cast<double>(flushes) : 0},
                      {"peak_rss_kib", peak_rss_kib()},
                      {"fds", fds_attached},
                      {"step_us", {{"p50", percentile(step_ns, 0.5)}, {"p99", percentile(step_ns, 0.99)}}},
                      {"closed", closed},
                      {"credit_exhausted", s.out.credit_exhausted},
                      {"cpu_ns_per_token", sent ? cpu * 1e9 / static_cast<double>(sent) : 0},
                      {"cpu_ns_per_token_by_thread", cpu_by_thread(threads0, threads1, sent)},
                      {"rings_warm", rings_warm},
                      {"seconds", static_cast<double>(now_ns() - start) / 1e9}};
  std::printf(c.json ? "%s\n" : "mux-produce: %s\n", json_text(j).c_str());
  std::fflush(stdout);
  senders.clear();
  return closed == 0 ? 0 : 3;
}


int cmd_mux_produce(int argc, char** argv, int first) {
  auto args = Args::parse(kProduce, argc, argv, first);
  if (!args.ok()) return fail("mux-produce", args.status());
  if (args->help()) {
    std::fputs(usage(kProduce).c_str(), stdout);
    return 0;
  }
  auto c = parse_common(*args, args->positionals()[0]);
  if (!c.ok()) return fail("mux-produce", c.status());
  auto rate = args->count("rate", 0);
  if (!rate.ok()) return fail("mux-produce", rate.status());
  const std::vector<std::string>& pos = args->positionals();
  if (pos.size() % 2 != 1) {
    return fail("mux-produce", absl::InvalidArgumentError("give each PEER_ADDR:PORT its HANDLES_FILE"));
  }
  std::vector<Target> targets;
  for (size_t k = 1; k + 1 < pos.size(); k += 2) {
    auto peer = net::parse_endpoint(pos[k]);
    if (!peer.ok()) return fail("mux-produce", peer.status());
    std::ifstream f(pos[k + 1]);
    uint32_t index = 0;
    for (std::string line; std::getline(f, line);) {
      auto h = mux::AnchorHandle::parse(line);
      if (!h) return fail("mux-produce", absl::InvalidArgumentError(mux::not_a_handle(line)));
      targets.push_back(Target{*peer, *h, index++});
    }
    if (index == 0) return fail("mux-produce", absl::InvalidArgumentError(absl::StrCat("no handles in ", pos[k + 1])));
  }
  install_stop_handlers();
  return run_on_node("mux-produce", *args, *c, "producer", NodeReport::Records::kSent,
                     [&](node::Node& n, Metrics* m, NodeReport* r) {
                       return produce(n, *c, targets, pos.size() / 2, pos[1], *rate, m, r);
                     });
}

}  // namespace ringfire::cli
