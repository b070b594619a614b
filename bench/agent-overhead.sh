#!/usr/bin/env bash
# What tracing costs the traced host (issue 2, benchmarks b and c).
#
# Two namespaces joined by veth; iperf3 sends a fixed-rate TCP flow from a
# to b. The iperf3 client runs in a cgroup of its own, which the agent
# (--cgroup) and the reference programs attach to, so nothing else on the
# machine is traced. Rounds alternate between six modes:
#   none          no BPF program;
#   1, 100        the agent at --sample-every 1 and 100;
#   ref-tag       ebpf/ref: a sockops program that only enables and tags
#                 (what BPF TX timestamping needs, nothing else);
#   ref-clock     the same plus one bpf_ktime_get_ns() per callback;
#   ref-untagged  enables but never tags: only SENDMSG callbacks, as under
#                 --sample-every 100, where 99 calls in 100 are not tagged.
# The references give, in the same run, the floor under the probe's cost
# per callback (bpf_stats run_time_ns / run_cnt): what being called costs
# on this machine, and what the one clock read every event needs costs.
#
# Machine CPU seconds come from /proc/stat as wall time x CPUs minus idle,
# iowait and steal. Those three are exact under NO_HZ (nanosecond sleep
# accounting), whereas user/system/softirq are sampled at the tick: on this
# VM the tick-sampled sum swings from 0.2 s to 5.5 s for identical 5 s
# rounds, because paced traffic runs in bursts locked to timer interrupts.
# The sink's own CPU (it stands in for the remote host) is subtracted.
# Also reported: the CPU seconds of the workload (iperf3 client and server
# rusage) plus the agent process.
# Then the maximum iperf3 throughput with no program, the agent and the
# tag-only reference, alternating. Reports medians and spread; ratios are of
# medians.
#
# Env: ROUNDS (9), SECS (10), RATE (2G), TPUT_ROUNDS (7), TPUT_SECS (3),
# MODES (all six; "none" must be among them), e.g. MODES="none 100"
# ROUNDS=21 TPUT_ROUNDS=0 to narrow down one ratio. AGENT_BIN: another
# build of the agent for the agent modes; AGENT_ALT_BIN: a second build, run
# as mode "alt" (every skb, like "1") in the same rounds, e.g.
# MODES="none 1 alt ref-clock": two builds side by side in one run. Each
# round runs "none" first and the other modes in an order rotated by one
# (bench/lib/measure.sh round_modes), so no mode always follows the same one.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
ROUNDS=${ROUNDS:-9} SECS=${SECS:-10} RATE=${RATE:-2G}
TPUT_ROUNDS=${TPUT_ROUNDS:-7} TPUT_SECS=${TPUT_SECS:-3}
AGENT_BIN=${AGENT_BIN:-} AGENT_ALT_BIN=${AGENT_ALT_BIN:-}
A=ntr-bench-a B=ntr-bench-b AA=10.211.0.1 AB=10.211.0.2
CGROOT=$(findmnt -n -t cgroup2 -o TARGET | head -1)
[[ -n $CGROOT ]] || { echo "no cgroup2 mount: mount -t cgroup2 none /sys/fs/cgroup/unified" >&2; exit 1; }
CG=$CGROOT/ntr-bench
PIN=/sys/fs/bpf/ntr-bench-ref
WORK=$(mktemp -d)

