// serve_control.h — the source side's control thread: owns the listening
// socket and every mirror's TCP connection (epoll). Answers HELLO (after the
// PSK challenge/response when the source has a key) with GEOMETRY and
// MULTICAST (group or unicast port, MTU, TTL, session byte, the features it
// grants, a fresh token registered with the worker for this connection's
// address), or with a REFUSE that says why. Serves NAKs: a small one from a
// UDP mirror through the worker by UDP, a repeat or a large one over TCP
// (DATA for what the ring holds, GAP for what it no longer does), each
// range once. Answers HEALTH with its position (a TCP HEARTBEAT) and keeps
// each mirror's health, warning when one falls too far behind. Streams
// DATA on the connection to mirrors that asked for TCP.
//
// Bounded against any peer: a connection cap, a handshake deadline, a
// largest body per frame kind, a bounded NAK queue per mirror answered a
// chunk at a time only while its connection drains (round-robin across
// mirrors), a cut for a peer that stops reading or falls silent. Every
// refusal is counted by reason. Talks to the serve session only through its
// command queue and counters; never touches a datagram.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/recent_repairs.h"
#include "control/repair_queue.h"
#include "dataplane/serve_session.h"
#include "net/auth.h"
#include "net/tcp_conn.h"
#include "ring/lazy_bytes.h"
#include "ring/raw_reader.h"

