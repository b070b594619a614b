#!/usr/bin/env bash
# The main job, end to end on one machine: two network namespaces joined by
# a veth pair play two hosts, "client" and "server", each with a clock of
# its own (a simulated oscillator: client +3 ms and 50 ppm fast, server
# -2 ms and 30 ppm slow). tracer-sink runs on the server; a tracer-agent on
# each host (probes tx,rx,drops,tcp) follows the sink's clock
# (--clock sink), which must learn both oscillators. Once both clocks are
# locked and stable, iperf3 sends TCP both ways, with random loss both
# ways for the whole run (an nftables rule on each host). The trace
# (traces/*.pcapng.zst) is summarised by tshark with our dissector (TX and RX
# stage latencies, drops, retransmissions) and by nettrace-match (each
# sent skb linked to its reception on the other host: one-way latency,
# causality, the clock offset the data prove; HTML report in
# traces/report.html). A second, short run on --clock system (the same
# oscillators, nothing removes them) shows the causality violations that
# unsynchronised clocks cause. Beside its trace, the server's agent keeps
# its always-on metrics (--metrics), which a Prometheus server in the
# server's namespace scrapes every second; the demo ends with a few of
# them as PromQL answered them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

OUT=${OUT:-traces}
SECONDS_OF_TRAFFIC=${SECONDS_OF_TRAFFIC:-3}
RATE=${RATE:-200M}
# One received data skb in LOSS_ONE_IN dropped on each host for the whole
# flow, both ways (0: no loss), so that drops and retransmissions show.
LOSS_ONE_IN=${LOSS_ONE_IN:-20}
PROBES=tx,rx,drops,tcp
NS_C=ntr-demo-client NS_S=ntr-demo-server
ADDR_C=10.210.0.1 ADDR_S=10.210.0.2
# The dissector: the entry of its plugin folder (it loads the parts beside it).
LUA=wireshark/nettrace/nettrace.lua
# Each host's clock: offset_ns,drift_ppm (tracer-agent --simulate-oscillator,
# a testing and demo facility: see docs/clock-model.md).
OSC_C=${OSC_C:-3000000,50}
OSC_S=${OSC_S:--2000000,-30}
# 0.2 s clock updates and the least-squares servo: it learns a constant
# drift in two updates (the default PI servo takes seconds to settle).
CLOCK_OPTS=(--servo linreg --clock-interval 0.2)

cleanup() {
    [[ -n ${AGENT:-} ]] && kill -INT "$AGENT" 2>/dev/null || true
    [[ -n ${AGENT_S:-} ]] && kill -INT "$AGENT_S" 2>/dev/null || true
    [[ -n ${SINK:-} ]] && kill -TERM "$SINK" 2>/dev/null || true
    [[ -n ${IPERF:-} ]] && kill "$IPERF" 2>/dev/null || true
    [[ -n ${PROM:-} ]] && kill -TERM "$PROM" 2>/dev/null || true
    wait 2>/dev/null || true
    ip netns del "$NS_C" 2>/dev/null || true
    ip netns del "$NS_S" 2>/dev/null || true
}
trap cleanup EXIT

echo "== building (release)"
cargo build --release --bins --locked -q
BIN=target/release

echo "== two hosts: $NS_C ($ADDR_C) and $NS_S ($ADDR_S) over veth"
cleanup
ip netns add "$NS_C"
ip netns add "$NS_S"
ip link add ntrdemo-c netns "$NS_C" type veth peer name ntrdemo-s netns "$NS_S"
ip -n "$NS_C" addr add "$ADDR_C/24" dev ntrdemo-c
ip -n "$NS_S" addr add "$ADDR_S/24" dev ntrdemo-s
for ns in "$NS_C" "$NS_S"; do
    ip -n "$ns" link set lo up
done
ip -n "$NS_C" link set ntrdemo-c up
ip -n "$NS_S" link set ntrdemo-s up
# nsenter (not `ip netns exec`) keeps /sys and its cgroup2 mount visible;
# backgrounded directly so $! is the program itself and gets our signals.
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" -- "$@"; }

