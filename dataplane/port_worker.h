// port_worker.h — a poll-mode worker: owns one port and steps every session
// placed on it (serves and mirrors of any number of rings), one poller for
// all of them. Each iteration reads the clock once (the caller passes
// `now`), takes at most a few commands, receives one burst and hands each
// datagram to the session its binding names (an array index: the port
// tagged the datagram with the binding it matched), then steps every session
// (each does bounded work); application tasks placed on it (worker_task.h)
// step between the two. Sessions and tasks are added and removed at run time
// through the command queue without stopping the others: a removed session
// comes back through `retired` once the worker no longer touches it, for the
// control thread to free. Idle, it parks until a datagram, a command or the
// next deadline of any session. Worker thread only, but for the queues.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <vector>

#include "dataplane/counter.h"
#include "dataplane/mirror_session.h"
#include "dataplane/serve_session.h"
#include "dataplane/spsc_queue.h"
#include "dataplane/worker_task.h"
#include "dataplane/worker_wake.h"
#include "ring/idle.h"
#include "ring/monotonic.h"

namespace ringfire::dataplane {

// PortWorkerStats: the worker's own counters (single writer, any reader).
struct alignas(64) PortWorkerStats {
  Counter datagrams;     // received and routed to a session
  Counter unrouted;      // received on a binding no session holds (just removed)
  Counter commands;
  Counter sessions;      // live now (stored, not added)
  Counter tasks;         // application tasks live now (stored)
  // busy_ns: time in iterations that did work (testpmd's record-core-
  // cycles): divided by the records moved, the worker's cost per record.
  Counter busy_ns;
  Counter iterations;
  Counter inline_steps;  // iterations a writer's thread ran while the worker slept (step_parked)
  Counter rearms;        // ... after which it moved the sleeper's wake-up earlier on its timer, not by waking it
  Counter ring_parks_woken;  // parks on a served ring (parks_on_ring) a publish or a poke ended before their timeout
  Counter parks_called_off;  // parks whose last look found work (a command pushed as the worker went to sleep)
};

template <PacketPort Port>
class PortWorker {
 public:
  using Serve = ServeSession<Port>;
  using Mirror = MirrorSession<Port>;
  using Prepared = typename Port::Prepared;
  static constexpr size_t kMaxSessions = 512;
  static constexpr size_t kMaxTasks = 16;

  // Command: control -> worker. Pointers stay the control thread's to free,
  // once retired (a binding's Prepared is consumed at install).
  struct Command {
    enum class Kind : uint8_t { kAddServe, kAddMirror, kAddTask, kRemove } kind = Kind::kRemove;
    uint32_t id = 0;           // the session's or task's, unique in the process
    Serve* serve = nullptr;
    Mirror* mirror = nullptr;
    Prepared* binding = nullptr;  // nullptr: none (a TCP-mode mirror)
    WorkerTask* task = nullptr;
    uint64_t seq = 0;          // the sender's number for this command, echoed in its Retired
  };
  // Retired: worker -> control, once for every command: an add's spent
  // Prepared (installed true, no session), a session the worker will not
  // touch again (removed; or an add refused because a table was full:
  // installed false); a task likewise; a remove of an id the worker does
  // not hold, installed false and nothing else. `seq` is its command's:
  // an answer that comes after its sender gave up waiting is told from the
  // next command's (PortRunner::exchange).
  struct Retired {
    uint32_t id = 0;
    Serve* serve = nullptr;
    Mirror* mirror = nullptr;
    Prepared* binding = nullptr;
    bool installed = false;
    WorkerTask* task = nullptr;
    uint64_t seq = 0;
  };

  explicit PortWorker(Port port) : port_(std::move(port)) {
    slots_.reserve(kMaxSessions);
    route_.assign(kMaxBindings + 1, -1);
    wake_.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if constexpr (requires(const Port& p) { p.wait_fd(); }) {
      wake_.step_parked = &PortWorker::step_parked;
      wake_.worker = this;
      timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);  // -1: step_parked wakes it instead
    }
  }
  ~PortWorker() {
    if (wake_.fd >= 0) close(wake_.fd);
    if (timer_fd_ >= 0) close(timer_fd_);
  }
  PortWorker(const PortWorker&) = delete;
  PortWorker& operator=(const PortWorker&) = delete;

