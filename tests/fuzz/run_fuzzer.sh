#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SEED_DIR WORK_DIR SECONDS — runs one libFuzzer target
# for a bounded time, starting from the committed seed corpus; new inputs go
# to WORK_DIR (a build directory), never into the source tree.
set -eu
fuzzer=$1 seeds=$2 work=$3 secs=$4
mkdir -p "$work"
# -error_exitcode: libFuzzer's default, 77, is what meson takes for "skipped":
# a crash must fail the test.
exec "$fuzzer" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  -error_exitcode=1 -timeout_exitcode=1 \
  "$work" "$seeds"
