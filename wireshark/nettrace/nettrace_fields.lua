-- nettrace_fields.lua - nettrace dissector: every field (ProtoField) and
-- expert info (ProtoExpert) the protocol declares; nettrace.lua registers
-- them on the protocol. Field names match the Rust event model
-- (tracer-codec/src/event.rs).
--
-- nettrace.lua loads this file and calls the function it returns with the
-- parts loaded before it; loaded on its own (as Wireshark loads every .lua
-- file of a plugin folder) it only returns that function.

return function(p)
    local LAYOUT = p.layout
    local c = p.common
    local CLOCK_SOURCE_NAMES, CLOCK_STATE_NAMES = c.CLOCK_SOURCE_NAMES, c.CLOCK_STATE_NAMES
    local STAGE_NAMES, RX_STAGE_NAMES, KIND_NAMES = c.STAGE_NAMES, c.RX_STAGE_NAMES, c.KIND_NAMES
    local FAMILY_NAMES, FLOW_FAMILY_NAMES = c.FAMILY_NAMES, c.FLOW_FAMILY_NAMES
    local TCP_ANOMALY_NAMES, TCP_STATE_NAMES = c.TCP_ANOMALY_NAMES, c.TCP_STATE_NAMES
    local L4PROTO_NAMES = c.L4PROTO_NAMES

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
        -- stage latencies (see nettrace_rx_links.lua)
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
        -- (see nettrace_peer_links.lua)
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

    return { F = F, E = E, field_list = field_list, expert_list = expert_list }
end
