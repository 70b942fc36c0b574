// session_report.cc — see session_report.h.
#include "cli/json_text.h"
#include "cli/session_report.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace ringfire::cli {
namespace {

// publish_counters writes every counter a serve keeps into its counters
// file (`ringfire stat` shows them), once a second.
void publish_serve_counters(telemetry::CountersFile& f, const control::ServeControl& ctl,
                      const dataplane::ServeStats& w, uint64_t port_drops) {
  const control::ServeControlStats& c = ctl.stats();
  f.set("serve.records", w.records.get() + c.tcp_records);
  f.set("serve.frames", w.frames.get());
  f.set("serve.datagrams", w.datagrams.get());
  f.set("serve.send_failures", w.send_failures.get());
  f.set("serve.next_seq", w.next_to_send.load(std::memory_order_relaxed));
  f.set("serve.heartbeats", w.heartbeats.get());
  f.set("serve.lapped", w.lapped.get());
  f.set("serve.mirrors", c.mirrors);
  f.set("serve.unicast_mirrors", w.unicast_mirrors.get());
  f.set("serve.naks", c.naks);
  f.set("serve.nak_ranges", c.nak_ranges);
  f.set("serve.nak_records_tcp", c.nak_records);
  f.set("serve.udp_repairs", c.udp_repairs);
  f.set("serve.dup_auto_doubled", w.dup_auto_doubled.get());
  f.set("serve.dup_auto_switches", w.dup_auto_switches.get());
  f.set("serve.dup_auto_copies", w.dup_auto_copies.get());
  f.set("serve.gaps", c.gaps);
  f.set("serve.archive_records", c.archive_records);
  f.set("serve.archive_bytes", c.archive_bytes);
  f.set("serve.archive_replays", c.archive_replays);
  f.set("serve.archive_waits", c.archive_waits);
  f.set("serve.archive_preempted", c.archive_preempted);
  f.set("serve.archive_throttled", c.archive_throttled);
  f.set("serve.archive_errors", c.archive_errors);
  f.set("serve.slow_warnings", c.slow_warnings);
  f.set("serve.port_drops", port_drops);
  f.set("refused.tcp.conn_cap", c.conn_cap);
  f.set("refused.tcp.foreign", c.foreign);
  f.set("refused.tcp.handshake_timeout", c.handshake_timeouts);
  f.set("refused.tcp.malformed", c.malformed);
  f.set("refused.tcp.oversized", c.oversized);
  f.set("refused.tcp.wrong_kind", c.wrong_kind);
  f.set("refused.tcp.bad_hello", c.bad_hello);
  f.set("refused.tcp.unauthenticated", c.unauthenticated);
  f.set("refused.tcp.bad_auth", c.bad_auth);
  f.set("refused.tcp.bad_frame_mac", c.bad_frame_mac);
  f.set("refused.tcp.slow", c.slow_cut);
  f.set("refused.tcp.silent", c.peer_timeouts);
  f.set("refused.tcp.nak_dropped", c.nak_dropped);
  f.set("refused.punch.malformed", w.punch_malformed.get());
  f.set("refused.punch.wrong_kind", w.punch_wrong_kind.get());
  f.set("refused.punch.unknown_token", w.punch_unknown_token.get());
  f.set("refused.punch.bad_mac", w.punch_bad_mac.get());
  f.set("refused.punch.replayed", w.punch_replayed.get());
  f.set("serve.punch_probed", w.punch_probed.get());
  f.set("serve.paths_validated", w.paths_validated.get());
  for (const control::MirrorView& m : ctl.mirrors()) {
    const std::string k = absl::StrCat("mirror.", net::to_string(m.peer), ".");
    f.set(k + "lag", m.lag);
    f.set(k + "slow", m.slow);
    if (m.has_health) {
      f.set(k + "holes", m.health.holes);
      f.set(k + "naks", m.health.naks);
      f.set(k + "gap_records", m.health.gap_records);
      f.set(k + "held_high", m.health.held_high);
      f.set(k + "rx_drops", m.health.rx_drops);
      f.set(k + "rejected", m.health.rejected);
      if (m.health.has_udp_datagrams) f.set(k + "udp_datagrams", m.health.udp_datagrams);
    }
  }
  f.sweep();
}

// refusals: the rejection counters by reason, for the log line printed
// when they change.
std::string refusals(const control::ServeControlStats& c, const dataplane::ServeStats& w) {
  return absl::StrCat(
      "refused: TCP ", c.refused(), " (conn-cap ", c.conn_cap, ", foreign ", c.foreign, ", handshake-timeout ", c.handshake_timeouts,
      ", malformed ", c.malformed, ", oversized ", c.oversized, ", wrong-kind ", c.wrong_kind, ", bad-hello ",
      c.bad_hello, ", unauthenticated ", c.unauthenticated, ", bad-auth ", c.bad_auth, ", bad-frame-mac ", c.bad_frame_mac, ", slow ", c.slow_cut,
      ", silent ", c.peer_timeouts, "), NAK ranges dropped ", c.nak_dropped, ", PUNCH ", w.punches_refused(),
      " (malformed ", w.punch_malformed.get(), ", wrong-kind ", w.punch_wrong_kind.get(),
      ", unknown-token ", w.punch_unknown_token.get(), ", bad-mac ", w.punch_bad_mac.get(), ", replayed ",
      w.punch_replayed.get(), "); PUNCH from another address than its token's connection, probed ",
      w.punch_probed.get());
}

// publish_counters writes a mirror's counters into its counters file.
void publish_mirror_counters(telemetry::CountersFile& f, const control::MirrorControl& c,
                      const dataplane::MirrorWorkerStats& st) {
  const uint64_t next = st.next_seq.get(), end = st.known_end.get();
  f.set("mirror.records", st.records.get());
  f.set("mirror.next_seq", next);
  f.set("mirror.lag", end > next ? end - next : 0);
  f.set("mirror.held", st.held.get());
  f.set("mirror.held_high", st.held_high.get());
  f.set("mirror.holes", st.holes.get());
  f.set("mirror.naks", st.naks.get());
  f.set("mirror.nak_repeats", st.nak_repeats.get());
  f.set("mirror.gap_records", st.gap_records.get());
  f.set("mirror.duplicates", st.duplicates.get());
  f.set("mirror.datagrams", st.datagrams.get());
  f.set("mirror.udp_datagrams", st.udp_datagrams.get());
  f.set("mirror.tcp_frames", st.tcp_frames.get());
  f.set("mirror.hold_overflow", st.hold_overflow.get());
  f.set("mirror.repair_time_ns", st.repair_srtt_ns.get());
  f.set("mirror.port_drops", c.port_drops());
  f.set("mirror.health_reports", c.control_stats().health_reports);
  f.set("mirror.sessions", c.control_stats().sessions);
  f.set("rejected.udp.wrong_sender", st.wrong_sender.get());
  f.set("rejected.udp.bad_mac", st.bad_mac.get());
  f.set("rejected.udp.bad_tag", st.bad_tag.get());
  f.set("rejected.udp.wrong_kind", st.wrong_kind.get());
  f.set("rejected.udp.wrong_session", st.wrong_session.get());
  f.set("rejected.udp.implausible", st.implausible.get());
  f.set("rejected.udp.malformed", st.malformed.get());
  f.set("rejected.tcp.wrong_kind", c.control_stats().tcp_wrong_kind);
  f.set("rejected.tcp.bad_frame_mac", c.control_stats().bad_frame_mac);
  f.sweep();
}

void print_mirror_stats(const std::string& prefix, const control::MirrorControl& c, const dataplane::MirrorWorkerStats& st, uint64_t per_second) {
  const uint64_t next = st.next_seq.get();
  const uint64_t end = st.known_end.get();
  std::printf(
      "%s: %llu rec/s, next seq %llu, lag %llu, held %llu, NAKs %llu, GAP records %llu, "
      "dup %llu, datagrams %llu, TCP frames %llu, TCP records %llu, fault-dropped %llu, port drops %llu\n",
      prefix.c_str(), static_cast<unsigned long long>(per_second), static_cast<unsigned long long>(next),
      static_cast<unsigned long long>(end > next ? end - next : 0),
      static_cast<unsigned long long>(st.held.get()), static_cast<unsigned long long>(st.naks.get()),
      static_cast<unsigned long long>(st.gap_records.get()),
      static_cast<unsigned long long>(st.duplicates.get()),
      static_cast<unsigned long long>(st.datagrams.get()),
      static_cast<unsigned long long>(st.tcp_frames.get()),
      static_cast<unsigned long long>(st.tcp_records.get()),
      static_cast<unsigned long long>(st.fault_dropped.get()),
      static_cast<unsigned long long>(c.port_drops()));
  std::fflush(stdout);
}

void print_rejected(const std::string& prefix, const dataplane::MirrorWorkerStats& st) {
  std::printf("%s: rejected UDP %llu (wrong-sender %llu, bad-mac %llu, bad-tag %llu, wrong-kind %llu, "
              "wrong-session %llu, implausible %llu, malformed %llu)\n",
              prefix.c_str(), static_cast<unsigned long long>(st.udp_rejected()),
              static_cast<unsigned long long>(st.wrong_sender.get()),
              static_cast<unsigned long long>(st.bad_mac.get()),
              static_cast<unsigned long long>(st.bad_tag.get()),
              static_cast<unsigned long long>(st.wrong_kind.get()),
              static_cast<unsigned long long>(st.wrong_session.get()),
              static_cast<unsigned long long>(st.implausible.get()),
              static_cast<unsigned long long>(st.malformed.get()));
  std::fflush(stdout);
}

}  // namespace

