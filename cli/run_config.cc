// run_config.cc — see run_config.h.
#include "cli/run_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/common.h"
#include "cli/ctl_server.h"
#include "cli/record_setup.h"
#include "cli/session_setup.h"
#include "dataplane/kernel_udp.h"
#include "ring/ring_file.h"

namespace ringfire::cli {
namespace {

// Key: one key a table may have; `flag` keys take a boolean.
struct Key {
  std::string name;
  bool flag = false;
};

std::vector<Key> keys_of(const std::vector<OptionSpec>& options) {
  std::vector<Key> keys;
  for (const OptionSpec& o : options) keys.push_back(Key{o.name, o.value == nullptr});
  return keys;
}

std::string what(const ConfigTable& t) {
  return t.kind.empty() ? std::string("top level") : absl::StrCat("[[", t.kind, "]] ", t.name);
}

absl::Status error_at(const ConfigFile& f, const ConfigTable& t, const std::string& key, const std::string& text) {
  return absl::InvalidArgumentError(
      absl::StrCat(f.where(t, key), ": ", what(t), key.empty() ? "" : absl::StrCat(", key '", key, "'"), ": ", text));
}

// check_keys refuses unknown keys and values of the wrong type.
absl::Status check_keys(const ConfigFile& f, const ConfigTable& t, const std::vector<Key>& keys) {
  for (const auto& [name, v] : t.values) {
    auto k = std::find_if(keys.begin(), keys.end(), [&](const Key& key) { return key.name == name; });
    if (k == keys.end()) {
      std::vector<std::string> names;
      for (const Key& key : keys) names.push_back(key.name);
      return error_at(f, t, name, absl::StrCat("unknown key; ", what(t).substr(0, what(t).find(' ')),
                                               " tables take: ", absl::StrJoin(names, ", ")));
    }
    if (k->flag && !v.is_bool) return error_at(f, t, name, "a switch: write true or false");
    if (!k->flag && v.is_bool) return error_at(f, t, name, "takes a value, not true or false");
    // A list is written as an array or a comma-separated string; any other
    // key takes one value (["s1"] was taken as "s1", helper-46).
    if (v.is_array && name != "accept-from" && name != "neighbors") {
      return error_at(f, t, name, "takes one value, not an array");
    }
  }
  return absl::OkStatus();
}

// args_of: the table as the command line's options (minus `skip`).
Args args_of(const std::string& command, const ConfigTable& t, const std::set<std::string>& skip) {
  std::map<std::string, std::string> values;
  for (const auto& [name, v] : t.values) {
    if (skip.count(name) != 0) continue;
    if (v.is_bool) {
      if (v.flag) values[name] = "";
    } else {
      values[name] = v.text;
    }
  }
  return Args::from_values(command, std::move(values));
}

// located: an option error, at the line of the key it names ("--mtu ...").
absl::Status located(const ConfigFile& f, const ConfigTable& t, const absl::Status& st) {
  const std::string msg(st.message());
  std::string best;
  for (const auto& [name, v] : t.values) {
    const std::string flag = "--" + name;
    const size_t at = msg.find(flag);
    const bool whole = at != std::string::npos &&
                       (at + flag.size() == msg.size() || !(std::isalnum(static_cast<unsigned char>(msg[at + flag.size()])) ||
                                                            msg[at + flag.size()] == '-'));
    if (whole && name.size() > best.size()) best = name;
  }
  return absl::Status(st.code(), absl::StrCat(f.where(t, best), ": ", what(t),
                                              best.empty() ? "" : absl::StrCat(", key '", best, "'"), ": ", msg));
}

const ConfigValue* get(const ConfigTable& t, const std::string& key) {
  auto it = t.values.find(key);
  return it == t.values.end() ? nullptr : &it->second;
}

// number: an integer key of `t` within [lo, hi] (`def` when the key is absent).
absl::StatusOr<uint64_t> number(const ConfigFile& f, const ConfigTable& t, const char* key, uint64_t lo, uint64_t hi,
                                uint64_t def) {
  const ConfigValue* v = get(t, key);
  if (v == nullptr) return def;
  uint64_t n = 0;
  if (!absl::SimpleAtoi(v->text, &n) || n < lo || n > hi) {
    return error_at(f, t, key, absl::StrCat("an integer from ", lo, " to ", hi));
  }
  return n;
}

absl::StatusOr<std::string> required(const ConfigFile& f, const ConfigTable& t, const std::string& key,
                                     const std::string& example) {
  const ConfigValue* v = get(t, key);
  if (v == nullptr || v->text.empty()) return error_at(f, t, "", absl::StrCat("needs ", key, " = ", example));
  return v->text;
}

}  // namespace

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= 32 && std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
         });
}

