// steer.bpf.c — the XDP program ringfire loads under DPDK's net_af_xdp PMD
// (devarg xdp_prog=). The PMD's default program takes every frame on the
// queue, so the host's kernel loses its TCP control connection, its ARP and
// everything else. This one steers to the AF_XDP socket only what belongs to
// the DPDK port's own IPv4 address, which differs from the kernel's address
// on the same interface:
//   - ARP whose target is that address (requests and replies);
//   - IPv4 to that address;
//   - multicast UDP to the group the port joined, and IGMP (the port
//     answers queries for its group itself);
// and passes the rest to the kernel. Until user space writes rf_config
// (after the PMD has attached the program), everything passes.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct rf_config {
  __u32 ip;     // network order; 0 = not configured, pass everything
  __u32 group;  // network order; 0 = none
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
    ours = arp->tpa == cfg->ip;
  } else if (eth->h_proto == bpf_htons(ETH_P_IP)) {
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end) return XDP_PASS;
    if (ip->daddr == cfg->ip) {
      ours = 1;
    } else if (ip->protocol == IPPROTO_IGMP) {
      ours = cfg->group != 0;
    } else if (ip->protocol == IPPROTO_UDP) {
      ours = cfg->group != 0 && ip->daddr == cfg->group;
    }
  }
  if (!ours) return XDP_PASS;
  return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