namespace ringfire::control {

struct ServeControlConfig {
  net::Endpoint listen;
  std::string ring;                              // name or path of the served ring
  std::optional<net::Endpoint> multicast;  // group:port announced to mirrors
  uint16_t unicast_port = 0;                     // the worker's UDP port for PUNCH (0: none)
  uint32_t data_ip = 0;                          // where the worker's datagrams come from
  uint16_t mtu = 1472;
  uint8_t ttl = 1;
  uint8_t session = 1;
  std::optional<net::Psk> psk;  // set: mirrors must authenticate (and salt keys the datagrams)
  net::Nonce salt{};
  // multicast_tag: unkeyed, the group's datagrams end with a TAG frame
  // carrying it (the worker's ServeConfig::tag): announced to mirrors that
  // check tags; a mirror that does not is served over TCP instead. 0: untagged.
  uint64_t multicast_tag = 0;
  size_t tcp_frame_bytes = 64u << 10;
  uint32_t tcp_chunk_records = 1024;  // records per turn of one mirror's TCP answers
  size_t out_watermark_bytes = 256u << 10;  // produce more only below this
  size_t max_backlog_bytes = 64u << 20;     // a mirror further behind is cut
  uint32_t max_connections = 256;
  // only_from: set, a connection from any other IPv4 address is refused
  // at accept (a stream-mux channel is served to its one consumer only).
  uint32_t only_from = 0;
  // channel_token: a stream mux channel's serve (the channel_epoch of the
  // NODE that announced it): a HELLO carrying another token is refused
  // (REFUSE 10): the mirror of a channel another node's NODE named. A
  // HELLO with none is served (a consumer that predates the token). 0: no check.
  uint64_t channel_token = 0;
  uint64_t handshake_timeout_ns = 5'000'000'000;
  uint64_t peer_timeout_ns = 5'000'000'000;   // a HEALTH-sending mirror silent this long is gone
  uint64_t stall_timeout_ns = 10'000'000'000; // a connection that takes nothing this long is cut
  // A NAK of at most this many records from a UDP mirror is repaired
  // through the data plane: the worker re-sends the range from the ring by
  // UDP. A repeat of it comes over TCP. 0: TCP only.
  uint32_t udp_repair_max = 1024;
  // dup_auto: the serve's unicast mirrors get dup = "auto" (ServeConfig):
  // each HEALTH's datagram count goes to the worker.
  bool dup_auto = false;
  uint64_t udp_repair_grace_ns = 500'000;   // group: another mirror's repair may still be on its way
  uint64_t udp_repair_memory_ns = 1'000'000'000;
  double slow_mirror_share = 0.5;           // warn when a mirror lags by this share of the ring
  // archive_dir: an archive of this ring (`ringfire record`); what the ring
  // no longer holds is answered from it instead of with a GAP, and
  // "oldest" means the archive's first record. "": none.
  std::string archive_dir;
  uint32_t archive_replays = 4;                 // mirrors read from the archive at once, at most
  uint64_t archive_bytes_per_s = 256ull << 20;  // archive bytes sent per second, all mirrors
  // log receives one line per event an operator should see (refusals,
  // slow mirrors; rate-limited per reason).
  std::function<void(const std::string&)> log;
};

struct ServeControlStats {
  uint64_t mirrors = 0;     // streaming now
  uint64_t accepted = 0;
  uint64_t naks = 0;
  uint64_t nak_ranges = 0;
  uint64_t nak_records = 0;     // records retransmitted over TCP
  uint64_t nak_shared = 0;      // ranges another mirror's group repair was already bringing
  uint64_t udp_repairs = 0;     // ranges handed to the worker to repair by UDP
  uint64_t udp_repair_records = 0;
  uint64_t gaps = 0;
  uint64_t archive_records = 0;   // records answered from the archive
  uint64_t archive_bytes = 0;
  uint64_t archive_replays = 0;   // replays started (a mirror reading the archive)
  uint64_t archive_waits = 0;     // turns a mirror waited: archive_replays were busy
  uint64_t archive_preempted = 0; // replay slots taken back after kReplaySliceNs for a mirror in line
  uint64_t archive_throttled = 0; // turns a mirror waited: archive_bytes_per_s spent
  uint64_t archive_errors = 0;    // archive reads that failed (damage: a GAP past it)
  uint64_t tcp_records = 0;     // records streamed to TCP-mode mirrors
  uint64_t big_records = 0;     // records too large for a datagram, sent over TCP
  uint64_t untagged_to_tcp = 0; // multicast mirrors that check no tag, served over TCP instead
  uint64_t tagged = 0;          // mirrors whose datagrams carry a tag (unkeyed)
  uint64_t slow_warnings = 0;
  // Refusals and cuts, by reason.
  uint64_t conn_cap = 0;            // over max_connections
  uint64_t foreign = 0;             // from an address only_from excludes
  uint64_t handshake_timeouts = 0;  // no (complete) HELLO in time
  uint64_t malformed = 0;           // a frame that does not decode
  uint64_t oversized = 0;           // a declared length over its kind's bound
  uint64_t wrong_kind = 0;          // a frame a mirror never sends, or out of turn
  uint64_t bad_hello = 0;           // malformed HELLO, version, schema, another channel's token
  uint64_t unauthenticated = 0;     // no authentication where the source requires it
  uint64_t bad_auth = 0;            // a wrong proof
  uint64_t bad_frame_mac = 0;       // keyed: a control frame whose MAC failed (forged, replayed): closed
  uint64_t frames_unmaced = 0;      // keyed mirrors that MAC no control frames (older ones): served anyway
  uint64_t nak_dropped = 0;         // NAK ranges refused: that mirror's queue was full
  uint64_t slow_cut = 0;            // stopped reading, or too far behind
  uint64_t peer_timeouts = 0;       // fell silent
  uint64_t refused() const {
    return conn_cap + foreign + handshake_timeouts + malformed + oversized + wrong_kind + bad_hello +
           unauthenticated + bad_auth + bad_frame_mac + slow_cut + peer_timeouts;
  }
};

// MirrorView is what the source knows of one streaming mirror.
struct MirrorView {
  net::Endpoint peer;
  std::string mode;          // "multicast", "unicast", "tcp"
  bool authenticated = false;
  bool has_health = false;
  proto::Health health;      // the last report
  uint64_t lag = 0;          // records behind the ring's writer (HEALTH or TCP cursor)
  bool slow = false;
  size_t repairs_queued = 0; // NAK ranges still to answer over TCP
  size_t output_bytes = 0;   // written to its connection, not yet taken by the socket
};

class ServeControl {
 public:
  // start opens the listening socket; the worker behind `link` must
  // outlive this object. The first form maps c.ring; the second reads the
  // ring through `file`, a handle the caller shares with its other readers
  // (RingFile::share), so the ring is mapped once per process.
  static absl::StatusOr<std::unique_ptr<ServeControl>> start(const ServeControlConfig& c,
                                                             dataplane::ServeLink* link);
  static absl::StatusOr<std::unique_ptr<ServeControl>> start(const ServeControlConfig& c,
                                                             dataplane::ServeLink* link,
                                                             ring::RingFile file);
  ~ServeControl();

