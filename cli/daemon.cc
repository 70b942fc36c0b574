// daemon.cc — the daemon behind `ringfire run CONFIG`: one engine for the
// whole config — its ports (each with its worker), and every serve and
// mirror session on them — driven by the calling thread as the conductor; a
// control socket (`ringfire ctl`) lists ports and sessions with their
// counters and adds or removes a session while the others stream. Every
// config error is found before anything starts, and names the file, the
// line and the key. A program that embeds the engine (its own tasks on a
// port's worker: perf/engine_echo) runs the same daemon through its hooks.
#include "cli/daemon.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/common.h"
#include "cli/conductor_loop.h"
#include "cli/config_file.h"
#include "cli/ctl_server.h"
#include "cli/dpdk_telemetry.h"
#include "cli/json_text.h"
#include "cli/metrics_server.h"
#include "cli/record_setup.h"
#include "cli/run_config.h"
#include "cli/service_notify.h"
#include "cli/session_report.h"
#include "engine/engine.h"
#include "engine/ports.h"
#include "ring/map_guard.h"

namespace ringfire::cli {
namespace {

using json = nlohmann::json;

// Daemon: the running engine, its reports and its control socket's verbs.
class Daemon {
 public:
  Daemon(const DaemonOptions& d, std::vector<std::string> ports)
      : d_(d), port_names_(std::move(ports)), engine_([](const std::string& session, const std::string& line) {
          std::printf("%s: %s\n", session.c_str(), line.c_str());
          std::fflush(stdout);
        }) {}

  ~Daemon() {
    for (auto& r : recordings_) end_recording(*r);  // a thread left running would end the process
  }

  engine::Engine& engine() { return engine_; }

  absl::Status add(SessionSpec s) {
    const std::string name = s.serve ? s.serve->name : s.mirror->name;  // a copy: the spec is moved
    for (const SessionSpec& p : pending_) {
      if (p.serve->name == name) return absl::AlreadyExistsError(absl::StrCat("a session named ", name, " exists already"));
    }
    // A record's name too: remove, and a cut ring's end, find sessions by
    // name, a record's first (review helper-43).
    const bool a_record = std::any_of(recordings_.begin(), recordings_.end(), [&](const auto& r) { return r->name == name; }) ||
                          std::any_of(pending_records_.begin(), pending_records_.end(), [&](const RecordSpec& r) { return r.name == name; });
    if (a_record) return absl::AlreadyExistsError(absl::StrCat("a record named ", name, " exists already"));
    if (s.serve && !s.follows.empty() && access(s.serve->ring.c_str(), F_OK) != 0) {
      std::printf("run: %s waits for ring %s (mirror %s creates it)\n", s.serve->name.c_str(),
                  s.serve->ring.c_str(), s.follows.c_str());
      pending_.push_back(std::move(s));
      return absl::OkStatus();
    }
    if (s.serve) {
      auto placed = engine_.add_serve(std::move(*s.serve));
      if (!placed.ok()) return absl::Status(placed.status().code(), absl::StrCat(name, ": ", placed.status().message()));
      auto r = ServeReport::start(**placed, name, d_.quiet, d_.counters_dir, name);
      if (!r.ok()) return r.status();
      serve_reports_[name] = std::move(*r);
      return absl::OkStatus();
    }
    auto placed = engine_.add_mirror(std::move(*s.mirror));
    if (!placed.ok()) return absl::Status(placed.status().code(), absl::StrCat(name, ": ", placed.status().message()));
    auto r = MirrorReport::start(**placed, name, d_.quiet, d_.counters_dir, name);
    if (!r.ok()) return r.status();
    mirror_reports_[name] = std::move(*r);
    return absl::OkStatus();
  }

