//! Sampling by TCP byte range (`--sample-every N`): the rule both ends of
//! a connection apply, so that a receiver keeps the skbs carrying what a
//! sender sampled, and that the matcher needs to tell "sampled out" from
//! "lost". It is part of the contract between hosts, hence here, beside
//! the wire format, for the agent (which writes [`threshold`] into each
//! probe) and the matcher alike.
//!
//! The specification is `ebpf/include/sample.h`, which the tx and rx
//! probes compile; read the rule and its reasons there. This is its Rust
//! twin: `tests/sample_h.rs` compiles the header with the host's C
//! compiler and requires both to agree bit for bit.
//!
//! In short: a granule is 64 KiB of one direction's sequence space; it is
//! sampled iff a hash of (flow, granule) falls under 1/N. The sender tags
//! a TX skb iff its last byte (`tskey`) lies in a sampled granule; the
//! receiver records an RX skb iff its range touches one.

/// A granule is `1 << GRANULE_SHIFT` bytes of one direction's sequence space.
pub const GRANULE_SHIFT: u32 = 16;
/// Longest range (in granules) checked one by one; longer ones are kept.
pub const MAX_GRANULES: u32 = 16;
/// Threshold that keeps everything (`--sample-every 1`).
pub const ALL: u64 = 1 << 32;

/// Granule numbers wrap with the sequence space.
const GRANULE_MASK: u32 = (1 << (32 - GRANULE_SHIFT)) - 1;

/// Threshold for one in `every`: `nt_sample_threshold`.
pub fn threshold(every: u32) -> u64 {
    if every <= 1 {
        ALL
    } else {
        ALL / u64::from(every)
    }
}

fn mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn mix_addr(h: u64, a: &[u8; 16]) -> u64 {
    let w = |i: usize| u64::from(u32::from_be_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]));
    let (mut w0, w1, mut w2, mut w3) = (w(0), w(4), w(8), w(12));
    if w0 == 0 && w1 == 0 && w2 == 0xffff {
        // ::ffff:a.b.c.d hashes as the IPv4 address it maps.
        w0 = w3;
        w2 = 0;
        w3 = 0;
    }
    mix(mix(h, (w0 << 32) | w1), (w2 << 32) | w3)
}

/// Hash of a flow in the data's direction (sender -> receiver), addresses
/// as the records hold them (IPv4 in the first 4 bytes, network order),
/// ports in host order: `nt_sample_flow`.
pub fn flow_hash(saddr: &[u8; 16], daddr: &[u8; 16], sport: u16, dport: u16) -> u64 {
    let h = mix_addr(mix_addr(0, saddr), daddr);
    mix(h, (u64::from(sport) << 16) | u64::from(dport))
}

/// Is this granule of the flow sampled: `nt_sample_granule`.
pub fn granule(flow: u64, granule: u32, threshold: u64) -> bool {
    (fmix(flow ^ u64::from(granule)) >> 32) < threshold
}

/// Is the byte at `seq` sampled: `nt_sample_byte`.
pub fn byte(flow: u64, seq: u32, threshold: u64) -> bool {
    granule(flow, seq >> GRANULE_SHIFT, threshold)
}

/// Does `[seq, end_seq)` hold a sampled byte: `nt_sample_range`. An empty
/// range (a pure ACK) decides by `seq`'s granule; one longer than
/// [`MAX_GRANULES`] (or backwards) is kept.
pub fn range(flow: u64, seq: u32, end_seq: u32, threshold: u64) -> bool {
    let first = seq >> GRANULE_SHIFT;
    if end_seq == seq {
        return granule(flow, first, threshold);
    }
    let start = seq & !((1u32 << GRANULE_SHIFT) - 1);
    let n = (end_seq.wrapping_sub(1).wrapping_sub(start) >> GRANULE_SHIFT) + 1;
    if n > MAX_GRANULES {
        return true;
    }
    (0..n).any(|i| granule(flow, first.wrapping_add(i) & GRANULE_MASK, threshold))
}

