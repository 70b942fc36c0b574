// session_report.h — what an operator sees of a session: its line once a
// second (records, lag, NAKs, drops), the refusals by reason whenever they
// change, its counters file for `ringfire stat`, and for a mirror the
// session's start and end. The shorthands report their one session with
// the prefix "serve" or "mirror"; `ringfire run` reports each session under
// its name. Conductor thread (it reads the sessions' counters).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "archive/recorder.h"
#include "engine/engine.h"
#include "node/node.h"
#include "telemetry/counters_file.h"

namespace ringfire::cli {

class ServeReport {
 public:
  // start prints the session's first line and makes its counters file
  // (`tag` distinguishes one process's files: "" for the only one).
  static absl::StatusOr<std::unique_ptr<ServeReport>> start(const engine::Engine::Serve& s, std::string prefix,
                                                            bool quiet, const std::string& counters_dir,
                                                            const std::string& tag);
  // tick: call after every conductor round; reports once a second.
  void tick(uint64_t now_ns);
  // last_words: the refusals, once more (before the session goes).
  std::string last_words() const;
  // json: each second's line as one JSON object instead of text.
  void set_json(bool on) { json_ = on; }

 private:
  ServeReport(const engine::Engine::Serve& s, std::string prefix, bool quiet, telemetry::CountersFile f);
  const engine::Engine::Serve& s_;
  std::string prefix_;
  bool quiet_;
  telemetry::CountersFile counters_;
  uint64_t next_report_ns_ = 0;
  uint64_t last_records_ = 0, last_frames_ = 0;
  std::string last_refusals_;
  bool json_ = false;
};

class MirrorReport {
 public:
  static absl::StatusOr<std::unique_ptr<MirrorReport>> start(const engine::Engine::Mirror& m, std::string prefix,
                                                             bool quiet, const std::string& counters_dir,
                                                             const std::string& tag);
  // tick: call after every conductor round: says when a session starts
  // (with its worker, the first time) and ends, and once a second its line.
  void tick(uint64_t now_ns);
  // finish: the last line of a session still streaming.
  void finish();
  void set_json(bool on) { json_ = on; }

 private:
  MirrorReport(const engine::Engine::Mirror& m, std::string prefix, bool quiet, telemetry::CountersFile f);
  void summary(const std::string& how);
  const engine::Engine::Mirror& m_;
  std::string prefix_;
  bool quiet_;
  telemetry::CountersFile counters_;
  bool streaming_ = false, worker_shown_ = false;
  void say_gaps(uint64_t gaps, uint64_t next_seq);
  uint64_t next_report_ns_ = 0, last_records_ = 0, last_rejected_ = 0, last_gap_records_ = 0;
  bool json_ = false;
};

// json_line prints one second's counters as a JSON object on one line:
// {"session": ..., "kind": ..., "rec_per_s": ..., "counters": {...}}.
void json_line(const std::string& session, const char* kind, uint64_t per_second, const telemetry::CountersFile& f);

// NodeReport: a stream mux node's counters file (`ringfire top`, `ringfire
// stat`), written once a second: role "mux", the control address as its
// "ring", `what` and the data path's rung as its detail. `records` picks
// the records the line counts: received, sent, or both (a daemon's node,
// which may do either).
class NodeReport {
 public:
  enum class Records : uint8_t { kReceived, kSent, kBoth };
  static absl::StatusOr<std::unique_ptr<NodeReport>> start(const node::Node& n, const std::string& what,
                                                           const std::string& counters_dir, Records records);
  void tick(const node::Node& n, uint64_t now_ns);

 private:
  NodeReport(telemetry::CountersFile f, Records records) : f_(std::move(f)), records_(records) {}
  telemetry::CountersFile f_;
  Records records_;
  uint64_t next_ns_ = 0;
};

// RecordReport: a recording's line once a second (records/s, recorded and
// durable up to, lag, bytes, segments, gaps, fsyncs, disk errors, and the
// disk's complaint while stalled) and its counters file (role "record",
// the ring as its ring, the archive directory as its detail: `ringfire
// stat RING` and `ringfire top` show it). Conductor (or main) thread: it
// reads the recorder's snapshot, never its reading side.
class RecordReport {
 public:
  static absl::StatusOr<std::unique_ptr<RecordReport>> start(const archive::Recorder& r, std::string prefix,
                                                             bool quiet, const std::string& counters_dir,
                                                             const std::string& tag, const std::string& ring,
                                                             const std::string& dir);
  void tick(uint64_t now_ns);
  // finish prints the last line ("PREFIX: done: ...").
  void finish();

 private:
  RecordReport(const archive::Recorder& r, std::string prefix, bool quiet, telemetry::CountersFile f)
      : r_(r), prefix_(std::move(prefix)), quiet_(quiet), counters_(std::move(f)) {}
  void publish(const archive::RecorderSnapshot& s);
  const archive::Recorder& r_;
  std::string prefix_;
  bool quiet_;
  telemetry::CountersFile counters_;
  uint64_t next_report_ns_ = 0, last_records_ = 0, last_lost_ = 0;
  bool last_stalled_ = false;
};

}  // namespace ringfire::cli
