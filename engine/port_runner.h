// port_runner.h — a port and the worker thread that owns it, for one
// backend (the template parameter): PortHandle's implementation. Sessions
// it builds live on the heap, owned here; the worker gets pointers through
// its command queue and gives each back through `retired` once it no
// longer touches it. Adds and removes are synchronous for the conductor
// (it waits for the worker's answer, a poll at most: a parked worker is
// woken by its eventfd), so a caller learns at once that a table was full,
// and nothing the worker may still touch is ever freed. Conductor thread
// only, but for the worker loop it starts.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dataplane/tsc_clock.h"
#include "dataplane/worker_runner.h"
#include "engine/port_handle.h"
#include "ring/monotonic.h"

namespace ringfire::engine {

template <dataplane::PacketPort Port>
class PortRunner final : public PortHandle {
 public:
  using Worker = dataplane::PortWorker<Port>;
  using Serve = dataplane::ServeSession<Port>;
  using Mirror = dataplane::MirrorSession<Port>;
  using Prepared = typename Port::Prepared;
  using Command = typename Worker::Command;
  // PrepareFn does a binding's fallible half for this port (the port's own
  // prepare; for the kernel backend, with its options). `max_payload` is
  // the largest datagram the binding must take in.
  using PrepareFn = std::function<absl::StatusOr<Prepared>(const Port&, const dataplane::BindSpec&,
                                                           uint32_t local_ip, uint16_t max_payload)>;

  // The worker starts at once: on `lcore` (an EAL worker lcore; -1: the
  // first idle one, else a thread).
  PortRunner(std::string name, std::string path, Port port, PrepareFn prepare, ring::IdleMode idle, int lcore)
      : name_(std::move(name)), path_(std::move(path)), prepare_(std::move(prepare)), worker_(std::move(port)) {
    runner_.start([this, idle] { loop(idle); }, lcore);
  }
  ~PortRunner() override { stop(); }

  absl::StatusOr<ServePlaced> open_serve(ServeRequest r) override {
    auto b = prepare_(worker_.port(), r.bind, r.bind.ip, 64);
    if (!b.ok()) return b.status();
    Placed p;
    p.id = next_id_++;
    p.binding = std::make_unique<Prepared>(std::move(*b));
    const net::Endpoint local = p.binding->local;
    if (!r.pace_given) r.config.pace_ns = Port::kDefaultPaceNs;  // the port kind's (KernelPort, DpdkPort)
    p.serve = std::make_unique<Serve>(std::move(*r.reader), r.config, std::move(r.repair_reader));
    Command c;
    c.kind = Command::Kind::kAddServe;
    c.serve = p.serve.get();
    if (absl::Status st = add(std::move(p), c); !st.ok()) return st;
    return ServePlaced{&placed_.back().serve->link(), local, r.config.pace_ns};
  }

  void close_serve(dataplane::ServeLink* link) override {
    remove(placed_, [&](const Placed& p) { return p.serve && &p.serve->link() == link; });
  }

  absl::StatusOr<dataplane::MirrorLink*> open(control::MirrorPlaneRequest r) override {
    Placed p;
    p.id = next_id_++;
    if (r.bind) {
      auto b = prepare_(worker_.port(), *r.bind, r.local_ip, r.max_payload);
      if (!b.ok()) return b.status();
      p.binding = std::make_unique<Prepared>(std::move(*b));
    }
    p.mirror = std::make_unique<Mirror>(std::move(*r.writer), r.config, r.first_seq, r.session, r.nak_fd);
    Command c;
    c.kind = Command::Kind::kAddMirror;
    c.mirror = p.mirror.get();
    if (absl::Status st = add(std::move(p), c); !st.ok()) return st;
    return &placed_.back().mirror->link();
  }

  void close(dataplane::MirrorLink* link) override {
    remove(placed_, [&](const Placed& p) { return p.mirror && &p.mirror->link() == link; });
  }

  absl::Status add_task(dataplane::WorkerTask* task) override {
    if (stopped_) return absl::FailedPreconditionError(absl::StrCat("port ", name_, " is stopped"));
    Command c;
    c.kind = Command::Kind::kAddTask;
    c.id = next_id_++;
    c.task = task;
    auto r = exchange(c);
    if (!r.ok()) return r.status();
    if (!r->installed) {
      return absl::ResourceExhaustedError(absl::StrCat("port ", name_, " carries ", Worker::kMaxTasks,
                                                       " tasks already: put this one on another port"));
    }
    tasks_.push_back(PlacedTask{c.id, task});
    return absl::OkStatus();
  }

  void remove_task(dataplane::WorkerTask* task) override {
    remove(tasks_, [&](const PlacedTask& t) { return t.task == task; });
  }

  uint64_t port_drops() const override {
    if constexpr (requires(const Port& port) { port.drops(); }) {
      return worker_.port().drops();  // relaxed counters: any thread
    } else {
      return 0;
    }
  }
  std::string describe() const override { return path_ == "kernel" ? std::string() : path_; }
  // late_answers: answers that came after their exchange gave up (conductor).
  uint64_t late_answers() const { return late_answers_; }

  PortInfo info() const override {
    PortInfo i;
    i.name = name_;
    i.path = path_;
    i.worker = runner_.where();
    i.drops = port_drops();
    i.sessions = worker_.stats().sessions.get();
    i.datagrams = worker_.stats().datagrams.get();
    i.unrouted = worker_.stats().unrouted.get();
    i.busy_ns = worker_.stats().busy_ns.get();
    i.iterations = worker_.stats().iterations.get();
    i.tasks = worker_.stats().tasks.get();
    if constexpr (requires(const Port& port) { port.summary(); }) i.summary = worker_.port().summary();
    return i;
  }