  // ring: the served ring, as this session maps it (the worker's share).
  const ring::RingFile& ring() const { return info_; }

  // poll runs one round: waits up to timeout_us for sockets, handles what
  // is ready (bounded work per connection), answers NAKs and streams
  // TCP-mode DATA round-robin, and enforces deadlines. Returns whether
  // answers are still waiting to be produced (the caller should not wait then).
  bool poll(uint64_t timeout_us);
  // tcp_poll_at: when the conductor must poll again for its TCP-mode
  // mirrors, which follow the ring: soon while one is behind; while all are
  // caught up the worker is asked to tell (its notify_fd wakes wait_fd) when
  // the ring moves, and the answer is only a fallback a few ms away;
  // UINT64_MAX with none.
  uint64_t tcp_poll_at(uint64_t now_ns);
  // next_poll_at: tcp_poll_at, or sooner when a replay the archive's caps
  // held back may go on (its turn returned no "more": nothing spins).
  uint64_t next_poll_at(uint64_t now_ns);
  // A replay held back by the byte cap waits for this much budget (or
  // the whole bank, if smaller); one held back by the replay cap looks
  // again after kArchiveSlotRetryNs.
  static constexpr uint64_t kArchiveQuantumBytes = 64u << 10;
  static constexpr uint64_t kArchiveSlotRetryNs = 10'000'000;
  // A mirror holds a replay slot this long at most while another waits in
  // line: then it goes to the line's back (slow readers cannot hold them).
  static constexpr uint64_t kReplaySliceNs = 1'000'000'000;
  // kMissingSegmentNs: how long a segment the catalog lists but that is
  // not there is waited for (retention removes one in milliseconds) before
  // what it held is skipped, counted in archive_errors.
  static constexpr uint64_t kMissingSegmentNs = 2'000'000'000;
  // A place in line counts while its mirror asked within this long.
  static constexpr uint64_t kArchiveLineFreshNs = 5 * kArchiveSlotRetryNs;
  static constexpr uint64_t kTcpBehindPollNs = 50'000;
  static constexpr uint64_t kTcpQuietNs = 1'000'000;  // caught up this long: ask the worker, sleep
  static constexpr uint64_t kTcpCaughtUpPollNs = 20'000'000;
  // wait_fd: readable when poll has something to do (a conductor waits on
  // it among others' and then calls poll(0)).
  int wait_fd() const { return epoll_fd_; }
  const ServeControlStats& stats() const { return stats_; }
  net::Endpoint listening() const { return listening_; }
  std::vector<MirrorView> mirrors() const;

 private:
  struct Mirror;
  ServeControl(const ServeControlConfig& c, dataplane::ServeLink* link, ring::RingFile info,
               ring::RawReader reader);

