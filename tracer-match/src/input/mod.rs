//! Reading traces: the events of one or more pcapng files (plain or
//! zstd-compressed), merged into one stream in global-time order with a
//! bounded reorder window.

pub mod file;
pub mod merge;
pub mod pcapng;

use std::collections::HashMap;

use tracer_codec::{ClockEvent, CpuEvent, RxEvent, TcpEvent, TxEvent};

/// Index of a host (an agent's hostname) in [`HostTable`].
pub type HostId = u16;

/// The event kinds the matcher uses.
#[derive(Debug, Clone)]
pub enum Ev {
    /// A TX timestamping callback.
    Tx(TxEvent),
    /// A receive-path stage.
    Rx(RxEvent),
    /// A TCP anomaly (retransmissions matter here).
    Tcp(TcpEvent),
    /// A clock update: the agent's own claim about its clock.
    Clock(ClockEvent),
    /// What the network stack cost one CPU over one interval.
    Cpu(CpuEvent),
    /// Any other kind (drops, kinds this build does not know): only its
    /// event number and host matter here.
    Other,
}

/// One event of the merged stream.
#[derive(Debug, Clone)]
pub struct Input {
    /// Its global timestamp, ns.
    pub ts_ns: u64,
    /// The host that recorded it.
    pub host: HostId,
    /// The agent that sent it.
    pub agent_id: u64,
    /// The agent's event sequence number (a gap is a lost event).
    pub event_seq: u64,
    /// The agent's clock source when it sent the event (wire value).
    pub clock_source: u8,
    /// The agent's clock was locked (servo LOCKED or LOCKED_STABLE) when
    /// it sent the event: before, its times may be far off.
    pub clock_locked: bool,
    /// The event.
    pub ev: Ev,
}

/// Hosts by name, and the agents seen on each. A host is a hostname:
/// an agent restarted on the same host (a new agent id) is the same host.
#[derive(Debug, Default, Clone)]
pub struct HostTable {
    names: Vec<String>,
    by_name: HashMap<String, HostId>,
    by_agent: crate::fasthash::FastMap<u64, HostId>,
    agents: Vec<Vec<u64>>,
}

impl HostTable {
    /// The host of an event from `agent_id` named `name`.
    pub fn intern(&mut self, agent_id: u64, name: &str) -> HostId {
        if let Some(&h) = self.by_agent.get(&agent_id) {
            if self.names[h as usize] == name {
                return h;
            }
        }
        let h = match self.by_name.get(name) {
            Some(&h) => h,
            None => {
                let h = self.names.len() as HostId;
                self.names.push(name.to_owned());
                self.by_name.insert(name.to_owned(), h);
                self.agents.push(Vec::new());
                h
            }
        };
        self.by_agent.insert(agent_id, h);
        if !self.agents[h as usize].contains(&agent_id) {
            self.agents[h as usize].push(agent_id);
        }
        h
    }

    /// Name of a host.
    pub fn name(&self, h: HostId) -> &str {
        self.names.get(h as usize).map_or("?", String::as_str)
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when no host was seen.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Agent ids seen for a host.
    pub fn agents(&self, h: HostId) -> &[u64] {
        self.agents.get(h as usize).map_or(&[], Vec::as_slice)
    }

    /// The host of an agent id, if seen.
    pub fn host_of_agent(&self, agent_id: u64) -> Option<HostId> {
        self.by_agent.get(&agent_id).copied()
    }
}