# Reference mode -> its program in ebpf/ref/tx_reference.bpf.c.
declare -A REF=([ref-tag]=ref_tag_only [ref-clock]=ref_tag_clock [ref-untagged]=ref_untagged)
detach_refs() {
    for p in "${REF[@]}"; do
        [[ -e $PIN/$p ]] && bpftool cgroup detach "$CG" sock_ops pinned "$PIN/$p" 2>/dev/null || true
    done
}
cleanup() {
    pkill -f "tracer-sink --listen $AB" 2>/dev/null || true
    pkill -f "tracer-agent --sink $AB" 2>/dev/null || true
    pkill -f "iperf3 -s -B $AB" 2>/dev/null || true
    detach_refs
    rm -rf "$PIN"
    rmdir "$CG" 2>/dev/null || true
    ip netns del $A 2>/dev/null || true
    ip netns del $B 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
cleanup; WORK=$(mktemp -d)

cargo build --release --bins --locked -q
BIN=$PWD/target/release
CLANG=$(command -v clang-19 || command -v clang)
"$CLANG" -target bpf -g -O2 -mcpu=v3 -Wall -Werror -I ebpf/include \
    -c ebpf/ref/tx_reference.bpf.c -o "$WORK/ref.o"
bpftool prog loadall "$WORK/ref.o" "$PIN" type sockops
mkdir -p "$CG"

ip netns add $A; ip netns add $B
ip link add ntrbench-a netns $A type veth peer name ntrbench-b netns $B
ip -n $A addr add $AA/24 dev ntrbench-a; ip -n $B addr add $AB/24 dev ntrbench-b
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set ntrbench-a up; ip -n $B link set ntrbench-b up
inns() { local ns=$1; shift; nsenter --net=/run/netns/$ns -- "$@"; }
# The traced workload: the iperf3 client, in the bench cgroup.
client() { nsenter --net=/run/netns/$A -- sh -c 'echo $$ > "$0/cgroup.procs" && exec iperf3 "$@"' "$CG" "$@"; }

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; cleanup' EXIT

nsenter --net=/run/netns/$B -- "$BIN/tracer-sink" --listen $AB:7420 --output "$WORK/traces" \
    --stats-interval 0 > "$WORK/sink.log" 2>&1 &
SINK=$!
inns $B iperf3 -s -B $AB > /dev/null 2>&1 &
sleep 0.5

source bench/lib/measure.sh

start_agent() { # sample_every [agent binary]
    # Direct nsenter (no function) so $! is the agent and gets SIGINT.
    # --probes tx: the TX probe alone, against the TX references
    # (bench/rx-overhead.sh measures the receive side).
    nsenter --net=/run/netns/$A -- "${2:-${AGENT_BIN:-$BIN/tracer-agent}}" --sink $AB:7420 --hostname bench \
        --probes tx --cgroup "$CG" --sample-every "$1" --json \
        > "$WORK/agent.out" 2> "$WORK/agent.err" &
    AGENT=$!
    for _ in $(seq 200); do
        grep -q "tx probe attached" "$WORK/agent.err" && return
        sleep 0.05
    done
    echo "agent did not start:"; cat "$WORK/agent.err"; exit 1
}
# Call in this shell (not inside $(...)): only the parent can wait for it.
stop_agent() {
    kill -INT "$AGENT"
    wait "$AGENT" || echo "agent exit $?: $(tail -2 "$WORK/agent.err")" >&2
}
agent_stats() {
    tail -1 "$WORK/agent.out" | python3 -c '
import json,sys
try:
    s=json.load(sys.stdin)["stats"]
    print(s.get("bpf_ns_per_run") or 0, s.get("bpf_runs") or 0, sum(s["events_by_stage"]), s["bpf"]["ringbuf_lost"] + s.get("ring_overruns", 0))
except Exception:
    print("0 0 0 0")'
}
ref_runs() { bpftool prog show pinned "$PIN/$1" -j | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p.get("run_time_ns",0), p.get("run_cnt",0))'; }
REF0=
start_ref() { REF0=$(ref_runs "$1"); bpftool cgroup attach "$CG" sock_ops pinned "$PIN/$1"; }
# "ns_per_run runs 0 0", like agent_stats.
stop_ref() {
    bpftool cgroup detach "$CG" sock_ops pinned "$PIN/$1"
    python3 -c 'import sys; a=sys.argv[1:3]; b=sys.argv[3:5]; n=int(b[1])-int(a[1]); print((int(b[0])-int(a[0]))/n if n else 0, n, 0, 0)' $REF0 $(ref_runs "$1")
}
start_mode() {
    case $1 in
        none) ;;
        ref-*) start_ref "${REF[$1]}" ;;
        alt) [[ -x $AGENT_ALT_BIN ]] || { echo "mode alt needs AGENT_ALT_BIN"; exit 1; }
             start_agent 1 "$AGENT_ALT_BIN" ;;
        *) start_agent "$1" ;;
    esac
}
stop_mode() { # prints "ns_per_run runs events lost"; call in this shell
    case $1 in
        none) echo "0 0 0 0" ;;
        ref-*) stop_ref "${REF[$1]}" ;;
        *) stop_agent; agent_stats ;;
    esac
}

