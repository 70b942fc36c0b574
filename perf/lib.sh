# perf/lib.sh — what the harnesses in perf/ share, on top of the lab's
# helpers (tests/lab/lib.sh, sourced here): sourced after a script has
# parsed its options and set `build`.
#
#   perf_ringfire NAME      rf=$build/cli/ringfire, or exit 2 saying to build
#   cpu_ticks PID           the process's user + system CPU, in clock ticks
#   ticks_ns_per T0 T1 N    (T1 - T0) ticks as ns per one of N (0 when N is 0)
#   record_last FILE        a `ringfire record` output's last line: sets
#                           rec_records, rec_gaps, rec_lost, rec_mib (buffered)
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lab/lib.sh"

perf_ringfire() {
  rf=$build/cli/ringfire
  [[ -x $rf ]] || { echo "$1: no $rf (build first, or give --build DIR)" >&2; exit 2; }
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

ticks_ns_per() {
  python3 -c "import os,sys; t0,t1,n=map(int,sys.argv[1:]); print(round((t1-t0)*1e9/os.sysconf('SC_CLK_TCK')/n, 1) if n else 0)" "$1" "$2" "$3"
}

record_last() {
  local last
  last=$(tail -1 "$1")
  rec_records=$(sed -n 's/.*lag [0-9]*, \([0-9]*\) records.*/\1/p' <<<"$last")
  rec_gaps=$(sed -n 's/.* \([0-9]*\) gaps (\([0-9]*\) lost).*/\1/p' <<<"$last")
  rec_lost=$(sed -n 's/.* gaps (\([0-9]*\) lost).*/\1/p' <<<"$last")
  rec_mib=$(sed -n 's/.* \([0-9]*\) MiB buffered.*/\1/p' <<<"$last")
}
