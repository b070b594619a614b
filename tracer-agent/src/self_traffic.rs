//! nettrace's own traffic, which no trace shows unless the agent runs with
//! `--trace-self`: which UDP endpoints are ours (the sink, its clock
//! responder), and whether each is an address of the traced host. The
//! probes' BPF programs get the table in `.rodata`
//! (`ebpf/include/self_traffic.h`) and drop the flows to and from these
//! endpoints before any output, as they do with `--filter`.

use std::fmt;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;

use clocksync::SourceSpec;

/// Most endpoints the table holds (`SELF_MAX_ENDPOINTS` in self_traffic.h).
pub const MAX_ENDPOINTS: usize = 4;

/// One endpoint of nettrace's own UDP traffic, as BPF compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfEndpoint {
    /// The address the agent knows it by.
    pub addr: IpAddr,
    /// UDP port (never 0).
    pub port: u16,
    /// `addr` is an address of the traced host (or loopback, or
    /// unspecified): the port matches at any address, since a sink on
    /// this host receives on whatever address a datagram was sent to.
    pub any_addr: bool,
}

impl SelfEndpoint {
    /// `addr` as BPF compares it: 16 bytes, IPv4 as IPv4-mapped IPv6, in
    /// four words of memory order (as filter.h's terms).
    pub fn words(&self) -> [u32; 4] {
        let b = match self.addr {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        std::array::from_fn(|i| {
            u32::from_ne_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        })
    }
}

impl fmt::Display for SelfEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.any_addr {
            write!(f, "udp port {} (any local address)", self.port)
        } else {
            write!(f, "udp {}", SocketAddr::new(self.addr, self.port))
        }
    }
}

/// The endpoints whose flows the probes exclude; empty with `--trace-self`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelfTraffic {
    /// At most [`MAX_ENDPOINTS`], no two alike.
    pub endpoints: Vec<SelfEndpoint>,
}

impl SelfTraffic {
    /// True when nothing is excluded (`--trace-self`).
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// The table for `ends`, each marked `any_addr` when its address is
    /// unspecified, loopback, or `is_local` says it belongs to the traced
    /// host. Repeats go, and so does an exact endpoint whose port an
    /// `any_addr` one already covers. Panics beyond [`MAX_ENDPOINTS`]
    /// distinct endpoints ([`agent_endpoints`] gives at most three).
    pub fn new(ends: &[SocketAddr], mut is_local: impl FnMut(IpAddr) -> bool) -> Self {
        let mut endpoints: Vec<SelfEndpoint> = Vec::new();
        for end in ends.iter().filter(|e| e.port() != 0) {
            let addr = end.ip().to_canonical();
            let any_addr = addr.is_unspecified() || addr.is_loopback() || is_local(addr);
            let e = SelfEndpoint {
                addr,
                port: end.port(),
                any_addr,
            };
            if any_addr {
                endpoints.retain(|o| o.port != e.port);
            } else if endpoints
                .iter()
                .any(|o| o.port == e.port && (o.any_addr || o.addr == e.addr))
            {
                continue;
            }
            endpoints.push(e);
        }
        assert!(
            endpoints.len() <= MAX_ENDPOINTS,
            "more than {MAX_ENDPOINTS} self endpoints: {endpoints:?}"
        );
        SelfTraffic { endpoints }
    }