  SpscQueue<Command, 256> commands;  // control -> worker (then wake().poke())
  SpscQueue<Retired, 512> retired;   // worker -> control
  WorkerWake& wake() { return wake_; }
  Port& port() { return port_; }
  const Port& port() const { return port_; }
  const PortWorkerStats& stats() const { return stats_; }
  // account: the loop's record of one iteration (busy: it did work, for
  // `ns` from its clock read to the next).
  void account(bool busy, uint64_t ns) {
    ++stats_.iterations;
    if (busy) stats_.busy_ns += ns;
  }

  // step_mutex is held by the thread that steps the worker: its loop, at
  // all times but inside park()'s poll, and a writer's run_or_poke while
  // the worker sleeps there (step_parked).
  std::mutex& step_mutex() { return step_mu_; }

  // step is one iteration; returns whether it did anything. Time never
  // goes backwards for the sessions, whichever thread steps. Without
  // `receive` the port is not read (a writer's step of a parked worker:
  // what arrives wakes the worker's own poll, which reads it).
  bool step(uint64_t now_ns, bool receive = true) {
    now_ns = std::max(now_ns, last_now_);
    last_now_ = now_ns;
    bool busy = take_commands();
    for (Slot& slot : slots_) {
      if (slot.serve != nullptr) slot.serve->take_commands();
    }
    RxDatagram* rx = rx_.data();  // a member: not initialised again every iteration
    const size_t n = receive ? port_.rx_burst(rx, kBurst) : 0;
    for (size_t i = 0; i < n; ++i) {
      const int32_t s = rx[i].binding <= kMaxBindings ? route_[rx[i].binding] : -1;
      if (s < 0) {
        ++stats_.unrouted;
        continue;
      }
      Slot& slot = slots_[static_cast<size_t>(s)];
      if (slot.serve != nullptr) {
        slot.serve->on_datagram(rx[i], now_ns);
      } else {
        slot.mirror->on_datagram(rx[i], now_ns);
      }
    }
    stats_.datagrams += n;
    busy |= n != 0;
    // Tasks between the two: what a mirror wrote above is theirs to read,
    // and what they publish into a served ring leaves below.
    for (const TaskSlot& t : tasks_) busy |= t.task->step(now_ns);
    for (Slot& slot : slots_) busy |= slot.serve != nullptr ? slot.serve->step(now_ns) : slot.mirror->step(now_ns);
    return busy;
  }

