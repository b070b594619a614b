//! One matched packet's life on the global time axis: the sender's TX
//! stages, then the receiver's RX stages, and the gaps between them.

use serde::Serialize;

use crate::flow::FlowKey;
use crate::input::HostId;

/// Stages of a packet's life, in the order it meets them. The codec's
/// names: `TxStage` on the sender, `RxStage` on the receiver. SND_HW is
/// not on this axis: its event is stamped when the driver reports the
/// hardware stamp, not when the packet left (its hardware stamp is kept
/// apart, see [`Life::tx_hw_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// Sender: `tcp_sendmsg` tagged the skb.
    Sendmsg = 0,
    /// Sender: entered the qdisc.
    Sched = 1,
    /// Sender: the driver handed it to the device (software stamp).
    SndSw = 2,
    /// Receiver: `netif_receive_skb`, the stack takes the skb.
    StackEntry = 3,
    /// Receiver: TCP input of the segment.
    TcpInput = 4,
    /// Receiver: the reader is woken (`rcv_nxt` passed the byte).
    DataReady = 5,
    /// Receiver: the application copies the skb holding the byte.
    Copy = 6,
    /// Receiver: the `recvmsg` that read the byte returned.
    ReadDone = 7,
}

/// Number of stages.
pub const STAGES: usize = 8;
/// Number of gaps between consecutive stages.
pub const GAPS: usize = STAGES - 1;

impl Stage {
    /// Every stage in life order.
    pub const ALL: [Stage; STAGES] = [
        Stage::Sendmsg,
        Stage::Sched,
        Stage::SndSw,
        Stage::StackEntry,
        Stage::TcpInput,
        Stage::DataReady,
        Stage::Copy,
        Stage::ReadDone,
    ];

    /// Its name as the codec and the dissector write it.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Sendmsg => "SENDMSG",
            Stage::Sched => "SCHED",
            Stage::SndSw => "SND_SW",
            Stage::StackEntry => "STACK_ENTRY",
            Stage::TcpInput => "TCP_INPUT",
            Stage::DataReady => "DATA_READY",
            Stage::Copy => "COPY",
            Stage::ReadDone => "READ_DONE",
        }
    }

    /// True for the receiver's stages.
    pub fn on_receiver(self) -> bool {
        self >= Stage::StackEntry
    }
}

/// Name of gap `i` (from stage `i` to stage `i + 1`), e.g. `SND_SW→STACK_ENTRY`.
pub fn gap_name(i: usize) -> String {
    format!("{}→{}", Stage::ALL[i].name(), Stage::ALL[i + 1].name())
}

/// What gap `i` measures, for readers.
pub fn gap_meaning(i: usize) -> &'static str {
    [
        "TCP holds the data (cwnd, pacing, TSQ, autocork)",
        "qdisc and driver TX path",
        "one-way: device, wire, receiver's driver, NAPI, GRO",
        "IP, netfilter, socket lookup, backlog",
        "TCP receive processing and queueing",
        "reader wake-up and scheduling",
        "rest of the read",
    ][i]
}

/// One matched (or attempted) transmission of one TX skb.
#[derive(Debug, Clone)]
pub struct Life {
    /// Sending host.
    pub sender: HostId,
    /// Receiving host.
    pub receiver: HostId,
    /// The flow, data direction.
    pub flow: FlowKey,
    /// `tskey`: sequence number of the TX skb's last byte; the byte the
    /// sender's stamps describe and the one followed on the receiver.
    pub tskey: u32,
    /// First byte of the TX skb at SENDMSG, when recorded.
    pub seq: Option<u32>,
    /// 0 for the first transmission of this skb, 1.. for later ones.
    pub attempt: u32,
    /// A retransmission (a repeated TX of bytes already sent, or inside
    /// a TCP RETRANSMIT range).
    pub retransmit: bool,
    /// Global time of each stage (ns), `None` when not recorded.
    pub at: [Option<u64>; STAGES],
    /// The sender's hardware TX stamp (raw PHC ns), 0 if none.
    pub tx_hw_ns: u64,
    /// The receiver's hardware RX stamp (raw PHC ns), 0 if none.
    pub rx_hw_ns: u64,
    /// The RX skb's sequence range (GRO-merged skbs cover several TX skbs).
    pub rx_range: (u32, u32),
    /// The bytes the TX skb held at the send, when recorded (version-2
    /// TX events).
    pub tx_range: Option<(u32, u32)>,
    /// Both hosts' clocks were locked (LOCKED or LOCKED_STABLE) at the
    /// send and at the arrival.
    pub clocks_locked: bool,
}