// ---- serve

ServeReport::ServeReport(const engine::Engine::Serve& s, std::string prefix, bool quiet, telemetry::CountersFile f)
    : s_(s), prefix_(std::move(prefix)), quiet_(quiet), counters_(std::move(f)) {}

absl::StatusOr<std::unique_ptr<ServeReport>> ServeReport::start(const engine::Engine::Serve& s, std::string prefix,
                                                                bool quiet, const std::string& counters_dir,
                                                                const std::string& tag) {
  const control::ServeControl& ctl = *s.control;
  std::printf("%s: %s on %s%s%s, session %u%s\n", prefix.c_str(), s.spec.ring.c_str(),
              net::to_string(ctl.listening()).c_str(),
              s.spec.worker.multicast ? absl::StrCat(", multicast ", net::to_string(*s.spec.worker.multicast)).c_str() : "",
              s.spec.unicast ? absl::StrCat(", unicast ", net::to_string(net::Endpoint{
                                   s.udp_local.ip != 0 ? s.udp_local.ip : s.spec.iface_ip, s.udp_local.port})).c_str()
                             : "",
              s.spec.worker.session, s.spec.control.psk ? ", authenticated (PSK)" : "");
  const engine::PortInfo port = s.port->info();
  // The detail names the active rung too (`ringfire stat` shows where the
  // port landed): "kernel", or the DPDK driver without its "net_".
  std::string rung = port.path.substr(0, port.path.find(' ', 5));
  if (rung.rfind("dpdk net_", 0) == 0) rung = rung.substr(9);
  auto f = telemetry::CountersFile::create(counters_dir, "serve", s.spec.ring,
                                           absl::StrCat(net::to_string(ctl.listening()), " ", rung), 1024, tag);
  if (!f.ok()) return f.status();
  if (!quiet) std::printf("%s: worker on %s (port %s, %s)\n", prefix.c_str(), port.worker.c_str(), port.name.c_str(), port.path.c_str());
  std::fflush(stdout);
  std::unique_ptr<ServeReport> r(new ServeReport(s, std::move(prefix), quiet, std::move(*f)));
  r->last_refusals_ = refusals(ctl.stats(), s.link->stats);
  return r;
}

