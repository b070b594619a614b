//! A streaming pcapng block reader: one block at a time into a reused
//! buffer, so reading a trace costs no memory beyond its largest block.
//!
//! It knows the blocks the sink writes (docs/wire-format.md, "pcapng frame
//! payload"): the Section Header (either byte order), Interface
//! Description (`if_name` = the agent's hostname, `if_description` =
//! `agent <16 hex digits> clock <source>`, `if_tsresol`), Enhanced Packet
//! (one event each) and Interface Statistics (`isb_ifrecv`,
//! `isb_ifdrop`: the agent's events received and lost, cumulative over
//! the sink's run). Other block types are skipped by their length.

use std::io::Read;

use crate::error::MatchError;

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const ISB: u32 = 5;
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
/// Largest block accepted (the sink's blocks are far below it; a bigger
/// length means a corrupt file, not a bigger event).
const MAX_BLOCK: usize = 16 << 20;

/// One interface of the current section.
#[derive(Debug, Clone, Default)]
pub struct Interface {
    /// `if_name`: the agent's hostname.
    pub name: String,
    /// Agent id parsed from `if_description` (`agent <hex> clock ...`).
    pub agent_id: Option<u64>,
    /// Nanoseconds per timestamp unit numerator/denominator: ts_ns =
    /// raw * mul / div.
    ts_mul: u64,
    ts_div: u64,
}

/// A block as the matcher needs it.
#[derive(Debug)]
pub enum Block<'a> {
    /// An Enhanced Packet Block: one event.
    Packet {
        /// Interface id in the current section.
        iface: u32,
        /// Its timestamp in ns.
        ts_ns: u64,
        /// The captured bytes (the capture record).
        data: &'a [u8],
    },
    /// An Interface Statistics Block.
    Stats {
        /// Interface id in the current section.
        iface: u32,
        /// `isb_ifrecv`.
        ifrecv: Option<u64>,
        /// `isb_ifdrop`.
        ifdrop: Option<u64>,
    },
    /// An Enhanced Packet Block of an interface the section never
    /// declared: no time base, no host. Skipped by the reader's user.
    Undeclared {
        /// The interface id it names.
        iface: u32,
    },
    /// Any other block (SHB, IDB: already taken into the reader's state).
    Other,
}

/// Reads blocks from one pcapng stream.
pub struct PcapngReader<R> {
    r: R,
    buf: Vec<u8>,
    big_endian: bool,
    interfaces: Vec<Interface>,
    /// Bytes consumed so far (for error messages).
    offset: u64,
}

/// Outcome of filling a buffer.
enum Fill {
    Full,
    /// Clean end of input before the first byte.
    Eof,
    /// End of input after some of the wanted bytes.
    Short,
}

fn fill(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<Fill> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(if got == 0 { Fill::Eof } else { Fill::Short }),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Fill::Full)
}

impl<R: Read> PcapngReader<R> {
    /// A reader; the stream must start with a Section Header Block.
    pub fn new(r: R) -> Self {
        PcapngReader {
            r,
            buf: Vec::with_capacity(4096),
            big_endian: false,
            interfaces: Vec::new(),
            offset: 0,
        }
    }

    /// The stream read from.
    pub fn get_ref(&self) -> &R {
        &self.r
    }

