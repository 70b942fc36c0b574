// _ringfire.cc — the extension behind the Python package `ringfire`
// (pybind11): the stream multiplexer's Node, Anchor and Sender, the same
// API as node/node.h, and the calls that take a whole decode step at once
// (Node.send_many, Node.poll). Every call that takes the node's lock
// releases the GIL while it holds it (another thread of the process may
// hold the lock: the GIL must never wait on it). Errors are ValueError (bad
// arguments, refused configs: the message says what to change) or
// ConnectionError (attach).
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dataplane/kernel_udp.h"
#include "engine/ports.h"
#include "node/node.h"
#include "ring/idle.h"
#include "ringfire_config.h"

namespace py = pybind11;
using ringfire::node::Anchor;
using ringfire::node::AnchorKind;
using ringfire::node::Item;
using ringfire::node::Node;
using ringfire::node::NodeOptions;
using ringfire::node::Polled;
using ringfire::node::SendOne;
using ringfire::node::Sender;

namespace {

ringfire::mux::FlushPolicy parse_flush(const std::string& f) {
  if (f == "auto") return {};
  if (f == "manual") return ringfire::mux::FlushPolicy::manual();
  uint64_t us = 0;
  if (f.rfind("linger:", 0) == 0 && absl::SimpleAtoi(f.substr(7), &us) && us > 0 && us <= 1'000'000) {
    return ringfire::mux::FlushPolicy::linger(us * 1000);
  }
  throw py::value_error(absl::StrCat("flush '", f, "': use 'auto', 'manual' or 'linger:MICROSECONDS' (1 to 1000000)"));
}

ringfire::net::Endpoint endpoint(const std::string& s) {
  auto e = ringfire::net::parse_endpoint(s);
  if (!e.ok()) throw py::value_error(std::string(e.status().message()));
  return *e;
}

const char* status_name(ringfire::mux::SendStatus s) {
  switch (s) {
    case ringfire::mux::SendStatus::kSent: return "sent";
    case ringfire::mux::SendStatus::kFull: return "full";
    case ringfire::mux::SendStatus::kClosed: return "closed";
    case ringfire::mux::SendStatus::kTooLarge: return "too_large";
  }
  return "unknown";
}

const char* kind_name(Item::Kind k) {
  return k == Item::Kind::kData ? "data" : k == Item::Kind::kFinished ? "finished" : "dropped";
}

// sender_of: the Sender a Python object wraps (a TypeError if it is none).
// The exact type is checked against pybind's own record once looked up:
// send_many casts a decode step's worth of senders per call.
Sender* sender_of(PyObject* o) {
  static const py::detail::type_info* info = py::detail::get_type_info(typeid(Sender));
  if (Py_TYPE(o) == info->type) {
    auto* inst = reinterpret_cast<py::detail::instance*>(o);
    return static_cast<Sender*>(inst->get_value_and_holder(info).value_ptr());
  }
  // A subclass, or not a Sender at all (raises); None casts to a null
  // pointer, which the node would follow (review helper-36).
  Sender* s = o == Py_None ? nullptr : py::cast<Sender*>(py::handle(o));
  if (s == nullptr) throw py::type_error("send_many: a sender is None, not a Sender");
  return s;
}

// After fork() the child has its parent's nodes' memory and none of their
// threads; their locks may be held by a thread that is not there. A call on
// an object the parent made refuses in the child (inherited()), and the
// child never destroys one (that joins threads it does not have, and
// removes the parent's rings): it leaves them to exit. It crashed at exit,
// and read its parent's streams (review helper-36). Nodes the child makes
// are its own.
template <typename T>
void not_inherited(const T& o) {
  if (o.inherited()) {
    throw std::runtime_error(
        "this ringfire Node, Anchor or Sender was made before fork(): the child cannot use it; make a new Node "
        "in the child");
  }
}

// ForkSafe: the holders' deleter (pybind's): an inherited object is left.
template <typename T>
struct ForkSafe {
  void operator()(T* p) const {
    if (!p->inherited()) delete p;
  }
};
template <typename T>
using Held = std::unique_ptr<T, ForkSafe<T>>;
template <typename T>
Held<T> fork_safe(std::unique_ptr<T> p) {
  return Held<T>(p.release());
}

// wait_ns: a call's `seconds` to wait, or a ValueError naming the call
// (negative, NaN or past a million seconds has no nanosecond count).
uint64_t wait_ns(double seconds, const char* call) {
  if (!(seconds >= 0) || seconds > 1e6) throw py::value_error(absl::StrCat(call, ": seconds between 0 and 1e6"));
  return static_cast<uint64_t>(seconds * 1e9);
}

// sliced: `wait(ns)` over `total_ns` in slices of at most 100 ms, the GIL
// released in each; between them Python's signal handlers run (Ctrl-C
// raises KeyboardInterrupt within a slice, not when a recv(3600) returns:
// review helper-36). True as soon as a slice's wait is.
// `gone` (if given) is asked between slices too: a node closed meanwhile
// ends the wait (false) within a slice.
template <typename Wait>
bool sliced(uint64_t total_ns, Wait wait, const std::function<bool()>& gone = nullptr) {
  constexpr uint64_t kSliceNs = 100'000'000;
  for (uint64_t left = total_ns;;) {
    const uint64_t slice = std::min(left, kSliceNs);
    bool done;
    {
      py::gil_scoped_release nogil;
      done = wait(slice);
    }
    if (done) return true;
    left -= slice;
    if (left == 0 || (gone && gone())) return false;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

// handle_of: an anchor handle's text ("WORKER:ANCHOR" in hex, and its ticket if it has one: PROTOCOL.md §5.2.1), or a ValueError.
ringfire::mux::AnchorHandle handle_of(const std::string& text) {
  auto h = ringfire::mux::AnchorHandle::parse(text);
  if (!h) throw py::value_error(ringfire::mux::not_a_handle(text));
  return *h;
}

// Poller: what Node.poll fills on the C++ side (kept per node: no
// allocation per call once it has grown).
struct Poller {
  std::vector<Polled> items;
  std::vector<std::byte> bytes;
};

// poll_items: the items as a list of (anchor_id, kind, session, payload)
// tuples: payload is the token's bytes, or an end's reason ('finished',
// 'producer_gone', 'channel_lost', ...). Built with the C API directly: the
// one call per decode step must cost little per token.
py::list poll_items(const Poller& p) {
  static PyObject* kinds[3] = {PyUnicode_InternFromString("data"), PyUnicode_InternFromString("finished"),
                               PyUnicode_InternFromString("dropped")};
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(p.items.size()));
  if (list == nullptr) throw py::error_already_set();
  const char* base = reinterpret_cast<const char*>(p.bytes.data());
  for (size_t i = 0; i < p.items.size(); ++i) {
    const Polled& it = p.items[i];
    PyObject* t = PyTuple_New(4);
    PyObject* kind = kinds[static_cast<int>(it.kind)];
    Py_INCREF(kind);
    PyTuple_SET_ITEM(t, 0, PyLong_FromUnsignedLongLong(it.anchor));
    PyTuple_SET_ITEM(t, 1, kind);
    PyTuple_SET_ITEM(t, 2, PyLong_FromUnsignedLongLong(it.session));
    PyTuple_SET_ITEM(t, 3, it.kind == Item::Kind::kData ? PyBytes_FromStringAndSize(base + it.offset, it.len)
                                                        : PyUnicode_FromString(ringfire::mux::end_reason_name(it.reason)));
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), t);
  }
  return py::reinterpret_steal<py::list>(list);
}

