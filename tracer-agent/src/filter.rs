//! `--filter EXPR`: a small tcpdump-like flow filter (ports, hosts,
//! networks), parsed here and compiled into a fixed table the probes' BPF
//! programs evaluate (`bpf/include/filter.h`) before any ring output.
//!
//! Syntax (lowercase keywords, tokens separated by spaces or parentheses):
//!
//! ```text
//! expr      := group ("and" group)*
//! group     := "(" alt ")" | alt
//! alt       := primitive ("or" primitive)*
//! primitive := ["src" | "dst"] ("port" N | "host" ADDR | "net" ADDR/PREFIX)
//! ```
//!
//! `port`, `host` and `net` without `src`/`dst` match either end of the
//! flow. An `or` group next to an `and` must be in parentheses
//! (`(port 1 or port 2) and host 10.0.0.2`): tcpdump gives `and` and `or`
//! the same precedence, so the unparenthesized forms read differently to
//! different people and are refused. At most [`MAX_CLAUSES`] groups of at
//! most [`MAX_TERMS`] primitives each, so the BPF side runs a fixed,
//! small number of comparisons.
//!
//! Addresses are compared as 16 bytes, IPv4 as IPv4-mapped IPv6
//! (`::ffff:a.b.c.d`): `host 10.0.0.2` also matches a dual-stack socket's
//! mapped peer, and an IPv4 network never matches a native IPv6 address.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// Most `and` groups a filter may have (`FILTER_MAX_CLAUSES` in filter.h).
pub const MAX_CLAUSES: usize = 4;
/// Most primitives one group may have (`FILTER_MAX_TERMS` in filter.h).
pub const MAX_TERMS: usize = 8;

/// `--help` text of `--filter`.
pub const HELP: &str = "\
Record only events whose flow matches EXPR, evaluated in BPF before any \
output (tx, rx, drops and tcp probes). Primitives: `port N`, `host ADDR` \
(IPv4 or IPv6), `net ADDR/PREFIX`, each optionally preceded by `src` or \
`dst` (without it, either end matches); joined by `and`, and by `or` \
within parentheses when mixed with `and`. At most 4 `and` groups of at \
most 8 primitives. src/dst are the ends as the event shows them: for tx \
and tcp the local socket is src; for rx and drops the packet's source. \
Events without a flow (non-IP packets) never match. \
Examples: 'port 5201', 'port 5201 and host 10.0.0.2', \
'(port 5201 or port 5202) and src net 10.0.0.0/24'.";

/// Which end(s) of a flow a primitive looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Source or destination.
    Either,
    /// Source only.
    Src,
    /// Destination only.
    Dst,
}

/// What a primitive compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// A TCP/UDP port.
    Port(u16),
    /// An address network (`host` is a full-length prefix).
    Net {
        /// The network address (host bits zero).
        addr: IpAddr,
        /// Prefix length in bits of `addr`'s family.
        prefix: u8,
    },
}

/// One primitive: `[src|dst] port N` / `host ADDR` / `net CIDR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Primitive {
    /// The end(s) it applies to.
    pub end: End,
    /// What it compares.
    pub what: Match,
}

/// A parsed filter: a conjunction of clauses, each a disjunction of
/// primitives. The empty filter matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// The `and` groups.
    pub clauses: Vec<Vec<Primitive>>,
}

/// One primitive as the BPF side evaluates it: an end matches when its
/// port equals `port` (0: any port) and its 16-byte address, masked with
/// `mask`, equals `addr`. Words hold the address bytes in memory order
/// (as BPF loads them from the packet or socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Term {
    /// Look at the source end.
    pub src: bool,
    /// Look at the destination end.
    pub dst: bool,
    /// Port to equal, host order; 0 for any.
    pub port: u16,
    /// Masked address to equal.
    pub addr: [u32; 4],
    /// Mask applied to the end's address.
    pub mask: [u32; 4],
}

