// fault_shaper.h — applies a FaultInjector's decisions to a stream of
// datagrams: drop, deliver twice, hold one back behind the next (reorder),
// or hold for a delay. Used on the receive path of a mirror and the send
// path of a source. Each datagram travels with its peer's endpoint (the
// sender on receive), which comes back with it. Copies only what it holds;
// fault injection is a test facility and is off (a single branch) in
// production.
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include "dataplane/fault_injector.h"
#include "dataplane/packet_port.h"
#include "proto/bytes.h"

namespace ringfire::dataplane {

class FaultShaper {
 public:
  explicit FaultShaper(const FaultConfig& c) : injector_(c), enabled_(c.any()) {}

  bool enabled() const { return enabled_; }
  uint64_t dropped() const { return dropped_; }
  // next_release_ns: when the first delayed datagram is due (UINT64_MAX:
  // none held for a time; a reordered one waits for the next datagram).
  uint64_t next_release_ns() const { return delayed_.empty() ? UINT64_MAX : delayed_.front().due_ns; }

  // offer passes one datagram through the faults; deliver(bytes, peer) is
  // called zero, one or two times now (a held datagram may follow it).
  template <typename Deliver>
  void offer(proto::ConstBytes d, const Endpoint& peer, uint64_t now_ns, Deliver&& deliver) {
    if (!enabled_) {
      deliver(d, peer);
      return;
    }
    switch (injector_.decide()) {
      case FaultAction::kDrop:
        ++dropped_;
        return;
      case FaultAction::kDuplicate:
        deliver(d, peer);
        deliver(d, peer);
        break;
      case FaultAction::kReorder:
        if (!reordered_) {
          reordered_.emplace(Held{0, peer, {d.begin(), d.end()}});
          return;
        }
        deliver(d, peer);
        break;
      case FaultAction::kDelay:
        delayed_.push_back(Held{now_ns + injector_.config().delay_ns, peer, {d.begin(), d.end()}});
        return;
      case FaultAction::kPass:
        deliver(d, peer);
        break;
    }
    if (reordered_) {  // the held datagram goes behind this one
      deliver(proto::ConstBytes(reordered_->bytes), reordered_->peer);
      reordered_.reset();
    }
  }

  // release delivers delayed datagrams that are due.
  template <typename Deliver>
  void release(uint64_t now_ns, Deliver&& deliver) {
    while (!delayed_.empty() && delayed_.front().due_ns <= now_ns) {
      deliver(proto::ConstBytes(delayed_.front().bytes), delayed_.front().peer);
      delayed_.pop_front();
    }
  }

 private:
  struct Held {
    uint64_t due_ns;
    Endpoint peer;
    std::vector<std::byte> bytes;
  };
  FaultInjector injector_;
  bool enabled_;
  uint64_t dropped_ = 0;
  std::optional<Held> reordered_;
  std::deque<Held> delayed_;
};

}  // namespace ringfire::dataplane