  // add_node starts a [[node]] on the engine (this is its conductor).
  absl::Status add_node(NodeSpec spec) {
    spec.options.host = &engine_;
    auto n = node::Node::create(spec.options);
    if (!n.ok()) return absl::Status(n.status().code(), absl::StrCat("node ", spec.name, ": ", n.status().message()));
    std::printf("run: node %s on %s, channels on port %s (%s)\n", spec.name.c_str(),
                net::to_string((*n)->control_address()).c_str(), spec.options.port.name.c_str(),
                (*n)->data_path().c_str());
    auto r = NodeReport::start(**n, absl::StrCat("node ", spec.name), d_.counters_dir, NodeReport::Records::kBoth);
    if (!r.ok()) return r.status();
    nodes_.push_back(Node{spec.name, spec.options.port.name, std::move(*n), std::move(*r)});
    return absl::OkStatus();
  }
  // add_record starts a [[record]] on a thread of its own; a ring that a
  // mirror of this config creates later waits for it, as a hub's serve does.
  absl::Status add_record(RecordSpec spec) {
    if (access(ring::ring_path(spec.ring).c_str(), F_OK) != 0) {
      std::printf("run: record %s waits for ring %s\n", spec.name.c_str(), spec.ring.c_str());
      pending_records_.push_back(std::move(spec));
      return absl::OkStatus();
    }
    auto file = ring::RingFile::open(spec.ring);
    if (!file.ok()) return absl::Status(file.status().code(), absl::StrCat("record ", spec.name, ": ", file.status().message()));
    const std::string ring_path = file->path();
    ring::RingFile mapped = file->share();
    auto rec = archive::Recorder::open(std::move(*file), spec.options);
    if (!rec.ok()) return absl::Status(rec.status().code(), absl::StrCat("record ", spec.name, ": ", rec.status().message()));
    auto report = RecordReport::start(**rec, spec.name, d_.quiet, d_.counters_dir, spec.name, ring_path, spec.options.dir);
    if (!report.ok()) return report.status();
    const archive::RecoveryReport& rr = (*rec)->recovery();
    std::printf("run: record %s: %s into %s from sequence %llu%s\n", spec.name.c_str(), ring_path.c_str(),
                spec.options.dir.c_str(), static_cast<unsigned long long>((*rec)->snapshot().recorded_end),
                !rr.existed ? " (a new archive)" : rr.torn_bytes != 0 ? " (resumed; a torn tail cleared)" : " (resumed)");
    auto r = std::make_unique<Recording>();
    r->name = spec.name;
    r->ring = ring_path;
    r->recorder = std::move(*rec);
    r->mapped.emplace(std::move(mapped));
    r->report = std::move(*report);
    Recording* raw = r.get();
    // The recording's thread owns the recorder's reading side; this thread
    // (the conductor) reads only its snapshot. stop is the pair's flag.
    raw->thread = std::thread([raw] {
      pthread_setname_np(pthread_self(), "rf-record");
      raw->result = run_recording(
          *raw->recorder, [raw] { return raw->stop.load(std::memory_order_acquire); }, UINT64_MAX, UINT64_MAX, {});
    });
    recordings_.push_back(std::move(r));
    return absl::OkStatus();
  }

  // nodes: the config's nodes, by name (for the hooks).
  std::vector<std::pair<std::string, node::Node*>> nodes() const {
    std::vector<std::pair<std::string, node::Node*>> out;
    for (const Node& n : nodes_) out.emplace_back(n.name, n.node.get());
    return out;
  }

  absl::Status remove(const std::string& name) {
    // A node's channels are its own: they end with their peer.
    for (const auto& s : engine_.serves()) {
      if (s->spec.name == name && !s->spec.owner.empty()) return owned(name, s->spec.owner);
    }
    for (const auto& m : engine_.mirrors()) {
      if (m->spec.name == name && !m->spec.owner.empty()) return owned(name, m->spec.owner);
    }
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->serve->name == name) {
        pending_.erase(it);
        return absl::OkStatus();
      }
    }
    for (auto it = pending_records_.begin(); it != pending_records_.end(); ++it) {
      if (it->name == name) {
        pending_records_.erase(it);
        return absl::OkStatus();
      }
    }
    for (auto it = recordings_.begin(); it != recordings_.end(); ++it) {
      if ((*it)->name == name) {
        end_recording(**it);
        recordings_.erase(it);
        return absl::OkStatus();
      }
    }
    if (auto it = mirror_reports_.find(name); it != mirror_reports_.end()) {
      it->second->finish();
      mirror_reports_.erase(it);  // before the session it reads
    }
    serve_reports_.erase(name);
    return engine_.remove(name);
  }

