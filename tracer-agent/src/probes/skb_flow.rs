//! Tests of `ebpf/include/skb_flow.h`, the flow parser every probe that reads
//! packet headers uses (rx stack entry, drops, socketless resets): the
//! header is compiled with the host's C compiler (SKB_FLOW_CAST a plain
//! cast instead of bpf_core_cast) and run on packets built here, IPv6
//! extension headers, fragments and malformed headers included, each
//! checked against the flow it must give.

use crate::host_c::run_header_program;

/// Ethertypes, as skb->protocol in host order.
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const TCP: u8 = 6;
const UDP: u8 = 17;
const HOPOPTS: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const ESP: u8 = 50;
const AH: u8 = 51;
const DSTOPTS: u8 = 60;

/// What skb_flow_parse_nh() fills in (struct skb_flow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Flow {
    family: u8,
    l4proto: u8,
    has_seq: u8,
    sport: u16,
    dport: u16,
    seq: u32,
    end_seq: u32,
    saddr: [u8; 16],
    daddr: [u8; 16],
}

/// The C side: one line per case on stdin ("ethertype hex-bytes"), one
/// line of struct skb_flow fields out.
const C_MAIN: &str = r#"
#include "skb_flow.h"
int main(void) {
	static char hex[16384];
	unsigned int proto;
	/* Room past any header the parser may read, zeros: a short packet
	 * reads as zeros, as a faulting BPF load does. */
	static union { unsigned char b[8192]; __u64 align; } pkt;
	while (scanf("%x %16383s", &proto, hex) == 2) {
		struct skb_flow f;
		size_t n = strlen(hex) / 2, i;
		memset(pkt.b, 0, sizeof(pkt.b));
		for (i = 0; i < n && i < sizeof(pkt.b); i++)
			sscanf(hex + 2 * i, "%2hhx", &pkt.b[i]);
		skb_flow_parse_nh(pkt.b, (__u16)proto, &f);
		printf("%u %u %u %u %u %u %u", f.family, f.l4proto, f.has_seq, f.sport, f.dport, f.seq, f.end_seq);
		for (i = 0; i < 16; i++) printf(" %u", f.saddr[i]);
		for (i = 0; i < 16; i++) printf(" %u", f.daddr[i]);
		printf("\n");
	}
	return 0;
}
"#;

/// Run the C parser on `(ethertype, packet)` cases.
fn parse_in_c(cases: &[(u16, Vec<u8>)]) -> Vec<Flow> {
    let mut input = String::new();
    for (proto, pkt) in cases {
        // At least one byte, so that every line has its two fields.
        let hex: String = pkt.iter().map(|b| format!("{b:02x}")).collect();
        let hex = if hex.is_empty() { "00".into() } else { hex };
        input.push_str(&format!("{proto:x} {hex}\n"));
    }
    run_header_program(C_MAIN, &input)
        .lines()
        .map(|l| {
            let v: Vec<u32> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            let addr = |o: usize| std::array::from_fn(|i| v[o + i] as u8);
            Flow {
                family: v[0] as u8,
                l4proto: v[1] as u8,
                has_seq: v[2] as u8,
                sport: v[3] as u16,
                dport: v[4] as u16,
                seq: v[5],
                end_seq: v[6],
                saddr: addr(7),
                daddr: addr(23),
            }
        })
        .collect()
}

const SRC4: [u8; 4] = [10, 1, 2, 3];
const DST4: [u8; 4] = [10, 4, 5, 6];
const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const DST6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// A TCP header (20 bytes + `opt_words` * 4 of options) and payload.
fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, opt_words: u8, payload: usize) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(sport.to_be_bytes());
    h.extend(dport.to_be_bytes());
    h.extend(seq.to_be_bytes());
    h.extend(0u32.to_be_bytes());
    h.push((5 + opt_words) << 4);
    h.push(flags);
    h.extend([0u8; 6]);
    h.resize(h.len() + usize::from(opt_words) * 4 + payload, 0xab);
    h
}

fn udp(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(sport.to_be_bytes());
    h.extend(dport.to_be_bytes());
    h.extend(((8 + payload) as u16).to_be_bytes());
    h.extend([0u8; 2]);
    h.resize(h.len() + payload, 0xcd);
    h
}

