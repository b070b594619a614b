//! The synthetic probe records and the rings they are fed through: one
//! IPv4 TCP flow (10.0.0.1:5201 → 10.0.0.2:40000, 1448-byte segments)
//! seen by the rx probe (five stages per skb) and by the tx probe (four
//! stages per skb, no NIC stamp), written into a memfd slot ring as the
//! probe writes them and drained by the agent's own `SlotRing` and decoder.

use std::marker::PhantomData;

use crate::probes::core::{deliver, ProbeKind};
use crate::probes::memfd_slots::MemfdSlots;
use crate::probes::rx::Rx;
use crate::probes::slots::{record_as_bytes, Drained, PlainRecord, SlotRing};
use crate::probes::tx::Tx;
use crate::probes::Collector;
use tracer_codec::{RxStage, TxStage, TX_FLAG_RANGE};

/// The rx probe's record, as its skeleton defines it.
type RxRecord = <Rx as ProbeKind>::Record;
/// The tx probe's record, as its skeleton defines it.
type TxRecord = <Tx as ProbeKind>::Record;

/// TCP payload bytes per skb of the flow.
const MSS: u32 = 1448;
/// Between two records of the flow, ns: about a 10 Gbit/s flow's pace
/// (five records per 1448-byte skb every ~1.2 µs).
const RECORD_GAP_NS: u64 = 240;
/// The flow's addresses (the first 4 bytes of the 16 hold IPv4).
const SADDR: [u8; 4] = [10, 0, 0, 1];
const DADDR: [u8; 4] = [10, 0, 0, 2];
/// netns inode of the init namespace on most hosts.
const NETNS: u32 = 4_026_531_840;

/// `addr` in a record's 16-byte address field.
fn addr16(addr: [u8; 4]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&addr);
    a
}

/// A task name as the kernel writes it (NUL-padded C chars).
fn comm(name: &[u8]) -> [i8; 16] {
    let mut c = [0i8; 16];
    for (d, s) in c.iter_mut().zip(name.iter().take(15)) {
        *d = *s as i8;
    }
    c
}

/// Record `n` of the rx feed on `cpu`: stage `n % 5` of skb `n / 5`, with
/// the fields the probe fills at that stage.
fn rx_record(n: u64, cpu: u32, base_ns: u64) -> RxRecord {
    let skb = n / RxStage::ALL.len() as u64;
    let stage = RxStage::ALL[(n % RxStage::ALL.len() as u64) as usize];
    let seq = 1_000_000u32.wrapping_add((skb as u32).wrapping_mul(MSS));
    let mono_ns = base_ns + n * RECORD_GAP_NS;
    let socket = matches!(stage, RxStage::Copy | RxStage::ReadDone);
    let mut r = RxRecord::default();
    r.hdr.kind = RxRecord::KIND;
    r.hdr.len = size_of::<RxRecord>() as u16;
    r.mono_ns = mono_ns;
    // skb->tstamp (CLOCK_REALTIME) while there is an skb; READ_DONE has none.
    r.rx_stamp_ns = if stage == RxStage::ReadDone {
        0
    } else {
        base_ns + skb * 5 * RECORD_GAP_NS + 1_700_000_000_000_000_000
    };
    r.cookie = if stage == RxStage::StackEntry { 0 } else { 77 };
    r.seq = seq;
    r.end_seq = seq.wrapping_add(MSS);
    r.len = MSS;
    r.netns = NETNS;
    r.ifindex = 2;
    r.cpu = cpu;
    if socket {
        r.pid = 4242;
        r.tid = 4242;
        r.comm = comm(b"iperf3");
    }
    r.stage = stage as u8;
    r.family = 4;
    r.protocol = 6;
    r.tstamp_type = 0;
    r.sport = 5201;
    r.dport = 40000;
    r.saddr = addr16(SADDR);
    r.daddr = addr16(DADDR);
    r
}

/// The tx probe's stages of one skb without a NIC stamp.
const TX_STAGES: [TxStage; 4] = [
    TxStage::Sendmsg,
    TxStage::Sched,
    TxStage::SndSw,
    TxStage::Ack,
];