    /// Interfaces of the current section, by id.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    fn u32_at(&self, b: &[u8], o: usize) -> u32 {
        let a = [b[o], b[o + 1], b[o + 2], b[o + 3]];
        if self.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }

    fn u16_at(&self, b: &[u8], o: usize) -> u16 {
        let a = [b[o], b[o + 1]];
        if self.big_endian {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }

    fn u64_at(&self, b: &[u8], o: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        if self.big_endian {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        }
    }

    /// Options from `body[start..]`: (code, value) pairs until
    /// `opt_endofopt` or the end.
    fn options<'b>(&self, body: &'b [u8], start: usize) -> Vec<(u16, &'b [u8])> {
        let mut out = Vec::new();
        let mut o = start;
        while o + 4 <= body.len() {
            let code = self.u16_at(body, o);
            let len = self.u16_at(body, o + 2) as usize;
            if code == 0 || o + 4 + len > body.len() {
                break;
            }
            out.push((code, &body[o + 4..o + 4 + len]));
            o += 4 + len.div_ceil(4) * 4;
        }
        out
    }

    fn bad(&self, what: impl Into<String>) -> MatchError {
        MatchError::BadBlock {
            offset: self.offset,
            what: what.into(),
        }
    }

    /// The next block; `Ok(None)` at a clean end of the stream. A stream
    /// that ends inside a block (a sink killed while writing) is
    /// [`MatchError::Truncated`]: every block before it was good.
    pub fn next_block(&mut self) -> Result<Option<Block<'_>>, MatchError> {
        let mut head = [0u8; 8];
        match fill(&mut self.r, &mut head)? {
            Fill::Eof if self.offset > 0 => return Ok(None),
            Fill::Eof | Fill::Short if self.offset == 0 => {
                return Err(self.bad("not a pcapng file (shorter than a block header)"));
            }
            Fill::Eof | Fill::Short => {
                return Err(MatchError::Truncated {
                    offset: self.offset,
                })
            }
            Fill::Full => {}
        }
        let raw_type = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if raw_type == SHB {
            // The byte order follows in the body: read it before the length.
            let mut magic = [0u8; 4];
            if !matches!(fill(&mut self.r, &mut magic)?, Fill::Full) {
                return Err(MatchError::Truncated {
                    offset: self.offset,
                });
            }
            self.big_endian = match u32::from_le_bytes(magic) {
                BYTE_ORDER_MAGIC => false,
                m if m.swap_bytes() == BYTE_ORDER_MAGIC => true,
                _ => return Err(self.bad("section header with an unknown byte-order magic")),
            };
            let total = self.u32_at(&head, 4) as usize;
            if !(28..=MAX_BLOCK).contains(&total) || total % 4 != 0 {
                return Err(self.bad(format!("section header of {total} bytes")));
            }
            self.buf.resize(total - 12, 0);
            if !matches!(fill(&mut self.r, &mut self.buf)?, Fill::Full) {
                return Err(MatchError::Truncated {
                    offset: self.offset,
                });
            }
            self.offset += total as u64;
            self.interfaces.clear();
            return Ok(Some(Block::Other));
        }
        if self.offset == 0 {
            return Err(self.bad("not a pcapng file (no section header block first)"));
        }
        let btype = self.u32_at(&head, 0);
        let total = self.u32_at(&head, 4) as usize;
        if !(12..=MAX_BLOCK).contains(&total) || total % 4 != 0 {
            return Err(self.bad(format!("block of type {btype} with length {total}")));
        }
        self.buf.resize(total - 8, 0);
        match fill(&mut self.r, &mut self.buf)? {
            Fill::Full => {}
            _ => {
                return Err(MatchError::Truncated {
                    offset: self.offset,
                })
            }
        }
        let at = self.offset;
        self.offset += total as u64;
        let body_len = total - 12;
        if self.u32_at(&self.buf, body_len) as usize != total {
            return Err(MatchError::BadBlock {
                offset: at,
                what: "trailing block length differs from the leading one".into(),
            });
        }
        let body = &self.buf[..body_len];
        match btype {
            IDB => {
                if body.len() < 8 {
                    return Err(self.bad("short interface description"));
                }
                let mut iface = Interface {
                    ts_mul: 1000, // default resolution: microseconds
                    ts_div: 1,
                    ..Interface::default()
                };
                for (code, v) in self.options(body, 8) {
                    match code {
                        2 => iface.name = String::from_utf8_lossy(v).into_owned(),
                        3 => iface.agent_id = parse_agent_id(&String::from_utf8_lossy(v)),
                        9 if !v.is_empty() => {
                            let r = v[0];
                            let (mul, div) = if r & 0x80 == 0 {
                                // 10^-r s
                                let r = u32::from(r.min(18));
                                if r <= 9 {
                                    (10u64.pow(9 - r), 1)
                                } else {
                                    (1, 10u64.pow(r - 9))
                                }
                            } else {
                                // 2^-r s: ns = raw * 1e9 / 2^r (kept approximate)
                                (1_000_000_000, 1u64 << u32::from((r & 0x7f).min(63)))
                            };
                            iface.ts_mul = mul;
                            iface.ts_div = div;
                        }
                        _ => {}
                    }
                }
                self.interfaces.push(iface);
                Ok(Some(Block::Other))
            }
            EPB => {
                if body.len() < 20 {
                    return Err(self.bad("short enhanced packet block"));
                }
                let iface = self.u32_at(body, 0);
                let raw = (u64::from(self.u32_at(body, 4)) << 32) | u64::from(self.u32_at(body, 8));
                let cap = self.u32_at(body, 12) as usize;
                if 20 + cap > body.len() {
                    return Err(self.bad("packet data runs past its block"));
                }
                let Some(i) = self.interfaces.get(iface as usize) else {
                    return Ok(Some(Block::Undeclared { iface }));
                };
                let ts_ns = ((u128::from(raw) * u128::from(i.ts_mul)) / u128::from(i.ts_div))
                    .min(u128::from(u64::MAX)) as u64;
                Ok(Some(Block::Packet {
                    iface,
                    ts_ns,
                    data: &self.buf[20..20 + cap],
                }))
            }
            ISB => {
                if body.len() < 12 {
                    return Err(self.bad("short interface statistics block"));
                }
                let iface = self.u32_at(body, 0);
                let (mut ifrecv, mut ifdrop) = (None, None);
                for (code, v) in self.options(body, 12) {
                    match code {
                        4 if v.len() == 8 => ifrecv = Some(self.u64_at(v, 0)),
                        5 if v.len() == 8 => ifdrop = Some(self.u64_at(v, 0)),
                        _ => {}
                    }
                }
                Ok(Some(Block::Stats {
                    iface,
                    ifrecv,
                    ifdrop,
                }))
            }
            _ => Ok(Some(Block::Other)),
        }
    }
}