gbps() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_sent"]["bits_per_second"]/1e9)' "$1"; }
# CPU seconds of the iperf3 client and server themselves (iperf3 measures
# its own rusage): the traced workload, which also carries the BPF run time
# spent in its context.
workload_cpu() { python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]; c=e["cpu_utilization_percent"]; d=e["sum_sent"]["seconds"]; print((c["host_total"]+c["remote_total"])/100*d)' "$1"; }

MODES=${MODES:-"none 1 100 ref-tag ref-clock ref-untagged"}
echo "== (b, c) ${SECS}s of iperf3 -b $RATE, $ROUNDS alternating rounds of: $MODES"
echo "   columns: mode machine_busy_s gbps bpf_ns runs events lost sink_jiffies agent_jiffies workload_s agent_run_us"
: > "$WORK/cpu.txt"
for r in $(seq "$ROUNDS"); do
    for mode in $(round_modes "$r" $MODES); do
        AGENT=0
        start_mode "$mode"
        m0=$(machine_snap); s0=$(proc_jiffies $SINK); a0=$(proc_jiffies $AGENT); u0=$(proc_run_us $AGENT)
        client -c $AB -t "$SECS" -b "$RATE" -J > "$WORK/iperf.json"
        m1=$(machine_snap); s1=$(proc_jiffies $SINK); a1=$(proc_jiffies $AGENT); u1=$(proc_run_us $AGENT)
        stop_mode "$mode" > "$WORK/extra"  # not in $(...): it waits for the agent
        echo "$mode $(busy_s "$m0" "$m1") $(gbps "$WORK/iperf.json") $(cat "$WORK/extra") $(( s1 - s0 )) $(( a1 - a0 )) $(workload_cpu "$WORK/iperf.json") $(( u1 - u0 ))" \
            | tee -a "$WORK/cpu.txt"
    done
done

echo "== max throughput, $TPUT_ROUNDS alternating rounds of ${TPUT_SECS}s"
: > "$WORK/tput.txt"
for r in $(seq "$TPUT_ROUNDS"); do
    for mode in none 1 ref-tag; do
        start_mode "$mode"
        client -c $AB -t "$TPUT_SECS" -J > "$WORK/iperf.json"
        stop_mode "$mode" > "$WORK/extra"
        echo "$mode $(gbps "$WORK/iperf.json") $(cat "$WORK/extra")" | tee -a "$WORK/tput.txt"
    done
done

python3 - "$WORK/cpu.txt" "$WORK/tput.txt" "$HZ" <<'PY'
import sys, statistics as st
sys.path.insert(0, "bench/lib")
from verdict import verdict
cpu, tput, hz = sys.argv[1], sys.argv[2], int(sys.argv[3])
# cpu.txt: mode busy_s gbps bpf_ns bpf_runs events lost sink_jiffies agent_jiffies workload_s agent_run_us
rows = [l.split() for l in open(cpu)]
def col(rows, mode, i): return [float(r[i]) for r in rows if r[0] == mode and len(r) > i]
def spread(v): return f"median {st.median(v):8.3f}  min {min(v):8.3f}  max {max(v):8.3f}"
def med(v): return st.median(v) if v else float("nan")
LABEL = {"none": "no program", "1": "agent, every skb", "alt": "AGENT_ALT_BIN, every",
         "100": "agent, 1 in 100",
         "ref-tag": "ref: tag only", "ref-clock": "ref: tag + clock", "ref-untagged": "ref: untagged"}
print("\n== results (medians of alternating rounds; ratios are of medians)")
host = {m: [float(r[1]) - float(r[7]) / hz for r in rows if r[0] == m] for m in LABEL}
# The agent's CPU in a round: its threads' exact run time (schedstat).
agent_s = lambda r: float(r[10]) / 1e6
wl = {m: [float(r[9]) + agent_s(r) for r in rows if r[0] == m and len(r) > 10] for m in LABEL}
# Rounds run the modes in turn, so the "none" of the same round is the pair.
def paired(series, m):
    out, base = [], None
    for r in rows:
        if r[0] == "none":
            base = series(r)
        elif r[0] == m and base:
            out.append(series(r) / base)
    return out
