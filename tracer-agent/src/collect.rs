//! What a probe's drain hands its records to: the pipeline, each event
//! stamped once with the drain's clock snapshot, then batched; bad records
//! counted. One collector for the agent's drain loop and for the synthetic
//! feed of the pipeline bench (`crate::synthetic`), so the bench measures
//! the code the agent runs.

use crate::pipeline::Pipeline;
use crate::probes::{Collector, ProbeEvent, RecordError};
use crate::sender::Transport;
use crate::stamp::Stamper;

/// The pipeline seen by a probe's drain.
pub struct ToPipeline<'a, T: Transport> {
    /// Where the stamped events go.
    pub p: &'a mut Pipeline<T>,
    /// Holds this drain's clock snapshot.
    pub stamper: &'a mut Stamper,
}

impl<T: Transport> Collector for ToPipeline<'_, T> {
    fn event(&mut self, mut ev: ProbeEvent<'_>) {
        self.stamper.stamp(&mut ev);
        match ev {
            ProbeEvent::Tx(ev) => self.p.push(ev),
            ProbeEvent::Rx(ev) => self.p.push_rx(ev),
            ProbeEvent::Drop(ev) => {
                self.p.stats.drop_events += 1;
                self.p.push_event(ev);
            }
            ProbeEvent::Tcp(ev) => {
                self.p.stats.tcp_events += 1;
                self.p.push_event(ev);
            }
        }
    }

    fn bad_record(&mut self, probe: &'static str, err: RecordError) {
        if self.p.stats.bad_records == 0 {
            tracing::warn!(probe, error = %err, "dropped a bad probe record (counted as lost)");
        }
        self.p.stats.bad_records += 1;
    }
}