absl::StatusOr<DaemonOptions> daemon_options(const ConfigFile& f) {
  if (absl::Status st = check_keys(f, f.top, {{"ctl"}, {"counters-dir"}, {"eal"}, {"metrics"}, {"quiet", true}});
      !st.ok()) {
    return st;
  }
  DaemonOptions d;
  if (const ConfigValue* v = get(f.top, "ctl")) d.ctl = v->text;
  if (const ConfigValue* v = get(f.top, "counters-dir")) {
    d.counters_dir = v->text;
    if (!is_directory(d.counters_dir)) {
      return error_at(f, f.top, "counters-dir", absl::StrCat(d.counters_dir, " is not a directory: make it, or choose another"));
    }
  }
  if (const ConfigValue* v = get(f.top, "eal")) d.eal = v->text;
  if (const ConfigValue* v = get(f.top, "quiet")) d.quiet = v->flag;
  if (const ConfigValue* v = get(f.top, "metrics")) {
    auto e = net::parse_endpoint(v->text);
    if (!e.ok()) return error_at(f, f.top, "metrics", absl::StrCat(e.status().message(), " (e.g. \"198.18.0.1:9464\")"));
    d.metrics = *e;
  }
  if (d.ctl.empty()) {
    // /run/ringfire/<the config's name>.sock
    std::string stem = f.path.substr(f.path.find_last_of('/') + 1);
    if (const size_t dot = stem.rfind(".toml"); dot != std::string::npos && dot + 5 == stem.size()) stem.resize(dot);
    d.ctl = absl::StrCat(kDefaultCtlDir, "/", stem, ".sock");
  }
  if (d.ctl.size() >= 100) return error_at(f, f.top, "ctl", "a socket path of at most 99 characters");
  // An existing file at `ctl` was unlinked (helper-46): found at --check.
  if (std::string why = ctl_path_problem(d.ctl); !why.empty()) return error_at(f, f.top, "ctl", why);
  return d;
}

