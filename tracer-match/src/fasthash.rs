//! A fast hasher for the matcher's hot maps (flows, TX skbs, hosts): the
//! keys are small, fixed-size and not attacker-chosen in a way that
//! matters (a trace file is the operator's own), so SipHash's DoS
//! resistance buys nothing and costs a third of the matching time. The
//! multiply-rotate scheme of rustc's FxHasher, written here.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hasher (FxHash's constants).
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher {
    h: u64,
}

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl FastHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.h = (self.h.rotate_left(26) ^ v).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
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
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // Fold the high bits down: hashbrown takes its bucket from the low
        // bits and its tag from the top seven.
        self.h ^ (self.h >> 32)
    }
}

/// A HashMap with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
/// A HashSet with [`FastHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_small_keys() {
        let mut m: FastMap<(u16, u64, u32), u32> = FastMap::default();
        for i in 0..10_000u32 {
            m.insert((1, 0x1000, i.wrapping_mul(1448)), i);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m[&(1, 0x1000, 1448 * 77)], 77);
        let mut s: FastSet<[u8; 16]> = FastSet::default();
        s.insert([1; 16]);
        assert!(s.contains(&[1; 16]) && !s.contains(&[2; 16]));
    }
}