host_of = lambda r: float(r[1]) - float(r[7]) / hz
print("(b) traced-host CPU s: machine busy (/proc/stat, exact idle) minus the sink")
print("    ratio: of medians; paired: median of each round's ratio to its own no-program run")
for m in LABEL:
    if host[m] and host["none"]:
        pr = f"  paired {med(paired(host_of, m)):6.3f}" if m != "none" else ""
        print(f"    {LABEL[m]:18s} {spread(host[m])}  ratio {med(host[m])/med(host['none']):6.3f}{pr}")
print("    workload (iperf3 rusage) + agent process CPU s")
for m in LABEL:
    if wl[m] and wl["none"]:
        print(f"    {LABEL[m]:18s} {spread(wl[m])}  ratio {med(wl[m])/med(wl['none']):6.3f}")
print("    direct cost: agent process + BPF run time (bpf_stats), against the no-program median")
for m in ("1", "alt", "100"):
    ag = [agent_s(r) for r in rows if r[0] == m]
    bpf = [float(r[3]) * float(r[4]) / 1e9 for r in rows if r[0] == m]
    if ag and host["none"]:
        direct = 1 + (med(ag) + med(bpf)) / med(host["none"])
        print(f"    {LABEL[m]:18s} agent s {spread(ag)}  BPF s {spread(bpf)}  ratio {direct:6.3f}")
print(f"(c) BPF ns per callback (bpf_stats), fixed rate")
ns = {m: [x for x in col(rows, m, 3) if x > 0] for m in ("1", "alt", "100", "ref-tag", "ref-clock", "ref-untagged")}
for m, v in ns.items():
    if v:
        print(f"    {LABEL[m]:18s} {spread(v)}  runs/round {med(col(rows, m, 4)):.0f}")
if ns["1"] and ns["ref-clock"] and ns["ref-tag"]:
    print(f"    every skb: {med(ns['1']) - med(ns['ref-tag']):.0f} ns above tag only, "
          f"{med(ns['1']) - med(ns['ref-clock']):.0f} ns above tag + clock")
if ns["alt"] and ns["ref-clock"]:
    print(f"    AGENT_ALT_BIN: {med(ns['alt']) - med(ns['ref-clock']):.0f} ns above tag + clock")
# Per round: the ratio of two modes' ns from the same round, then the median
# (the machine drifts by ±20 % over a run; within a round far less).
def round_ratios(a, b):
    out, cur = [], {}
    for r in rows:
        if r[0] == "none" and cur:
            cur = {}
        if len(r) > 3 and float(r[3]) > 0:
            cur[r[0]] = float(r[3])
        if a in cur and b in cur:
            out.append(cur[a] / cur[b])
            cur.pop(a)
            cur.pop(b)
    return out
for a, b in (("1", "ref-clock"), ("alt", "ref-clock"), ("alt", "1")):
    v = round_ratios(a, b)
    if v:
        print(f"    paired {LABEL[a]} / {LABEL[b]}: median {med(v):.2f} (rounds {min(v):.2f}-{max(v):.2f})")
        if b == "ref-clock":
            print(f"      target: {verdict(v, 1.5)}")

if ns["100"] and ns["ref-untagged"]:
    print(f"    1 in 100: {med(ns['100']) - med(ns['ref-untagged']):.0f} ns above untagged")
if ns["1"]:
    print(f"    events/round (every skb) {med(col(rows, '1', 5)):.0f}, ring lost {sum(col(rows, '1', 6)) + sum(col(rows, '100', 6)):.0f}")
print("    offered Gbit/s:", spread(col(rows, "none", 2)))
t = [l.split() for l in open(tput)]
if not t:
    sys.exit(0)
g = {m: col(t, m, 1) for m in ("none", "1", "ref-tag")}
print(f"max Gbit/s no program    {spread(g['none'])}")
print(f"max Gbit/s agent (1:1)   {spread(g['1'])}  ratio {med(g['1'])/med(g['none']):.3f}")
print(f"max Gbit/s ref: tag only {spread(g['ref-tag'])}  ratio {med(g['ref-tag'])/med(g['none']):.3f}")
tns = {m: [x for x in col(t, m, 2) if x > 0] for m in ("1", "ref-tag")}
if tns["1"] and tns["ref-tag"]:
    print(f"BPF ns per callback, max rate: agent {spread(tns['1'])}; tag-only ref {spread(tns['ref-tag'])}")
PY