  static absl::Status owned(const std::string& name, const std::string& owner) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is a channel of the stream mux node ", owner, ": it ends with its peer, not by ctl"));
  }

  void tick(uint64_t now) {
    for (Node& n : nodes_) n.report->tick(*n.node, now);
    // A hub's serve starts once its mirror has created the ring (the file
    // appears whole: the ring is built under another name and linked).
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (access(it->serve->ring.c_str(), F_OK) != 0) {
        ++it;
        continue;
      }
      SessionSpec s = std::move(*it);
      it = pending_.erase(it);
      const std::string name = s.serve->name;
      if (absl::Status st = add(std::move(s)); !st.ok()) {
        std::printf("run: %s: not started: %s\n", name.c_str(), std::string(st.message()).c_str());
      } else {
        std::printf("run: %s started (its ring is there)\n", name.c_str());
      }
      std::fflush(stdout);
    }
    for (auto it = pending_records_.begin(); it != pending_records_.end();) {
      if (access(ring::ring_path(it->ring).c_str(), F_OK) != 0) {
        ++it;
        continue;
      }
      RecordSpec s = std::move(*it);
      it = pending_records_.erase(it);
      const std::string name = s.name;
      if (absl::Status st = add_record(std::move(s)); !st.ok()) {
        std::printf("run: record %s: not started: %s\n", name.c_str(), std::string(st.message()).c_str());
      }
      std::fflush(stdout);
    }
    for (auto& [name, r] : serve_reports_) r->tick(now);
    for (auto& [name, r] : mirror_reports_) r->tick(now);
    for (auto& r : recordings_) r->report->tick(now);
  }

  // end_cut_sessions ends each session whose ring's file was cut under
  // its mapping (RingFile::cut_short: shorter now, or patched by the map
  // guard; what was cut reads as zeros, so it streams, mirrors or records
  // nothing true), saying which and what to do. A mux node's channels are
  // its own: said once, not ended (ctl cannot remove them).
  void end_cut_sessions() {
    std::vector<std::pair<std::string, std::string>> cut;  // session, what was found
    auto check = [&](const std::string& name, const ring::RingFile& f) {
      uint64_t now_bytes = 0;
      if (f.cut_short(&now_bytes)) {
        cut.emplace_back(name, absl::StrCat("its ring ", f.path(), " was cut under its ", f.mapped_bytes(),
                                            "-byte mapping (", now_bytes, " bytes now)"));
      }
    };
    for (const auto& s : engine_.serves()) check(s->spec.name, s->control->ring());
    for (const auto& m : engine_.mirrors()) {
      if (m->control->ring()) check(m->spec.name, *m->control->ring());
    }
    for (const auto& r : recordings_) {
      if (r->mapped) check(r->name, *r->mapped);
    }
    for (const auto& [name, why] : cut) {
      if (cut_said_.contains(name)) continue;
      absl::Status st = remove(name);
      if (st.ok()) {
        std::printf("run: %s ended: %s; make the ring again and add the session back (ctl add)\n", name.c_str(),
                    why.c_str());
      } else {
        cut_said_.insert(name);  // a channel: said once
        std::printf("run: %s: %s (%s)\n", name.c_str(), why.c_str(), std::string(st.message()).c_str());
      }
    }
    std::fflush(stdout);
  }

  void stop() {
    for (auto& r : recordings_) end_recording(*r);
    recordings_.clear();
    nodes_.clear();  // each node's channels leave the engine (on this thread: its conductor)
    for (auto& [name, r] : mirror_reports_) r->finish();
    mirror_reports_.clear();
    serve_reports_.clear();
    engine_.stop_all();
  }

  // handle answers one control-socket request.
  std::string handle(const std::string& request) {
    const size_t nl = request.find('\n');
    std::string verb = request.substr(0, nl);
    while (!verb.empty() && (verb.back() == '\r' || verb.back() == ' ')) verb.pop_back();
    const std::string body = nl == std::string::npos ? "" : request.substr(nl + 1);
    json out;
    absl::Status st;
    if (verb == "list") {
      out = list();
    } else if (verb.rfind("remove ", 0) == 0) {
      st = remove(verb.substr(7));
      if (st.ok()) std::printf("run: removed %s (ctl)\n", verb.substr(7).c_str());
    } else if (verb == "add") {
      st = add_from(body);
    } else {
      st = absl::InvalidArgumentError(absl::StrCat("unknown request '", verb.substr(0, 40),
                                                   "': list, remove NAME, or add followed by a [[serve]] or "
                                                   "[[mirror]] table"));
    }
    std::fflush(stdout);
    out["ok"] = st.ok();
    if (!st.ok()) out["error"] = std::string(st.message());
    return json_text(out, 2);
  }

 private:
  absl::Status add_from(const std::string& text) {
    auto f = parse_config_text(text, "ctl add");
    if (!f.ok()) return f.status();
    if (!f->top.values.empty() || !f->ports.empty() || !f->nodes.empty() || !f->records.empty() ||
        f->serves.size() + f->mirrors.size() != 1) {
      // A [[record]] or [[node]] beside it was dropped unsaid (and a
      // [[record]] let the serve's archive go unchecked: review helper-51).
      return absl::InvalidArgumentError(
          "ctl add takes exactly one [[serve]] or [[mirror]] table (ports, nodes and recordings are the config's)");
    }
    const ConfigTable& t = f->serves.empty() ? f->mirrors[0] : f->serves[0];
    auto s = session_spec(*f, t, port_names_);
    if (!s.ok()) return s.status();
    if (absl::Status st = add(std::move(*s)); !st.ok()) return st;
    std::printf("run: added %s (ctl)\n", t.name.c_str());
    return absl::OkStatus();
  }

  json list() const {
    json j;
    j["ports"] = json::array();
    for (const engine::PortInfo& p : engine_.ports()) {
      j["ports"].push_back({{"name", p.name}, {"path", p.path}, {"worker", p.worker}, {"sessions", p.sessions}, {"tasks", p.tasks},
                            {"datagrams", p.datagrams}, {"unrouted", p.unrouted}, {"drops", p.drops},
                            {"busy_ns", p.busy_ns}, {"iterations", p.iterations},
                            {"counters", p.summary}});
    }
    j["sessions"] = json::array();
    for (const auto& s : engine_.serves()) {
      const dataplane::ServeStats& w = s->link->stats;
      const control::ServeControlStats& c = s->control->stats();
      j["sessions"].push_back({{"name", s->spec.name}, {"kind", "serve"}, {"port", s->spec.port},
                               {"ring", s->spec.ring}, {"listen", net::to_string(s->control->listening())},
                               {"records", w.records.get() + c.tcp_records}, {"next_seq", w.next_to_send.load(std::memory_order_relaxed)},
                               {"mirrors", c.mirrors}, {"naks", c.naks}, {"send_failures", w.send_failures.get()},
                               {"fault_dropped", w.fault_dropped.get()}, {"refused_tcp", c.refused()},
                               {"refused_punches", w.punches_refused()}, {"pace_us", s->pace_ns / 1000},
                               {"dup_auto_doubled", w.dup_auto_doubled.get()}, {"dup_auto_copies", w.dup_auto_copies.get()},
                               {"archive_records", c.archive_records}, {"archive_replays", c.archive_replays},
                               {"archive_waits", c.archive_waits}, {"archive_preempted", c.archive_preempted},
                               {"archive_errors", c.archive_errors}});
    }
    for (const SessionSpec& p : pending_) {
      j["sessions"].push_back({{"name", p.serve->name}, {"kind", "serve"}, {"port", p.serve->port},
                               {"ring", p.serve->ring}, {"state", "waiting"},
                               {"over", absl::StrCat("waiting for its ring (mirror ", p.follows, ")")}});
    }
    for (const auto& m : engine_.mirrors()) {
      const control::MirrorControl& c = *m->control;
      json e = {{"name", m->spec.name}, {"kind", "mirror"}, {"port", m->spec.port},
                {"ring", m->spec.options.ring}, {"source", net::to_string(m->spec.options.source)},
                {"state", state_name(c.state())}, {"over", c.description()}};
      if (c.state() == control::MirrorControl::State::kFailed) e["failure"] = std::string(c.failure().message());
      if (const dataplane::MirrorWorkerStats* st = c.stats()) {
        const uint64_t next = st->next_seq.get(), end = st->known_end.get();
        e["records"] = st->records.get();
        e["next_seq"] = next;
        e["lag"] = end > next ? end - next : 0;
        e["naks"] = st->naks.get();
        e["gap_records"] = st->gap_records.get();
        e["datagrams"] = st->datagrams.get();
        e["duplicates"] = st->duplicates.get();
        e["fault_dropped"] = st->fault_dropped.get();
        e["rejected"] = st->udp_rejected();
      }
      j["sessions"].push_back(e);
    }
    j["recordings"] = json::array();
    for (const auto& r : recordings_) {
      const archive::RecorderSnapshot s = r->recorder->snapshot();
      json e = {{"name", r->name}, {"kind", "record"}, {"ring", r->ring}, {"state", s.stalled ? "stalled" : "recording"},
                {"records", s.records}, {"bytes", s.bytes}, {"recorded_end", s.recorded_end},
                {"durable_end", s.durable_end}, {"lag", s.lag}, {"segments", s.segments}, {"gaps", s.gaps},
                {"lost", s.lost}, {"fsyncs", s.fsyncs}, {"disk_errors", s.disk_errors}};
      if (s.stalled) e["error"] = r->recorder->last_error();
      j["recordings"].push_back(e);
    }
    for (const RecordSpec& p : pending_records_) {
      j["recordings"].push_back({{"name", p.name}, {"kind", "record"}, {"ring", p.ring}, {"state", "waiting"},
                                 {"over", "waiting for its ring"}});
    }
    j["nodes"] = json::array();
    for (const Node& n : nodes_) {
      const node::NodeStats st = n.node->stats();
      j["nodes"].push_back({{"name", n.name}, {"kind", "node"}, {"port", n.port},
                            {"listen", net::to_string(n.node->control_address())},
                            {"path", n.node->data_path()}, {"peers_in", st.peers_in}, {"peers_out", st.peers_out},
                            {"records_in", st.in.records + st.tcp_records_in},
                            {"records_out", st.out.records + st.tcp_records_out},
                            {"batches_in", st.in.batches}, {"batches_out", st.out.batches},
                            {"streams_finished", st.in.finished}, {"streams_dropped", st.in.dropped},
                            {"refused", st.refused}, {"frames_rejected", st.frames_rejected},
                            {"channel_failures", st.channel_failures}});
    }
    return j;
  }


 public:
  // snapshot: list() for DPDK's telemetry commands (numbers as counters).
  TelemetrySnapshot snapshot() const {
    const json j = list();
    TelemetrySnapshot t;
    auto counters = [](const json& e) {
      std::vector<std::pair<std::string, uint64_t>> c;
      for (const auto& [k, v] : e.items()) {
        if (v.is_number_unsigned()) c.emplace_back(k, v.get<uint64_t>());
      }
      return c;
    };
    for (const json& p : j["ports"]) {
      t.ports.push_back({p.value("name", ""), p.value("path", ""), p.value("worker", ""), counters(p)});
    }
    for (const json& e : j["sessions"]) {
      t.sessions.push_back({e.value("name", ""), e.value("kind", ""), e.value("ring", ""),
                            e.value("state", e.value("kind", "") == "serve" ? "serving" : ""), counters(e)});
    }
    return t;
  }

  // metrics: every port, session and node in the Prometheus text format.
  std::string metrics() const {
    std::string text = engine_metrics(engine_);
    if (!nodes_.empty()) {
      std::vector<NodeSample> samples;
      for (const Node& n : nodes_) samples.push_back(NodeSample{n.name, n.node->stats(), n.node->data_path()});
      text += node_metrics(samples);
    }
    if (!recordings_.empty()) {
      std::vector<RecordSample> samples;
      for (const auto& r : recordings_) samples.push_back(RecordSample{r->name, r->ring, r->recorder->snapshot()});
      text += record_metrics(samples);
    }
    return text;
  }

 private:
  static const char* state_name(control::MirrorControl::State s) {
    using State = control::MirrorControl::State;
    switch (s) {
      case State::kWaiting: return "waiting";
      case State::kConnecting: return "connecting";
      case State::kHandshake: return "handshake";
      case State::kStreaming: return "streaming";
      case State::kFailed: return "failed";
      case State::kStopped: return "stopped";
    }
    return "?";
  }

  DaemonOptions d_;
  std::vector<std::string> port_names_;
  engine::Engine engine_;
  std::map<std::string, std::unique_ptr<ServeReport>> serve_reports_;
  std::map<std::string, std::unique_ptr<MirrorReport>> mirror_reports_;
  std::vector<SessionSpec> pending_;  // serves waiting for their ring (follows)
  struct Node {
    std::string name, port;
    std::unique_ptr<node::Node> node;
    std::unique_ptr<NodeReport> report;
  };
  std::vector<Node> nodes_;  // destroyed first (stop, or last here): they are the engine's agents
  // Recording: a [[record]]'s recorder and the thread that runs it.
  struct Recording {
    std::string name, ring;
    std::unique_ptr<archive::Recorder> recorder;
    std::optional<ring::RingFile> mapped;  // a share of the recorder's mapping: the conductor's cut check
    std::unique_ptr<RecordReport> report;
    std::atomic<bool> stop{false};  // release by end_recording, acquire by the thread
    std::thread thread;
    absl::Status result;            // the thread's, read after join
  };
  // end_recording stops a recording's thread (it flushes) and says how it ended.
  static void end_recording(Recording& r) {
    r.stop.store(true, std::memory_order_release);  // pairs with the recording thread's acquire load
    if (r.thread.joinable()) r.thread.join();
    r.report->finish();
    if (!r.result.ok()) std::printf("run: record %s: %s\n", r.name.c_str(), std::string(r.result.message()).c_str());
  }
  std::vector<std::unique_ptr<Recording>> recordings_;  // stopped in stop() (or by ~Daemon, last)
  std::vector<RecordSpec> pending_records_;
  std::set<std::string> cut_said_;  // channels found on a cut ring (said once, not ended)
};

