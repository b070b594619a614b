//! The field tables of `docs/wire-format.md`: [`render_markdown`] writes
//! each table between its own markers, [`splice_markdown`] puts them into
//! the document and leaves the prose around them as written.

use std::fmt::Write as _;

use super::field::{Field, FieldType};
use super::registry::{ACK_LAYOUT, CAPTURE_HEADER, DATAGRAM_HEADER, EVENTS, RECORD_HEADER};
use super::splice::splice;
use crate::wire::RECORD_HEADER_LEN;

/// Start of a generated table in `docs/wire-format.md`; `{}` is the
/// table's id (`dgram`, `record`, `kind-1`, ..., `capture`).
pub const MD_BEGIN: &str = "<!-- BEGIN GENERATED TABLE {} (tracer-codec layout.rs; regenerate: UPDATE_GENERATED=1 cargo test -p tracer-codec) -->";
/// End of a generated Markdown table.
pub const MD_END: &str = "<!-- END GENERATED TABLE {} -->";

/// A doc string as one Markdown table cell: intra-doc links become code,
/// no line breaks or pipes.
fn md_cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("[`", "`")
        .replace("`]", "`")
        .replace('|', "\\|")
}

/// A table of `fields`, then the variable-length `tail` (offset, type,
/// (name, doc)) if any.
fn md_fields(o: &mut String, fields: &[Field], tail: Option<(usize, FieldType, (&str, &str))>) {
    let _ = writeln!(o, "| offset | size | field | type | meaning |");
    let _ = writeln!(o, "|---|---|---|---|---|");
    for f in fields {
        let mut meaning = md_cell(f.doc);
        if let Some(t) = f.names {
            let _ = write!(meaning, " ({})", t.describe());
        }
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            f.offset,
            f.size,
            f.name,
            f.ty.name(),
            meaning
        );
    }
    if let Some((off, ty, (name, doc))) = tail {
        let _ = writeln!(
            o,
            "| {off} | n | {name} | {} | {} |",
            ty.name(),
            md_cell(doc)
        );
    }
}

/// One generated table of `docs/wire-format.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownTable {
    /// Its start marker line.
    pub begin: String,
    /// Its end marker line.
    pub end: String,
    /// Markers and table, as the document holds them.
    pub text: String,
}

fn md_table(
    id: &str,
    fields: &[Field],
    tail: Option<(usize, FieldType, (&str, &str))>,
    extra: &str,
) -> MarkdownTable {
    let begin = MD_BEGIN.replace("{}", id);
    let end = MD_END.replace("{}", id);
    let mut o = String::new();
    let _ = writeln!(o, "{begin}");
    md_fields(&mut o, fields, tail);
    o.push_str(extra);
    let _ = write!(o, "{end}");
    MarkdownTable {
        begin,
        end,
        text: o,
    }
}

/// The field tables of `docs/wire-format.md`, each between its own
/// markers so the prose around them stays hand-written.
pub fn render_markdown() -> Vec<MarkdownTable> {
    let mut out = Vec::new();
    let h = &DATAGRAM_HEADER;
    out.push(md_table(
        "dgram",
        h.fields,
        Some((h.fixed_len, FieldType::Text, h.tail)),
        "",
    ));
    out.push(md_table(
        "record",
        &RECORD_HEADER,
        Some((RECORD_HEADER_LEN, FieldType::Bytes, ("body", "`len` bytes"))),
        "",
    ));
    for e in EVENTS {
        let extra = if e.v1_body_len == e.body_len {
            format!(
                "\nKind {} ({}), version-1 body: {} bytes.\n",
                e.kind, e.name, e.body_len
            )
        } else {
            format!(
                "\nKind {} ({}), body: {} bytes; version-1 body: the first {} (fields from offset {} on were appended later; a reader takes a version-1 body and reads them as 0).\n",
                e.kind, e.name, e.body_len, e.v1_body_len, e.v1_body_len
            )
        };
        out.push(md_table(
            &format!("kind-{}", e.kind),
            e.fields,
            None,
            &extra,
        ));
    }
    let h = &ACK_LAYOUT;
    out.push(md_table(
        "ack",
        h.fields,
        Some((h.fixed_len, FieldType::Bytes, h.tail)),
        "",
    ));
    let h = &CAPTURE_HEADER;
    out.push(md_table(
        "capture",
        h.fields,
        Some((h.fixed_len, FieldType::Text, h.tail)),
        "| header_len | ... | record | bytes | the event record exactly as on the wire (kind, len, body) |\n",
    ));
    out
}

/// `doc` with every generated table replaced by its current rendering;
/// `Err(marker)` names the first marker missing.
pub fn splice_markdown(doc: &str) -> Result<String, String> {
    let mut text = doc.to_owned();
    for t in render_markdown() {
        text = splice(&text, &t.begin, &t.end, &t.text).ok_or(t.begin)?;
    }
    Ok(text)
}
