#!/usr/bin/env bash
# run.sh — the whole test suite, from a fresh machine: installs what it needs
# (deploy/setup.sh), builds with -Werror, runs the unit, integration and CLI
# tests, then the threaded unit tests again under ThreadSanitizer (ring,
# worker, control, mux, node: no suppressions), then builds the decoders
# under clang + libFuzzer + ASan/UBSan and fuzzes each briefly. Leaves no
# mounts, hugepages or processes behind.
# Ends with one line: "tests: N passed, N failed, N skipped".
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

bash deploy/setup.sh || { echo "tests: 0 passed, 1 failed (setup)"; exit 1; }

# 96 more 2 MiB pages: a private hugetlbfs for the hugetlbfs ring test, and
# the DPDK labs' --in-memory EALs (which take their pages from the pool: up
# to 128 MiB for af_xdp's UMEM-sized pool).
# On exit it gives back the pages it added, not a snapshot of the count:
# another run (or anything else) changing the pool meanwhile keeps its own.
huge_dir=$(mktemp -d /tmp/rf-huge.XXXXXX)
huge_pool=/proc/sys/vm/nr_hugepages
huge_added=0
cleanup() {
  umount "$huge_dir" 2>/dev/null
  rmdir "$huge_dir" 2>/dev/null
  local now
  now=$(cat "$huge_pool")
  ((huge_added > 0)) && echo $((now > huge_added ? now - huge_added : 0)) >"$huge_pool" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # the EXIT trap gives the pages back on a signal too
huge_before=$(cat "$huge_pool")
echo $((huge_before + 96)) >"$huge_pool" 2>/dev/null
huge_added=$(($(cat "$huge_pool") - huge_before))
if mount -t hugetlbfs -o pagesize=2M none "$huge_dir" 2>/dev/null &&
   (( $(awk '/HugePages_Free/ {print $2}' /proc/meminfo) >= 2 )); then
  export RINGFIRE_TEST_HUGETLBFS=$huge_dir
else
  echo "run.sh: no hugetlbfs here; the hugetlbfs ring test will skip"
fi

passed=0 failed=0 skipped=0
# tally BUILD_DIR: adds one meson test run's counts from its JSON log.
tally() {
  local counts
  counts=$(python3 - "$1/meson-logs/testlog.json" <<'PY'
import json, sys
ok = fail = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): ok += 1
    elif r == "SKIP": skip += 1
    else: fail += 1
print(ok, fail, skip)
PY
)
  read -r o f s <<<"$counts"
  passed=$((passed + o)) failed=$((failed + f)) skipped=$((skipped + s))
}

# run_suite NAME BUILD_DIR SETUP_ARGS...: configure, build, test.
run_suite() {
  local name=$1 dir=$2
  shift 2
  if [[ ! -d $dir ]]; then
    "$@" "$dir" >"/tmp/rf-setup-$name.log" 2>&1 || {
      cat "/tmp/rf-setup-$name.log"
      echo "run.sh: $name: meson setup failed"
      failed=$((failed + 1))
      return
    }
  fi
  if ! ninja -C "$dir"; then
    echo "run.sh: $name: build failed"
    failed=$((failed + 1))
    return
  fi
  meson test -C "$dir" --print-errorlogs --num-processes 2
  tally "$dir"
}

run_suite main build-test meson setup -Dwerror=true -Dtests=enabled -Dbenchmarks=enabled

# The threaded unit tests under ThreadSanitizer: only their targets are
# built (the labs and tools would add minutes and no threads of their own).
tsan_tests=(consumer multiprocess idle wait worker serve_control mirror_control node node_sim peer_mux recorder replay_feed port_runner)
tsan_targets=(tests/ring_consumer_test tests/ring_multiprocess_test tests/ring_idle_test tests/ring_wait_test tests/dataplane_worker_test
              tests/control_serve_control_test tests/control_mirror_control_test tests/node_test tests/node_sim_test tests/mux_peer_mux_test
              tests/archive_recorder_test tests/archive_replay_feed_test tests/engine_port_runner_test)
if [[ ! -d build-tsan ]] && ! meson setup build-tsan -Db_sanitize=thread -Db_lundef=false -Dtests=enabled \
     -Dbenchmarks=disabled -Ddpdk=disabled -Dxdp=disabled >/tmp/rf-setup-tsan.log 2>&1; then
  cat /tmp/rf-setup-tsan.log
  echo "run.sh: tsan: meson setup failed"
  failed=$((failed + 1))
elif ! ninja -C build-tsan "${tsan_targets[@]}"; then
  echo "run.sh: tsan: build failed"
  failed=$((failed + 1))
else
  # halt_on_error: a race fails its test (exit 66) rather than scrolling by.
  TSAN_OPTIONS="halt_on_error=1 exitcode=66" meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes 1 \
    "${tsan_tests[@]}"
  tally build-tsan
fi

run_suite fuzz build-fuzz env CXX=clang++ meson setup -Dfuzz=true

echo "tests: $passed passed, $failed failed, $skipped skipped"
(( failed == 0 ))
