-- nettrace_bodies.lua - nettrace dissector: one decoder per event kind
-- (TX, clock update, RX, drop, TCP anomaly, CPU cost): its fields, its
-- checks and its one-line summary.
--
-- nettrace.lua loads this file and calls the function it returns with the
-- parts loaded before it; loaded on its own (as Wireshark loads every .lua
-- file of a plugin folder) it only returns that function.

return function(p)
    local LAYOUT = p.layout
    local F, E = p.fields.F, p.fields.E
    local c = p.common
    local field_reader, signed_diff, format_ns, endpoint = c.field_reader, c.signed_diff, c.format_ns, c.endpoint
    local STAGE_NAMES, RX_STAGE_NAMES, RX_STAGE = c.STAGE_NAMES, c.RX_STAGE_NAMES, c.RX_STAGE
    local CLOCK_SOURCE_NAMES, CLOCK_STATE_NAMES = c.CLOCK_SOURCE_NAMES, c.CLOCK_STATE_NAMES
    local FAMILY_NAMES, FLOW_FAMILY_NAMES = c.FAMILY_NAMES, c.FLOW_FAMILY_NAMES
    local TCP_ANOMALY_NAMES = c.TCP_ANOMALY_NAMES
    local event_latency, add_latency = p.tx_latency.event_latency, p.tx_latency.add_latency
    local rx_event_link, add_rx_link = p.rx_links.rx_event_link, p.rx_links.add_rx_link
    local peer_show_tx, peer_show_rx = p.peer_links.peer_show_tx, p.peer_links.peer_show_rx
    local flow_columns = p.columns.flow_columns

    local KIND = LAYOUT.kind
    local TX = LAYOUT.kinds[KIND.TX]
    local CLOCK = LAYOUT.kinds[KIND.CLOCK]
    local DROP = LAYOUT.kinds[KIND.DROP]
    local TCP = LAYOUT.kinds[KIND.TCP]
    local RX = LAYOUT.kinds[KIND.RX]
    local CPU = LAYOUT.kinds[KIND.CPU]
    local RX_PROTO_TCP = 6

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

    return { KINDS = KINDS }
end