// nodes_said: ", N nodes" for a config with stream mux nodes ("" without).
std::string nodes_said(size_t n) { return n == 0 ? "" : absl::StrCat(", ", n, n == 1 ? " node" : " nodes"); }
// records_said: ", N recordings" for a config with [[record]] tables.
std::string records_said(size_t n) { return n == 0 ? "" : absl::StrCat(", ", n, n == 1 ? " recording" : " recordings"); }

}  // namespace

namespace {

// clashes_with: what two sessions of one config cannot share, found at
// --check with the file and line (it failed at start, after the sessions
// before it were up, or ran wrong): a listen address, a multicast group and
// port (mirrors would take one serve's datagrams for the other's), a ring
// two mirrors write (review helper-35).
absl::Status clashes_with(const ConfigFile& f, const ConfigTable& t, const SessionSpec& s,
                          const std::vector<SessionSpec>& before) {
  auto same_listen = [](const net::Endpoint& a, const net::Endpoint& b) {
    return a.port != 0 && a.port == b.port && (a.ip == b.ip || a.ip == 0 || b.ip == 0);
  };
  // A mirror's source that is this host's serve: the very address, or a
  // serve on every address and the source loopback or one of this host's
  // own (a hub mirroring 198.18.0.1:7400 and serving on 0.0.0.0:7400 is no
  // loop unless 198.18.0.1 is here).
  auto own = [](const net::Endpoint& src, const net::Endpoint& listen) {
    return src.port == listen.port &&
           (src.ip == listen.ip || (listen.ip == 0 && ((src.ip >> 24) == 127 || net::is_local_address(src.ip))));
  };
  auto ring_of = [](const engine::MirrorSpec& m) { return same_path_key(ring::ring_path(m.options.ring, m.options.dir)); };
  for (const SessionSpec& o : before) {
    if (s.serve && o.serve) {
      const net::Endpoint& a = s.serve->control.listen;
      const net::Endpoint& b = o.serve->control.listen;
      if (same_listen(a, b)) {
        return absl::InvalidArgumentError(absl::StrCat(f.where(t, "listen"), ": serve ", o.serve->name, " listens on ",
                                                       net::to_string(b), " already: give each its own port"));
      }
      const auto& ga = s.serve->worker.multicast;
      const auto& gb = o.serve->worker.multicast;
      // Whatever the interface: two addresses may be one card's (review
      // helper-38), and a group's number is free to choose.
      if (ga && gb && ga->ip == gb->ip && ga->port == gb->port) {
        return absl::InvalidArgumentError(absl::StrCat(f.where(t, "multicast"), ": serve ", o.serve->name, " sends to ",
                                                       net::to_string(*gb),
                                                       " already: give each serve its own group or port"));
      }
    }
    // A mirror of this config's own serve of the ring that mirror writes:
    // each waits for the other for good (helper-46).
    const engine::MirrorSpec* m = s.mirror ? &*s.mirror : (o.mirror ? &*o.mirror : nullptr);
    const engine::ServeSpec* sv = s.serve ? &*s.serve : (o.serve ? &*o.serve : nullptr);
    if (m != nullptr && sv != nullptr && (s.mirror.has_value() != o.mirror.has_value()) &&
        own(m->options.source, sv->control.listen) &&
        ring_of(*m) == same_path_key(ring::ring_path(sv->ring.empty() ? sv->control.ring : sv->ring))) {
      return absl::InvalidArgumentError(absl::StrCat(f.where(t, s.mirror ? "source" : "listen"), ": mirror ", m->name,
                                                     " mirrors serve ", sv->name, " of this config, which serves the ring ",
                                                     m->name, " writes: a loop; mirror another source"));
    }
    if (s.mirror && o.mirror && ring_of(*s.mirror) == ring_of(*o.mirror)) {
      return absl::InvalidArgumentError(absl::StrCat(f.where(t, "ring"), ": mirror ", o.mirror->name, " writes ",
                                                     ring::ring_path(o.mirror->options.ring, o.mirror->options.dir),
                                                     " already: one writer a ring, give this mirror its own"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int run_daemon(const std::string& config_path, bool check_only, const DaemonHooks& hooks) {
  auto file = read_config_file(config_path);
  if (!file.ok()) return fail("run", file.status());
  auto d = daemon_options(*file);
  if (!d.ok()) return fail("run", d.status());

  // Everything is checked before anything starts.
  std::vector<engine::PortSpec> ports;
  std::vector<std::string> port_names;
  std::vector<int> lcores;
  bool dpdk = false;
  std::vector<std::string> pci;  // PCI devices named (the EAL probes only those)
  for (const ConfigTable& t : file->ports) {
    auto p = port_spec(*file, t);
    if (!p.ok()) return fail("run", p.status());
    if (std::find(port_names.begin(), port_names.end(), p->name) != port_names.end()) {
      return fail("run", absl::InvalidArgumentError(absl::StrCat(file->where(t, "name"), ": a second port named ",
                                                                 p->name, ": give each its own name")));
    }
    for (int q = 0; q < p->queues && p->lcore >= 0; ++q) {  // a worker a queue: lcore, lcore + 1, ...
      const int l = p->lcore + q;
      if (std::find(lcores.begin(), lcores.end(), l) != lcores.end()) {
        return fail("run", absl::InvalidArgumentError(absl::StrCat(file->where(t, "lcore"), ": lcore ", l,
                                                                   " is another port's: each worker needs its own")));
      }
      lcores.push_back(l);
    }
    dpdk |= p->backend != engine::PortSpec::Backend::kKernel;
    if (p->device.find(':') != std::string::npos && p->device.rfind("net_", 0) != 0) {
      pci.push_back(p->device.substr(0, p->device.find(',')));
    }
    port_names.push_back(p->name);
    ports.push_back(std::move(*p));
  }
  if (ports.empty()) {
    return fail("run", absl::InvalidArgumentError(absl::StrCat(file->path, ": no [[port]]: declare at least one")));
  }
  std::vector<SessionSpec> sessions;
  std::set<std::string> session_names;
  for (const auto* tables : {&file->serves, &file->mirrors}) {
    for (const ConfigTable& t : *tables) {
      auto s = session_spec(*file, t, port_names);
      if (!s.ok()) return fail("run", s.status());
      if (!session_names.insert(t.name).second) {
        return fail("run", absl::InvalidArgumentError(absl::StrCat(file->where(t, "name"), ": a second session named ",
                                                                   t.name, ": give each its own name")));
      }
      if (absl::Status st = clashes_with(*file, t, *s, sessions); !st.ok()) return fail("run", st);
      sessions.push_back(std::move(*s));
    }
  }
  std::vector<RecordSpec> records;
  for (const ConfigTable& t : file->records) {
    auto r = record_spec(*file, t);
    if (!r.ok()) return fail("run", r.status());
    if (!session_names.insert(t.name).second) {
      return fail("run", absl::InvalidArgumentError(absl::StrCat(file->where(t, "name"), ": a second session named ",
                                                                 t.name, ": give each its own name")));
    }
    for (const RecordSpec& other : records) {
      if (other.options.dir == r->options.dir) {
        return fail("run", absl::InvalidArgumentError(absl::StrCat(file->where(t, "dir"), ": record ", other.name,
                                                                   " writes ", r->options.dir, " already: one recording per archive")));
      }
    }
    records.push_back(std::move(*r));
  }
  std::vector<NodeSpec> nodes;
  for (const ConfigTable& t : file->nodes) {
    auto n = node_spec(*file, t, ports);
    if (!n.ok()) return fail("run", n.status());
    if (!session_names.insert(t.name).second) {
      return fail("run", absl::InvalidArgumentError(absl::StrCat(file->where(t, "name"), ": a second session or node named ",
                                                                 t.name, ": give each its own name")));
    }
    if (d->metrics && d->metrics->ip == n->options.control.ip && d->metrics->port == n->options.control.port) {
      return fail("run", absl::InvalidArgumentError(absl::StrCat(file->where(t, "listen"), ": the metrics endpoint "
                                                                 "listens there: give the node another port")));
    }
    for (const NodeSpec& other : nodes) {
      if (other.options.control.port != 0 && other.options.control.ip == n->options.control.ip &&
          other.options.control.port == n->options.control.port) {
        return fail("run", absl::InvalidArgumentError(absl::StrCat(file->where(t, "listen"), ": node ", other.name,
                                                                   " listens there already")));
      }
    }
    nodes.push_back(std::move(*n));
  }
  if (check_only) {
    std::printf("run: %s: %zu ports, %zu sessions%s%s: ok\n", file->path.c_str(), ports.size(), sessions.size(),
                nodes_said(nodes.size()).c_str(), records_said(records.size()).c_str());
    return 0;
  }
  install_stop_handlers();
  // Every socket the daemon writes sends with MSG_NOSIGNAL; this is for any
  // it missed and for a journal gone from under its stdout: a daemon holding
  // hundreds of sessions must not end on a write (review helper-35).
  signal(SIGPIPE, SIG_IGN);

  if (dpdk) {
    const absl::Status st = engine::start_dpdk(d->eal, lcores, pci);
    if (!st.ok()) {
      for (const engine::PortSpec& p : ports) {
        if (p.backend == engine::PortSpec::Backend::kDpdk) return fail("run", st);
      }
      std::printf("run: DPDK did not start (%s): the auto ports fall back\n", std::string(st.message()).c_str());
    }
  }
  auto daemon = std::make_unique<Daemon>(*d, port_names);
  engine::Engine& eng = daemon->engine();
  for (const engine::PortSpec& p : ports) {
    auto port = engine::open_port(p, [](const std::string& line) { std::printf("run: %s\n", line.c_str()); });
    if (!port.ok()) return fail("run", absl::Status(port.status().code(), absl::StrCat("port ", p.name, ": ",
                                                                                     port.status().message())));
    std::printf("run: port %s on %s, worker on %s\n", p.name.c_str(), (*port)->info().path.c_str(),
                (*port)->info().worker.c_str());
    if (absl::Status st = eng.add_port(p.name, std::move(*port)); !st.ok()) return fail("run", st);
  }
  for (SessionSpec& s : sessions) {
    if (absl::Status st = daemon->add(std::move(s)); !st.ok()) return fail("run", st);
  }
  for (NodeSpec& n : nodes) {
    if (absl::Status st = daemon->add_node(std::move(n)); !st.ok()) return fail("run", st);
  }
  for (RecordSpec& r : records) {
    if (absl::Status st = daemon->add_record(std::move(r)); !st.ok()) {
      daemon->stop();
      return fail("run", st);
    }
  }
  auto ctl = CtlServer::listen(d->ctl);
  if (!ctl.ok()) return fail("run", ctl.status());
  if (absl::Status st = eng.watch((*ctl)->fd()); !st.ok()) return fail("run", st);
  std::printf("run: %zu ports, %zu sessions%s%s; ctl %s\n", ports.size(),
              session_names.size() - nodes.size() - records.size(), nodes_said(nodes.size()).c_str(),
              records_said(records.size()).c_str(), (*ctl)->path().c_str());
  std::fflush(stdout);
  // Under a Type=notify unit: ready now, and the watchdog pinged from this
  // loop (a conductor that stops turning stops pinging).
  std::unique_ptr<MetricsServer> metrics;
  if (d->metrics) {
    auto m = start_metrics(eng, *d->metrics, "run");
    if (!m.ok()) return fail("run", m.status());
    metrics = std::move(*m);
  }
  // DPDK's telemetry socket gets ringfire's own commands (dpdk-telemetry.py:
  // /ringfire/ports, /ringfire/sessions, /ringfire/session,NAME).
  const bool telemetry = dpdk && telemetry_register();
  uint64_t next_snapshot_ns = 0;
  ServiceNotifier notifier;
  notifier.ready(absl::StrCat(ports.size(), " ports, ", session_names.size() - nodes.size() - records.size(),
                              " sessions", nodes_said(nodes.size()), records_said(records.size())));
  const uint64_t max_wait = notifier.watchdog_enabled() ? 50'000'000 : 100'000'000;

  if (hooks.node_up) {
    for (const auto& [name, n] : daemon->nodes()) hooks.node_up(name, *n);
  }
  if (hooks.started) {
    if (absl::Status st = hooks.started(eng); !st.ok()) {
      daemon->stop();
      return fail("run", st);
    }
  }
  uint64_t rings_cut = ring::mappings_cut();
  uint64_t next_cut_check_ns = 0;
  conductor_loop(eng, max_wait, metrics.get(), [&] { return daemon->metrics(); }, [&](uint64_t now) {
    if (hooks.tick && !hooks.tick(eng, now)) return false;
    (*ctl)->poll(now, [&](const std::string& request) {
      std::string answer = daemon->handle(request);
      if (metrics) metrics->stale();  // a session added or removed shows at the next scrape
      return answer;
    });
    daemon->tick(now);
    if (const uint64_t cut = ring::mappings_cut(); cut != rings_cut) {
      rings_cut = cut;
      std::fprintf(stderr,
                   "run: warning: a ring's file was cut shorter under its mapping (%llu so far): what was cut "
                   "reads as zeros; the sessions on it end (said below): make the ring again and add them back\n",
                   static_cast<unsigned long long>(cut));
      next_cut_check_ns = 0;  // find whose, now
    }
    // A cut is looked for each second too: a ring cut where no one has
    // touched it yet would fault only later (a writer's next lap).
    if (now >= next_cut_check_ns) {
      daemon->end_cut_sessions();
      next_cut_check_ns = now + 1'000'000'000;
    }
    if (telemetry && now >= next_snapshot_ns) {
      telemetry_publish(daemon->snapshot());
      next_snapshot_ns = now + 100'000'000;
    }
    notifier.tick(now);
    return true;
  });
  notifier.stopping();
  if (hooks.stopping) hooks.stopping(eng);
  eng.unwatch((*ctl)->fd());
  ctl->reset();
  daemon->stop();
  std::printf("run: stopped\n");
  return 0;
}

}  // namespace ringfire::cli
