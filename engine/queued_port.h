// queued_port.h — a port of N queue pairs as one PortHandle: each queue a
// PortHandle of its own (its port object and the worker that owns it), a
// session placed on the queue whose worker holds the fewest (or on the
// queue that holds its fixed UDP port already: a UDP port's bindings live
// on one queue, dataplane::QueueShare), and closed on the one it was
// placed on. The port's counters are the queues' summed; its summary says
// each queue's. Conductor thread only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/port_handle.h"

namespace ringfire::engine {

class QueuedPort final : public PortHandle {
 public:
  explicit QueuedPort(std::vector<std::unique_ptr<PortHandle>> queues) : queues_(std::move(queues)) {}
  ~QueuedPort() override { stop(); }

  absl::StatusOr<ServePlaced> open_serve(ServeRequest r) override;
  void close_serve(dataplane::ServeLink* link) override;
  absl::StatusOr<dataplane::MirrorLink*> open(control::MirrorPlaneRequest r) override;
  void close(dataplane::MirrorLink* link) override;
  absl::Status add_task(dataplane::WorkerTask* task) override;
  void remove_task(dataplane::WorkerTask* task) override;
  uint64_t port_drops() const override;
  std::string describe() const override;
  PortInfo info() const override;
  void stop() override;

  size_t queues() const { return queues_.size(); }

 private:
  // pick: the queue for a session binding udp_port (0: any port).
  size_t pick(uint16_t udp_port) const;
  void placed(const void* link, size_t q, uint16_t udp_port);
  size_t unplaced(const void* link);  // its queue (queues_.size(): not placed here)

  std::vector<std::unique_ptr<PortHandle>> queues_;
  struct Placed {
    size_t queue = 0;
    uint16_t udp_port = 0;
  };
  std::map<const void*, Placed> placed_;  // by link or task
  std::vector<size_t> load_ = std::vector<size_t>(queues_.size());  // sessions and tasks by queue
  std::map<uint16_t, std::pair<size_t, size_t>> fixed_;  // a fixed UDP port: its queue, the sessions on it
};

}  // namespace ringfire::engine
