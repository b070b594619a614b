#!/usr/bin/env bash
# What the CPU cost accounting (tracer_agent::cpucost, ebpf/cpucost.bpf.c)
# costs the machine it measures.
#
# Two namespaces joined by veth; tracer-agent's udp_load example sends a
# fixed-rate UDP flow from a to b with sendto and reads it with recvfrom
# (the calls the accounting charges), so every round does the same work.
# Rounds alternate between modes:
#   none     no BPF program;
#   cpucost  the accounting, attached and read once a second by
#            tracer-agent's cpucost example (the reader's own CPU counts);
#   ref      ebpf/ref/cpucost_reference.bpf.c: a do-nothing tp_btf program
#            on each of the accounting's five tracepoints (softirq_entry,
#            softirq_exit, sys_enter, sys_exit, sched_switch), loaded by
#            bpftool and attached through pinned raw-tracepoint links: the
#            floor of any program there (raw_syscalls hooks send every
#            syscall of every task through the slow tracing path);
#   clock    the same programs making one bpf_ktime_get_ns() call each.
# (1) Machine CPU seconds per round from /proc/stat (wall time x CPUs
#     minus idle, iowait and steal), medians per mode and the paired ratio
#     to the "none" round before it; ratios are of medians.
# (2) BPF ns per run of each program (bpf_stats run_time_ns / run_cnt,
#     found through the reader's own fds or the pins, so another program
#     on the machine is never mixed in) beside the references on the same
#     tracepoint, and runs per second of each hook.
#
# Env: ROUNDS (5), SECS (5), RATE (100000 datagrams/s), SIZE (1000 bytes),
# MODES ("none cpucost ref clock"; "none" runs first in every round and pairs
# it, the others in an order rotated by one per round),
# STATS (1; 0 turns bpf_stats off for the run, restoring it after: then
# (2) is empty, and (1) is free of the two clock reads bpf_stats adds to
# every program run, which inflate every mode but "none").
# The machine is shared by whatever else runs: read the figures beside
# the spread the rounds show.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
ROUNDS=${ROUNDS:-5} SECS=${SECS:-5} RATE=${RATE:-100000} SIZE=${SIZE:-1000}
MODES=${MODES:-"none cpucost ref clock"} STATS=${STATS:-1}
A=ntcpb-a B=ntcpb-b AA=10.213.0.1 AB=10.213.0.2 DA=ntcpbva DB=ntcpbvb PORT=7791
PIN=/sys/fs/bpf/ntcpb-ref PINC=/sys/fs/bpf/ntcpb-clk LINKS=/sys/fs/bpf/ntcpb-links
STATS_FILE=/run/ntcpb.bpf_stats_enabled
WORK=
OLD_STATS=
READER=0

