#!/usr/bin/env bash
# cycles_bench.sh — a port worker's cost per record, as testpmd's
# --record-core-cycles counts it: the worker's time in iterations that did
# work (ctl list: busy_ns) over the records it served or mirrored, 64-byte
# records at --rate (default 1 M/s) for --seconds, one serve on h1 and one
# mirror on h2 (`ringfire run`, multicast), per backend; beside
# BM_RingRead/64 and BM_RingPublish/64 measured in the same run, and the
# ring read across cores (perf/ring_crosscore.cc: records published on CPU 0,
# read on CPU 1 22 at a time, as the serve here reads them; and then
# published into a ring of the reader's, as the mirror moves them). Two runs
# per backend: the measured worker alone on CPU 1 (its EAL lcore, or the
# whole daemon pinned for the kernel backend), the other side and the
# publisher on CPU 0.
# Usage: perf/cycles_bench.sh [--build DIR] [--backends kernel,af_xdp,memif]
#        [--rate R] [--seconds N] [--peer-idle MODE] [--pace-us US] [--huge-dir DIR] [--json FILE]   (root)
# --huge-dir: the DPDK daemons' EAL memory (mbufs, memif regions) in 2 MiB
# pages on that hugetlbfs mount (the default is --no-huge, 4 KiB pages);
# the caller reserves the pages (vm.nr_hugepages, 256 a daemon).
# --pace-us: the serve's pacing interval (default: its port kind's, 50 us on
# the kernel backend, 5 on DPDK); fewer, fuller frames cost fewer cycles.
# --peer-idle: the idle strategy of the side not measured (default: the
# daemon's own). On the kernel backend over veth a parked mirror's wake-up
# runs in the serve's sendmmsg (veth delivers on the sender's CPU), so the
# serve's figure includes it unless the mirror spins (--peer-idle spin).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build
backends=kernel,af_xdp,memif
rate=1M
peer_idle=
pace=
huge_dir=
seconds=5
json=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --backends) backends=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --peer-idle) peer_idle=$2; shift 2 ;;
    --pace-us) pace=$2; shift 2 ;;
    --huge-dir) huge_dir=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--backends LIST] [--rate R] [--seconds N] [--peer-idle MODE] [--pace-us US] [--huge-dir DIR] [--json FILE]" >&2; exit 2 ;;
  esac
done
rf=$build/cli/ringfire
source "$top/tests/lab/lib.sh"
lab_up 2
lab_logs cycles

# ctl_get HOST SOCK EXPR: a value from `ctl list` (j: the reply).
ctl_get() {
  on "$1" "$rf" ctl "$2" list | python3 -c "import json,sys; j=json.load(sys.stdin); print($3)"
}

bench=$(taskset -c 1 "$build/perf/ring_benchmark" --benchmark_filter='BM_Ring(Read|Publish)/64$' \
  --benchmark_format=json 2>/dev/null)
ring_read=$(python3 -c "import json,sys; b={x['name']: x['cpu_time'] for x in json.loads(sys.argv[1])['benchmarks']}; print(b['BM_RingRead/64'])" "$bench")
ring_publish=$(python3 -c "import json,sys; b={x['name']: x['cpu_time'] for x in json.loads(sys.argv[1])['benchmarks']}; print(b['BM_RingPublish/64'])" "$bench")
# The ring read as the serve reads it here: records published on CPU 0 at
# --rate, read on CPU 1 a datagram's worth (22) at a time (ring_crosscore.cc).
crosscore=$("$build/perf/ring_crosscore" --rate "$(numfmt --from=si "${rate^^}")" --seconds 3 --size 64 --batch 22)
ring_read_xc=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['reader_ns_per_record'])" "$crosscore")
# ... and as a mirror moves them: read across cores, then published into a
# ring of its own (relay).
ring_relay_xc=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['relay_ns_per_record'])" "$crosscore")
echo "BM_RingRead/64 ${ring_read} ns, BM_RingPublish/64 ${ring_publish} ns, ring read across cores ${ring_read_xc} ns, read across cores and published ${ring_relay_xc} ns"

