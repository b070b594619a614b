//! `--filter EXPR`: a small tcpdump-like flow filter (ports and port
//! ranges, hosts, networks, TCP/UDP, negation), parsed here and compiled
//! into a fixed table the probes' BPF programs evaluate
//! (`ebpf/include/filter.h`) before any ring output.
//!
//! Syntax (lowercase keywords, tokens separated by spaces or parentheses):
//!
//! ```text
//! expr      := group ("and" group)*
//! group     := "(" alt ")" | "not" "(" alt ")" | alt
//! alt       := primitive ("or" primitive)*
//! primitive := ["not"] (proto | [proto] [dir] ports | [dir] address)
//! proto     := "tcp" | "udp"
//! dir       := "src" | "dst"
//! ports     := "port" N | "port" N-M | "portrange" N-M
//! address   := "host" ADDR | "net" ADDR/PREFIX
//! ```
//!
//! `port`, `host` and `net` without `src`/`dst` match either end of the
//! flow, and `not` negates what follows as a whole (`not port 22`: neither
//! end is 22, as in tcpdump). `tcp`/`udp` alone match the flow's protocol;
//! before `port` they qualify it (`tcp dst port 80`). `not ( alt )` is a
//! whole `and` group and becomes one group per negated primitive
//! (De Morgan), so it counts against the group limit. An `or` group next
//! to an `and` must be in parentheses (`(port 1 or port 2) and host
//! 10.0.0.2`): tcpdump gives `and` and `or` the same precedence, so the
//! unparenthesized forms read differently to different people and are
//! refused. At most [`MAX_CLAUSES`] groups of at most [`MAX_TERMS`]
//! primitives each, so the BPF side runs a fixed, small number of
//! comparisons.
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
output (tx, rx, drops and tcp probes). Primitives: `port N`, `port N-M` \
(or `portrange N-M`), `host ADDR` (IPv4 or IPv6), `net ADDR/PREFIX`, each \
optionally preceded by `src` or `dst` (without it, either end matches); \
`tcp` and `udp` (alone: the flow's protocol; before a port primitive: \
`tcp dst port 80`); `not` before any primitive negates it (`not port 22`: \
neither end). Joined by `and`, and by `or` within parentheses when mixed \
with `and`; `not (A or B)` is a whole `and` group. At most 4 `and` groups \
(a `not (...)` group counts one per primitive) of at most 8 primitives. \
src/dst are the ends as the event shows them: for tx and tcp the local \
socket is src; for rx and drops the packet's source. Events without a \
flow (non-IP packets) never match, `not` or not. \
Examples: 'port 5201', 'port 5201 and host 10.0.0.2', \
'(port 5201 or port 5202) and src net 10.0.0.0/24', \
'tcp and portrange 5000-5100', 'not port 22', 'udp and not dst port 53'.";

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

/// An IP protocol a primitive requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
}

impl Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// What a primitive compares at an end of the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// A TCP/UDP port in `lo..=hi` (`port N` is `lo == hi`).
    Ports {
        /// Lowest port.
        lo: u16,
        /// Highest port.
        hi: u16,
    },
    /// An address network (`host` is a full-length prefix).
    Net {
        /// The network address (host bits zero).
        addr: IpAddr,
        /// Prefix length in bits of `addr`'s family.
        prefix: u8,
    },
}

/// One primitive: `[not] [tcp|udp] [src|dst] port N`, `[not] [src|dst]
/// host ADDR`, `[not] tcp`, ...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Primitive {
    /// Negated: matches when the rest does not.
    pub not: bool,
    /// The protocol the flow must have, if any.
    pub proto: Option<Proto>,
    /// The end(s) `what` applies to.
    pub end: End,
    /// What the end must match; None for a protocol alone (`tcp`).
    pub what: Option<Match>,
}

/// A parsed filter: a conjunction of clauses, each a disjunction of
/// primitives. The empty filter matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// The `and` groups.
    pub clauses: Vec<Vec<Primitive>>,
}

