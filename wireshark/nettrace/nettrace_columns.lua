-- nettrace_columns.lua - nettrace dissector: the packet-list columns of a
-- frame (Protocol, Info, Source/Destination and ports from an event's
-- flow) and, by preference, the flow as a synthesized IP header for
-- Wireshark's IP statistics.
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
-- Flows and hosts make the columns of capture records only: a live UDP
-- datagram is a real packet whose addresses are the agent's and the
-- sink's, and it holds many events.
--
-- nettrace.lua loads this file and calls the function it returns with the
-- parts loaded before it; loaded on its own (as Wireshark loads every .lua
-- file of a plugin folder) it only returns that function.

return function(p)
    local proto = p.proto

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

    -- The Protocol column, and `text` as the Info column.
    local function set_columns(pinfo, text)
        pinfo.cols.protocol:set("NETTRACE")
        -- The IP dissector of flow_columns may have fenced the column.
        pinfo.cols.info:clear_fence()
        pinfo.cols.info:set(text)
    end

    return { flow_columns = flow_columns, host_columns = host_columns, set_columns = set_columns }
end
