//! What the sink remembers of an incarnation's datagrams: the sequence
//! numbers seen lately (the replay window, with a key) and a fingerprint
//! of each recent datagram's content (to tell a conflicting datagram from
//! a duplicate, without one).

use tracer_codec::DatagramView;

/// Datagram sequence numbers the replay window covers: with a key, a
/// datagram more than this many behind the newest one of its incarnation
/// is rejected as `replay` (it cannot be told from one).
pub const REPLAY_WINDOW: u64 = 4096;

/// The datagram sequence numbers seen lately of one incarnation (a bitmap
/// over the last [`REPLAY_WINDOW`], as IPsec's anti-replay window).
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// Highest sequence number seen + 1 (0: none yet).
    top: u64,
    bits: Box<[u64; (REPLAY_WINDOW / 64) as usize]>,
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            top: 0,
            bits: Box::new([0; (REPLAY_WINDOW / 64) as usize]),
        }
    }
}

impl ReplayWindow {
    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % REPLAY_WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Whether `seq` has not been seen and is not too old to tell.
    pub fn is_fresh(&self, seq: u64) -> bool {
        if seq >= self.top {
            return true;
        }
        if self.top - seq > REPLAY_WINDOW {
            return false;
        }
        let (w, m) = Self::bit(seq);
        self.bits[w] & m == 0
    }

    /// Record `seq` as seen.
    pub fn mark(&mut self, seq: u64) {
        if seq >= self.top {
            let advance = seq + 1 - self.top;
            if advance >= REPLAY_WINDOW {
                self.bits.fill(0);
            } else {
                for s in self.top..=seq {
                    let (w, m) = Self::bit(s);
                    self.bits[w] &= !m;
                }
            }
            self.top = seq + 1;
        }
        let (w, m) = Self::bit(seq);
        self.bits[w] |= m;
    }
}

/// A cheap fingerprint of a datagram's content: equal for a copy, different
/// (but for a 2^-64 chance) for another datagram with the same sequence
/// number, whose first event's stamps or event numbering differ.
pub(crate) fn fingerprint(d: &DatagramView<'_>) -> u64 {
    let h = d.header();
    let mut x = h.first_event_seq
        ^ (u64::from(h.event_count) << 48)
        ^ h.lost_events.rotate_left(17)
        ^ (u64::from(h.clock_state) << 40);
    if let Some(r) = d.records().next() {
        let b = r.raw.bytes;
        for chunk in b[..b.len().min(36)].chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            x = (x ^ u64::from_le_bytes(w)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            x ^= x >> 29;
        }
    }
    x
}

/// The last `N` (seq, fingerprint) pairs pushed.
#[derive(Debug, Clone)]
pub(super) struct Ring<const N: usize> {
    items: [(u64, u64); N],
    len: usize,
    next: usize,
}

impl<const N: usize> Default for Ring<N> {
    fn default() -> Self {
        Ring {
            items: [(0, 0); N],
            len: 0,
            next: 0,
        }
    }
}

impl<const N: usize> Ring<N> {
    pub(super) fn push(&mut self, x: (u64, u64)) {
        self.items[self.next] = x;
        self.next = (self.next + 1) % N;
        self.len = (self.len + 1).min(N);
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.items[..self.len].iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_window_takes_each_sequence_once() {
        let mut w = ReplayWindow::default();
        assert!(w.is_fresh(0));
        w.mark(0);
        assert!(!w.is_fresh(0));
        w.mark(5);
        for s in 1..5 {
            assert!(w.is_fresh(s), "{s} not seen yet");
        }
        w.mark(3);
        assert!(!w.is_fresh(3) && !w.is_fresh(5) && w.is_fresh(4) && w.is_fresh(6));
        // Far ahead: everything older than the window is refused.
        w.mark(10_000);
        assert!(!w.is_fresh(10_000 - REPLAY_WINDOW - 1));
        assert!(w.is_fresh(10_000 - REPLAY_WINDOW + 1));
        assert!(!w.is_fresh(5), "seen long ago: too old to tell");
        // Bits of seqs that left the window do not linger.
        let mut w = ReplayWindow::default();
        w.mark(7);
        w.mark(7 + REPLAY_WINDOW / 2);
        w.mark(7 + REPLAY_WINDOW + 3);
        assert!(w.is_fresh(7 + REPLAY_WINDOW));
        assert!(!w.is_fresh(7 + REPLAY_WINDOW / 2));
    }
}
