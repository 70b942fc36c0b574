// mirror_worker.cc — datagrams and TCP frames -> MirrorReceiver -> ring.
// The definitions are in mirror_worker_impl.h; this file instantiates them for the
// kernel UDP backend.
#include "dataplane/mirror_worker_impl.h"

#include "dataplane/kernel_udp.h"

namespace ringfire::dataplane {

template class MirrorWorker<KernelUdp>;

}  // namespace ringfire::dataplane
