// serve_worker.cc — ring -> DATA frames -> UDP, with pacing and heartbeats.
// The definitions are in serve_worker_impl.h; this file instantiates them for the
// kernel UDP backend.
#include "dataplane/serve_worker_impl.h"

#include "dataplane/kernel_udp.h"

namespace ringfire::dataplane {

template class ServeWorker<KernelUdp>;

}  // namespace ringfire::dataplane
