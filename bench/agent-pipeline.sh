#!/usr/bin/env bash
# What the agent's CPU costs per event from its ring to the socket, with
# no probe loaded and no traffic traced (issue "The hot path at the
# floor", point 6).
#
# The agent_pipeline example (tracer-agent/src/synthetic/) writes EVENTS
# synthetic records of one IPv4 TCP flow into a memfd slot ring as the
# PROBE's BPF program writes its array (rx: five stages per received skb,
# the bulk of events; tx: four per sent skb; mixed: half each), a
# ring-full (32768 slots per CPU) at a time from a thread of its own, and
# drains each ring-full through the agent's own path: SlotRing drain ->
# the probe's decoder -> the stamper -> the pipeline's encoder -> a
# connected UDP socket (1472-byte datagrams, as over Ethernet) to a
# receiver thread that reads with UDP_GRO as tracer-sink does, polling
# without sleeping (one core busy) so that the sender never pays for
# waking it, as towards a sink on another host. Only the
# draining thread's CPU time from the drain to the last send is counted
# (CLOCK_THREAD_CPUTIME_ID); writing the records is not. Rounds alternate
# between MODES, the agent's --batch-send choices plus one reference:
#   null  batches shaped as gso's, sent nowhere: the user-space work alone
#         (ring copy, decode, stamp, encode, batching);
#   gso   UDP GSO, one sendmsg per batch of up to 44 datagrams (default);
#   mmsg  sendmmsg, one call per batch, each datagram its own pass down
#         the stack;
#   off   one send per datagram.
# Per mode: medians over RUNS of ns of CPU per event, its user and system
# parts (getrusage's tick-sampled split, scaled to the exact total),
# events/s per core (1e9 / ns per event: what one core at 100 % would
# carry), events per datagram and per send call. "kernel" is a mode's ns
# per event minus null's: what handing the datagrams to the kernel costs.
# Over loopback the kernel runs the receive path up to the receiver's
# socket inside the send call (as over veth), so "kernel" includes it;
# across a real NIC part of it would be the NIC's. Not counted: the read
# of each probe's mapped heads (a few words of memory per probe and
# drain), clock events, the BPF counters' refresh, datagram tags
# (--key-file).
#
# How to read it: null is the floor of the agent's own code; gso - null
# is the kernel's share at the default; mmsg and off show what GSO saves.
# events/s per core is the ceiling of one agent thread on this machine.
#
# Env: RUNS (5), EVENTS (4000000), PROBE (rx | tx | mixed), MODES
# ("null gso mmsg off"), ARGS (more options for the example, e.g.
# "--ring-slots 4096 --cpus 8"), SINK=1: send to a real tracer-sink
# (127.0.0.1, output to a temporary file) instead of the receiver thread,
# and show the events it wrote (null is skipped). Nothing waits for that
# sink between rounds: a ring-full arrives in a few ms, faster than a sink
# takes it (bench/sink-ingest.sh), so its losses are its own.
# PERF=1: one more run per PERF_MODES mode ("gso") of PERF_EVENTS
# (20000000) events under `perf record -g` (cpu-clock, every PERF_PERIOD_NS
# 50000 ns of CPU; installs linux-perf if missing), and the draining
# thread's profile: its 25 hottest symbols by self time, each also as ns
# per event (its share of the mode's median ns per event), and the split
# by object (agent, kernel, libc, vdso). The thread also runs, outside the
# measure, one join per round (finish_task_switch) and the flow's set-up;
# in a VM without a PMU the kernel's samples land where interrupts are
# re-enabled (_raw_spin_unlock_irqrestore, finish_task_switch), so read
# the kernel's symbols as a whole.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
RUNS=${RUNS:-5} EVENTS=${EVENTS:-4000000} PROBE=${PROBE:-rx}
MODES=${MODES:-"null gso mmsg off"} ARGS=${ARGS:-} SINK=${SINK:-}
PERF=${PERF:-} PERF_MODES=${PERF_MODES:-gso} PERF_EVENTS=${PERF_EVENTS:-20000000}
PERF_PERIOD_NS=${PERF_PERIOD_NS:-50000}
if [[ -n $PERF ]] && ! command -v perf >/dev/null; then
    echo "installing perf (linux-perf) for PERF=1" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends linux-perf >/dev/null \
        || { apt-get update -q >/dev/null \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends linux-perf >/dev/null; }