impl Primitive {
    /// The BPF form.
    pub fn term(&self) -> Term {
        let (src, dst) = match self.end {
            End::Either => (true, true),
            End::Src => (true, false),
            End::Dst => (false, true),
        };
        let mut t = Term {
            src,
            dst,
            ..Term::default()
        };
        match self.what {
            Match::Port(p) => t.port = p,
            Match::Net { addr, prefix } => {
                let (bytes, bits) = match addr {
                    IpAddr::V4(a) => (a.to_ipv6_mapped().octets(), 96 + u32::from(prefix)),
                    IpAddr::V6(a) => (a.octets(), u32::from(prefix)),
                };
                let mask_bits = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                let mask = mask_bits.to_be_bytes();
                for i in 0..4 {
                    let w = |b: &[u8; 16]| {
                        u32::from_ne_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
                    };
                    t.mask[i] = w(&mask);
                    t.addr[i] = w(&bytes) & t.mask[i];
                }
            }
        }
        t
    }
}

impl FlowFilter {
    /// True when it matches every flow (no `--filter`).
    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
    }

    /// The BPF form: one `Vec<Term>` per clause.
    pub fn terms(&self) -> Vec<Vec<Term>> {
        self.clauses
            .iter()
            .map(|c| c.iter().map(Primitive::term).collect())
            .collect()
    }
}

/// Writes a [`FlowFilter`] into a probe skeleton's `.rodata` field
/// `flow_filter` (C `struct filter_config` of filter.h). A macro because
/// every skeleton generates its own Rust copy of the C struct; the field
/// names checked here are the same in all of them.
#[macro_export]
macro_rules! write_flow_filter {
    ($rodata:expr, $filter:expr) => {{
        let dst = &mut $rodata.flow_filter;
        let terms = $crate::filter::FlowFilter::terms($filter);
        dst.n_clauses = terms.len() as u32;
        for (c, clause) in terms.iter().enumerate() {
            dst.clauses[c].n_terms = clause.len() as u32;
            for (i, t) in clause.iter().enumerate() {
                let d = &mut dst.clauses[c].terms[i];
                d.src = u8::from(t.src);
                d.dst = u8::from(t.dst);
                d.port = t.port;
                d.addr = t.addr;
                d.mask = t.mask;
            }
        }
    }};
}

/// Why a filter expression was refused. `column` is 1-based, in bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter column {column}: {kind}")]
pub struct FilterError {
    /// Where in the expression.
    pub column: usize,
    /// What is wrong.
    pub kind: FilterErrorKind,
}

/// What is wrong with a filter expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterErrorKind {
    /// The expression has no primitive at all.
    #[error("empty filter, expected e.g. `port 5201` or `host 10.0.0.2`")]
    Empty,
    /// A token other than the one the grammar allows here.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What would have been accepted.
        expected: &'static str,
        /// What was there (quoted), or "the end of the filter".
        found: String,
    },
    /// Not a port number.
    #[error("{0:?} is not a port number (1-65535)")]
    BadPort(String),
    /// Not an address.
    #[error("{0:?} is not an IPv4 or IPv6 address")]
    BadAddress(String),
    /// Not a network.
    #[error("{0:?} is not a network, expected ADDR/PREFIX (e.g. 10.0.0.0/24 or fd00::/64)")]
    BadNet(String),
    /// A network with host bits set (likely a typo in the prefix).
    #[error("{0:?} has bits set beyond its prefix (the network is {1})")]
    HostBits(String, String),
    /// `or` beside `and` without parentheses.
    #[error("`or` next to `and` needs parentheses, e.g. `(port 1 or port 2) and host 10.0.0.2`")]
    MixedAndOr,
    /// Too many `and` groups.
    #[error("more than {MAX_CLAUSES} `and` groups")]
    TooManyClauses,
    /// Too many primitives in one group.
    #[error("more than {MAX_TERMS} primitives in one `or` group")]
    TooManyTerms,
}

impl FromStr for FlowFilter {
    type Err = FilterError;

    fn from_str(s: &str) -> Result<Self, FilterError> {
        parse(s)
    }
}

