//! One drain: the clock snapshot its events are stamped with, every
//! probe's records into the pipeline, and the counters that go with them.

use crate::clock::AgentClock;
use crate::collect::ToPipeline;
use crate::pipeline::Pipeline;
use crate::probes::{Drained, Probe, ProbeCounters, ProbeError};
use crate::sender::UdpTransport;
use crate::stamp::Stamper;
use crate::stats::bpf_prog_info;
use tracer_codec::ClockState;

/// Take this drain's clock snapshot and advertise its state (logged when
/// it changes) on the datagrams its events go in.
pub(super) fn snapshot_clock(
    clock: &AgentClock,
    stamper: &mut Stamper,
    p: &mut Pipeline<UdpTransport>,
    last_state: &mut ClockState,
) {
    stamper.snapshot(clock.converter());
    let state = stamper.state();
    if state != *last_state {
        tracing::info!(state = %state.name(), source = %clock.source().name(), "clock state changed");
        *last_state = state;
    }
    p.set_clock(clock.source(), state);
}

/// Move every record the probes wrote into the pipeline; returns the
/// largest backlog one CPU of one probe had (None if no ring was read).
pub(super) fn drain(
    probes: &mut [Box<dyn Probe + '_>],
    p: &mut Pipeline<UdpTransport>,
    stamper: &mut Stamper,
) -> Option<u64> {
    let mut backlog = None;
    for probe in probes.iter_mut() {
        match probe.drain(&mut ToPipeline { p, stamper }) {
            Ok(Drained {
                overruns,
                max_backlog,
                ..
            }) => {
                p.stats.ring_overruns += overruns;
                backlog = Some(backlog.unwrap_or(0).max(max_backlog));
            }
            Err(e) => {
                tracing::warn!(probe = probe.name(), error = %with_causes(e), "reading the probe's ring");
            }
        }
    }
    backlog
}

/// A probe error and its causes on one line, for a warning.
pub(super) fn with_causes(e: ProbeError) -> String {
    format!("{:#}", anyhow::Error::from(e))
}

/// Refresh the BPF-side counters (summed over probes; read from mapped
/// memory) and the loss total sent to the sink, and with `runs` the
/// programs' run statistics (a BPF system call per program).
pub(super) fn update_counters(
    probes: &[Box<dyn Probe + '_>],
    p: &mut Pipeline<UdpTransport>,
    runs: bool,
) {
    let mut sum = ProbeCounters::default();
    let mut ok = true;
    for probe in probes {
        match probe.counters() {
            Ok(c) => sum += c,
            Err(e) => {
                ok = false;
                tracing::warn!(probe = probe.name(), error = %with_causes(e), "reading BPF counters");
            }
        }
    }
    // A failed read keeps the last good totals rather than going back.
    if ok {
        p.stats.bpf = sum;
    }
    p.set_lost_events(p.stats.bpf.ringbuf_lost + p.stats.ring_overruns + p.stats.bad_records);
    if !runs {
        return;
    }
    let infos: Vec<_> = probes
        .iter()
        .flat_map(|probe| probe.programs())
        .filter_map(bpf_prog_info)
        .collect();
    p.stats.set_bpf_runs(&infos);
}