results=()
for backend in ${backends//,/ }; do
  declare -A got=()
  for measured in serve mirror; do
    src=$(ring_name "src-$backend-$measured")
    dst=$(ring_name "dst-$backend-$measured")
    "$rf" create "$src" --capacity 1048576 --slot-size 64 >/dev/null
    # cpu HOST: where that host's worker runs
    cpu() { if [[ ($1 == 1 && $measured == serve) || ($1 == 2 && $measured == mirror) ]]; then echo 1; else echo 0; fi; }
    port() {  # port HOST: its [[port]] table
      case $backend in
        kernel) printf '[[port]]\nname = "p"\niface = "eth0"\n' ;;
        af_xdp) printf '[[port]]\nname = "p"\nbackend = "dpdk"\niface = "eth0"\npmd = "af_xdp"\n' ;;
        memif)
          local role=server ip=198.18.1.1
          [[ $1 == 2 ]] && role=client ip=198.18.1.2
          printf '[[port]]\nname = "p"\nbackend = "dpdk"\ndevice = "net_memif0,role=%s,socket=%s,socket-abstract=no"\nip = "%s"\n' \
            "$role" "$logs/memif-$measured.sock" "$ip" ;;
      esac
      # DPDK: the main lcore and the worker's on the same CPU (the EAL maps
      # lcore N to CPU N: the worker goes on lcore 1 with -l 0,1 when
      # measured, else everything on CPU 0 in a thread).
      [[ $backend != kernel && $(cpu "$1") == 1 ]] && printf 'lcore = 1\n'
      [[ -n $peer_idle && $(cpu "$1") == 0 ]] && printf 'idle = "%s"\n' "$peer_idle"
      :
    }
    pin() { echo taskset -c "$(if [[ $backend == kernel || $(cpu "$1") == 0 ]]; then cpu "$1"; else echo 0,1; fi)"; }
    eal() {  # eal HOST: the EAL arguments when on hugepages (else ringfire's default)
      [[ -z $huge_dir || $backend == kernel ]] && return
      printf 'eal = "-l %s --main-lcore 0 -m 256 --huge-dir %s --huge-unlink --no-shconf --no-pci --file-prefix %seal%s --log-level=lib.eal:error"\n' \
        "$([[ $(cpu "$1") == 1 ]] && echo 0,1 || echo 0)" "$huge_dir" "$LAB_PREFIX" "$1"
    }
    { printf 'ctl = "%s/h1.sock"\nquiet = true\n' "$logs"; eal 1; port 1
      printf '[[serve]]\nname = "s"\nring = "%s"\nlisten = "198.18.0.1:7400"\nmulticast = "239.255.9.1:7401"\n' "$src"
      [[ -n $pace ]] && printf 'pace-us = %s\n' "$pace"
    } >"$logs/h1.toml"
    { printf 'ctl = "%s/h2.sock"\nquiet = true\n' "$logs"; eal 2; port 2
      printf '[[mirror]]\nname = "m"\nsource = "198.18.0.1:7400"\nring = "%s"\n' "$dst"
    } >"$logs/h2.toml"
    first=${#LAB_PIDS[@]}
    bg 1 "$logs/h1-$backend-$measured" $(pin 1) "$rf" run "$logs/h1.toml"
    wait_for 15 test -S "$logs/h1.sock" || { echo "$backend: h1 did not start: $(tail -n 3 "$logs/h1-$backend-$measured")"; exit 1; }
    bg 2 "$logs/h2-$backend-$measured" $(pin 2) "$rf" run "$logs/h2.toml"
    wait_for 15 test -S "$logs/h2.sock" || { echo "$backend: h2 did not start: $(tail -n 3 "$logs/h2-$backend-$measured")"; exit 1; }
    wait_for 15 [ "$(ctl_get 2 "$logs/h2.sock" "j['sessions'][0]['state']")" == streaming ] ||
      { echo "$backend: the mirror does not stream"; exit 1; }
    sleep 1
    h=1; sock=$logs/h1.sock
    [[ $measured == mirror ]] && { h=2; sock=$logs/h2.sock; }
    before=$(ctl_get $h "$sock" "j['ports'][0]['busy_ns'], j['sessions'][0]['records']")
    on 1 taskset -c 0 "$rf" publish "$src" --rate "$rate" --duration "${seconds}s" --quiet >/dev/null
    sleep 0.5
    after=$(ctl_get $h "$sock" "j['ports'][0]['busy_ns'], j['sessions'][0]['records']")
    got[$measured]="$before $after"
    got[path]=$(ctl_get $h "$sock" "j['ports'][0]['path']")
    stop_since "$first"
    rm -f "$logs/h1.sock" "$logs/h2.sock"
    "$rf" remove "$src" >/dev/null 2>&1
    "$rf" remove "$dst" >/dev/null 2>&1
  done
  line=$(python3 - "$backend" "${got[path]}" "${got[serve]}" "${got[mirror]}" "$ring_read" "$ring_publish" "$ring_read_xc" "$ring_relay_xc" <<'PY'
import json, sys
backend, path, s, m, rr, rp, rx, rl = sys.argv[1:]
def per(x):
    b0, r0, b1, r1 = (int(v) for v in x.split())
    return (b1 - b0) / max(1, r1 - r0), r1 - r0
serve, sr = per(s)
mirror, mr = per(m)
print(json.dumps({"backend": backend, "path": path, "serve_records": sr, "mirror_records": mr,
                  "serve_ns_per_record": round(serve, 2), "mirror_ns_per_record": round(mirror, 2),
                  "ring_read_ns": round(float(rr), 2), "ring_publish_ns": round(float(rp), 2),
                  "ring_read_crosscore_ns": round(float(rx), 2),
                  "ring_relay_crosscore_ns": round(float(rl), 2),
                  "serve_vs_ring_read": round(serve / float(rr), 2),
                  "serve_vs_ring_read_crosscore": round(serve / float(rx), 2),
                  "mirror_vs_ring_publish": round(mirror / float(rp), 2),
                  "mirror_vs_ring_relay_crosscore": round(mirror / float(rl), 2)}))
PY
)
  echo "$line"
  results+=("$line")
done
if [[ -n $json ]]; then
  printf '%s\n' "${results[@]}" | python3 -c "import json,sys; print(json.dumps([json.loads(l) for l in sys.stdin], indent=1))" >"$json"
fi