/// Record `n` of the tx feed on `cpu`: stage `n % 4` of skb `n / 4`.
fn tx_record(n: u64, cpu: u32, base_ns: u64) -> TxRecord {
    let skb = n / TX_STAGES.len() as u64;
    let stage = TX_STAGES[(n % TX_STAGES.len() as u64) as usize];
    let seq = 2_000_000u32.wrapping_add((skb as u32).wrapping_mul(MSS));
    let mut r = TxRecord::default();
    r.hdr.kind = TxRecord::KIND;
    r.hdr.len = size_of::<TxRecord>() as u16;
    r.mono_ns = base_ns + n * RECORD_GAP_NS;
    r.cookie = 78;
    r.tskey = (skb as u32).wrapping_mul(MSS);
    r.seq = seq;
    r.end_seq = seq.wrapping_add(MSS);
    r.netns = NETNS;
    r.cpu = cpu;
    if stage == TxStage::Sendmsg {
        r.pid = 4243;
        r.tid = 4243;
    }
    r.stage = stage as u8;
    r.family = 4;
    r.sport = 40000;
    r.dport = 5201;
    r.flags = TX_FLAG_RANGE;
    r.saddr = addr16(DADDR);
    r.daddr = addr16(SADDR);
    r.comm = comm(b"iperf3");
    r
}

/// A probe kind the feed can write records of.
pub(crate) trait Synthetic: ProbeKind {
    /// Its value, as the agent makes it.
    fn kind() -> Self;
    /// Record `n` of the flow, written on `cpu`, stamps from `base_ns` on.
    fn record(n: u64, cpu: u32, base_ns: u64) -> Self::Record;
}

impl Synthetic for Rx {
    fn kind() -> Self {
        Rx::default()
    }
    fn record(n: u64, cpu: u32, base_ns: u64) -> RxRecord {
        rx_record(n, cpu, base_ns)
    }
}

impl Synthetic for Tx {
    fn kind() -> Self {
        Tx
    }
    fn record(n: u64, cpu: u32, base_ns: u64) -> TxRecord {
        tx_record(n, cpu, base_ns)
    }
}

/// One probe's slot ring: the probe's side, written by [`Writer::fill`]
/// (from a thread of its own, as a probe writes from the CPUs the traffic
/// runs on), and the agent's reader.
pub(crate) struct Ring<K: Synthetic> {
    kind: K,
    ring: SlotRing,
    /// The probe's side.
    pub(crate) writer: Writer<K>,
}

/// The probe's side of a ring: its slots and per-CPU counters.
pub(crate) struct Writer<K> {
    slots: MemfdSlots,
    /// Records started per CPU (the probe's `heads` map).
    heads: Vec<u64>,
    /// Records the ring holds when full.
    capacity: u64,
    /// Records written so far: the next one's place in the flow.
    written: u64,
    base_ns: u64,
    kind: PhantomData<fn() -> K>,
}

impl<K: Synthetic> Ring<K> {
    /// `slots_per_cpu` slots for each of `cpus` CPUs; stamps start at
    /// `base_ns` (CLOCK_MONOTONIC).
    pub(crate) fn new(cpus: usize, slots_per_cpu: u32, base_ns: u64) -> std::io::Result<Self> {
        let size = size_of::<K::Record>();
        let slots = MemfdSlots::new(cpus, slots_per_cpu, size, K::Record::COMMIT_OFFSET)?;
        let heads = vec![0; cpus];
        let ring = SlotRing::new(
            slots.fd(),
            size,
            K::Record::COMMIT_OFFSET,
            slots_per_cpu,
            &heads,
        )?;
        Ok(Ring {
            kind: K::kind(),
            ring,
            writer: Writer {
                slots,
                heads,
                capacity: cpus as u64 * u64::from(slots_per_cpu),
                written: 0,
                base_ns,
                kind: PhantomData,
            },
        })
    }

    /// Drain what was written into `out`, as the probe core drains a
    /// loaded probe (less the read of the mapped `heads`: the heads are here).
    pub(crate) fn drain(&mut self, out: &mut dyn Collector) -> Drained {
        let kind = &self.kind;
        self.ring
            .drain(&self.writer.heads, |data| deliver(kind, data, &mut *out))
    }
}

impl<K: Synthetic> Writer<K> {
    /// Records the ring holds when full.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Write and commit the next `n` records of the flow (at most a
    /// ring-full, so none is overwritten before it is read), the CPUs in
    /// turn, as the probe would on a host whose CPUs share the flow.
    pub(crate) fn fill(&mut self, n: u64) {
        let cpus = self.heads.len() as u64;
        for _ in 0..n.min(self.capacity) {
            let cpu = (self.written % cpus) as usize;
            let seq = self.heads[cpu];
            let r = K::record(self.written, cpu as u32, self.base_ns);
            self.slots.write(cpu, seq, record_as_bytes(&r));
            self.slots.commit(cpu, seq);
            self.heads[cpu] += 1;
            self.written += 1;
        }
    }
}