absl::StatusOr<engine::PortSpec> port_spec(const ConfigFile& f, const ConfigTable& t) {
  static const std::vector<Key> kKeys = {{"name"}, {"backend"}, {"iface"}, {"device"}, {"pmd"},
                                         {"ip"},   {"mtu"},     {"ttl"},   {"idle"},   {"lcore"},
                                         {"neighbors"}, {"require"}, {"gso", true}, {"gro", true}, {"queues"}};
  if (absl::Status st = check_keys(f, t, kKeys); !st.ok()) return st;
  engine::PortSpec p;
  if (const ConfigValue* v = get(t, "gso")) p.gso = v->flag;
  if (const ConfigValue* v = get(t, "gro")) p.gro = v->flag;
  auto name = required(f, t, "name", "\"eth0\"");
  if (!name.ok()) return name.status();
  if (!valid_name(*name)) return error_at(f, t, "name", "1 to 32 letters, digits, '_', '-' or '.'");
  p.name = *name;
  std::string backend = "kernel";
  if (const ConfigValue* b = get(t, "backend")) backend = b->text;
  if (backend == "kernel") {
    p.backend = engine::PortSpec::Backend::kKernel;
  } else if (backend == "dpdk") {
    p.backend = engine::PortSpec::Backend::kDpdk;
  } else if (backend == "auto") {
    p.backend = engine::PortSpec::Backend::kAuto;
  } else {
    return error_at(f, t, "backend", absl::StrCat("'", backend, "': kernel, dpdk or auto"));
  }
  if (const ConfigValue* v = get(t, "iface")) {
    p.iface = v->text;
    auto ip = net::interface_address(p.iface);
    if (!ip.ok() && !get(t, "ip")) {
      return error_at(f, t, "iface", absl::StrCat(ip.status().message(), "; give ip = ... too"));
    }
  }
  if (const ConfigValue* v = get(t, "device")) p.device = v->text;
  if (const ConfigValue* v = get(t, "pmd")) {
    auto r = engine::parse_rung(v->text);
    if (!r.ok() || (*r != engine::Rung::kAfXdp && *r != engine::Rung::kAfPacket)) {
      return error_at(f, t, "pmd", absl::StrCat("'", v->text, "': af_xdp or af_packet (another PMD: device = ...)"));
    }
    p.pmd = *r;
  }
  if (const ConfigValue* v = get(t, "require")) {
    auto r = engine::parse_rung(v->text);
    if (!r.ok()) return error_at(f, t, "require", std::string(r.status().message()));
    if (p.backend != engine::PortSpec::Backend::kAuto) return error_at(f, t, "require", "only with backend = \"auto\"");
    p.require = *r;
  }
  if (p.backend != engine::PortSpec::Backend::kKernel && p.iface.empty() && p.device.empty()) {
    return error_at(f, t, "backend", "a DPDK port needs iface = \"...\" (a vdev on it) or device = \"...\"");
  }
  if (p.backend == engine::PortSpec::Backend::kKernel) {
    for (const char* k : {"device", "pmd", "lcore", "neighbors", "queues"}) {
      if (get(t, k)) return error_at(f, t, k, "only for backend = \"dpdk\" or \"auto\"");
    }
  } else if (p.backend == engine::PortSpec::Backend::kDpdk) {
    for (const char* k : {"gso", "gro"}) {
      if (get(t, k)) return error_at(f, t, k, "only for backend = \"kernel\" or \"auto\" (the kernel's UDP sockets)");
    }
  }
  if (const ConfigValue* v = get(t, "ip")) {
    auto e = net::parse_endpoint(v->text, 0);
    if (!e.ok()) return error_at(f, t, "ip", std::string(e.status().message()));
    p.ip = e->ip;
  }
  auto mtu = number(f, t, "mtu", 64, dataplane::kMaxDatagram, 1472);
  auto ttl = number(f, t, "ttl", 1, 255, 1);
  auto lcore = number(f, t, "lcore", 1, 127, 0);
  auto queues = number(f, t, "queues", 1, 16, 1);  // a worker each
  for (const auto* n : {&mtu, &ttl, &lcore, &queues}) {
    if (!n->ok()) return n->status();
  }
  p.queues = static_cast<uint16_t>(*queues);
  p.mtu = static_cast<uint16_t>(*mtu);
  p.ttl = static_cast<uint8_t>(*ttl);
  p.lcore = *lcore == 0 ? -1 : static_cast<int>(*lcore);
  if (const ConfigValue* v = get(t, "idle")) {
    auto m = parse_idle(v->text);
    if (!m.ok()) return error_at(f, t, "idle", std::string(m.status().message()));
    p.idle = *m;
  }
  if (const ConfigValue* v = get(t, "neighbors")) {
    auto n = dataplane::parse_neighbors(v->text);
    if (!n.ok()) return error_at(f, t, "neighbors", std::string(n.status().message()));
    p.neighbors = std::move(*n);
  }
  return p;
}

