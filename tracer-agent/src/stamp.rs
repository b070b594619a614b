//! Every probe event put on the global time axis once, here. The probes'
//! decoders give events with the raw stamps the kernel wrote; the stamper
//! reads each raw stamp as this host's clock reads it ([`LocalTime`]: the
//! stamp itself, or a simulated oscillator's reading of it) and converts it
//! through one snapshot of the clock taken per drain: the global clock's
//! mapping ([`Converter`]) and CLOCK_REALTIME − CLOCK_MONOTONIC from
//! clocksync's bracket, for the skbs' REALTIME stamps.

use clocksync::{measure_offset, ClockId};
use tracer_codec::ClockState;

use crate::clock::{Converter, LocalTime};
use crate::probes::interface::ProbeEvent;

/// `skb->tstamp_type` of a CLOCK_REALTIME stamp (`SKB_CLOCK_REALTIME`).
const SKB_CLOCK_REALTIME: u8 = 0;
/// `skb->tstamp_type` of a CLOCK_MONOTONIC delivery time (`SKB_CLOCK_MONOTONIC`).
const SKB_CLOCK_MONOTONIC: u8 = 1;

/// Brackets MONOTONIC/REALTIME/MONOTONIC per snapshot; the narrowest is
/// kept (a preemption between the reads widens one).
const REALTIME_BRACKETS: usize = 3;

/// Stamps events with this host's clocks as of the last [`Stamper::snapshot`].
pub struct Stamper {
    local: LocalTime,
    conv: Converter,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns. The same for local stamps: a
    /// simulated oscillator shifts both clocks alike.
    realtime_offset_ns: i64,
    /// Brackets that failed (clock_gettime refused); the last good offset
    /// stays in use.
    bracket_failures: u64,
}

impl Stamper {
    /// A stamper reading raw stamps through `local`, with `conv` as its
    /// first snapshot.
    pub fn new(local: LocalTime, conv: Converter) -> Self {
        let mut s = Stamper {
            local,
            conv,
            realtime_offset_ns: 0,
            bracket_failures: 0,
        };
        s.take_realtime_offset();
        s
    }

    /// Take this drain's snapshot: the global clock's mapping `conv` and
    /// REALTIME − MONOTONIC now.
    pub fn snapshot(&mut self, conv: Converter) {
        self.take_realtime_offset();
        self.conv = conv;
    }

    /// REALTIME − MONOTONIC from clocksync's bracket; on failure the last
    /// good offset stays.
    fn take_realtime_offset(&mut self) {
        match measure_offset(ClockId::Monotonic, ClockId::Realtime, REALTIME_BRACKETS) {
            Ok(b) => self.realtime_offset_ns = b.offset_ns(),
            Err(e) => {
                self.bracket_failures += 1;
                if self.bracket_failures.is_power_of_two() {
                    tracing::warn!(error = %e, failures = self.bracket_failures,
                        "cannot read REALTIME - MONOTONIC; RX stamps keep the last offset");
                }
            }
        }
    }

    /// A snapshot with a given REALTIME − MONOTONIC, for tests.
    #[cfg(test)]
    fn snapshot_with(&mut self, conv: Converter, realtime_offset_ns: i64) {
        self.conv = conv;
        self.realtime_offset_ns = realtime_offset_ns;
    }

    /// Clock state of the events stamped with this snapshot.
    pub fn state(&self) -> ClockState {
        self.conv.state
    }

    /// Fill `ev`'s local and global stamps from its raw ones.
    pub fn stamp(&mut self, ev: &mut ProbeEvent<'_>) {
        match ev {
            ProbeEvent::Tx(e) => (e.mono_ns, e.global_ns) = self.mono(e.mono_ns),
            ProbeEvent::Drop(e) => (e.mono_ns, e.global_ns) = self.mono(e.mono_ns),
            ProbeEvent::Tcp(e) => (e.mono_ns, e.global_ns) = self.mono(e.mono_ns),
            ProbeEvent::Rx(e) => {
                (e.mono_ns, e.global_ns) = self.mono(e.mono_ns);
                // Each stamp read by its own clock and through its mapping.
                // A MONOTONIC stamp is a delivery time the sender's TCP set
                // (EDT) that crossed a veth within this kernel: still an
                // instant of this host, so it converts exactly. TAI stamps
                // are left as they are and not converted (no TAI offset is
                // assumed).
                (e.rx_stamp_ns, e.rx_stamp_global_ns) = match (e.rx_stamp_ns, e.tstamp_type) {
                    (0, _) => (0, 0),
                    (ns, SKB_CLOCK_REALTIME) => self.realtime(ns),
                    (ns, SKB_CLOCK_MONOTONIC) => self.mono(ns),
                    (ns, _) => (ns, 0),
                };
            }
        }
    }

    /// A raw CLOCK_MONOTONIC stamp taken in user space (a CPU event's
    /// read): (as this host reads it, global).
    pub fn stamp_mono(&mut self, raw_ns: u64) -> (u64, u64) {
        self.mono(raw_ns)
    }

    /// A raw CLOCK_MONOTONIC stamp: (as this host reads it, global).
    #[inline]
    fn mono(&mut self, raw_ns: u64) -> (u64, u64) {
        let local = self.local.mono(raw_ns);
        (local, self.conv.to_global_ns(local))
    }