# Ends only processes this bench started: the reader by pid, and those
# inside its own namespaces (a leftover of a killed run included).
kill_ns_procs() {
    local ns pids
    for ns in $A $B; do
        [[ -e /run/netns/$ns ]] || continue
        pids=$(ip netns pids $ns 2>/dev/null || true)
        [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
    done
}
cleanup() {
    ((READER > 0)) && kill -INT "$READER" 2>/dev/null && wait "$READER" 2>/dev/null || true
    kill_ns_procs
    rm -rf "$LINKS" "$PIN" "$PINC"   # unpinning the links detaches the references
    ip netns del $A 2>/dev/null || true
    ip netns del $B 2>/dev/null || true
    [[ -n $WORK ]] && rm -rf "$WORK"
    if [[ -n $OLD_STATS ]]; then
        sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS"
        rm -f "$STATS_FILE"
    fi
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup
WORK=$(mktemp -d)

cargo build --release --locked -q -p tracer-agent --example cpucost --example udp_load
EX=$PWD/target/release/examples
CLANG=$(command -v clang-19 || command -v clang)
"$CLANG" -target bpf -g -O2 -mcpu=v3 -Wall -Werror -I ebpf/include \
    -c ebpf/ref/cpucost_reference.bpf.c -o "$WORK/ref.o"
"$CLANG" -target bpf -g -O2 -mcpu=v3 -Wall -Werror -DREF_CLOCK -I ebpf/include \
    -c ebpf/ref/cpucost_reference.bpf.c -o "$WORK/clk.o"
bpftool prog loadall "$WORK/ref.o" "$PIN"
bpftool prog loadall "$WORK/clk.o" "$PINC"

ip netns add $A; ip netns add $B
ip link add $DA netns $A type veth peer name $DB netns $B
ip -n $A addr add $AA/24 dev $DA; ip -n $B addr add $AB/24 dev $DB
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set $DA up; ip -n $B link set $DB up
inns() { local ns=$1; shift; nsenter --net=/run/netns/$ns -- "$@"; }

# The value before the first run; a run killed with SIGKILL leaves the file,
# so the next run still restores what the machine had.
[[ -s $STATS_FILE ]] || sysctl -n kernel.bpf_stats_enabled > "$STATS_FILE"
OLD_STATS=$(cat "$STATS_FILE")
sysctl -qw kernel.bpf_stats_enabled="$STATS"

source bench/lib/measure.sh
REF_IDS=$(pinned_ids "$PIN") CLK_IDS=$(pinned_ids "$PINC")

start_reader() {
    "$EX/cpucost" --interval-ms 1000 --exclude-self > "$WORK/reader.out" 2> "$WORK/reader.err" &
    READER=$!
    for _ in $(seq 200); do
        grep -q '"started"' "$WORK/reader.out" 2>/dev/null && return
        kill -0 "$READER" 2>/dev/null || break
        sleep 0.05
    done
    echo "the cpucost example did not start:"; cat "$WORK/reader.err"; exit 1
}
stop_reader() { # in this shell: only the parent can wait for it
    kill -INT "$READER"
    wait "$READER" || echo "cpucost example exit $?: $(tail -2 "$WORK/reader.err")" >&2
    READER=0
}
MODE_IDS=
start_mode() {
    case $1 in
        none) MODE_IDS= ;;
        ref) attach_refs "$PIN"; MODE_IDS=$REF_IDS ;;
        clock) attach_refs "$PINC"; MODE_IDS=$CLK_IDS ;;
        cpucost) start_reader; MODE_IDS=$(held_prog_ids "$READER") ;;
        *) echo "unknown mode $1"; exit 1 ;;
    esac
}
stop_mode() {
    case $1 in
        ref|clock) rm -rf "$LINKS" ;;
        cpucost) stop_reader ;;
    esac
}
# Per-program deltas of one round: "mode program ns_per_run runs" lines.
hook_lines() { python3 - "$1" "$2" "$3" <<'PY'
import json, sys
mode, a, b = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
for name, (ns, cnt) in b.items():
    ns0, cnt0 = a.get(name, (0, 0))
    n = cnt - cnt0
    print(mode, name, (ns - ns0) / n if n else 0, n)
PY
}

: > "$WORK/cpu.txt"; : > "$WORK/hooks.txt"
echo "== ${SECS}s of $RATE datagrams/s of $SIZE bytes (sendto -> recvfrom over veth), $ROUNDS alternating rounds of: $MODES; bpf_stats $STATS"
echo "   columns: mode machine_busy_s sent received reader_jiffies"
for r in $(seq "$ROUNDS"); do
    for mode in $(round_modes "$r" $MODES); do
        start_mode "$mode"
        inns $B "$EX/udp_load" recv --bind $AB:$PORT > "$WORK/recv.json" &
        RECV=$!
        sleep 0.2
        p0=$(prog_stats $MODE_IDS)
        m0=$(machine_snap); a0=$( ((READER > 0)) && proc_jiffies $READER || echo 0)
        inns $A "$EX/udp_load" send --target $AB:$PORT --rate "$RATE" --secs "$SECS" --size "$SIZE" > "$WORK/send.json"
        m1=$(machine_snap); a1=$( ((READER > 0)) && proc_jiffies $READER || echo 0)
        p1=$(prog_stats $MODE_IDS)
        wait $RECV || true
        [[ $mode == none ]] || hook_lines "$mode" "$p0" "$p1" >> "$WORK/hooks.txt"
        stop_mode "$mode"
        sent=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sent"])' "$WORK/send.json")
        received=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["received"])' "$WORK/recv.json")
        echo "$mode $(busy_s "$m0" "$m1") $sent $received $((a1 - a0))" | tee -a "$WORK/cpu.txt"
    done