absl::StatusOr<SessionSpec> session_spec(const ConfigFile& f, const ConfigTable& t,
                                         const std::vector<std::string>& ports) {
  const bool serve = t.kind == "serve";
  std::vector<Key> keys = keys_of(serve ? serve_session_options() : mirror_session_options());
  keys.push_back({"name"});
  keys.push_back({"port"});
  keys.push_back({"ring"});
  if (!serve) keys.push_back({"source"});
  if (absl::Status st = check_keys(f, t, keys); !st.ok()) return st;
  auto name = required(f, t, "name", "\"a-name\"");
  if (!name.ok()) return name.status();
  if (!valid_name(*name)) return error_at(f, t, "name", "1 to 32 letters, digits, '_', '-' or '.'");
  std::string port;
  if (const ConfigValue* v = get(t, "port")) {
    port = v->text;
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) {
      return error_at(f, t, "port", absl::StrCat("no [[port]] named '", port, "' (ports: ", absl::StrJoin(ports, ", "), ")"));
    }
  } else if (ports.size() == 1) {
    port = ports[0];
  } else {
    return error_at(f, t, "", absl::StrCat("needs port = \"...\": one of ", absl::StrJoin(ports, ", ")));
  }
  auto ring = required(f, t, "ring", "\"a-ring\"");
  if (!ring.ok()) return ring.status();
  SessionSpec out;
  const Args args = args_of(t.kind, t, {"name", "port", "ring", "source"});
  if (serve) {
    for (const ConfigTable& m : f.mirrors) {
      const ConfigValue* r = get(m, "ring");
      if (r != nullptr && ring::ring_path(r->text) == ring::ring_path(*ring)) out.follows = m.name;
    }
    // Its archive made by a [[record]] of this config, of this ring: there
    // once that runs.
    bool archive_recorded_here = false;
    if (const ConfigValue* a = get(t, "archive")) {
      for (const ConfigTable& r : f.records) {
        const ConfigValue* d = get(r, "dir");
        const ConfigValue* rr = get(r, "ring");
        if (d != nullptr && rr != nullptr && same_path_key(d->text) == same_path_key(a->text) &&
            same_path_key(ring::ring_path(rr->text)) == same_path_key(ring::ring_path(*ring))) {
          archive_recorded_here = true;
        }
      }
    }
    auto spec = parse_serve_session(args, *ring, !out.follows.empty(), archive_recorded_here);
    // The ring's own problems name key 'ring'; an option's (--archive ...)
    // are located by the option.
    if (!spec.ok() && !absl::StartsWith(spec.status().message(), "--") &&
        spec.status().message().find(" ring ") != std::string::npos) {
      return error_at(f, t, "ring", absl::StrCat(spec.status().message(), " (create it with ringfire create)"));
    }
    if (!spec.ok()) return located(f, t, spec.status());
    spec->name = *name;
    spec->port = port;
    out.serve = std::move(*spec);
  } else {
    auto source = required(f, t, "source", "\"198.18.0.1:7400\"");
    if (!source.ok()) return source.status();
    auto o = parse_mirror_session(args, *source, *ring);
    if (!o.ok()) {
      if (o.status().message().find(*source) != std::string::npos) {
        return error_at(f, t, "source", std::string(o.status().message()));
      }
      return located(f, t, o.status());
    }
    engine::MirrorSpec m;
    m.name = *name;
    m.port = port;
    m.options = std::move(*o);
    m.options.wait_for_source = true;  // a daemon's mirror waits for its source (start order does not matter)
    out.mirror = std::move(m);
  }
  return out;
}

absl::StatusOr<RecordSpec> record_spec(const ConfigFile& f, const ConfigTable& t) {
  std::vector<Key> keys = keys_of(record_options());
  keys.push_back({"ring"});
  if (absl::Status st = check_keys(f, t, keys); !st.ok()) return st;
  RecordSpec out;
  auto name = required(f, t, "name", "\"a-name\"");
  if (!name.ok()) return name.status();
  if (!valid_name(*name)) return error_at(f, t, "name", "1 to 32 letters, digits, '_', '-' or '.'");
  auto ring = required(f, t, "ring", "\"a-ring\"");
  if (!ring.ok()) return ring.status();
  if (!get(t, "dir")) return error_at(f, t, "dir", "needs dir = \"/path/to/archive\": where its segments go");
  // `name` is the table's; the recorder's registry name is the default.
  auto o = parse_record_options(args_of(t.kind, t, {"name", "ring"}));
  if (!o.ok()) return located(f, t, o.status());
  out.name = *name;
  out.ring = *ring;
  out.options = std::move(*o);
  return out;
}

