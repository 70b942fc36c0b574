// dpdk_workers.cc — the serve and mirror workers instantiated for the DPDK
// backend.
#include "dataplane/dpdk_port.h"
#include "dataplane/mirror_worker_impl.h"
#include "dataplane/serve_worker_impl.h"

namespace ringfire::dataplane {

template class ServeWorker<DpdkPort>;
template class MirrorWorker<DpdkPort>;

}  // namespace ringfire::dataplane