    /// [`SelfTraffic::new`] with the addresses of the network namespace at
    /// `netns` (None: the agent's own) as the local ones: those a UDP
    /// socket there can bind to.
    pub fn in_netns(ends: &[SocketAddr], netns: Option<&Path>) -> std::io::Result<Self> {
        let addrs: Vec<IpAddr> = ends.iter().map(|e| e.ip().to_canonical()).collect();
        let local = match netns {
            None => addrs.iter().map(|a| bindable(*a)).collect(),
            Some(path) => {
                use std::os::fd::AsRawFd;
                let file = std::fs::File::open(path)?;
                let addrs = addrs.clone();
                std::thread::Builder::new()
                    .name("self-endpoints".into())
                    .spawn(move || {
                        // SAFETY: file is an open descriptor; setns moves
                        // only this short-lived thread into the namespace.
                        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(addrs.iter().map(|a| bindable(*a)).collect::<Vec<bool>>())
                    })?
                    .join()
                    .map_err(|_| std::io::Error::other("the local-address check panicked"))??
            }
        };
        let local: Vec<(IpAddr, bool)> = addrs.into_iter().zip::<Vec<bool>>(local).collect();
        Ok(Self::new(ends, |a| local.contains(&(a, true))))
    }
}

/// Whether this thread's namespace has `addr`: a UDP socket binds to it.
fn bindable(addr: IpAddr) -> bool {
    UdpSocket::bind((addr, 0)).is_ok()
}

impl fmt::Display for SelfTraffic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.endpoints.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// The endpoints of an agent's own traffic: `sink` (its datagrams, the
/// sink's acks); the sink's clock responder at the sink's address and
/// `clock_port`, else the port after the sink's (where `tracer-sink`
/// answers by default), whatever `clock` is, because other agents and the
/// `clocksync` tool may exchange with a responder on this host; and the
/// responder `clock` names (`--clock sink:IP:PORT`).
pub fn agent_endpoints(
    sink: SocketAddr,
    clock_port: Option<u16>,
    clock: &SourceSpec,
) -> Vec<SocketAddr> {
    let mut ends = vec![sink];
    if let Some(port) = clock_port.or_else(|| sink.port().checked_add(1)) {
        ends.push(SocketAddr::new(sink.ip(), port));
    }
    if let SourceSpec::Sink(responder) = clock {
        ends.push(*responder);
    }
    ends
}