    /// A raw CLOCK_REALTIME stamp: (as this host reads it, global).
    #[inline]
    fn realtime(&mut self, raw_ns: u64) -> (u64, u64) {
        let local = self.local.realtime(raw_ns, self.realtime_offset_ns);
        let mono = (local as i64).saturating_sub(self.realtime_offset_ns);
        (local, self.conv.to_global_ns(mono.max(0) as u64))
    }

    /// Write out what the oscillator's truth log buffered.
    pub fn flush(&mut self) {
        self.local.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clocksync::OscillatorSpec;
    use tracer_codec::{DropEvent, RxEvent, TcpEvent, TxEvent};

    /// Global = mono + 1 ms, REALTIME = MONOTONIC + 40 µs.
    fn stamper(local: LocalTime) -> Stamper {
        let mut s = Stamper::new(local, Converter::fixed(1_000_000));
        s.snapshot_with(Converter::fixed(1_000_000), 40_000);
        s
    }

    /// An RX event at mono 100 µs whose skb stamp, 50 µs, has clock `tstamp_type`.
    fn rx(tstamp_type: u8) -> RxEvent {
        RxEvent {
            mono_ns: 100_000,
            rx_stamp_ns: 50_000,
            tstamp_type,
            ..Default::default()
        }
    }

    /// Stamp `ev` and give it back.
    fn stamped<E: crate::probes::interface::RawEvent>(s: &mut Stamper, mut ev: E) -> E {
        s.stamp(&mut ev.probe_event());
        ev
    }

    #[test]
    fn every_stamp_goes_on_the_global_axis_by_its_own_clock() {
        let mut s = stamper(LocalTime::real());
        let tx = stamped(
            &mut s,
            TxEvent {
                mono_ns: 5,
                ..Default::default()
            },
        );
        assert_eq!((tx.mono_ns, tx.global_ns), (5, 1_000_005));
        let e = [0, 2, 1].map(|t| stamped(&mut s, rx(t)));
        // REALTIME 50_000 is MONOTONIC 10_000: 90 µs before the stage.
        assert_eq!(
            (e[0].global_ns, e[0].rx_stamp_global_ns),
            (1_100_000, 1_010_000)
        );
        assert_eq!(e[0].since_rx_stamp_ns(), Some(90_000));
        // A TAI stamp (no offset assumed): no global stamp.
        assert_eq!((e[1].rx_stamp_ns, e[1].rx_stamp_global_ns), (50_000, 0));
        // A MONOTONIC delivery time maps like any mono stamp.
        assert_eq!(e[2].rx_stamp_global_ns, 1_050_000);
        // No stamp: none converted.
        let none = stamped(
            &mut s,
            RxEvent {
                rx_stamp_ns: 0,
                ..rx(0)
            },
        );
        assert_eq!((none.rx_stamp_ns, none.rx_stamp_global_ns), (0, 0));
    }

    #[test]
    fn the_simulated_oscillator_reads_every_raw_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("truth");
        // 3 µs ahead of the kernel's clock from the start, no drift.
        let osc = OscillatorSpec::new(3_000, 0.0).start_at(0);
        let mut s = stamper(LocalTime::simulated(osc, Some(&path)).unwrap());
        let tx = stamped(
            &mut s,
            TxEvent {
                mono_ns: 5,
                ..Default::default()
            },
        );
        assert_eq!((tx.mono_ns, tx.global_ns), (3_005, 1_003_005));
        let drop = stamped(
            &mut s,
            DropEvent {
                mono_ns: 7,
                ..DropEvent::default()
            },
        );
        assert_eq!((drop.mono_ns, drop.global_ns), (3_007, 1_003_007));
        let tcp = stamped(
            &mut s,
            TcpEvent {
                mono_ns: 9,
                ..TcpEvent::default()
            },
        );
        assert_eq!((tcp.mono_ns, tcp.global_ns), (3_009, 1_003_009));
        let e = [0, 1, 2].map(|t| stamped(&mut s, rx(t)));
        // Both the raw stamps on the wire and their conversions are local.
        assert_eq!((e[0].mono_ns, e[0].global_ns), (103_000, 1_103_000));
        assert_eq!(
            (e[0].rx_stamp_ns, e[0].rx_stamp_global_ns),
            (53_000, 1_013_000)
        );
        assert_eq!(
            (e[1].rx_stamp_ns, e[1].rx_stamp_global_ns),
            (53_000, 1_053_000)
        );
        // A TAI stamp is neither read through the host clock nor converted.
        assert_eq!((e[2].rx_stamp_ns, e[2].rx_stamp_global_ns), (50_000, 0));
        // Every stamp read went to the truth log, by its clock.
        s.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "m 3005 5",
                "m 3007 7",
                "m 3009 9",
                "m 103000 100000",
                "r 53000 50000",
                "m 103000 100000",
                "m 53000 50000",
                "m 103000 100000",
            ]
        );
    }

    #[test]
    fn a_snapshot_takes_realtime_minus_monotonic_from_the_bracket() {
        let mut s = stamper(LocalTime::real());
        s.snapshot(Converter::fixed(0));
        let rt = measure_offset(ClockId::Monotonic, ClockId::Realtime, 3).unwrap();
        let diff = (s.realtime_offset_ns - rt.offset_ns()).abs();
        assert!(diff < 1_000_000, "offset moved by {diff} ns");
        // The mapping in force is the new one.
        let tx = stamped(
            &mut s,
            TxEvent {
                mono_ns: 5,
                ..Default::default()
            },
        );
        assert_eq!(tx.global_ns, 5);
    }
}
