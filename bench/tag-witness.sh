#!/usr/bin/env bash
# Which transmission does a SENDMSG tag describe? A packet capture as an
# independent witness of the BPF TX timestamping tags, with and without loss.
#
# Two namespaces of one kernel ("client" and "server", one veth pair) share
# one clock, and both agents run on --clock system: the true clock offset
# between the hosts is exactly 0, so every causality violation nettrace-match
# reports is an artefact of which transmission an event describes, not of
# the clocks. Each run: a sink, one agent per namespace (--probes tx,rx,tcp),
# dumpcap on BOTH veth ends (small snaplen, pcapng, kernel software stamps in
# CLOCK_REALTIME, the trace's global time here), iperf3 --bidir; with loss,
# the server drops 1 in LOSS_ONE_IN received client->server data skbs
# (nftables, input hook: after the netif_receive_skb tracepoint and the
# capture tap, so the receiver's STACK_ENTRY and capture still see the
# dropped copies). Runs alternate loss / no loss. bench/tag_witness.py then
# classifies every SENDMSG tag against the sender-side capture (A: the tag
# landed on bytes already sent; C: superseded, never sent under this tag;
# B: sent, but its last byte had already crossed the veth in an earlier
# transmission; OK), checks the capture against the OK tags' SCHED/SND_SW,
# and explains nettrace-match's causality violations with the capture
# segments holding each violating tag's last byte.
#
# Knobs (environment): BIN (directory of tracer-agent, tracer-sink and
# nettrace-match: target/release), RUNS (3 runs per condition), SECS
# (iperf3 seconds: 3), RATE (iperf3 -b per direction: 200M, as in
# scripts/demo.sh; RATE= for unlimited, which makes traces of ~250 MB and
# ~4 min of decoding per run), LEN (iperf3 -l, empty: iperf3's default),
# LOSS_ONE_IN (20), SNAPLEN (128), OUT (traces/tag-witness; each run in
# OUT/NN-loss or OUT/NN-noloss), WORST (violations shown with their evidence
# per run: 3). ANALYSE_ONLY=1 analyses OUT's existing runs again (decoded
# fields are cached next to each pcapng). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-target/release}
RUNS=${RUNS:-3}
SECS=${SECS:-3}
RATE=${RATE-200M}
LEN=${LEN:-}
LOSS_ONE_IN=${LOSS_ONE_IN:-20}
SNAPLEN=${SNAPLEN:-128}
OUT=${OUT:-traces/tag-witness}
WORST=${WORST:-3}
LUA=wireshark/nettrace/nettrace.lua
PROBES=tx,rx,tcp
NS_C=ntr-tw-client NS_S=ntr-tw-server
IF_C=ntrtw-c IF_S=ntrtw-s
ADDR_C=10.212.0.1 ADDR_S=10.212.0.2
SINK_PORT=7420
PIDFILE=$OUT/.pids

analyse() {
    python3 bench/tag_witness.py --lua "$LUA" --match "$BIN/nettrace-match" --worst "$WORST" \
        "$OUT"/[0-9]*-loss "$OUT"/[0-9]*-noloss
}
if [[ ${ANALYSE_ONLY:-0} == 1 ]]; then
    analyse
    exit
fi

source scripts/setup.sh # tshark (dumpcap), iperf3, nftables, python3
for b in tracer-agent tracer-sink nettrace-match; do
    [[ -x $BIN/$b ]] || { echo "no $BIN/$b: build the workspace (cargo build --release) or set BIN" >&2; exit 1; }
done
mkdir -p "$OUT"

