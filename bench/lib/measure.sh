# Shared by the bench scripts that compare BPF programs side by side
# (rx-overhead.sh, cpucost-overhead.sh, agent-overhead.sh): machine CPU
# from /proc/stat, a process's CPU, bpf_stats per program, and the
# reference programs' attachment. Sourced; $LINKS names the bpffs folder
# where attach_refs pins the links.

# "monotonic_s idle_s" where idle counts idle + iowait + steal, all exact.
machine_snap() { python3 -c '
import os, time
t = time.clock_gettime(time.CLOCK_MONOTONIC)
f = open("/proc/stat").readline().split()
print(t, (int(f[4]) + int(f[5]) + int(f[8])) / os.sysconf("SC_CLK_TCK"))'; }
busy_s() { python3 -c 'import os,sys; a=sys.argv[1:3]; b=sys.argv[3:5]; print(round((float(b[0])-float(a[0]))*os.cpu_count()-(float(b[1])-float(a[1])), 3))' $1 $2; }
# utime+stime of a process in jiffies; the kernel scales both to the exact
# run time, so their sum is precise.
proc_jiffies() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)
# Run time of all of a process's threads in microseconds, from the
# scheduler's own account (schedstat, exact to the ns): what a process
# that runs a few ms per round costs, below utime+stime's 1/HZ steps.
proc_run_us() {
    { cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } |
        awk '{s += $1} END {printf "%d\n", s / 1000}'
}
# Context switches of all of a process's threads (voluntary and not): how
# often it woke, which costs the host beyond its own run time.
proc_switches() {
    { cat /proc/"$1"/task/*/status 2>/dev/null || true; } |
        awk '/ctxt_switches/ {s += $2} END {print s + 0}'
}

# bpf_stats of programs by id: JSON {name: [run_time_ns, run_cnt]}.
prog_stats() { bpftool prog show -j | python3 -c '
import json, sys
ids = set(int(i) for i in sys.argv[1:])
print(json.dumps({p["name"]: [p.get("run_time_ns", 0), p.get("run_cnt", 0)]
                  for p in json.load(sys.stdin) if p["id"] in ids}))' "$@"; }
# Ids of the BPF programs a process holds open (fdinfo prog_id).
held_prog_ids() { grep -h '^prog_id:' /proc/$1/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u; }
pinned_ids() { for p in "$1"/*; do bpftool prog show pinned "$p" -j | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'; done; }
# Attach every pinned reference to its tracepoint (BPF_RAW_TRACEPOINT_OPEN
# with no name: a tp_btf program carries its target) and pin the link, so
# removing the pin detaches it. bpftool 7.1 has no autoattach.
attach_refs() { python3 - "$1" "$LINKS" <<'PY'
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_BPF, OBJ_PIN, OBJ_GET, RAW_TRACEPOINT_OPEN = 321, 6, 7, 17
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)  # union bpf_attr, zero-padded
    r = libc.syscall(SYS_BPF, cmd, buf, 128)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return r
progs, links = sys.argv[1], sys.argv[2]
os.makedirs(links, exist_ok=True)
for name in sorted(os.listdir(progs)):
    path = ctypes.create_string_buffer(os.path.join(progs, name).encode())
    pfd = bpf(OBJ_GET, struct.pack("=QII", ctypes.addressof(path), 0, 0))
    lfd = bpf(RAW_TRACEPOINT_OPEN, struct.pack("=QIIQ", 0, pfd, 0, 0))
    lpath = ctypes.create_string_buffer(os.path.join(links, name).encode())
    bpf(OBJ_PIN, struct.pack("=QII", ctypes.addressof(lpath), lfd, 0))
    os.close(lfd)
    os.close(pfd)
PY
}

# The modes of round R (1-based) of MODES: "none" first when it is there
# (the scripts pair each round's modes with the no-program run before
# them), the others rotated by R - 1, so that no mode always runs right
# after the same one: a mode measured a few per cent lower when it
# followed another build in alternating runs here.
round_modes() {
    local r=$1 rest=() m i n
    shift
    for m in "$@"; do [[ $m == none ]] || rest+=("$m"); done
    [[ " $* " == *" none "* ]] && printf '%s ' none
    n=${#rest[@]}
    for ((i = 0; i < n; i++)); do printf '%s ' "${rest[(i + r - 1) % n]}"; done
}
