// steer.bpf.c — the XDP program ringfire loads under DPDK's net_af_xdp PMD
// (devarg xdp_prog=). The PMD's default program takes every frame on the
// queue, so the host's kernel would lose its TCP control connection, its ARP
// and everything else. This one steers to the AF_XDP socket only what is the
// DPDK port's, and passes the rest to the kernel. Two modes:
//   - shared address (the port uses the kernel's own address, as on a cloud
//     instance with one IP): only UDP to the port's address and UDP port, or
//     to its group and port; ARP stays with the kernel, which answers with
//     the same MAC;
//   - own address (a second address on the subnet): also ARP for it and
//     every IPv4 datagram to it.
// IGMP goes to the port when it has joined a group (it answers queries for
// its group itself). Until user space writes rf_config (after the PMD has
// attached the program), everything passes.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct rf_config {
  __u32 ip;      // network order; 0 = not configured, pass everything
  __u32 groups;  // how many groups the port has joined (IGMP is the port's if any)
  __u16 shared;  // 1: ip is also the kernel's address
  __u16 pad;
};

struct rf_binding {  // key of rf_bindings
  __u32 addr;   // network order: the port's address, or a group
  __u16 port;   // network order
  __u16 pad;
};

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct rf_config);
} rf_config SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, struct rf_binding);
  __type(value, __u8);
} rf_bindings SEC(".maps");

struct arp_ipv4 {  // the ARP body for Ethernet/IPv4
  __be16 htype, ptype;
  __u8 hlen, plen;
  __be16 op;
  __u8 sha[6];
  __be32 spa;
  __u8 tha[6];
  __be32 tpa;
} __attribute__((packed));

SEC("xdp")
int ringfire_steer(struct xdp_md *ctx) {
  void *data = (void *)(long)ctx->data;
  void *end = (void *)(long)ctx->data_end;
  __u32 key = 0;
  const struct rf_config *cfg = bpf_map_lookup_elem(&rf_config, &key);
  if (!cfg || cfg->ip == 0) return XDP_PASS;

  struct ethhdr *eth = data;
  if ((void *)(eth + 1) > end) return XDP_PASS;
  int ours = 0;
  if (eth->h_proto == bpf_htons(ETH_P_ARP)) {
    struct arp_ipv4 *arp = (void *)(eth + 1);
    if ((void *)(arp + 1) > end) return XDP_PASS;
    ours = !cfg->shared && arp->tpa == cfg->ip;
  } else if (eth->h_proto == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end) return XDP_PASS;
    if (ip->protocol == IPPROTO_IGMP) {
      ours = cfg->groups != 0;
    } else if (!cfg->shared && ip->daddr == cfg->ip) {
      ours = 1;
    } else if (ip->protocol == IPPROTO_UDP && !(ip->frag_off & bpf_htons(0x1fff))) {
      if (ip->ihl < 5) return XDP_PASS;
      struct udphdr *udp = (void *)ip + ip->ihl * 4;
      if ((void *)(udp + 1) > end) return XDP_PASS;
      struct rf_binding b = {ip->daddr, udp->dest, 0};
      ours = bpf_map_lookup_elem(&rf_bindings, &b) != 0;
    }
  }
  if (!ours) return XDP_PASS;
  return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
