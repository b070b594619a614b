//! The dissector's layout tables: [`render_lua`] writes the whole of
//! [`LUA_LAYOUT_PATH`], the part of the Wireshark plugin that holds them.

use std::fmt::Write as _;

use super::field::Field;
use super::registry::{
    ACK_LAYOUT, CAPTURE_HEADER, DATAGRAM_HEADER, EVENTS, NAME_TABLES, RECORD_HEADER,
};
use crate::ack::ACK_MAGIC;
use crate::capture::{CAPTURE_VERSION, LIVE_ETHERTYPE};
use crate::tx::{TX_FLAG_RANGE, TX_FLAG_SENT};
use crate::wire::{
    FLAG_MAC, HEADER_FIXED_LEN_V1, HEADER_FIXED_LEN_V2, MAC_LEN, MAGIC, MAX_HOSTNAME_LEN,
    RECORD_HEADER_LEN, WIRE_VERSION, WIRE_VERSION_1, WIRE_VERSION_2,
};

/// The generated file of the Wireshark plugin, from the repository root.
pub const LUA_LAYOUT_PATH: &str = "wireshark/nettrace/nettrace_layout.lua";

/// The opening comment of [`LUA_LAYOUT_PATH`]: what it is, that it is
/// generated and how to regenerate it.
const LUA_LAYOUT_HEADER: &str = "\
-- nettrace_layout.lua - nettrace dissector: the wire layouts it reads (offset,
-- size and type of every header and event field, body lengths, kind numbers,
-- name tables, versions, flags).
--
-- Generated whole from tracer-codec's layout tables by
-- tracer_codec::layout::render_lua(): do not edit it by hand. Regenerate it
-- with `UPDATE_GENERATED=1 cargo test -p tracer-codec` (a test fails while
-- it is stale).
";

/// A Lua string literal.
fn lua_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn lua_fields(o: &mut String, indent: &str, fields: &[Field]) {
    let _ = writeln!(o, "{indent}fields = {{");
    for f in fields {
        let names = f
            .names
            .map(|t| format!(", names = {}", lua_str(t.name)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "{indent}    {} = {{ offset = {}, size = {}, type = {}{names} }},",
            f.name,
            f.offset,
            f.size,
            lua_str(f.ty.name())
        );
    }
    let _ = writeln!(o, "{indent}}},");
    let order: Vec<String> = fields.iter().map(|f| lua_str(f.name)).collect();
    let _ = writeln!(o, "{indent}order = {{ {} }},", order.join(", "));
}

/// The dissector's layout tables: the whole text of [`LUA_LAYOUT_PATH`], a
/// chunk that returns one table (the plugin's entry, `nettrace.lua`, loads
/// it; loaded on its own, as Wireshark does with every `.lua` file of a
/// plugin folder, it does nothing).
pub fn render_lua() -> String {
    let mut o = String::new();
    o.push_str(LUA_LAYOUT_HEADER);
    let _ = writeln!(o, "return {{");
    let _ = writeln!(o, "    wire_version = {WIRE_VERSION},");
    let _ = writeln!(o, "    wire_version_1 = {WIRE_VERSION_1},");
    let _ = writeln!(o, "    wire_version_2 = {WIRE_VERSION_2},");
    let _ = writeln!(o, "    dgram_v1_fixed_len = {HEADER_FIXED_LEN_V1},");
    let _ = writeln!(o, "    dgram_v2_fixed_len = {HEADER_FIXED_LEN_V2},");
    let _ = writeln!(o, "    flag_mac = {FLAG_MAC},");
    let _ = writeln!(o, "    tx_flag_range = {},", TX_FLAG_RANGE);
    let _ = writeln!(o, "    tx_flag_sent = {},", TX_FLAG_SENT);
    let _ = writeln!(o, "    mac_len = {MAC_LEN},");
    let _ = writeln!(o, "    capture_version = {CAPTURE_VERSION},");
    let _ = writeln!(o, "    live_ethertype = 0x{LIVE_ETHERTYPE:04X},");
    let _ = writeln!(
        o,
        "    magic = {},",
        lua_str(std::str::from_utf8(&MAGIC).unwrap_or("NTRC"))
    );
    let _ = writeln!(o, "    max_hostname_len = {MAX_HOSTNAME_LEN},");
    let _ = writeln!(o, "    record_header_len = {RECORD_HEADER_LEN},");
    let _ = writeln!(
        o,
        "    ack_magic = {},",
        lua_str(std::str::from_utf8(&ACK_MAGIC).unwrap_or("NTRA"))
    );
    for h in [&DATAGRAM_HEADER, &CAPTURE_HEADER, &ACK_LAYOUT] {
        let _ = writeln!(o, "    {} = {{", h.name);
        let _ = writeln!(o, "        fixed_len = {},", h.fixed_len);
        lua_fields(&mut o, "        ", h.fields);
        let _ = writeln!(o, "    }},");
    }
    let _ = writeln!(o, "    record = {{");
    lua_fields(&mut o, "        ", &RECORD_HEADER);
    let _ = writeln!(o, "    }},");
    let kinds: Vec<String> = EVENTS
        .iter()
        .map(|e| format!("{} = {}", e.name, e.kind))
        .collect();
    let _ = writeln!(o, "    kind = {{ {} }},", kinds.join(", "));
    let _ = writeln!(o, "    kinds = {{");
    for e in EVENTS {
        let _ = writeln!(o, "        [{}] = {{", e.kind);
        let _ = writeln!(o, "            name = {},", lua_str(e.name));
        let _ = writeln!(o, "            body_len = {},", e.body_len);
        let _ = writeln!(o, "            v1_body_len = {},", e.v1_body_len);
        lua_fields(&mut o, "            ", e.fields);
        let _ = writeln!(o, "        }},");
    }
    let _ = writeln!(o, "    }},");
    let _ = writeln!(o, "    names = {{");
    for t in NAME_TABLES {
        let entries: Vec<String> = t
            .entries
            .iter()
            .map(|(v, n)| format!("[{v}] = {}", lua_str(n)))
            .collect();
        let _ = writeln!(o, "        {} = {{ {} }},", t.name, entries.join(", "));
    }
    let _ = writeln!(o, "    }},");
    let _ = writeln!(o, "}}");
    o
}
