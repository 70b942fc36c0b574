// service_notify.h — telling a service manager how the daemon is doing
// (sd_notify): READY=1 once every port and session is up, STATUS= lines,
// WATCHDOG=1 at half the unit's WatchdogSec from the conductor's loop (a
// conductor that stops turning stops the pings, and systemd restarts the
// unit), STOPPING=1 on the way out. Without NOTIFY_SOCKET (not under a
// Type=notify unit) or without libsystemd at build time, it does nothing.
// Conductor thread.
#pragma once

#include <cstdint>
#include <string>

namespace ringfire::cli {

class ServiceNotifier {
 public:
  ServiceNotifier();
  void ready(const std::string& status);
  void status(const std::string& status);
  void stopping();
  // tick pings the watchdog when it is due (call every loop turn).
  void tick(uint64_t now_ns);
  bool watchdog_enabled() const { return watchdog_interval_ns_ != 0; }

 private:
  uint64_t watchdog_interval_ns_ = 0;  // half WATCHDOG_USEC; 0: no watchdog
  uint64_t next_ping_ns_ = 0;
};

}  // namespace ringfire::cli
