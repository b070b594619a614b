//! What the writer tells each agent: per agent, the events encoded into
//! the file's buffer and not yet written (delivered or lost at the next
//! commit), events it could not write at all, and the acknowledgements
//! sent right after a commit.

use std::net::UdpSocket;

use crate::fasthash::IndexMap;
use crate::stats::{Shared, SharedState};

/// Runs kept apart (a power of two): one per agent of the few whose
/// events the time-ordered stream interleaves.
const RUNS: usize = 8;

/// Per-agent delivery accounting of the writer.
pub(super) struct Delivery {
    /// Per agent: events encoded into the file's buffer, not yet written
    /// (they become delivered or lost at the next commit).
    uncommitted: IndexMap<u64>,
    /// Agents with `uncommitted` events.
    dirty: Vec<u32>,
    /// Events noted and not yet in `uncommitted`, as runs of one agent
    /// each, at `agent % RUNS`: the stream interleaves the events of a
    /// few agents, and one run alone ended at every switch between two
    /// (a map update per event).
    runs: [Option<(u32, u64)>; RUNS],
    /// Per agent: events it could not write at all since the last publish
    /// (a full disk loses them at the arrival rate: counted here, handed to
    /// the shared state once per message, not once per event).
    lost_pending: Vec<(u32, u64)>,
    /// Where acknowledgements go right after a commit.
    ack_socket: Option<UdpSocket>,
}

impl Delivery {
    /// Acknowledgements go out on `ack_socket` (none: with the receive
    /// task's next tick).
    pub fn new(ack_socket: Option<UdpSocket>) -> Self {
        Delivery {
            uncommitted: IndexMap::default(),
            dirty: Vec::new(),
            runs: [None; RUNS],
            lost_pending: Vec::new(),
            ack_socket,
        }
    }

    /// One more event of `agent` in the file's buffer.
    pub fn note_written(&mut self, agent: u32) {
        match &mut self.runs[agent as usize % RUNS] {
            Some((a, n)) if *a == agent => *n += 1,
            run => {
                if let Some((a, n)) = run.replace((agent, 1)) {
                    self.add_uncommitted(a, n);
                }
            }
        }
    }

    /// Move the runs of noted events into `uncommitted`.
    fn flush_run(&mut self) {
        for i in 0..RUNS {
            if let Some((a, n)) = self.runs[i].take() {
                self.add_uncommitted(a, n);
            }
        }
    }

    fn add_uncommitted(&mut self, agent: u32, events: u64) {
        let n = self.uncommitted.entry(agent).or_insert(0);
        if *n == 0 {
            self.dirty.push(agent);
        }
        *n += events;
    }

    /// An event of `agent` the sink could not write at all.
    pub fn lost_one(&mut self, agent: u32) {
        match self.lost_pending.last_mut() {
            Some((a, n)) if *a == agent => *n += 1,
            _ => self.lost_pending.push((agent, 1)),
        }
    }

    /// Hand the events lost since the last call to the shared state.
    pub fn publish_lost(&mut self, st: &mut SharedState) {
        for (a, n) in self.lost_pending.drain(..) {
            st.peers.add_delivery(a, 0, n);
        }
    }

    /// True when events are lost and not yet published.
    pub fn has_lost(&self) -> bool {
        !self.lost_pending.is_empty()
    }

    /// The buffer was written (`failed`: `None`) or its write failed
    /// (`failed`: the events per agent that still reached the file): the
    /// events of every agent in it are now delivered or lost, which is
    /// what the acknowledgements tell the agents.
    pub fn settle(&mut self, shared: &Shared, failed: Option<&[(u32, u64)]>) {
        self.flush_run();
        if self.dirty.is_empty() {
            return;
        }
        let acks = {
            let mut st = shared.lock();
            for &a in &self.dirty {
                let n = self.uncommitted.remove(&a).unwrap_or(0);
                let delivered = match failed {
                    None => n,
                    Some(w) => w
                        .iter()
                        .find(|(i, _)| *i == a)
                        .map_or(0, |&(_, k)| k.min(n)),
                };
                st.peers.add_delivery(a, delivered, n - delivered);
            }
            let SharedState { agents, peers, .. } = &mut *st;
            peers.due_acks_for(self.dirty.iter().copied(), |i| {
                agents.agents.get(&i).map_or(0, |a| a.seq.event_gaps)
            })
        };
        self.dirty.clear();
        if let Some(sock) = &self.ack_socket {
            let mut sent = 0;
            for (to, bytes) in acks {
                // The socket is non-blocking (tokio's): an ack that does
                // not fit now goes out with a later one.
                if sock.send_to(&bytes, to).is_ok() {
                    sent += 1;
                }
            }
            shared.lock().rx.acks_sent += sent;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_noted_in_runs_are_all_counted_per_agent() {
        let mut d = Delivery::new(None);
        for a in [7, 7, 3, 7, 7, 7, 3] {
            d.note_written(a);
        }
        d.flush_run();
        assert_eq!((d.uncommitted[&7], d.uncommitted[&3]), (5, 2));
        let mut dirty = d.dirty.clone();
        dirty.sort_unstable();
        assert_eq!(dirty, [3, 7]);
        // Settling forgets them.
        let shared = Shared::new(None, 10);
        d.note_written(3);
        d.settle(&shared, None);
        assert!(
            d.uncommitted.is_empty() && d.dirty.is_empty() && d.runs.iter().all(Option::is_none)
        );
        // Agents that share a run's place take it from each other.
        for a in [1, 9, 1, 9, 17, 1] {
            d.note_written(a);
        }
        d.flush_run();
        assert_eq!(
            (d.uncommitted[&1], d.uncommitted[&9], d.uncommitted[&17]),
            (3, 2, 1)
        );
    }
}
