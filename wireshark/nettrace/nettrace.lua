--[[
nettrace.lua - Wireshark/tshark dissector for the clock-synchronized network
stack tracer ("nettrace"): the entry of the plugin folder wireshark/nettrace/.
It loads the other parts of the folder and is the only one that registers
anything with Wireshark.

Understands wire format versions 3, 2 and 1 and capture record version 1,
as defined in docs/wire-format.md. It decodes:

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

The parts, in the order this file loads them (each one concern):
  nettrace_layout.lua      wire layouts: offsets, lengths, kinds, name
                           tables (generated from tracer-codec: never edit)
  nettrace_common.lua      name tables, field readers, number helpers
  nettrace_fields.lua      every ProtoField and ProtoExpert
  nettrace_tx_latency.lua  TX stage latencies across frames
  nettrace_rx_links.lua    links between the RX frames of one TCP skb
  nettrace_peer_links.lua  cross-host send <-> reception links
  nettrace_columns.lua     packet-list columns, flows for IP statistics
  nettrace_bodies.lua      one decoder per event kind
  nettrace_framing.lua     capture records, UDP datagrams, acknowledgements
Wireshark loads every .lua file under a plugin folder on its own (4.0
descends into subfolders), so each part only returns a function (or, for
the layout, a table) and registers nothing: loaded alone it does nothing.
Their names all start with "nettrace_" because Wireshark loads a personal
plugin file name only once across all folders: a part named, say,
fields.lua would hide another plugin's fields.lua.

Install: copy the folder wireshark/nettrace/ whole into a Lua plugin folder
(personal: ~/.local/lib/wireshark/plugins/; see Help > About Wireshark >
Folders, or `tshark -G folders`) and restart Wireshark (or Analyze > Reload
Lua Plugins). Without installing:
  tshark -X lua_script:wireshark/nettrace/nettrace.lua -r trace.pcapng

Needs Wireshark >= 4.0 (Lua 5.2). Field list and filter examples are in
wireshark/README.md.
]]

-- The folder of this file, from the name its chunk was loaded under
-- ("@path", the path Wireshark opened: absolute from a plugin folder, as
-- given from -X lua_script:); "" when that path has no folder part.
local PART_DIR = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or ""

-- Runs the part `name` of this folder and returns what it returns.
-- Opened here rather than with Wireshark's dofile, which cuts a path at
-- 255 bytes and, when the file is missing, tries other folders.
local function load_part(name)
    local path = PART_DIR .. name
    local file, err = io.open(path, "rb")
    if file == nil then
        error("nettrace: a part of the plugin is missing (copy the whole folder): " .. err, 0)
    end
    local text = file:read("*a")
    file:close()
    local chunk, why = load(text, "@" .. path, "t")
    if chunk == nil then
        error(why, 0)
    end
    return chunk()
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

-- What the parts share: each takes what it needs from here and adds itself.
local p = { proto = proto }
p.layout = load_part("nettrace_layout.lua")
p.common = load_part("nettrace_common.lua")(p.layout)
p.fields = load_part("nettrace_fields.lua")(p)

proto.fields = p.fields.field_list
proto.experts = p.fields.expert_list

local DEFAULT_UDP_PORT = 7420
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

p.tx_latency = load_part("nettrace_tx_latency.lua")(p)
p.rx_links = load_part("nettrace_rx_links.lua")(p)
p.peer_links = load_part("nettrace_peer_links.lua")(p)
p.columns = load_part("nettrace_columns.lua")(p)
p.bodies = load_part("nettrace_bodies.lua")(p)
p.framing = load_part("nettrace_framing.lua")(p)

------------------------------------------------------------------------------
-- Registration. proto.dissector must be set before DissectorTable:add.
------------------------------------------------------------------------------
proto.dissector = p.framing.dissect_dgram
proto_file.dissector = p.framing.dissect_capture
proto.init = function()
    p.tx_latency.reset_state()
    p.rx_links.reset_rx_state()
    p.peer_links.reset_peer_state()
end

DissectorTable.get("wtap_encap"):add(wtap.USER0, proto_file)
-- The live interface (tracer-sink --live-iface): Ethernet frames of
-- EtherType 0x88B5 (IEEE local experimental), each one capture record.
DissectorTable.get("ethertype"):add(p.layout.live_ethertype, proto_file)

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
