// dpdk_port.h — the DPDK packet I/O backend: one ethdev (a PCI NIC or a
// vdev such as net_af_packet, net_af_xdp, net_memif), one RX and one TX
// queue of it (a port of N queues is N of these, a worker each, handing
// frames to each other: QueueShare), driven as a PacketPort that many
// sessions share. Each session has
// a binding (a UDP port on the port's address, and maybe a group on that
// port): received UDP is matched to a binding through a table indexed by
// the destination port, and sent from the binding's port. With no kernel
// stack under it, the port owns a small L2/L3: it answers ARP for its
// address and resolves its unicast peers (learning every sender it sees),
// joins its bindings' groups with IGMPv3 and answers queries, builds
// Ethernet/IPv4/UDP itself (UDP checksums by the port where it offers that,
// in software otherwise: af_xdp offers no offloads), and counts and drops
// everything that is not its own. The EAL in dpdk_eal.cc; the port's setup
// (pool, queues, bindings) in dpdk_port.cc; the bursts in
// dpdk_port_datapath.cc; ARP and IGMP decided and framed by L2Agent
// (l2_agent.h, no DPDK in it). Worker thread only after open(), but for
// prepare().
#pragma once

#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

#include <array>
#include <span>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "dataplane/dpdk_eal.h"
#include "dataplane/l2_agent.h"
#include "dataplane/counter.h"
#include "dataplane/neighbor_table.h"
#include "dataplane/packet_port.h"
#include "dataplane/tx_header_cache.h"
#include "proto/net/ethernet.h"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;

namespace ringfire::dataplane {

struct DpdkPortOptions {
  uint16_t port_id = 0;
  uint32_t ip = 0;          // the port's IPv4 address (host order)
  // The first binding, made at open (unless first_binding is false):
  // datagrams to udp_port (0: one the kernel picks) are ours, and to
  // join_group on it (0: none).
  bool first_binding = true;
  uint16_t udp_port = 0;
  uint32_t join_group = 0;
  uint8_t ttl = 1;
  uint16_t max_payload = 1472;  // the largest UDP payload it sends or receives
  uint32_t mbufs = 0;       // 0: sized for the port's queues (see open)
  // Peers whose MAC is fixed: never ARPed for, never relearned (a peer that
  // cannot answer ARP, e.g. behind the af_xdp PMD's default program).
  std::vector<StaticNeighbor> neighbors;
  // The exception port (a net_tap; -1: none): every well-formed frame that
  // is not ringfire's, and every ARP frame, goes to it, and what it sends
  // goes out of this port. Its MAC is made this port's, so the kernel on
  // the tap, given the port's address, answers ping, ARP and TCP for it.
  int exception_port = -1;
  // share_duplicates: a datagram given again to the same destination
  // (serve --dup N) goes out as the same mbuf, its reference count raised,
  // not built and copied again (off: each is built; for the A/B).
  bool share_duplicates = true;
  // Queues: this object drives RX/TX queue pair `queue` of the `queues`
  // the ethdev is set up with (by its first open), each pair a worker's
  // (DpdkPort::open_queues makes them all).
  uint16_t queue = 0;
  uint16_t queues = 1;
};

// QueueShare: what the queues of one ethdev share. A frame arrives on
// whichever queue the link puts it (a memif peer's queue i lands on our
// queue i; a NIC hashes), not necessarily the one whose worker holds the
// session: `owner` says which queue's worker holds each UDP port's
// bindings (queue + 1; 0: none), and each queue has an inbox of frames
// other queues received for it (multi-producer, single-consumer). Each
// worker writes `owner` for its own bindings (install/uninstall) and every
// worker reads it; relaxed, as a hint: the inbox's ring orders the frames,
// and the owner matches each against its own bindings again.
struct QueueShare {
  QueueShare(uint16_t port_id, uint16_t queues);
  ~QueueShare();  // frames still in an inbox are freed
  QueueShare(const QueueShare&) = delete;
  QueueShare& operator=(const QueueShare&) = delete;
  bool ok() const;  // every inbox was made
  std::unique_ptr<std::atomic<uint8_t>[]> owner;  // 65536 entries, by UDP port
  std::vector<rte_ring*> inbox;                   // by queue
  std::atomic<uint32_t> groups{0};                // joined, over every queue (relaxed: a count)
  // steer_mu: a queue's change of `groups` and its write of the count to
  // the XDP map, as one (else a queue's stale count, written last, could
  // turn IGMP steering off while another queue holds a group). Joins and
  // leaves only: never on the datapath.
  std::mutex steer_mu;
};

// DpdkPortStats: written by the worker, readable by any thread meanwhile.
struct alignas(64) DpdkPortStats {
  Counter rx_frames;
  Counter rx_not_ours;     // other traffic: counted, dropped (or handed to the exception port)
  Counter rx_exception;    // handed to the exception port
  Counter tx_exception;    // from the exception port out of this one
  Counter rx_malformed;    // failed to parse: counted, dropped
  Counter arp_replies;
  Counter igmp_reports;
  Counter tx_frames;
  Counter tx_no_neighbor;  // dropped while ARP resolves
  Counter tx_refused;      // the TX queue was full
  Counter tx_no_mbuf;      // the pool was empty
  Counter tx_too_big;      // larger than an mbuf's data room
  Counter tx_shared;       // duplicates sent as the previous datagram's mbuf (not copied)
  Counter tx_in_place;     // frames sent from the mbuf they were built in (lease_tx: not copied)
  Counter neighbors;       // in the table now (stored)
  Counter neighbors_full;  // a new neighbor the full table could not take
  Counter link_ups;        // the link came back up (its groups announced again)
  // Queues (QueueShare): frames this queue received for another queue's
  // session and handed to it, those the other's full inbox refused, and
  // those taken from this queue's inbox.
  Counter rx_handed_off;
  Counter rx_handoff_full;
  Counter rx_from_queues;
  // drops: what was lost at this port, either way (not "not ours").
  uint64_t drops() const {
    return rx_malformed.get() + tx_no_neighbor.get() + tx_refused.get() + tx_no_mbuf.get() + tx_too_big.get() +
           rx_handoff_full.get();
  }
};

class DpdkPort {
 public:
  // The serve's default pacing interval here (ServeConfig::pace_ns): a
  // datagram costs the port ~0.1 us (memif) to ~2 us (af_xdp's copy-mode
  // kick), so records leave within 5 us at rates a 50 us interval would
  // hold back by ~25 us a hop; steady rates over ~200 k frames/s batch.
  static constexpr uint64_t kDefaultPaceNs = 5'000;
  static constexpr uint16_t kMaxQueues = 16;  // queue pairs a port may have (a worker each)
  static absl::StatusOr<DpdkPort> open(const DpdkPortOptions& o);
  // open_queues: o.queues port objects on one ethdev, queue 0 first, each
  // for its own worker, sharing a QueueShare (one plain open for 1). On
  // net_af_xdp the vdev must have been made with queue_count = queues
  // (engine/ports.cc does; ringfire's XDP program sends each queue's frames
  // to that queue's socket), and DPDK 22.11's PMD takes no more queues than
  // the interface has combined channels: a NIC's, untested here, since a
  // veth has none (its rx and tx channels are separate) and opens one.
  static absl::StatusOr<std::vector<DpdkPort>> open_queues(const DpdkPortOptions& o);
  DpdkPort(DpdkPort&& o) noexcept;
  DpdkPort& operator=(DpdkPort&&) = delete;
  ~DpdkPort();

