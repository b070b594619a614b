#!/usr/bin/env bash
# What tracing costs the traced host (issue 2, benchmarks b and c).
#
# Two namespaces joined by veth; iperf3 sends a fixed-rate TCP flow from a
# to b. Rounds alternate: no agent, agent --sample-every 1, agent
# --sample-every 100. For each we measure, over the same traffic window:
# the machine's busy CPU seconds (/proc/stat: everything but idle, iowait
# and steal), the CPU seconds of the workload (iperf3 client + server, from
# iperf3's own rusage) plus the agent process, and the sockops program's ns
# per callback from bpf_stats. On this VM /proc/stat is unreliable: rounds
# jump by a whole CPU with or without the agent, and some report less busy
# time than the iperf3 processes alone used; the workload+agent figure is
# the steadier one.
# Then the maximum iperf3 throughput with and without the agent, alternating.
# Reports medians and spread; ratios are of medians.
#
# Env: ROUNDS (9), SECS (10), RATE (2G), TPUT_ROUNDS (7), TPUT_SECS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
ROUNDS=${ROUNDS:-9} SECS=${SECS:-10} RATE=${RATE:-2G}
TPUT_ROUNDS=${TPUT_ROUNDS:-7} TPUT_SECS=${TPUT_SECS:-3}
A=ntr-bench-a B=ntr-bench-b AA=10.211.0.1 AB=10.211.0.2
WORK=$(mktemp -d)

cleanup() {
    pkill -f "tracer-sink --listen $AB" 2>/dev/null || true
    pkill -f "tracer-agent --sink $AB" 2>/dev/null || true
    pkill -f "iperf3 -s -B $AB" 2>/dev/null || true
    ip netns del $A 2>/dev/null || true
    ip netns del $B 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
cleanup; WORK=$(mktemp -d)

cargo build --release --bins --locked -q
BIN=$PWD/target/release
ip netns add $A; ip netns add $B
ip link add ntrbench-a netns $A type veth peer name ntrbench-b netns $B
ip -n $A addr add $AA/24 dev ntrbench-a; ip -n $B addr add $AB/24 dev ntrbench-b
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set ntrbench-a up; ip -n $B link set ntrbench-b up
inns() { local ns=$1; shift; nsenter --net=/run/netns/$ns -- "$@"; }

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
trap 'sysctl -qw kernel.bpf_stats_enabled=$old_stats; cleanup' EXIT

nsenter --net=/run/netns/$B -- "$BIN/tracer-sink" --listen $AB:7420 --output "$WORK/traces" \
    --stats-interval 0 > "$WORK/sink.log" 2>&1 &
SINK=$!
inns $B iperf3 -s -B $AB > /dev/null 2>&1 &
sleep 0.5

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }  # user nice system irq softirq (no idle, iowait, steal)
# utime+stime of a process, in jiffies (the sink stands in for a remote host:
# its CPU is reported separately and subtracted).
proc_jiffies() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)

