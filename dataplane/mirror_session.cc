// mirror_session.cc — datagrams and TCP frames -> MirrorReceiver -> ring.
// The definitions are in mirror_session_impl.h; this file instantiates them for the
// kernel backend.
#include "dataplane/mirror_session_impl.h"

#include "dataplane/kernel_port.h"

namespace ringfire::dataplane {

template class MirrorSession<KernelPort>;

}  // namespace ringfire::dataplane
