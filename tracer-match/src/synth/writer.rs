//! Writing synthetic events as the sink writes its files: SHB, one IDB per
//! host, one EPB per event whose payload is the codec's capture record,
//! ISBs with cumulative totals at the end of each file.

use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption, InterfaceTsResolution,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::blocks::opt_common::{CommonOption, UnknownOption};
use pcap_file::pcapng::blocks::section_header::SectionHeaderBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use tracer_codec::{CaptureRecord, WireEvent};

use super::config::SynthConfig;
use super::sim::SynthEvent;
use crate::input::Ev;

/// How synthetic events are laid out in files.
#[derive(Debug, Clone, Default)]
pub struct FileLayout {
    /// Start a new file after this many events (the sink's rotation).
    pub events_per_file: Option<u64>,
    /// One file series per host, as if each host had its own sink.
    pub per_host: bool,
}

/// The record bytes (kind, len, body) of an event.
pub fn record_bytes(ev: &Ev, out: &mut Vec<u8>) {
    fn put<E: WireEvent>(e: &E, out: &mut Vec<u8>) {
        out.extend_from_slice(&E::KIND.to_le_bytes());
        out.extend_from_slice(&(E::BODY_LEN as u16).to_le_bytes());
        e.encode_body(out);
    }
    match ev {
        Ev::Tx(e) => put(e, out),
        Ev::Rx(e) => put(e, out),
        Ev::Tcp(e) => put(e, out),
        Ev::Clock(e) => put(e, out),
        Ev::Cpu(e) => put(e, out),
        Ev::Other => {
            // An unknown kind, skipped by readers by its length.
            out.extend_from_slice(&999u16.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
        }
    }
}

struct OpenFile {
    w: PcapNgWriter<BufWriter<File>>,
    events: u64,
}

/// Writes synthetic events as the sink writes its files.
pub struct SynthWriter {
    dir: PathBuf,
    layout: FileLayout,
    names: [String; 2],
    agent_ids: [u64; 2],
    /// Open file per series (one series, or one per host).
    files: [Option<OpenFile>; 2],
    counters: [u32; 2],
    /// Cumulative events per host written and lost (the ISB totals).
    recv: [u64; 2],
    drop: [u64; 2],
    /// Files written, in creation order.
    pub paths: Vec<PathBuf>,
    buf: Vec<u8>,
}

fn io(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl SynthWriter {
    /// Files go into `dir`.
    pub fn new(dir: &Path, cfg: &SynthConfig, layout: FileLayout) -> Self {
        SynthWriter {
            dir: dir.to_owned(),
            layout,
            names: cfg.names.clone(),
            agent_ids: cfg.agent_ids,
            files: [None, None],
            counters: [0, 0],
            recv: [0, 0],
            drop: [0, 0],
            paths: Vec::new(),
            buf: Vec::with_capacity(256),
        }
    }

    fn open(&mut self, series: usize) -> std::io::Result<()> {
        let name = if self.layout.per_host {
            format!("sink{series}-{:03}.pcapng", self.counters[series])
        } else {
            format!("trace-{:03}.pcapng", self.counters[series])
        };
        self.counters[series] += 1;
        let path = self.dir.join(name);
        let f = BufWriter::with_capacity(1 << 20, File::create(&path)?);
        let mut w =
            PcapNgWriter::with_section_header(f, SectionHeaderBlock::default()).map_err(io)?;
        for h in 0..2 {
            if self.layout.per_host && h != series {
                continue;
            }
            w.write_pcapng_block(InterfaceDescriptionBlock {
                linktype: DataLink::USER0,
                snaplen: 0,
                options: vec![
                    InterfaceDescriptionOption::IfName(Cow::Owned(self.names[h].clone())),
                    InterfaceDescriptionOption::IfDescription(Cow::Owned(format!(
                        "agent {:016x} clock sink",
                        self.agent_ids[h]
                    ))),
                    InterfaceDescriptionOption::IfTsResol(InterfaceTsResolution::NANO),
                ],
            })
            .map_err(io)?;
        }
        self.paths.push(path);
        self.files[series] = Some(OpenFile { w, events: 0 });
        Ok(())
    }

    fn close(&mut self, series: usize) -> std::io::Result<()> {
        let Some(mut f) = self.files[series].take() else {
            return Ok(());
        };
        for h in 0..2 {
            if self.layout.per_host && h != series {
                continue;
            }
            let iface = if self.layout.per_host { 0 } else { h as u32 };
            f.w.write_pcapng_block(InterfaceStatisticsBlock {
                interface_id: iface,
                timestamp: Duration::from_nanos(0),
                options: vec![
                    InterfaceStatisticsOption::IsbIfRecv(self.recv[h]),
                    InterfaceStatisticsOption::IsbIfDrop(self.drop[h]),
                ],
            })
            .map_err(io)?;
        }
        let mut inner = f.w.into_inner();
        std::io::Write::flush(&mut inner)
    }

    /// Write one event; `dropped` is the host's cumulative lost events.
    pub fn write(&mut self, e: &SynthEvent, dropped: u64) -> std::io::Result<()> {
        let series = if self.layout.per_host { e.host } else { 0 };
        if self.files[series]
            .as_ref()
            .is_some_and(|f| self.layout.events_per_file.is_some_and(|n| f.events >= n))
        {
            self.close(series)?;
        }
        if self.files[series].is_none() {
            self.open(series)?;
        }
        self.recv[e.host] += 1;
        self.drop[e.host] = dropped;
        let iface = if self.layout.per_host {
            0
        } else {
            e.host as u32
        };
        let mut rec = Vec::with_capacity(160);
        record_bytes(&e.ev, &mut rec);
        self.buf.clear();
        CaptureRecord::encode(
            &mut self.buf,
            self.agent_ids[e.host],
            e.event_seq,
            2,
            if e.locked { 3 } else { 0 },
            &self.names[e.host],
            &rec,
        );
        let id = e.event_seq.to_le_bytes();
        let Some(f) = self.files[series].as_mut() else {
            return Err(io("no open file"));
        };
        f.w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: iface,
            timestamp: Duration::from_nanos(e.ts_ns),
            original_len: self.buf.len() as u32,
            data: Cow::Borrowed(&self.buf),
            options: vec![EnhancedPacketOption::Common(CommonOption::Unknown(
                UnknownOption {
                    code: 5,
                    value: Cow::Borrowed(&id),
                },
            ))],
        })
        .map_err(io)?;
        f.events += 1;
        Ok(())
    }

    /// Close every file (writing its ISBs).
    pub fn finish(mut self) -> std::io::Result<Vec<PathBuf>> {
        self.close(0)?;
        self.close(1)?;
        Ok(self.paths)
    }
}