# Background programs of this run, by pid (also written to $PIDFILE so that
# the next run can end those a killed run left behind).
AGENTS=() CAPTURES=() SINK= IPERF=
started() { echo "$1 $2" >> "$PIDFILE"; }
stop_pid() { # signal pid...
    local sig=$1 p; shift
    for p in "$@"; do kill "-$sig" "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}
stop_all() {
    ((${#AGENTS[@]})) && stop_pid INT "${AGENTS[@]}"
    ((${#CAPTURES[@]})) && stop_pid TERM "${CAPTURES[@]}"
    [[ -n $SINK ]] && stop_pid TERM "$SINK"
    [[ -n $IPERF ]] && stop_pid TERM "$IPERF"
    AGENTS=() CAPTURES=() SINK= IPERF=
}
remove_namespaces() {
    ip netns del "$NS_C" 2>/dev/null || true
    ip netns del "$NS_S" 2>/dev/null || true
}
cleanup() {
    stop_all
    remove_namespaces
    rm -f "$PIDFILE"
}
# Leftovers of a killed run: its programs (by the pids it recorded, if the
# pid still runs the same program) and its namespaces.
if [[ -f $PIDFILE ]]; then
    while read -r pid name; do
        [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$name" \
            && kill -TERM "$pid" 2>/dev/null || true
    done < "$PIDFILE"
    sleep 0.5
    rm -f "$PIDFILE"
fi
remove_namespaces
trap cleanup EXIT
trap 'exit 130' INT TERM

in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" -- "$@"; }

setup_namespaces() {
    remove_namespaces
    ip netns add "$NS_C"
    ip netns add "$NS_S"
    ip link add "$IF_C" netns "$NS_C" type veth peer name "$IF_S" netns "$NS_S"
    ip -n "$NS_C" addr add "$ADDR_C/24" dev "$IF_C"
    ip -n "$NS_S" addr add "$ADDR_S/24" dev "$IF_S"
    for ns in "$NS_C" "$NS_S"; do ip -n "$ns" link set lo up; done
    ip -n "$NS_C" link set "$IF_C" up
    ip -n "$NS_S" link set "$IF_S" up
}

# Waits until log $2 of process $1 holds $3 at least $4 times.
wait_log() {
    for _ in $(seq 300); do
        (($(grep -c -- "$3" "$2" || true) >= $4)) && return
        kill -0 "$1" 2>/dev/null || { echo "process of $2 ended:" >&2; cat "$2" >&2; exit 1; }
        sleep 0.1
    done
    echo "no \"$3\" in $2:" >&2; cat "$2" >&2; exit 1
}

# One run into directory $1; $2 = loss or noloss.
run_once() {
    local dir=$1 cond=$2 ns host iface
    rm -rf "$dir"; mkdir -p "$dir"
    setup_namespaces

    # Backgrounded through nsenter directly (it execs the program), so that
    # $! is the program itself and gets our signals.
    nsenter --net="/run/netns/$NS_S" -- "$BIN/tracer-sink" --listen "$ADDR_S:$SINK_PORT" --output "$dir" \
        --stats-interval 0 --no-comments > "$dir/sink.log" 2>&1 &
    SINK=$!; started "$SINK" tracer-sink
    wait_log "$SINK" "$dir/sink.log" "tracer-sink started" 1
    for host in client server; do
        ns=$NS_C; [[ $host == server ]] && ns=$NS_S
        nsenter --net="/run/netns/$ns" -- "$BIN/tracer-agent" --sink "$ADDR_S:$SINK_PORT" --probes "$PROBES" \
            --hostname "$host" --clock system > "$dir/agent-$host.log" 2>&1 &
        AGENTS+=($!); started $! tracer-agent
    done
    # The packet captures: both ends of the veth, TCP of iperf3 only.
    for host in client server; do
        ns=$NS_C iface=$IF_C; [[ $host == server ]] && ns=$NS_S iface=$IF_S
        nsenter --net="/run/netns/$ns" -- dumpcap -q -i "$iface" -s "$SNAPLEN" -B 64 -f "tcp port 5201" \
            -w "$dir/capture-$host.pcapng" > "$dir/dumpcap-$host.log" 2>&1 &
        CAPTURES+=($!); started $! dumpcap
    done
    wait_log "${AGENTS[0]}" "$dir/agent-client.log" "probe attached" 3
    wait_log "${AGENTS[1]}" "$dir/agent-server.log" "probe attached" 3
    wait_log "${CAPTURES[0]}" "$dir/dumpcap-client.log" "Capturing on" 1
    wait_log "${CAPTURES[1]}" "$dir/dumpcap-server.log" "Capturing on" 1

    if [[ $cond == loss ]]; then
        # Data skbs of the client->server direction (length > 1000: not the
        # ACKs of the other direction, not the control connection).
        in_ns "$NS_S" nft -f - <<NFT
table inet ntrtw {
    chain input {
        type filter hook input priority 0;
        tcp dport 5201 meta length > 1000 numgen random mod $LOSS_ONE_IN == 0 counter drop
    }
}
NFT
    fi
    nsenter --net="/run/netns/$NS_S" -- iperf3 -s -1 -B "$ADDR_S" > "$dir/iperf3-server.log" 2>&1 &
    IPERF=$!; started "$IPERF" iperf3
    sleep 0.5
    in_ns "$NS_C" iperf3 -c "$ADDR_S" --bidir -t "$SECS" ${RATE:+-b "$RATE"} ${LEN:+-l "$LEN"} \
        > "$dir/iperf3-client.log" 2>&1 || { cat "$dir/iperf3-client.log" >&2; exit 1; }
    wait "$IPERF" || true; IPERF=
    [[ $cond == loss ]] && in_ns "$NS_S" nft list table inet ntrtw > "$dir/nft.txt"
    sleep 0.5 # late ACK callbacks

    # Agents first (SIGINT: final drain), then the captures, then the sink.
    stop_pid INT "${AGENTS[@]}"; AGENTS=()
    stop_pid TERM "${CAPTURES[@]}"; CAPTURES=()
    sleep 0.3
    stop_pid TERM "$SINK"; SINK=
    remove_namespaces
    : > "$PIDFILE"

    # What the analysis needs to know about the run.
    cat > "$dir/run.json" <<JSON
{"condition": "$cond", "loss_one_in": $([[ $cond == loss ]] && echo "$LOSS_ONE_IN" || echo 0),
 "secs": $SECS, "rate": "${RATE:-unlimited}", "len": "${LEN:-default}",
 "hosts": {"client": {"addr": "$ADDR_C", "capture": "capture-client.pcapng"},
           "server": {"addr": "$ADDR_S", "capture": "capture-server.pcapng"}}}
JSON
    # iperf3's receiver lines: TX-C is client->server, RX-C server->client.
    printf "   %s: iperf3 %s" "$dir" "$(grep -E 'receiver$' "$dir/iperf3-client.log" \
        | sed -E 's/.*\]\[(TX-C|RX-C)\].* ([0-9.]+ [KMG]?bits\/sec).*/\1 \2/' | paste -sd, -)"
    [[ $cond == loss ]] && printf "; nft dropped %s packets" \
        "$(grep -o 'counter packets [0-9]*' "$dir/nft.txt" | awk '{print $3}')"
    echo
}

echo "== $RUNS runs with loss (1 in $LOSS_ONE_IN client->server data skbs) and $RUNS without," \
     "iperf3 --bidir ${SECS}s, rate ${RATE:-unlimited}, into $OUT/"
rm -rf "$OUT"/[0-9]*-loss "$OUT"/[0-9]*-noloss
for i in $(seq "$RUNS"); do
    # Alternating, so that a slow phase of the machine hits both conditions.
    run_once "$(printf "%s/%02d-loss" "$OUT" "$i")" loss
    run_once "$(printf "%s/%02d-noloss" "$OUT" "$i")" noloss
done
trap - EXIT
cleanup

echo "== analysis"
analyse
