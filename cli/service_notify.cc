// service_notify.cc — sd_notify for `ringfire run` (see service_notify.h).
#include "cli/service_notify.h"

#include "ringfire_config.h"
#if RINGFIRE_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace ringfire::cli {

#if RINGFIRE_HAVE_SYSTEMD
ServiceNotifier::ServiceNotifier() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec != 0) watchdog_interval_ns_ = usec * 1000 / 2;
}
void ServiceNotifier::ready(const std::string& s) { sd_notifyf(0, "READY=1\nSTATUS=%s", s.c_str()); }
void ServiceNotifier::status(const std::string& s) { sd_notifyf(0, "STATUS=%s", s.c_str()); }
void ServiceNotifier::stopping() { sd_notify(0, "STOPPING=1"); }
void ServiceNotifier::tick(uint64_t now_ns) {
  if (watchdog_interval_ns_ == 0 || now_ns < next_ping_ns_) return;
  sd_notify(0, "WATCHDOG=1");
  next_ping_ns_ = now_ns + watchdog_interval_ns_;
}
#else
ServiceNotifier::ServiceNotifier() = default;
void ServiceNotifier::ready(const std::string&) {}
void ServiceNotifier::status(const std::string&) {}
void ServiceNotifier::stopping() {}
void ServiceNotifier::tick(uint64_t) {}
#endif

}  // namespace ringfire::cli