py::dict stats_dict(const ringfire::node::NodeStats& s) {
  py::dict d;
  d["records_sent"] = s.out.records + s.tcp_records_out;
  d["batches_sent"] = s.out.batches;
  d["records_received"] = s.in.records + s.tcp_records_in;
  d["batches_received"] = s.in.batches;
  d["finished"] = s.in.finished;
  d["dropped"] = s.in.dropped;
  d["credit_returned"] = s.in.credit_returned;
  d["reader_stall"] = s.in.reader_stall;
  d["generation_mismatch"] = s.in.generation_mismatch;
  d["channel_failures"] = s.channel_failures;
  d["applied_by_readers"] = s.applied_by_readers;
  d["unauthenticated"] = s.unauthenticated;
  d["applied_by_node"] = s.applied_by_node;
  d["peers_out"] = s.peers_out;
  d["peers_in"] = s.peers_in;
  d["per_stream_out"] = s.tcp_streams_out;
  d["per_stream_in"] = s.tcp_streams_in;
  d["refused"] = s.refused;
  d["frames_rejected"] = s.frames_rejected;
  d["channel_datagrams"] = s.channel_datagrams;  // channel DATA that came by UDP (and below, by TCP)
  d["channel_tcp_frames"] = s.channel_tcp_frames;
  d["channel_tcp_records"] = s.channel_tcp_records;
  d["channel_datagrams_out"] = s.channel_datagrams_out;
  d["channel_tx_bursts"] = s.channel_tx_bursts;
  d["over_budget"] = s.in.over_budget;
  d["bad_frame_mac"] = s.bad_frame_mac;
  // The gauges that return to zero once every stream ended, was read and was applied.
  d["live_slots"] = s.live_slots;
  d["withheld_bytes"] = s.withheld_bytes;
  d["outstanding_bytes"] = s.outstanding_bytes;
  d["live_streams"] = s.live_streams;
  d["buffered_bytes"] = s.buffered_bytes;
  d["anchors"] = s.anchors;
  d["refused_by_source"] = s.refused_by_source;
  d["refused_channel_taken"] = s.refused_channel_taken;
  d["foreign_epoch"] = s.in.foreign_epoch;
  d["channels_evicted"] = s.channels_evicted;
  d["channel_wrong_sender"] = s.channel_wrong_sender;
  d["never_opened"] = s.in.never_opened;
  d["polls"] = s.polls;
  d["ready_wakeups"] = s.ready_wakeups;
  d["conductor_passes"] = s.conductor_passes;
  d["resumes_held"] = s.resumes_held;
  d["resumes_answered"] = s.resumes_answered;
  d["resumes_refused"] = s.resumes_refused;
  d["resumes_expired"] = s.resumes_expired;
  d["rings_warmed"] = s.rings_warmed;
  d["attaches_answered"] = s.attaches_answered;
  d["attaches_refused"] = s.attaches_refused;
  d["tickets_opened"] = s.tickets_opened;
  d["tickets_claimed"] = s.tickets_claimed;
  d["tickets_expired"] = s.tickets_expired;
  d["unknown_anchor"] = s.in.unknown_anchor;
  return d;
}

