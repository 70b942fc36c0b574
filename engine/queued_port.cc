// queued_port.cc — see queued_port.h.
#include "engine/queued_port.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace ringfire::engine {

size_t QueuedPort::pick(uint16_t udp_port) const {
  if (udp_port != 0) {
    if (auto it = fixed_.find(udp_port); it != fixed_.end()) return it->second.first;
  }
  return static_cast<size_t>(std::min_element(load_.begin(), load_.end()) - load_.begin());
}

void QueuedPort::placed(const void* link, size_t q, uint16_t udp_port) {
  placed_[link] = Placed{q, udp_port};
  ++load_[q];
  if (udp_port != 0) {
    auto& [queue, n] = fixed_[udp_port];
    queue = q;
    ++n;
  }
}

size_t QueuedPort::unplaced(const void* link) {
  auto it = placed_.find(link);
  if (it == placed_.end()) return queues_.size();
  const Placed p = it->second;
  placed_.erase(it);
  --load_[p.queue];
  if (p.udp_port != 0) {
    if (auto f = fixed_.find(p.udp_port); f != fixed_.end() && --f->second.second == 0) fixed_.erase(f);
  }
  return p.queue;
}

absl::StatusOr<ServePlaced> QueuedPort::open_serve(ServeRequest r) {
  const uint16_t udp_port = r.bind.udp_port;
  const size_t q = pick(udp_port);
  auto s = queues_[q]->open_serve(std::move(r));
  if (s.ok()) placed(s->link, q, udp_port);
  return s;
}

void QueuedPort::close_serve(dataplane::ServeLink* link) {
  const size_t q = unplaced(link);
  if (q < queues_.size()) queues_[q]->close_serve(link);
}

absl::StatusOr<dataplane::MirrorLink*> QueuedPort::open(control::MirrorPlaneRequest r) {
  const uint16_t udp_port = r.bind ? r.bind->udp_port : 0;
  const size_t q = pick(udp_port);
  auto m = queues_[q]->open(std::move(r));
  if (m.ok()) placed(*m, q, udp_port);
  return m;
}

void QueuedPort::close(dataplane::MirrorLink* link) {
  const size_t q = unplaced(link);
  if (q < queues_.size()) queues_[q]->close(link);
}

absl::Status QueuedPort::add_task(dataplane::WorkerTask* task) {
  const size_t q = pick(0);
  absl::Status st = queues_[q]->add_task(task);
  if (st.ok()) placed(task, q, 0);
  return st;
}

void QueuedPort::remove_task(dataplane::WorkerTask* task) {
  const size_t q = unplaced(task);
  if (q < queues_.size()) queues_[q]->remove_task(task);
}

uint64_t QueuedPort::port_drops() const {
  return std::accumulate(queues_.begin(), queues_.end(), uint64_t{0},
                         [](uint64_t n, const std::unique_ptr<PortHandle>& q) { return n + q->port_drops(); });
}

std::string QueuedPort::describe() const {
  return absl::StrCat(queues_.front()->describe(), " (", queues_.size(), " queues)");
}

PortInfo QueuedPort::info() const {
  PortInfo all = queues_.front()->info();
  all.path = absl::StrCat(all.path, ", ", queues_.size(), " queues");
  all.summary = absl::StrCat("queue 0: ", all.summary);
  all.queue_busy_ns.push_back(all.busy_ns);
  for (size_t q = 1; q < queues_.size(); ++q) {
    const PortInfo i = queues_[q]->info();
    absl::StrAppend(&all.worker, "; ", i.worker);
    all.drops += i.drops;
    all.sessions += i.sessions;
    all.tasks += i.tasks;
    all.datagrams += i.datagrams;
    all.unrouted += i.unrouted;
    all.busy_ns += i.busy_ns;
    all.queue_busy_ns.push_back(i.busy_ns);
    all.iterations += i.iterations;
    absl::StrAppend(&all.summary, " | queue ", q, ": ", i.summary);
  }
  return all;
}

void QueuedPort::stop() {
  for (auto& q : queues_) q->stop();
  placed_.clear();
  fixed_.clear();
  std::fill(load_.begin(), load_.end(), 0);
}

}  // namespace ringfire::engine
