#!/usr/bin/env bash
# What one BPF helper call costs on this machine, warm, in ns: the clock
# (bpf_ktime_get_ns, which every record needs), the current task
# (bpf_get_current_task_btf, the reader or sender of an event) and
# bpf_get_current_pid_tgid. Programs of ebpf/ref/helper_cost.bpf.c, each
# making 16 calls of one helper per run, attached one at a time to
# raw_syscalls:sys_enter while this script makes syscalls; ns per run from
# bpf_stats, minus the empty program's, per call. Rounds alternate between
# the programs; medians.
#
# Why: a probe's cost per hook (bench/rx-overhead.sh, agent-overhead.sh)
# is its helper calls, its loads (those through kernel pointers guarded,
# about ten instructions each) and the cache misses of what it reads and
# writes; this separates the first.
#
# Env: ROUNDS (5), SECS (1.5 per program and round). Needs root, clang,
# bpftool (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
ROUNDS=${ROUNDS:-5} SECS=${SECS:-1.5}
PIN=/sys/fs/bpf/ntr-helper-cost
WORK=$(mktemp -d)
OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
    rm -rf "$PIN" "$WORK"
    sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rm -rf "$PIN"
CLANG=$(command -v clang-19 || command -v clang)
"$CLANG" -target bpf -g -O2 -mcpu=v3 -Wall -Werror -I ebpf/include \
    -c ebpf/ref/helper_cost.bpf.c -o "$WORK/hc.o"
bpftool prog loadall "$WORK/hc.o" "$PIN"
sysctl -qw kernel.bpf_stats_enabled=1
python3 - "$PIN" "$ROUNDS" "$SECS" <<'PY'
import ctypes, json, os, statistics as st, struct, subprocess, sys, time
pin, rounds, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
CALLS = 16
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(321, cmd, buf, 128)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return r
def stats(name):
    j = json.loads(subprocess.check_output(["bpftool", "prog", "show", "pinned", f"{pin}/{name}", "-j"]))
    return j.get("run_time_ns", 0), j.get("run_cnt", 0)
names = ["hc_empty", "hc_ktime", "hc_tai", "hc_task", "hc_pid_tgid"]
per_run = {n: [] for n in names}
for _ in range(rounds):
    for n in names:
        path = ctypes.create_string_buffer(f"{pin}/{n}".encode())
        fd = bpf(7, struct.pack("=QII", ctypes.addressof(path), 0, 0))      # OBJ_GET
        t0 = stats(n)
        link = bpf(17, struct.pack("=QI", 0, fd))                           # RAW_TRACEPOINT_OPEN
        end = time.monotonic() + secs
        while time.monotonic() < end:
            for _ in range(1000):
                os.getppid()
        os.close(link)
        os.close(fd)
        t1 = stats(n)
        runs = t1[1] - t0[1]
        if runs == 0:
            sys.exit(f"{n}: no run recorded (bpf_stats off?)")
        per_run[n].append((t1[0] - t0[0]) / runs)
empty = st.median(per_run["hc_empty"])
print(f"# {rounds} rounds of {secs}s per program; ns per run (bpf_stats), medians; {CALLS} calls per run")
print(f"    empty program               {empty:7.1f} ns per run")
for n, label in (("hc_ktime", "bpf_ktime_get_ns"), ("hc_tai", "bpf_ktime_get_tai_ns"),
                 ("hc_task", "bpf_get_current_task_btf"),
                 ("hc_pid_tgid", "bpf_get_current_pid_tgid")):
    m = st.median(per_run[n])
    print(f"    {label:27s} {m:7.1f} ns per run, {(m - empty) / CALLS:6.1f} ns per call")
PY