// drop: lets go of a reference to a node; the last one stops it, and its
// threads join with the GIL released (they never take it). An inherited
// node is left to the process's exit.
void drop(std::shared_ptr<Node>& n) {
  if (!n) return;
  if (n->inherited()) {
    new std::shared_ptr<Node>(std::move(n));  // never destroyed: see not_inherited
    return;
  }
  if (n.use_count() == 1) {
    py::gil_scoped_release nogil;
    n.reset();
  }
  n.reset();
}

// PyNode: what a Python Node holds. close() lets go of the Node at once
// (its rings removed, its peers told); a call already running with the GIL
// released holds its own reference (Using), so the Node goes when the last
// such call returns, never under one; a call waiting in slices sees the
// close between two and returns. Calls after close() raise ValueError.
struct PyNode {
  std::shared_ptr<Node> node;
  explicit PyNode(std::shared_ptr<Node> n) : node(std::move(n)) {}
  PyNode(PyNode&&) = default;
  ~PyNode() { drop(node); }
};

// Using: a call's reference to its node, let go as drop() does.
struct Using {
  std::shared_ptr<Node> node;
  ~Using() { drop(node); }
  Node* operator->() const { return node.get(); }
  Node& operator*() const { return *node; }
};

// live: the node a call works on, held for the call (the GIL is held here).
Using live(const PyNode& p) {
  if (!p.node) throw py::value_error("the node is closed (Node.close() was called): make a new Node");
  not_inherited(*p.node);
  return Using{p.node};
}

// let_go: close() and a `with` block's end.
void let_go(PyNode& p) {
  std::shared_ptr<Node> n = std::move(p.node);
  drop(n);
}

}  // namespace

