// dpdk_workers.cc — the serve and mirror sessions instantiated for the
// DPDK backend.
#include "dataplane/dpdk_port.h"
#include "dataplane/mirror_session_impl.h"
#include "dataplane/serve_session_impl.h"

namespace ringfire::dataplane {

template class ServeSession<DpdkPort>;
template class MirrorSession<DpdkPort>;

}  // namespace ringfire::dataplane