void ServeReport::tick(uint64_t now) {
  if (next_report_ns_ == 0) next_report_ns_ = now + 1'000'000'000u;
  if (now < next_report_ns_) return;
  const control::ServeControl& ctl = *s_.control;
  const dataplane::ServeStats& ws = s_.link->stats;
  const auto& cs = ctl.stats();
  const uint64_t records = ws.records.get() + cs.tcp_records;
  const uint64_t frames = ws.frames.get();
  const uint64_t drops = s_.port->port_drops();
  uint64_t slowest = 0;
  for (const control::MirrorView& m : ctl.mirrors()) slowest = std::max(slowest, m.lag);
  if (!quiet_ && !json_) {
    std::printf(
        "%s: %llu rec/s, %llu frames/s, next seq %llu, mirrors %llu (unicast %llu), slowest lag %llu, "
        "NAKs %llu (%llu records by TCP, %llu ranges by UDP), GAPs %llu, lapped %llu, refused TCP %llu, "
        "punches refused %llu%s\n",
        prefix_.c_str(), static_cast<unsigned long long>(records - last_records_),
        static_cast<unsigned long long>(frames - last_frames_),
        static_cast<unsigned long long>(ws.next_to_send.load()),
        static_cast<unsigned long long>(cs.mirrors),
        static_cast<unsigned long long>(ws.unicast_mirrors.get()),
        static_cast<unsigned long long>(slowest),
        static_cast<unsigned long long>(cs.naks), static_cast<unsigned long long>(cs.nak_records),
        static_cast<unsigned long long>(cs.udp_repairs), static_cast<unsigned long long>(cs.gaps),
        static_cast<unsigned long long>(ws.lapped.get()), static_cast<unsigned long long>(cs.refused()),
        static_cast<unsigned long long>(ws.punches_refused()),
        s_.port->describe().empty() ? "" : absl::StrCat(", port drops ", drops).c_str());
    std::fflush(stdout);
  }
  publish_serve_counters(counters_, ctl, ws, drops);
  if (json_) json_line(prefix_, "serve", records - last_records_, counters_);
  // The breakdown, whenever it changed: what strangers sent, by reason.
  if (std::string now_refusals = refusals(cs, ws); now_refusals != last_refusals_) {
    std::printf("%s: %s\n", prefix_.c_str(), now_refusals.c_str());
    std::fflush(stdout);
    last_refusals_ = std::move(now_refusals);
  }
  last_records_ = records;
  last_frames_ = frames;
  next_report_ns_ = now + 1'000'000'000u;
}