done

python3 - "$WORK/cpu.txt" "$WORK/hooks.txt" "$HZ" "$SECS" <<'PY'
import sys, statistics as st
cpu, hooks, hz, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
med = lambda v: st.median(v) if v else float("nan")
def spread(v): return f"median {st.median(v):7.3f}  min {min(v):7.3f}  max {max(v):7.3f}"
rows = [l.split() for l in open(cpu)]
LABEL = {"none": "no program", "cpucost": "the accounting", "ref": "do-nothing refs", "clock": "one-clock refs"}
busy = {m: [float(r[1]) for r in rows if r[0] == m] for m in LABEL}
def paired(m):
    out, base = [], None
    for r in rows:
        if r[0] == "none":
            base = float(r[1])
        elif r[0] == m and base:
            out.append(float(r[1]) / base)
    return out
print("\n== results (medians of alternating rounds)")
print("(1) machine CPU s per round (/proc/stat), ratio to no program (of medians; paired: median of per-round ratios)")
for m in LABEL:
    if busy[m]:
        extra = ""
        if m != "none" and busy["none"]:
            extra = f"  ratio {med(busy[m]) / med(busy['none']):6.3f}  paired {med(paired(m)):6.3f}"
        print(f"    {LABEL[m]:16s} {spread(busy[m])}{extra}")
rd = [int(r[4]) / hz for r in rows if r[0] == "cpucost"]
if rd:
    print(f"    the reader's own CPU s per round: {spread(rd)}")
lost = [(int(r[2]) - int(r[3])) for r in rows]
print(f"    datagrams per round: sent {med([int(r[2]) for r in rows]):.0f}, not received (median) {med(lost):.0f}")
h = [l.split() for l in open(hooks) if int(l.split()[3]) > 0]
if not h:
    print("(2) no bpf_stats (STATS=0)")
else:
    # Program names as bpftool prints them (from BTF: whole, not cut to 15).
    def hook_of(name):
        n = name.split("_", 1)[1]
        for prefix, hook in (("softirq_entr", "softirq_entry"), ("sirq_entry", "softirq_entry"),
                             ("softirq_exit", "softirq_exit"), ("sirq_exit", "softirq_exit"),
                             ("sys_enter", "sys_enter"), ("sys_exit", "sys_exit"),
                             ("sched_sw", "sched_switch")):
            if n.startswith(prefix):
                return hook
        return n
    def ns(mode, hook): return [float(r[2]) for r in h if r[0] == mode and hook_of(r[1]) == hook and int(r[3]) > 0]
    def runs(mode, hook): return [int(r[3]) for r in h if r[0] == mode and hook_of(r[1]) == hook]
    print("(2) BPF ns per run by hook (bpf_stats; each run also pays bpf_stats' two clock reads), runs per second")
    print(f"    {'hook':14s} {'cpucost':>8s} {'ref':>8s} {'clock':>8s} {'cpucost-ref':>11s} {'runs/s':>10s} {'cpucost ns/s':>13s}")
    total = 0.0
    for hk in ("softirq_entry", "softirq_exit", "sys_enter", "sys_exit", "sched_switch"):
        c, r, k = med(ns("cpucost", hk)), med(ns("ref", hk)), med(ns("clock", hk))
        rate = med(runs("cpucost", hk)) / secs if runs("cpucost", hk) else float("nan")
        total += c * rate if c == c and rate == rate else 0
        print(f"    {hk:14s} {c:8.1f} {r:8.1f} {k:8.1f} {c - r:11.1f} {rate:10.0f} {c * rate / 1e6:11.2f} ms")
    print(f"    all hooks: {total / 1e6:.1f} ms of BPF run time per second of traffic ({total / 1e7:.2f}% of one CPU)")
PY