  // park waits at most timeout_ns, and never past a session's deadline:
  // a worker with one serve session and nothing else parks on its ring (the
  // writer wakes it); any other waits in poll() on the port (kernel
  // sockets) and its wake eventfd (commands, TCP frames for a mirror).
  // `held`: the caller's lock on step_mutex(), released for the poll only
  // (a writer may step the worker meanwhile: step_parked).
  void park(uint64_t now_ns, uint64_t timeout_ns, std::unique_lock<std::mutex>* held = nullptr) {
    const bool woken = wakeable();
    if (woken) timeout_ns = kWakeableParkNs;  // the deadlines below bound it
    const uint64_t until = std::min(now_ns + timeout_ns, next_deadline_ns(now_ns));
    if (until <= now_ns) return;
    timeout_ns = until - now_ns;
    if (parks_on_ring()) {
      Serve& serve = *slots_[0].serve;
      if (serve.waiting_for_pacer(now_ns)) {
        ring::sleep_ns(timeout_ns);  // records left for the pacer: its deadline bounds timeout_ns
        return;
      }
      // The ring's writer wakes it for records; a control thread that
      // queues a command (poke) wakes the same futex (WorkerWake::signal).
      // The word is read before `parked` is raised and the commands are
      // looked at: a poke after that look bumps it, and the futex returns.
      ring::RingHeader& h = serve.reader().header();
      const uint32_t word = ring::wake_word_now(h);
      wake_.ring.store(&h, std::memory_order_relaxed);
      // Release: a poke that sees `parked` (its acquire load) sees `ring`.
      wake_.parked.store(true, std::memory_order_release);
      // Seq_cst fence: pairs with poke's, as in the poll() park below.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      // The last look: the worker's commands and the serve's own (a
      // repair, a token: ServeControl pushes, then pokes).
      if (commands.size_approx() != 0 || serve.link().commands.size_approx() != 0) {
        stats_.parks_called_off += 1;
      } else if (ring::wait_for_write(h, serve.reader().cursor(), timeout_ns, word)) {
        stats_.ring_parks_woken += 1;
      }
      wake_.parked.store(false, std::memory_order_relaxed);
      wake_.ring.store(nullptr, std::memory_order_relaxed);
      return;
    }
    // A control thread's WorkerWake::poke after its push either sees this
    // store (and writes the eventfd) or its push is seen below: a
    // store-load pair on each side, each with a seq_cst fence between.
    wake_.parked.store(true, std::memory_order_release);  // pairs with poke's acquire load
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with poke's fence
    bool pending = commands.size_approx() != 0;
    for (Slot& slot : slots_) {
      // A served ring's writer publishes, then pokes if it sees `parked`
      // (run_or_poke): it sees it, or its records are seen here.
      // A serve's own commands (repairs, tokens) likewise: pushed, then poked.
      pending |= slot.mirror != nullptr ? slot.mirror->has_tcp_frames()
                                        : slot.serve->records_waiting() || slot.serve->link().commands.size_approx() != 0;
    }
    if (pending) stats_.parks_called_off += 1;
    if (!pending) {
      wake_at_ns_ = until;
      parked_at_ns_ = now_ns;
      pollfd fds[3];
      nfds_t nf = 0;
      if constexpr (requires(const Port& p) { p.wait_fd(); }) fds[nf++] = pollfd{port_.wait_fd(), POLLIN, 0};
      const nfds_t timer_at = nf;
      if (timer_fd_ >= 0) fds[nf++] = pollfd{timer_fd_, POLLIN, 0};
      fds[nf++] = pollfd{wake_.fd, POLLIN, 0};
      const timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000), static_cast<long>(timeout_ns % 1'000'000'000)};
      if (held != nullptr) held->unlock();
      const int ready = ppoll(fds, nf, &ts, nullptr);
      // Awake: a writer's step_parked declines from here (it would not read
      // the port, and a writer stepping back to back could keep the lock
      // from a worker woken for datagrams); it signals instead.
      wake_.parked.store(false, std::memory_order_relaxed);
      if (held != nullptr) held->lock();
      uint64_t ignored;
      if (ready > 0 && (fds[nf - 1].revents & POLLIN) != 0) (void)!read(wake_.fd, &ignored, sizeof(ignored));
      // The timer a writer armed (step_parked): one-shot, read to disarm its readiness.
      if (ready > 0 && timer_fd_ >= 0 && (fds[timer_at].revents & POLLIN) != 0) (void)!read(timer_fd_, &ignored, sizeof(ignored));
    }
    wake_.parked.store(false, std::memory_order_relaxed);
  }

  // parks_on_ring: the worker has one serve session and nothing else, and
  // its writer does not poke it: it parks on that ring's futex, which the
  // writer's publish and a control's poke both wake, so its idle park may
  // last until the session's next deadline (max_park_ns). Datagrams to its
  // port (a PUNCH, ARP on DPDK) wait for that deadline or kRingParkMaxNs.
  bool parks_on_ring() const {
    return !wakeable_ && slots_.size() == 1 && slots_[0].serve != nullptr && tasks_.empty();
  }
  // max_park_ns: the longest park the idle strategy should ask for.
  uint64_t max_park_ns() const { return parks_on_ring() ? kRingParkMaxNs : ring::IdleStrategy::kDefaultMaxParkNs; }
  static constexpr uint64_t kRingParkMaxNs = 20'000'000;

  // next_deadline_ns: the earliest of the sessions' and tasks' deadlines.
  uint64_t next_deadline_ns(uint64_t now_ns) const {
    uint64_t until = UINT64_MAX;
    for (const TaskSlot& t : tasks_) until = std::min(until, t.task->next_deadline_ns(now_ns));
    for (const Slot& slot : slots_) {
      until = std::min(until, slot.serve != nullptr ? slot.serve->next_deadline_ns(now_ns)
                                                    : slot.mirror->next_deadline_ns(now_ns));
    }
    return until;
  }

  // park_wakes_for_records: a park ends when a record or datagram arrives,
  // not at its timeout — the worker serves one ring alone (it parks on the
  // ring, which its writer wakes), or serves no ring (a socket wakes its
  // poll()), or every source of work wakes it (wakeable) — and carries no
  // task. Otherwise records in a served ring are found by the park's
  // timeouts, and the idle strategy's spin is what finds them sooner.
  // (Kept as the sessions come and go, like wakeable(): the idle path asks
  // on every empty poll.)
  bool park_wakes_for_records() const { return park_wakes_for_records_; }