fi
cargo build --release --locked -q -p tracer-agent --example agent_pipeline
[[ -n $SINK ]] && cargo build --release --locked -q -p tracer-sink
BIN=target/release/examples/agent_pipeline
WORK=$(mktemp -d "${TMPDIR:-/tmp}/agent-pipeline.XXXXXX")
SINK_PID=
cleanup() {
    # A sink ended by the signal makes wait fail: under set -e that would
    # end the trap before the temporary files go.
    [[ -n $SINK_PID ]] && kill -TERM "$SINK_PID" 2>/dev/null && wait "$SINK_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# A tracer-sink on a free loopback port; its stats go to $WORK/sink.json.
start_sink() {
    local port
    port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    target/release/tracer-sink --listen "127.0.0.1:$port" --output "$WORK/trace.pcapng" \
        --json --stats-interval 0 >"$WORK/sink.json" 2>"$WORK/sink.log" &
    SINK_PID=$!
    for _ in $(seq 50); do
        grep -q " started" "$WORK/sink.log" 2>/dev/null && break
        sleep 0.1
    done
    ARGS+=" --sink 127.0.0.1:$port"
    MODES=${MODES//null/}
}
[[ -n $SINK ]] && start_sink

# The example's options for a mode.
mode_args() {
    if [[ $1 == null ]]; then echo "--null --batch-send gso"; else echo "--batch-send $1"; fi
}

# One run's figures on one line.
run_line() {
    python3 -c 'import json, sys
r = json.load(sys.stdin)
print("  run %s %5s: %6.1f ns/event, %5.2f M events/s per core"
      % (sys.argv[1], r["batch_send"], r["ns_per_event"], r["events_per_s_core"] / 1e6))' "$1"
}

echo "agent pipeline: $EVENTS $PROBE events per run, $RUNS runs, modes: $MODES"
for run in $(seq "$RUNS"); do
    for mode in $MODES; do
        # shellcheck disable=SC2046,SC2086 # words on purpose
        "$BIN" --events "$EVENTS" --probe "$PROBE" $(mode_args "$mode") $ARGS --json \
            | tee -a "$WORK/runs.jsonl" | run_line "$run"
    done
done

if [[ -n $SINK ]]; then
    kill -TERM "$SINK_PID"; wait "$SINK_PID" || true; SINK_PID=
    echo "tracer-sink: $(python3 -c 'import json,sys; s=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(s.get("events_written"), "events written")' "$WORK/sink.json") of $((RUNS * EVENTS * $(wc -w <<<"$MODES"))) sent"
fi

python3 - "$WORK/runs.jsonl" <<'PY' | tee "$WORK/medians.txt"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
modes = []
for r in runs:
    if r["batch_send"] not in modes:
        modes.append(r["batch_send"])
med = lambda m, k: statistics.median(r[k] for r in runs if r["batch_send"] == m)
null = med("null", "ns_per_event") if "null" in modes else None
print(f"\nmedians over {len(runs) // max(len(modes), 1)} runs ({runs[0]['feed']} records, {runs[0]['events']} a run):")
print(f"{'mode':>5} {'ns/event':>9} {'user':>6} {'system':>7} {'kernel':>7} {'M ev/s/core':>12} {'ev/dgram':>9} {'ev/call':>8}")
for m in modes:
    ns = med(m, "ns_per_event")
    kernel = f"{ns - null:7.1f}" if null is not None and m != "null" else f"{'-':>7}"
    calls = med(m, "send_calls")
    per_call = f"{med(m, 'events') / calls:8.0f}" if calls else f"{'-':>8}"
    print(f"{m:>5} {ns:9.1f} {med(m, 'user_ns_per_event'):6.1f} {med(m, 'sys_ns_per_event'):7.1f} "
          f"{kernel} {1e3 / ns:12.2f} {med(m, 'events') / med(m, 'datagrams'):9.1f} {per_call}")
PY

[[ -n $PERF ]] || exit 0
for mode in $PERF_MODES; do
    echo
    echo "profile of the draining thread, --batch-send $mode, $PERF_EVENTS $PROBE events (perf, self time):"
    # shellcheck disable=SC2046,SC2086 # words on purpose
    perf record -q -g -c "$PERF_PERIOD_NS" -o "$WORK/perf-$mode.data" -- \
        "$BIN" --events "$PERF_EVENTS" --probe "$PROBE" $(mode_args "$mode") $ARGS --json \
        >"$WORK/perf-$mode.json" 2>/dev/null
    perf report -i "$WORK/perf-$mode.data" --no-children --sort pid,dso,sym -g none --stdio \
        2>/dev/null >"$WORK/perf-$mode.txt"
    python3 - "$WORK/perf-$mode.txt" "$WORK/runs.jsonl" "$mode" "$WORK/perf-$mode.json" <<'PY'
import json, re, statistics, sys
txt, runs, mode, profiled = sys.argv[1:]
# Lines: "  12.19%  30835:agent_pipeline  [kernel.kallsyms]  [k] _copy_from_iter".
row = re.compile(r"^\s*([\d.]+)%\s+(\d+):(\S+)\s+(\S+)\s+\[(.)\]\s+(.*\S)")
rows = [m.groups() for m in map(row.match, open(txt)) if m]
# The draining thread is the process's first: the one named as the binary.
main = [r for r in rows if r[2] == "agent_pipeline"]
total = sum(float(r[0]) for r in main) or 1.0
# ns per event: the mode's median over the unprofiled runs (perf slows
# the profiled one), else the profiled run's own.
same = [r["ns_per_event"] for r in map(json.loads, open(runs)) if r["batch_send"] == mode]
ns = statistics.median(same) if same else json.load(open(profiled))["ns_per_event"]
def obj(dso):
    if dso == "[kernel.kallsyms]": return "kernel"
    if dso.startswith("libc"): return "libc"
    if dso == "[vdso]": return "vdso"
    if dso == "agent_pipeline": return "agent"
    return "other"
split = {}
for pct, _, _, dso, _, _ in main:
    split[obj(dso)] = split.get(obj(dso), 0.0) + float(pct) / total
print("  by object: " + ", ".join(f"{k} {v * 100:.1f} % ({v * ns:.1f} ns)"
                                  for k, v in sorted(split.items(), key=lambda kv: -kv[1])))
print(f"  {'self %':>7} {'ns/ev':>6}  object  symbol")
for pct, _, _, dso, _, sym in sorted(main, key=lambda r: -float(r[0]))[:25]:
    share = float(pct) / total
    print(f"  {share * 100:7.2f} {share * ns:6.1f}  {obj(dso):<6}  {sym[:110]}")
PY
done
