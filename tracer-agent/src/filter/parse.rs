//! Parsing `--filter EXPR` (the syntax is in the module docs of
//! `filter`): tokens, a small recursive-descent parser with limits, and
//! errors that say what was wrong and at which column.

use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use super::model::{full_prefix, End, FlowFilter, Match, Primitive, Proto, MAX_CLAUSES, MAX_TERMS};

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