/// One primitive as the BPF side evaluates it: an end matches when its
/// port is in `port_lo..=port_hi` and its 16-byte address, masked with
/// `mask`, equals `addr`; the term matches when an end it looks at
/// matches and the flow's protocol is `proto` (0: any), or, with `negate`,
/// when that is false. Words hold the address bytes in memory order (as
/// BPF loads them from the packet or socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    /// Look at the source end.
    pub src: bool,
    /// Look at the destination end.
    pub dst: bool,
    /// IP protocol the flow must have; 0 for any.
    pub proto: u8,
    /// Match when the rest does not.
    pub negate: bool,
    /// Lowest port, host order.
    pub port_lo: u16,
    /// Highest port, host order.
    pub port_hi: u16,
    /// Masked address to equal.
    pub addr: [u32; 4],
    /// Mask applied to the end's address.
    pub mask: [u32; 4],
}

impl Default for Term {
    /// Matches every flow: both ends, any port, any address, any protocol.
    fn default() -> Self {
        Term {
            src: true,
            dst: true,
            proto: 0,
            negate: false,
            port_lo: 0,
            port_hi: u16::MAX,
            addr: [0; 4],
            mask: [0; 4],
        }
    }
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
            proto: self.proto.map_or(0, Proto::number),
            negate: self.not,
            ..Term::default()
        };
        match self.what {
            None => {}
            Some(Match::Ports { lo, hi }) => {
                t.port_lo = lo;
                t.port_hi = hi;
            }
            Some(Match::Net { addr, prefix }) => {
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
                d.proto = t.proto;
                d.negate = u8::from(t.negate);
                d.port_lo = t.port_lo;
                d.port_hi = t.port_hi;
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
    /// Not a port range.
    #[error("{0:?} is not a port range, expected LOW-HIGH (e.g. 5000-5100)")]
    BadPortRange(String),
    /// A port range whose low end is above its high end.
    #[error("port range {0:?} runs backwards: write the lower port first")]
    BackwardsRange(String),
    /// Not an address.
    #[error("{0:?} is not an IPv4 or IPv6 address")]
    BadAddress(String),
    /// Not a network.
    #[error("{0:?} is not a network, expected ADDR/PREFIX (e.g. 10.0.0.0/24 or fd00::/64)")]
    BadNet(String),
    /// A network with host bits set (likely a typo in the prefix).
    #[error("{0:?} has bits set beyond its prefix (the network is {1})")]
    HostBits(String, String),
    /// `tcp`/`udp` before `host` or `net`.
    #[error(
        "`{0}` qualifies `port` and `portrange` only; for an address write `{0} and host ...`"
    )]
    ProtoBeforeAddress(&'static str),
    /// `src`/`dst` before `tcp`/`udp`.
    #[error("the protocol comes first: `{0} src port N`, not `src {0} ...`")]
    ProtoAfterDirection(&'static str),
    /// `not (...)` where it cannot be a whole `and` group.
    #[error("`not (...)` must be a whole `and` group (e.g. `not (port 1 or port 2) and host 10.0.0.2`); inside `or`, negate each primitive")]
    NestedNotGroup,
    /// `or` beside `and` without parentheses.
    #[error("`or` next to `and` needs parentheses, e.g. `(port 1 or port 2) and host 10.0.0.2`")]
    MixedAndOr,
    /// Too many `and` groups.
    #[error("more than {MAX_CLAUSES} `and` groups (a `not (...)` group counts one per primitive)")]
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

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.not {
            f.write_str("not ")?;
        }
        if let Some(p) = self.proto {
            f.write_str(p.word())?;
            if self.what.is_some() {
                f.write_str(" ")?;
            }
        }
        let Some(what) = self.what else {
            return Ok(());
        };
        match self.end {
            End::Either => {}
            End::Src => f.write_str("src ")?,
            End::Dst => f.write_str("dst ")?,
        }
        match what {
            Match::Ports { lo, hi } if lo == hi => write!(f, "port {lo}"),
            Match::Ports { lo, hi } => write!(f, "portrange {lo}-{hi}"),
            Match::Net { addr, prefix } if prefix == full_prefix(addr) => write!(f, "host {addr}"),
            Match::Net { addr, prefix } => write!(f, "net {addr}/{prefix}"),
        }
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
                write!(f, "{p}")?;
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

/// What may start a primitive, for errors.
const WHAT: &str = "`port`, `portrange`, `host`, `net`, `tcp`, `udp`, `src`, `dst` or `not`";

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.pos).copied()
    }

    fn peek_is(&self, word: &str) -> bool {
        self.peek().is_some_and(|t| t.text == word)
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
        const AFTER_END: &str = "`port`, `portrange`, `host` or `net` after `src`/`dst`";
        const AFTER_PROTO: &str =
            "`port`, `portrange`, `src`, `dst`, `and`, `or`, `)` or the end after `tcp`/`udp`";
        let mut not = false;
        while self.peek_is("not") {
            if self.toks.get(self.pos + 1).is_some_and(|t| t.text == "(") {
                return Err(self.err(FilterErrorKind::NestedNotGroup));
            }
            self.pos += 1;
            not = !not;
        }
        let mut proto = None;
        let mut end = End::Either;
        let mut kw = self.word(WHAT)?;
        if let Some(p) = proto_word(kw.text) {
            proto = Some(p);
            // A protocol alone, or qualifying the port primitive after it.
            match self.peek().map(|t| t.text) {
                None | Some("and" | "or" | ")") => {
                    return Ok(Primitive {
                        not,
                        proto,
                        end,
                        what: None,
                    })
                }
                Some("host" | "net") => {
                    return Err(self.err(FilterErrorKind::ProtoBeforeAddress(p.word())))
                }
                _ => kw = self.word(AFTER_PROTO)?,
            }
        }
        if kw.text == "src" || kw.text == "dst" {
            end = if kw.text == "src" { End::Src } else { End::Dst };
            kw = self.word(AFTER_END)?;
            if let Some(p) = proto_word(kw.text) {
                return Err(at(kw, FilterErrorKind::ProtoAfterDirection(p.word())));
            }
        }
        let what = match kw.text {
            "port" => {
                let v = self.word("a port or a range after `port`")?;
                if v.text.contains('-') {
                    parse_range(v)?
                } else {
                    let n = parse_port(v.text)
                        .ok_or_else(|| at(v, FilterErrorKind::BadPort(v.text.into())))?;
                    Match::Ports { lo: n, hi: n }
                }
            }
            "portrange" => parse_range(self.word("a range LOW-HIGH after `portrange`")?)?,
            "host" | "net" if proto.is_some() => {
                self.pos -= 1;
                return Err(self.err(FilterErrorKind::ProtoBeforeAddress(
                    proto.map_or("tcp", Proto::word),
                )));
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
                return Err(self.expected(match (proto, end) {
                    (Some(_), End::Either) => AFTER_PROTO,
                    (_, End::Either) => WHAT,
                    _ => AFTER_END,
                }));
            }
        };
        Ok(Primitive {
            not,
            proto,
            end,
            what: Some(what),
        })
    }

    /// An `or` chain; returns it and the column of its first `or`.
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

    /// `( alt )`, the opening parenthesis next.
    fn paren_alt(&mut self) -> Result<Vec<Primitive>, FilterError> {
        self.pos += 1;
        let (c, _) = self.alt()?;
        if !self.peek_is(")") {
            return Err(self.expected("`or` or `)`"));
        }
        self.pos += 1;
        Ok(c)
    }
}

