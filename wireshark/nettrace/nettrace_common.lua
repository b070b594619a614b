-- nettrace_common.lua - nettrace dissector: what every part uses: name
-- tables and stage numbers, field readers, signed 64-bit differences,
-- duration and endpoint text, TCP sequence unwrapping.
--
-- nettrace.lua loads this file and calls the function it returns with the
-- layout (nettrace_layout.lua); loaded on its own (as Wireshark loads
-- every .lua file of a plugin folder) it only returns that function.

return function(LAYOUT)
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
    local RX_STAGE = {}
    for v, name in pairs(RX_STAGE_NAMES) do
        RX_STAGE[name] = v
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

    -- later - earlier as a signed Int64 without going through doubles.
    local function signed_diff(later, earlier)
        if later >= earlier then
            return Int64.new(later - earlier)
        end
        return -Int64.new(earlier - later)
    end

    -- TCP sequence numbers: how many there are, and half of that (a step
    -- longer than half is taken as one the other way round).
    local SEQ_SPACE, SEQ_HALF = 4294967296, 2147483648

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

    -- A duration (Int64 ns) for the Info column and tree labels: signed, in
    -- the largest of ns, µs, ms and s it reaches.
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

    -- "addr:port", an IPv6 address in brackets.
    local function endpoint(addr, port, family)
        if family == 6 then
            return string.format("[%s]:%d", addr, port)
        end
        return string.format("%s:%d", addr, port)
    end

    return {
        STAGE_NAMES = STAGE_NAMES,
        CLOCK_SOURCE_NAMES = CLOCK_SOURCE_NAMES,
        CLOCK_STATE_NAMES = CLOCK_STATE_NAMES,
        FAMILY_NAMES = FAMILY_NAMES,
        FLOW_FAMILY_NAMES = FLOW_FAMILY_NAMES,
        TCP_ANOMALY_NAMES = TCP_ANOMALY_NAMES,
        TCP_STATE_NAMES = TCP_STATE_NAMES,
        L4PROTO_NAMES = L4PROTO_NAMES,
        RX_STAGE_NAMES = RX_STAGE_NAMES,
        STAGE = STAGE,
        RX_STAGE = RX_STAGE,
        KIND_NAMES = KIND_NAMES,
        field_reader = field_reader,
        signed_diff = signed_diff,
        SEQ_SPACE = SEQ_SPACE,
        seq_unwrap = seq_unwrap,
        format_ns = format_ns,
        endpoint = endpoint,
    }
end