std::string ServeReport::last_words() const { return refusals(s_.control->stats(), s_.link->stats); }

// ---- mirror

MirrorReport::MirrorReport(const engine::Engine::Mirror& m, std::string prefix, bool quiet, telemetry::CountersFile f)
    : m_(m), prefix_(std::move(prefix)), quiet_(quiet), counters_(std::move(f)) {}

absl::StatusOr<std::unique_ptr<MirrorReport>> MirrorReport::start(const engine::Engine::Mirror& m, std::string prefix,
                                                                  bool quiet, const std::string& counters_dir,
                                                                  const std::string& tag) {
  const control::MirrorOptions& o = m.control->options();
  auto f = telemetry::CountersFile::create(counters_dir, "mirror", ring::ring_path(o.ring, o.dir),
                                           net::to_string(o.source), 1024, tag);
  if (!f.ok()) return f.status();
  return std::unique_ptr<MirrorReport>(new MirrorReport(m, std::move(prefix), quiet, std::move(*f)));
}

void MirrorReport::summary(const std::string& how) {
  const control::SessionTotals& t = m_.control->last_totals();
  std::printf("%s: %s; %llu records written, next seq %llu, NAKs %llu (%llu repeats), repair time %.0f us\n",
              prefix_.c_str(), how.c_str(), static_cast<unsigned long long>(t.records),
              static_cast<unsigned long long>(t.next_seq), static_cast<unsigned long long>(t.naks),
              static_cast<unsigned long long>(t.nak_repeats), static_cast<double>(t.repair_srtt_ns) / 1000.0);
  std::fflush(stdout);
}

// say_gaps: records skipped since the last line, said as they are, quiet
// or not: a line a trader's log must hold (the per-second line has the
// total). `gaps` is the session's count.
void MirrorReport::say_gaps(uint64_t gaps, uint64_t next_seq) {
  if (gaps <= last_gap_records_) return;
  std::printf("%s: GAP: skipped %llu records the source no longer had (%llu this session), next seq %llu\n",
              prefix_.c_str(), static_cast<unsigned long long>(gaps - last_gap_records_),
              static_cast<unsigned long long>(gaps), static_cast<unsigned long long>(next_seq));
  std::fflush(stdout);
  last_gap_records_ = gaps;
}