/// Is every granule from the one holding `first` to the one holding
/// `last` (inclusive, sequence arithmetic) sampled? When it is, no event
/// of a socket-only stage (DATA_READY, READ_DONE: sampled by the granule
/// of their last byte) can have ended in between unrecorded. (The
/// matcher's question; sample.h has no counterpart.)
pub fn all_sampled(flow: u64, first: u32, last: u32, threshold: u64) -> bool {
    if threshold >= ALL {
        return true;
    }
    let (g0, g1) = (first >> GRANULE_SHIFT, last >> GRANULE_SHIFT);
    let n = g1.wrapping_sub(g0) & GRANULE_MASK;
    // A long stretch: some granule in it is unsampled anyway at N > 1
    // with near certainty; do not loop over the whole space.
    if n > 64 {
        return false;
    }
    (0..=n).all(|i| granule(flow, g0.wrapping_add(i) & GRANULE_MASK, threshold))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[..4].copy_from_slice(&a);
        r
    }

    fn mapped(a: [u8; 4]) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[10] = 0xff;
        r[11] = 0xff;
        r[12..].copy_from_slice(&a);
        r
    }

    /// The fixed vectors of sample.h's header comment, computed from it
    /// with the host's cc (`tests/sample_h.rs` recomputes such values):
    /// a change of the rule shows here first.
    #[test]
    fn fixed_vectors() {
        assert_eq!(threshold(1), ALL);
        assert_eq!(threshold(0), ALL);
        assert_eq!(threshold(10), 429_496_729);
        let f = flow_hash(&v4([10, 9, 0, 1]), &v4([10, 9, 0, 2]), 40000, 5201);
        assert_eq!(f, 0x05e8_25bd_e982_e6a5);
        let kept: Vec<u32> = (0..64).filter(|g| granule(f, *g, threshold(10))).collect();
        assert_eq!(kept, [13, 17, 22, 24, 25, 43, 49, 52]);
        // A v4-mapped v6 socket and a v4 packet agree.
        assert_eq!(
            flow_hash(&mapped([10, 9, 0, 1]), &mapped([10, 9, 0, 2]), 40000, 5201),
            f
        );
        // Direction matters: the reverse flow has its own granules.
        assert_ne!(
            flow_hash(&v4([10, 9, 0, 2]), &v4([10, 9, 0, 1]), 5201, 40000),
            f
        );
    }

    #[test]
    fn ranges() {
        let f = flow_hash(&v4([10, 9, 0, 1]), &v4([10, 9, 0, 2]), 40000, 5201);
        let t = threshold(10);
        let g = |n: u32| n << GRANULE_SHIFT;
        // Granule 13 is sampled, 12 and 14 are not.
        assert!(range(f, g(13), g(13) + 1, t));
        assert!(!range(f, g(12), g(13), t), "end is exclusive");
        assert!(range(f, g(13) - 100, g(13) + 1, t), "straddles into 13");
        assert!(range(f, g(14) - 1, g(14) + 5000, t), "last byte of 13");
        assert!(!range(f, g(14), g(14) + 65536, t));
        // Empty (pure ACK): seq's granule.
        assert!(range(f, g(13) + 7, g(13) + 7, t));
        assert!(!range(f, g(12) + 7, g(12) + 7, t));
        // Overlong or backwards: kept.
        assert!(range(f, g(0), g(MAX_GRANULES + 1), t));
        assert!(range(f, g(5), g(4), t));
        // Every range holding a sampled byte is kept: a TX skb's last
        // byte sampled means every RX skb carrying it is recorded.
        for seq in (g(10)..g(16)).step_by(4099) {
            if byte(f, seq, t) {
                assert!(range(f, seq.wrapping_sub(30000), seq + 1, t));
                assert!(range(f, seq, seq + 40000, t));
            }
        }
        // N = 1 keeps everything.
        assert!((0..1000u32).all(|i| range(f, i * 7919, i * 7919 + 1, ALL)));
    }

    #[test]
    fn all_sampled_stretches() {
        let f = flow_hash(&v4([10, 9, 0, 1]), &v4([10, 9, 0, 2]), 40000, 5201);
        let (t, g) = (threshold(10), |n: u32| n << GRANULE_SHIFT);
        // Granules 24 and 25 are sampled, 26 is not.
        assert!(all_sampled(f, g(24), g(25) + 100, t));
        assert!(!all_sampled(f, g(24), g(26), t));
        assert!(all_sampled(f, g(2), g(3), ALL));
        assert!(!all_sampled(f, g(0), g(100), t), "a long stretch");
    }

    #[test]
    fn about_one_granule_in_n() {
        let f = flow_hash(&v4([192, 168, 1, 1]), &v4([192, 168, 1, 2]), 1234, 80);
        for n in [2u32, 10, 100] {
            let kept = (0..65536u32)
                .filter(|g| granule(f, *g, threshold(n)))
                .count() as f64;
            let want = 65536.0 / f64::from(n);
            assert!(
                (kept - want).abs() < 4.0 * want.sqrt() + 1.0,
                "1 in {n}: {kept} granules of 65536"
            );
        }
    }
}