absl::StatusOr<NodeSpec> node_spec(const ConfigFile& f, const ConfigTable& t, const std::vector<engine::PortSpec>& ports) {
  static const std::vector<Key> kKeys = {
      {"name"},        {"port"},           {"listen"},          {"psk-file"},      {"credit"},
      {"flush"},       {"no-mux", true},   {"silent-peer-ms"},  {"accept-timeout-ms"},
      {"max-channels"}, {"max-channels-per-source"}, {"max-pending-per-source"}, {"channel-records"},
      {"max-streams-per-peer"}, {"resume-window-ms"}, {"no-tickets", true}};
  if (absl::Status st = check_keys(f, t, kKeys); !st.ok()) return st;
  NodeSpec n;
  auto name = required(f, t, "name", "\"tokens\"");
  if (!name.ok()) return name.status();
  if (!valid_name(*name)) return error_at(f, t, "name", "1 to 32 letters, digits, '_', '-' or '.'");
  n.name = *name;
  const engine::PortSpec* port = nullptr;
  if (const ConfigValue* v = get(t, "port")) {
    for (const engine::PortSpec& p : ports) port = p.name == v->text ? &p : port;
    if (port == nullptr) return error_at(f, t, "port", absl::StrCat("no [[port]] named '", v->text, "'"));
  } else if (ports.size() == 1) {
    port = &ports[0];
  } else {
    std::vector<std::string> names;
    for (const engine::PortSpec& p : ports) names.push_back(p.name);
    return error_at(f, t, "", absl::StrCat("needs port = \"...\": one of ", absl::StrJoin(names, ", ")));
  }
  auto listen = required(f, t, "listen", "\"198.18.0.1:7600\" (the control address peers attach to)");
  if (!listen.ok()) return listen.status();
  auto at = net::parse_endpoint(*listen);
  if (!at.ok()) return error_at(f, t, "listen", std::string(at.status().message()));
  if (at->ip == 0) return error_at(f, t, "listen", "give the address peers reach (not 0.0.0.0)");
  node::NodeOptions& o = n.options;
  o.control = *at;
  // A stable name for the run: the worker id (the handles' upper half) is its hash.
  o.instance_id = absl::StrCat(n.name, "-", getpid(), "-", *listen);
  o.port.name = port->name;
  o.port.ip = port->ip;  // 0: the control address
  o.port.mtu = port->mtu;
  if (port->mtu < 256) {
    return error_at(f, t, "port", absl::StrCat("port ", port->name, "'s mtu ", port->mtu,
                                               " is below the 256 a node's channels need: raise it, or give the node another port"));
  }
  const ConfigValue* no_mux = get(t, "no-mux");
  o.mux.enabled = no_mux == nullptr || !no_mux->flag;
  const ConfigValue* no_tickets = get(t, "no-tickets");
  o.tickets = no_tickets == nullptr || !no_tickets->flag;
  auto credit = number(f, t, "credit", 1, 65535, o.mux.initial_credit);
  auto silent = number(f, t, "silent-peer-ms", 0, 3'600'000, o.silent_peer_ms);
  auto accept = number(f, t, "accept-timeout-ms", 100, 3'600'000, o.mux.accept_timeout_ns / 1'000'000);
  auto channels = number(f, t, "max-channels", 1, 4096, o.max_channels);
  auto per_source = number(f, t, "max-channels-per-source", 1, 4096, o.max_channels_per_source);
  auto pending = number(f, t, "max-pending-per-source", 1, 4096, o.max_pending_per_source);
  auto records = number(f, t, "channel-records", 64, 1u << 22, o.channel_records);
  auto streams = number(f, t, "max-streams-per-peer", 1, 1u << 20, o.mux.max_streams_per_peer);
  auto resume = number(f, t, "resume-window-ms", 0, 3'600'000, o.resume_window_ns / 1'000'000);
  for (const auto* x : {&credit, &silent, &accept, &channels, &per_source, &pending, &records, &streams, &resume}) {
    if (!x->ok()) return x->status();
  }
  if ((*records & (*records - 1)) != 0) return error_at(f, t, "channel-records", "a power of two");
  o.mux.initial_credit = static_cast<uint32_t>(*credit);
  o.silent_peer_ms = static_cast<uint32_t>(*silent);
  o.mux.accept_timeout_ns = *accept * 1'000'000;
  o.max_channels = static_cast<uint32_t>(*channels);
  o.max_channels_per_source = static_cast<uint32_t>(*per_source);
  o.max_pending_per_source = static_cast<uint32_t>(*pending);
  o.channel_records = static_cast<uint32_t>(*records);
  o.mux.max_streams_per_peer = static_cast<uint32_t>(*streams);
  o.resume_window_ns = *resume * 1'000'000;
  if (const ConfigValue* v = get(t, "flush")) {
    auto fl = parse_flush(v->text);
    if (!fl.ok()) return error_at(f, t, "flush", "auto, manual or linger:MICROSECONDS");
    o.mux.flush = *fl;
  }
  if (const ConfigValue* v = get(t, "psk-file")) {
    auto k = net::load_psk(v->text);
    if (!k.ok()) return error_at(f, t, "psk-file", std::string(k.status().message()));
    o.psk = std::move(*k);
  }
  if (absl::Status st = mux::validate(o.mux); !st.ok()) return error_at(f, t, "", std::string(st.message()));
  return n;
}

}  // namespace ringfire::cli