# Waits until agent $1 (log $2) has printed $3 at least $4 times.
wait_log() {
    for _ in $(seq 300); do
        (($(grep -c -- "$3" "$2") >= $4)) && return
        kill -0 "$1" 2>/dev/null || { cat "$2"; exit 1; }
        sleep 0.1
    done
    echo "agent did not print \"$3\":" >&2; cat "$2" >&2; exit 1
}
# Starts the sink (writing to $1) and both agents with clock $2 and
# probes $3; returns once both agents trace and their clocks are stable.
start_tracing() {
    local dir=$1 clock=$2 probes=$3 n
    nsenter --net="/run/netns/$NS_S" -- "$BIN/tracer-sink" --listen "$ADDR_S:7420" --output "$dir" \
        --clock-interval 0.2 > "$dir/sink.log" 2>&1 &
    SINK=$!
    for _ in $(seq 100); do grep -q "tracer-sink started" "$dir/sink.log" && break; sleep 0.1; done
    nsenter --net="/run/netns/$NS_C" -- "$BIN/tracer-agent" --sink "$ADDR_S:7420" --probes "$probes" \
        --hostname client --clock "$clock" "${CLOCK_OPTS[@]}" --simulate-oscillator "$OSC_C" \
        > "$dir/agent.log" 2>&1 &
    AGENT=$!
    # The server's agent shares the sink's namespace, not its clock: it has
    # an oscillator of its own, so it follows the sink's clock too.
    nsenter --net="/run/netns/$NS_S" -- "$BIN/tracer-agent" --sink "$ADDR_S:7420" --probes "$probes" \
        --hostname server --clock "$clock" "${CLOCK_OPTS[@]}" --simulate-oscillator "$OSC_S" \
        ${METRICS_ARGS[@]+"${METRICS_ARGS[@]}"} > "$dir/agent-server.log" 2>&1 &
    AGENT_S=$!
    n=$(tr , '\n' <<<"$probes" | wc -l)
    # An agent attaches its probes once its clock locked; the traffic waits
    # until both servos are LOCKED_STABLE (ten updates in a row under 1 µs),
    # so that no event of it is stamped by a clock still settling.
    wait_log "$AGENT" "$dir/agent.log" "probe attached" "$n"
    wait_log "$AGENT_S" "$dir/agent-server.log" "probe attached" "$n"
    wait_log "$AGENT" "$dir/agent.log" "state=LOCKED_STABLE" 1
    wait_log "$AGENT_S" "$dir/agent-server.log" "state=LOCKED_STABLE" 1
}
# Stops both agents, then the sink.
stop_tracing() {
    kill -INT "$AGENT" "$AGENT_S"; wait "$AGENT" || true; wait "$AGENT_S" || true; AGENT= AGENT_S=
    sleep 0.3
    kill -TERM "$SINK"; wait "$SINK" || true; SINK=
}

# Prometheus in $NS_S scraping the server agent's /metrics every second.
METRICS_ADDR=127.0.0.1:9431 PROM_ADDR=127.0.0.1:9090
start_prometheus() {
    local dir=$OUT/prometheus
    rm -rf "$dir"; mkdir -p "$dir"
    cat > "$dir/prometheus.yml" <<YML
global: {scrape_interval: 1s, scrape_timeout: 900ms}
scrape_configs:
  - job_name: nettrace
    static_configs: [{targets: ['$METRICS_ADDR'], labels: {host: server}}]
YML
    in_ns "$NS_S" prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
        --web.listen-address="$PROM_ADDR" > "$dir/prometheus.log" 2>&1 &
    PROM=$!
    for _ in $(seq 300); do grep -q "Server is ready" "$dir/prometheus.log" && return; sleep 0.1; done
    echo "prometheus did not start:" >&2; cat "$dir/prometheus.log" >&2; exit 1
}
# A few PromQL answers, one line each, into $1.
query_prometheus() {
    in_ns "$NS_S" python3 - "$PROM_ADDR" > "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
base = f"http://{sys.argv[1]}/api/v1/query?query="
def q(expr):
    with urllib.request.urlopen(base + urllib.parse.quote(expr), timeout=10) as r:
        return json.load(r)["data"]["result"]
def show(title, expr, label, fmt):
    rows = q(expr)
    print(f"-- {title}\n   {expr}")
    for r in sorted(rows, key=lambda r: r["metric"].get(label, "")):
        print(f"  {r['metric'].get(label, ''):28s} {fmt(float(r['value'][1]))}")
    if not rows:
        print("  (none)")
us = lambda v: f"{v * 1e6:10.1f} us"
show("p99 RX latency since the skb's RX stamp, by hook (in-kernel log2 histograms)",
     'histogram_quantile(0.99, sum by (hook, le) (nettrace_rx_latency_seconds_bucket))', "hook", us)
show("p99 TX stage latency, by stage",
     'histogram_quantile(0.99, sum by (stage, le) (nettrace_tx_stage_latency_seconds_bucket))', "stage", us)
show("drops by reason", 'sum by (reason) (nettrace_drops_total)', "reason", lambda v: f"{v:10.0f}")
show("TCP retransmissions", 'sum(nettrace_tcp_retransmits_total)', "", lambda v: f"{v:10.0f}")
show("network stack CPU seconds by category (all CPUs)",
     'sum by (category) (nettrace_network_cpu_seconds_total)', "category", lambda v: f"{v:10.3f} s")
show("clock state", 'nettrace_clock_state == 1', "state", lambda v: "")
PY
}

