// conductor_agent.h — work an engine's conductor runs beside its sessions'
// control: a stream-mux node's control connections, channel set-up and
// liveness (node/). The same agent runs on a thread of its own (an engine
// the node made for itself, whose conductor that thread is) or on a host
// engine's conductor (`ringfire run` with a [[node]]): ownership never
// depends on which thread happens to call (Aeron's agent invoker).
// Conductor thread only.
#pragma once

#include <cstdint>

namespace ringfire::engine {

class ConductorAgent {
 public:
  virtual ~ConductorAgent() = default;
  // conduct does what is ready or due and returns when it must run next
  // (monotonic ns); readable descriptors it gave Engine::watch wake the
  // conductor sooner. Called by Engine::run_once after the sessions' turn,
  // so it may add and remove sessions.
  virtual uint64_t conduct(uint64_t now_ns) = 0;
};

}  // namespace ringfire::engine
