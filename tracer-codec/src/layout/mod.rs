//! Machine-readable description of every wire layout: event kinds, their
//! fields (offset, size, type, doc) and enum name tables, plus the datagram
//! and capture headers.
//!
//! This is the one source of the layouts for everything after the agent:
//! the event structs and their decoders are declared together with their
//! field tables by the `wire_event!` macro (so they cannot drift), and
//! the dissector's tables (the whole file [`LUA_LAYOUT_PATH`]) and the field
//! tables of `docs/wire-format.md` (between its `GENERATED` markers) are
//! rendered from here ([`render_lua`], [`render_markdown`]). A test fails
//! when a checked-in rendering is stale; `UPDATE_GENERATED=1 cargo test -p
//! tracer-codec` rewrites them.
//!
//! Layered so that imports point one way: [`field`] (what a field, a name
//! table, an event or header layout is) at the bottom, used by every event
//! type; [`registry`] (every layout of this build) above the event types;
//! the renderers ([`lua`], [`markdown`], with [`splice`](mod@splice)) on
//! top. This module only gathers them under one path.

pub mod field;
pub mod lua;
pub mod markdown;
pub mod registry;
pub mod splice;

pub use field::{
    field_offset, fields_len, place, EventLayout, Field, FieldType, HeaderLayout, NameTable,
    WireValue, FAMILY,
};
pub use lua::{render_lua, LUA_LAYOUT_PATH};
pub use markdown::{render_markdown, splice_markdown, MarkdownTable, MD_BEGIN, MD_END};
pub use registry::{
    ACK_LAYOUT, CAPTURE_HEADER, DATAGRAM_HEADER, EVENTS, NAME_TABLES, RECORD_HEADER,
};
pub use splice::splice;

#[cfg(test)]
mod tests {
    use super::*;

    /// Compares a checked-in file with what `render` makes of it (the whole
    /// file, or the file with its generated part replaced); with
    /// `UPDATE_GENERATED=1` writes the rendering instead.
    fn check_generated(rel: &str, render: impl Fn(&str) -> Result<String, String>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(rel);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            // A file generated whole can be generated anew.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => panic!("cannot read {}: {e}", path.display()),
        };
        let rendered =
            render(&text).unwrap_or_else(|m| panic!("{rel}: the marker line {m:?} is missing"));
        if rendered == text {
            return;
        }
        if std::env::var_os("UPDATE_GENERATED").is_some_and(|v| v == "1") {
            std::fs::write(&path, rendered)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            eprintln!("rewrote the generated text of {rel}");
            return;
        }
        panic!(
            "{rel} is stale: its generated text differs from tracer-codec's layout tables. \
             Regenerate it with `UPDATE_GENERATED=1 cargo test -p tracer-codec`, then \
             review and commit the change (and update the hand-written display code if a \
             field was added)."
        );
    }

    #[test]
    fn dissector_tables_are_current() {
        // Generated whole: whatever the file holds (even nothing) is replaced.
        check_generated(LUA_LAYOUT_PATH, |_| Ok(render_lua()));
    }

    #[test]
    fn wire_format_doc_tables_are_current() {
        check_generated("docs/wire-format.md", splice_markdown);
    }

    #[test]
    fn renderings_hold_every_field() {
        let lua = render_lua();
        let md: String = render_markdown().into_iter().map(|t| t.text).collect();
        for e in EVENTS {
            for f in e.fields {
                let row = format!("{} = {{ offset = {}, size = {},", f.name, f.offset, f.size);
                assert!(lua.contains(&row), "lua lacks {row}");
                let row = format!("| {} | {} | {} |", f.offset, f.size, f.name);
                assert!(md.contains(&row), "markdown lacks {row}");
            }
            assert!(lua.contains(&format!("body_len = {},", e.body_len)));
        }
    }
}