  size_t session_count() const { return slots_.size(); }
  size_t task_count() const { return tasks_.size(); }

  // wakeable: everything that can give this worker work wakes it while it
  // parks in poll() — datagrams through the port's wait_fd, commands and
  // relayed TCP frames through its eventfd, and the writer of every ring it
  // serves pokes it — so it parks until its sessions' next deadline (at
  // most kWakeableParkNs), not for the backoff's short timeouts: an idle
  // or paced worker then wakes for its work and its deadlines only.
  // (Kept as the sessions come and go: the idle path asks on every empty poll.)
  bool wakeable() const { return wakeable_; }
  static constexpr uint64_t kWakeableParkNs = 1'000'000'000;
  static constexpr uint64_t kStepParkedAfterNs = 200'000;  // asleep this long: a writer steps it (step_parked)

  // step_parked (WorkerWake::step_parked): a writer's thread runs one
  // iteration of a worker asleep in poll() for kStepParkedAfterNs or more
  // — the records it published leave now, with no wake-up on their path.
  // If a session's deadline moved before the one the worker sleeps to (the
  // heartbeat after a send), the writer arms the worker's timer for it: the
  // worker wakes once, at that deadline, not also at once to re-plan (an
  // eventfd write, the fallback without a timer). False when the worker is
  // not parked there, parked only a moment ago, or another thread holds it.
  static bool step_parked(void* self) {
    auto& w = *static_cast<PortWorker*>(self);
    std::unique_lock lk(w.step_mu_, std::try_to_lock);
    // Relaxed: the lock orders it (the worker raised it before unlocking).
    if (!lk.owns_lock() || !w.wake_.parked.load(std::memory_order_relaxed)) return false;
    const uint64_t now = monotonic_ns();
    // Asleep only a moment: traffic is dense (a producer flat out), and the
    // worker, woken, sends in parallel with the writer's next pass.
    if (now < w.parked_at_ns_ + kStepParkedAfterNs) return false;
    // Sending only: the port is read by the worker, woken by its own poll
    // when something arrives (a read here was a system call a pass that
    // found nothing: the peer's answers come between passes).
    w.step(now, false);
    ++w.stats_.inline_steps;
    const uint64_t next = w.next_deadline_ns(w.last_now_);
    if (next < w.wake_at_ns_) {
      if (w.arm_timer(next)) {
        w.wake_at_ns_ = next;
        ++w.stats_.rearms;
      } else {
        w.wake_.signal();  // it re-plans (off the records' path)
      }
    }
    return true;
  }