mkdir -p "$OUT" "$OUT/unsynchronised"
rm -f "$OUT"/trace-*.pcapng* "$OUT"/report.html "$OUT"/unsynchronised/trace-*.pcapng*
echo "== tracer-sink on $NS_S, writing $OUT/; tracer-agent on $NS_C and on $NS_S (--probes $PROBES)"
echo "   clocks: client $OSC_C, server $OSC_S (offset ns, drift ppm); both agents --clock sink"
echo "   the server's agent also serves --metrics $METRICS_ADDR, scraped by Prometheus every second"
METRICS_ARGS=(--metrics "$METRICS_ADDR")
start_tracing "$OUT" sink "$PROBES"
METRICS_ARGS=()
start_prometheus
for h in client:agent server:agent-server; do
    grep -o -E "clock (locked|state changed) .*" "$OUT/${h#*:}.log" \
        | sed -E "s/\x1b\[[0-9;]*m//g; s/^/   ${h%%:*}: /"
done

echo "== iperf3: ${SECONDS_OF_TRAFFIC}s of TCP at $RATE each way between client and server"
nsenter --net="/run/netns/$NS_S" -- iperf3 -s -1 -B "$ADDR_S" > /dev/null 2>&1 &
IPERF=$!
sleep 0.5
if ((LOSS_ONE_IN > 0)); then
    # No netem here: nftables drops one data skb in N at random (over veth
    # often a whole TSO burst) on each host's input hook (drop reason
    # NETFILTER_DROP), both ways, for the whole run; deleting the namespaces
    # also removes the rules.
    for ns in "$NS_S" "$NS_C"; do
        [[ $ns == "$NS_S" ]] && port="dport" || port="sport"
        in_ns "$ns" nft -f - <<NFT
table inet ntrdemo {
    chain input {
        type filter hook input priority 0;
        tcp $port 5201 meta length > 1000 numgen random mod $LOSS_ONE_IN == 0 drop
    }
}
NFT
    done
    echo "   (each host drops 1 in $LOSS_ONE_IN received data skbs, for the whole run)"
fi
in_ns "$NS_C" iperf3 -c "$ADDR_S" --bidir -t "$SECONDS_OF_TRAFFIC" -b "$RATE" | grep -E "(sender|receiver)$"
if ((LOSS_ONE_IN > 0)); then
    for ns in "$NS_S" "$NS_C"; do in_ns "$ns" nft delete table inet ntrdemo; done
fi
sleep 0.5
# Two more scrapes after the traffic, then what Prometheus holds.
sleep 2.5
query_prometheus "$OUT/metrics.txt"
kill -TERM "$PROM"; wait "$PROM" || true; PROM=

stop_tracing
for log in agent agent-server; do
    echo "== agent counters ($log.log)"; sed -n '/final tracer-agent statistics/,$p' "$OUT/$log.log"
done
echo "== sink counters"; grep -v '^\s*$' "$OUT/sink.log" | tail -15

FILE=$(ls "$OUT"/trace-*.pcapng* | head -1)
echo "== $FILE through tshark + $LUA"
ts() { tshark -X "lua_script:$LUA" -r "$FILE" "$@"; }
ERR=$(mktemp)
# One dissection pass for every table below: one line per frame.
ROWS=$(mktemp)
ts -T fields -E occurrence=f -e nettrace.host -e nettrace.kind -e nettrace.stage -e nettrace.rx.stage \
    -e nettrace.lat.sched_ns -e nettrace.lat.snd_sw_ns -e nettrace.lat.ack_ns -e nettrace.lat.total_ns \
    -e nettrace.rx.since_rx_stamp_ns -e nettrace.rx.lat.prev_ns -e nettrace.rx.skb_count \
    -e nettrace.drop.reason -e nettrace.tcp.anomaly -e nettrace.rx.lat.tcp_input_ns \
    -e nettrace.rx.lat.data_ready_ns -e nettrace.rx.lat.copy_ns -e nettrace.rx.lat.read_done_ns \
    -e nettrace.tcp.len -e nettrace.rx.seq -e nettrace.rx.end_seq -e nettrace.rx.dport 2>"$ERR" >"$ROWS"
