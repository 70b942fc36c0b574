#!/usr/bin/env bash
# hugepages_test.sh — deploy/hugepages.sh for real: reserve 8 pages and a
# hugetlbfs mount, a ring created and read there, undo refuses while the
# ring is there and then gives back its pages (only its own, when others
# reserved meanwhile) and removes the mount; a second reserve, an undo of nothing and a bad
# size are refused with a message. Root.
# Usage: hugepages_test.sh PATH/TO/ringfire PATH/TO/hugepages.sh
set -u
rf=$1 hp=$2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pool=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
[[ -e $pool ]] || { echo "SKIP: no 2 MiB hugepages in this kernel"; exit 77; }
mnt=/tmp/rf-hp-$$
ring=rf-hptest-$$
cleanup() { "$rf" remove "$mnt/$ring" >/dev/null 2>&1; bash "$hp" undo --mount "$mnt" >/dev/null 2>&1; }
trap cleanup EXIT
before=$(cat "$pool")
out=$(bash "$hp" reserve 8 --mount "$mnt" 2>&1) || fail "reserve: $out"
[[ $(cat "$pool") -eq $((before + 8)) ]] || fail "the pool is $(cat "$pool"), want $((before + 8))"
mountpoint -q "$mnt" && grep -q "$mnt hugetlbfs" /proc/mounts || fail "$mnt is not a hugetlbfs mount"
out=$(bash "$hp" reserve 8 --mount "$mnt" 2>&1) && fail "a second reserve passed"
[[ $out == *"already set up"* ]] || fail "a second reserve: $out"
"$rf" create "$ring" --dir "$mnt" --capacity 4096 >/dev/null || fail "no ring on the hugetlbfs"
"$rf" publish "$mnt/$ring" --count 1000 --quiet >/dev/null || fail "publish on the hugetlbfs ring"
out=$("$rf" tail "$mnt/$ring" --from oldest --idle-exit 200ms --quiet)
[[ $out == "tail: 1000 records verified, 0 lost"* ]] || fail "reading the hugetlbfs ring: $out"
out=$(bash "$hp" undo --mount "$mnt" 2>&1) && fail "undo passed with a ring on the mount (it would delete it)"
[[ $out == *"ringfire remove them first"* ]] || fail "undo with a ring on the mount: $out"
"$rf" remove "$mnt/$ring" >/dev/null
out=$(bash "$hp" undo --mount "$mnt" 2>&1) || fail "undo: $out"
[[ $(cat "$pool") -eq $before ]] || fail "the pool is $(cat "$pool") after undo, want $before"
[[ ! -e $mnt ]] || fail "$mnt is still there"
out=$(bash "$hp" undo --mount "$mnt" 2>&1) && fail "an undo of nothing passed"
[[ $out == *"nothing to undo"* ]] || fail "an undo of nothing: $out"
# Someone else reserves pages while ours are held: undo gives back ours only.
bash "$hp" reserve 8 --mount "$mnt" >/dev/null 2>&1 || fail "the second reserve"
echo $(($(cat "$pool") + 2)) >"$pool"
bash "$hp" undo --mount "$mnt" >/dev/null 2>&1 || fail "the second undo"
[[ $(cat "$pool") -eq $((before + 2)) ]] || fail "the pool is $(cat "$pool") after an undo with 2 pages reserved meanwhile, want $((before + 2))"
echo "$before" >"$pool"  # the other's 2, given back by "them"
out=$(bash "$hp" reserve 8 --size 3M --mount "$mnt" 2>&1) && fail "--size 3M passed"
[[ $out == *"2M or 1G"* ]] || fail "--size 3M: $out"
if (( fails )); then echo "hugepages_test: $fails failed"; exit 1; fi
echo "hugepages_test: all passed"