/// Writes a [`SelfTraffic`] into a probe skeleton's `.rodata`
/// (`self_n_endpoints`, `self_endpoints` of self_traffic.h). A macro for
/// the same reason as [`crate::write_flow_filter!`]: every skeleton has
/// its own Rust copy of the C struct.
#[macro_export]
macro_rules! write_self_traffic {
    ($rodata:expr, $self_traffic:expr) => {{
        let ro = &mut *$rodata;
        let table: &$crate::self_traffic::SelfTraffic = $self_traffic;
        ro.self_n_endpoints = table.endpoints.len() as u32;
        for (d, e) in ro.self_endpoints.iter_mut().zip(&table.endpoints) {
            d.addr = e.words();
            d.port = e.port;
            d.any_addr = u8::from(e.any_addr);
        }
        for (d, e) in ro.self_ports.iter_mut().zip(&table.endpoints) {
            *d = e.port;
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn ep(addr: &str, port: u16, any_addr: bool) -> SelfEndpoint {
        SelfEndpoint {
            addr: addr.parse().unwrap(),
            port,
            any_addr,
        }
    }

    #[test]
    fn an_agent_excludes_the_sink_and_its_responder_whatever_its_clock() {
        let sink = sa("10.0.0.2:7420");
        let system = SourceSpec::System(clocksync::ClockId::Tai);
        assert_eq!(
            agent_endpoints(sink, None, &system),
            [sink, sa("10.0.0.2:7421")]
        );
        assert_eq!(
            agent_endpoints(sink, Some(9000), &system),
            [sink, sa("10.0.0.2:9000")]
        );
        // --clock sink is the responder above; sink:IP:PORT another one.
        let other = SourceSpec::Sink(sa("10.0.0.9:7000"));
        assert_eq!(
            agent_endpoints(sink, None, &other),
            [sink, sa("10.0.0.2:7421"), sa("10.0.0.9:7000")]
        );
        // No port after 65535: only an explicit --clock-port names one.
        let top = sa("10.0.0.2:65535");
        assert_eq!(agent_endpoints(top, None, &system), [top]);
    }

    #[test]
    fn local_addresses_match_any_address_and_repeats_go() {
        let remote = |_| false;
        let t = SelfTraffic::new(&[sa("10.0.0.2:7420"), sa("10.0.0.2:7421")], remote);
        assert_eq!(
            t.endpoints,
            [ep("10.0.0.2", 7420, false), ep("10.0.0.2", 7421, false)]
        );
        let t = SelfTraffic::new(&[sa("10.0.0.2:7420"), sa("10.0.0.2:7421")], |_| true);
        assert!(t.endpoints.iter().all(|e| e.any_addr), "{t}");
        // Loopback, unspecified and IPv4-mapped addresses, whatever the test says.
        let t = SelfTraffic::new(
            &[
                sa("127.0.0.1:1"),
                sa("[::]:2"),
                sa("[::ffff:10.0.0.2]:3"),
                sa("[::1]:4"),
            ],
            remote,
        );
        assert_eq!(
            t.endpoints,
            [
                ep("127.0.0.1", 1, true),
                ep("::", 2, true),
                ep("10.0.0.2", 3, false),
                ep("::1", 4, true)
            ]
        );
        // --clock sink names the default responder again: one entry; a
        // local endpoint covers an exact one on its port; port 0 is none.
        let t = SelfTraffic::new(
            &[
                sa("10.0.0.2:7421"),
                sa("10.0.0.2:7421"),
                sa("10.0.0.3:7421"),
                sa("127.0.0.1:7421"),
                sa("10.0.0.4:7421"),
                sa("10.0.0.5:0"),
            ],
            remote,
        );
        assert_eq!(t.endpoints, [ep("127.0.0.1", 7421, true)]);
        assert_eq!(t.to_string(), "udp port 7421 (any local address)");
    }

    #[test]
    fn locality_is_what_the_namespace_can_bind() {
        // 127.0.0.2 is on lo (127/8) in any namespace with lo up; the
        // documentation address never is.
        let t = SelfTraffic::in_netns(&[sa("192.0.2.1:7420"), sa("127.0.0.2:7421")], None).unwrap();
        assert_eq!(
            t.endpoints,
            [ep("192.0.2.1", 7420, false), ep("127.0.0.2", 7421, true)]
        );
        assert_eq!(
            t.to_string(),
            "udp 192.0.2.1:7420, udp port 7421 (any local address)"
        );
        // Through setns (root only), as `--netns PATH` does it.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let own = Path::new("/proc/self/ns/net");
            let ends = [sa("192.0.2.1:7420"), sa("127.0.0.2:7421")];
            assert_eq!(SelfTraffic::in_netns(&ends, Some(own)).unwrap(), t);
        }
        let e = SelfTraffic::in_netns(&[], Some(Path::new("/nonexistent/ns"))).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn words_are_ipv4_mapped_in_memory_order() {
        let e = ep("10.0.0.2", 1, false);
        let bytes: Vec<u8> = e.words().iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(
            bytes,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]
        );
        let v6 = SelfEndpoint {
            addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
            ..e
        };
        assert_eq!(v6.words()[3], u32::from_ne_bytes([0, 0, 0, 1]));
    }

    /// self_traffic.h through filter.h's skb_flow_parsed_matches (the call
    /// every probe makes), compiled for the host: each stdin line is the
    /// table (count, then all SELF_MAX_ENDPOINTS entries), whether a
    /// match-everything `--filter` is on, and a flow; each output line
    /// whether the flow is kept, then whether self_port_either (the ports
    /// check sockets get first) says it could be ours.
    const C_EVAL: &str = r#"
#include "filter.h"
static unsigned u(void) { unsigned v = 0; if (scanf("%u", &v) != 1) v = 0; return v; }
int main(void) {
	unsigned n;
	while (scanf("%u", &n) == 1) {
		struct skb_flow f;
		self_n_endpoints = n;
		for (int i = 0; i < SELF_MAX_ENDPOINTS; i++) {
			struct self_endpoint *e = &self_endpoints[i];
			for (int w = 0; w < 4; w++) e->addr[w] = u();
			e->port = u(); e->any_addr = u();
			self_ports[i] = e->port;
		}
		memset(&flow_filter, 0, sizeof(flow_filter));
		if (u()) {
			struct filter_term *t = &flow_filter.clauses[0].terms[0];
			flow_filter.n_clauses = 1;
			flow_filter.clauses[0].n_terms = 1;
			t->src = 1; t->dst = 1; t->port_hi = 65535;
		}
		memset(&f, 0, sizeof(f));
		f.family = u(); f.sport = u(); f.dport = u(); f.l4proto = u();
		for (int b = 0; b < 16; b++) f.saddr[b] = u();
		for (int b = 0; b < 16; b++) f.daddr[b] = u();
		printf("%d %d\n", skb_flow_parsed_matches(&f, false),
		       self_port_either(f.sport, f.dport));
	}
	return 0;
}
"#;

    /// A flow as a packet's headers give it: (source, sport, destination,
    /// dport, IP protocol).
    type Flow = (&'static str, u16, &'static str, u16, u8);

    /// Is each flow kept, with `table` (its first `n` entries in use) and,
    /// if `filter`, a `--filter` every flow matches?
    fn bpf_kept(table: &[SelfEndpoint], n: usize, filter: bool, flows: &[Flow]) -> Vec<bool> {
        bpf_eval(table, n, filter, flows)
            .into_iter()
            .map(|(kept, _)| kept)
            .collect()
    }

    /// (kept, could be ours by its ports) per flow.
    fn bpf_eval(
        table: &[SelfEndpoint],
        n: usize,
        filter: bool,
        flows: &[Flow],
    ) -> Vec<(bool, bool)> {
        use std::fmt::Write as _;
        assert!(table.len() <= MAX_ENDPOINTS && n <= table.len());
        let mut input = String::new();
        for (sa, sp, da, dp, proto) in flows {
            write!(input, "{n}").unwrap();
            for i in 0..MAX_ENDPOINTS {
                match table.get(i) {
                    Some(e) => {
                        for w in e.words() {
                            write!(input, " {w}").unwrap();
                        }
                        write!(input, " {} {}", e.port, u8::from(e.any_addr)).unwrap();
                    }
                    None => input.push_str(" 0 0 0 0 0 0"),
                }
            }
            let addr = |s: &str| -> (u8, [u8; 16]) {
                match s.parse::<IpAddr>().unwrap() {
                    IpAddr::V4(a) => {
                        let mut b = [0u8; 16];
                        b[..4].copy_from_slice(&a.octets());
                        (4, b)
                    }
                    IpAddr::V6(a) => (6, a.octets()),
                }
            };
            let ((family, s), (_, d)) = (addr(sa), addr(da));
            write!(input, " {} {family} {sp} {dp} {proto}", u8::from(filter)).unwrap();
            for b in s.iter().chain(&d) {
                write!(input, " {b}").unwrap();
            }
            input.push('\n');
        }
        crate::host_c::run_header_program(C_EVAL, &input)
            .lines()
            .map(|l| (l.starts_with('1'), l.ends_with('1')))
            .collect()
    }

    const UDP: u8 = 17;
    const TCP: u8 = 6;

    #[test]
    fn bpf_excludes_flows_with_an_end_at_an_endpoint() {
        // A remote sink and its responder, a local endpoint, an IPv6 one.
        let table = [
            ep("10.0.0.2", 7420, false),
            ep("10.0.0.2", 7421, false),
            ep("10.0.0.7", 7430, true),
            ep("fd00::2", 7440, false),
        ];
        // (flow, kept?, why)
        let cases: &[(Flow, bool, &str)] = &[
            (
                ("10.0.0.1", 40000, "10.0.0.2", 7420, UDP),
                false,
                "to the sink",
            ),
            (("10.0.0.2", 7420, "10.0.0.1", 40000, UDP), false, "its ack"),
            (
                ("10.0.0.1", 40001, "10.0.0.2", 7421, UDP),
                false,
                "a clock request",
            ),
            (
                ("10.0.0.2", 7421, "10.0.0.1", 40001, UDP),
                false,
                "its answer",
            ),
            (
                ("10.0.0.1", 40000, "10.0.0.3", 7420, UDP),
                true,
                "another host's 7420",
            ),
            (
                ("10.0.0.1", 40000, "10.0.0.2", 7422, UDP),
                true,
                "another port",
            ),
            (
                ("10.0.0.1", 40000, "10.0.0.2", 7420, TCP),
                true,
                "TCP is never ours",
            ),
            (
                ("10.0.0.9", 5000, "0.0.0.0", 7421, UDP),
                false,
                "a wildcard-bound socket",
            ),
            (
                ("192.168.1.1", 1234, "172.16.0.1", 7430, UDP),
                false,
                "local: any address",
            ),
            (
                ("172.16.0.1", 7430, "127.0.0.1", 1234, UDP),
                false,
                "local, as the source",
            ),
            (
                ("192.168.1.1", 7431, "172.16.0.1", 53, UDP),
                true,
                "neither end",
            ),
            (("fd00::1", 40000, "fd00::2", 7440, UDP), false, "IPv6"),
            (
                ("fd00::1", 40000, "fd00::3", 7440, UDP),
                true,
                "another IPv6 host",
            ),
            (("::", 7440, "fd00::1", 1, UDP), false, "IPv6 wildcard"),
        ];
        let flows: Vec<Flow> = cases.iter().map(|c| c.0).collect();
        let got = bpf_kept(&table, table.len(), false, &flows);
        for ((flow, want, why), got) in cases.iter().zip(&got) {
            assert_eq!(got, want, "{flow:?}: {why}");
        }
        // A filter that keeps everything does not bring them back.
        assert_eq!(bpf_kept(&table, table.len(), true, &flows), got);
        // --trace-self (no endpoint): everything is kept, filter or not.
        for filter in [false, true] {
            assert!(bpf_kept(&table, 0, filter, &flows).iter().all(|k| *k));
        }
        // Only the first `n` entries count.
        let to_responder = ("10.0.0.1", 40001, "10.0.0.2", 7421, UDP);
        assert_eq!(bpf_kept(&table, 1, false, &[to_responder]), [true]);
        assert_eq!(bpf_kept(&table, 2, false, &[to_responder]), [false]);
    }

    #[test]
    fn the_ports_check_never_clears_a_flow_that_is_ours() {
        let table = [ep("10.0.0.2", 7420, false), ep("10.0.0.7", 7430, true)];
        let flows: &[Flow] = &[
            ("10.0.0.1", 40000, "10.0.0.2", 7420, UDP),
            ("10.0.0.2", 7420, "10.0.0.1", 40000, UDP),
            ("10.0.0.1", 40000, "10.0.0.3", 7420, UDP),
            ("10.0.0.1", 7430, "10.0.0.3", 53, UDP),
            ("10.0.0.1", 40000, "10.0.0.2", 7420, TCP),
            ("10.0.0.1", 40000, "10.0.0.2", 7421, UDP),
            ("10.0.0.1", 5000, "10.0.0.2", 80, TCP),
        ];
        for n in 0..=table.len() {
            let ports: Vec<u16> = table[..n].iter().map(|e| e.port).collect();
            for (flow, (kept, either)) in flows.iter().zip(bpf_eval(&table, n, false, flows)) {
                let (_, sp, _, dp, _) = *flow;
                let want = ports.contains(&sp) || ports.contains(&dp);
                assert_eq!(either, want, "{flow:?} with {n} endpoints");
                // What the check clears is kept by the full one too.
                assert!(either || kept, "{flow:?} with {n} endpoints");
            }
        }
    }
}