if grep -q "Lua: " "$ERR"; then cat "$ERR"; echo "dissector failed" >&2; exit 1; fi
# Columns of $ROWS.
C_HOST=1 C_KIND=2 C_STAGE=3 C_RXSTAGE=4 C_SCHED=5 C_SNDSW=6 C_ACK=7 C_TOTAL=8
C_SINCE=9 C_PREV=10 C_COUNT=11 C_REASON=12 C_ANOMALY=13
# nettrace.rx.lat.<stage>_ns of RX stage i (1..4) is column C_OWN + i.
C_OWN=13 C_TCPLEN=18 C_SEQ=19 C_END_SEQ=20 C_RXDPORT=21
NAMES='BEGIN {FS = "\t"
    split("SENDMSG SCHED SND_SW SND_HW ACK", tx, " "); split("STACK_ENTRY TCP_INPUT DATA_READY COPY READ_DONE", rx, " ")
    split("RETRANSMIT RESET_SENT RESET_RECEIVED RCVQUEUE_FULL EXCEED_BUF_LIMIT", an, " ")}'
echo "-- events by host and kind"
awk "$NAMES"' {k = $2 == 1 ? "TX " tx[$3 + 1] : $2 == 2 ? "CLOCK" : $2 == 3 ? "RX " rx[$4 + 1] : \
        $2 == 4 ? "DROP" : $2 == 5 ? "TCP " an[$13 + 1] : $2 == 6 ? "CPU" : "kind " $2; c[$1 " " k]++}
    END {for (k in c) printf "  %-26s %8d\n", k, c[k]}' "$ROWS" | sort
echo "-- each agent's last 3 clock updates (following the sink's clock: the servo's frequency"
echo "   cancels the host's oscillator, -50 ppm on the client and +30 ppm on the server)"
printf "  %-7s %6s %-14s %10s %10s %9s %9s\n" host frame state "offset ns" "freq ppb" "delay ns" "err ns"
ts -Y "nettrace.kind == 2" -T fields -e nettrace.host -e frame.number -e nettrace.clock.state \
    -e nettrace.clock.offset_ns -e nettrace.clock.freq_ppb -e nettrace.clock.delay_ns \
    -e nettrace.clock.error_estimate_ns 2>/dev/null \
    | awk -F'\t' 'BEGIN {s[0]="UNLOCKED";s[1]="JUMP";s[2]="LOCKED";s[3]="LOCKED_STABLE"}
        {n[$1]++; row[$1, n[$1]] = sprintf("  %-7s %6s %-14s %10s %10.1f %9s %9s", $1, $2, s[$3], $4, $5, $6, $7)}
        END {for (h in n) for (i = n[h] - 2; i <= n[h]; i++) if (i > 0) print row[h, i]}' | sort -s -k1,1
# "median p99" of column $4 over the rows of $ROWS of host $1 whose column
# $2 is $3 ("-" when there are none); RX rows only of the client's data to
# iperf3 (the server's agent also sees the agents' own datagrams to the sink
# and, at the stack's stages, the ACKs of its own data to the client).
sel='$1 == h && $c == v && ($4 == "" || ($'$C_RXDPORT' == 5201 && ($4 > 1 || $'$C_SEQ' != $'$C_END_SEQ')))'
stat() {
    awk -F'\t' -v h="$1" -v c="$2" -v v="$3" -v f="$4" "$sel"' && $f != "" {print $f}' "$ROWS" \
        | sort -n | awk '{a[NR]=$1} END {if (NR) {p=int(NR*0.99); if (p < 1) p=1; printf "%8d %8d", a[int((NR+1)/2)], a[p]}
            else printf "%8s %8s", "-", "-"}'
}
# Number of those rows.
count() { awk -F'\t' -v h="$1" -v c="$2" -v v="$3" "$sel"' {n++} END {print n + 0}' "$ROWS"; }
echo "-- TX stage latency (ns) from the dissector, over all skbs of the client"
printf "  %-14s %7s %8s %8s\n" "" n median p99
for row in "SCHED-SENDMSG 1 $C_SCHED" "SND_SW-SCHED 2 $C_SNDSW" "ACK-send 4 $C_ACK" "ACK-SENDMSG 4 $C_TOTAL"; do
    set -- $row
    printf "  %-14s %7s %s\n" "$1" "$(count client $C_STAGE "$2")" "$(stat client $C_STAGE "$2" "$3")"
