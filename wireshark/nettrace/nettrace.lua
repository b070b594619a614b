--[[
nettrace.lua - Wireshark/tshark dissector for the clock-synchronized network
stack tracer ("nettrace").

Understands wire format versions 2 and 1 and capture record version 1, as
defined in docs/wire-format.md. Its layout tables (offsets, body lengths,
kind numbers, name tables) are generated from tracer-codec's layout
description (tracer-codec/src/layout.rs) into the block between the
GENERATED LAYOUT markers below; the rest is display logic. It decodes:

  * pcapng files written by tracer-sink: link type USER0 (LINKTYPE_USER0,
    147); each frame is one capture record (capture header + one event).
  * the sink's live interface (tracer-sink --live-iface nettrace0):
    Ethernet frames of EtherType 0x88B5, each one capture record.
  * live agent -> sink UDP datagrams ("NTRC" header + event records) on the
    UDP port set by the preference nettrace.udp_port (default 7420), or on
    any port through "Decode As... > UDP port > NETTRACE"; and the sink's
    acknowledgements to the agents ("NTRA", see docs/wire-format.md) on
    the same port.

Event kinds:
  1  TX timestamp: one BPF TX timestamping callback, with
     stage latencies computed across frames.
  2  clock update: one update of an agent's global clock
     (raw sample, offset, frequency, delay, error estimate, servo state),
     fields nettrace.clock.*.
  3  RX stage: one receive-path tracepoint hit (nettrace.rx.*); the
     frames of one received TCP skb are linked, with stage latencies.
  4  skb drop, with its reason (nettrace.drop.*).
  5  TCP anomaly: retransmission, reset, receive limits (nettrace.tcp.*).
  6  CPU cost of the network stack: one CPU's NET_RX/NET_TX softirq and
     socket send/receive time over one sampling interval, with each as a
     share of the interval (nettrace.cpu.*).
  Other kinds are shown as undecoded bodies and skipped by their length;
  bytes past a known layout are shown as fields of a newer version.

Across hosts, a sender's SND_SW frame and the receiver's STACK_ENTRY frame
it pairs with (by bytes, with nettrace-match's rule) link to each other
(nettrace.peer_frame) with the one-way latency (nettrace.oneway_ns); a
receive before its send is flagged (nettrace.causality_violation, an
expert warning), a send whose byte was received but not once per recorded
send is ambiguous (nettrace.peer_ambiguous, an expert note). Links to
later frames need two passes: tshark -2, or Wireshark after loading.

Install:
  Wireshark: copy this file to your personal Lua plugins folder
             (~/.local/lib/wireshark/plugins/ on Linux; see
             Help > About Wireshark > Folders) and restart Wireshark
             (or Analyze > Reload Lua Plugins).
  tshark:    tshark -X lua_script:wireshark/nettrace.lua -r trace.pcapng
             tshark -X lua_script:wireshark/nettrace.lua -o nettrace.udp_port:9999 -i lo

Needs Wireshark >= 4.0 (Lua 5.2). Field list and filter examples are in
wireshark/README.md.
]]

-- Every offset, length, kind number and name table below comes from the
-- generated block: tracer-codec renders it from its layout tables
-- (tracer-codec/src/layout.rs) and a test fails when it is stale. It lives
-- inside this file, not beside it, so that this one file is the whole
-- plugin: Wireshark loads every .lua of a plugin folder on its own, and
-- `tshark -X lua_script:` loads exactly one file.
-- BEGIN GENERATED LAYOUT
-- Do not edit by hand: rendered by tracer_codec::layout::render_lua();
-- regenerate with `UPDATE_GENERATED=1 cargo test -p tracer-codec`.
local LAYOUT = {
    wire_version = 3,
    wire_version_1 = 1,
    wire_version_2 = 2,
    dgram_v1_fixed_len = 61,
    dgram_v2_fixed_len = 70,
    flag_mac = 1,
    tx_flag_range = 1,
    tx_flag_sent = 2,
    mac_len = 16,
    capture_version = 1,
    live_ethertype = 0x88B5,
    magic = "NTRC",
    max_hostname_len = 64,
    record_header_len = 4,
    ack_magic = "NTRA",
    dgram = {
        fixed_len = 86,
        fields = {
            magic = { offset = 0, size = 4, type = "text" },
            version = { offset = 4, size = 2, type = "u16" },
            header_len = { offset = 6, size = 2, type = "u16" },
            agent_id = { offset = 8, size = 8, type = "u64" },
            boot_id = { offset = 16, size = 16, type = "guid" },
            seq = { offset = 32, size = 8, type = "u64" },
            lost_events = { offset = 40, size = 8, type = "u64" },
            first_event_seq = { offset = 48, size = 8, type = "u64" },
            clock_source = { offset = 56, size = 1, type = "u8", names = "ClockSource" },
            clock_state = { offset = 57, size = 1, type = "u8", names = "ClockState" },
            event_count = { offset = 58, size = 2, type = "u16" },
            hostname_len = { offset = 60, size = 1, type = "u8" },
            flags = { offset = 61, size = 1, type = "u8" },
            incarnation = { offset = 62, size = 8, type = "u64" },
            sink_instance = { offset = 70, size = 8, type = "u64" },
            sent_mono_ns = { offset = 78, size = 8, type = "u64" },
        },
        order = { "magic", "version", "header_len", "agent_id", "boot_id", "seq", "lost_events", "first_event_seq", "clock_source", "clock_state", "event_count", "hostname_len", "flags", "incarnation", "sink_instance", "sent_mono_ns" },
    },
    capture = {
        fixed_len = 23,
        fields = {
            version = { offset = 0, size = 2, type = "u16" },
            header_len = { offset = 2, size = 2, type = "u16" },
            agent_id = { offset = 4, size = 8, type = "u64" },
            event_seq = { offset = 12, size = 8, type = "u64" },
            clock_source = { offset = 20, size = 1, type = "u8", names = "ClockSource" },
            clock_state = { offset = 21, size = 1, type = "u8", names = "ClockState" },
            host_len = { offset = 22, size = 1, type = "u8" },
        },
        order = { "version", "header_len", "agent_id", "event_seq", "clock_source", "clock_state", "host_len" },
    },
    ack = {
        fixed_len = 96,
        fields = {
            magic = { offset = 0, size = 4, type = "text" },
            version = { offset = 4, size = 2, type = "u16" },
            ack_len = { offset = 6, size = 2, type = "u16" },
            flags = { offset = 8, size = 1, type = "u8" },
            reserved = { offset = 9, size = 7, type = "bytes" },
            sink_instance = { offset = 16, size = 8, type = "u64" },
            ack_seq = { offset = 24, size = 8, type = "u64" },
            agent_id = { offset = 32, size = 8, type = "u64" },
            boot_id = { offset = 40, size = 16, type = "guid" },
            incarnation = { offset = 56, size = 8, type = "u64" },
            preceding_events = { offset = 64, size = 8, type = "u64" },
            delivered_events = { offset = 72, size = 8, type = "u64" },
            lost_events = { offset = 80, size = 8, type = "u64" },
            received_events = { offset = 88, size = 8, type = "u64" },
        },
        order = { "magic", "version", "ack_len", "flags", "reserved", "sink_instance", "ack_seq", "agent_id", "boot_id", "incarnation", "preceding_events", "delivered_events", "lost_events", "received_events" },
    },
    record = {
        fields = {
            kind = { offset = 0, size = 2, type = "u16" },
            len = { offset = 2, size = 2, type = "u16" },
        },
        order = { "kind", "len" },
    },
    kind = { TX = 1, CLOCK = 2, RX = 3, DROP = 4, TCP = 5, CPU = 6 },
    kinds = {
        [1] = {
            name = "TX",
            body_len = 115,
            v1_body_len = 110,
            fields = {
                mono_ns = { offset = 0, size = 8, type = "u64" },
                global_ns = { offset = 8, size = 8, type = "u64" },
                hw_ns = { offset = 16, size = 8, type = "u64" },
                cookie = { offset = 24, size = 8, type = "u64" },
                tskey = { offset = 32, size = 4, type = "u32" },
                seq = { offset = 36, size = 4, type = "u32" },
                netns = { offset = 40, size = 4, type = "u32" },
                cpu = { offset = 44, size = 4, type = "u32" },
                pid = { offset = 48, size = 4, type = "u32" },
                tid = { offset = 52, size = 4, type = "u32" },
                stage = { offset = 56, size = 1, type = "u8", names = "TxStage" },
                family = { offset = 57, size = 1, type = "u8", names = "Family" },
                sport = { offset = 58, size = 2, type = "u16" },
                dport = { offset = 60, size = 2, type = "u16" },
                saddr = { offset = 62, size = 16, type = "addr" },
                daddr = { offset = 78, size = 16, type = "addr" },
                comm = { offset = 94, size = 16, type = "comm" },
                end_seq = { offset = 110, size = 4, type = "u32" },
                tx_flags = { offset = 114, size = 1, type = "u8" },
            },
            order = { "mono_ns", "global_ns", "hw_ns", "cookie", "tskey", "seq", "netns", "cpu", "pid", "tid", "stage", "family", "sport", "dport", "saddr", "daddr", "comm", "end_seq", "tx_flags" },
        },
        [2] = {
            name = "CLOCK",
            body_len = 66,
            v1_body_len = 66,
            fields = {
                mono_ns = { offset = 0, size = 8, type = "u64" },
                global_ns = { offset = 8, size = 8, type = "u64" },
                ref_ns = { offset = 16, size = 8, type = "u64" },
                offset_ns = { offset = 24, size = 8, type = "i64" },
                freq_ppb = { offset = 32, size = 8, type = "f64" },
                delay_ns = { offset = 40, size = 8, type = "u64" },
                uncertainty_ns = { offset = 48, size = 8, type = "u64" },
                error_estimate_ns = { offset = 56, size = 8, type = "u64" },
                source = { offset = 64, size = 1, type = "u8", names = "ClockSource" },
                state = { offset = 65, size = 1, type = "u8", names = "ClockState" },
            },
            order = { "mono_ns", "global_ns", "ref_ns", "offset_ns", "freq_ppb", "delay_ns", "uncertainty_ns", "error_estimate_ns", "source", "state" },
        },
        [3] = {
            name = "RX",
            body_len = 136,
            v1_body_len = 136,
            fields = {
                mono_ns = { offset = 0, size = 8, type = "u64" },
                global_ns = { offset = 8, size = 8, type = "u64" },
                rx_stamp_ns = { offset = 16, size = 8, type = "u64" },
                rx_stamp_global_ns = { offset = 24, size = 8, type = "u64" },
                hw_ns = { offset = 32, size = 8, type = "u64" },
                cookie = { offset = 40, size = 8, type = "u64" },
                seq = { offset = 48, size = 4, type = "u32" },
                end_seq = { offset = 52, size = 4, type = "u32" },
                len = { offset = 56, size = 4, type = "u32" },
                netns = { offset = 60, size = 4, type = "u32" },
                ifindex = { offset = 64, size = 4, type = "u32" },
                cpu = { offset = 68, size = 4, type = "u32" },
                pid = { offset = 72, size = 4, type = "u32" },
                tid = { offset = 76, size = 4, type = "u32" },
                stage = { offset = 80, size = 1, type = "u8", names = "RxStage" },
                family = { offset = 81, size = 1, type = "u8", names = "Family" },
                protocol = { offset = 82, size = 1, type = "u8" },
                tstamp_type = { offset = 83, size = 1, type = "u8" },
                sport = { offset = 84, size = 2, type = "u16" },
                dport = { offset = 86, size = 2, type = "u16" },
                saddr = { offset = 88, size = 16, type = "addr" },
                daddr = { offset = 104, size = 16, type = "addr" },
                comm = { offset = 120, size = 16, type = "comm" },
            },
            order = { "mono_ns", "global_ns", "rx_stamp_ns", "rx_stamp_global_ns", "hw_ns", "cookie", "seq", "end_seq", "len", "netns", "ifindex", "cpu", "pid", "tid", "stage", "family", "protocol", "tstamp_type", "sport", "dport", "saddr", "daddr", "comm" },
        },
        [4] = {
            name = "DROP",
            body_len = 164,
            v1_body_len = 164,
            fields = {
                mono_ns = { offset = 0, size = 8, type = "u64" },
                global_ns = { offset = 8, size = 8, type = "u64" },
                location = { offset = 16, size = 8, type = "u64" },
                reason = { offset = 24, size = 4, type = "u32" },
                netns = { offset = 28, size = 4, type = "u32" },
                ifindex = { offset = 32, size = 4, type = "u32" },
                cpu = { offset = 36, size = 4, type = "u32" },
                len = { offset = 40, size = 4, type = "u32" },
                protocol = { offset = 44, size = 2, type = "u16" },
                family = { offset = 46, size = 1, type = "u8", names = "FlowFamily" },
                l4proto = { offset = 47, size = 1, type = "u8" },
                sport = { offset = 48, size = 2, type = "u16" },
                dport = { offset = 50, size = 2, type = "u16" },
                saddr = { offset = 52, size = 16, type = "addr" },
                daddr = { offset = 68, size = 16, type = "addr" },
                reason_name = { offset = 84, size = 32, type = "comm" },
                location_sym = { offset = 116, size = 48, type = "comm" },
            },
            order = { "mono_ns", "global_ns", "location", "reason", "netns", "ifindex", "cpu", "len", "protocol", "family", "l4proto", "sport", "dport", "saddr", "daddr", "reason_name", "location_sym" },
        },
        [5] = {
            name = "TCP",
            body_len = 83,
            v1_body_len = 83,
            fields = {
                mono_ns = { offset = 0, size = 8, type = "u64" },
                global_ns = { offset = 8, size = 8, type = "u64" },
                cookie = { offset = 16, size = 8, type = "u64" },
                seq = { offset = 24, size = 4, type = "u32" },
                end_seq = { offset = 28, size = 4, type = "u32" },
                netns = { offset = 32, size = 4, type = "u32" },
                cpu = { offset = 36, size = 4, type = "u32" },
                detail = { offset = 40, size = 4, type = "u32" },
                anomaly = { offset = 44, size = 1, type = "u8", names = "TcpAnomaly" },
                family = { offset = 45, size = 1, type = "u8", names = "FlowFamily" },
                state = { offset = 46, size = 1, type = "u8" },
                sport = { offset = 47, size = 2, type = "u16" },
                dport = { offset = 49, size = 2, type = "u16" },
                saddr = { offset = 51, size = 16, type = "addr" },
                daddr = { offset = 67, size = 16, type = "addr" },
            },
            order = { "mono_ns", "global_ns", "cookie", "seq", "end_seq", "netns", "cpu", "detail", "anomaly", "family", "state", "sport", "dport", "saddr", "daddr" },
        },
        [6] = {
            name = "CPU",
            body_len = 60,
            v1_body_len = 60,
            fields = {
                mono_ns = { offset = 0, size = 8, type = "u64" },
                global_ns = { offset = 8, size = 8, type = "u64" },
                interval_ns = { offset = 16, size = 8, type = "u64" },
                net_rx_ns = { offset = 24, size = 8, type = "u64" },
                net_tx_ns = { offset = 32, size = 8, type = "u64" },
                sock_send_ns = { offset = 40, size = 8, type = "u64" },
                sock_recv_ns = { offset = 48, size = 8, type = "u64" },
                cpu = { offset = 56, size = 4, type = "u32" },
            },
            order = { "mono_ns", "global_ns", "interval_ns", "net_rx_ns", "net_tx_ns", "sock_send_ns", "sock_recv_ns", "cpu" },
        },
    },
    names = {
        TxStage = { [0] = "SENDMSG", [1] = "SCHED", [2] = "SND_SW", [3] = "SND_HW", [4] = "ACK" },
        ClockSource = { [0] = "system", [1] = "phc", [2] = "sink" },
        ClockState = { [0] = "UNLOCKED", [1] = "JUMP", [2] = "LOCKED", [3] = "LOCKED_STABLE", [4] = "HOLDOVER" },
        RxStage = { [0] = "STACK_ENTRY", [1] = "TCP_INPUT", [2] = "DATA_READY", [3] = "COPY", [4] = "READ_DONE" },
        Family = { [4] = "IPv4", [6] = "IPv6" },
        FlowFamily = { [0] = "none", [4] = "IPv4", [6] = "IPv6" },
        TcpAnomaly = { [0] = "RETRANSMIT", [1] = "RESET_SENT", [2] = "RESET_RECEIVED", [3] = "RCVQUEUE_FULL", [4] = "EXCEED_BUF_LIMIT" },
    },
}
-- END GENERATED LAYOUT

-- Versions this script understands. Anything else is flagged, not guessed at.
local WIRE_VERSION = LAYOUT.wire_version
local WIRE_VERSION_1 = LAYOUT.wire_version_1
local CAPTURE_VERSION = LAYOUT.capture_version

local MAGIC = LAYOUT.magic
local DGRAM = LAYOUT.dgram -- datagram header: fixed_len, fields
local CAPTURE = LAYOUT.capture -- capture header: fixed_len, fields
local RECORD = LAYOUT.record -- record framing: kind, len
local MAX_HOSTNAME_LEN = LAYOUT.max_hostname_len
local RECORD_HEADER_LEN = LAYOUT.record_header_len
local KIND = LAYOUT.kind
local TX = LAYOUT.kinds[KIND.TX]
local CLOCK = LAYOUT.kinds[KIND.CLOCK]
local DROP = LAYOUT.kinds[KIND.DROP]
local TCP = LAYOUT.kinds[KIND.TCP]
local RX = LAYOUT.kinds[KIND.RX]
local CPU = LAYOUT.kinds[KIND.CPU]
local DEFAULT_UDP_PORT = 7420

local STAGE_NAMES = LAYOUT.names.TxStage
local CLOCK_SOURCE_NAMES = LAYOUT.names.ClockSource
local CLOCK_STATE_NAMES = LAYOUT.names.ClockState
local FAMILY_NAMES = LAYOUT.names.Family
local FLOW_FAMILY_NAMES = LAYOUT.names.FlowFamily
local TCP_ANOMALY_NAMES = LAYOUT.names.TcpAnomaly
local TCP_STATE_NAMES = { [1] = "ESTABLISHED", [2] = "SYN_SENT", [3] = "SYN_RECV", [4] = "FIN_WAIT1",
    [5] = "FIN_WAIT2", [6] = "TIME_WAIT", [7] = "CLOSE", [8] = "CLOSE_WAIT", [9] = "LAST_ACK",
    [10] = "LISTEN", [11] = "CLOSING", [12] = "NEW_SYN_RECV" }
-- IP protocol numbers a drop's flow shows by name.
local L4PROTO_NAMES = { [1] = "ICMP", [6] = "TCP", [17] = "UDP", [58] = "ICMPv6", [132] = "SCTP" }
local RX_STAGE_NAMES = LAYOUT.names.RxStage
-- Stage numbers by name (STAGE.SENDMSG == 0, ...).
local STAGE = {}
for v, name in pairs(STAGE_NAMES) do
    STAGE[name] = v
end
local KIND_NAMES = {}
for v, k in pairs(LAYOUT.kinds) do
    KIND_NAMES[v] = k.name
end

-- A function giving the range of a named field of `fields` in `tvb`,
-- whose layout starts at `base` (default 0).
local function field_reader(tvb, fields, base)
    base = base or 0
    return function(name)
        local f = fields[name]
        return tvb(base + f.offset, f.size)
    end
end

-- The protocol. It owns every field, the preference and the UDP registration
-- (so "Decode As" lists it as NETTRACE).
local proto = Proto("nettrace", "nettrace: kernel network-stack events")

-- A second, tiny protocol registered for link type USER0 only. One Lua Proto
-- has one dissector function, and the payload alone cannot tell a capture
-- record from a datagram once it is malformed (a bad-magic datagram is not
-- a capture record), so the table that called us decides. Its tree shows
-- the fields of `proto`, so `nettrace` and `nettrace.*` filters match both.
local proto_file = Proto("nettrace_file", "nettrace: capture record")

------------------------------------------------------------------------------
-- Fields. Names match the Rust event model (tracer-codec/src/event.rs).
------------------------------------------------------------------------------
local F = {
    -- datagram header (live UDP)
    magic = ProtoField.string("nettrace.magic", "Magic"),
    dgram_version = ProtoField.uint16("nettrace.dgram.version", "Wire version"),
    dgram_header_len = ProtoField.uint16("nettrace.dgram.header_len", "Header length"),
    boot_id = ProtoField.guid("nettrace.dgram.boot_id", "Boot id"),
    dgram_seq = ProtoField.uint64("nettrace.dgram.seq", "Datagram sequence"),
    lost_events = ProtoField.uint64("nettrace.dgram.lost_events", "Lost events (cumulative)"),
    first_event_seq = ProtoField.uint64("nettrace.dgram.first_event_seq", "First event sequence"),
    event_count = ProtoField.uint16("nettrace.dgram.event_count", "Event count"),
    dgram_flags = ProtoField.uint8("nettrace.dgram.flags", "Flags", base.HEX),
    dgram_flag_mac = ProtoField.bool("nettrace.dgram.flags.mac", "Tagged (ends with a MAC)", 8, nil, LAYOUT.flag_mac),
    incarnation = ProtoField.uint64("nettrace.dgram.incarnation", "Incarnation", base.HEX),
    dgram_sink_instance = ProtoField.uint64("nettrace.dgram.sink_instance", "Bound to sink instance", base.HEX,
        nil, nil, "The sink instance of the newest acknowledgement the agent took (0: none yet)"),
    sent_mono_ns = ProtoField.uint64("nettrace.dgram.sent_mono_ns", "Sent at (agent CLOCK_MONOTONIC, ns)", base.DEC),
    dgram_mac = ProtoField.bytes("nettrace.dgram.mac", "MAC (HMAC-SHA256-128, not checked here)"),
    -- the sink's acknowledgement (sink -> agent, "NTRA")
    ack_version = ProtoField.uint16("nettrace.ack.version", "Ack version"),
    ack_len = ProtoField.uint16("nettrace.ack.ack_len", "Ack length"),
    ack_flags = ProtoField.uint8("nettrace.ack.flags", "Flags", base.HEX),
    ack_sink_instance = ProtoField.uint64("nettrace.ack.sink_instance", "Sink instance", base.HEX),
    ack_seq = ProtoField.uint64("nettrace.ack.ack_seq", "Ack sequence"),
    ack_preceding = ProtoField.uint64("nettrace.ack.preceding_events", "Events before this sink's first"),
    ack_delivered = ProtoField.uint64("nettrace.ack.delivered_events", "Events in the sink's files"),
    ack_lost = ProtoField.uint64("nettrace.ack.lost_events", "Events the sink counted lost"),
    ack_received = ProtoField.uint64("nettrace.ack.received_events", "Events the sink accepted"),
    ack_mac = ProtoField.bytes("nettrace.ack.mac", "MAC (HMAC-SHA256-128, not checked here)"),
    -- capture header (pcapng frames)
    cap_version = ProtoField.uint16("nettrace.capture.version", "Capture version"),
    cap_header_len = ProtoField.uint16("nettrace.capture.header_len", "Header length"),
    event_seq = ProtoField.uint64("nettrace.event_seq", "Event sequence"),
    -- common to both headers
    agent_id = ProtoField.uint64("nettrace.agent_id", "Agent id", base.HEX),
    clock_source = ProtoField.uint8("nettrace.clock_source", "Clock source", base.DEC, CLOCK_SOURCE_NAMES),
    clock_state = ProtoField.uint8("nettrace.clock_state", "Clock state", base.DEC, CLOCK_STATE_NAMES),
    host_len = ProtoField.uint8("nettrace.host_len", "Host name length"),
    host = ProtoField.string("nettrace.host", "Host"),
    -- record framing
    kind = ProtoField.uint16("nettrace.kind", "Kind", base.DEC, KIND_NAMES),
    len = ProtoField.uint16("nettrace.len", "Body length"),
    unknown = ProtoField.bytes("nettrace.unknown", "Body of unknown kind"),
    extra = ProtoField.bytes("nettrace.extra", "Fields from a newer version"),
    body = ProtoField.bytes("nettrace.body", "Undecodable body"),
    -- TX event body
    mono_ns = ProtoField.uint64("nettrace.mono_ns", "Monotonic ns (raw kernel stamp)"),
    global_ns = ProtoField.uint64("nettrace.global_ns", "Global ns"),
    global_time = ProtoField.absolute_time("nettrace.global_time", "Global time", base.UTC),
    hw_ns = ProtoField.uint64("nettrace.hw_ns", "Hardware ns"),
    cookie = ProtoField.uint64("nettrace.cookie", "Socket cookie"),
    tskey = ProtoField.uint32("nettrace.tskey", "tskey"),
    seq = ProtoField.uint32("nettrace.seq", "TCP sequence (first byte)"),
    end_seq = ProtoField.uint32("nettrace.end_seq", "TCP sequence after the last byte"),
    tx_flags = ProtoField.uint8("nettrace.tx_flags", "TX flags", base.HEX),
    tx_flag_range = ProtoField.bool("nettrace.tx_flags.range", "Range read at this callback", 8, nil, LAYOUT.tx_flag_range),
    tx_flag_sent = ProtoField.bool("nettrace.tx_flags.sent", "Tagged an skb already sent", 8, nil, LAYOUT.tx_flag_sent),
    netns = ProtoField.uint32("nettrace.netns", "Network namespace inode"),
    cpu = ProtoField.uint32("nettrace.cpu", "CPU"),
    pid = ProtoField.uint32("nettrace.pid", "PID (tgid)"),
    tid = ProtoField.uint32("nettrace.tid", "Thread id"),
    stage = ProtoField.uint8("nettrace.stage", "Stage", base.DEC, STAGE_NAMES),
    family = ProtoField.uint8("nettrace.family", "Family", base.DEC, FAMILY_NAMES),
    sport = ProtoField.uint16("nettrace.sport", "Local port"),
    dport = ProtoField.uint16("nettrace.dport", "Remote port"),
    saddr = ProtoField.ipv4("nettrace.saddr", "Local address"),
    daddr = ProtoField.ipv4("nettrace.daddr", "Remote address"),
    saddr6 = ProtoField.ipv6("nettrace.saddr6", "Local address"),
    daddr6 = ProtoField.ipv6("nettrace.daddr6", "Remote address"),
    saddr_raw = ProtoField.bytes("nettrace.saddr_raw", "Local address (unknown family)"),
    daddr_raw = ProtoField.bytes("nettrace.daddr_raw", "Remote address (unknown family)"),
    -- NUL-padded, not NUL-terminated (a 16-byte name has no NUL, which an
    -- FT_STRINGZ field rejects), so a string field holding the bytes before
    -- the first NUL.
    comm = ProtoField.string("nettrace.comm", "Command"),
    -- stage latencies, computed by this dissector (signed: a clock step can
    -- make a later stage look earlier, and that should be visible)
    lat_sched = ProtoField.int64("nettrace.lat.sched_ns", "SCHED - SENDMSG (ns)"),
    lat_snd_sw = ProtoField.int64("nettrace.lat.snd_sw_ns", "SND_SW - SCHED (ns)"),
    lat_snd_hw = ProtoField.int64("nettrace.lat.snd_hw_ns", "SND_HW - SCHED (ns)"),
    lat_ack = ProtoField.int64("nettrace.lat.ack_ns", "ACK - send (ns)"),
    lat_total = ProtoField.int64("nettrace.lat.total_ns", "Since SENDMSG (ns)"),
    lat_ref_frame = ProtoField.framenum("nettrace.lat.ref_frame", "Earlier stage in frame"),
    -- clock update body (ClockEvent)
    clock_mono_ns = ProtoField.uint64("nettrace.clock.mono_ns", "Monotonic ns of the sample"),
    clock_global_ns = ProtoField.uint64("nettrace.clock.global_ns", "Global ns after the update"),
    clock_global_time = ProtoField.absolute_time("nettrace.clock.global_time", "Global time after the update",
        base.UTC),
    clock_ref_ns = ProtoField.uint64("nettrace.clock.ref_ns", "Reference ns (raw sample)"),
    clock_offset_ns = ProtoField.int64("nettrace.clock.offset_ns", "Offset ns (global - reference, before)"),
    clock_freq_ppb = ProtoField.double("nettrace.clock.freq_ppb", "Frequency correction (ppb)"),
    clock_delay_ns = ProtoField.uint64("nettrace.clock.delay_ns", "Sample delay ns"),
    clock_uncertainty_ns = ProtoField.uint64("nettrace.clock.uncertainty_ns", "Sample uncertainty ns"),
    clock_error_estimate_ns = ProtoField.uint64("nettrace.clock.error_estimate_ns", "Error estimate ns"),
    clock_ev_source = ProtoField.uint8("nettrace.clock.source", "Source", base.DEC, CLOCK_SOURCE_NAMES),
    clock_ev_state = ProtoField.uint8("nettrace.clock.state", "Servo state", base.DEC, CLOCK_STATE_NAMES),
    -- generated: what a reader adds to mono_ns to get the reference time
    clock_ref_minus_mono = ProtoField.int64("nettrace.clock.ref_minus_mono_ns", "ref_ns - mono_ns"),
    -- skb drop body (DropEvent)
    drop_mono_ns = ProtoField.uint64("nettrace.drop.mono_ns", "Monotonic ns (raw kernel stamp)"),
    drop_global_ns = ProtoField.uint64("nettrace.drop.global_ns", "Global ns"),
    drop_global_time = ProtoField.absolute_time("nettrace.drop.global_time", "Global time", base.UTC),
    drop_location = ProtoField.uint64("nettrace.drop.location_addr", "Location address", base.HEX),
    drop_reason_code = ProtoField.uint32("nettrace.drop.reason_code", "Drop reason number (sender's kernel)"),
    drop_netns = ProtoField.uint32("nettrace.drop.netns", "Network namespace inode"),
    drop_ifindex = ProtoField.uint32("nettrace.drop.ifindex", "Interface index"),
    drop_cpu = ProtoField.uint32("nettrace.drop.cpu", "CPU"),
    drop_len = ProtoField.uint32("nettrace.drop.len", "skb length"),
    drop_protocol = ProtoField.uint16("nettrace.drop.protocol", "skb protocol (EtherType)", base.HEX),
    drop_family = ProtoField.uint8("nettrace.drop.family", "Family", base.DEC, FLOW_FAMILY_NAMES),
    drop_l4proto = ProtoField.uint8("nettrace.drop.l4proto", "IP protocol", base.DEC, L4PROTO_NAMES),
    drop_sport = ProtoField.uint16("nettrace.drop.sport", "Source port"),
    drop_dport = ProtoField.uint16("nettrace.drop.dport", "Destination port"),
    drop_saddr = ProtoField.ipv4("nettrace.drop.saddr", "Source address"),
    drop_daddr = ProtoField.ipv4("nettrace.drop.daddr", "Destination address"),
    drop_saddr6 = ProtoField.ipv6("nettrace.drop.saddr6", "Source address"),
    drop_daddr6 = ProtoField.ipv6("nettrace.drop.daddr6", "Destination address"),
    drop_reason = ProtoField.string("nettrace.drop.reason", "Drop reason"),
    drop_location_sym = ProtoField.string("nettrace.drop.location", "Location"),
    -- TCP anomaly body (TcpEvent)
    tcp_mono_ns = ProtoField.uint64("nettrace.tcp.mono_ns", "Monotonic ns (raw kernel stamp)"),
    tcp_global_ns = ProtoField.uint64("nettrace.tcp.global_ns", "Global ns"),
    tcp_global_time = ProtoField.absolute_time("nettrace.tcp.global_time", "Global time", base.UTC),
    tcp_cookie = ProtoField.uint64("nettrace.tcp.cookie", "Socket cookie"),
    tcp_seq = ProtoField.uint32("nettrace.tcp.seq", "Sequence (first byte)"),
    tcp_end_seq = ProtoField.uint32("nettrace.tcp.end_seq", "Sequence after the last byte"),
    tcp_len = ProtoField.uint32("nettrace.tcp.len", "Retransmitted bytes"),
    tcp_netns = ProtoField.uint32("nettrace.tcp.netns", "Network namespace inode"),
    tcp_cpu = ProtoField.uint32("nettrace.tcp.cpu", "CPU"),
    tcp_detail = ProtoField.uint32("nettrace.tcp.detail", "Detail"),
    tcp_anomaly = ProtoField.uint8("nettrace.tcp.anomaly", "Anomaly", base.DEC, TCP_ANOMALY_NAMES),
    tcp_family = ProtoField.uint8("nettrace.tcp.family", "Family", base.DEC, FLOW_FAMILY_NAMES),
    tcp_state = ProtoField.uint8("nettrace.tcp.state", "TCP state", base.DEC, TCP_STATE_NAMES),
    tcp_sport = ProtoField.uint16("nettrace.tcp.sport", "Local port"),
    tcp_dport = ProtoField.uint16("nettrace.tcp.dport", "Remote port"),
    tcp_saddr = ProtoField.ipv4("nettrace.tcp.saddr", "Local address"),
    tcp_daddr = ProtoField.ipv4("nettrace.tcp.daddr", "Remote address"),
    tcp_saddr6 = ProtoField.ipv6("nettrace.tcp.saddr6", "Local address"),
    tcp_daddr6 = ProtoField.ipv6("nettrace.tcp.daddr6", "Remote address"),

    -- CPU cost of the network stack (kind CPU, CpuEvent): under nettrace.cpu.
    -- (nettrace.cpu alone is the CPU field of TX events.)
    cpu_cpu = ProtoField.uint32("nettrace.cpu.cpu", "CPU"),
    cpu_mono_ns = ProtoField.uint64("nettrace.cpu.mono_ns", "Monotonic ns (when the agent read the counters)"),
    cpu_global_ns = ProtoField.uint64("nettrace.cpu.global_ns", "Global ns"),
    cpu_global_time = ProtoField.absolute_time("nettrace.cpu.global_time", "Global time", base.UTC),
    cpu_interval_ns = ProtoField.uint64("nettrace.cpu.interval_ns", "Interval ns (since this CPU's previous read)"),
    cpu_net_rx_ns = ProtoField.uint64("nettrace.cpu.net_rx_ns", "NET_RX softirq ns"),
    cpu_net_tx_ns = ProtoField.uint64("nettrace.cpu.net_tx_ns", "NET_TX softirq ns"),
    cpu_sock_send_ns = ProtoField.uint64("nettrace.cpu.sock_send_ns", "Socket send ns"),
    cpu_sock_recv_ns = ProtoField.uint64("nettrace.cpu.sock_recv_ns", "Socket receive ns"),
    -- generated: each category as a percentage of the interval (absent
    -- for an empty interval)
    cpu_net_rx_pct = ProtoField.double("nettrace.cpu.net_rx_pct", "NET_RX softirq, % of the interval"),
    cpu_net_tx_pct = ProtoField.double("nettrace.cpu.net_tx_pct", "NET_TX softirq, % of the interval"),
    cpu_sock_send_pct = ProtoField.double("nettrace.cpu.sock_send_pct", "Socket send, % of the interval"),
    cpu_sock_recv_pct = ProtoField.double("nettrace.cpu.sock_recv_pct", "Socket receive, % of the interval"),

    -- RX stage events (kind RX): every field under nettrace.rx.
    rx_mono_ns = ProtoField.uint64("nettrace.rx.mono_ns", "Monotonic ns (raw kernel stamp)"),
    rx_global_ns = ProtoField.uint64("nettrace.rx.global_ns", "Global ns"),
    rx_global_time = ProtoField.absolute_time("nettrace.rx.global_time", "Global time", base.UTC),
    rx_stamp_ns = ProtoField.uint64("nettrace.rx.rx_stamp_ns", "skb RX stamp ns (CLOCK_REALTIME)"),
    rx_stamp_global_ns = ProtoField.uint64("nettrace.rx.rx_stamp_global_ns", "skb RX stamp, global ns"),
    rx_stamp_time = ProtoField.absolute_time("nettrace.rx.rx_stamp_time", "skb RX stamp, global time", base.UTC),
    rx_hw_ns = ProtoField.uint64("nettrace.rx.hw_ns", "Hardware RX stamp ns"),
    rx_cookie = ProtoField.uint64("nettrace.rx.cookie", "Socket cookie"),
    rx_seq = ProtoField.uint32("nettrace.rx.seq", "TCP sequence (first byte)"),
    rx_end_seq = ProtoField.uint32("nettrace.rx.end_seq", "TCP sequence after the last byte"),
    rx_len = ProtoField.uint32("nettrace.rx.len", "Length"),
    rx_netns = ProtoField.uint32("nettrace.rx.netns", "Network namespace inode"),
    rx_ifindex = ProtoField.uint32("nettrace.rx.ifindex", "Interface index"),
    rx_cpu = ProtoField.uint32("nettrace.rx.cpu", "CPU"),
    rx_pid = ProtoField.uint32("nettrace.rx.pid", "Reader PID (tgid)"),
    rx_tid = ProtoField.uint32("nettrace.rx.tid", "Reader thread id"),
    rx_stage = ProtoField.uint8("nettrace.rx.stage", "RX stage", base.DEC, RX_STAGE_NAMES),
    rx_family = ProtoField.uint8("nettrace.rx.family", "Family", base.DEC, FAMILY_NAMES),
    rx_protocol = ProtoField.uint8("nettrace.rx.protocol", "IP protocol", base.DEC, { [6] = "TCP", [17] = "UDP" }),
    rx_tstamp_type = ProtoField.uint8("nettrace.rx.tstamp_type", "RX stamp clock", base.DEC,
        { [0] = "REALTIME", [1] = "MONOTONIC", [2] = "TAI" }),
    rx_sport = ProtoField.uint16("nettrace.rx.sport", "Sender port"),
    rx_dport = ProtoField.uint16("nettrace.rx.dport", "Receiver port"),
    rx_saddr = ProtoField.ipv4("nettrace.rx.saddr", "Sender address"),
    rx_daddr = ProtoField.ipv4("nettrace.rx.daddr", "Receiver address"),
    rx_saddr6 = ProtoField.ipv6("nettrace.rx.saddr6", "Sender address"),
    rx_daddr6 = ProtoField.ipv6("nettrace.rx.daddr6", "Receiver address"),
    rx_comm = ProtoField.string("nettrace.rx.comm", "Reader command"),
    -- generated: global_ns - rx_stamp_global_ns (netstacklat's measure)
    rx_since_stamp = ProtoField.int64("nettrace.rx.since_rx_stamp_ns", "Since the skb's RX stamp (ns)"),
    -- generated: the links between the RX frames of one TCP skb, and its
    -- stage latencies (see "RX stage links" below)
    rx_first_frame = ProtoField.framenum("nettrace.rx.first_frame", "First stage of this skb in frame"),
    rx_prev_frame = ProtoField.framenum("nettrace.rx.prev_frame", "Previous stage of this skb in frame"),
    rx_lat_prev = ProtoField.int64("nettrace.rx.lat.prev_ns", "Since the previous stage of this skb (ns)"),
    rx_lat_tcp_input = ProtoField.int64("nettrace.rx.lat.tcp_input_ns", "TCP_INPUT - STACK_ENTRY (ns)"),
    rx_lat_data_ready = ProtoField.int64("nettrace.rx.lat.data_ready_ns", "DATA_READY - STACK_ENTRY (ns)"),
    rx_lat_copy = ProtoField.int64("nettrace.rx.lat.copy_ns", "COPY - STACK_ENTRY (ns)"),
    rx_lat_read_done = ProtoField.int64("nettrace.rx.lat.read_done_ns", "READ_DONE - STACK_ENTRY (ns)"),
    rx_skb_seq = ProtoField.uint32("nettrace.rx.skb_seq", "Linked skb: first sequence"),
    rx_skb_end_seq = ProtoField.uint32("nettrace.rx.skb_end_seq", "Linked skb: sequence after the last byte"),
    rx_skb_count = ProtoField.uint32("nettrace.rx.skb_count", "Skbs whose stage this event is"),

    -- generated: cross-host peer links between a sender's SND_SW (or
    -- SND_HW) frame and the receiver's STACK_ENTRY frame of the same bytes
    -- (see "Cross-host peer links" below)
    peer_frame = ProtoField.framenum("nettrace.peer_frame", "Peer frame (other end of these bytes)"),
    oneway_ns = ProtoField.int64("nettrace.oneway_ns", "One-way latency: receiver STACK_ENTRY - sender SND_SW (ns)"),
    causality_violation = ProtoField.bool("nettrace.causality_violation",
        "Causality violation (received before sent: the hosts' clocks disagree)"),
    peer_count = ProtoField.uint32("nettrace.peer_count", "Sends paired with this reception"),
    peer_tskey = ProtoField.uint32("nettrace.peer_tskey", "Sender's skb: tskey"),
    peer_sends = ProtoField.uint32("nettrace.peer_sends",
        "Recorded sends of the send's last byte (within the peer window)"),
    peer_receptions = ProtoField.uint32("nettrace.peer_receptions",
        "Receptions of the send's last byte (within the peer window)"),
    peer_ambiguous = ProtoField.string("nettrace.peer_ambiguous",
        "Ambiguous send: receptions of its last byte do not match its recorded sends one for one"),
    peer_unexamined = ProtoField.uint32("nettrace.peer_unexamined",
        "Last bytes of sends in this reception left unexamined (the frame's work limit; counted up to 256)"),
}
local field_list = {}
for _, f in pairs(F) do
    field_list[#field_list + 1] = f
end
proto.fields = field_list

-- Everything malformed is PI_MALFORMED/PI_ERROR, one expert per reason so
-- "Expert Information" groups them usefully.
local function malformed(abbr, text)
    return ProtoExpert.new("nettrace." .. abbr, text, expert.group.MALFORMED, expert.severity.ERROR)
end
local E = {
    too_short = malformed("too_short", "Too short for the header"),
    bad_magic = malformed("bad_magic", "Bad magic: not a nettrace datagram"),
    bad_version = malformed("bad_version", "Unsupported version"),
    bad_header_len = malformed("bad_header_len", "Header length out of range"),
    bad_flags = malformed("bad_flags", "Unknown header flags"),
    bad_hostname = malformed("bad_hostname", "Bad host name"),
    truncated = malformed("truncated_record", "Record runs past the end"),
    count_mismatch = malformed("event_count_mismatch", "Record count differs from the header"),
    body_too_short = malformed("body_too_short", "Body shorter than the version-1 layout"),
    bad_stage = malformed("bad_stage", "Unknown TX stage"),
    bad_rx_stage = malformed("bad_rx_stage", "Unknown RX stage"),
    bad_family = malformed("bad_family", "Address family is neither 4 nor 6"),
    bad_clock_source = malformed("bad_clock_source", "Unknown clock source"),
    bad_clock_state = malformed("bad_clock_state", "Unknown clock servo state"),
    bad_flow_family = malformed("bad_flow_family", "Flow family is neither 0, 4 nor 6"),
    -- A drop is what a reader looks for, not a fault of the trace: a
    -- warning (PI_SEQUENCE, as Wireshark's TCP dissector files lost
    -- segments), never an error.
    drop = ProtoExpert.new("nettrace.drop.expert", "skb dropped by the kernel",
        expert.group.SEQUENCE, expert.severity.WARN),
    bad_tcp_anomaly = malformed("bad_tcp_anomaly", "Unknown TCP anomaly"),
    -- As Wireshark's TCP analysis files them: a retransmission is a note,
    -- a reset or a full receive buffer a warning (never an error).
    tcp_retransmit = ProtoExpert.new("nettrace.tcp.retransmit", "TCP retransmission",
        expert.group.SEQUENCE, expert.severity.NOTE),
    tcp_reset = ProtoExpert.new("nettrace.tcp.reset", "TCP connection reset",
        expert.group.SEQUENCE, expert.severity.WARN),
    tcp_memory = ProtoExpert.new("nettrace.tcp.memory", "Socket receive queue or memory limit hit",
        expert.group.SEQUENCE, expert.severity.WARN),
    -- A receive before its send on the global axis: no packet does that,
    -- so the two hosts' clocks disagree by at least that much. A warning in
    -- the sequence group (where TCP files its analysis), not an error: the
    -- trace is intact, its time axis is not trustworthy there.
    causality = ProtoExpert.new("nettrace.causality_violation.expert",
        "Causality violation: received before sent (the hosts' clocks disagree)",
        expert.group.SEQUENCE, expert.severity.WARN),
    -- A byte sent more than once: its sends and its receptions are paired
    -- in order (first with first), so say so.
    peer_resent = ProtoExpert.new("nettrace.peer_sends.expert",
        "Last byte sent more than once: its k-th send pairs with its k-th reception",
        expert.group.SEQUENCE, expert.severity.NOTE),
    -- Copies of a byte received, but not one per recorded send: which is
    -- whose cannot be told, so no link is made. A note: the trace is
    -- intact, TCP just sent a copy untagged or lost one.
    peer_ambiguous = ProtoExpert.new("nettrace.peer_ambiguous.expert",
        "Ambiguous send: not linked (receptions of its last byte do not match its sends one for one)",
        expert.group.SEQUENCE, expert.severity.NOTE),
    -- A reception holding the last bytes of more sends than one frame may
    -- look at (a crafted trace, or a pathological one): those left are not
    -- listed here, and their own frames still show their links.
    peer_unexamined = ProtoExpert.new("nettrace.peer_unexamined.expert",
        "More sends hold bytes of this reception than one frame examines: the rest are not listed",
        expert.group.SEQUENCE, expert.severity.NOTE),
    unknown_kind = ProtoExpert.new("nettrace.unknown_kind", "Unknown event kind (skipped by length)",
        expert.group.UNDECODED, expert.severity.NOTE),
    -- The agent's servo flagged its reference (it moved further or faster
    -- than the clock can explain: forged or broken) and did not follow it.
    -- A warning: the trace is intact, its time axis is in doubt by the
    -- clock event's error estimate.
    clock_holdover = ProtoExpert.new("nettrace.clock.holdover.expert",
        "Clock in HOLDOVER: the reference moved beyond what the clock can explain, not followed",
        expert.group.SEQUENCE, expert.severity.WARN),
}
local expert_list = {}
for _, e in pairs(E) do
    expert_list[#expert_list + 1] = e
end
proto.experts = expert_list

proto.prefs.udp_port = Pref.uint("UDP port", DEFAULT_UDP_PORT, "UDP port of agent -> sink datagrams")
proto.prefs.peer_links = Pref.bool("Link sends to receptions across hosts", true,
    "Link each sender's SND_SW (or SND_HW) frame to the receiver's STACK_ENTRY frame of the same "
    .. "TCP bytes (nettrace.peer_frame), with the one-way latency (nettrace.oneway_ns) and causality "
    .. "violations; needs two passes (tshark -2) to show links to later frames")
proto.prefs.peer_window_ms = Pref.uint("Peer matching window (ms)", 250,
    "A send and a reception of its last byte are paired only within this much of each other on the "
    .. "global time axis, as nettrace-match --window (default 250 ms): more than the longest one-way "
    .. "delay plus the largest clock disagreement")
proto.prefs.ip_stats = Pref.bool("Show flows in IP statistics", true,
    "Hand each event's flow, as a synthesized IPv4/IPv6 header (no such packet was captured), to "
    .. "Wireshark's IP dissector, so that Statistics > Conversations / Endpoints (IPv4, IPv6), "
    .. "ip.addr filters and Colorize Conversation work on a trace file")

------------------------------------------------------------------------------
-- Stage latencies.
--
-- seen[key][stage] = { ns = UInt64 global_ns, frame = frame number,
-- lat = the stage's own latency or nil } holds the latest event of each
-- stage of one skb, key = agent:cookie:tskey. It is filled only on the
-- first pass (pinfo.visited == false), in frame order; the latencies of
-- each event are stored in memo[frame][index] so a later re-dissection (GUI
-- click, tshark -2) shows the same values instead of recomputing against a
-- table that already holds later frames.
------------------------------------------------------------------------------
local seen = {}
local memo = {}

local function reset_state()
    seen = {}
    memo = {}
end

-- later - earlier as a signed Int64 without going through doubles.
local function signed_diff(later, earlier)
    if later >= earlier then
        return Int64.new(later - earlier)
    end
    return -Int64.new(earlier - later)
end

-- Which latency field each stage fills, and from which earlier stages
-- (the first one seen wins).
local LAT_RULES = {
    [STAGE.SCHED] = { field = "lat_sched", from = { STAGE.SENDMSG } },
    [STAGE.SND_SW] = { field = "lat_snd_sw", from = { STAGE.SCHED } },
    [STAGE.SND_HW] = { field = "lat_snd_hw", from = { STAGE.SCHED } },
    [STAGE.ACK] = { field = "lat_ack", from = { STAGE.SND_SW, STAGE.SND_HW, STAGE.SCHED } },
}
local LAT_STAGES = { STAGE.SCHED, STAGE.SND_SW, STAGE.SND_HW, STAGE.ACK }

-- The stage's own latency { field, value = Int64, ref = frame } or nil.
local function own_latency(stages, stage, ns)
    local rule = LAT_RULES[stage]
    if rule == nil then
        return nil
    end
    for _, from in ipairs(rule.from) do
        local prev = stages[from]
        if prev ~= nil then
            return { field = rule.field, value = signed_diff(ns, prev.ns), ref = prev.frame }
        end
    end
    return nil
end

-- Latencies of one event; records it in `seen`. Returns
-- { own = own latency or nil, stages = { latency, ... } (own and those of
-- the skb's earlier stages, in path order, so that an ACK frame carries the
-- whole breakdown and `stage == SND_SW && lat.sched_ns > N` works),
-- total = Int64 or nil }.
local function compute_latency(key, stage, ns, frame)
    local stages = seen[key]
    if stages == nil then
        stages = {}
        seen[key] = stages
    end
    local own = own_latency(stages, stage, ns)
    local first = stages[STAGE.SENDMSG]
    stages[stage] = { ns = ns, frame = frame, lat = own }

    local lat = { own = own, stages = {} }
    for _, s in ipairs(LAT_STAGES) do
        if stages[s] ~= nil and stages[s].lat ~= nil then
            lat.stages[#lat.stages + 1] = stages[s].lat
        end
    end
    if stage ~= STAGE.SENDMSG and first ~= nil then
        lat.total = signed_diff(ns, first.ns)
    end
    return lat
end

-- Latencies of event `index` of this frame: computed on the first pass,
-- looked up afterwards.
local function event_latency(pinfo, index, key, stage, ns)
    local per_frame = memo[pinfo.number]
    if not pinfo.visited then
        if per_frame == nil then
            per_frame = {}
            memo[pinfo.number] = per_frame
        end
        per_frame[index] = compute_latency(key, stage, ns, pinfo.number)
    end
    return per_frame and per_frame[index] or { stages = {} }
end

------------------------------------------------------------------------------
-- RX stage links (TCP only).
--
-- The RX frames of one received TCP skb are linked, like the TX stages of
-- one tskey, in frame order on the first pass and memoized per frame (as
-- above). An skb is named by (agent, flow, seq..end_seq): the flow as the
-- packet went, so the receiver's socket stages, which show the socket's
-- view in the same direction, name the same flow.
--   * STACK_ENTRY starts an skb.
--   * TCP_INPUT carries the same seq..end_seq: it joins the latest skb of
--     that range that has no TCP_INPUT yet; without one (STACK_ENTRY not
--     recorded) it starts the skb itself.
--   * DATA_READY (end_seq = rcv_nxt), COPY (the range of the receive-queue
--     skb, which contains the skb's range) and READ_DONE (end_seq =
--     copied_seq): the stage of every skb of the flow that carries data,
--     lacks that stage, and whose end_seq the event's end_seq reaches (mod
--     2^32) -- i.e. the first event of that stage covering the skb's last
--     byte. One such event may be the stage of several skbs (a read of many
--     segments); its frame shows the oldest of them (the one that waited
--     longest) and how many there are; the others still link to it.
-- Latencies are of global_ns: from the skb's STACK_ENTRY (per stage:
-- nettrace.rx.lat.<stage>_ns, the earlier stages' values repeated as on
-- TX) and from its previous recorded stage (nettrace.rx.lat.prev_ns).
------------------------------------------------------------------------------
local RX_STAGE = {}
for v, name in pairs(RX_STAGE_NAMES) do
    RX_STAGE[name] = v
end
-- Stage numbers run in path order; these are the socket stages matched by
-- end_seq, and the field of each stage's latency from STACK_ENTRY.
local RX_SOCKET_STAGES = { RX_STAGE.DATA_READY, RX_STAGE.COPY, RX_STAGE.READ_DONE }
local RX_LAT_FIELDS = {
    [RX_STAGE.TCP_INPUT] = "rx_lat_tcp_input",
    [RX_STAGE.DATA_READY] = "rx_lat_data_ready",
    [RX_STAGE.COPY] = "rx_lat_copy",
    [RX_STAGE.READ_DONE] = "rx_lat_read_done",
}
local RX_PROTO_TCP = 6
-- Skbs of one flow still waiting for a socket stage: bounded, so that a
-- stage never recorded (a filtered or lost event) costs no more than this;
-- past it the one that ends first (the oldest, in order) is given up.
local RX_MAX_PENDING = 4096
local SEQ_SPACE, SEQ_HALF = 4294967296, 2147483648

local rx_by_range = {} -- "agent|flow|seq|end_seq" -> latest skb of that range
-- "agent|flow" -> { stage -> heap of the skbs lacking it, by end_seq
-- unwrapped (then frame); ref_s, ref_x: the flow's unwrapping }. A heap
-- keeps every event's cost logarithmic however the ranges come (a
-- crafted trace can send them in any order).
local rx_pending = {}
local rx_memo = {} -- frame -> index -> link or false (see rx_event_link)

local function reset_rx_state()
    rx_by_range, rx_pending, rx_memo = {}, {}, {}
end

-- A binary min-heap of skbs ordered by (x = unwrapped end_seq, first).
local function skb_before(a, b)
    return a.x < b.x or (a.x == b.x and a.first < b.first)
end

local function heap_push(h, v)
    local i = #h + 1
    h[i] = v
    while i > 1 do
        local up = math.floor(i / 2)
        if not skb_before(h[i], h[up]) then
            break
        end
        h[i], h[up] = h[up], h[i]
        i = up
    end
end

local function heap_pop(h)
    local top, n = h[1], #h
    -- Two statements: with n == 1 a multiple assignment to h[1] and h[n]
    -- would leave the order of its stores to Lua.
    h[1] = h[n]
    h[n] = nil
    n = n - 1
    local i = 1
    while true do
        local l, small = 2 * i, i
        if l <= n and skb_before(h[l], h[small]) then
            small = l
        end
        if l + 1 <= n and skb_before(h[l + 1], h[small]) then
            small = l + 1
        end
        if small == i then
            return top
        end
        h[i], h[small] = h[small], h[i]
        i = small
    end
end

local function by_first(a, b) return a.first < b.first end

-- Sequence number `s` on the number line kept in `st` (fields ref_s,
-- ref_x): the nearest (within 2^31) to the previous one seen, in either
-- direction; the first one is `base`. Doubles hold them exactly.
local function seq_unwrap(st, s, base)
    local x
    if st.ref_s == nil then
        x = base
    else
        local d = (s - st.ref_s) % SEQ_SPACE
        if d >= SEQ_HALF then
            d = d - SEQ_SPACE
        end
        x = st.ref_x + d
    end
    st.ref_s, st.ref_x = s, x
    return x
end

local function rx_new_skb(flow, seq, end_seq, stage, ns, frame)
    local skb = { seq = seq, end_seq = end_seq, first = frame, at = { [stage] = { ns = ns, frame = frame } } }
    rx_by_range[flow .. "|" .. seq .. "|" .. end_seq] = skb
    if end_seq ~= seq then
        local pending = rx_pending[flow]
        if pending == nil then
            pending = {}
            for _, s in ipairs(RX_SOCKET_STAGES) do
                pending[s] = {}
            end
            rx_pending[flow] = pending
        end
        skb.x = seq_unwrap(pending, end_seq, SEQ_SPACE)
        for _, s in ipairs(RX_SOCKET_STAGES) do
            local heap = pending[s]
            heap_push(heap, skb)
            if #heap > RX_MAX_PENDING then
                heap_pop(heap)
            end
        end
    end
    return skb
end

-- The skbs whose `stage` this event is (oldest first), taken off the
-- heap: those whose end_seq the event's end_seq reaches.
local function rx_take_reached(flow, stage, end_seq)
    local pending = rx_pending[flow]
    if pending == nil then
        return {}
    end
    local heap, reached = pending[stage], {}
    local x = seq_unwrap(pending, end_seq, SEQ_SPACE)
    while heap[1] ~= nil and heap[1].x <= x do
        local skb = heap_pop(heap)
        if skb.at[stage] == nil then
            reached[#reached + 1] = skb
        end
    end
    table.sort(reached, by_first)
    return reached
end

-- The link shown on a frame of `skb` at `stage`: what it knew then.
local function rx_link_of(skb, stage, ns, count)
    local link = { first = skb.first, seq = skb.seq, end_seq = skb.end_seq, count = count, stages = {} }
    for s = stage - 1, 0, -1 do
        local at = skb.at[s]
        if at ~= nil then
            link.prev, link.prev_ns, link.prev_stage = at.frame, signed_diff(ns, at.ns), s
            break
        end
    end
    local entry = skb.at[RX_STAGE.STACK_ENTRY]
    if entry ~= nil then
        for s = RX_STAGE.TCP_INPUT, stage do
            local at = s == stage and { ns = ns } or skb.at[s]
            if at ~= nil then
                link.stages[#link.stages + 1] = { field = RX_LAT_FIELDS[s], value = signed_diff(at.ns, entry.ns),
                    own = s == stage }
            end
        end
    end
    return link
end

-- Links one TCP RX event into its skb(s); returns its link or nil.
local function rx_compute_link(flow, stage, seq, end_seq, ns, frame)
    if stage == RX_STAGE.STACK_ENTRY then
        rx_new_skb(flow, seq, end_seq, stage, ns, frame)
        return nil
    elseif stage == RX_STAGE.TCP_INPUT then
        local skb = rx_by_range[flow .. "|" .. seq .. "|" .. end_seq]
        if skb == nil or skb.at[stage] ~= nil then
            rx_new_skb(flow, seq, end_seq, stage, ns, frame)
            return nil
        end
        local link = rx_link_of(skb, stage, ns, 1)
        skb.at[stage] = { ns = ns, frame = frame }
        return link
    end
    local reached = rx_take_reached(flow, stage, end_seq)
    if #reached == 0 then
        return nil
    end
    local link = rx_link_of(reached[1], stage, ns, #reached)
    for _, skb in ipairs(reached) do
        skb.at[stage] = { ns = ns, frame = frame }
    end
    return link
end

-- The link of event `index` of this frame: computed on the first pass,
-- looked up afterwards.
local function rx_event_link(pinfo, index, flow, stage, seq, end_seq, ns)
    local per_frame = rx_memo[pinfo.number]
    if not pinfo.visited then
        if per_frame == nil then
            per_frame = {}
            rx_memo[pinfo.number] = per_frame
        end
        per_frame[index] = rx_compute_link(flow, stage, seq, end_seq, ns, pinfo.number) or false
    end
    return per_frame and per_frame[index] or nil
end

-- Link fields of one RX event, generated: they point at its global_ns.
local function add_rx_link(tree, range, link)
    tree:add(F.rx_first_frame, range, link.first):set_generated()
    if link.prev ~= nil then
        tree:add(F.rx_prev_frame, range, link.prev):set_generated()
        tree:add(F.rx_lat_prev, range, link.prev_ns):set_generated()
    end
    for _, l in ipairs(link.stages) do
        local item = tree:add(F[l.field], range, l.value)
        item:set_generated()
        if not l.own then
            item:append_text(" (earlier stage)")
        end
    end
    tree:add(F.rx_skb_seq, range, link.seq):set_generated()
    tree:add(F.rx_skb_end_seq, range, link.end_seq):set_generated()
    tree:add(F.rx_skb_count, range, link.count):set_generated()
end

------------------------------------------------------------------------------
-- Formatting helpers for the Info column and tree labels.
------------------------------------------------------------------------------
local function format_ns(ns)
    local v = ns:tonumber() -- display only; the field keeps the exact Int64
    local sign = v < 0 and "-" or "+"
    v = math.abs(v)
    if v < 1e3 then
        return string.format("%s%dns", sign, v)
    elseif v < 1e6 then
        return string.format("%s%.1fµs", sign, v / 1e3)
    elseif v < 1e9 then
        return string.format("%s%.1fms", sign, v / 1e6)
    end
    return string.format("%s%.3fs", sign, v / 1e9)
end

local function endpoint(addr, port, family)
    if family == 6 then
        return string.format("[%s]:%d", addr, port)
    end
    return string.format("%s:%d", addr, port)
end

------------------------------------------------------------------------------
-- Cross-host peer links (TCP only).
--
-- One rule with nettrace-match (tracer-match/src/matcher.rs; stated in
-- docs/reading-a-trace.md, "Across hosts", and docs/matching.md): pairs are
-- made by bytes, not by tags.
--   * A send is an SND_SW frame; SND_HW frames count only for a sender skb
--     (agent, cookie, tskey) with no SND_SW at all (an SND_HW callback runs
--     at TX completion, after the packet left). It carries the bytes
--     [seq, end_seq) its skb held at that callback (tx_flags RANGE), else
--     (a version-1 event) the tskey byte alone, and follows its LAST byte
--     b = end_seq - 1.
--   * A reception is an RX STACK_ENTRY frame of a TCP skb with data,
--     [seq, end_seq), on the same flow. Both hosts write the flow as the
--     data travelled (TX: local -> remote; RX: sender -> receiver), so the
--     key is the same 4-tuple on both sides (an IPv4-mapped IPv6 pair
--     counts as IPv4: a dual-stack sender socket, an IPv4 packet on the
--     wire).
--   * For a send T following b: SENDS = the sends of the flow whose range
--     holds b, RECV = the receptions of the flow holding b, both within
--     +-W of T's global time and ordered by (global_ns, frame). With as
--     many of each, T pairs with RECV[k], k its rank in SENDS: a path does
--     not reorder the copies of one byte, so no clock is needed. With
--     receptions but not as many, T is ambiguous, "unrecorded_send" (more
--     receptions: a copy went out untagged) or "lost_copy" (fewer: one was
--     lost before the stack), and no link is made. With none, T was not
--     received. W is the preference peer_window_ms (nettrace-match
--     --window, default 250 ms).
--   * A send links to its reception; a reception lists every send paired
--     with it (a GRO skb carries several).
-- oneway_ns = reception global_ns - send global_ns, signed; a negative one
-- is a causality violation, which under this rule means the clocks
-- disagree (never a wrong choice among copies).
--
-- The first pass (pinfo.visited false, frame order) only fills the index;
-- every dissection reads the links from it, so a re-dissection (tshark -2,
-- a click in the GUI after loading) sees links to later frames, and a
-- single pass shows what the frames so far give (a link only on the later
-- of its two frames). Per flow, sends are kept by last byte (a sorted
-- array of distinct bytes, each with its sends) and receptions by first
-- byte: gathering the copies of a byte is a binary search plus the items
-- within the flow's longest range, done once per byte and state of the
-- index and shared by the byte's sends; a send's pairing is then binary
-- searches by time. Both are cached until the index grows (on a second
-- pass: computed once).
------------------------------------------------------------------------------
-- Sequence numbers of one flow, on both hosts, are unwrapped into one
-- number line (doubles hold them exactly) starting here.
local PEER_SEQ_BASE = 2 ^ 40
-- A range longer than this is not indexed as one (a reception is skipped,
-- a send counts as its tskey byte): nettrace-match's MAX_SKB_SPAN, far
-- above any GRO/BIG TCP skb, and one bogus range would make every scan of
-- its flow long.
local PEER_MAX_SPAN = 4 * 1024 * 1024
-- Sends listed on one RX frame (all are counted in peer_count), and
-- ambiguous sends shown there.
local PEER_MAX_SHOWN = 64
-- The bounds that keep a crafted or pathological trace linear (every
-- frame costs at most a constant): index entries looked at to gather the
-- copies of one byte (sends ending within the flow's longest send after
-- it, receptions starting within its longest reception before it); a byte
-- with more is ambiguous, "too_many_copies", for good (the index only
-- grows). nettrace-match applies the same bound (MAX_COPY_SCAN). No real
-- trace comes near it: a 64 KB GRO skb over 1448-byte sends looks at ~90.
local PEER_MAX_EXAMINED = 512
-- Sends (or crowded bytes) an RX frame examines for its list: those past
-- it are counted (nettrace.peer_unexamined) and their own frames show
-- their links.
local PEER_RX_MAX_SENDS = 256
-- Index entries one frame may look at in all its gatherings (on the first
-- pass every new item makes the copies of the bytes it holds stale); past
-- it, the rest of an RX frame's list is left unexamined as above. A
-- frame's own send always fits (at most 2 x PEER_MAX_EXAMINED).
local PEER_FRAME_BUDGET = 4096
local peer_budget = PEER_FRAME_BUDGET
local V4_MAPPED = string.rep("\0", 10) .. "\255\255"

-- flow key -> { tx_keys, tx, tx_maxlen, rx, rx_maxlen, ref_s, ref_x }
local peer_flows = {}
local peer_memo = {} -- frame -> index -> { flow, tx = send or rx = reception }
local peer_skbs = {} -- "agent:cookie:tskey" -> { nsw = SND_SW frames }
-- Times are kept as exact doubles: ns since the first indexed event.
local peer_base = nil
-- Items indexed so far: the order of each item, and the version of the
-- index that cached pairings belong to.
local peer_gen = 0

local function reset_peer_state()
    peer_flows, peer_memo, peer_skbs, peer_base, peer_gen = {}, {}, {}, nil, 0
end

-- Inserts `v` into `list`, kept sorted by less(a, b), after its equals.
-- In-order items (the common case) are appended; a late one costs the
-- number of items it moves past.
local function sorted_insert(list, v, less)
    local i = #list + 1
    while i > 1 and less(v, list[i - 1]) do
        list[i] = list[i - 1]
        i = i - 1
    end
    list[i] = v
end

-- First index of sorted `list` whose key(item) >= x (or > x when
-- `strict`); #list + 1 when there is none.
local function bound(list, x, key, strict)
    local lo, hi = 1, #list + 1
    while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        local k = key(list[mid])
        if k < x or (strict and k == x) then
            lo = mid + 1
        else
            hi = mid
        end
    end
    return lo
end

-- A sorted sequence kept in blocks, each a sorted array of at most
-- 2 x SL_BLOCK items, every item of a block sorting before the next
-- block's: an insert anywhere costs a binary search and at most 2 x
-- SL_BLOCK moves (plus, once per SL_BLOCK inserts into one block, moving
-- the list of blocks), so items arriving in any order (a crafted trace)
-- cost about what in-order ones do. A position is (block, index).
local SL_BLOCK = 64

local function sl_new()
    return { {} }
end

local function sl_insert(q, v, less)
    -- The last block whose first item is not after v (only block 1 can
    -- be empty, and only while the sequence is).
    local lo, hi = 1, #q
    while lo < hi do
        local mid = math.floor((lo + hi + 1) / 2)
        if less(v, q[mid][1]) then
            hi = mid - 1
        else
            lo = mid
        end
    end
    local blk = q[lo]
    sorted_insert(blk, v, less)
    if #blk > 2 * SL_BLOCK then
        local rest, n = {}, #blk
        for i = SL_BLOCK + 1, n do
            rest[#rest + 1], blk[i] = blk[i], nil
        end
        table.insert(q, lo + 1, rest)
    end
end

-- The first position whose key(item) >= x (> x when `strict`); past the
-- end when there is none.
local function sl_seek(q, x, key, strict)
    local lo, hi = 1, #q + 1
    while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        local b = q[mid]
        local last = b[#b]
        local k = last ~= nil and key(last) or nil
        if k == nil or k < x or (strict and k == x) then
            lo = mid + 1
        else
            hi = mid
        end
    end
    if lo > #q then
        return #q + 1, 1
    end
    return lo, bound(q[lo], x, key, strict)
end

-- The item at a position, nil past either end.
local function sl_at(q, k, i)
    local b = q[k]
    return b and b[i]
end

local function sl_next(q, k, i)
    if i < #q[k] then
        return k, i + 1
    end
    return k + 1, 1
end

local function sl_prev(q, k, i)
    if i > 1 then
        return k, i - 1
    end
    if k <= 1 then
        return 0, 0
    end
    return k - 1, #q[k - 1]
end

-- The connection key of an event whose reader `b` has family, saddr,
-- daddr, sport and dport in the data's direction; nil without a family.
local function peer_flow_key(b)
    local family = b("family"):uint()
    local s, d = b("saddr"):raw(), b("daddr"):raw()
    if family == 4 then
        s, d = s:sub(1, 4), d:sub(1, 4)
    elseif family == 6 then
        if s:sub(1, 12) == V4_MAPPED and d:sub(1, 12) == V4_MAPPED then
            s, d = s:sub(13, 16), d:sub(13, 16)
        end
    else
        return nil
    end
    return s .. d .. b("sport"):le_uint() .. ":" .. b("dport"):le_uint()
end

local function peer_flow(key)
    local f = peer_flows[key]
    if f == nil then
        f = { tx_keys = sl_new(), tx = {}, tx_maxlen = 1, rx = sl_new(), rx_maxlen = 0 }
        peer_flows[key] = f
    end
    return f
end

-- Sequence number `s` of flow `f` on the flow's number line.
local function peer_unwrap(f, s)
    return seq_unwrap(f, s, PEER_SEQ_BASE)
end

-- Global time `ns` (UInt64) as an exact double: ns since the first event
-- indexed (exact while a trace spans less than 2^53 ns, 104 days).
local function peer_time(ns)
    if peer_base == nil then
        peer_base = ns
    end
    return signed_diff(ns, peer_base):tonumber()
end

-- The next item's order (and a new version of the index).
local function peer_next()
    peer_gen = peer_gen + 1
    return peer_gen
end

local function number_key(v) return v end
local function start_key(r) return r.s end
local function time_key(v) return v.t end
local function by_number(a, b) return a < b end
local function by_start(a, b) return a.s < b.s end
-- The order of copies of one byte: global time, then index order.
local function by_time(a, b) return a.t < b.t or (a.t == b.t and a.order < b.order) end

-- The peer window in ns (the preference).
local function peer_window_ns()
    return proto.prefs.peer_window_ms * 1e6
end

-- The sender skb an event belongs to (agent, cookie, tskey).
local function peer_skb(agent, cookie, tskey)
    local key = string.format("%s:%s:%d", tostring(agent), tostring(cookie), tskey)
    local skb = peer_skbs[key]
    if skb == nil then
        skb = { nsw = 0 }
        peer_skbs[key] = skb
    end
    return skb
end

-- Records a send of sender skb `skb` holding the unwrapped bytes
-- [s, s + len).
local function peer_add_tx(f, skb, sw, s, len, tskey, ns, frame)
    local b = s + len - 1
    local send = { s = s, b = b, tskey = tskey, skb = skb, sw = sw, ns = ns, t = peer_time(ns),
        frame = frame, order = peer_next() }
    if sw then
        skb.nsw = skb.nsw + 1
    end
    local at = f.tx[b]
    if at == nil then
        at = {}
        f.tx[b] = at
        sl_insert(f.tx_keys, b, by_number)
    end
    at[#at + 1] = send
    if len > f.tx_maxlen then
        f.tx_maxlen = len
    end
    return send
end

-- Records a reception (STACK_ENTRY of a data skb) seq..end_seq.
local function peer_add_rx(f, seq, end_seq, ns, frame)
    local len = (end_seq - seq) % SEQ_SPACE
    if len == 0 or len > PEER_MAX_SPAN then
        return nil
    end
    local s = peer_unwrap(f, seq)
    local r = { s = s, e = s + len, ns = ns, t = peer_time(ns), frame = frame, order = peer_next() }
    sl_insert(f.rx, r, by_start)
    if len > f.rx_maxlen then
        f.rx_maxlen = len
    end
    return r
end

-- Whether a send counts: an SND_SW, or an SND_HW of an skb without one.
local function peer_counts(send)
    return send.sw or send.skb.nsw == 0
end

-- The sends of flow `f` that count and hold byte x, by time; nil when
-- gathering them would look at more than PEER_MAX_EXAMINED entries.
local function peer_sends_holding(f, x)
    local out, keys, examined = {}, f.tx_keys, 0
    local k, i = sl_seek(keys, x, number_key)
    -- A send holding x ends at most its length past it.
    while true do
        local b = sl_at(keys, k, i)
        if b == nil or b >= x + f.tx_maxlen then
            break
        end
        local at = f.tx[b]
        examined = examined + #at
        peer_budget = peer_budget - #at
        if examined > PEER_MAX_EXAMINED then
            return nil
        end
        for _, s in ipairs(at) do
            if s.s <= x and peer_counts(s) then
                out[#out + 1] = s
            end
        end
        k, i = sl_next(keys, k, i)
    end
    table.sort(out, by_time)
    return out
end

-- The receptions of flow `f` holding byte x, by time; nil past
-- PEER_MAX_EXAMINED entries, as above.
local function peer_receptions_holding(f, x)
    local out, rx, examined = {}, f.rx, 0
    -- From the last one starting at or before x, back.
    local k, j = sl_prev(rx, sl_seek(rx, x, start_key, true))
    while true do
        local r = sl_at(rx, k, j)
        if r == nil or r.s + f.rx_maxlen <= x then
            break
        end
        examined = examined + 1
        peer_budget = peer_budget - 1
        if examined > PEER_MAX_EXAMINED then
            return nil
        end
        if r.e > x then
            out[#out + 1] = r
        end
        k, j = sl_prev(rx, k, j)
    end
    table.sort(out, by_time)
    return out
end

-- The copies of byte x, the last byte of the sends in `bucket` (f.tx[x]):
-- { sends, recvs }, each by time, or { overflow = true } past the bound;
-- nil when this frame's budget is spent. Cached on the bucket until the
-- index grows (an overflow for good), so the sends of one byte share one
-- scan.
local function peer_copies(f, x, bucket)
    local c = bucket.copies
    if c == nil or (c.gen ~= peer_gen and not c.overflow) then
        if peer_budget <= 0 then
            return nil
        end
        local sends = peer_sends_holding(f, x)
        local recvs = sends and peer_receptions_holding(f, x)
        if recvs == nil then
            c = { overflow = true }
        else
            c = { gen = peer_gen, sends = sends, recvs = recvs }
        end
        bucket.copies = c
    end
    return c
end

-- Index of `item` in `list`, which holds it and is sorted by_time.
local function peer_rank(list, item)
    local lo, hi = 1, #list
    while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if by_time(list[mid], item) then
            lo = mid + 1
        else
            hi = mid
        end
    end
    return lo
end

-- The pairing of `send` (of flow `f`): false when it does not count or
-- nothing received its last byte within the window, else { nsends, nrecv,
-- rx = its reception, or why = "unrecorded_send" / "lost_copy" }, or
-- { why = "too_many_copies" } past the gathering bound; nil when this
-- frame's budget is spent.
local function peer_pair(f, send)
    local w = peer_window_ns()
    if send.gen == peer_gen and send.w == w then
        return send.pair
    end
    local pair = false
    if peer_counts(send) then
        local c = peer_copies(f, send.b, f.tx[send.b])
        if c == nil then
            return nil
        elseif c.overflow then
            send.gen, send.w, send.pair = peer_gen, w, { why = "too_many_copies" }
            return send.pair
        end
        local lo, hi = send.t - w, send.t + w
        -- Those within [lo, hi]: a slice of each list.
        local r1 = bound(c.recvs, lo, time_key)
        local nrecv = bound(c.recvs, hi, time_key, true) - r1
        if nrecv > 0 then
            local s1 = bound(c.sends, lo, time_key)
            local nsends = bound(c.sends, hi, time_key, true) - s1
            pair = { nsends = nsends, nrecv = nrecv }
            if nsends == nrecv then
                -- The send's own place among them (it is one of them).
                local k = peer_rank(c.sends, send)
                pair.rx = c.recvs[r1 + (k - s1)]
            elseif nrecv > nsends then
                pair.why = "unrecorded_send"
            else
                pair.why = "lost_copy"
            end
        end
    end
    send.gen, send.w, send.pair = peer_gen, w, pair
    return pair
end

-- The sends paired with reception `r`, and the ambiguous sends whose last
-- byte it holds (within the window), each in sequence order:
-- { send, pair }; and how many distinct last bytes of sends it holds were
-- left unexamined (past PEER_RX_MAX_SENDS sends).
local function peer_of_rx(f, r)
    local linked, ambiguous = {}, {}
    local keys, w = f.tx_keys, peer_window_ns()
    -- From the first last byte of a send that r holds.
    local k, i = sl_seek(keys, r.s, number_key)
    local examined = 0
    while true do
        local b = sl_at(keys, k, i)
        if b == nil or b >= r.e then
            return linked, ambiguous, 0
        end
        local at = f.tx[b]
        local c = peer_copies(f, b, at)
        if c ~= nil and c.overflow then
            -- A crowded byte is one entry, whatever its number of sends.
            if examined + 1 > PEER_RX_MAX_SENDS then
                break
            end
            examined = examined + 1
            ambiguous[#ambiguous + 1] = { send = at[1], pair = { why = "too_many_copies" } }
        else
            if c == nil or examined + #at > PEER_RX_MAX_SENDS then
                break
            end
            examined = examined + #at
            for _, s in ipairs(at) do
                if math.abs(s.t - r.t) <= w then
                    local p = peer_pair(f, s)
                    if p and p.rx == r then
                        linked[#linked + 1] = { send = s, pair = p }
                    elseif p and p.why then
                        ambiguous[#ambiguous + 1] = { send = s, pair = p }
                    end
                end
            end
        end
        k, i = sl_next(keys, k, i)
    end
    -- Left unexamined: the last bytes from here, counted up to a bound.
    local left = 0
    while left < PEER_RX_MAX_SENDS do
        local b = sl_at(keys, k, i)
        if b == nil or b >= r.e then
            break
        end
        left = left + 1
        k, i = sl_next(keys, k, i)
    end
    return linked, ambiguous, left
end

-- The index entry of event `index` of this frame: made on the first pass
-- by `make()`, looked up afterwards; nil when the event takes no part.
local function peer_entry(pinfo, index, make)
    local per_frame = peer_memo[pinfo.number]
    if not pinfo.visited then
        if per_frame == nil then
            per_frame = {}
            peer_memo[pinfo.number] = per_frame
        end
        per_frame[index] = make() or false
    end
    return per_frame and per_frame[index] or nil
end

-- Violation fields of one link item: the flag and the expert warning.
local function add_violation(item, range, oneway, what)
    item:add(F.causality_violation, range, true):set_generated()
    item:add_proto_expert_info(E.causality, string.format(
        "Causality violation: %s %s before it was sent (the hosts' clocks disagree by at least that much)",
        what, format_ns(-oneway):sub(2)))
end

-- How many sends and receptions of a byte, for an expert message.
local function peer_copies_text(p)
    if p.why == "too_many_copies" then
        return string.format("more than %d recorded sends and receptions overlap its last byte",
            PEER_MAX_EXAMINED)
    end
    return string.format("%d recorded send%s and %d reception%s of its last byte within ±%d ms",
        p.nsends, p.nsends == 1 and "" or "s", p.nrecv, p.nrecv == 1 and "" or "s",
        proto.prefs.peer_window_ms)
end

-- The unwrapped bytes a send of this TX event stands for: its range at
-- the callback (version 2, RANGE), else its tskey byte. Returns start, length.
local function peer_tx_range(f, b, flags, tskey)
    if bit32.band(flags, LAYOUT.tx_flag_range) ~= 0 then
        local seq = b("seq"):le_uint()
        local len = (b("end_seq"):le_uint() - seq) % SEQ_SPACE
        if len > 0 and len <= PEER_MAX_SPAN then
            return peer_unwrap(f, seq), len
        end
    end
    return peer_unwrap(f, tskey), 1
end

-- Peer links of a TX frame (a send); returns the Info suffix or "".
-- `ctx` = { agent, index }; `flags` = tx_flags (0 for version 1).
local function peer_show_tx(tree, range, pinfo, ctx, b, stage, ns, flags)
    if not proto.prefs.peer_links or (stage ~= STAGE.SND_SW and stage ~= STAGE.SND_HW) then
        return ""
    end
    peer_budget = PEER_FRAME_BUDGET
    local entry = peer_entry(pinfo, ctx.index, function()
        local key = peer_flow_key(b)
        if key == nil then
            return nil
        end
        local f = peer_flow(key)
        local tskey = b("tskey"):le_uint()
        local s, len = peer_tx_range(f, b, flags, tskey)
        local skb = peer_skb(ctx.agent, b("cookie"):le_uint64(), tskey)
        return { flow = f, tx = peer_add_tx(f, skb, stage == STAGE.SND_SW, s, len, tskey, ns, pinfo.number) }
    end)
    if entry == nil then
        return ""
    end
    local p = peer_pair(entry.flow, entry.tx)
    if not p then
        return ""
    end
    if p.why ~= nil then
        local item = tree:add(F.peer_ambiguous, range, p.why)
        item:set_generated()
        item:add_proto_expert_info(E.peer_ambiguous, string.format(
            "Ambiguous send (%s): %s, so which is whose cannot be told: not linked", p.why, peer_copies_text(p)))
        if p.nsends ~= nil then
            tree:add(F.peer_sends, range, p.nsends):set_generated()
            tree:add(F.peer_receptions, range, p.nrecv):set_generated()
        end
        return " [ambiguous: " .. p.why .. "]"
    end
    local r = p.rx
    local oneway = signed_diff(r.ns, ns)
    local item = tree:add(F.peer_frame, range, r.frame)
    item:set_generated()
    item:append_text(" (received there; one-way " .. format_ns(oneway) .. ")")
    tree:add(F.oneway_ns, range, oneway):set_generated()
    if p.nsends > 1 then
        local resent = tree:add(F.peer_sends, range, p.nsends)
        resent:set_generated()
        resent:add_proto_expert_info(E.peer_resent)
        tree:add(F.peer_receptions, range, p.nrecv):set_generated()
    end
    local suffix = string.format(" ⇒ frame %d (one-way %s)", r.frame, format_ns(oneway))
    if r.ns < ns then
        add_violation(item, range, oneway, "received")
        suffix = suffix .. " [causality violation]"
    end
    return suffix
end

-- Ambiguous sends whose last byte reception frame holds: a field each
-- (the first PEER_MAX_SHOWN) and the Info suffix.
local function peer_show_ambiguous(tree, range, ambiguous)
    local reasons, seen_reason, shown, crowded = {}, {}, 0, nil
    for _, a in ipairs(ambiguous) do
        local why = a.pair.why
        -- Crowded bytes (a crafted trace) are one item, with their count.
        if why == "too_many_copies" and crowded ~= nil then
            crowded.n = crowded.n + 1
        elseif shown < PEER_MAX_SHOWN then
            shown = shown + 1
            local item = tree:add(F.peer_ambiguous, range, why)
            item:set_generated()
            item:append_text(string.format(" (send in frame %d, tskey %d)", a.send.frame, a.send.tskey))
            item:add_proto_expert_info(E.peer_ambiguous, string.format(
                "Holds the last byte of an ambiguous send (frame %d, %s): %s: not linked",
                a.send.frame, why, peer_copies_text(a.pair)))
            if why == "too_many_copies" then
                crowded = { item = item, n = 0 }
            end
        end
        if not seen_reason[why] then
            seen_reason[why] = true
            reasons[#reasons + 1] = why
        end
    end
    if crowded ~= nil and crowded.n > 0 then
        crowded.item:append_text(string.format(" and the last bytes of %d more sends as crowded", crowded.n))
    end
    return " [ambiguous: " .. table.concat(reasons, ",") .. "]"
end

-- Peer links of an RX STACK_ENTRY frame of a TCP skb; returns the Info
-- suffix or "".
local function peer_show_rx(tree, range, pinfo, index, b, seq, end_seq, ns)
    if not proto.prefs.peer_links then
        return ""
    end
    peer_budget = PEER_FRAME_BUDGET
    local entry = peer_entry(pinfo, index, function()
        local key = peer_flow_key(b)
        if key == nil then
            return nil
        end
        local f = peer_flow(key)
        local r = peer_add_rx(f, seq, end_seq, ns, pinfo.number)
        return r and { flow = f, rx = r } or nil
    end)
    if entry == nil then
        return ""
    end
    local peers, ambiguous, unexamined = peer_of_rx(entry.flow, entry.rx)
    local suffix = ""
    if #peers > 0 then
        local sub = tree:add(F.peer_count, range, #peers)
        sub:set_generated()
        local lo, hi, late = nil, nil, 0
        for i, p in ipairs(peers) do
            local send = p.send
            local oneway = signed_diff(ns, send.ns)
            if i <= PEER_MAX_SHOWN then
                local item = sub:add(F.peer_frame, range, send.frame)
                item:set_generated()
                item:append_text(string.format(" (sent there: tskey %d; one-way %s)", send.tskey,
                    format_ns(oneway)))
                item:add(F.peer_tskey, range, send.tskey):set_generated()
                item:add(F.oneway_ns, range, oneway):set_generated()
                if p.pair.nsends > 1 then
                    local resent = item:add(F.peer_sends, range, p.pair.nsends)
                    resent:set_generated()
                    resent:add_proto_expert_info(E.peer_resent)
                end
                if ns < send.ns then
                    add_violation(item, range, oneway, "received")
                end
            end
            if ns < send.ns then
                late = late + 1
            end
            lo = (lo == nil or oneway < lo) and oneway or lo
            hi = (hi == nil or oneway > hi) and oneway or hi
        end
        if #peers > PEER_MAX_SHOWN then
            sub:append_text(string.format(" (first %d listed)", PEER_MAX_SHOWN))
        end
        if #peers == 1 then
            suffix = string.format(" ⇐ frame %d (one-way %s)", peers[1].send.frame, format_ns(lo))
        else
            suffix = string.format(" ⇐ frames %d..%d (%d skbs, one-way %s..%s)", peers[1].send.frame,
                peers[#peers].send.frame, #peers, format_ns(lo), format_ns(hi))
        end
        if late > 0 then
            suffix = suffix .. " [causality violation]"
        end
    end
    if #ambiguous > 0 then
        suffix = suffix .. peer_show_ambiguous(tree, range, ambiguous)
    end
    if unexamined > 0 then
        local item = tree:add(F.peer_unexamined, range, unexamined)
        item:set_generated()
        item:add_proto_expert_info(E.peer_unexamined, string.format(
            "Sends ending at %s%d more of its bytes are not examined here (at most %d sends per frame): their own frames show their links",
            unexamined >= PEER_RX_MAX_SENDS and "at least " or "", unexamined, PEER_RX_MAX_SENDS))
        suffix = suffix .. string.format(" [%d more not examined]", unexamined)
    end
    return suffix
end

------------------------------------------------------------------------------
-- Packet-list columns of a pcapng frame (one event per frame).
--
-- An event with a flow gets Source/Destination as a TCP/IP dissector would
-- set them: pinfo.src/dst and net_src/net_dst as IPv4/IPv6 addresses (the
-- Source/Destination columns, colouring by address, the Flow Graph) and the
-- ports (pinfo.src_port/dst_port for the Flow Graph; the port columns as
-- text, since pinfo.port_type is read-only in Wireshark 4.0 and port
-- columns stay empty without it). With the preference ip_stats, the flow
-- also goes through the real IP dissector as a synthesized header: a Lua
-- dissector cannot feed the IP taps any other way, and those taps are what
-- Statistics > Conversations / Endpoints count. No TCP header is
-- synthesized: TCP's sequence analysis would flag every repeated stage of
-- one skb as a duplicate, so tcp.* filters and the TCP tabs stay empty.
-- Events without a flow (clock updates, CPU costs) show their host as Source.
--
-- Only for capture records: a live UDP datagram is a real packet whose
-- addresses are the agent's and the sink's, and it holds many events.
------------------------------------------------------------------------------
local ip_dissector = Dissector.get("ip")
local ipv6_dissector = Dissector.get("ipv6")

-- "No Next Header" (IANA 59), as IPv4 protocol and IPv6 next header: the
-- synthesized header carries nothing the IP dissector would hand on.
local IP_NO_NEXT_HEADER = 59

-- The IPv4 header checksum of `hdr` (a ByteArray whose checksum bytes are
-- 0): correct, so that enabling ip.check_checksum flags nothing.
local function ipv4_checksum(hdr)
    local sum = 0
    for i = 0, hdr:len() - 2, 2 do
        sum = sum + hdr:get_index(i) * 256 + hdr:get_index(i + 1)
    end
    -- Lua 5.2 has no bit operators: fold the carries arithmetically.
    while sum > 0xffff do
        sum = sum % 0x10000 + math.floor(sum / 0x10000)
    end
    return 0xffff - sum
end

-- A header-only IPv4 or IPv6 packet from `s` to `d` (address ranges of
-- 4 or 16 bytes), as a ByteArray.
local function synth_ip_header(family, s, d)
    local hdr
    if family == 4 then
        -- version 4, IHL 5, total length 20, DF, TTL 64, checksum 0 for now
        hdr = ByteArray.new(string.format("45 00 00 14 00 00 40 00 40 %02x 00 00", IP_NO_NEXT_HEADER))
        hdr:append(s:bytes())
        hdr:append(d:bytes())
        local sum = ipv4_checksum(hdr)
        hdr:set_index(10, math.floor(sum / 256))
        hdr:set_index(11, sum % 256)
    else
        -- version 6, payload length 0, hop limit 64
        hdr = ByteArray.new(string.format("60 00 00 00 00 00 %02x 40", IP_NO_NEXT_HEADER))
        hdr:append(s:bytes())
        hdr:append(d:bytes())
    end
    return hdr
end

-- Columns (and, by preference, IP statistics) from the flow of an event
-- whose field reader `b` has family, saddr, daddr (16-byte ranges), sport
-- and dport, given in the packet's direction: saddr:sport sent to
-- daddr:dport (TX: local -> remote; RX: the remote sender -> local). Every
-- event kind with a flow calls this once. Does nothing outside a capture
-- record (ctx.columns unset) or for a family other than 4 and 6.
local function flow_columns(pinfo, tree, ctx, b)
    if not ctx.columns then
        return
    end
    local family = b("family"):uint()
    local s, d, addr
    if family == 4 then
        s, d, addr = b("saddr")(0, 4), b("daddr")(0, 4), Address.ip
    elseif family == 6 then
        s, d, addr = b("saddr"), b("daddr"), Address.ipv6
    else
        return
    end
    ctx.has_flow = true
    if proto.prefs.ip_stats then
        local hdr = synth_ip_header(family, s, d)
        local sub = tree:add(proto, b("saddr"), "Flow as an IP header (synthesized for Statistics; not captured)")
        sub:set_generated()
        local dissector = family == 4 and ip_dissector or ipv6_dissector
        dissector:call(hdr:tvb("Flow (synthesized IP header)"), pinfo, sub)
    end
    local src = family == 4 and tostring(s:ipv4()) or tostring(s:ipv6())
    local dst = family == 4 and tostring(d:ipv4()) or tostring(d:ipv6())
    pinfo.src, pinfo.net_src = addr(src), addr(src)
    pinfo.dst, pinfo.net_dst = addr(dst), addr(dst)
    local sport, dport = b("sport"):le_uint(), b("dport"):le_uint()
    pinfo.src_port = sport
    pinfo.dst_port = dport
    pinfo.cols.src_port:set(tostring(sport))
    pinfo.cols.dst_port:set(tostring(dport))
end

-- Source column of a capture frame whose event has no flow: its host.
local function host_columns(pinfo, host)
    pinfo.cols.src:set(host)
end

------------------------------------------------------------------------------
-- Event records (kind u16 | len u16 | body), shared by both framings.
------------------------------------------------------------------------------

-- Address fields of one TX body (the 16-byte saddr and daddr ranges);
-- returns the text of saddr and daddr.
local function add_addresses(tree, s, d, family)
    if family == 4 then
        tree:add(F.saddr, s(0, 4))
        tree:add(F.daddr, d(0, 4))
        return tostring(s(0, 4):ipv4()), tostring(d(0, 4):ipv4())
    elseif family == 6 then
        tree:add(F.saddr6, s)
        tree:add(F.daddr6, d)
        return tostring(s:ipv6()), tostring(d:ipv6())
    end
    tree:add(F.saddr_raw, s)
    tree:add(F.daddr_raw, d)
    return "?", "?"
end

-- The task name: the bytes before the first NUL of a NUL-padded field.
local function add_comm(tree, range)
    local n = range:raw():find("\0", 1, true)
    n = n and n - 1 or range:len()
    if n == 0 then
        tree:add(F.comm, range, "")
    else
        tree:add_packet_field(F.comm, range(0, n), ENC_UTF_8)
    end
end

-- Latency fields of one event, generated (not in the bytes): they point at
-- the event's global_ns bytes. Latencies of earlier stages say which frame
-- they belong to.
local function add_latency(tree, range, lat)
    for _, l in ipairs(lat.stages) do
        local item = tree:add(F[l.field], range, l.value)
        item:set_generated()
        if l ~= lat.own then
            item:append_text(" (earlier stage)")
        end
    end
    if lat.own ~= nil then
        tree:add(F.lat_ref_frame, range, lat.own.ref):set_generated()
    end
    if lat.total ~= nil then
        tree:add(F.lat_total, range, lat.total):set_generated()
    end
end

-- Decode a TX body (at least TX.body_len bytes). `ctx` = { agent = UInt64,
-- index = event index in the frame }. Returns the one-line summary.
local function dissect_tx(body, pinfo, tree, ctx)
    local b = field_reader(body, TX.fields)
    local stage = b("stage"):uint()
    local family = b("family"):uint()
    local ok = true

    tree:add_le(F.mono_ns, b("mono_ns"))
    tree:add_le(F.global_ns, b("global_ns"))
    tree:add_packet_field(F.global_time, b("global_ns"), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    tree:add_le(F.hw_ns, b("hw_ns"))
    tree:add_le(F.cookie, b("cookie"))
    tree:add_le(F.tskey, b("tskey"))
    tree:add_le(F.seq, b("seq"))
    tree:add_le(F.netns, b("netns"))
    tree:add_le(F.cpu, b("cpu"))
    tree:add_le(F.pid, b("pid"))
    tree:add_le(F.tid, b("tid"))
    local stage_item = tree:add(F.stage, b("stage"))
    if STAGE_NAMES[stage] == nil then
        stage_item:add_proto_expert_info(E.bad_stage, "Unknown TX stage " .. stage)
        ok = false
    end
    local family_item = tree:add(F.family, b("family"))
    if FAMILY_NAMES[family] == nil then
        family_item:add_proto_expert_info(E.bad_family, "Bad address family " .. family)
        ok = false
    end
    tree:add_le(F.sport, b("sport"))
    tree:add_le(F.dport, b("dport"))
    local saddr, daddr = add_addresses(tree, b("saddr"), b("daddr"), family)
    flow_columns(pinfo, tree, ctx, b)
    add_comm(tree, b("comm"))
    -- Version 2: the bytes the skb held at this callback.
    local flags = 0
    if body:len() >= TX.body_len then
        flags = b("tx_flags"):uint()
        tree:add_le(F.end_seq, b("end_seq"))
        local fi = tree:add(F.tx_flags, b("tx_flags"))
        fi:add(F.tx_flag_range, b("tx_flags"))
        fi:add(F.tx_flag_sent, b("tx_flags"))
    end

    local tskey = b("tskey"):le_uint()
    local summary = string.format("%s %s → %s tskey=%d",
        STAGE_NAMES[stage] or ("stage " .. stage),
        endpoint(saddr, b("sport"):le_uint(), family),
        endpoint(daddr, b("dport"):le_uint(), family), tskey)
    if bit32.band(flags, LAYOUT.tx_flag_range) ~= 0 then
        summary = summary .. string.format(" bytes=%d..%d", b("seq"):le_uint(), b("end_seq"):le_uint())
    end
    if bit32.band(flags, LAYOUT.tx_flag_sent) ~= 0 then
        summary = summary .. " [tagged already sent]"
    end
    if not ok then
        return summary .. " [Malformed]"
    end

    -- Only well-formed events take part in latencies.
    local key = string.format("%s:%s:%d", tostring(ctx.agent), tostring(b("cookie"):le_uint64()), tskey)
    local lat = event_latency(pinfo, ctx.index, key, stage, b("global_ns"):le_uint64())
    add_latency(tree, b("global_ns"), lat)
    if lat.own ~= nil then
        summary = summary .. " " .. format_ns(lat.own.value)
    end
    return summary .. peer_show_tx(tree, b("global_ns"), pinfo, ctx, b, stage, b("global_ns"):le_uint64(),
        flags)
end

-- freq_ppb as the sink's summary prints it (Rust "{:+.1}").
local function format_ppb(v)
    if v ~= v then
        return "NaN"
    end
    return string.format("%+.1f", v)
end

-- Decode a clock update body (at least CLOCK.body_len bytes). Returns the
-- one-line summary, phc2sys style (the same text as the sink's pcapng
-- comment, tracer-codec ClockEvent::summary).
local function dissect_clock(body, tree)
    local b = field_reader(body, CLOCK.fields)
    local source = b("source"):uint()
    local state = b("state"):uint()
    local ok = true

    tree:add_le(F.clock_mono_ns, b("mono_ns"))
    tree:add_le(F.clock_global_ns, b("global_ns"))
    tree:add_packet_field(F.clock_global_time, b("global_ns"), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    tree:add_le(F.clock_ref_ns, b("ref_ns"))
    tree:add_le(F.clock_offset_ns, b("offset_ns"))
    local freq = b("freq_ppb"):le_float() -- 8 bytes: an IEEE 754 double
    tree:add(F.clock_freq_ppb, b("freq_ppb"), freq)
    tree:add_le(F.clock_delay_ns, b("delay_ns"))
    tree:add_le(F.clock_uncertainty_ns, b("uncertainty_ns"))
    tree:add_le(F.clock_error_estimate_ns, b("error_estimate_ns"))
    local source_item = tree:add(F.clock_ev_source, b("source"))
    if CLOCK_SOURCE_NAMES[source] == nil then
        source_item:add_proto_expert_info(E.bad_clock_source, "Unknown clock source " .. source)
        ok = false
    end
    local state_item = tree:add(F.clock_ev_state, b("state"))
    if CLOCK_STATE_NAMES[state] == nil then
        state_item:add_proto_expert_info(E.bad_clock_state, "Unknown clock servo state " .. state)
        ok = false
    elseif CLOCK_STATE_NAMES[state] == "HOLDOVER" then
        state_item:add_proto_expert_info(E.clock_holdover)
    end
    -- Exact 64-bit arithmetic (UInt64), never through doubles.
    local mono, ref = b("mono_ns"):le_uint64(), b("ref_ns"):le_uint64()
    tree:add(F.clock_ref_minus_mono, b("ref_ns"), signed_diff(ref, mono)):set_generated()

    local summary = string.format("CLOCK %s %s offset %s ns freq %s ppb delay %s ns err %s ns",
        CLOCK_SOURCE_NAMES[source] or ("source " .. source),
        CLOCK_STATE_NAMES[state] or ("state " .. state),
        tostring(b("offset_ns"):le_int64()), format_ppb(freq),
        tostring(b("delay_ns"):le_uint64()), tostring(b("error_estimate_ns"):le_uint64()))
    if not ok then
        return summary .. " [Malformed]"
    end
    return summary
end

-- A NUL-padded text field: adds `field` with the bytes before the first NUL
-- and returns that text.
local function add_padded(tree, field, range)
    local n = range:raw():find("\0", 1, true)
    n = n and n - 1 or range:len()
    if n == 0 then
        tree:add(field, range, "")
        return ""
    end
    tree:add_packet_field(field, range(0, n), ENC_UTF_8)
    return range(0, n):string(ENC_UTF_8)
end

-- "0x..." of a UInt64 without leading zeros (Rust's {:#x}).
local function hex64(v)
    local h = v:tohex():gsub("^0+", "")
    return "0x" .. (h == "" and "0" or h)
end

-- Decode a drop body (at least DROP.body_len bytes). Returns the one-line
-- summary (the same text as the sink's pcapng comment, DropEvent::summary).
local function dissect_drop(body, pinfo, tree, ctx)
    local b = field_reader(body, DROP.fields)
    flow_columns(pinfo, tree, ctx, b)
    local family = b("family"):uint()
    local ok = true

    tree:add_le(F.drop_mono_ns, b("mono_ns"))
    tree:add_le(F.drop_global_ns, b("global_ns"))
    tree:add_packet_field(F.drop_global_time, b("global_ns"), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    local reason = add_padded(tree, F.drop_reason, b("reason_name"))
    local code = b("reason"):le_uint()
    tree:add_le(F.drop_reason_code, b("reason"))
    local loc = add_padded(tree, F.drop_location_sym, b("location_sym"))
    tree:add_le(F.drop_location, b("location"))
    tree:add_le(F.drop_netns, b("netns"))
    tree:add_le(F.drop_ifindex, b("ifindex"))
    tree:add_le(F.drop_cpu, b("cpu"))
    tree:add_le(F.drop_len, b("len"))
    tree:add_le(F.drop_protocol, b("protocol"))
    local family_item = tree:add(F.drop_family, b("family"))
    if FLOW_FAMILY_NAMES[family] == nil then
        family_item:add_proto_expert_info(E.bad_flow_family, "Bad flow family " .. family)
        ok = false
    end
    local l4 = b("l4proto"):uint()
    tree:add(F.drop_l4proto, b("l4proto"))
    tree:add_le(F.drop_sport, b("sport"))
    tree:add_le(F.drop_dport, b("dport"))
    local saddr, daddr
    if family == 4 then
        tree:add(F.drop_saddr, b("saddr")(0, 4))
        tree:add(F.drop_daddr, b("daddr")(0, 4))
        saddr, daddr = tostring(b("saddr")(0, 4):ipv4()), tostring(b("daddr")(0, 4):ipv4())
    elseif family == 6 then
        tree:add(F.drop_saddr6, b("saddr"))
        tree:add(F.drop_daddr6, b("daddr"))
        saddr, daddr = tostring(b("saddr"):ipv6()), tostring(b("daddr"):ipv6())
    end

    if reason == "" then
        reason = "reason " .. code
    end
    if loc == "" then
        loc = hex64(b("location"):le_uint64())
    end
    local summary = string.format("DROP %s at %s", reason, loc)
    if saddr ~= nil then
        local proto_name = (l4 == 6 and "TCP") or (l4 == 17 and "UDP") or ("proto " .. l4)
        summary = summary .. string.format(" %s %s > %s", proto_name,
            endpoint(saddr, b("sport"):le_uint(), family), endpoint(daddr, b("dport"):le_uint(), family))
    end
    summary = summary .. string.format(" len=%d ifindex=%d cpu=%d",
        b("len"):le_uint(), b("ifindex"):le_uint(), b("cpu"):le_uint())
    if not ok then
        return summary .. " [Malformed]"
    end
    tree:add_proto_expert_info(E.drop, string.format("Dropped: %s at %s", reason, loc))
    return summary
end

-- Decode a TCP anomaly body (at least TCP.body_len bytes). Returns the
-- one-line summary (the same text as TcpEvent::summary).
local function dissect_tcp(body, pinfo, tree, ctx)
    local b = field_reader(body, TCP.fields)
    flow_columns(pinfo, tree, ctx, b)
    local anomaly = b("anomaly"):uint()
    local family = b("family"):uint()
    local name = TCP_ANOMALY_NAMES[anomaly]
    local ok = true

    tree:add_le(F.tcp_mono_ns, b("mono_ns"))
    tree:add_le(F.tcp_global_ns, b("global_ns"))
    tree:add_packet_field(F.tcp_global_time, b("global_ns"), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    local anomaly_item = tree:add(F.tcp_anomaly, b("anomaly"))
    if name == nil then
        anomaly_item:add_proto_expert_info(E.bad_tcp_anomaly, "Unknown TCP anomaly " .. anomaly)
        ok = false
    end
    tree:add_le(F.tcp_cookie, b("cookie"))
    tree:add_le(F.tcp_seq, b("seq"))
    tree:add_le(F.tcp_end_seq, b("end_seq"))
    local seq, end_seq = b("seq"):le_uint(), b("end_seq"):le_uint()
    if name == "RETRANSMIT" then
        -- modulo 2^32: a range may wrap
        tree:add(F.tcp_len, b("end_seq"), (end_seq - seq) % 4294967296):set_generated()
    end
    tree:add_le(F.tcp_netns, b("netns"))
    tree:add_le(F.tcp_cpu, b("cpu"))
    tree:add_le(F.tcp_detail, b("detail"))
    local family_item = tree:add(F.tcp_family, b("family"))
    if FLOW_FAMILY_NAMES[family] == nil then
        family_item:add_proto_expert_info(E.bad_flow_family, "Bad flow family " .. family)
        ok = false
    end
    tree:add(F.tcp_state, b("state"))
    tree:add_le(F.tcp_sport, b("sport"))
    tree:add_le(F.tcp_dport, b("dport"))
    local saddr, daddr
    if family == 4 then
        tree:add(F.tcp_saddr, b("saddr")(0, 4))
        tree:add(F.tcp_daddr, b("daddr")(0, 4))
        saddr, daddr = tostring(b("saddr")(0, 4):ipv4()), tostring(b("daddr")(0, 4):ipv4())
    elseif family == 6 then
        tree:add(F.tcp_saddr6, b("saddr"))
        tree:add(F.tcp_daddr6, b("daddr"))
        saddr, daddr = tostring(b("saddr"):ipv6()), tostring(b("daddr"):ipv6())
    end

    local summary = "TCP " .. (name or "?")
    if saddr ~= nil then
        summary = summary .. string.format(" %s > %s", endpoint(saddr, b("sport"):le_uint(), family),
            endpoint(daddr, b("dport"):le_uint(), family))
    end
    if name == "RETRANSMIT" then
        summary = summary .. string.format(" seq=%d..%d", seq, end_seq)
    end
    summary = summary .. string.format(" cookie=%s cpu=%d", tostring(b("cookie"):le_uint64()),
        b("cpu"):le_uint())
    if not ok then
        return summary .. " [Malformed]"
    end
    if name == "RETRANSMIT" then
        tree:add_proto_expert_info(E.tcp_retransmit,
            string.format("Retransmission of seq %d..%d", seq, end_seq))
    elseif name == "RESET_SENT" or name == "RESET_RECEIVED" then
        tree:add_proto_expert_info(E.tcp_reset, "Connection reset: " .. name)
    else
        tree:add_proto_expert_info(E.tcp_memory, name)
    end
    return summary
end

-- Decode an RX stage body (at least RX.body_len bytes). Returns the
-- one-line summary.
local function dissect_rx(body, pinfo, tree, ctx)
    local b = field_reader(body, RX.fields)
    flow_columns(pinfo, tree, ctx, b)
    local stage = b("stage"):uint()
    local family = b("family"):uint()
    local ok = true

    tree:add_le(F.rx_mono_ns, b("mono_ns"))
    tree:add_le(F.rx_global_ns, b("global_ns"))
    tree:add_packet_field(F.rx_global_time, b("global_ns"), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    tree:add_le(F.rx_stamp_ns, b("rx_stamp_ns"))
    tree:add_le(F.rx_stamp_global_ns, b("rx_stamp_global_ns"))
    local stamp = b("rx_stamp_global_ns"):le_uint64()
    if stamp ~= UInt64(0) then
        tree:add_packet_field(F.rx_stamp_time, b("rx_stamp_global_ns"), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    end
    tree:add_le(F.rx_hw_ns, b("hw_ns"))
    tree:add_le(F.rx_cookie, b("cookie"))
    tree:add_le(F.rx_seq, b("seq"))
    tree:add_le(F.rx_end_seq, b("end_seq"))
    tree:add_le(F.rx_len, b("len"))
    tree:add_le(F.rx_netns, b("netns"))
    tree:add_le(F.rx_ifindex, b("ifindex"))
    tree:add_le(F.rx_cpu, b("cpu"))
    tree:add_le(F.rx_pid, b("pid"))
    tree:add_le(F.rx_tid, b("tid"))
    local stage_item = tree:add(F.rx_stage, b("stage"))
    if RX_STAGE_NAMES[stage] == nil then
        stage_item:add_proto_expert_info(E.bad_rx_stage, "Unknown RX stage " .. stage)
        ok = false
    end
    local family_item = tree:add(F.rx_family, b("family"))
    if FAMILY_NAMES[family] == nil then
        family_item:add_proto_expert_info(E.bad_family, "Bad address family " .. family)
        ok = false
    end
    tree:add(F.rx_protocol, b("protocol"))
    tree:add(F.rx_tstamp_type, b("tstamp_type"))
    tree:add_le(F.rx_sport, b("sport"))
    tree:add_le(F.rx_dport, b("dport"))
    local s, d = b("saddr"), b("daddr")
    local saddr, daddr = "?", "?"
    if family == 4 then
        tree:add(F.rx_saddr, s(0, 4))
        tree:add(F.rx_daddr, d(0, 4))
        saddr, daddr = tostring(s(0, 4):ipv4()), tostring(d(0, 4):ipv4())
    elseif family == 6 then
        tree:add(F.rx_saddr6, s)
        tree:add(F.rx_daddr6, d)
        saddr, daddr = tostring(s:ipv6()), tostring(d:ipv6())
    end
    local c = b("comm")
    local n = c:raw():find("\0", 1, true)
    n = n and n - 1 or c:len()
    if n == 0 then
        tree:add(F.rx_comm, c, "")
    else
        tree:add_packet_field(F.rx_comm, c(0, n), ENC_UTF_8)
    end

    local summary = string.format("RX %s %s → %s len=%d",
        RX_STAGE_NAMES[stage] or ("stage " .. stage),
        endpoint(saddr, b("sport"):le_uint(), family),
        endpoint(daddr, b("dport"):le_uint(), family), b("len"):le_uint())
    local seq, end_seq = b("seq"):le_uint(), b("end_seq"):le_uint()
    if seq ~= 0 or end_seq ~= 0 then
        summary = summary .. string.format(" seq=%d..%d", seq, end_seq)
    end
    if stamp ~= UInt64(0) then
        local since = signed_diff(b("global_ns"):le_uint64(), stamp)
        tree:add(F.rx_since_stamp, b("rx_stamp_global_ns"), since):set_generated()
        summary = summary .. " " .. format_ns(since) .. " since RX stamp"
    end
    if not ok then
        return summary .. " [Malformed]"
    end

    -- Only well-formed TCP events are linked.
    if b("protocol"):uint() == RX_PROTO_TCP then
        local flow = string.format("%s|%d|%s|%d|%s|%d", tostring(ctx.agent), family, tostring(s:bytes()),
            b("sport"):le_uint(), tostring(d:bytes()), b("dport"):le_uint())
        local link = rx_event_link(pinfo, ctx.index, flow, stage, seq, end_seq, b("global_ns"):le_uint64())
        if link then
            add_rx_link(tree, b("global_ns"), link)
            if link.prev_ns ~= nil then
                summary = summary .. " " .. format_ns(link.prev_ns) .. " since " ..
                    RX_STAGE_NAMES[link.prev_stage]
            end
        end
        if stage == RX_STAGE.STACK_ENTRY then
            summary = summary .. peer_show_rx(tree, b("global_ns"), pinfo, ctx.index, b, seq, end_seq,
                b("global_ns"):le_uint64())
        end
    end
    return summary
end

-- The categories of a CPU event, in the order of its summary: body field,
-- name in the summary, its field and its share's field.
local CPU_CATEGORIES = {
    { field = "net_rx_ns", name = "NET_RX", ns = F.cpu_net_rx_ns, pct = F.cpu_net_rx_pct },
    { field = "net_tx_ns", name = "NET_TX", ns = F.cpu_net_tx_ns, pct = F.cpu_net_tx_pct },
    { field = "sock_send_ns", name = "send", ns = F.cpu_sock_send_ns, pct = F.cpu_sock_send_pct },
    { field = "sock_recv_ns", name = "recv", ns = F.cpu_sock_recv_ns, pct = F.cpu_sock_recv_pct },
}

-- Decode a CPU cost body (at least CPU.body_len bytes). Returns the
-- one-line summary, the same text as CpuEvent::summary: each share is
-- ns * 100 / interval in doubles, as there, so both print the same digits.
local function dissect_cpu(body, tree)
    local b = field_reader(body, CPU.fields)
    local cpu = b("cpu"):le_uint()
    tree:add_le(F.cpu_cpu, b("cpu"))
    tree:add_le(F.cpu_mono_ns, b("mono_ns"))
    tree:add_le(F.cpu_global_ns, b("global_ns"))
    tree:add_packet_field(F.cpu_global_time, b("global_ns"), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    tree:add_le(F.cpu_interval_ns, b("interval_ns"))
    local interval = b("interval_ns"):le_uint64():tonumber()
    local summary = string.format("CPU %d:", cpu)
    for _, c in ipairs(CPU_CATEGORIES) do
        local r = b(c.field)
        tree:add_le(c.ns, r)
        if interval ~= 0 then
            local pct = r:le_uint64():tonumber() * 100 / interval
            tree:add(c.pct, r, pct):set_generated()
            summary = summary .. string.format(" %s %.1f%%", c.name, pct)
        else
            summary = summary .. " " .. c.name .. " -"
        end
    end
    return summary .. string.format(" of %.3f s", interval / 1e9)
end

-- Known kinds: name, body length this version writes, version-1 body
-- length (the shortest taken), decoder (body tvb, pinfo, tree, ctx) ->
-- summary. A decoder gets a version-1 body or a whole one.
local KINDS = {
    [KIND.TX] = { name = TX.name, body_len = TX.body_len, v1_body_len = TX.v1_body_len, dissect = dissect_tx },
    [KIND.CLOCK] = {
        name = CLOCK.name,
        body_len = CLOCK.body_len,
        v1_body_len = CLOCK.v1_body_len,
        dissect = function(body, _, tree, _) return dissect_clock(body, tree) end,
    },
    [KIND.RX] = {
        name = RX.name,
        body_len = RX.body_len,
        v1_body_len = RX.v1_body_len,
        dissect = dissect_rx,
    },
    [KIND.DROP] = {
        name = DROP.name,
        body_len = DROP.body_len,
        v1_body_len = DROP.v1_body_len,
        dissect = dissect_drop,
    },
    [KIND.TCP] = {
        name = TCP.name,
        body_len = TCP.body_len,
        v1_body_len = TCP.v1_body_len,
        dissect = dissect_tcp,
    },
    [KIND.CPU] = {
        name = CPU.name,
        body_len = CPU.body_len,
        v1_body_len = CPU.v1_body_len,
        dissect = function(body, _, tree, _) return dissect_cpu(body, tree) end,
    },
}

-- Decode one record at `offset` of `tvb`, bounded by `limit` (end offset).
-- Returns (next offset or nil when truncated, summary).
local function dissect_record(tvb, offset, limit, pinfo, tree, ctx)
    local have = limit - offset
    if have < RECORD_HEADER_LEN then
        tree:add_proto_expert_info(E.truncated,
            string.format("Record truncated: needs %d bytes, %d left", RECORD_HEADER_LEN, have))
        return nil, "[truncated record]"
    end
    local r = field_reader(tvb, RECORD.fields, offset)
    local kind = r("kind"):le_uint()
    local len = r("len"):le_uint()
    if have < RECORD_HEADER_LEN + len then
        local t = tree:add(tvb(offset, have), "Truncated record")
        t:add_le(F.kind, r("kind"))
        t:add_le(F.len, r("len"))
        t:add_proto_expert_info(E.truncated,
            string.format("Record truncated: needs %d bytes, %d left", RECORD_HEADER_LEN + len, have))
        return nil, "[truncated record]"
    end
    tree:add_le(F.kind, r("kind"))
    tree:add_le(F.len, r("len"))
    local next_offset = offset + RECORD_HEADER_LEN + len
    local body = len > 0 and tvb(offset + RECORD_HEADER_LEN, len) or nil

    local k = KINDS[kind]
    if k == nil then
        local text = string.format("unknown kind %d (%d bytes)", kind, len)
        local item = body and tree:add(F.unknown, body) or tree
        item:add_proto_expert_info(E.unknown_kind, text)
        return next_offset, text
    end
    if len < k.v1_body_len then
        local item = body and tree:add(F.body, body) or tree
        item:add_proto_expert_info(E.body_too_short,
            string.format("%s body has %d bytes, version 1 needs %d", k.name, len, k.v1_body_len))
        return next_offset, k.name .. " [body too short]"
    end
    -- Decode via a sub-tvb so every offset is body-relative: the whole
    -- layout, or a version-1 body without the fields appended since.
    local known = len < k.body_len and k.v1_body_len or k.body_len
    local summary = k.dissect(tvb(offset + RECORD_HEADER_LEN, known):tvb(), pinfo, tree, ctx)
    if len > k.body_len then
        tree:add(F.extra, tvb(offset + RECORD_HEADER_LEN + k.body_len, len - k.body_len))
    end
    return next_offset, summary
end

------------------------------------------------------------------------------
-- Header fields shared by both framings.
------------------------------------------------------------------------------

-- Host name: `len` bytes at `offset`, UTF-8; `len_range` holds its length.
-- Flags an over-long name.
local function add_host(tree, tvb, len_range, offset, len)
    local len_item = tree:add(F.host_len, len_range)
    if len > MAX_HOSTNAME_LEN then
        len_item:add_proto_expert_info(E.bad_hostname,
            string.format("Host name of %d bytes, at most %d allowed", len, MAX_HOSTNAME_LEN))
    end
    if len > 0 then
        tree:add_packet_field(F.host, tvb(offset, len), ENC_UTF_8)
        return tvb(offset, len):string(ENC_UTF_8)
    end
    return ""
end

-- Checks header_len against the fixed part, the host name and the frame;
-- returns true when it is usable.
local function check_header_len(item, header_len, min_len, total)
    if header_len < min_len or header_len > total then
        item:add_proto_expert_info(E.bad_header_len,
            string.format("Header length %d outside %d..%d", header_len, min_len, total))
        return false
    end
    return true
end

local function set_columns(pinfo, text)
    pinfo.cols.protocol:set("NETTRACE")
    -- The IP dissector of flow_columns may have fenced the column.
    pinfo.cols.info:clear_fence()
    pinfo.cols.info:set(text)
end

------------------------------------------------------------------------------
-- (a) pcapng frames: capture header + exactly one record.
------------------------------------------------------------------------------
local function dissect_capture(tvb, pinfo, root)
    local total = tvb:len()
    local tree = root:add(proto, tvb())
    tree:append_text(" (capture record)")
    if total < CAPTURE.fixed_len then
        tree:add_proto_expert_info(E.too_short,
            string.format("Capture record of %d bytes, the header needs %d", total, CAPTURE.fixed_len))
        set_columns(pinfo, "[Malformed: too short]")
        return total
    end
    local c = field_reader(tvb, CAPTURE.fields)
    local version = c("version"):le_uint()
    local version_item = tree:add_le(F.cap_version, c("version"))
    if version ~= CAPTURE_VERSION then
        version_item:add_proto_expert_info(E.bad_version,
            string.format("Capture version %d, this dissector reads %d", version, CAPTURE_VERSION))
        set_columns(pinfo, string.format("[Malformed: capture version %d]", version))
        return total
    end
    local header_len = c("header_len"):le_uint()
    local hl_item = tree:add_le(F.cap_header_len, c("header_len"))
    local agent = c("agent_id"):le_uint64()
    tree:add_le(F.agent_id, c("agent_id"))
    tree:add_le(F.event_seq, c("event_seq"))
    tree:add(F.clock_source, c("clock_source"))
    tree:add(F.clock_state, c("clock_state"))
    local host_len = c("host_len"):uint()
    if not check_header_len(hl_item, header_len, CAPTURE.fixed_len + host_len, total) then
        set_columns(pinfo, "[Malformed: bad header length]")
        return total
    end
    local host = add_host(tree, tvb, c("host_len"), CAPTURE.fixed_len, host_len)

    local ctx = { agent = agent, index = 0, columns = true }
    local next_offset, summary = dissect_record(tvb, header_len, total, pinfo, tree, ctx)
    if not ctx.has_flow then
        host_columns(pinfo, host)
    end
    if next_offset ~= nil and next_offset < total then
        tree:add_proto_expert_info(E.count_mismatch,
            string.format("%d bytes after the one record of a capture frame", total - next_offset))
        summary = summary .. " [trailing bytes]"
    end
    tree:append_text(", " .. host .. ": " .. summary)
    set_columns(pinfo, summary)
    return total
end

------------------------------------------------------------------------------
-- (b) live UDP datagrams: datagram header + event_count records.
------------------------------------------------------------------------------

-- Validates and shows the datagram header. Returns a table with the values
-- the records need, or nil (after adding an expert) when it is unusable.
local function dissect_dgram_header(tvb, tree)
    local total = tvb:len()
    if total < LAYOUT.dgram_v1_fixed_len then
        tree:add_proto_expert_info(E.too_short,
            string.format("Datagram of %d bytes, the header needs %d", total, LAYOUT.dgram_v1_fixed_len))
        return nil, "too short"
    end
    local d = field_reader(tvb, DGRAM.fields)
    local magic_item = tree:add(F.magic, d("magic"))
    if d("magic"):string() ~= MAGIC then
        magic_item:add_proto_expert_info(E.bad_magic)
        return nil, "bad magic"
    end
    local version = d("version"):le_uint()
    local version_item = tree:add_le(F.dgram_version, d("version"))
    if version < WIRE_VERSION_1 or version > WIRE_VERSION then
        version_item:add_proto_expert_info(E.bad_version,
            string.format("Wire version %d, this dissector reads %d to %d", version, WIRE_VERSION_1, WIRE_VERSION))
        return nil, "wire version " .. version
    end
    -- Version 1 ends its fixed part before `flags` (no flags, incarnation or
    -- MAC), version 2 before `sink_instance`.
    local fixed_len = DGRAM.fixed_len
    if version == WIRE_VERSION_1 then
        fixed_len = LAYOUT.dgram_v1_fixed_len
    elseif version == LAYOUT.wire_version_2 then
        fixed_len = LAYOUT.dgram_v2_fixed_len
    end
    if total < fixed_len then
        tree:add_proto_expert_info(E.too_short,
            string.format("Datagram of %d bytes, the header needs %d", total, fixed_len))
        return nil, "too short"
    end
    local header_len = d("header_len"):le_uint()
    local hl_item = tree:add_le(F.dgram_header_len, d("header_len"))
    local h = {
        agent = d("agent_id"):le_uint64(),
        first = d("first_event_seq"):le_uint64(),
        first_range = d("first_event_seq"),
        count = d("event_count"):le_uint(),
        mac_len = 0,
    }
    tree:add_le(F.agent_id, d("agent_id"))
    tree:add(F.boot_id, d("boot_id"))
    h.seq = d("seq"):le_uint64()
    tree:add_le(F.dgram_seq, d("seq"))
    tree:add_le(F.lost_events, d("lost_events"))
    tree:add_le(F.first_event_seq, d("first_event_seq"))
    tree:add(F.clock_source, d("clock_source"))
    tree:add(F.clock_state, d("clock_state"))
    h.count_item = tree:add_le(F.event_count, d("event_count"))
    local host_len = d("hostname_len"):uint()
    if version ~= WIRE_VERSION_1 then
        local flags = d("flags"):uint()
        local flags_item = tree:add(F.dgram_flags, d("flags"))
        flags_item:add(F.dgram_flag_mac, d("flags"))
        tree:add_le(F.incarnation, d("incarnation"))
        if version == WIRE_VERSION then
            tree:add_le(F.dgram_sink_instance, d("sink_instance"))
            tree:add_le(F.sent_mono_ns, d("sent_mono_ns"))
        end
        if bit32.band(flags, bit32.bnot(LAYOUT.flag_mac)) ~= 0 then
            flags_item:add_proto_expert_info(E.bad_flags,
                string.format("Flags 0x%02x: bits other than 0 are reserved", flags))
            return nil, "unknown flags"
        end
        if bit32.band(flags, LAYOUT.flag_mac) ~= 0 then
            h.mac_len = LAYOUT.mac_len
        end
    end
    if not check_header_len(hl_item, header_len, fixed_len + host_len, total - h.mac_len) then
        return nil, "bad header length"
    end
    h.host = add_host(tree, tvb, d("hostname_len"), fixed_len, host_len)
    h.header_len = header_len
    return h
end

-- The sink's acknowledgement to an agent (it comes from the sink's port).
local ACK = LAYOUT.ack
local function dissect_ack(tvb, pinfo, tree)
    local total = tvb:len()
    tree:append_text(" (acknowledgement)")
    if total < ACK.fixed_len then
        tree:add_proto_expert_info(E.too_short,
            string.format("Acknowledgement of %d bytes, it needs %d", total, ACK.fixed_len))
        set_columns(pinfo, "[Malformed: too short]")
        return total
    end
    local a = field_reader(tvb, ACK.fields)
    tree:add(F.magic, a("magic"))
    local version_item = tree:add_le(F.ack_version, a("version"))
    if a("version"):le_uint() ~= 1 then
        version_item:add_proto_expert_info(E.bad_version, "Acknowledgement version this dissector does not read")
        set_columns(pinfo, "[Malformed: ack version]")
        return total
    end
    local len_item = tree:add_le(F.ack_len, a("ack_len"))
    tree:add(F.ack_flags, a("flags"))
    tree:add_le(F.ack_sink_instance, a("sink_instance"))
    tree:add_le(F.ack_seq, a("ack_seq"))
    tree:add_le(F.agent_id, a("agent_id"))
    tree:add(F.boot_id, a("boot_id"))
    tree:add_le(F.incarnation, a("incarnation"))
    tree:add_le(F.ack_preceding, a("preceding_events"))
    tree:add_le(F.ack_delivered, a("delivered_events"))
    tree:add_le(F.ack_lost, a("lost_events"))
    tree:add_le(F.ack_received, a("received_events"))
    local ack_len = a("ack_len"):le_uint()
    local mac_len = 0
    if bit32.band(a("flags"):uint(), LAYOUT.flag_mac) ~= 0 then
        mac_len = LAYOUT.mac_len
    end
    if not check_header_len(len_item, ack_len, ACK.fixed_len, total - mac_len) or ack_len + mac_len ~= total then
        set_columns(pinfo, "[Malformed: bad ack length]")
        return total
    end
    if mac_len > 0 then
        tree:add(F.ack_mac, tvb(ack_len, mac_len))
    end
    set_columns(pinfo, string.format("ack agent=%s delivered=%s lost=%s preceding=%s",
        tostring(a("agent_id"):le_uint64()), tostring(a("delivered_events"):le_uint64()),
        tostring(a("lost_events"):le_uint64()), tostring(a("preceding_events"):le_uint64())))
    return total
end

-- One datagram (all of tvb): its tree under root; returns its Info text.
local function dissect_one_dgram(tvb, pinfo, root)
    local total = tvb:len()
    local tree = root:add(proto, tvb())
    local h, why = dissect_dgram_header(tvb, tree)
    if h == nil then
        return "[Malformed: " .. why .. "]"
    end

    local summaries = {}
    -- The records end where the MAC begins.
    local mac_at = total - h.mac_len
    if h.mac_len > 0 then
        tree:add(F.dgram_mac, tvb(mac_at, h.mac_len))
    end
    total = mac_at
    local offset, index = h.header_len, 0
    while offset ~= nil and offset < total do
        local start = offset
        local rec = tree:add(tvb(start, math.min(RECORD_HEADER_LEN, total - start)), "Event " .. index)
        -- Records carry no sequence number of their own: events are numbered
        -- consecutively from first_event_seq.
        rec:add(F.event_seq, h.first_range, h.first + index):set_generated()
        local summary
        offset, summary = dissect_record(tvb, start, total, pinfo, rec, { agent = h.agent, index = index })
        if offset ~= nil then
            rec:set_len(offset - start)
        end
        rec:append_text(": " .. summary)
        summaries[#summaries + 1] = summary
        index = index + 1
    end
    if offset ~= nil and index ~= h.count then
        h.count_item:add_proto_expert_info(E.count_mismatch,
            string.format("Header says %d events, datagram holds %d", h.count, index))
        summaries[#summaries + 1] = "[event count mismatch]"
    end

    tree:append_text(string.format(", %s seq=%s, %d events", h.host, tostring(h.seq), index))
    return string.format("%s seq=%s: %s", h.host, tostring(h.seq), table.concat(summaries, "; "))
end

-- Length of the datagram at the start of tvb, from its header_len, its
-- event_count records and its tag; nil when they do not fit in tvb.
local function dgram_extent(tvb)
    local total = tvb:len()
    if total < LAYOUT.dgram_v1_fixed_len or tvb(0, 4):string() ~= MAGIC then
        return nil
    end
    local d = field_reader(tvb, DGRAM.fields)
    local off = d("header_len"):le_uint()
    for _ = 1, d("event_count"):le_uint() do
        if off + RECORD_HEADER_LEN > total then
            return nil
        end
        off = off + RECORD_HEADER_LEN + tvb(off + 2, 2):le_uint()
    end
    if d("version"):le_uint() ~= WIRE_VERSION_1 and bit32.band(d("flags"):uint(), LAYOUT.flag_mac) ~= 0 then
        off = off + LAYOUT.mac_len
    end
    if off > total then
        return nil
    end
    return off
end

-- A UDP payload: an acknowledgement, one datagram, or a UDP GSO batch seen
-- before the device cut it (a capture on veth or loopback): datagrams end
-- to end, each padded to the segment size but the last.
local function dissect_dgram(tvb, pinfo, root)
    local total = tvb:len()
    if total >= 4 and tvb(0, 4):string() == LAYOUT.ack_magic then
        return dissect_ack(tvb, pinfo, root:add(proto, tvb()))
    end
    local first = dgram_extent(tvb)
    if first == nil or first >= total or dgram_extent(tvb(first):tvb()) == nil then
        set_columns(pinfo, dissect_one_dgram(tvb, pinfo, root))
        return total
    end
    local infos, off = {}, 0
    while off < total do
        local len = dgram_extent(tvb(off):tvb()) or (total - off)
        infos[#infos + 1] = dissect_one_dgram(tvb(off, len):tvb(), pinfo, root)
        off = off + len
    end
    set_columns(pinfo, string.format("GSO batch of %d datagrams: %s", #infos, table.concat(infos, " | ")))
    return total
end

------------------------------------------------------------------------------
-- Registration. proto.dissector must be set before DissectorTable:add.
------------------------------------------------------------------------------
proto.dissector = dissect_dgram
proto_file.dissector = dissect_capture
proto.init = function()
    reset_state()
    reset_rx_state()
    reset_peer_state()
end

DissectorTable.get("wtap_encap"):add(wtap.USER0, proto_file)
-- The live interface (tracer-sink --live-iface): Ethernet frames of
-- EtherType 0x88B5 (IEEE local experimental), each one capture record.
DissectorTable.get("ethertype"):add(LAYOUT.live_ethertype, proto_file)

local udp_table = DissectorTable.get("udp.port")
local registered_port = proto.prefs.udp_port
udp_table:add(registered_port, proto)
-- Listed under Decode As even on ports other than the preference.
udp_table:add_for_decode_as(proto)

-- Move the registration when the preference changes (also -o nettrace.udp_port:N).
function proto.prefs_changed()
    local port = proto.prefs.udp_port
    if port ~= registered_port then
        if registered_port ~= 0 then
            udp_table:remove(registered_port, proto)
        end
        if port ~= 0 then
            udp_table:add(port, proto)
        end
        registered_port = port
    end
end
