//! What a synthetic trace simulates: hosts, the connection, delays, clock
//! offsets, losses and sampling, with the known truth the tests check.

/// What to simulate. Host 0 and host 1; direction 0 is host 0 -> host 1.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Hostnames.
    pub names: [String; 2],
    /// Agent ids.
    pub agent_ids: [u64; 2],
    /// Addresses (IPv4).
    pub addrs: [[u8; 4]; 2],
    /// Ports: host 0's (the client), host 1's (the server).
    pub ports: [u16; 2],
    /// TX skbs sent per direction.
    pub skbs: u64,
    /// Data in both directions (else host 0 -> host 1 only).
    pub both_ways: bool,
    /// Bytes per TX skb.
    pub skb_len: u32,
    /// TX skbs merged into one RX skb by GRO.
    pub gro: u32,
    /// Time between TX skbs of one direction, ns.
    pub interval_ns: u64,
    /// True one-way delay SND_SW -> STACK_ENTRY, ns.
    pub one_way_ns: u64,
    /// Extra one-way delay, 0..jitter (deterministic), ns.
    pub jitter_ns: u64,
    /// Each host's clock error: stamp = true time + this, ns.
    pub clock_offset_ns: [i64; 2],
    /// The error estimate each host's CLOCK events claim, ns.
    pub clock_claim_ns: [u64; 2],
    /// Each host's clock is not locked for the first `.0` ns after the
    /// first send, and off by `.1` ns more meanwhile (a servo converging).
    pub unlocked: [(u64, i64); 2],
    /// Lose one RX skb (GRO group) in this many (0: none); its TX skbs
    /// are retransmitted one by one after `rto_ns`.
    pub lose_one_in: u64,
    /// Retransmission delay, ns.
    pub rto_ns: u64,
    /// Each host's `--sample-every` (its TX as sender, its RX as receiver).
    pub sample_every: [u32; 2],
    /// Each host loses events on the way to the sink (their numbers are
    /// skipped, as a lost datagram's): of every `.0` events the last `.1`
    /// (`.0` = 0: none).
    pub drop_events: [(u64, u64); 2],
    /// Each host's agent loses events before numbering them (ring
    /// overruns: only the ISB total tells): of every `.0` the last `.1`.
    pub ring_losses: [(u64, u64); 2],
    /// True time of the first send, ns.
    pub start_ns: u64,
    /// Initial sequence number of each direction.
    pub isn: [u32; 2],
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            names: ["alpha".into(), "beta".into()],
            agent_ids: [0xa1, 0xb2],
            addrs: [[10, 7, 0, 1], [10, 7, 0, 2]],
            ports: [40000, 5201],
            skbs: 1000,
            both_ways: false,
            skb_len: 16384,
            gro: 2,
            interval_ns: 20_000,
            one_way_ns: 15_000,
            jitter_ns: 4_000,
            clock_offset_ns: [0, 0],
            clock_claim_ns: [100, 100],
            unlocked: [(0, 0), (0, 0)],
            lose_one_in: 0,
            rto_ns: 300_000,
            sample_every: [1, 1],
            drop_events: [(0, 0), (0, 0)],
            ring_losses: [(0, 0), (0, 0)],
            start_ns: 1_700_000_000_000_000_000,
            isn: [1_000_000, 3_000_000_000],
        }
    }
}
