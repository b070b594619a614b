//! Event kinds: the number that frames every record on the wire, so a
//! reader can dispatch on it, or skip a kind it does not know by length.

/// Wire identifier of an event kind. Kinds a decoder does not know are
/// skipped by length, so older sinks survive newer agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A BPF TX timestamping callback ([`TxEvent`](crate::TxEvent)).
    Tx,
    /// A clock update of the agent's global clock ([`ClockEvent`](crate::ClockEvent)).
    Clock,
    /// A receive-path stage ([`crate::RxEvent`]).
    Rx,
    /// An skb dropped by the kernel ([`DropEvent`](crate::DropEvent)).
    Drop,
    /// A TCP anomaly ([`TcpEvent`](crate::TcpEvent)).
    Tcp,
    /// The network stack's CPU time on one CPU ([`CpuEvent`](crate::CpuEvent)).
    Cpu,
    /// Any kind this build does not know.
    Unknown(u16),
}

impl EventKind {
    /// Kind number of [`TxEvent`](crate::TxEvent) records.
    pub const TX: u16 = 1;
    /// Kind number of [`ClockEvent`](crate::ClockEvent) records.
    pub const CLOCK: u16 = 2;
    /// Kind number of [`crate::RxEvent`] records.
    pub const RX: u16 = 3;
    /// Kind number of [`DropEvent`](crate::DropEvent) records.
    pub const DROP: u16 = 4;
    /// Kind number of [`TcpEvent`](crate::TcpEvent) records.
    pub const TCP: u16 = 5;
    /// Kind number of [`CpuEvent`](crate::CpuEvent) records.
    pub const CPU: u16 = 6;

    /// Kind from its wire number.
    pub fn from_u16(v: u16) -> Self {
        match v {
            Self::TX => EventKind::Tx,
            Self::CLOCK => EventKind::Clock,
            Self::RX => EventKind::Rx,
            Self::DROP => EventKind::Drop,
            Self::TCP => EventKind::Tcp,
            Self::CPU => EventKind::Cpu,
            other => EventKind::Unknown(other),
        }
    }

    /// Wire number of this kind.
    pub fn as_u16(self) -> u16 {
        match self {
            EventKind::Tx => Self::TX,
            EventKind::Clock => Self::CLOCK,
            EventKind::Rx => Self::RX,
            EventKind::Drop => Self::DROP,
            EventKind::Tcp => Self::TCP,
            EventKind::Cpu => Self::CPU,
            EventKind::Unknown(v) => v,
        }
    }
}