done
echo "-- RX stage latency (ns) of the client's data on the server, median and p99: since the skb's RX stamp,"
echo "   since its STACK_ENTRY and since its previous stage (TCP frames linked to their skb)"
printf "  %-12s %7s   %-17s   %-17s   %-17s\n" "" n "since RX stamp" "since STACK_ENTRY" "since prev stage"
for i in 0 1 2 3 4; do
    name=$(awk "$NAMES"' END {print rx['"$i"' + 1]}' /dev/null)
    printf "  %-12s %7s   %s   %s   %s\n" "$name" "$(count server $C_RXSTAGE "$i")" \
        "$(stat server $C_RXSTAGE "$i" $C_SINCE)" "$( ((i > 0)) && stat server $C_RXSTAGE "$i" $((C_OWN + i)) \
            || printf "%8s %8s" - -)" \
        "$(stat server $C_RXSTAGE "$i" $C_PREV)"
done
# How many of the server's data skbs the links follow from STACK_ENTRY to
# READ_DONE (each READ_DONE frame counts the skbs whose read it completes).
awk -F'\t' -v s=$C_SEQ -v e=$C_END_SEQ -v n=$C_COUNT -v own=$((C_OWN + 4)) '$1 == "server" {
        if ($4 == 0 && $s != $e) skbs++
        if ($4 == 4 && $own != "") {done += $n; reads++}}
    END {printf "   %d of %d TCP data skbs followed by their links from STACK_ENTRY to READ_DONE", done, skbs
        printf " (%.1f skbs per read)\n", reads ? done / reads : 0}' "$ROWS"
echo "-- drops by host and reason"
awk -F'\t' '$2 == 4 {c[$1 " " $12]++} END {for (k in c) printf "  %-40s %6d\n", k, c[k]}' "$ROWS" | sort \
    | grep . || echo "  none"
echo "-- TCP retransmissions by host (one per retransmitted skb: iperf3's Retr counts segments)"
awk -F'\t' -v l=$C_TCPLEN '$2 == 5 && $13 == 0 {c[$1]++; b[$1] += $l}
    END {for (k in c) printf "  %-22s %6d skbs, %9d bytes\n", k, c[k], b[k]}' "$ROWS" | sort | grep . || echo "  none (0)"
echo "-- one READ_DONE frame in full, linked to its skb's earlier stages"
ts -o nettrace.ip_stats:FALSE -V \
    -Y "nettrace.rx.stage == READ_DONE && nettrace.rx.lat.tcp_input_ns && nettrace.rx.len > 10000" 2>/dev/null \
    | awk '/^Frame /{n++} n==1' | sed -n '/^nettrace: kernel/,/^$/p'
rm -f "$ROWS" "$ERR"

echo "== nettrace-match: each skb one host sent linked to its reception on the other, on one time axis"
"$BIN/nettrace-match" --html "$OUT/report.html" "$OUT"/trace-*.pcapng*

UNSYNC=$OUT/unsynchronised
UNSYNC_SECONDS=${UNSYNC_SECONDS:-1}
echo "== the same two clocks without synchronisation: --clock system, ${UNSYNC_SECONDS}s of iperf3 each way, $UNSYNC/"
start_tracing "$UNSYNC" system tx,rx
nsenter --net="/run/netns/$NS_S" -- iperf3 -s -1 -B "$ADDR_S" > /dev/null 2>&1 &
IPERF=$!
sleep 0.5
in_ns "$NS_C" iperf3 -c "$ADDR_S" --bidir -t "$UNSYNC_SECONDS" -b 50M > /dev/null
sleep 0.5
stop_tracing
echo "-- nettrace-match, causality and offset lines: the server's clock reads 5 ms (and 80 ppm) behind"
echo "   the client's, so everything the client sends seems to arrive before it left"
"$BIN/nettrace-match" "$UNSYNC"/trace-*.pcapng* \
    | grep -E "^[^ ]+ → |^  (one-way |causality)|^clock offset|^  data prove|^ +(INCONSISTENT|EXCLUDES|contains 0|one direction)"
echo "   (both bounds lie near the -5 ms the oscillators started with; they cross because the offset"
echo "   moved by 80 µs per second of the run, more than the two one-way latencies that bound it)"
echo "== what Prometheus scraped from the server's agent during the first run (--metrics, no trace needed)"
cat "$OUT/metrics.txt"
echo "== done: open $FILE in Wireshark with the plugin folder $(dirname "$LUA") installed (see wireshark/README.md); $OUT/report.html in a browser"
