//! A cheap hasher for maps keyed by the agent index, which the sink
//! assigns itself (a counter, never a value from the wire): the writer
//! looks an agent up several times per event, and std's SipHash cost
//! about 40 ns per event there. Its resistance to chosen keys buys
//! nothing for keys no sender chooses. Maps keyed by what senders choose
//! (the agent key, source addresses) keep SipHash.
//!
//! The multiply-rotate scheme of rustc's FxHasher.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hasher for small integer keys.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IndexHasher {
    h: u64,
}

/// FxHash's multiplier.
const K: u64 = 0xf135_7aea_2e62_a9c5;

impl IndexHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.h = (self.h.rotate_left(26) ^ v).wrapping_mul(K);
    }
}

impl Hasher for IndexHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits and its tag from the
        // top seven: fold the well-mixed high half into the low one.
        self.h ^ (self.h >> 32)
    }
}

/// A map keyed by agent index.
pub(crate) type IndexMap<V> = HashMap<u32, V, BuildHasherDefault<IndexHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_indices_spread_over_buckets_and_tags() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<IndexHasher>::default();
        let mut low = std::collections::HashSet::new();
        let mut top = std::collections::HashSet::new();
        for i in 0u32..1024 {
            let h = b.hash_one(i);
            low.insert(h & 1023);
            top.insert(h >> 57);
        }
        assert!(low.len() > 600, "{} distinct buckets", low.len());
        assert!(top.len() > 100, "{} distinct tags", top.len());
        let mut m: IndexMap<u32> = IndexMap::default();
        for i in 0..10_000 {
            m.insert(i, i * 2);
        }
        assert!((0..10_000).all(|i| m[&i] == i * 2));
    }
}