  void stop() override {
    if (stopped_) return;
    stop_.store(true, std::memory_order_relaxed);
    worker_.wake().poke();
    runner_.join();
    stopped_ = true;
    placed_.clear();  // the worker is gone: nothing touches them any more
  }

 private:
  struct Placed {
    uint32_t id = 0;
    std::unique_ptr<Serve> serve;
    std::unique_ptr<Mirror> mirror;
    std::unique_ptr<Prepared> binding;  // until installed
  };

  void loop(ring::IdleMode mode) {
    ring::IdleStrategy idle(mode);
    constexpr bool kSyscallPolls = requires(const Port& p) { p.wait_fd(); };  // a kernel port: each poll a recvmmsg
    dataplane::TscClock clock;  // one clock read per iteration, from the TSC
    std::unique_lock held(worker_.step_mutex());  // released only inside park's poll
    uint64_t now = clock.now_ns();
    while (!stop_.load(std::memory_order_relaxed)) {
      const bool busy = worker_.step(now);
      const uint64_t after = clock.now_ns();  // the next iteration's clock read
      worker_.account(busy, after - now);
      now = after;
      if (busy) {
        idle.reset();
      } else {
        // Few of those costly polls before parking, when the park wakes for
        // the records too (else the spin is what finds them soon).
        idle.costly_polls(kSyscallPolls && worker_.park_wakes_for_records());
        idle.set_max_park_ns(worker_.max_park_ns());
        idle.idle([&](uint64_t timeout_ns) { worker_.park(now, timeout_ns, &held); }, worker_.wakeable());
        now = clock.now_ns();
      }
    }
  }

  absl::Status add(Placed p, Command c) {
    if (stopped_) return absl::FailedPreconditionError(absl::StrCat("port ", name_, " is stopped"));
    c.id = p.id;
    c.binding = p.binding.get();
    placed_.push_back(std::move(p));
    auto r = exchange(c);
    if (!r.ok()) return r.status();  // the worker is stuck: keep everything (it may still look)
    if (!r->installed) {
      placed_.pop_back();
      return absl::ResourceExhaustedError(absl::StrCat(
          "port ", name_, " has no room for another session (", Worker::kMaxSessions, " sessions, ",
          dataplane::kMaxBindings, " bindings at most): put it on another port"));
    }
    placed_.back().binding.reset();  // installed: moved from
    return absl::OkStatus();
  }

  // remove takes the entry of `placed` (sessions or tasks) that `match`
  // picks off the worker, then forgets it.
  template <typename Entry, typename Match>
  void remove(std::vector<Entry>& placed, Match match) {
    for (size_t i = 0; i < placed.size(); ++i) {
      if (!match(placed[i])) continue;
      if (!stopped_) {
        Command c;
        c.kind = Command::Kind::kRemove;
        c.id = placed[i].id;
        if (!exchange(c).ok()) return;  // the worker is stuck: never free what it may touch
      }
      placed.erase(placed.begin() + static_cast<ptrdiff_t>(i));
      return;
    }
  }

  // exchange sends one command and waits for its answer (every command has
  // exactly one, and only the conductor sends). Numbered: an answer to a
  // command whose exchange gave up (the worker was stuck past kStuckNs)
  // may come first, and is dropped (counted in late_answers_), never taken
  // for this one's. What it gives back stays placed: a stuck exchange
  // keeps everything the worker may touch.
  absl::StatusOr<typename Worker::Retired> exchange(Command c) {
    constexpr uint64_t kStep = 20'000;
    // By the clock: a sleep of 20 us takes longer (counting the sleeps
    // made "5 s" last ~20 s here).
    const uint64_t deadline = monotonic_ns() + kStuckNs;
    c.seq = ++exchanges_;
    while (!worker_.commands.try_push(c)) {
      ring::sleep_ns(kStep);
      if (monotonic_ns() > deadline) return stuck();
    }
    worker_.wake().poke();  // after the push: a parked worker wakes (worker_wake.h)
    typename Worker::Retired r;
    for (;;) {
      while (!worker_.retired.try_pop(&r)) {
        ring::sleep_ns(kStep);
        if (monotonic_ns() > deadline) return stuck();
      }
      if (r.seq == c.seq) return r;
      ++late_answers_;  // an earlier exchange's, which gave up on it
    }
  }
  absl::Status stuck() const {
    return absl::DeadlineExceededError(absl::StrCat("the worker of port ", name_, " did not answer within ",
                                                    kStuckNs / 1'000'000, " ms"));
  }
  static constexpr uint64_t kStuckNs = 5'000'000'000;
  uint64_t exchanges_ = 0;     // commands sent (Command::seq)
  uint64_t late_answers_ = 0;  // answers that came after their exchange gave up

  std::string name_;
  std::string path_;
  PrepareFn prepare_;
  Worker worker_;
  dataplane::WorkerRunner runner_;
  std::atomic<bool> stop_{false};
  bool stopped_ = false;
  std::vector<Placed> placed_;
  struct PlacedTask {
    uint32_t id = 0;
    dataplane::WorkerTask* task = nullptr;  // the caller's
  };
  std::vector<PlacedTask> tasks_;
  uint32_t next_id_ = 1;
};

}  // namespace ringfire::engine
