#!/usr/bin/env bash
# Installs what building, testing and running the tracer needs on a fresh
# Debian machine, idempotently: Debian packages only when one is missing,
# and bpffs/tracefs mounts when absent. Sourced by demo.sh and test.sh.
set -euo pipefail

PACKAGES=(clang-19 llvm-19 libelf-dev zlib1g-dev pkg-config bpftool tshark
          iperf3 iproute2 util-linux ethtool linuxptp nftables
          # bench/: libbpf-dev for the reference BPF programs compiled
          # outside cargo (bpf/bpf_helpers.h; libbpf-sys vendors its own
          # copy off the include path), python3 and procps (sysctl, pkill)
          # for the scripts themselves.
          libbpf-dev python3 procps
          # --metrics: the tests and the demo scrape the agent and the sink
          # with a real Prometheus; promtool (Debian ships it only in this
          # package) checks the sink's /metrics text and the rules file.
          prometheus
          # scripts/package.sh and its test: dpkg-shlibdeps and
          # dpkg-architecture (dpkg-dev), strip (binutils), man (man-db),
          # systemd-analyze and systemctl (systemd).
          dpkg-dev binutils man-db systemd)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
    echo "setup: cargo not found: install the Rust toolchain (rustup) first" >&2
    exit 1
fi

# Not needed by the agent itself (it pins nothing), but bpftool and
# bpf_stats users expect them, and this machine mounts neither at boot.
mountpoint -q /sys/fs/bpf 2>/dev/null || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
mountpoint -q /sys/kernel/tracing 2>/dev/null \
    || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
