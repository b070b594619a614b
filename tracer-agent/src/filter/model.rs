//! What a parsed `--filter` is: a conjunction of clauses, each a
//! disjunction of primitives, and its text form (the inverse of parsing).

use std::fmt;
use std::net::IpAddr;

/// Most `and` groups a filter may have (`FILTER_MAX_CLAUSES` in filter.h).
pub const MAX_CLAUSES: usize = 4;
/// Most primitives one group may have (`FILTER_MAX_TERMS` in filter.h).
pub const MAX_TERMS: usize = 8;

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

    /// Its keyword in a filter expression.
    pub(super) fn word(self) -> &'static str {
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

impl FlowFilter {
    /// True when it matches every flow (no `--filter`).
    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
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

/// Prefix length of a single address (`host ADDR` as a network).
pub(super) fn full_prefix(a: IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}