/// IPv4 with `opt_words` * 4 bytes of options, `frag_off` as on the wire
/// (flags and offset), carrying `l4`.
fn ipv4(proto: u8, opt_words: u8, frag_off: u16, l4: &[u8]) -> Vec<u8> {
    let ihl = 5 + opt_words;
    let mut h = vec![0x40 | ihl, 0];
    h.extend((u16::from(ihl) * 4 + l4.len() as u16).to_be_bytes());
    h.extend([0, 0]);
    h.extend(frag_off.to_be_bytes());
    h.extend([64, proto, 0, 0]);
    h.extend(SRC4);
    h.extend(DST4);
    h.resize(usize::from(ihl) * 4, 1); // options: NOPs
    h.extend(l4);
    h
}

/// One IPv6 extension header of type `kind` followed by `next`, of its
/// smallest size (8 bytes; AH 12), as its length field counts.
fn ext(kind: u8, next: u8, frag_off: u16) -> Vec<u8> {
    match kind {
        FRAGMENT => {
            let mut h = vec![next, 0];
            h.extend(frag_off.to_be_bytes());
            h.extend([0, 0, 0, 1]);
            h
        }
        // Payload length in 4-byte words minus 2: 1 -> 12 bytes.
        AH => vec![next, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2],
        // Length in 8-byte units minus 1: 1 -> 16 bytes (PadN inside).
        _ => {
            let mut h = vec![next, 1, 1, 12];
            h.resize(16, 0);
            h
        }
    }
}

/// IPv6 carrying `exts` (kind, frag_off) in order, then `l4` of protocol
/// `proto`.
fn ipv6(exts: &[(u8, u16)], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, (kind, frag)) in exts.iter().enumerate() {
        let next = exts.get(i + 1).map_or(proto, |e| e.0);
        body.extend(ext(*kind, next, *frag));
    }
    body.extend(l4);
    let first = exts.first().map_or(proto, |e| e.0);
    let mut h = vec![0x60, 0, 0, 0];
    h.extend((body.len() as u16).to_be_bytes());
    h.extend([first, 64]);
    h.extend(SRC6);
    h.extend(DST6);
    h.extend(body);
    h
}

fn v4_flow(l4proto: u8) -> Flow {
    let mut f = Flow {
        family: 4,
        l4proto,
        ..Flow::default()
    };
    f.saddr[..4].copy_from_slice(&SRC4);
    f.daddr[..4].copy_from_slice(&DST4);
    f
}

fn v6_flow(l4proto: u8) -> Flow {
    Flow {
        family: 6,
        l4proto,
        saddr: SRC6,
        daddr: DST6,
        ..Flow::default()
    }
}

fn with_ports(mut f: Flow, sport: u16, dport: u16) -> Flow {
    f.sport = sport;
    f.dport = dport;
    f
}

fn with_range(mut f: Flow, seq: u32, end_seq: u32) -> Flow {
    f.has_seq = 1;
    f.seq = seq;
    f.end_seq = end_seq;
    f
}