 private:
  // arm_timer: the parked worker's timer fires at `at_ns` (monotonic_ns's
  // clock: CLOCK_MONOTONIC); false without a timer, or if it could not be set.
  bool arm_timer(uint64_t at_ns) {
    if (timer_fd_ < 0) return false;
    itimerspec its{};
    at_ns = std::max<uint64_t>(at_ns, 1);  // 0 would disarm it
    its.it_value = timespec{static_cast<time_t>(at_ns / 1'000'000'000), static_cast<long>(at_ns % 1'000'000'000)};
    return timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr) == 0;
  }

  bool compute_park_wakes_for_records() const {
    if (!tasks_.empty()) return false;
    if (wakeable_ || (slots_.size() == 1 && slots_[0].serve != nullptr)) return true;
    for (const Slot& slot : slots_) {
      if (slot.serve != nullptr) return false;
    }
    return true;
  }

  struct Slot {
    uint32_t id;
    Serve* serve;
    Mirror* mirror;
    BindingId binding;
  };
  struct TaskSlot {
    uint32_t id;
    WorkerTask* task;
  };

  bool take_commands() {
    Command c;
    bool any = false;
    for (int i = 0; i < 16 && commands.try_pop(&c); ++i) {
      any = true;
      ++stats_.commands;
      answering_ = c.seq;  // give_back stamps it on the command's answer
      if (c.kind == Command::Kind::kRemove) {
        remove(c.id);
      } else if (c.kind == Command::Kind::kAddTask) {
        add_task(c);
      } else {
        add(c);
      }
    }
    stats_.sessions.set(slots_.size());
    stats_.tasks.set(tasks_.size());
    if (any) {
      wakeable_ = all_wake_it();
      park_wakes_for_records_ = compute_park_wakes_for_records();  // after wakeable_, which it reads
    }
    return any;
  }

  bool all_wake_it() const {
    if (!tasks_.empty()) return false;  // nothing wakes the worker for a task's work
    if constexpr (requires(const Port& p) { p.wait_fd(); }) {
      for (const Slot& slot : slots_) {
        if (slot.serve != nullptr && !slot.serve->writer_pokes()) return false;
      }
      return true;
    } else {
      return false;  // a poll-mode port: nothing to wait on
    }
  }

  void add(const Command& c) {
    BindingId b = 0;
    if (c.binding != nullptr) b = port_.install(std::move(*c.binding));
    const bool ok = slots_.size() < kMaxSessions && (c.binding == nullptr || b != 0);
    if (!ok) {
      if (b != 0) port_.uninstall(b);
      give_back(Retired{c.id, c.serve, c.mirror, c.binding, false});
      return;
    }
    if (c.serve != nullptr) {
      c.serve->attach(&port_, b, &wake_);
    } else {
      c.mirror->attach(&port_, b, &wake_);
    }
    if (b != 0) route_[b] = static_cast<int32_t>(slots_.size());
    slots_.push_back(Slot{c.id, c.serve, c.mirror, b});
    give_back(Retired{c.id, nullptr, nullptr, c.binding, true});  // the spent Prepared, to free
  }

  void add_task(const Command& c) {
    const bool ok = c.task != nullptr && tasks_.size() < kMaxTasks;
    if (ok) tasks_.push_back(TaskSlot{c.id, c.task});
    Retired r;
    r.id = c.id;
    r.installed = ok;
    if (!ok) r.task = c.task;  // refused: back to its owner
    give_back(r);
  }

  void remove(uint32_t id) {
    for (size_t i = 0; i < tasks_.size(); ++i) {
      if (tasks_[i].id != id) continue;
      Retired r;
      r.id = id;
      r.installed = true;
      r.task = tasks_[i].task;
      tasks_.erase(tasks_.begin() + static_cast<ptrdiff_t>(i));  // in order: tasks step in the order added
      give_back(r);
      return;
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].id != id) continue;
      const Slot gone = slots_[i];
      if (gone.binding != 0) {
        port_.uninstall(gone.binding);
        route_[gone.binding] = -1;
      }
      // Keep the table dense: the last slot takes the hole.
      slots_[i] = slots_.back();
      slots_.pop_back();
      if (i < slots_.size() && slots_[i].binding != 0) route_[slots_[i].binding] = static_cast<int32_t>(i);
      give_back(Retired{gone.id, gone.serve, gone.mirror, nullptr, true});
      return;
    }
    give_back(Retired{id, nullptr, nullptr, nullptr, false});  // nothing of that id: still one answer
  }

  void give_back(Retired r) {
    r.seq = answering_;
    // The counts first: a conductor whose exchange returns sees them as
    // this command left them (PortRunner::info after an add or remove).
    stats_.sessions.set(slots_.size());
    stats_.tasks.set(tasks_.size());
    // Twice as deep as the command queue: full only if the control thread
    // stopped draining it, and then its own adds and removes wait here.
    while (!retired.try_push(r)) {
      timespec ts{0, 100'000};
      nanosleep(&ts, nullptr);
    }
  }

  Port port_;
  std::vector<Slot> slots_;
  std::vector<TaskSlot> tasks_;
  std::array<RxDatagram, kBurst> rx_{};
  std::vector<int32_t> route_;  // binding id -> slot index, -1: none
  WorkerWake wake_;
  uint64_t answering_ = 0;   // the seq of the command being carried out (take_commands)
  int timer_fd_ = -1;        // a waitable port's: armed by step_parked, polled by park
  std::mutex step_mu_;       // see step_mutex()
  uint64_t last_now_ = 0;    // the latest `now` a step saw (under step_mu_)
  uint64_t wake_at_ns_ = 0;  // when the parked worker wakes by itself (under step_mu_)
  uint64_t parked_at_ns_ = 0;  // when it went to sleep (under step_mu_)
  bool wakeable_ = requires(const Port& p) { p.wait_fd(); };  // see wakeable(); no sessions yet
  bool park_wakes_for_records_ = true;  // see park_wakes_for_records(); nothing on it yet
  PortWorkerStats stats_;
};

}  // namespace ringfire::dataplane
