#!/usr/bin/env bash
# setup.sh — installs everything ringfire's build, tests and lab need, from
# Debian's archive only. Idempotent; run as root. Safe to re-run.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  echo "setup.sh: run as root (it installs packages with apt-get)" >&2
  exit 1
fi

packages=(
  build-essential pkg-config meson ninja-build
  clang llvm libclang-rt-14-dev            # fuzzing (libFuzzer) and sanitizers
  libabsl-dev libgtest-dev libgmock-dev googletest libbenchmark-dev
  libxxhash-dev
  libsodium-dev                            # PSK authentication (HMAC-SHA256, SipHash)
  libtomlplusplus-dev nlohmann-json3-dev   # `ringfire run` configs, `ringfire ctl` answers
  libcli11-dev                             # the argument parser (cli/args.cc)
  libsystemd-dev systemd                   # sd_notify (Type=notify units), systemd-analyze verify
  prometheus                               # the metrics lab scrapes the daemons with a real Prometheus (and promtool)
  tshark                                   # the Wireshark dissector's test (tshark -X lua_script:)
  tmux                                     # the `ringfire top` test drives it in a terminal
  dpdk-dev libdpdk-dev                     # DPDK 22.11 (feature: dpdk)
  libbpf-dev libxdp-dev                    # AF_XDP (feature: xdp)
  iproute2 nftables procps util-linux python3
  iputils-ping                             # the exception-port lab pings a DPDK address
  pybind11-dev python3-dev                 # the `ringfire` Python module (python/), tested from Python
  python3-aiohttp curl                     # the SSE frontend (ringfire.frontend) and its real HTTP clients
  python3-zmq python3-msgpack              # perf/py_mux_bench: the ZeroMQ batch-per-step baseline
  python3-uvloop                           # perf/py_mux_bench --loop uvloop: both frontends on uvicorn's loop
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup.sh: packages present"
