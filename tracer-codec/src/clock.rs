//! The CLOCK event: one update of an agent's global clock, with the clock
//! source and servo state that the datagram and capture headers carry too.

use crate::kind::EventKind;

wire_enum! {
    /// Which clock an agent's global timestamps come from (datagram
    /// header). Names are lower-case, as on command lines and in pcapng
    /// descriptions.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ClockSource (table "ClockSource") {
        /// CLOCK_TAI of the agent's own host, mapped from CLOCK_MONOTONIC.
        System = 0 => "system",
        /// A PTP hardware clock disciplining the global clock.
        Phc = 1 => "phc",
        /// The sink's clock through the kernel-stamped two-way exchange.
        Sink = 2 => "sink",
    }
}

wire_enum! {
    /// Servo state of the agent's global clock (datagram header), named
    /// as phc2sys prints it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ClockState (table "ClockState") {
        /// No usable estimate yet.
        Unlocked = 0 => "UNLOCKED",
        /// The clock was just stepped.
        Jump = 1 => "JUMP",
        /// Tracking.
        Locked = 2 => "LOCKED",
        /// Tracking with a small, steady offset.
        LockedStable = 3 => "LOCKED_STABLE",
        /// The reference moved further or faster than this clock can
        /// explain (the servo's sanity check): the clock runs on its own
        /// frequency and does not follow it. A sign of a forged or broken
        /// reference; the clock event's error estimate says how far the
        /// reference disagrees.
        Holdover = 4 => "HOLDOVER",
    }
}

impl ClockState {
    /// LOCKED or LOCKED_STABLE: the clock follows its reference, so a
    /// cross-host claim may rest on it (HOLDOVER does not: the reference
    /// and the clock disagree).
    pub fn is_locked(self) -> bool {
        matches!(self, ClockState::Locked | ClockState::LockedStable)
    }

    /// [`Self::is_locked`] of a wire value (false for an unknown one).
    pub fn is_locked_code(v: u8) -> bool {
        ClockState::from_u8(v).is_some_and(ClockState::is_locked)
    }
}

wire_event! {
    /// One update of an agent's global clock: the raw sample and what the
    /// servo made of it, so a reader can judge (and post-correct) each host's
    /// time. Field order is the wire layout; append only.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct ClockEvent (kind EventKind::CLOCK, name "CLOCK", title "clock update") {
        /// Monotonic instant of the sample (raw kernel clock), ns.
        pub mono_ns: u64 => U64,
        /// The global clock at `mono_ns`, after this update, ns (TAI).
        pub global_ns: u64 => U64,
        /// The reference clock's reading at `mono_ns` (raw sample), ns.
        pub ref_ns: u64 => U64,
        /// `global - reference` at `mono_ns`, before this update, ns.
        pub offset_ns: i64 => I64,
        /// Frequency correction in force after this update, ppb.
        pub freq_ppb: f64 => F64,
        /// Sample delay: read delay of the reference, or the exchange's
        /// round-trip path delay, ns.
        pub delay_ns: u64 => U64,
        /// Uncertainty of the sample (half its bracket), ns.
        pub uncertainty_ns: u64 => U64,
        /// The clock's error estimate after this update, ns.
        pub error_estimate_ns: u64 => U64,
        /// [`ClockSource`] as its wire value.
        pub source: u8 => U8 in ClockSource::NAMES,
        /// [`ClockState`] (servo state) after this update, as its wire value.
        pub state: u8 => U8 in ClockState::NAMES,
    }
}

impl ClockEvent {
    /// One-line summary, phc2sys style.
    pub fn summary(&self) -> String {
        format!(
            "CLOCK {} {} offset {} ns freq {:+.1} ppb delay {} ns err {} ns",
            ClockSource::from_u8(self.source).map_or("?", ClockSource::name),
            ClockState::from_u8(self.state).map_or("?", ClockState::name),
            self.offset_ns,
            self.freq_ppb,
            self.delay_ns,
            self.error_estimate_ns
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of field `name` of an encoded body, located by the layout table.
    fn at<'a>(layout: &crate::layout::field::EventLayout, b: &'a [u8], name: &str) -> &'a [u8] {
        &b[layout.field(name).expect("described").range()]
    }

    #[test]
    fn clock_body_layout_and_round_trip() {
        let ev = ClockEvent {
            mono_ns: 1,
            global_ns: 2,
            ref_ns: 3,
            offset_ns: -4,
            freq_ppb: 12.5,
            delay_ns: 6,
            uncertainty_ns: 7,
            error_estimate_ns: 8,
            source: 2,
            state: 3,
        };
        let mut b = Vec::new();
        ev.encode_body(&mut b);
        assert_eq!(b.len(), ClockEvent::BODY_LEN);
        let l = &ClockEvent::LAYOUT;
        assert_eq!(at(l, &b, "offset_ns"), &(-4i64).to_le_bytes());
        assert_eq!(at(l, &b, "freq_ppb"), &12.5f64.to_le_bytes());
        assert_eq!(
            (at(l, &b, "source"), at(l, &b, "state")),
            (&[2u8][..], &[3u8][..])
        );
        assert_eq!(ClockEvent::decode_body(&b).unwrap(), ev);
        let state = l.field("state").expect("described").offset;
        b[state] = 9;
        assert!(ClockEvent::decode_body(&b).is_err());
    }
}