void MirrorReport::tick(uint64_t now) {
  using State = control::MirrorControl::State;
  const control::MirrorControl& c = *m_.control;
  const State state = c.state();
  const dataplane::MirrorWorkerStats* st = c.stats();
  if (state == State::kStreaming && !streaming_ && st != nullptr) {
    streaming_ = true;
    last_records_ = 0;
    last_rejected_ = 0;
    last_gap_records_ = 0;
    next_report_ns_ = now + 1'000'000'000u;
    if (!worker_shown_ && !quiet_) {
      const engine::PortInfo port = m_.port->info();
      std::printf("%s: worker on %s (port %s, %s)\n", prefix_.c_str(), port.worker.c_str(), port.name.c_str(),
                  port.path.c_str());
      std::fflush(stdout);
    }
    worker_shown_ = true;
  }
  if (state != State::kStreaming && streaming_) {
    streaming_ = false;
    say_gaps(c.last_totals().gap_records, c.last_totals().next_seq);  // the session's last second's too
    summary("session ended");  // why: the control's own line, "source gone (...)"
    return;
  }
  if (!streaming_ || now < next_report_ns_) return;
  const uint64_t records = st->records.get();
  if (!quiet_ && !json_) print_mirror_stats(prefix_, c, *st, records - last_records_);
  const uint64_t per_second = records - last_records_;
  last_records_ = records;
  next_report_ns_ = now + 1'000'000'000u;
  publish_mirror_counters(counters_, c, *st);
  if (json_) json_line(prefix_, "mirror", per_second, counters_);
  say_gaps(st->gap_records.get(), st->next_seq.get());
  // What strangers sent, by reason, whenever it changed.
  if (const uint64_t rejected = st->udp_rejected(); rejected != last_rejected_) {
    last_rejected_ = rejected;
    print_rejected(prefix_, *st);
  }
}

void MirrorReport::finish() {
  if (!streaming_) return;
  m_.control->stop();  // keeps the session's totals
  streaming_ = false;
  say_gaps(m_.control->last_totals().gap_records, m_.control->last_totals().next_seq);
  summary("stopped");
}

void json_line(const std::string& session, const char* kind, uint64_t per_second, const telemetry::CountersFile& f) {
  nlohmann::json c = nlohmann::json::object();
  for (const auto& [label, value] : f.snapshot()) c[label] = value;
  const nlohmann::json j = {{"session", session}, {"kind", kind}, {"rec_per_s", per_second}, {"counters", c}};
  std::printf("%s\n", json_text(j).c_str());
  std::fflush(stdout);
}

absl::StatusOr<std::unique_ptr<NodeReport>> NodeReport::start(const node::Node& n, const std::string& what,
                                                              const std::string& counters_dir, Records records) {
  std::string rung = n.data_path();
  if (rung.rfind("dpdk net_", 0) == 0) rung = rung.substr(9, rung.find(' ', 9) - 9);
  auto f = telemetry::CountersFile::create(counters_dir, "mux", net::to_string(n.control_address()),
                                           absl::StrCat(what, " ", rung));
  if (!f.ok()) return f.status();
  return std::unique_ptr<NodeReport>(new NodeReport(std::move(*f), records));
}

void NodeReport::tick(const node::Node& n, uint64_t now_ns) {
  if (now_ns < next_ns_) return;
  next_ns_ = now_ns + 1'000'000'000;
  const node::NodeStats s = n.stats();
  const uint64_t in = s.in.records + s.tcp_records_in, out = s.out.records + s.tcp_records_out;
  f_.set("mux.records", records_ == Records::kReceived ? in : records_ == Records::kSent ? out : in + out);
  f_.set("mux.batches", records_ == Records::kReceived ? s.in.batches
                        : records_ == Records::kSent   ? s.out.batches
                                                       : s.in.batches + s.out.batches);
  f_.set("mux.streams_finished", s.in.finished);
  f_.set("mux.streams_dropped", s.in.dropped);
  f_.set("mux.naks", s.channel_naks);
  f_.set("mux.peers", s.peers_in + s.peers_out);
  f_.set("rejected.mux.connections", s.refused);
  f_.set("rejected.mux.frames", s.frames_rejected);
  f_.set("rejected.mux.generation_mismatch", s.in.generation_mismatch);
  f_.set("rejected.mux.protocol_errors", s.in.protocol_errors);
  f_.sweep();
}