#[test]
fn flows_of_built_packets() {
    const SYN: u8 = 2;
    const FIN_ACK: u8 = 0x11;
    const MF: u16 = 0x2000;
    let seq = 4_294_967_000u32; // wraps within the payload
    let cases: Vec<(&str, u16, Vec<u8>, Flow)> = vec![
        (
            "IPv4 TCP, options, payload wrapping the sequence space",
            ETH_P_IP,
            ipv4(TCP, 0, 0, &tcp(40000, 5201, seq, 0x10, 3, 1448)),
            with_range(
                with_ports(v4_flow(TCP), 40000, 5201),
                seq,
                seq.wrapping_add(1448),
            ),
        ),
        (
            "IPv4 SYN: one sequence number",
            ETH_P_IP,
            ipv4(TCP, 0, 0, &tcp(1, 2, 100, SYN, 5, 0)),
            with_range(with_ports(v4_flow(TCP), 1, 2), 100, 101),
        ),
        (
            "IPv4 with IP options, UDP",
            ETH_P_IP,
            ipv4(UDP, 2, 0, &udp(53, 5353, 10)),
            with_ports(v4_flow(UDP), 53, 5353),
        ),
        (
            "IPv4 first fragment (MF, offset 0): ports",
            ETH_P_IP,
            ipv4(UDP, 0, MF, &udp(7, 9, 1000)),
            with_ports(v4_flow(UDP), 7, 9),
        ),
        (
            "IPv4 later fragment: no ports",
            ETH_P_IP,
            ipv4(UDP, 0, 185, &udp(7, 9, 100)),
            v4_flow(UDP),
        ),
        (
            "IPv6 TCP, FIN with payload",
            ETH_P_IPV6,
            ipv6(&[], TCP, &tcp(443, 50000, 7, FIN_ACK, 0, 100)),
            with_range(with_ports(v6_flow(TCP), 443, 50000), 7, 108),
        ),
        (
            "IPv6 hop-by-hop, destination options, routing, then TCP",
            ETH_P_IPV6,
            ipv6(
                &[(HOPOPTS, 0), (DSTOPTS, 0), (ROUTING, 0)],
                TCP,
                &tcp(5201, 40000, 1000, 0x10, 0, 500),
            ),
            with_range(with_ports(v6_flow(TCP), 5201, 40000), 1000, 1500),
        ),
        (
            "IPv6 first fragment, then UDP",
            ETH_P_IPV6,
            ipv6(&[(FRAGMENT, 1)], UDP, &udp(1111, 2222, 64)),
            with_ports(v6_flow(UDP), 1111, 2222),
        ),
        (
            "IPv6 later fragment: no ports, the fragment's protocol",
            ETH_P_IPV6,
            ipv6(&[(FRAGMENT, 1448 << 3)], UDP, &[0u8; 64]),
            v6_flow(UDP),
        ),
        (
            "IPv6 AH, then TCP",
            ETH_P_IPV6,
            ipv6(&[(AH, 0)], TCP, &tcp(22, 60000, 5, 0x10, 0, 40)),
            with_range(with_ports(v6_flow(TCP), 22, 60000), 5, 45),
        ),
        (
            "IPv6 four extension headers (the most walked), then UDP",
            ETH_P_IPV6,
            ipv6(
                &[(HOPOPTS, 0), (DSTOPTS, 0), (ROUTING, 0), (DSTOPTS, 0)],
                UDP,
                &udp(3, 4, 8),
            ),
            with_ports(v6_flow(UDP), 3, 4),
        ),
        (
            "IPv6 five extension headers: given up, no ports",
            ETH_P_IPV6,
            ipv6(
                &[
                    (HOPOPTS, 0),
                    (DSTOPTS, 0),
                    (ROUTING, 0),
                    (AH, 0),
                    (DSTOPTS, 0),
                ],
                UDP,
                &udp(3, 4, 8),
            ),
            v6_flow(DSTOPTS),
        ),
        (
            "IPv6 ESP: encrypted, no ports",
            ETH_P_IPV6,
            ipv6(&[], ESP, &[0u8; 32]),
            v6_flow(ESP),
        ),
        (
            "IPv4 ethertype with an IPv6 header: not IP",
            ETH_P_IP,
            ipv6(&[], TCP, &tcp(1, 2, 3, 0, 0, 0)),
            Flow::default(),
        ),
        (
            "IPv4 with ihl below 5: not IP",
            ETH_P_IP,
            {
                let mut p = ipv4(TCP, 0, 0, &tcp(1, 2, 3, 0, 0, 0));
                p[0] = 0x44;
                p
            },
            Flow::default(),
        ),
        (
            "ARP: not IP",
            0x0806,
            vec![0, 1, 8, 0, 6, 4, 0, 1],
            Flow::default(),
        ),
        (
            "unreadable (zeros, as a faulting load reads)",
            ETH_P_IPV6,
            vec![],
            Flow::default(),
        ),
    ];
    let got = parse_in_c(
        &cases
            .iter()
            .map(|(_, proto, pkt, _)| (*proto, pkt.clone()))
            .collect::<Vec<_>>(),
    );
    assert_eq!(got.len(), cases.len());
    for ((what, _, _, want), got) in cases.iter().zip(&got) {
        assert_eq!(got, want, "{what}");
    }
}

/// The tx probe's range reader against the parser: one line per case
/// ("ethertype tcp-header-offset hex-bytes"), out "ok seq end_seq" of
/// skb_flow_tcp_range() then "has_seq seq end_seq" of skb_flow_parse_nh().
const C_RANGE: &str = r#"
#include "skb_flow.h"
int main(void) {
	static char hex[16384];
	unsigned int proto, th;
	static union { unsigned char b[8192]; __u64 align; } pkt;
	while (scanf("%x %u %16383s", &proto, &th, hex) == 3) {
		struct skb_flow f;
		__u32 seq = 0, end = 0;
		size_t n = strlen(hex) / 2, i;
		int ok;
		memset(pkt.b, 0, sizeof(pkt.b));
		for (i = 0; i < n && i < sizeof(pkt.b); i++)
			sscanf(hex + 2 * i, "%2hhx", &pkt.b[i]);
		ok = skb_flow_tcp_range(pkt.b, pkt.b + th, &seq, &end);
		skb_flow_parse_nh(pkt.b, (__u16)proto, &f);
		printf("%d %u %u %u %u %u\n", ok, seq, end, f.has_seq, f.seq, f.end_seq);
	}
	return 0;
}
"#;