impl Life {
    /// Gap `i` (stage `i` to `i + 1`) when both stages were recorded.
    pub fn gap(&self, i: usize) -> Option<i64> {
        Some(self.at[i + 1]? as i64 - self.at[i]? as i64)
    }

    /// One-way latency: SND_SW on the sender to STACK_ENTRY on the
    /// receiver, on the global axis.
    pub fn one_way(&self) -> Option<i64> {
        self.gap(Stage::SndSw as usize)
    }

    /// One-way latency between the NICs' hardware stamps (both raw PHC
    /// time: meaningful when the two PHCs are synchronised, e.g. by PTP).
    pub fn one_way_hw(&self) -> Option<i64> {
        (self.tx_hw_ns != 0 && self.rx_hw_ns != 0)
            .then(|| self.rx_hw_ns as i64 - self.tx_hw_ns as i64)
    }

    /// First and last recorded stage times.
    pub fn span(&self) -> Option<(u64, u64)> {
        let mut it = self.at.iter().flatten();
        let first = *it.next()?;
        let last = self.at.iter().flatten().copied().max().unwrap_or(first);
        Some((first, last.max(first)))
    }

    /// Time from the first to the last recorded stage.
    pub fn total(&self) -> u64 {
        self.span().map_or(0, |(a, b)| b - a)
    }
}

/// A [`Life`] as reports print it (host names, flow text, stage map).
#[derive(Debug, Clone, Serialize)]
pub struct LifeReport {
    /// Sending host.
    pub sender: String,
    /// Receiving host.
    pub receiver: String,
    /// Flow, data direction.
    pub flow: String,
    /// Sequence number of the TX skb's last byte.
    pub tskey: u32,
    /// First byte at SENDMSG, when recorded.
    pub seq: Option<u32>,
    /// Transmission number of this skb (0: first).
    pub attempt: u32,
    /// A retransmission.
    pub retransmit: bool,
    /// Stage name -> global ns, recorded stages only, in life order.
    pub stages_ns: Vec<(String, u64)>,
    /// SND_SW -> STACK_ENTRY, ns.
    pub one_way_ns: Option<i64>,
    /// Hardware RX stamp - hardware TX stamp, ns.
    pub one_way_hw_ns: Option<i64>,
    /// First to last recorded stage, ns.
    pub total_ns: u64,
    /// RX skb range `[seq, end_seq)`.
    pub rx_range: (u32, u32),
    /// TX skb range `[seq, end_seq)` at the send, when recorded.
    pub tx_range: Option<(u32, u32)>,
    /// Both clocks were locked at the send and at the arrival.
    pub clocks_locked: bool,
}

impl Life {
    /// The printable form.
    pub fn report(&self, name: impl Fn(HostId) -> String) -> LifeReport {
        LifeReport {
            sender: name(self.sender),
            receiver: name(self.receiver),
            flow: self.flow.to_string(),
            tskey: self.tskey,
            seq: self.seq,
            attempt: self.attempt,
            retransmit: self.retransmit,
            stages_ns: Stage::ALL
                .iter()
                .filter_map(|s| Some((s.name().to_owned(), self.at[*s as usize]?)))
                .collect(),
            one_way_ns: self.one_way(),
            one_way_hw_ns: self.one_way_hw(),
            total_ns: self.total(),
            rx_range: self.rx_range,
            tx_range: self.tx_range,
            clocks_locked: self.clocks_locked,
        }
    }
}
