--[[
nettrace.lua - Wireshark/tshark dissector for the clock-synchronized network
stack tracer ("nettrace").

Understands wire format version 1 and capture record version 1, exactly as
defined in docs/wire-format.md (source of truth: tracer-codec/src/wire.rs,
capture.rs, event.rs). It decodes:

  * pcapng files written by tracer-sink: link type USER0 (LINKTYPE_USER0,
    147); each frame is one capture record (capture header + one event).
  * live agent -> sink UDP datagrams ("NTRC" header + event records) on the
    UDP port set by the preference nettrace.udp_port (default 7420), or on
    any port through "Decode As... > UDP port > NETTRACE".

Event kinds:
  1  TX timestamp (110-byte body): one BPF TX timestamping callback, with
     stage latencies computed across frames.
  2  clock update (66-byte body): one update of an agent's global clock
     (raw sample, offset, frequency, delay, error estimate, servo state),
     fields nettrace.clock.*.
  Other kinds are shown as undecoded bodies and skipped by their length;
  bytes past a known layout are shown as fields of a newer version.

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

-- Versions this script understands. Anything else is flagged, not guessed at.
local WIRE_VERSION = 1
local CAPTURE_VERSION = 1

-- Layout constants (mirror tracer-codec).
local MAGIC = "NTRC"
local DGRAM_FIXED_LEN = 61 -- datagram header bytes before the hostname
local CAPTURE_FIXED_LEN = 23 -- capture header bytes before the host name
local MAX_HOSTNAME_LEN = 64
local RECORD_HEADER_LEN = 4 -- kind u16 + len u16
local KIND_TX = 1
local KIND_CLOCK = 2
local TX_BODY_LEN = 110 -- version-1 TxEvent body
local CLOCK_BODY_LEN = 66 -- version-1 ClockEvent body
local DEFAULT_UDP_PORT = 7420

-- Stage numbers, as TxStage in tracer-codec/src/event.rs.
local STAGE = { SENDMSG = 0, SCHED = 1, SND_SW = 2, SND_HW = 3, ACK = 4 }
local STAGE_NAMES = { [0] = "SENDMSG", [1] = "SCHED", [2] = "SND_SW", [3] = "SND_HW", [4] = "ACK" }
local KIND_NAMES = { [KIND_TX] = "TX", [KIND_CLOCK] = "CLOCK" }
local CLOCK_SOURCE_NAMES = { [0] = "system", [1] = "phc", [2] = "sink" }
local CLOCK_STATE_NAMES = { [0] = "UNLOCKED", [1] = "JUMP", [2] = "LOCKED", [3] = "LOCKED_STABLE" }
local FAMILY_NAMES = { [4] = "IPv4", [6] = "IPv6" }

-- The protocol. It owns every field, the preference and the UDP registration
-- (so "Decode As" lists it as NETTRACE).
local proto = Proto("nettrace", "Network stack trace")

-- A second, tiny protocol registered for link type USER0 only. One Lua Proto
-- has one dissector function, and the payload alone cannot tell a capture
-- record from a datagram once it is malformed (a bad-magic datagram is not
-- a capture record), so the table that called us decides. Its tree shows
-- the fields of `proto`, so `nettrace` and `nettrace.*` filters match both.
local proto_file = Proto("nettrace_file", "Network stack trace capture record")

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
    bad_hostname = malformed("bad_hostname", "Bad host name"),
    truncated = malformed("truncated_record", "Record runs past the end"),
    count_mismatch = malformed("event_count_mismatch", "Record count differs from the header"),
    body_too_short = malformed("body_too_short", "Body shorter than the version-1 layout"),
    bad_stage = malformed("bad_stage", "Unknown TX stage"),
    bad_family = malformed("bad_family", "Address family is neither 4 nor 6"),
    bad_clock_source = malformed("bad_clock_source", "Unknown clock source"),
    bad_clock_state = malformed("bad_clock_state", "Unknown clock servo state"),
    unknown_kind = ProtoExpert.new("nettrace.unknown_kind", "Unknown event kind (skipped by length)",
        expert.group.UNDECODED, expert.severity.NOTE),
}
local expert_list = {}
for _, e in pairs(E) do
    expert_list[#expert_list + 1] = e
end
proto.experts = expert_list

proto.prefs.udp_port = Pref.uint("UDP port", DEFAULT_UDP_PORT, "UDP port of agent -> sink datagrams")

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
-- Event records (kind u16 | len u16 | body), shared by both framings.
------------------------------------------------------------------------------

-- Address fields of one TX body; returns the text of saddr and daddr.
local function add_addresses(tree, body, family)
    local s, d = body(62, 16), body(78, 16)
    if family == 4 then
        tree:add(F.saddr, body(62, 4))
        tree:add(F.daddr, body(78, 4))
        return tostring(body(62, 4):ipv4()), tostring(body(78, 4):ipv4())
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

-- Decode a TX body (at least TX_BODY_LEN bytes). `ctx` = { agent = UInt64,
-- index = event index in the frame }. Returns the one-line summary.
local function dissect_tx(body, pinfo, tree, ctx)
    local stage = body(56, 1):uint()
    local family = body(57, 1):uint()
    local ok = true

    tree:add_le(F.mono_ns, body(0, 8))
    tree:add_le(F.global_ns, body(8, 8))
    tree:add_packet_field(F.global_time, body(8, 8), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    tree:add_le(F.hw_ns, body(16, 8))
    tree:add_le(F.cookie, body(24, 8))
    tree:add_le(F.tskey, body(32, 4))
    tree:add_le(F.seq, body(36, 4))
    tree:add_le(F.netns, body(40, 4))
    tree:add_le(F.cpu, body(44, 4))
    tree:add_le(F.pid, body(48, 4))
    tree:add_le(F.tid, body(52, 4))
    local stage_item = tree:add(F.stage, body(56, 1))
    if STAGE_NAMES[stage] == nil then
        stage_item:add_proto_expert_info(E.bad_stage, "Unknown TX stage " .. stage)
        ok = false
    end
    local family_item = tree:add(F.family, body(57, 1))
    if FAMILY_NAMES[family] == nil then
        family_item:add_proto_expert_info(E.bad_family, "Bad address family " .. family)
        ok = false
    end
    tree:add_le(F.sport, body(58, 2))
    tree:add_le(F.dport, body(60, 2))
    local saddr, daddr = add_addresses(tree, body, family)
    add_comm(tree, body(94, 16))

    local tskey = body(32, 4):le_uint()
    local summary = string.format("%s %s → %s tskey=%d",
        STAGE_NAMES[stage] or ("stage " .. stage),
        endpoint(saddr, body(58, 2):le_uint(), family),
        endpoint(daddr, body(60, 2):le_uint(), family), tskey)
    if not ok then
        return summary .. " [Malformed]"
    end

    -- Only well-formed events take part in latencies.
    local key = string.format("%s:%s:%d", tostring(ctx.agent), tostring(body(24, 8):le_uint64()), tskey)
    local lat = event_latency(pinfo, ctx.index, key, stage, body(8, 8):le_uint64())
    add_latency(tree, body(8, 8), lat)
    if lat.own ~= nil then
        summary = summary .. " " .. format_ns(lat.own.value)
    end
    return summary
end

-- freq_ppb as the sink's summary prints it (Rust "{:+.1}").
local function format_ppb(v)
    if v ~= v then
        return "NaN"
    end
    return string.format("%+.1f", v)
end

-- Decode a clock update body (at least CLOCK_BODY_LEN bytes). Returns the
-- one-line summary, phc2sys style (the same text as the sink's pcapng
-- comment, tracer-codec ClockEvent::summary).
local function dissect_clock(body, tree)
    local source = body(64, 1):uint()
    local state = body(65, 1):uint()
    local ok = true

    tree:add_le(F.clock_mono_ns, body(0, 8))
    tree:add_le(F.clock_global_ns, body(8, 8))
    tree:add_packet_field(F.clock_global_time, body(8, 8), ENC_TIME_NSECS + ENC_LITTLE_ENDIAN)
    tree:add_le(F.clock_ref_ns, body(16, 8))
    tree:add_le(F.clock_offset_ns, body(24, 8))
    local freq = body(32, 8):le_float() -- 8 bytes: an IEEE 754 double
    tree:add(F.clock_freq_ppb, body(32, 8), freq)
    tree:add_le(F.clock_delay_ns, body(40, 8))
    tree:add_le(F.clock_uncertainty_ns, body(48, 8))
    tree:add_le(F.clock_error_estimate_ns, body(56, 8))
    local source_item = tree:add(F.clock_ev_source, body(64, 1))
    if CLOCK_SOURCE_NAMES[source] == nil then
        source_item:add_proto_expert_info(E.bad_clock_source, "Unknown clock source " .. source)
        ok = false
    end
    local state_item = tree:add(F.clock_ev_state, body(65, 1))
    if CLOCK_STATE_NAMES[state] == nil then
        state_item:add_proto_expert_info(E.bad_clock_state, "Unknown clock servo state " .. state)
        ok = false
    end
    -- Exact 64-bit arithmetic (UInt64), never through doubles.
    local mono, ref = body(0, 8):le_uint64(), body(16, 8):le_uint64()
    tree:add(F.clock_ref_minus_mono, body(16, 8), signed_diff(ref, mono)):set_generated()

    local summary = string.format("CLOCK %s %s offset %s ns freq %s ppb delay %s ns err %s ns",
        CLOCK_SOURCE_NAMES[source] or ("source " .. source),
        CLOCK_STATE_NAMES[state] or ("state " .. state),
        tostring(body(24, 8):le_int64()), format_ppb(freq),
        tostring(body(40, 8):le_uint64()), tostring(body(56, 8):le_uint64()))
    if not ok then
        return summary .. " [Malformed]"
    end
    return summary
end

-- Known kinds: name, version-1 body length, decoder (body tvb, pinfo,
-- tree, ctx) -> summary.
local KINDS = {
    [KIND_TX] = { name = "TX", body_len = TX_BODY_LEN, dissect = dissect_tx },
    [KIND_CLOCK] = {
        name = "CLOCK",
        body_len = CLOCK_BODY_LEN,
        dissect = function(body, _, tree, _) return dissect_clock(body, tree) end,
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
    local kind = tvb(offset, 2):le_uint()
    local len = tvb(offset + 2, 2):le_uint()
    if have < RECORD_HEADER_LEN + len then
        local t = tree:add(tvb(offset, have), "Truncated record")
        t:add_le(F.kind, tvb(offset, 2))
        t:add_le(F.len, tvb(offset + 2, 2))
        t:add_proto_expert_info(E.truncated,
            string.format("Record truncated: needs %d bytes, %d left", RECORD_HEADER_LEN + len, have))
        return nil, "[truncated record]"
    end
    tree:add_le(F.kind, tvb(offset, 2))
    tree:add_le(F.len, tvb(offset + 2, 2))
    local next_offset = offset + RECORD_HEADER_LEN + len
    local body = len > 0 and tvb(offset + RECORD_HEADER_LEN, len) or nil

    local k = KINDS[kind]
    if k == nil then
        local text = string.format("unknown kind %d (%d bytes)", kind, len)
        local item = body and tree:add(F.unknown, body) or tree
        item:add_proto_expert_info(E.unknown_kind, text)
        return next_offset, text
    end
    if len < k.body_len then
        local item = body and tree:add(F.body, body) or tree
        item:add_proto_expert_info(E.body_too_short,
            string.format("%s body has %d bytes, version 1 needs %d", k.name, len, k.body_len))
        return next_offset, k.name .. " [body too short]"
    end
    -- Decode via a sub-tvb of the v1 layout so every offset is body-relative.
    local summary = k.dissect(tvb(offset + RECORD_HEADER_LEN, k.body_len):tvb(), pinfo, tree, ctx)
    if len > k.body_len then
        tree:add(F.extra, tvb(offset + RECORD_HEADER_LEN + k.body_len, len - k.body_len))
    end
    return next_offset, summary
end

------------------------------------------------------------------------------
-- Header fields shared by both framings.
------------------------------------------------------------------------------

-- Host name: `len` bytes at `offset`, UTF-8. Flags an over-long name.
local function add_host(tree, tvb, len_offset, offset, len)
    local len_item = tree:add(F.host_len, tvb(len_offset, 1))
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
    pinfo.cols.info:set(text)
end

------------------------------------------------------------------------------
-- (a) pcapng frames: capture header + exactly one record.
------------------------------------------------------------------------------
local function dissect_capture(tvb, pinfo, root)
    local total = tvb:len()
    local tree = root:add(proto, tvb())
    tree:append_text(" (capture record)")
    if total < CAPTURE_FIXED_LEN then
        tree:add_proto_expert_info(E.too_short,
            string.format("Capture record of %d bytes, the header needs %d", total, CAPTURE_FIXED_LEN))
        set_columns(pinfo, "[Malformed: too short]")
        return total
    end
    local version = tvb(0, 2):le_uint()
    local version_item = tree:add_le(F.cap_version, tvb(0, 2))
    if version ~= CAPTURE_VERSION then
        version_item:add_proto_expert_info(E.bad_version,
            string.format("Capture version %d, this dissector reads %d", version, CAPTURE_VERSION))
        set_columns(pinfo, string.format("[Malformed: capture version %d]", version))
        return total
    end
    local header_len = tvb(2, 2):le_uint()
    local hl_item = tree:add_le(F.cap_header_len, tvb(2, 2))
    local agent = tvb(4, 8):le_uint64()
    tree:add_le(F.agent_id, tvb(4, 8))
    tree:add_le(F.event_seq, tvb(12, 8))
    tree:add(F.clock_source, tvb(20, 1))
    tree:add(F.clock_state, tvb(21, 1))
    local host_len = tvb(22, 1):uint()
    if not check_header_len(hl_item, header_len, CAPTURE_FIXED_LEN + host_len, total) then
        set_columns(pinfo, "[Malformed: bad header length]")
        return total
    end
    local host = add_host(tree, tvb, 22, CAPTURE_FIXED_LEN, host_len)

    local next_offset, summary = dissect_record(tvb, header_len, total, pinfo, tree, { agent = agent, index = 0 })
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
    if total < DGRAM_FIXED_LEN then
        tree:add_proto_expert_info(E.too_short,
            string.format("Datagram of %d bytes, the header needs %d", total, DGRAM_FIXED_LEN))
        return nil, "too short"
    end
    local magic_item = tree:add(F.magic, tvb(0, 4))
    if tvb(0, 4):string() ~= MAGIC then
        magic_item:add_proto_expert_info(E.bad_magic)
        return nil, "bad magic"
    end
    local version = tvb(4, 2):le_uint()
    local version_item = tree:add_le(F.dgram_version, tvb(4, 2))
    if version ~= WIRE_VERSION then
        version_item:add_proto_expert_info(E.bad_version,
            string.format("Wire version %d, this dissector reads %d", version, WIRE_VERSION))
        return nil, "wire version " .. version
    end
    local header_len = tvb(6, 2):le_uint()
    local hl_item = tree:add_le(F.dgram_header_len, tvb(6, 2))
    local h = { agent = tvb(8, 8):le_uint64(), first = tvb(48, 8):le_uint64(), count = tvb(58, 2):le_uint() }
    tree:add_le(F.agent_id, tvb(8, 8))
    tree:add(F.boot_id, tvb(16, 16))
    h.seq = tvb(32, 8):le_uint64()
    tree:add_le(F.dgram_seq, tvb(32, 8))
    tree:add_le(F.lost_events, tvb(40, 8))
    tree:add_le(F.first_event_seq, tvb(48, 8))
    tree:add(F.clock_source, tvb(56, 1))
    tree:add(F.clock_state, tvb(57, 1))
    h.count_item = tree:add_le(F.event_count, tvb(58, 2))
    local host_len = tvb(60, 1):uint()
    if not check_header_len(hl_item, header_len, DGRAM_FIXED_LEN + host_len, total) then
        return nil, "bad header length"
    end
    h.host = add_host(tree, tvb, 60, DGRAM_FIXED_LEN, host_len)
    h.header_len = header_len
    return h
end

local function dissect_dgram(tvb, pinfo, root)
    local total = tvb:len()
    local tree = root:add(proto, tvb())
    local h, why = dissect_dgram_header(tvb, tree)
    if h == nil then
        set_columns(pinfo, "[Malformed: " .. why .. "]")
        return total
    end

    local summaries = {}
    local offset, index = h.header_len, 0
    while offset ~= nil and offset < total do
        local start = offset
        local rec = tree:add(tvb(start, math.min(RECORD_HEADER_LEN, total - start)), "Event " .. index)
        -- Records carry no sequence number of their own: events are numbered
        -- consecutively from first_event_seq.
        rec:add(F.event_seq, tvb(48, 8), h.first + index):set_generated()
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
    set_columns(pinfo, string.format("%s seq=%s: %s", h.host, tostring(h.seq), table.concat(summaries, "; ")))
    return total
end

------------------------------------------------------------------------------
-- Registration. proto.dissector must be set before DissectorTable:add.
------------------------------------------------------------------------------
proto.dissector = dissect_dgram
proto_file.dissector = dissect_capture
proto.init = reset_state

DissectorTable.get("wtap_encap"):add(wtap.USER0, proto_file)

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