fn proto_word(w: &str) -> Option<Proto> {
    match w {
        "tcp" => Some(Proto::Tcp),
        "udp" => Some(Proto::Udp),
        _ => None,
    }
}

fn at(t: Tok<'_>, kind: FilterErrorKind) -> FilterError {
    FilterError {
        column: t.column,
        kind,
    }
}

fn parse_port(s: &str) -> Option<u16> {
    s.parse::<u16>().ok().filter(|n| *n > 0)
}

fn parse_range(v: Tok<'_>) -> Result<Match, FilterError> {
    let bad = || at(v, FilterErrorKind::BadPortRange(v.text.into()));
    let (lo, hi) = v.text.split_once('-').ok_or_else(bad)?;
    let (Some(lo), Some(hi)) = (parse_port(lo), parse_port(hi)) else {
        return Err(bad());
    };
    if lo > hi {
        return Err(at(v, FilterErrorKind::BackwardsRange(v.text.into())));
    }
    Ok(Match::Ports { lo, hi })
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
    let mut clauses: Vec<Vec<Primitive>> = Vec::new();
    // Column of an unparenthesized `or`, refused once there is an `and`.
    let mut bare_or: Option<usize> = None;
    loop {
        let group_at = p.peek().map_or(p.end_column, |t| t.column);
        let paren = p.peek_is("(")
            || (p.peek_is("not") && p.toks.get(p.pos + 1).is_some_and(|t| t.text == "("));
        let new: Vec<Vec<Primitive>> = if p.peek_is("(") {
            vec![p.paren_alt()?]
        } else if p.peek_is("not") && p.toks.get(p.pos + 1).is_some_and(|t| t.text == "(") {
            // not (a or b) == not a and not b: one group per primitive.
            p.pos += 1;
            p.paren_alt()?
                .into_iter()
                .map(|mut prim| {
                    prim.not = !prim.not;
                    vec![prim]
                })
                .collect()
        } else {
            let (c, or) = p.alt()?;
            if bare_or.is_none() {
                bare_or = or;
            }
            vec![c]
        };
        if clauses.len() + new.len() > MAX_CLAUSES {
            return Err(FilterError {
                column: group_at,
                kind: FilterErrorKind::TooManyClauses,
            });
        }
        clauses.extend(new);
        match p.peek() {
            None => break,
            Some(t) if t.text == "and" => p.pos += 1,
            // After a parenthesized group an `or` has nowhere to go.
            Some(t) if t.text == "or" && paren => {
                return Err(p.expected(
                    "`and` or the end of the filter (an `or` goes inside the parentheses)",
                ))
            }
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

    fn prim(end: End, what: Match) -> Primitive {
        Primitive {
            not: false,
            proto: None,
            end,
            what: Some(what),
        }
    }

    fn port(end: End, n: u16) -> Primitive {
        prim(end, Match::Ports { lo: n, hi: n })
    }

    fn not(p: Primitive) -> Primitive {
        Primitive { not: !p.not, ..p }
    }

    fn proto(p: Proto) -> Primitive {
        Primitive {
            not: false,
            proto: Some(p),
            end: End::Either,
            what: None,
        }
    }

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(ok("port 5201").clauses, [vec![port(End::Either, 5201)]]);
        let f = ok("port 5201 and host 10.0.0.2");
        assert_eq!(f.clauses.len(), 2);
        assert_eq!(
            f.clauses[1][0].what,
            Some(Match::Net {
                addr: "10.0.0.2".parse().unwrap(),
                prefix: 32
            })
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
    fn not_protocols_and_port_ranges() {
        let range = Match::Ports { lo: 5000, hi: 5100 };
        assert_eq!(
            ok("portrange 5000-5100").clauses,
            [vec![prim(End::Either, range)]]
        );
        assert_eq!(ok("port 5000-5100"), ok("portrange 5000-5100"));
        assert_eq!(ok("dst port 1-1").clauses, [vec![port(End::Dst, 1)]]);
        assert_eq!(ok("tcp").clauses, [vec![proto(Proto::Tcp)]]);
        assert_eq!(ok("not udp").clauses, [vec![not(proto(Proto::Udp))]]);
        assert_eq!(
            ok("tcp dst port 80").clauses,
            [vec![Primitive {
                proto: Some(Proto::Tcp),
                ..port(End::Dst, 80)
            }]]
        );
        assert_eq!(
            ok("udp portrange 1-1023").clauses[0][0],
            Primitive {
                proto: Some(Proto::Udp),
                ..prim(End::Either, Match::Ports { lo: 1, hi: 1023 })
            }
        );
        assert_eq!(
            ok("not port 22").clauses,
            [vec![not(port(End::Either, 22))]]
        );
        assert_eq!(ok("not not port 22"), ok("port 22"));
        assert_eq!(
            ok("tcp and not src host 10.0.0.1").clauses[1][0],
            not(prim(
                End::Src,
                Match::Net {
                    addr: "10.0.0.1".parse().unwrap(),
                    prefix: 32
                }
            ))
        );
        assert_eq!(
            ok("port 1 or not port 2").clauses,
            [vec![port(End::Either, 1), not(port(End::Either, 2))]]
        );
        // De Morgan: one group per negated primitive.
        assert_eq!(
            ok("not (port 1 or port 2) and tcp").clauses,
            [
                vec![not(port(End::Either, 1))],
                vec![not(port(End::Either, 2))],
                vec![proto(Proto::Tcp)]
            ]
        );
        assert_eq!(ok("not (not port 1)"), ok("port 1"));
        // Protocol words end a primitive before `and`, `or` and `)`.
        assert_eq!(ok("(tcp or udp) and port 53").clauses[0].len(), 2);
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "port 5201",
            "src port 1 or dst host 10.0.0.2",
            "(port 1 or port 2) and net 10.0.0.0/8 and dst host fd00::1",
            "tcp and portrange 5000-5100",
            "not tcp dst port 80 or udp",
            "not port 1 and not port 2 and not src net fd00::/8",
        ] {
            assert_eq!(ok(s).to_string(), s);
            assert_eq!(ok(&ok(s).to_string()), ok(s));
        }
        assert_eq!(ok("port 5-6").to_string(), "portrange 5-6");
        assert_eq!(
            ok("not (port 1 or udp)").to_string(),
            "not port 1 and not udp"
        );
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
                "expected a port or a range after `port`, found the end",
            ),
            ("host 10.0.0.300", 6, "not an IPv4 or IPv6 address"),
            ("net 10.0.0.0", 5, "expected ADDR/PREFIX"),
            ("net 10.0.0.0/33", 5, "is not a network"),
            ("net 10.0.0.1/24", 5, "the network is 10.0.0.0/24"),
            (
                "proto tcp",
                1,
                "expected `port`, `portrange`, `host`, `net`, `tcp`, `udp`, `src`, `dst` or `not`, found \"proto\"",
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
            // Port ranges.
            ("portrange 5000", 11, "is not a port range, expected LOW-HIGH"),
            ("port 5100-5000", 6, "runs backwards"),
            ("portrange 0-10", 11, "is not a port range"),
            ("port 1-", 6, "is not a port range"),
            ("portrange", 10, "expected a range LOW-HIGH after `portrange`"),
            // Protocols.
            ("tcp host 10.0.0.1", 5, "`tcp` qualifies `port` and `portrange` only"),
            ("udp net 10.0.0.0/8", 5, "write `udp and host ...`"),
            ("src tcp port 1", 5, "the protocol comes first: `tcp src port N`"),
            ("tcp tcp", 5, "after `tcp`/`udp`, found \"tcp\""),
            ("icmp", 1, "found \"icmp\""),
            // Negation.
            ("not", 4, "found the end of the filter"),
            ("port 1 or not (port 2 or port 3)", 11, "must be a whole `and` group"),
            ("not (port 1) or port 2", 14, "an `or` goes inside the parentheses"),
            ("(port 1) or port 2", 10, "an `or` goes inside the parentheses"),
            ("not )", 5, "expected `port`"),
            (
                "not (port 1 or port 2 or port 3) and port 4 and port 5",
                49,
                "more than 4 `and` groups",
            ),
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
        let nots = |n: usize| format!("not ({})", terms(n));
        assert_eq!(ok(&nots(MAX_CLAUSES)).clauses.len(), MAX_CLAUSES);
        assert_eq!(
            err(&nots(MAX_CLAUSES + 1)).kind,
            FilterErrorKind::TooManyClauses
        );
    }

    #[test]
    fn terms_are_what_bpf_compares() {
        // IPv4 as IPv4-mapped IPv6, words in memory order.
        let t = ok("src host 10.0.0.2").clauses[0][0].term();
        assert!(t.src && !t.dst && !t.negate);
        assert_eq!((t.port_lo, t.port_hi, t.proto), (0, u16::MAX, 0));
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
        assert_eq!(
            (t.src, t.dst, t.port_lo, t.port_hi, t.mask),
            (true, true, 5201, 5201, [0; 4])
        );
        let t = ok("not tcp dst portrange 10-20").clauses[0][0].term();
        assert_eq!(
            (t.src, t.dst, t.proto, t.negate, t.port_lo, t.port_hi),
            (false, true, 6, true, 10, 20)
        );
        // A protocol alone: any end, any port, any address.
        let t = ok("udp").clauses[0][0].term();
        assert_eq!(
            t,
            Term {
                proto: 17,
                ..Term::default()
            }
        );
    }

    /// filter.h's evaluation, compiled for the host: each stdin line is a
    /// filter's terms and a flow; each output line whether it matches.
    const C_EVAL: &str = r#"
#include "filter.h"
static unsigned u(void) { unsigned v = 0; if (scanf("%u", &v) != 1) v = 0; return v; }
int main(void) {
	unsigned n;
	while (scanf("%u", &n) == 1) {
		struct skb_flow f;
		memset(&flow_filter, 0, sizeof(flow_filter));
		flow_filter.n_clauses = n;
		for (unsigned c = 0; c < n; c++) {
			struct filter_clause *cl = &flow_filter.clauses[c];
			cl->n_terms = u();
			for (unsigned i = 0; i < cl->n_terms; i++) {
				struct filter_term *t = &cl->terms[i];
				t->src = u(); t->dst = u(); t->proto = u(); t->negate = u();
				t->port_lo = u(); t->port_hi = u();
				for (int w = 0; w < 4; w++) t->addr[w] = u();
				for (int w = 0; w < 4; w++) t->mask[w] = u();
			}
		}
		memset(&f, 0, sizeof(f));
		f.family = u(); f.sport = u(); f.dport = u(); f.l4proto = u();
		for (int b = 0; b < 16; b++) f.saddr[b] = u();
		for (int b = 0; b < 16; b++) f.daddr[b] = u();
		printf("%d\n", skb_flow_parsed_matches(&f, false));
	}
	return 0;
}
"#;

    /// A flow as the probes see it: (source, sport, destination, dport, protocol).
    type Flow = (IpAddr, u16, IpAddr, u16, u8);

    /// Does each filter keep its flow, as the BPF programs decide it
    /// (filter.h compiled with the host's C compiler)?
    fn bpf_eval(cases: &[(FlowFilter, Flow)]) -> Vec<bool> {
        use std::fmt::Write as _;
        let mut input = String::new();
        for (filter, (sa, sp, da, dp, proto)) in cases {
            let terms = filter.terms();
            write!(input, "{}", terms.len()).unwrap();
            for clause in &terms {
                write!(input, " {}", clause.len()).unwrap();
                for t in clause {
                    write!(
                        input,
                        " {} {} {} {} {} {}",
                        u8::from(t.src),
                        u8::from(t.dst),
                        t.proto,
                        u8::from(t.negate),
                        t.port_lo,
                        t.port_hi
                    )
                    .unwrap();
                    for w in t.addr.iter().chain(&t.mask) {
                        write!(input, " {w}").unwrap();
                    }
                }
            }
            // As a packet's headers give it: IPv4 in the first 4 bytes.
            let bytes = |a: &IpAddr| match a {
                IpAddr::V4(v4) => {
                    let mut b = [0u8; 16];
                    b[..4].copy_from_slice(&v4.octets());
                    b
                }
                IpAddr::V6(v6) => v6.octets(),
            };
            let family = if sa.is_ipv4() { 4 } else { 6 };
            write!(input, " {family} {sp} {dp} {proto}").unwrap();
            for b in bytes(sa).iter().chain(&bytes(da)) {
                write!(input, " {b}").unwrap();
            }
            input.push('\n');
        }
        crate::host_c::run_header_program(C_EVAL, &input)
            .lines()
            .map(|l| l == "1")
            .collect()
    }

    #[test]
    fn negation_and_protocols_mean_what_tcpdump_means() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let v6a: IpAddr = "fd00::1".parse().unwrap();
        let v6b: IpAddr = "fd00::2".parse().unwrap();
        // (expression, sport, dport, protocol, kept?, why)
        let mut cases: Vec<(&str, u16, u16, u8, bool, &str)> = vec![
            ("not port 22", 40000, 80, 6, true, "neither end is 22"),
            ("not port 22", 40000, 22, 6, false, "the destination is 22"),
            ("not port 22", 22, 80, 6, false, "the source is 22"),
            (
                "not src port 22",
                40000,
                22,
                6,
                true,
                "only the source counts",
            ),
            ("tcp", 1, 2, 6, true, "TCP"),
            ("tcp", 1, 2, 17, false, "UDP is not TCP"),
            ("not tcp", 1, 2, 17, true, "UDP is not TCP"),
            ("not tcp", 1, 2, 6, false, "TCP"),
            ("udp", 1, 2, 17, true, "UDP"),
            ("tcp dst port 80", 1, 80, 6, true, "TCP to 80"),
            (
                "tcp dst port 80",
                1,
                80,
                17,
                false,
                "the protocol qualifies",
            ),
            ("tcp dst port 80", 80, 1, 6, false, "and so does the end"),
            ("not tcp port 80", 1, 80, 17, true, "negates the whole"),
            ("not tcp port 80", 1, 80, 6, false, "negates the whole"),
            ("portrange 5000-5100", 5000, 1, 6, true, "low end"),
            ("port 5000-5100", 1, 5100, 17, true, "high end"),
            ("portrange 5000-5100", 4999, 5101, 6, false, "just outside"),
            (
                "not portrange 5000-5100",
                4999,
                5101,
                6,
                true,
                "just outside",
            ),
            ("not host 10.0.0.3", 1, 2, 6, true, "another host"),
            ("not host 10.0.0.2", 1, 2, 6, false, "the destination"),
            (
                "not dst net 10.0.0.0/31",
                1,
                2,
                6,
                true,
                "10.0.0.2 is outside",
            ),
            ("udp and not dst port 53", 1, 54, 17, true, "UDP, not DNS"),
            ("udp and not dst port 53", 1, 53, 17, false, "DNS"),
            ("port 1 or not port 2", 3, 4, 6, true, "not port 2"),
            ("port 1 or not port 2", 3, 2, 6, false, "neither"),
        ];
        // De Morgan: not (port 1 or udp) == not port 1 and not udp.
        for (sp, dp, pr) in [(1, 2, 6), (3, 4, 6), (3, 4, 17), (1, 4, 17)] {
            let want = !(sp == 1 || dp == 1 || pr == 17);
            cases.push(("not (port 1 or udp)", sp, dp, pr, want, "De Morgan"));
        }
        let mut flows: Vec<(FlowFilter, Flow)> = cases
            .iter()
            .map(|(e, sp, dp, pr, _, _)| (ok(e), (a, *sp, b, *dp, *pr)))
            .collect();
        // IPv6, and an IPv4 network never matching a native IPv6 address.
        flows.push((ok("not net 10.0.0.0/8"), (v6a, 1, v6b, 2, 6)));
        flows.push((ok("tcp and not dst host fd00::2"), (v6a, 1, v6b, 2, 6)));
        let got = bpf_eval(&flows);
        assert_eq!(got.len(), flows.len());
        for ((e, sp, dp, pr, want, why), got) in cases.iter().zip(&got) {
            assert_eq!(got, want, "{e:?} on {sp} -> {dp} proto {pr}: {why}");
        }
        assert_eq!(got[cases.len()..], [true, false]);
    }
}