start_agent() { # sample_every
    # Direct nsenter (no function) so $! is the agent and gets SIGINT.
    nsenter --net=/run/netns/$A -- "$BIN/tracer-agent" --sink $AB:7420 --hostname bench \
        --sample-every "$1" --json \
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

gbps() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_sent"]["bits_per_second"]/1e9)' "$1"; }
# CPU seconds of the iperf3 client and server themselves (iperf3 measures
# its own rusage): the traced workload, which also carries the BPF run time
# spent in its context.
workload_cpu() { python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]; c=e["cpu_utilization_percent"]; d=e["sum_sent"]["seconds"]; print((c["host_total"]+c["remote_total"])/100*d)' "$1"; }

echo "== (b) busy CPU seconds for ${SECS}s of iperf3 -b $RATE, $ROUNDS alternating rounds"
: > "$WORK/cpu.txt"
for r in $(seq "$ROUNDS"); do
    for mode in none 1 100; do
        AGENT=0
        [[ $mode != none ]] && start_agent "$mode"
        j0=$(busy_jiffies); s0=$(proc_jiffies $SINK); a0=$(proc_jiffies $AGENT)
        inns $A iperf3 -c $AB -t "$SECS" -b "$RATE" -J > "$WORK/iperf.json"
        j1=$(busy_jiffies); s1=$(proc_jiffies $SINK); a1=$(proc_jiffies $AGENT)
        extra="0 0 0 0"
        if [[ $mode != none ]]; then stop_agent; extra=$(agent_stats); fi
        echo "$mode $(( j1 - j0 )) $(gbps "$WORK/iperf.json") $extra $(( s1 - s0 )) $(( a1 - a0 )) $(workload_cpu "$WORK/iperf.json")" \
            | tee -a "$WORK/cpu.txt"
    done
done

echo "== max throughput, $TPUT_ROUNDS alternating rounds of ${TPUT_SECS}s"
: > "$WORK/tput.txt"
for r in $(seq "$TPUT_ROUNDS"); do
    for mode in none 1; do
        [[ $mode != none ]] && start_agent 1
        inns $A iperf3 -c $AB -t "$TPUT_SECS" -J > "$WORK/iperf.json"
        extra="0 0 0 0"
        if [[ $mode != none ]]; then stop_agent; extra=$(agent_stats); fi
        echo "$mode $(gbps "$WORK/iperf.json") $extra" | tee -a "$WORK/tput.txt"
    done
done

python3 - "$WORK/cpu.txt" "$WORK/tput.txt" "$HZ" <<'PY'
import sys, statistics as st
cpu, tput, hz = sys.argv[1], sys.argv[2], int(sys.argv[3])
# cpu.txt: mode busy_jiffies gbps bpf_ns bpf_runs events lost sink_jiffies agent_jiffies workload_s
rows = [l.split() for l in open(cpu)]
def col(rows, mode, i): return [float(r[i]) for r in rows if r[0] == mode and len(r) > i]
def spread(v): return f"median {st.median(v):9.3f}  min {min(v):9.3f}  max {max(v):9.3f}"
print("\n== results (medians of alternating rounds; ratios are of medians)")
host = {m: [(float(r[1]) - float(r[7])) / hz for r in rows if r[0] == m] for m in ("none", "1", "100")}
whole = {m: [float(r[1]) / hz for r in rows if r[0] == m] for m in ("none", "1", "100")}
wl = {m: [float(r[9]) + float(r[8]) / hz for r in rows if r[0] == m and len(r) > 9] for m in ("none", "1", "100")}
for m, label in (("none", "no agent"), ("1", "agent, every skb"), ("100", "agent, 1 in 100")):
    if wl[m]:
        print(f"workload+agent CPU s {label:16s} {spread(wl[m])}  ratio {st.median(wl[m])/st.median(wl['none']):6.3f}")
for m, label in (("none", "no agent"), ("1", "agent, every skb"), ("100", "agent, 1 in 100")):
    print(f"traced-host CPU s  {label:18s} {spread(host[m])}  ratio {st.median(host[m])/st.median(host['none']):6.3f}")
for m, label in (("none", "no agent"), ("1", "agent, every skb"), ("100", "agent, 1 in 100")):
    print(f"machine CPU s (incl. sink) {label:10s} {spread(whole[m])}  ratio {st.median(whole[m])/st.median(whole['none']):6.3f}")
for m, label in (("1", "every skb"), ("100", "1 in 100")):
    ag = [x / hz for x in col(rows, m, 8)]
    bpf = [float(r[3]) * float(r[4]) / 1e9 for r in rows if r[0] == m]
    if ag:
        print(f"agent process CPU s ({label:9s}) {spread(ag)}   BPF program CPU s {spread(bpf)}")
for m, label in (("1", "every skb"), ("100", "1 in 100")):
    ns = [x for x in col(rows, m, 3) if x > 0]
    if ns:
        print(f"BPF ns/callback, fixed rate ({label:9s}) {spread(ns)}  events/round {st.median(col(rows, m, 5)):.0f}  ring lost {sum(col(rows, m, 6)):.0f}")
print("offered Gbit/s (fixed rate):", spread(col(rows, "none", 2)))
t = [l.split() for l in open(tput)]
g = {m: col(t, m, 1) for m in ("none", "1")}
print(f"max Gbit/s no agent      {spread(g['none'])}")
print(f"max Gbit/s agent (1:1)   {spread(g['1'])}  ratio of medians {st.median(g['1'])/st.median(g['none']):.3f}")
ns = [x for x in col(t, "1", 2) if x > 0]
if ns:
    print(f"BPF ns/callback, max rate (every skb) {spread(ns)}  events/round {st.median(col(t, '1', 4)):.0f}  ring lost {sum(col(t, '1', 5)):.0f}")
PY
