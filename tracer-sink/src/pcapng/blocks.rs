//! The blocks `pcap-file` encodes for the sink: the Section Header Block
//! of every file, an agent's Interface Description Block and its
//! Interface Statistics Block.

use std::borrow::Cow;
use std::time::Duration;

use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption, InterfaceTsResolution,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::blocks::opt_common::CommonOption;
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::{DataLink, Endianness};

use crate::batch::AgentInfo;

/// What an ISB says about one interface.
#[derive(Debug, Clone)]
pub(crate) struct IsbInfo {
    /// Agent index.
    pub agent: u32,
    /// Events received from the agent (cumulative, whole sink run).
    pub ifrecv: u64,
    /// Events lost before the sink (event gaps + agent-side losses).
    pub ifdrop: u64,
    /// Breakdown for the comment.
    pub comment: String,
}

/// Snapshot length written in every IDB (no limit is applied).
pub const SNAPLEN: u32 = 0;

/// The Section Header Block of every file.
pub(crate) fn section_header() -> SectionHeaderBlock<'static> {
    let os = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| format!("{} {}", std::env::consts::OS, r.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_owned());
    SectionHeaderBlock {
        endianness: Endianness::Little,
        major_version: 1,
        minor_version: 0,
        section_length: -1,
        options: vec![
            SectionHeaderOption::UserApplication(Cow::Owned(format!(
                "tracer-sink {}",
                env!("CARGO_PKG_VERSION")
            ))),
            SectionHeaderOption::OS(Cow::Owned(os)),
            SectionHeaderOption::Hardware(Cow::Borrowed(std::env::consts::ARCH)),
        ],
    }
}

/// The Interface Description Block of an agent.
pub(crate) fn interface_block(a: &AgentInfo) -> InterfaceDescriptionBlock<'_> {
    InterfaceDescriptionBlock {
        linktype: DataLink::USER0,
        snaplen: SNAPLEN,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Borrowed(&a.host)),
            InterfaceDescriptionOption::IfDescription(Cow::Owned(interface_description(
                a.agent_id,
                a.clock_source,
                a.incarnation,
                a.source,
            ))),
            // Without it readers assume microseconds (platform-facts.md).
            InterfaceDescriptionOption::IfTsResol(InterfaceTsResolution::NANO),
        ],
    }
}

/// The Interface Description Block of an interface that is no agent's:
/// `name` on `link`, nanosecond stamps.
pub(super) fn named_interface_block(link: DataLink, name: &str) -> InterfaceDescriptionBlock<'_> {
    InterfaceDescriptionBlock {
        linktype: link,
        snaplen: SNAPLEN,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Borrowed(name)),
            InterfaceDescriptionOption::IfTsResol(InterfaceTsResolution::NANO),
        ],
    }
}

/// `if_description` of an agent's interface: its id, clock source,
/// incarnation and the source address of its first datagram (a later
/// change is counted in the interface statistics).
pub fn interface_description(
    agent_id: u64,
    clock_source: u8,
    incarnation: u64,
    source: std::net::SocketAddr,
) -> String {
    format!(
        "agent {agent_id:016x} clock {} incarnation {incarnation:016x} from {source}",
        crate::stats::clock_source_name(clock_source)
    )
}

/// The ISB of interface `iface` at `now_ns`: `span` is the first and last
/// event time written in this file, if any.
pub(super) fn statistics_block(
    iface: u32,
    span: Option<(u64, u64)>,
    isb: &IsbInfo,
    now_ns: u64,
) -> InterfaceStatisticsBlock<'_> {
    let mut options = Vec::with_capacity(5);
    if let Some((first, last)) = span {
        options.push(InterfaceStatisticsOption::IsbStartTime(
            Duration::from_nanos(first),
        ));
        options.push(InterfaceStatisticsOption::IsbEndTime(Duration::from_nanos(
            last,
        )));
    }
    options.push(InterfaceStatisticsOption::IsbIfRecv(isb.ifrecv));
    options.push(InterfaceStatisticsOption::IsbIfDrop(isb.ifdrop));
    // The sink's comment is never empty; a file written from outside may
    // have none to give.
    if !isb.comment.is_empty() {
        options.push(InterfaceStatisticsOption::Common(CommonOption::Comment(
            Cow::Borrowed(&isb.comment),
        )));
    }
    InterfaceStatisticsBlock {
        interface_id: iface,
        timestamp: Duration::from_nanos(now_ns),
        options,
    }
}
