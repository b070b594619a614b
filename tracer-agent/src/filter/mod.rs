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
//!
//! The model ([`model`]: primitives, clauses, their text form) is at the
//! bottom; [`parse`](mod@parse) reads an expression into it and [`term`]
//! turns it into what BPF compares. This module gathers them.

pub mod model;
pub mod parse;
pub mod term;

pub use model::{End, FlowFilter, Match, Primitive, Proto, MAX_CLAUSES, MAX_TERMS};
pub use parse::{parse, FilterError, FilterErrorKind};
pub use term::Term;

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

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

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