#[test]
fn the_senders_tcp_range_is_the_parsers() {
    const SYN: u8 = 2;
    const FIN_ACK: u8 = 0x11;
    let seq = 4_294_967_000u32;
    // (what, ethertype, TCP header offset, packet, the range must be read)
    let mut cases: Vec<(&str, u16, usize, Vec<u8>, bool)> = vec![
        (
            "IPv4, TCP options, payload wrapping the sequence space",
            ETH_P_IP,
            20,
            ipv4(TCP, 0, 0, &tcp(40000, 5201, seq, 0x10, 3, 1448)),
            true,
        ),
        (
            "IPv4 with IP options",
            ETH_P_IP,
            28,
            ipv4(TCP, 2, 0, &tcp(1, 2, 9, 0x10, 0, 100)),
            true,
        ),
        (
            "IPv4 SYN",
            ETH_P_IP,
            20,
            ipv4(TCP, 0, 0, &tcp(1, 2, 100, SYN, 5, 0)),
            true,
        ),
        (
            "IPv6 FIN with payload",
            ETH_P_IPV6,
            40,
            ipv6(&[], TCP, &tcp(443, 5, 7, FIN_ACK, 0, 100)),
            true,
        ),
        (
            "IPv6 hop-by-hop, destination options, routing",
            ETH_P_IPV6,
            40 + 3 * 16,
            ipv6(
                &[(HOPOPTS, 0), (DSTOPTS, 0), (ROUTING, 0)],
                TCP,
                &tcp(5201, 4, 1000, 0x10, 0, 500),
            ),
            true,
        ),
        (
            "IPv6 AH",
            ETH_P_IPV6,
            52,
            ipv6(&[(AH, 0)], TCP, &tcp(22, 6, 5, 0x10, 0, 40)),
            true,
        ),
        (
            "IPv6 first fragment",
            ETH_P_IPV6,
            48,
            ipv6(&[(FRAGMENT, 1)], TCP, &tcp(1, 2, 3, 0x10, 1, 64)),
            true,
        ),
    ];
    let mut short_doff = ipv4(TCP, 0, 0, &tcp(1, 2, 3, 0x10, 0, 10));
    short_doff[20 + 12] = 4 << 4;
    cases.push((
        "TCP data offset below 5 words",
        ETH_P_IP,
        20,
        short_doff,
        false,
    ));
    let mut short_ip = ipv4(TCP, 0, 0, &tcp(1, 2, 3, 0x10, 0, 10));
    short_ip[2..4].copy_from_slice(&30u16.to_be_bytes());
    cases.push((
        "IP length shorter than the headers",
        ETH_P_IP,
        20,
        short_ip,
        false,
    ));
    let mut not_ip = ipv4(TCP, 0, 0, &tcp(1, 2, 3, 0x10, 0, 10));
    not_ip[0] = 0x55;
    cases.push(("IP version 5", ETH_P_IP, 20, not_ip, false));

    let input: String = cases
        .iter()
        .map(|(_, proto, th, pkt, _)| {
            let hex: String = pkt.iter().map(|b| format!("{b:02x}")).collect();
            format!("{proto:x} {th} {hex}\n")
        })
        .collect();
    let out = run_header_program(C_RANGE, &input);
    let lines: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(lines.len(), cases.len());
    for ((what, _, _, _, readable), v) in cases.iter().zip(&lines) {
        if *readable {
            assert_eq!(v[0], 1, "{what}: range not read");
            assert_eq!(v[3], 1, "{what}: the parser found no range");
            assert_eq!(
                (v[1], v[2]),
                (v[4], v[5]),
                "{what}: range differs from the parser's"
            );
            assert_ne!(v[1], v[2], "{what}: empty range");
        } else {
            assert_eq!(v[0], 0, "{what}: a range from bad lengths");
        }
    }
}
