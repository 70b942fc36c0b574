#!/usr/bin/env bash
# hugepages.sh — reserve hugepages per NUMA node and mount a hugetlbfs for
# DPDK and for rings (`ringfire create --dir MOUNT`), and undo exactly that.
#
#   deploy/hugepages.sh reserve PAGES [--size 2M|1G] [--node N|all] [--mount DIR]
#   deploy/hugepages.sh undo [--mount DIR] [--force]
#   deploy/hugepages.sh status
#
# reserve adds PAGES pages of --size (default 2M) on each --node (default
# all nodes with memory), checks the kernel really gave them (memory may be
# too fragmented for a late reservation: the message says what to do), and
# mounts a hugetlbfs of that page size at --mount (default
# /dev/hugepages-ringfire). What it changed is kept in MOUNT's state file
# (/run/ringfire-hugepages-<name>.state), so undo gives back the pages it
# added and unmounts, and nothing else (a reservation made meanwhile stays); it refuses while rings are on the
# mount (unmounting would delete them) unless --force. Root.
set -euo pipefail

die() { echo "hugepages.sh: $*" >&2; exit 1; }
usage() { sed -n 4,7p "$0" | sed 's/^# //' >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || die "run as root (it writes /sys and mounts)"
cmd=${1:-}; shift || true
pages=
size=2M
nodes=all
mount=/dev/hugepages-ringfire
force=no
[[ $cmd == reserve ]] && { [[ $# -ge 1 && $1 =~ ^[0-9]+$ ]] || usage; pages=$1; shift; }
while (($#)); do
  case $1 in
    --size) size=$2; shift 2 ;;
    --node) nodes=$2; shift 2 ;;
    --mount) mount=$2; shift 2 ;;
    --force) force=yes; shift ;;
    *) usage ;;
  esac
done
case $size in
  2M) kb=2048 ;;
  1G) kb=1048576 ;;
  *) die "--size $size: 2M or 1G" ;;
esac
state=/run/ringfire-hugepages-$(echo "$mount" | tr '/' '_').state

# node_dirs: the sysfs directories of the chosen nodes' pools.
node_dirs() {
  local d
  if [[ -d /sys/devices/system/node/node0 ]]; then
    for d in /sys/devices/system/node/node*; do
      [[ $nodes == all || $(basename "$d") == "node$nodes" ]] || continue
      [[ -e $d/hugepages/hugepages-${kb}kB/nr_hugepages ]] && echo "$d/hugepages/hugepages-${kb}kB"
    done
  else
    [[ $nodes == all || $nodes == 0 ]] && echo "/sys/kernel/mm/hugepages/hugepages-${kb}kB"
  fi
}

case $cmd in
  reserve)
    [[ -e $state ]] && die "$mount is already set up by an earlier reserve (undo it first: $0 undo --mount $mount)"
    dirs=$(node_dirs)
    [[ -n $dirs ]] && [[ -e /sys/kernel/mm/hugepages/hugepages-${kb}kB ]] ||
      die "no $size hugepages on node '$nodes' (1G pages need hugepagesz=1G on the kernel command line)"
    : >"$state.tmp"
    for d in $dirs; do
      before=$(cat "$d/nr_hugepages")
      want=$((before + pages))
      echo "$want" >"$d/nr_hugepages"
      got=$(cat "$d/nr_hugepages")
      echo "$d $((got - before))" >>"$state.tmp"  # what this reserve added: undo gives back that much
      if ((got < want)); then
        mv "$state.tmp" "$state"
        "$0" undo --mount "$mount" --size "$size" >/dev/null 2>&1 || true
        die "$d: asked for $want pages, the kernel gave $got (memory is fragmented: reserve at boot with hugepages=N on the kernel command line, or drop caches and retry)"
      fi
      echo "hugepages.sh: $(dirname "$(dirname "$d")" | xargs basename): $before -> $got pages of $size"
    done
    made=no
    [[ -d $mount ]] || { mkdir -p "$mount"; made=yes; }
    mount -t hugetlbfs -o "pagesize=$size,mode=1770" nodev "$mount"
    echo "mount $mount $made" >>"$state.tmp"
    mv "$state.tmp" "$state"
    echo "hugepages.sh: hugetlbfs ($size) at $mount; rings: ringfire create NAME --dir $mount; DPDK: --huge-dir $mount"
    ;;
  undo)
    [[ -e $state ]] || die "nothing to undo for $mount (no $state)"
    if mountpoint -q "$mount"; then
      files=$(ls -A "$mount")
      [[ -z $files || $force == yes ]] ||
        die "$mount holds $(echo "$files" | wc -l) file(s) ($(echo $files | cut -c1-80)): unmounting deletes them; ringfire remove them first, or undo --force"
      umount "$mount" || die "$mount is busy (a ring or a DPDK process still maps it: stop it, then undo)"
    fi
    while read -r d added made; do
      [[ $d == mount ]] && { [[ $made == yes ]] && rmdir "$added"; continue; }
      now=$(cat "$d/nr_hugepages")
      echo $((now > added ? now - added : 0)) >"$d/nr_hugepages"  # ours back; others' reservations stay
      echo "hugepages.sh: $d back to $(cat "$d/nr_hugepages") pages"
    done <"$state"
    rm -f "$state"
    ;;
  status)
    for d in /sys/kernel/mm/hugepages/hugepages-*; do
      echo "$(basename "$d"): $(cat "$d/nr_hugepages") reserved, $(cat "$d/free_hugepages") free"
    done
    mount -t hugetlbfs | sed 's/^/mounted: /'
    ;;
  *) usage ;;
esac