impl fmt::Display for FlowFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.clauses.iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            let paren = c.len() > 1 && self.clauses.len() > 1;
            if paren {
                f.write_str("(")?;
            }
            for (j, p) in c.iter().enumerate() {
                if j > 0 {
                    f.write_str(" or ")?;
                }
                match p.end {
                    End::Either => {}
                    End::Src => f.write_str("src ")?,
                    End::Dst => f.write_str("dst ")?,
                }
                match p.what {
                    Match::Port(n) => write!(f, "port {n}")?,
                    Match::Net { addr, prefix } if prefix == full_prefix(addr) => {
                        write!(f, "host {addr}")?
                    }
                    Match::Net { addr, prefix } => write!(f, "net {addr}/{prefix}")?,
                }
            }
            if paren {
                f.write_str(")")?;
            }
        }
        Ok(())
    }
}

fn full_prefix(a: IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

/// A token and its 1-based column.
#[derive(Debug, Clone, Copy)]
struct Tok<'a> {
    text: &'a str,
    column: usize,
}

fn tokenize(s: &str) -> Vec<Tok<'_>> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    for (i, ch) in s.char_indices() {
        let sep = ch.is_whitespace() || ch == '(' || ch == ')';
        if sep {
            if let Some(b) = start.take() {
                out.push(Tok {
                    text: &s[b..i],
                    column: b + 1,
                });
            }
            if ch != ' ' && !ch.is_whitespace() {
                out.push(Tok {
                    text: &s[i..i + 1],
                    column: i + 1,
                });
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(b) = start {
        out.push(Tok {
            text: &s[b..],
            column: b + 1,
        });
    }
    out
}

struct Parser<'a> {
    toks: Vec<Tok<'a>>,
    pos: usize,
    /// Column just past the input, for errors at its end.
    end_column: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.pos).copied()
    }

    fn err(&self, kind: FilterErrorKind) -> FilterError {
        FilterError {
            column: self.peek().map_or(self.end_column, |t| t.column),
            kind,
        }
    }

    fn expected(&self, expected: &'static str) -> FilterError {
        let found = self.peek().map_or_else(
            || "the end of the filter".to_owned(),
            |t| format!("{:?}", t.text),
        );
        self.err(FilterErrorKind::Expected { expected, found })
    }

    /// The next token's text, consumed, or an "expected" error.
    fn word(&mut self, expected: &'static str) -> Result<Tok<'a>, FilterError> {
        match self.peek() {
            Some(t) if t.text != "(" && t.text != ")" => {
                self.pos += 1;
                Ok(t)
            }
            _ => Err(self.expected(expected)),
        }
    }

    fn primitive(&mut self) -> Result<Primitive, FilterError> {
        const WHAT: &str = "`port`, `host`, `net`, `src` or `dst`";
        const AFTER_END: &str = "`port`, `host` or `net` after `src`/`dst`";
        let mut end = End::Either;
        let mut kw = self.word(WHAT)?;
        if kw.text == "src" || kw.text == "dst" {
            end = if kw.text == "src" { End::Src } else { End::Dst };
            kw = self.word(AFTER_END)?;
        }
        let what = match kw.text {
            "port" => {
                let v = self.word("a port number after `port`")?;
                match v.text.parse::<u16>() {
                    Ok(n) if n > 0 => Match::Port(n),
                    _ => return Err(at(v, FilterErrorKind::BadPort(v.text.into()))),
                }
            }
            "host" => {
                let v = self.word("an address after `host`")?;
                let addr: IpAddr = v
                    .text
                    .parse()
                    .map_err(|_| at(v, FilterErrorKind::BadAddress(v.text.into())))?;
                Match::Net {
                    addr,
                    prefix: full_prefix(addr),
                }
            }
            "net" => {
                let v = self.word("a network (ADDR/PREFIX) after `net`")?;
                parse_net(v.text).map_err(|k| at(v, k))?
            }
            _ => {
                self.pos -= 1;
                return Err(self.expected(if end == End::Either { WHAT } else { AFTER_END }));
            }
        };
        Ok(Primitive { end, what })
    }

    /// An `or` chain; returns it and whether it had an `or`.
    fn alt(&mut self) -> Result<(Vec<Primitive>, Option<usize>), FilterError> {
        let mut v = vec![self.primitive()?];
        let mut first_or = None;
        while let Some(t) = self.peek().filter(|t| t.text == "or") {
            first_or.get_or_insert(t.column);
            self.pos += 1;
            if v.len() == MAX_TERMS {
                return Err(self.err(FilterErrorKind::TooManyTerms));
            }
            v.push(self.primitive()?);
        }
        Ok((v, first_or))
    }
}