  // Prepared is a binding on its way to the worker: its UDP port held in
  // the kernel too (so no other process, kernel or DPDK, takes it, and the
  // kernel answers nothing on it), and steered to the port by its XDP
  // program on af_xdp.
  struct Prepared {
    uint32_t group = 0;
    uint16_t udp_port = 0;
    int reservation_fd = -1;  // owned: closed unless install takes it
    Endpoint local;
    Prepared() = default;
    Prepared(Prepared&& o) noexcept
        : group(o.group), udp_port(o.udp_port), reservation_fd(std::exchange(o.reservation_fd, -1)), local(o.local) {}
    Prepared& operator=(Prepared&& o) noexcept {
      std::swap(group, o.group);
      std::swap(udp_port, o.udp_port);
      std::swap(reservation_fd, o.reservation_fd);
      std::swap(local, o.local);
      return *this;
    }
    ~Prepared() {
      if (reservation_fd >= 0) close(reservation_fd);
    }
  };
  // prepare does the fallible half of a binding. Any thread: it reads only
  // what never changes after open(), and makes syscalls.
  absl::StatusOr<Prepared> prepare(const BindSpec& spec) const;
  // install (worker) makes it live and returns its id (0 when full); a
  // group is joined (IGMPv3) as it is installed, and left with its last binding.
  BindingId install(Prepared p);
  void uninstall(BindingId b);

  size_t rx_burst(RxDatagram* out, size_t n);
  size_t tx_burst(const TxDatagram* in, size_t n);
  // lease_tx lends an mbuf whose data room a frame is built in (LendingPort);
  // tx_burst stamps the headers in front of it and sends it uncopied to the
  // first destination that names it (a duplicate to the same one shares it,
  // other destinations get a copy). release_tx frees the lender's reference.
  bool lease_tx(TxLease* l);
  static void release_tx(void* handle);
  // local: a binding's address (the first binding's for 0).
  Endpoint local(BindingId b = 0) const;
  const DpdkPortStats& stats() const { return stats_; }
  // summary: the counters in one line, for an operator; drops: the losses
  // among them. Both may be called from another thread while it runs.
  std::string summary() const;
  uint64_t drops() const { return stats_.drops(); }
  const proto::net::MacAddr& mac() const { return mac_; }

