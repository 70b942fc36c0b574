// serve_session.cc — ring -> DATA frames -> UDP, with pacing and heartbeats.
// The definitions are in serve_session_impl.h; this file instantiates them for the
// kernel backend.
#include "dataplane/serve_session_impl.h"

#include "dataplane/kernel_port.h"

namespace ringfire::dataplane {

template class ServeSession<KernelPort>;

}  // namespace ringfire::dataplane