fn at(t: Tok<'_>, kind: FilterErrorKind) -> FilterError {
    FilterError {
        column: t.column,
        kind,
    }
}

fn parse_net(s: &str) -> Result<Match, FilterErrorKind> {
    let bad = || FilterErrorKind::BadNet(s.into());
    let (a, p) = s.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    let prefix: u8 = p.parse().map_err(|_| bad())?;
    if prefix > full_prefix(addr) {
        return Err(bad());
    }
    let masked = match addr {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::from((u32::from(v4) & m).to_be_bytes())
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    };
    if masked != addr {
        return Err(FilterErrorKind::HostBits(
            s.into(),
            format!("{masked}/{prefix}"),
        ));
    }
    Ok(Match::Net { addr, prefix })
}

/// Parse a filter expression (see the module docs for the syntax).
pub fn parse(s: &str) -> Result<FlowFilter, FilterError> {
    let mut p = Parser {
        toks: tokenize(s),
        pos: 0,
        end_column: s.len() + 1,
    };
    if p.toks.is_empty() {
        return Err(FilterError {
            column: 1,
            kind: FilterErrorKind::Empty,
        });
    }
    let mut clauses = Vec::new();
    // Column of an unparenthesized `or`, refused once there is an `and`.
    let mut bare_or: Option<usize> = None;
    loop {
        if clauses.len() == MAX_CLAUSES {
            return Err(p.err(FilterErrorKind::TooManyClauses));
        }
        let clause = if p.peek().is_some_and(|t| t.text == "(") {
            p.pos += 1;
            let (c, _) = p.alt()?;
            if p.peek().is_none_or(|t| t.text != ")") {
                return Err(p.expected("`or` or `)`"));
            }
            p.pos += 1;
            c
        } else {
            let (c, or) = p.alt()?;
            if bare_or.is_none() {
                bare_or = or;
            }
            c
        };
        clauses.push(clause);
        match p.peek() {
            None => break,
            Some(t) if t.text == "and" => p.pos += 1,
            Some(_) => return Err(p.expected("`and`, `or` or the end of the filter")),
        }
    }
    if clauses.len() > 1 {
        if let Some(column) = bare_or {
            return Err(FilterError {
                column,
                kind: FilterErrorKind::MixedAndOr,
            });
        }
    }
    Ok(FlowFilter { clauses })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> FlowFilter {
        parse(s).unwrap_or_else(|e| panic!("{s:?} refused: {e}"))
    }

    fn err(s: &str) -> FilterError {
        match parse(s) {
            Ok(f) => panic!("{s:?} accepted as {f:?}"),
            Err(e) => e,
        }
    }

    fn port(end: End, n: u16) -> Primitive {
        Primitive {
            end,
            what: Match::Port(n),
        }
    }

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(ok("port 5201").clauses, [vec![port(End::Either, 5201)]]);
        let f = ok("port 5201 and host 10.0.0.2");
        assert_eq!(f.clauses.len(), 2);
        assert_eq!(
            f.clauses[1][0].what,
            Match::Net {
                addr: "10.0.0.2".parse().unwrap(),
                prefix: 32
            }
        );
        assert_eq!(
            ok("src port 1 or dst port 2").clauses,
            [vec![port(End::Src, 1), port(End::Dst, 2)]]
        );
        let f = ok("(port 5201 or port 5202) and src net 10.0.0.0/24");
        assert_eq!(f.clauses[0].len(), 2);
        assert_eq!(f.clauses[1][0].end, End::Src);
        assert_eq!(ok("dst host fd00::1").clauses[0][0].end, End::Dst);
        assert_eq!(ok("net ::/0").clauses.len(), 1);
        assert_eq!(ok("(port 1)and(port 2)").clauses.len(), 2);
        assert_eq!(ok("  port\t7  ").clauses, [vec![port(End::Either, 7)]]);
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "port 5201",
            "src port 1 or dst host 10.0.0.2",
            "(port 1 or port 2) and net 10.0.0.0/8 and dst host fd00::1",
        ] {
            assert_eq!(ok(s).to_string(), s);
            assert_eq!(ok(&ok(s).to_string()), ok(s));
        }
    }

    #[test]
    fn refuses_with_what_and_where() {
        let cases: &[(&str, usize, &str)] = &[
            ("", 1, "empty filter"),
            ("port x", 6, "\"x\" is not a port number"),
            ("port 0", 6, "not a port number"),
            ("port 65536", 6, "not a port number"),
            (
                "port",
                5,
                "expected a port number after `port`, found the end",
            ),
            ("host 10.0.0.300", 6, "not an IPv4 or IPv6 address"),
            ("net 10.0.0.0", 5, "expected ADDR/PREFIX"),
            ("net 10.0.0.0/33", 5, "is not a network"),
            ("net 10.0.0.1/24", 5, "the network is 10.0.0.0/24"),
            (
                "proto tcp",
                1,
                "expected `port`, `host`, `net`, `src` or `dst`, found \"proto\"",
            ),
            ("src 80", 5, "after `src`/`dst`"),
            ("port 1 port 2", 8, "expected `and`, `or` or the end"),
            ("port 1 and", 11, "found the end of the filter"),
            ("port 1 or port 2 and host 10.0.0.2", 8, "needs parentheses"),
            (
                "host 10.0.0.2 and port 1 or port 2",
                26,
                "needs parentheses",
            ),
            ("(port 1 or port 2", 18, "expected `or` or `)`"),
            ("((port 1))", 2, "expected `port`"),
            ("port 1 )", 8, "expected `and`"),
            ("not port 1", 1, "found \"not\""),
        ];
        for (s, col, msg) in cases {
            let e = err(s);
            assert_eq!(e.column, *col, "{s:?}: {e}");
            assert!(e.to_string().contains(msg), "{s:?}: {e}");
            assert!(e.to_string().starts_with(&format!("filter column {col}:")));
        }
    }

    #[test]
    fn limits_clauses_and_terms() {
        let terms = |n: usize| {
            (1..=n)
                .map(|i| format!("port {i}"))
                .collect::<Vec<_>>()
                .join(" or ")
        };
        assert_eq!(ok(&terms(MAX_TERMS)).clauses[0].len(), MAX_TERMS);
        assert_eq!(
            err(&terms(MAX_TERMS + 1)).kind,
            FilterErrorKind::TooManyTerms
        );
        let clauses = |n: usize| vec!["port 1"; n].join(" and ");
        assert_eq!(ok(&clauses(MAX_CLAUSES)).clauses.len(), MAX_CLAUSES);
        assert_eq!(
            err(&clauses(MAX_CLAUSES + 1)).kind,
            FilterErrorKind::TooManyClauses
        );
    }

    #[test]
    fn terms_are_what_bpf_compares() {
        // IPv4 as IPv4-mapped IPv6, words in memory order.
        let t = ok("src host 10.0.0.2").clauses[0][0].term();
        assert!(t.src && !t.dst && t.port == 0);
        let bytes: Vec<u8> = t.addr.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(
            bytes,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]
        );
        assert_eq!(t.mask, [u32::MAX; 4]);
        let t = ok("net 10.1.0.0/16").clauses[0][0].term();
        let mask: Vec<u8> = t.mask.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&mask[8..], [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0]);
        let t = ok("net ::/0").clauses[0][0].term();
        assert_eq!((t.mask, t.addr), ([0; 4], [0; 4]));
        let t = ok("port 5201").clauses[0][0].term();
        assert_eq!((t.src, t.dst, t.port, t.mask), (true, true, 5201, [0; 4]));
    }
}