  void accept_all(uint64_t now_ns);
  bool on_readable(Mirror& m, uint64_t now_ns);
  bool on_frame(Mirror& m, const proto::Frame& f, proto::ConstBytes bytes, uint64_t now_ns);
  bool on_hello(Mirror& m, const proto::Frame& f, proto::ConstBytes bytes);
  bool on_auth(Mirror& m, const proto::Frame& f, proto::ConstBytes bytes);
  bool start_streaming(Mirror& m);
  void on_nak(Mirror& m, const proto::NakRanges& nak, uint64_t now_ns);
  void on_health(Mirror& m, const proto::Health& h, uint64_t now_ns);
  static constexpr uint64_t kLossReportNs = 50'000'000;  // dup = auto: a mirror's reports to the worker, at most one each
  // refuse sends REFUSE and closes the connection once it is written.
  void refuse(Mirror& m, proto::RefuseReason why, const std::string& text);
  // send_range appends DATA frames of records first..last (inclusive) read
  // from the shared reader, and a GAP wherever the ring skipped; at most
  // max_records. Returns the next sequence to send.
  uint64_t send_range(Mirror& m, uint64_t first, uint64_t last, uint64_t max_records,
                      uint64_t* records, bool* blocked);
  // send_archived is send_range's part below the ring's oldest record
  // (`ring_oldest`): from the archive, up to `below`. *blocked: the replay
  // or byte cap is spent (try again next turn).
  uint64_t send_archived(Mirror& m, uint64_t first, uint64_t last, uint64_t ring_oldest, uint64_t below,
                         uint64_t max_records, uint64_t* records, bool* blocked);
  // archive_first: the archive's first sequence (UINT64_MAX: none, or empty).
  uint64_t archive_first();
  // The archive's first record as archive_first() last said it, and when
  // (0: never): ranges older than it are answered without a feed.
  uint64_t archive_first_ = UINT64_MAX;
  uint64_t archive_first_at_ns_ = 0;
  // Sequences of a listed segment already waited for and found gone,
  // [lost_from_, lost_to_): another hole there is skipped at once (every
  // hole of one lost segment waited its own kMissingSegmentNs).
  uint64_t lost_from_ = UINT64_MAX;
  uint64_t lost_to_ = 0;
  static constexpr uint64_t kArchiveFirstFreshNs = 100'000'000;
  // serve_one gives mirror m one turn of TCP answers; true if it has more.
  bool serve_one(Mirror& m);
  void send_position(Mirror& m);
  // send_big_records sends up to kBigRecordsPerPass of the records too big
  // for a datagram over TCP; true if more wait.
  bool send_big_records();
  static constexpr uint32_t kBigRecordsPerPass = 256;
  void check_deadlines(uint64_t now_ns);
  // in_line: m asks for a replay place (and asked lately).
  static bool in_line(const Mirror& m, uint64_t now_ns);
  // next_in_line: fewer than `free` mirrors in line asked before m. O(1)
  // a call: the line's cutoff (line_cutoff_) is worked out again only when
  // someone joined the line, the free places changed, or kLineCutoffNs
  // passed (a place gone stale or a mirror gone moves it sooner, never
  // later) — with a thousand mirrors waiting, each asking every
  // kArchiveSlotRetryNs, a scan of the line per ask was a million looks a round.
  bool next_in_line(const Mirror& m, uint64_t now_ns, uint32_t free);
  static constexpr uint64_t kLineCutoffNs = 1'000'000;
  void preempt_replays(uint64_t now_ns);
  void drop(size_t index);
  uint64_t position(const Mirror& m) const;
  void note(const char* reason, const std::string& line);

  ServeControlConfig config_;
  dataplane::ServeLink* worker_;
  uint64_t tcp_caught_up_ns_ = 0;  // since when every TCP-mode mirror is caught up (0: one is behind)
  ring::RingFile info_;
  ring::RawReader reader_;  // shared by every answer: seek, read
  int epoll_fd_ = -1;
  int listen_fd_ = -1;
  int notify_fd_ = -1;  // the worker's "records too large for a datagram" eventfd
  net::Endpoint listening_;
  std::vector<std::unique_ptr<Mirror>> mirrors_;
  ring::LazyBytes frame_buf_;  // the largest record a TCP frame carries: pages taken as frames reach them
  net::FrameLimits limits_;
  RecentRepairs group_repairs_;  // repairs sent to the multicast group
  uint64_t repair_tokens_ = 0;   // the UDP repair budget (records)
  uint64_t budget_seen_seq_ = 0;
  uint64_t budget_ns_ = 0;
  size_t rr_next_ = 0;           // round-robin start
  uint64_t next_deadline_check_ns_ = 0;
  std::vector<std::pair<std::string, uint64_t>> last_log_ns_;
  ServeControlStats stats_;
  uint32_t replays_open_ = 0;        // mirrors holding an ArchiveReader
  uint64_t archive_line_ = 0;        // the last place in line given (Mirror::archive_place)
  // next_in_line's cutoff: the free-th earliest place in line when it was
  // worked out (UINT64_MAX: fewer were waiting), for that line and free count.
  uint64_t line_cutoff_ = UINT64_MAX;
  uint64_t line_cutoff_ns_ = 0;
  uint64_t line_cutoff_line_ = UINT64_MAX;
  uint32_t line_cutoff_free_ = 0;
  std::vector<uint64_t> line_places_;  // next_in_line's scratch
  void retry_archive_at(uint64_t t) { archive_retry_at_ns_ = std::min(archive_retry_at_ns_, t); }
  uint64_t archive_retry_at_ns_ = UINT64_MAX;  // when a held-back replay may go on
  bool archive_spent_ = false;        // the byte budget ran out: wait for a quantum
  uint64_t archive_tokens_ = 0;      // the archive byte budget (bytes)
  uint64_t archive_tokens_ns_ = 0;
};

}  // namespace ringfire::control