namespace {

void record_line(const std::string& prefix, const archive::RecorderSnapshot& s, uint64_t per_s,
                 const std::string& error) {
  using ull = unsigned long long;
  std::printf("%s: %llu rec/s, recorded to %llu, durable to %llu, lag %llu, %llu records, %llu bytes, "
              "%llu segments, %llu gaps (%llu lost), %llu fsyncs, %llu disk errors, %llu MiB buffered%s%s\n",
              prefix.c_str(), static_cast<ull>(per_s), static_cast<ull>(s.recorded_end),
              static_cast<ull>(s.durable_end), static_cast<ull>(s.lag), static_cast<ull>(s.records),
              static_cast<ull>(s.bytes), static_cast<ull>(s.segments), static_cast<ull>(s.gaps),
              static_cast<ull>(s.lost), static_cast<ull>(s.fsyncs), static_cast<ull>(s.disk_errors),
              static_cast<ull>(s.buffer_bytes >> 20), s.stalled ? ", STALLED: " : "", s.stalled ? error.c_str() : "");
  std::fflush(stdout);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecordReport>> RecordReport::start(const archive::Recorder& r, std::string prefix,
                                                                  bool quiet, const std::string& counters_dir,
                                                                  const std::string& tag, const std::string& ring,
                                                                  const std::string& dir) {
  auto f = telemetry::CountersFile::create(counters_dir, "record", ring, dir, 64, tag);
  if (!f.ok()) return f.status();
  std::unique_ptr<RecordReport> rep(new RecordReport(r, std::move(prefix), quiet, std::move(*f)));
  rep->publish(r.snapshot());
  return rep;
}

void RecordReport::publish(const archive::RecorderSnapshot& s) {
  counters_.set("record.records", s.records);
  counters_.set("record.bytes", s.bytes);
  counters_.set("record.recorded_end", s.recorded_end);
  counters_.set("record.durable_end", s.durable_end);
  counters_.set("record.lag", s.lag);
  counters_.set("record.segments", s.segments);
  counters_.set("record.gaps", s.gaps);
  counters_.set("record.lost", s.lost);
  counters_.set("record.fsyncs", s.fsyncs);
  counters_.set("record.disk_errors", s.disk_errors);
  counters_.set("record.segments_removed", s.segments_removed);
  counters_.set("record.removals_deferred", s.removals_deferred);
  counters_.set("record.buffer_bytes", s.buffer_bytes);
  counters_.set("record.stalled", s.stalled ? 1 : 0);
  counters_.sweep();
}

void RecordReport::tick(uint64_t now_ns) {
  if (now_ns < next_report_ns_) return;
  const bool first = next_report_ns_ == 0;
  next_report_ns_ = now_ns + 1'000'000'000;
  const archive::RecorderSnapshot s = r_.snapshot();
  publish(s);
  if (!first && !quiet_) record_line(prefix_, s, s.records - last_records_, r_.last_error());
  last_records_ = s.records;
  // Said as they happen, quiet or not: the disk refusing and taking writes
  // again, and records the ring's writer lapped (each a gap in the archive).
  if (s.stalled != last_stalled_) {
    if (s.stalled) {
      std::printf("%s: STALLED: %s (the ring goes on; recording resumes when the disk takes writes)\n",
                  prefix_.c_str(), r_.last_error().c_str());
    } else {
      std::printf("%s: the disk takes writes again: recording resumed at sequence %llu\n", prefix_.c_str(),
                  static_cast<unsigned long long>(s.recorded_end));
    }
    last_stalled_ = s.stalled;
  }
  if (s.lost > last_lost_) {
    std::printf("%s: lapped by the ring's writer: %llu records not recorded (a gap in the archive; %llu in all)\n",
                prefix_.c_str(), static_cast<unsigned long long>(s.lost - last_lost_),
                static_cast<unsigned long long>(s.lost));
    last_lost_ = s.lost;
  }
  std::fflush(stdout);
}

void RecordReport::finish() {
  const archive::RecorderSnapshot s = r_.snapshot();
  publish(s);
  record_line(prefix_ + ": done", s, 0, r_.last_error());
}

}  // namespace ringfire::cli
