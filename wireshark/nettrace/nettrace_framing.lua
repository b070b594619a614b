-- nettrace_framing.lua - nettrace dissector: the two framings of events
-- (a pcapng frame's capture record; a live UDP datagram, its records and
-- the sink's acknowledgements), their headers and the records in them.
--
-- nettrace.lua loads this file and calls the function it returns with the
-- parts loaded before it; loaded on its own (as Wireshark loads every .lua
-- file of a plugin folder) it only returns that function.

return function(p)
    local proto = p.proto
    local LAYOUT = p.layout
    local F, E = p.fields.F, p.fields.E
    local field_reader = p.common.field_reader
    local KINDS = p.bodies.KINDS
    local host_columns, set_columns = p.columns.host_columns, p.columns.set_columns

    -- Versions this dissector understands. Anything else is flagged, not guessed at.
    local WIRE_VERSION = LAYOUT.wire_version
    local WIRE_VERSION_1 = LAYOUT.wire_version_1
    local CAPTURE_VERSION = LAYOUT.capture_version

    local MAGIC = LAYOUT.magic
    local DGRAM = LAYOUT.dgram -- datagram header: fixed_len, fields
    local CAPTURE = LAYOUT.capture -- capture header: fixed_len, fields
    local RECORD = LAYOUT.record -- record framing: kind, len
    local MAX_HOSTNAME_LEN = LAYOUT.max_hostname_len
    local RECORD_HEADER_LEN = LAYOUT.record_header_len

    --------------------------------------------------------------------------
    -- Event records (kind u16 | len u16 | body), shared by both framings.
    --------------------------------------------------------------------------

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

    --------------------------------------------------------------------------
    -- Header fields shared by both framings.
    --------------------------------------------------------------------------

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

    --------------------------------------------------------------------------
    -- (a) pcapng frames: capture header + exactly one record.
    --------------------------------------------------------------------------
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

    --------------------------------------------------------------------------
    -- (b) live UDP datagrams: datagram header + event_count records.
    --------------------------------------------------------------------------

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

    return { dissect_capture = dissect_capture, dissect_dgram = dissect_dgram }
end
