// session_setup.cc — see session_setup.h.
#include "cli/session_setup.h"

#include <cstdio>
#include <sys/random.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "archive/segment_writer.h"
#include "cli/common.h"
#include "cli/dpdk_options.h"
#include "dataplane/kernel_udp.h"

namespace ringfire::cli {

std::vector<OptionSpec> serve_session_options() {
  return with_fault_options({
        {"listen", "ADDR:PORT", "TCP address for mirrors (required)"},
        {"multicast", "GROUP:PORT", "send DATA to this group (239.255.0.0/16 in labs)"},
        {"iface", "IF", "interface for multicast sends (default: the --listen address)"},
        {"ttl", "N", "multicast TTL (default 1)"},
        {"mtu", "BYTES", "largest UDP payload (default 1472)"},
        {"udp", "PORT", "UDP port mirrors punch for unicast DATA"},
        {"dup", "N|auto", "send every datagram N times (default 1); auto: each unicast mirror's twice "
                          "while its reported loss is above 1 %, once again below 0.2 %"},
        {"pace-us", "US", "pacing interval: a partial frame leaves at most US after the previous one (default: 50 on the kernel backend, 5 on DPDK)"},
        {"heartbeat-us", "US", "heartbeat interval while idle (default 1000)"},
        {"repair-udp-max", "N", "NAKs of up to N records are also repaired by UDP, through the data plane, "
                                "besides TCP (default 1024; 0: TCP only)"},
        {"heartbeat-max-us", "US", "heartbeats back off while idle up to this (default 100000)"},
        {"from", "WHERE", "where the UDP stream starts: latest (default) or oldest"},
        {"psk-file", "FILE", "require mirrors to authenticate with this pre-shared key (>= 32 bytes, "
                             "mode 600); every datagram then carries a MAC"},
        {"max-connections", "N", "TCP connections at most (default 256); more are refused"},
        {"handshake-timeout", "DURATION", "a connection must complete its HELLO within (default 5s)"},
        {"peer-timeout", "DURATION", "a mirror silent this long is dropped (default 5s; mirrors report every 100 ms)"},
        {"stall-timeout", "DURATION", "a mirror that reads nothing of what it was sent this long is dropped (default 10s)"},
        {"slow-mirror-pct", "PCT", "warn when a mirror lags by this share of the ring (default 50)"},
        {"archive", "DIR", "the ring's archive (ringfire record): what the ring no longer holds is answered "
                           "from it, not with a GAP; \"oldest\" is its first record"},
        {"archive-replays", "N", "mirrors read from the archive at once, at most (default 4)"},
        {"archive-rate", "BYTES", "archive bytes sent per second, all mirrors (default 256Mi, at least 1Mi)"},
  });
}

absl::StatusOr<engine::ServeSpec> parse_serve_session(const Args& args, const std::string& ring, bool may_follow,
                                                      bool archive_recorded_here) {
  if (!args.has("listen")) {
    return absl::InvalidArgumentError("--listen ADDR:PORT is required");
  }
  auto listen = net::parse_endpoint(args.str("listen"));
  if (!listen.ok()) return listen.status();
  if ((listen->ip >> 28) == 0xE || listen->ip == 0xFFFFFFFF) {
    return absl::InvalidArgumentError(absl::StrCat("--listen ", args.str("listen"),
                                                   ": a multicast or broadcast address; give this host's own address "
                                                   "(the group is --multicast)"));
  }
  auto ttl = args.count("ttl", 1);
  auto mtu = args.count("mtu", 1472);
  auto udp_port = args.count("udp", 0);
  const bool dup_auto = args.str("dup") == "auto";
  auto dup = dup_auto ? absl::StatusOr<uint64_t>(1) : args.count("dup", 1);
  if (!dup.ok()) return absl::InvalidArgumentError(absl::StrCat("--dup ", args.str("dup"), ": a number of copies (1 to 16) or auto"));
  auto pace = args.count("pace-us", 50);
  auto heartbeat = args.count("heartbeat-us", 1000);
  auto repair_max = args.count("repair-udp-max", 1024);
  auto heartbeat_max = args.count("heartbeat-max-us", 100000);
  auto max_conns = args.count("max-connections", 256);
  auto slow_pct = args.count("slow-mirror-pct", 50);
  auto handshake = args.duration_ns("handshake-timeout", 5'000'000'000);
  auto peer_timeout = args.duration_ns("peer-timeout", 5'000'000'000);
  auto stall_timeout = args.duration_ns("stall-timeout", 10'000'000'000);
  auto archive_replays = args.count("archive-replays", 4);
  auto archive_rate = args.count("archive-rate", 256ull << 20);
  auto faults = parse_faults(args);
  for (const auto* s : {&ttl, &mtu, &udp_port, &dup, &pace, &heartbeat, &repair_max, &heartbeat_max,
                        &max_conns, &slow_pct, &handshake, &peer_timeout, &stall_timeout, &archive_replays,
                        &archive_rate}) {
    if (!s->ok()) return s->status();
  }
  if (*max_conns == 0 || *max_conns > 4096) {
    return absl::InvalidArgumentError("--max-connections: between 1 and 4096");
  }
  if (*slow_pct == 0 || *slow_pct > 100) {
    return absl::InvalidArgumentError("--slow-mirror-pct: between 1 and 100");
  }
  if (*handshake < 100'000'000 || *peer_timeout < 500'000'000 || *stall_timeout < 500'000'000) {
    return absl::InvalidArgumentError(
                             "--handshake-timeout must be at least 100ms, --peer-timeout and --stall-timeout at least 500ms");
  }
  if (!faults.ok()) return faults.status();
  // One message per flag, naming it (one message for five said which was wrong of none, helper-46).
  for (auto [bad, why] : {std::pair{*ttl == 0 || *ttl > 255, "--ttl: 1 to 255"},
                          std::pair{*mtu < 64 || *mtu > dataplane::kMaxDatagram, "--mtu: 64 to 65507 (UDP payload bytes)"},
                          std::pair{*udp_port > 65535, "--udp: a port, 1 to 65535 (0: no unicast)"},
                          std::pair{*dup == 0 || *dup > 16, "--dup: a number of copies (1 to 16) or auto"},
                          std::pair{*repair_max > 65536, "--repair-udp-max: at most 65536"},
                          std::pair{*heartbeat < 100 || *heartbeat > 10'000'000,
                                    "--heartbeat-us: 100 to 10000000 (0 sent heartbeats flat out)"},
                          std::pair{*pace > 1'000'000, "--pace-us: at most 1000000 (a second)"},
                          std::pair{*heartbeat_max > 60'000'000, "--heartbeat-max-us: at most 60000000 (a minute)"},
                          std::pair{*heartbeat_max < *heartbeat, "--heartbeat-max-us must be at least --heartbeat-us"}}) {
    if (bad) return absl::InvalidArgumentError(why);
  }
  if (dup_auto && !args.has("udp")) {
    return absl::InvalidArgumentError("--dup auto acts on unicast mirrors: give --udp PORT too, or a number of copies");
  }
  const std::string from = args.str("from", "latest");
  if (from != "latest" && from != "oldest") {
    return absl::InvalidArgumentError("--from: latest or oldest");
  }
  std::optional<net::Endpoint> group;
  if (args.has("multicast")) {
    auto g = net::parse_endpoint(args.str("multicast"));
    if (!g.ok()) return g.status();
    if ((g->ip >> 28) != 0xE) {
      return absl::InvalidArgumentError(absl::StrCat("--multicast ", args.str("multicast"),
                                                     " is not a multicast group (224.0.0.0/4; labs use 239.255.0.0/16)"));
    }
    if ((g->ip >> 8) == 0xE00000) {  // all hosts, all routers, IGMP itself: every host on the link takes these
      return absl::InvalidArgumentError(absl::StrCat("--multicast ", args.str("multicast"),
                                                     " is link-local control (224.0.0.0/24): choose a group in "
                                                     "239.0.0.0/8 (labs use 239.255.0.0/16)"));
    }
    if (g->port == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--multicast ", args.str("multicast"),
                                                     ": give the group's port (mirrors join GROUP:PORT)"));
    }
    group = *g;
  }
  auto iface = iface_address(args, listen->ip);
  if (!iface.ok()) return iface.status();
  const uint32_t iface_ip = *iface;
  if (group && iface_ip == 0) {
    return absl::InvalidArgumentError(
                             "multicast needs an interface: give --iface, or --listen on an address");
  }
  std::optional<net::Psk> psk;
  if (args.has("psk-file")) {
    auto k = net::load_psk(args.str("psk-file"));
    if (!k.ok()) return k.status();
    psk = std::move(*k);
  }
  std::string ring_path = ring::ring_path(ring);  // the engine attaches its readers to it
  if (!may_follow) {
    auto file = ring::RingFile::open(ring);
    if (!file.ok()) return file.status();
    ring_path = file->path();
  }

  uint8_t session = 0;
  while (session == 0) {
    if (getrandom(&session, 1, 0) != 1) session = static_cast<uint8_t>(getpid() | 1);
  }
  engine::ServeSpec spec;
  spec.name = "serve";
  spec.port = "port0";
  spec.ring = ring_path;
  spec.from_oldest = from == "oldest";
  spec.udp_port = static_cast<uint16_t>(*udp_port);  // 0: one the port picks (and holds)
  spec.unicast = args.has("udp");
  spec.iface_ip = iface_ip;
  spec.worker.session = session;
  spec.worker.mtu = static_cast<uint16_t>(*mtu);
  spec.worker.pace_ns = *pace * 1000;
  spec.pace_given = args.has("pace-us");
  spec.worker.heartbeat_ns = *heartbeat * 1000;
  spec.worker.heartbeat_max_ns = *heartbeat_max * 1000;
  spec.worker.dup = static_cast<uint32_t>(*dup);
  spec.worker.dup_auto = dup_auto;
  spec.worker.multicast = group;
  spec.worker.tx_faults = *faults;
  spec.bind_ip = listen->ip;  // a kernel port's socket binds it (a DPDK port has its own address)
  control::ServeControlConfig& cc = spec.control;
  cc.listen = *listen;
  cc.ttl = static_cast<uint8_t>(*ttl);
  cc.udp_repair_max = static_cast<uint32_t>(*repair_max);
  cc.dup_auto = dup_auto;
  cc.max_connections = static_cast<uint32_t>(*max_conns);
  cc.handshake_timeout_ns = *handshake;
  cc.peer_timeout_ns = *peer_timeout;
  cc.stall_timeout_ns = *stall_timeout;
  cc.slow_mirror_share = static_cast<double>(*slow_pct) / 100.0;
  if (args.has("archive")) {
    cc.archive_dir = args.str("archive");
    if (auto a = archive::load_catalog(cc.archive_dir); !a.ok() && !archive_recorded_here) {
      return absl::InvalidArgumentError(absl::StrCat("--archive ", cc.archive_dir, ": ", a.status().message(),
                                                     " (record the ring there first: ringfire record)"));
    }
  }
  if (*archive_replays == 0 || *archive_replays > 1024) {
    return absl::InvalidArgumentError("--archive-replays: between 1 and 1024");
  }
  if (*archive_rate < (1u << 20)) return absl::InvalidArgumentError("--archive-rate: at least 1Mi (bytes a second)");
  cc.archive_replays = static_cast<uint32_t>(*archive_replays);
  cc.archive_bytes_per_s = *archive_rate;
  if (psk) {
    // One salt per serve process: every datagram of this incarnation is
    // MACed under the key derived from it (multicast has one datagram for
    // every mirror); each mirror learns the salt in the handshake.
    cc.salt = net::random_nonce();
    spec.worker.data_key = net::data_key(*psk, cc.salt);
    cc.psk = std::move(psk);
  } else {
    if (spec.unicast) {
      std::fprintf(stderr,
                   "warning: serve: %s is served by unicast without a key: anyone who can reach this host can "
                   "mirror it, and only a datagram tag stands between its mirrors and a spoofer. Across sites, "
                   "make a key (ringfire keygen KEYFILE) and pass --psk-file KEYFILE here and on every mirror\n",
                   ring.c_str());
    }
  }
  if (!cc.psk && group) {
    // Unkeyed: one random tag per serve process ends every datagram to the
    // group, announced to each mirror on its connection only; a blind
    // spoofer of the source's address must guess 64 bits, not the
    // session byte's 8 (unicast mirrors get tags of their own).
    cc.multicast_tag = net::random_tag();
    spec.worker.tag = cc.multicast_tag;
  }

  return spec;
}

std::vector<OptionSpec> shorthand_options() {
  return {
      {"idle", "MODE", "worker idle strategy: spin, yield, backoff (default) or hot (yield for 50 ms after the last work, then back off)"},
      {"counters-dir", "DIR", "keep the counters file (for `ringfire stat`) here (default /dev/shm)"},
      {"quiet", nullptr, "no per-second stats lines"},
      {"json", nullptr, "each second's stats as one JSON object per line (every counter)"},
      {"metrics", "ADDR:PORT", "serve Prometheus metrics at http://ADDR:PORT/metrics (default: off)"},
  };
}

std::vector<OptionSpec> mirror_session_options() {
  return with_fault_options({
        {"from", "WHERE", "latest, oldest, or a sequence (default: resume, else latest); a ring that "
                          "already ends past it resumes at its end"},
        {"unicast", nullptr, "ask for UDP unicast (punch) instead of multicast"},
        {"tcp", nullptr, "ask for DATA on the TCP connection"},
        {"schema", "N", "refuse a source ring with another schema signature"},
        {"dir", "DIR", "directory for the ring (default /dev/shm)"},
        {"hold", "N", "hold-back depth in frames (default 8192)"},
        {"nak-repeat-us", "US", "repeat an unanswered NAK after (default 20000; the first repeat comes "
                                "sooner: the measured repair time plus four times its variation)"},
        {"single-range-naks", nullptr, "one range per NAK, as a peer without multi-range NAKs (A/B)"},
        {"psk-file", "FILE", "authenticate with this pre-shared key (the source's), and believe only "
                             "datagrams that carry its MAC"},
        {"accept-from", "IP,...", "also believe UDP from these addresses (a multicast relay); by default "
                                  "only the source's announced data address"},
        {"peer-timeout", "DURATION", "give the source up when it is silent this long (default 5s)"},
        {"health-interval", "DURATION", "report HEALTH to the source this often (default 100ms, 1ms to 1s; "
                                        "a source of a thousand mirrors pays for each report)"},
        {"once", nullptr, "exit when the source goes away instead of reconnecting"},
  });
}

absl::StatusOr<control::MirrorOptions> parse_mirror_session(const Args& args, const std::string& source_text,
                                                           const std::string& ring) {
  control::MirrorOptions o;
  auto source = net::parse_endpoint(source_text);
  if (!source.ok()) return source.status();
  if (source->ip == 0 || (source->ip >> 28) == 0xE || source->port == 0) {  // it retried such a source for ever
    return absl::InvalidArgumentError(absl::StrCat(
        "source ", source_text, ": the serve's own address and listen port (a unicast IP:PORT, not 0.0.0.0, a "
        "multicast group or port 0: the serve announces its group itself)"));
  }
  o.source = *source;
  o.ring = ring;
  o.dir = args.str("dir", "/dev/shm");
  if (o.dir.empty()) return absl::InvalidArgumentError("--dir is empty: give the mirror ring's directory (default /dev/shm)");
  o.unicast = args.has("unicast");
  o.tcp_only = args.has("tcp");
  if (o.unicast && o.tcp_only) {
    return absl::InvalidArgumentError("--unicast and --tcp exclude each other");
  }
  if (args.has("from")) {
    const std::string from = args.str("from");
    if (from == "latest") {
      o.from = control::MirrorOptions::From::kLatest;
    } else if (from == "oldest") {
      o.from = control::MirrorOptions::From::kOldest;
    } else if (absl::SimpleAtoi(from, &o.from_seq)) {
      o.from = control::MirrorOptions::From::kSequence;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
                                "--from ", from, ": expected latest, oldest or a sequence number"));
    }
  }
  auto schema = parse_schema(args.str("schema", "0"));
  auto hold = args.count("hold", 8192);
  auto nak_us = args.count("nak-repeat-us", 20000);
  auto faults = parse_faults(args);
  for (const auto* s : {&schema, &hold, &nak_us}) {
    if (!s->ok()) return s->status();
  }
  if (!faults.ok()) return faults.status();
  if (*hold == 0 || *hold > (1u << 20)) {
    return absl::InvalidArgumentError("--hold must be between 1 and 1048576");
  }
  o.expected_schema = *schema;
  auto peer_timeout = args.duration_ns("peer-timeout", 5'000'000'000);
  if (!peer_timeout.ok()) return peer_timeout.status();
  if (*peer_timeout < 500'000'000) {
    return absl::InvalidArgumentError("--peer-timeout must be at least 500ms");
  }
  o.peer_timeout_ns = *peer_timeout;
  auto health = args.duration_ns("health-interval", 100'000'000);
  if (!health.ok()) return health.status();
  if (*health < 1'000'000 || *health > 1'000'000'000) {
    return absl::InvalidArgumentError("--health-interval: between 1ms and 1s (PROTOCOL.md §1.7)");
  }
  if (*health * 2 > *peer_timeout) {
    return absl::InvalidArgumentError(
        "--health-interval: at most half of --peer-timeout (the source's answers to HEALTH are what that timeout waits for)");
  }
  o.health_interval_ns = *health;
  if (args.has("psk-file")) {
    auto k = net::load_psk(args.str("psk-file"));
    if (!k.ok()) return k.status();
    o.psk = std::move(*k);
  }
  for (absl::string_view ip : absl::StrSplit(args.str("accept-from"), ',', absl::SkipEmpty())) {
    auto e = net::parse_endpoint(std::string(ip), 0);
    if (!e.ok()) return absl::InvalidArgumentError(absl::StrCat("--accept-from: ", e.status().message()));
    if (o.accept_from.size() == 8) return absl::InvalidArgumentError("--accept-from: at most 8 addresses");
    o.accept_from.push_back(e->ip);
  }
  o.worker.protocol.hold_back_frames = static_cast<uint32_t>(*hold);
  o.worker.protocol.nak_repeat_ns = *nak_us * 1000;
  o.multi_range_naks = !args.has("single-range-naks");
  o.worker.rx_faults = *faults;
  o.reconnect = !args.has("once");
  if (o.unicast && !o.psk) {
    std::fprintf(stderr,
                 "warning: mirror: a unicast mirror of %s without a key: the source is not proven, and only a "
                 "datagram tag stands between this mirror and a spoofer. Across sites, pass --psk-file KEYFILE "
                 "(the source's; make one with ringfire keygen KEYFILE)\n",
                 source_text.c_str());
  }
  return o;
}

}  // namespace ringfire::cli
