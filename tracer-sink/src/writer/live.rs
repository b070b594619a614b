//! The live agents as the writer knows them, by agent index: in a slab
//! with the slots of recent lookups remembered in a small direct-mapped
//! cache (by index), since the time-ordered stream interleaves the events
//! of a few agents at a time: events alternating between two agents
//! hashed once each with a cache of one, and not at all with this one.

use tracer_codec::CaptureHeader;

use crate::batch::AgentInfo;
use crate::fasthash::IndexMap;

/// Entries of the lookup cache (a power of two).
const CACHED: usize = 8;

/// A live agent as the writer knows it.
pub(super) struct LiveAgent {
    /// What its IDB and capture records say.
    pub info: AgentInfo,
    /// Events handed to the writer (the ISB `isb_ifrecv`).
    pub received: u64,
    /// Its interface id in the file of the generation given.
    pub iface: Option<(u64, u32)>,
    /// Its capture header, encoded once (`info`'s id and host).
    pub capture: CaptureHeader,
}

/// Live agents by index.
#[derive(Default)]
pub(super) struct LiveAgents {
    slots: Vec<Option<LiveAgent>>,
    /// Free entries of `slots`.
    free: Vec<usize>,
    slot_of: IndexMap<usize>,
    /// Agent index and slot of recent lookups, at `index % CACHED`.
    cached: [Option<(u32, usize)>; CACHED],
}

impl LiveAgents {
    /// Add an agent, or update what its IDB says if it is live already.
    pub fn add(&mut self, info: AgentInfo) {
        let capture = CaptureHeader::new(info.agent_id, &info.host);
        if let Some(a) = self.get_mut(info.index) {
            a.info = info;
            a.capture = capture;
            return;
        }
        let index = info.index;
        let a = LiveAgent {
            info,
            received: 0,
            iface: None,
            capture,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(a);
                s
            }
            None => {
                self.slots.push(Some(a));
                self.slots.len() - 1
            }
        };
        self.slot_of.insert(index, slot);
    }

    /// Forget an agent; returns it.
    pub fn remove(&mut self, index: u32) -> Option<LiveAgent> {
        let slot = self.slot_of.remove(&index)?;
        let c = &mut self.cached[index as usize % CACHED];
        if c.is_some_and(|(i, _)| i == index) {
            *c = None;
        }
        self.free.push(slot);
        self.slots.get_mut(slot)?.take()
    }

    /// A live agent.
    pub fn get(&self, index: u32) -> Option<&LiveAgent> {
        let slot = match self.cached[index as usize % CACHED] {
            Some((i, s)) if i == index => s,
            _ => *self.slot_of.get(&index)?,
        };
        self.slots.get(slot)?.as_ref()
    }

    /// A live agent, to update.
    pub fn get_mut(&mut self, index: u32) -> Option<&mut LiveAgent> {
        let c = &mut self.cached[index as usize % CACHED];
        let slot = match *c {
            Some((i, s)) if i == index => s,
            _ => {
                let s = *self.slot_of.get(&index)?;
                *c = Some((index, s));
                s
            }
        };
        self.slots.get_mut(slot)?.as_mut()
    }

    /// The indices of the live agents, in order.
    pub fn indices(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.slot_of.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(index: u32) -> AgentInfo {
        AgentInfo {
            index,
            agent_id: u64::from(index),
            host: format!("h{index}"),
            clock_source: 0,
            incarnation: 1,
            source: "127.0.0.1:9".parse().unwrap(),
        }
    }

    #[test]
    fn lookups_follow_adds_removals_and_reused_slots() {
        let mut t = LiveAgents::default();
        for i in [5, 9, 2] {
            t.add(info(i));
        }
        t.get_mut(9).unwrap().received = 3;
        assert_eq!(t.get(9).unwrap().received, 3);
        assert_eq!(t.remove(9).unwrap().received, 3);
        assert!(t.get(9).is_none() && t.get_mut(9).is_none());
        // Agent 11 takes the freed slot; the remembered lookup must not
        // lead agent 9's index there.
        t.add(info(11));
        assert!(t.get(9).is_none());
        assert_eq!(t.get_mut(11).unwrap().info.host, "h11");
        assert_eq!(t.get(5).unwrap().info.agent_id, 5);
        assert_eq!(t.indices(), [2, 5, 11]);
        // Adding a live agent again updates it in place.
        t.get_mut(2).unwrap().received = 7;
        let mut again = info(2);
        again.host = "new".into();
        t.add(again);
        let a = t.get(2).unwrap();
        assert_eq!((a.received, a.info.host.as_str()), (7, "new"));
    }
}
