//! The BPF form of a filter: one [`Term`] per primitive, the fixed table
//! the probes' programs evaluate (`ebpf/include/filter.h`), and the macro
//! that writes it into a probe's `.rodata`.

use std::net::IpAddr;

use super::model::{End, FlowFilter, Match, Primitive, Proto};

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
        let terms = $crate::filter::model::FlowFilter::terms($filter);
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