 private:
  struct Binding {
    uint16_t udp_port = 0;
    uint32_t group = 0;
    int reservation_fd = -1;
    BindingId next = 0;  // the next binding on the same UDP port (another group)
    bool live = false;
  };
  // match: the binding a UDP datagram to dst:dst_port belongs to, or 0.
  BindingId match(uint32_t dst, uint16_t dst_port) const {
    for (BindingId b = by_port_[dst_port]; b != 0; b = bindings_[b].next) {
      const Binding& x = bindings_[b];
      if (dst == o_.ip || (x.group != 0 && dst == x.group)) return b;
    }
    return 0;
  }
  uint16_t port_of(BindingId b) const { return b != 0 && b < bindings_.size() ? bindings_[b].udp_port : first_port_; }
  void joined_changed();
  explicit DpdkPort(const DpdkPortOptions& o) : o_(o) {}
  void release_rx();
  void learn(uint32_t ip, const proto::net::MacAddr& mac, NeighborTable::Source source);
  bool send_frame(rte_mbuf* m);
  // send_l2 sends the frame `write` puts in a fresh mbuf (L2Agent's
  // frames); false when none went.
  bool send_l2(absl::FunctionRef<size_t(proto::MutableBytes)> write);
  void stamp_frame(rte_mbuf* m, std::byte* b, const proto::net::UdpTemplate& header, size_t payload);
  // send_igmp_report announces every joined group and schedules the next
  // report; send_igmp_leave says `groups` are left. IGMPv3, to 224.0.0.22,
  // in frames of up to L2Agent::kMaxGroups groups.
  void send_igmp_report();
  void send_igmp_leave(std::span<const uint32_t> groups);
  // l2_tick, every 100 ms from rx_burst: the link's state, and the
  // membership reports due.
  void l2_tick(uint64_t now);
  // link_is_up: 1 up, 0 down, -1 cannot tell.
  int link_is_up() const;
  bool rx_may_have_frames();
  // not_ours takes a frame that is someone else's: to the exception port's
  // next burst, or freed. flush_exception sends that burst, and forwards
  // what the exception port has sent (polled every 100 us: a tap read is a
  // syscall).
  void not_ours(rte_mbuf* m);
  void to_exception(rte_mbuf* m);  // not counted: an ARP frame also handled here
  void flush_exception();
  // hand_off gives a UDP frame no binding here matched to the queue whose
  // worker holds its UDP port; false when none other does (not ours).
  bool hand_off(rte_mbuf* m, uint16_t udp_port);

  DpdkPortOptions o_;
  std::shared_ptr<QueueShare> share_;  // with the ethdev's other queues (none: one queue)
  uint32_t groups_ = 0;                // l2_'s groups as last added to share_->groups
  std::string steer_iface_;  // af_xdp under ringfire's XDP program: its interface
  bool open_ = false;
  std::vector<Binding> bindings_;            // index: binding id (0 unused)
  std::vector<BindingId> by_port_;           // UDP port -> first binding on it (65536 entries)
  uint16_t first_port_ = 0;                  // binding 0's UDP port: the first live binding's
  rte_mempool* pool_ = nullptr;
  proto::net::MacAddr mac_{};
  std::array<rte_mbuf*, kBurst> rx_held_{};  // the last burst's mbufs, freed on the next
  size_t rx_held_n_ = 0;
  std::array<rte_mbuf*, kBurst> exc_out_{};  // this burst's frames for the exception port
  size_t exc_out_n_ = 0;
  uint64_t next_exc_poll_tsc_ = 0;
  NeighborTable neighbors_;
  TxHeaderCache tx_headers_;  // built at open, from mac_, the address and the TTL
  L2Agent l2_;  // ARP answers and requests, the groups joined and their reports
  uint64_t next_l2_tsc_ = 0;
  // link_up_: the link as last looked at; link_known_ false while no group
  // is joined (nothing to announce, so no look: an ioctl every 100 ms on
  // the worker for nothing), and the next look only records it.
  bool link_up_ = true;
  bool link_known_ = false;
  std::string link_iface_;   // the kernel interface under the port ("" for a NIC, memif)
  int link_probe_fd_ = -1;   // owned: a socket to ask the kernel for link_iface_'s flags
  // af_xdp: an empty RX burst costs a recvfrom(); poll the socket's RX ring
  // producer instead and burst when it moved (or the last burst was full),
  // or every 1 ms regardless (the syscall drives NAPI for a NIC whose IRQs
  // are deferred to busy polling: napi_defer_hard_irqs; not the default).
  bool rx_gate_ = false;
  bool last_rx_full_ = false;
  uint64_t next_forced_rx_tsc_ = 0;
  uint64_t forced_rx_interval_ = 0;
  bool tx_udp_cksum_ = false;  // the port computes UDP checksums
  uint16_t ip_id_ = 0;
  DpdkPortStats stats_;
};

static_assert(PacketPort<DpdkPort>);

}  // namespace ringfire::dataplane