PYBIND11_MODULE(_ringfire, m) {
  m.doc() = "ringfire's stream multiplexer: thousands of token streams per peer in batched messages";
  m.attr("has_dpdk") = static_cast<bool>(RINGFIRE_HAVE_DPDK);
  m.def(
      "start_dpdk",
      [](const std::string& eal) {
        if (absl::Status st = ringfire::engine::start_dpdk(eal, {}, {}); !st.ok()) {
          throw py::value_error(std::string(st.message()));
        }
      },
      py::arg("eal"),
      "start DPDK's EAL, once per process, with its arguments (e.g. '-l 0 --no-huge -m 256 --no-pci --vdev "
      "net_memif0,...'); a Node(dpdk_port=N, dpdk_ip='A.B.C.D') then carries its channels on that ethdev");

  py::class_<Sender, Held<Sender>>(m, "Sender", "the producer's end of one stream")
      .def(
          "send",
          [](Sender& s, py::bytes b) {
            not_inherited(s);
            const std::string_view v = b;
            ringfire::mux::SendStatus st;
            {
              py::gil_scoped_release nogil;  // the bytes object is held by the caller's frame
              st = s.send({reinterpret_cast<const std::byte*>(v.data()), v.size()});
            }
            return status_name(st);
          },
          py::arg("record"),
          "stage one record; never blocks. 'sent', or 'full' (retry after credit), 'closed', 'too_large'")
      .def(
          "finish",
          [](Sender& s) {
            not_inherited(s);
            py::gil_scoped_release nogil;
            return s.finish();
          },
           "send the terminal; False if the stream was already closed")
      .def_property_readonly("closed",
                             [](Sender& s) {
                               not_inherited(s);
                               py::gil_scoped_release nogil;
                               return s.closed();
                             },
                             "finished, cancelled by the consumer, or its peer is gone")
      .def(
          "wait_closed",
          [](Sender& s, double seconds) {
            not_inherited(s);
            return sliced(wait_ns(seconds, "wait_closed"), [&](uint64_t ns) { return s.wait_closed(ns); });
          },
          py::arg("seconds"),
          "block (the GIL released) until the stream is closed — cancelled by the consumer, "
          "its peer gone, the node stopped — or `seconds` passed; returns closed")
      .def_property_readonly("per_stream", &Sender::per_stream, "the stream took the per-stream TCP path")
      .def_property_readonly("session", &Sender::session, "the stream's session: what a resume names (Node.attach)")
      .def_property_readonly("resume_at", &Sender::resume_at,
                             "a resume's answer: the frames the anchor already holds; this sender's first record is "
                             "the stream's frame resume_at (0 for a new stream)");

  py::class_<Anchor, Held<Anchor>>(m, "Anchor", "the consumer's end: one stream per attached producer")
      .def_property_readonly("handle", [](const Anchor& a) { return a.handle().to_string(); },
                             "the handle to give a producer (a string; a single-sender anchor's carries a ticket: its producer opens the stream with no round trip, once)")
      .def(
          "recv",
          [](Anchor& a, double timeout) -> py::object {
            not_inherited(a);
            Item it;
            const bool got = sliced(wait_ns(timeout, "recv"), [&](uint64_t ns) { return a.recv(&it, ns); });
            if (!got) return py::none();
            if (it.kind != Item::Kind::kData) {
              return py::make_tuple(kind_name(it.kind), it.session, py::str(ringfire::mux::end_reason_name(it.reason)));
            }
            return py::make_tuple(kind_name(it.kind), it.session,
                                  py::bytes(reinterpret_cast<const char*>(it.bytes.data()), it.bytes.size()));
          },
          py::arg("timeout") = 0.0,
          "the next item: (kind, session, payload) with kind 'data' (payload: its bytes), 'finished' or 'dropped' "
          "(payload: the reason, e.g. 'producer_gone', 'channel_lost', 'never_opened'); None if none came")
      .def("cancel", [](Anchor& a) { not_inherited(a); py::gil_scoped_release nogil; a.cancel(); },
           "end every stream (producers see closed senders); refuse later attaches")
      .def_property_readonly("id", &Anchor::id, "what Node.poll's items name this anchor by")
      .def("pause", [](Anchor& a) { not_inherited(a); py::gil_scoped_release nogil; a.pause(); },
           "Node.poll passes this anchor by until resume(): its items wait, and its producers slow down (credit)")
      .def("resume", [](Anchor& a) { not_inherited(a); py::gil_scoped_release nogil; a.resume(); })
      .def_property_readonly("live_streams",
                             [](Anchor& a) {
                               not_inherited(a);
                               py::gil_scoped_release nogil;
                               return a.live_streams();
                             });

  py::class_<PyNode>(m, "Node", "one per process: an engine, a control listener and the mux")
      .def(py::init([](const std::string& instance_id, const std::string& control, bool mux, uint32_t initial_credit,
                       const std::string& flush, uint32_t max_batch_bytes, const std::string& ring_dir,
                       const std::string& psk_file, const std::string& idle, int dpdk_port,
                       const std::string& dpdk_ip, double silent_peer, uint32_t mtu, bool gso, bool gro,
                       double resume_window, bool tickets, double accept_timeout) {
             NodeOptions o;
             o.instance_id = instance_id;
             o.control = endpoint(control);
             o.mux.enabled = mux;
             o.mux.initial_credit = initial_credit;
             o.mux.flush = parse_flush(flush);
             o.mux.max_batch_bytes = max_batch_bytes;
             o.ring_dir = ring_dir;
             if (!(silent_peer >= 0 && silent_peer <= 3600)) {  // NaN too
               throw py::value_error("silent_peer must be 0 to 3600 seconds (0: the kernel's TCP defaults)");
             }
             o.silent_peer_ms = static_cast<uint32_t>(silent_peer * 1000);
             if (!(resume_window >= 0 && resume_window <= 3600)) {  // NaN too
               throw py::value_error("resume_window must be 0 to 3600 seconds (0: a stream's end is read at once)");
             }
             o.resume_window_ns = static_cast<uint64_t>(resume_window * 1e9);
             o.tickets = tickets;
             if (!(accept_timeout >= 0.1 && accept_timeout <= 3600)) {
               throw py::value_error("accept_timeout must be 0.1 to 3600 seconds (an answered attach, or a handle's ticket, unclaimed that long ends)");
             }
             o.mux.accept_timeout_ns = static_cast<uint64_t>(accept_timeout * 1e9);
             const auto mode = ringfire::ring::parse_idle_mode(idle);
             if (!mode) throw py::value_error("idle " + idle + ": expected spin, yield, backoff or hot");
             o.port.idle = *mode;
             if (mtu < 256 || mtu > 65507) {
               throw py::value_error("mtu " + std::to_string(mtu) + ": the largest UDP payload, 256 to 65507 (8972 on a 9000-byte link)");
             }
             o.port.mtu = static_cast<uint16_t>(mtu);
             o.port.gso = gso;
             o.port.gro = gro;
             if (dpdk_port >= 0) {  // the data plane on an ethdev of the EAL start_dpdk started
               if (dpdk_ip.empty()) throw py::value_error("dpdk_port needs dpdk_ip: the data plane's address on that port");
               o.port.backend = ringfire::engine::PortSpec::Backend::kDpdk;
               o.port.dpdk_port_id = dpdk_port;
               o.port.ip = endpoint(dpdk_ip + ":0").ip;
             } else if (!dpdk_ip.empty()) {
               throw py::value_error("dpdk_ip needs dpdk_port (the ethdev's port id)");
             }
             if (!psk_file.empty()) {
               auto k = ringfire::net::load_psk(psk_file);
               if (!k.ok()) throw py::value_error(std::string(k.status().message()));
               o.psk = std::move(*k);
             }
             auto n = Node::create(o);
             if (!n.ok()) throw py::value_error(std::string(n.status().message()));
             return PyNode(std::shared_ptr<Node>(std::move(*n)));
           }),
           py::arg("instance_id"), py::arg("control"), py::arg("mux") = true, py::arg("initial_credit") = 256,
           py::arg("flush") = "auto", py::arg("max_batch_bytes") = 60 * 1024, py::arg("ring_dir") = "/dev/shm",
           py::arg("psk_file") = "", py::arg("idle") = "backoff", py::arg("dpdk_port") = -1, py::arg("dpdk_ip") = "",
           py::arg("silent_peer") = 6.0, py::arg("mtu") = 1472, py::arg("gso") = true, py::arg("gro") = true,
           py::arg("resume_window") = 0.0, py::arg("tickets") = true,
           py::arg("accept_timeout") = 60.0)
      .def(
          "create_anchor",
          [](PyNode& self, bool multi_sender) {
            const Using held = live(self);
            Node& n = *held;
            return fork_safe(n.create_anchor(multi_sender ? AnchorKind::kMultiSender : AnchorKind::kSingleSender));
          },
          py::arg("multi_sender") = false)
      .def(
          "attach",
          [](PyNode& self, const std::string& handle, const std::string& peer, uint64_t resume) {
            const Using held = live(self);
            Node& n = *held;
            const auto h = handle_of(handle);
            const auto at = endpoint(peer);
            absl::StatusOr<std::unique_ptr<Sender>> s;
            {
              py::gil_scoped_release nogil;
              s = n.attach(h, at, resume);
            }
            if (!s.ok()) {
              PyErr_SetString(PyExc_ConnectionError, std::string(s.status().message()).c_str());
              throw py::error_already_set();
            }
            return fork_safe(std::move(*s));
          },
          py::arg("handle"), py::arg("peer"), py::arg("resume") = 0,
          "attach to a handle on the node at peer ('ip:port'); returns a Sender. resume: the session (Sender.session) "
          "of the anchor's stream whose channel ended, to go on from its next frame (Sender.resume_at)")
      .def(
          "attach_many",
          [](PyNode& self, const std::vector<std::string>& handles, const std::string& peer) {
            const Using held = live(self);
            Node& n = *held;
            std::vector<ringfire::mux::AnchorHandle> hs;
            hs.reserve(handles.size());
            for (const std::string& handle : handles) {
              hs.push_back(handle_of(handle));
            }
            const auto at = endpoint(peer);
            std::vector<absl::StatusOr<std::unique_ptr<Sender>>> got;
            {
              py::gil_scoped_release nogil;
              got = n.attach_many(hs, at);
            }
            std::vector<Held<Sender>> senders;
            senders.reserve(got.size());
            for (size_t i = 0; i < got.size(); ++i) {
              if (!got[i].ok()) {  // the others go (their streams end dropped at the consumer)
                PyErr_SetString(PyExc_ConnectionError,
                                absl::StrCat("attach_many: handle ", i, ": ", got[i].status().message()).c_str());
                throw py::error_already_set();
              }
              senders.push_back(fork_safe(std::move(*got[i])));
            }
            return senders;
          },
          py::arg("handles"), py::arg("peer"),
          "attach to every handle on the node at peer at once (each request sent before any answer is awaited); "
          "a list of Senders in order, or ConnectionError naming the first handle that failed")
      .def(
          "flush_batch",
          [](PyNode& self) {
            const Using held = live(self);
            py::gil_scoped_release nogil;
            held->flush_batch();
          },
           "whatever is staged goes now; never blocks, never fails")
      .def(
          "send_many",
          [](PyNode& self, py::object items, py::object records, py::object flush_arg) -> py::object {
            const Using held = live(self);
            Node& n = *held;
            // One decode step under one lock: (sender, bytes) pairs, or a
            // list of senders and a list of records side by side (the
            // decode batch's senders kept in a list, one token each: no
            // tuple a token). Tuples of the lists (a copy: they hold every
            // sender and bytes while the GIL is let go, whatever another
            // thread does to the caller's lists).
            // send_many(items, True): the older form's flush, given by place.
            if (!records.is_none() && !PySequence_Check(records.ptr()) && PyNumber_Check(records.ptr())) {
              if (!flush_arg.is_none()) throw py::value_error("send_many: flush given twice (by place and by name)");
              flush_arg = records;
              records = py::none();
            }
            const int truth = flush_arg.is_none() ? 0 : PyObject_IsTrue(flush_arg.ptr());
            if (truth < 0) throw py::error_already_set();  // its __bool__ raised: that error, not a SystemError
            const bool flush = truth == 1;
            const bool pairs = records.is_none();
            if (!PySequence_Check(items.ptr()) || (!pairs && !PySequence_Check(records.ptr()))) {
              throw py::value_error("send_many takes a list of (sender, bytes), or a list of senders and one of bytes");
            }
            py::object seq = py::reinterpret_steal<py::object>(PySequence_Tuple(items.ptr()));
            if (!seq) throw py::error_already_set();
            py::object recs = pairs ? py::none() : py::reinterpret_steal<py::object>(PySequence_Tuple(records.ptr()));
            if (!recs) throw py::error_already_set();
            const auto count = static_cast<size_t>(PyTuple_GET_SIZE(seq.ptr()));
            if (!pairs && static_cast<size_t>(PyTuple_GET_SIZE(recs.ptr())) != count) {
              throw py::value_error(absl::StrCat("send_many: ", count, " senders but ", PyTuple_GET_SIZE(recs.ptr()),
                                                 " records"));
            }
            PyObject** elems = &PyTuple_GET_ITEM(seq.ptr(), 0);
            static thread_local std::vector<SendOne> sends;
            sends.resize(count);
            for (size_t i = 0; i < count; ++i) {
              PyObject* sender = elems[i];
              PyObject* rec;
              if (pairs) {
                if (!PyTuple_Check(sender) || PyTuple_GET_SIZE(sender) != 2) {
                  throw py::value_error(absl::StrCat("send_many: item ", i, " is not a (sender, bytes) pair"));
                }
                rec = PyTuple_GET_ITEM(sender, 1);
                sender = PyTuple_GET_ITEM(sender, 0);
              } else {
                rec = PyTuple_GET_ITEM(recs.ptr(), i);
              }
              if (!PyBytes_Check(rec)) throw py::value_error(absl::StrCat("send_many: item ", i, "'s record is not bytes"));
              sends[i].sender = sender_of(sender);
              not_inherited(*sends[i].sender);
              sends[i].record = {reinterpret_cast<const std::byte*>(PyBytes_AS_STRING(rec)),
                                 static_cast<size_t>(PyBytes_GET_SIZE(rec))};
            }
            size_t sent;
            {
              py::gil_scoped_release nogil;
              sent = n.send_many(sends);
              if (flush) n.flush_batch();
            }
            if (sent == count) return py::none();
            py::list not_sent;
            for (size_t i = 0; i < count; ++i) {
              if (sends[i].status != ringfire::mux::SendStatus::kSent) {
                not_sent.append(py::make_tuple(i, status_name(sends[i].status)));
              }
            }
            return not_sent;
          },
          py::arg("items"), py::arg("records") = py::none(), py::arg("flush") = py::none(),
          "a decode step in one call: each (sender, bytes) of items in order, or each sender of items with the "
          "record at its place in records; then flush_batch() if flush. None when every record was taken, else a "
          "list of (index, status) for those that were not ('full', 'closed', 'too_large')")
      .def("fd", [](PyNode& self) { return live(self)->fd(); },
           "a descriptor that is readable when some anchor has an item: for asyncio's add_reader or select; "
           "then call poll() (never read it yourself)")
      .def(
          "poll",
          [](PyNode& self, size_t max) {
            const Using held = live(self);
            Node& n = *held;
            static thread_local Poller p;  // per thread: its buffers grow once
            p.items.clear();
            p.bytes.clear();
            {
              py::gil_scoped_release nogil;
              n.poll(&p.items, &p.bytes, max);
            }
            return poll_items(p);
          },
          py::arg("max") = 65536,
          "every ready item of every anchor (at most max): a list of (anchor_id, kind, session, payload), kind "
          "'data' (payload: the bytes) or 'finished' / 'dropped' (payload: the reason). Never waits.")
      .def("idle", [](PyNode& self) { live(self)->idle(); },
           "done with what poll() returned, back to waiting on fd(): the node thread's wake that poll() put off "
           "goes now (asyncio's reader does this once the woken tasks ran)")
      .def(
          "wait",
          [](PyNode& self, double timeout) {
            const Using held = live(self);
            Node& n = *held;
            return sliced(wait_ns(timeout, "wait"), [&](uint64_t ns) { return n.wait(ns); },
                          [&] { return self.node == nullptr; });
          },
          py::arg("timeout"), "block until fd() is readable or timeout seconds passed; True if readable")
      .def(
          "drain",
          [](PyNode& self, double timeout) {
            const Using held = live(self);
            Node& n = *held;
            return sliced(wait_ns(timeout, "drain"), [&](uint64_t ns) { return n.drain(ns); },
                          [&] { return self.node == nullptr; });
          },
          py::arg("timeout") = 5.0, "wait until everything sent was applied by the peers (before exiting); True if so")
      .def_property_readonly("control_address",
                             [](PyNode& self) { return ringfire::net::to_string(live(self)->control_address()); })
      .def_property_readonly("worker_id", [](PyNode& self) { return live(self)->worker_id(); })
      .def_property_readonly("data_path", [](PyNode& self) { return live(self)->data_path(); })
      .def("stats", [](PyNode& self) { return stats_dict(live(self)->stats()); }, "every counter, summed over peers")
      .def_property_readonly("closed", [](const PyNode& self) { return self.node == nullptr; },
                             "close() was called")
      .def("close", &let_go,
           "stop now: the control listener closes, peers are told, senders close and anchors' streams end dropped, "
           "the node's rings are removed; anchors and senders stay safe to call. Idempotent; later calls on the "
           "node raise ValueError. A `with Node(...) as node:` block closes it at its end")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyNode& self, const py::args&) { let_go(self); });
}