/// The agent id of the sink's `if_description` (`agent <hex> clock <src>`).
pub fn parse_agent_id(desc: &str) -> Option<u64> {
    let rest = desc.strip_prefix("agent ")?;
    let hex = rest.split_whitespace().next()?;
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;
    use std::time::Duration;

    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::{
        InterfaceDescriptionBlock, InterfaceDescriptionOption, InterfaceTsResolution,
    };
    use pcap_file::pcapng::blocks::interface_statistics::{
        InterfaceStatisticsBlock, InterfaceStatisticsOption,
    };
    use pcap_file::pcapng::blocks::section_header::SectionHeaderBlock;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::{DataLink, Endianness};

    /// A small file by `pcap-file`, not by the sink's `TraceWriter`: the
    /// reader must read any writer's pcapng, big-endian sections included,
    /// which the sink never writes (the sink's own files are read back in
    /// the tests of tracer-testdata, tracer-sink and tracer-e2e).
    fn file(endianness: Endianness) -> Vec<u8> {
        let shb = SectionHeaderBlock {
            endianness,
            ..SectionHeaderBlock::default()
        };
        let mut w = PcapNgWriter::with_section_header(Vec::new(), shb).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::USER0,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Borrowed("host-a")),
                InterfaceDescriptionOption::IfDescription(Cow::Borrowed(
                    "agent 00000000deadbeef clock sink",
                )),
                InterfaceDescriptionOption::IfTsResol(InterfaceTsResolution::NANO),
            ],
        })
        .unwrap();
        for (i, len) in [0usize, 1, 5, 8].into_iter().enumerate() {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_nanos(1_700_000_000_123_456_789 + i as u64),
                original_len: len as u32,
                data: Cow::Owned(vec![i as u8; len]),
                options: vec![],
            })
            .unwrap();
        }
        w.write_pcapng_block(InterfaceStatisticsBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(5),
            options: vec![
                InterfaceStatisticsOption::IsbIfRecv(42),
                InterfaceStatisticsOption::IsbIfDrop(7),
            ],
        })
        .unwrap();
        w.into_inner()
    }

    type Packets = Vec<(u64, Vec<u8>)>;
    type Stats = Vec<(u32, Option<u64>, Option<u64>)>;

    fn read_all(bytes: &[u8]) -> (Packets, Stats, Option<MatchError>) {
        let mut r = PcapngReader::new(bytes);
        let (mut pk, mut st) = (Vec::new(), Vec::new());
        loop {
            match r.next_block() {
                Ok(None) => return (pk, st, None),
                Ok(Some(Block::Packet { ts_ns, data, .. })) => pk.push((ts_ns, data.to_vec())),
                Ok(Some(Block::Stats {
                    iface,
                    ifrecv,
                    ifdrop,
                })) => st.push((iface, ifrecv, ifdrop)),
                Ok(Some(Block::Other | Block::Undeclared { .. })) => {}
                Err(e) => return (pk, st, Some(e)),
            }
        }
    }

    #[test]
    fn packets_of_an_undeclared_interface_are_named_not_read() {
        let mut bytes = file(Endianness::Little);
        // Walk SHB and IDB by their lengths to the first EPB; point it at
        // interface 5, which the section never declared.
        let len_at =
            |b: &[u8], o: usize| u32::from_le_bytes(b[o + 4..o + 8].try_into().unwrap()) as usize;
        let epb = len_at(&bytes, 0) + len_at(&bytes, len_at(&bytes, 0));
        bytes[epb + 8..epb + 12].copy_from_slice(&5u32.to_le_bytes());
        let mut r = PcapngReader::new(&bytes[..]);
        let mut seen = Vec::new();
        while let Ok(Some(b)) = r.next_block() {
            match b {
                Block::Undeclared { iface } => seen.push(Some(iface)),
                Block::Packet { .. } => seen.push(None),
                _ => {}
            }
        }
        assert_eq!(seen, vec![Some(5), None, None, None]);
    }

    #[test]
    fn reads_what_pcap_file_writes_in_both_byte_orders() {
        for e in [Endianness::Little, Endianness::Big] {
            let bytes = file(e);
            let (pk, st, err) = read_all(&bytes);
            assert!(err.is_none(), "{err:?}");
            assert_eq!(pk.len(), 4);
            assert_eq!(pk[2], (1_700_000_000_123_456_791, vec![2u8; 5]));
            assert_eq!(st, vec![(0, Some(42), Some(7))]);
            let mut r = PcapngReader::new(&bytes[..]);
            while let Ok(Some(_)) = r.next_block() {}
            assert_eq!(r.interfaces()[0].name, "host-a");
            assert_eq!(r.interfaces()[0].agent_id, Some(0xdead_beef));
        }
    }

    #[test]
    fn a_cut_file_keeps_its_whole_blocks() {
        let bytes = file(Endianness::Little);
        for cut in [bytes.len() - 1, bytes.len() - 30, 40] {
            let (pk, _, err) = read_all(&bytes[..cut]);
            assert!(
                matches!(err, Some(MatchError::Truncated { .. })),
                "{cut}: {err:?}"
            );
            assert!(pk.len() <= 4);
        }
        let (_, _, err) = read_all(b"not a pcapng file at all");
        assert!(matches!(err, Some(MatchError::BadBlock { .. })), "{err:?}");
    }

    #[test]
    fn agent_id_from_the_description() {
        assert_eq!(
            parse_agent_id("agent 0123456789abcdef clock sink"),
            Some(0x0123_4567_89ab_cdef)
        );
        assert_eq!(parse_agent_id("something else"), None);
    }
}
