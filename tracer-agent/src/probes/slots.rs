//! Reader of the probe's per-CPU slot ring: an mmapable BPF array of
//! records, `slots_per_cpu` per CPU, and a per-CPU counter of records
//! started. The probe takes slot `counter % slots_per_cpu` with one atomic
//! add and publishes it by writing `commit = counter + 1` last; this reader
//! keeps a tail per CPU, copies committed slots in order, and counts the
//! records a producer overwrote before they were read.

use std::os::fd::BorrowedFd;

use super::mapping::ReadMapping;

/// What one drain found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Records handed to the callback.
    pub records: u64,
    /// Records overwritten before they were read (lost).
    pub overruns: u64,
    /// Most records pending on one CPU at the start of the drain.
    pub max_backlog: u64,
}

/// Why a record read from a probe's ring was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Shorter than the record it must hold.
    #[error("short record: {0} bytes")]
    Short(usize),
    /// A kind this agent does not know.
    #[error("unknown record kind {0}")]
    UnknownKind(u16),
    /// `hdr.len` differs from the size of its kind's record.
    #[error("record length {got}, expected {want}")]
    BadLen {
        /// `hdr.len` as written.
        got: u16,
        /// The size of the record kind.
        want: usize,
    },
    /// A stage value the wire format does not define.
    #[error("unknown stage {0}")]
    UnknownStage(u8),
    /// An address family other than 4 or 6.
    #[error("address family {0}, expected 4 or 6")]
    BadFamily(u8),
}

/// A read-only mapping of the slot array plus the reader's positions.
#[derive(Debug)]
pub struct SlotRing {
    map: ReadMapping,
    slot_size: usize,
    commit_offset: usize,
    slots_per_cpu: u64,
    tails: Vec<u64>,
}

impl SlotRing {
    /// Map `ncpu * slots_per_cpu` slots of `slot_size` bytes from the array
    /// map `fd` (created with BPF_F_MMAPABLE). Each slot holds its u32
    /// commit word (`record_hdr.commit`) at `commit_offset`. `heads` are the
    /// counters now, so records started before the reader existed are not
    /// read.
    pub fn new(
        fd: BorrowedFd<'_>,
        slot_size: usize,
        commit_offset: usize,
        slots_per_cpu: u32,
        heads: &[u64],
    ) -> std::io::Result<Self> {
        // Volatile reads of the commit word need it whole and aligned.
        if commit_offset + 4 > slot_size || commit_offset % 4 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the commit word must be an aligned u32 inside the slot",
            ));
        }
        // Array values are laid out at 8-byte aligned strides.
        let slot_size = slot_size.div_ceil(8) * 8;
        let bytes = slot_size * slots_per_cpu as usize * heads.len();
        let map = ReadMapping::new(fd, bytes)?;
        Ok(SlotRing {
            map,
            slot_size,
            commit_offset,
            slots_per_cpu: u64::from(slots_per_cpu),
            tails: heads.to_vec(),
        })
    }

    fn slot(&self, cpu: usize, seq: u64) -> *const u8 {
        let idx = cpu as u64 * self.slots_per_cpu + (seq & (self.slots_per_cpu - 1));
        // SAFETY: idx < ncpu * slots_per_cpu, all inside the mapping.
        unsafe { self.map.base().add(idx as usize * self.slot_size) }
    }

    fn commit(&self, slot: *const u8) -> u32 {
        // SAFETY: the commit word lies inside the slot (checked in new());
        // the producer writes it concurrently, hence a volatile read.
        let c = unsafe { std::ptr::read_volatile(slot.add(self.commit_offset).cast::<u32>()) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        c
    }

    /// Hand every committed record up to `heads` (the per-CPU counters, read
    /// just before) to `f`, oldest first per CPU. A slot not yet committed
    /// (its writer is still running) ends that CPU's drain until next time.
    pub fn drain(&mut self, heads: &[u64], mut f: impl FnMut(&[u8])) -> Drained {
        let mut d = Drained::default();
        let mut buf = vec![0u8; self.slot_size];
        for (cpu, &head) in heads.iter().enumerate().take(self.tails.len()) {
            let mut tail = self.tails[cpu];
            if head <= tail {
                continue;
            }
            d.max_backlog = d.max_backlog.max(head - tail);
            if head - tail > self.slots_per_cpu {
                // The producer lapped us: the oldest records are gone.
                let skip = head - tail - self.slots_per_cpu;
                d.overruns += skip;
                tail += skip;
            }
            while tail < head {
                let slot = self.slot(cpu, tail);
                let want = (tail as u32).wrapping_add(1);
                if self.commit(slot) != want {
                    // Still being written, or already overwritten by a newer
                    // record (then a later drain sees the overrun).
                    break;
                }
                // SAFETY: the slot is slot_size bytes inside the mapping.
                unsafe { std::ptr::copy_nonoverlapping(slot, buf.as_mut_ptr(), self.slot_size) };
                if self.commit(slot) != want {
                    // Overwritten while we copied it.
                    d.overruns += 1;
                } else {
                    f(&buf);
                    d.records += 1;
                }
                tail += 1;
            }
            self.tails[cpu] = tail;
        }
        d
    }
}

/// A record type a probe writes into its slot ring: a C struct from the
/// skeleton that starts with `struct record_hdr` (kind u16, len u16,
/// commit u32).
///
/// # Safety
/// Every bit pattern must be a valid value of the type (plain integers and
/// arrays of them), so that a copy of ring bytes is a value.
pub unsafe trait PlainRecord: Copy {
    /// Its `enum record_kind` value, which `hdr.kind` must hold.
    const KIND: u16;
    /// Byte offset of `hdr.commit`, the word [`SlotRing`] checks.
    const COMMIT_OFFSET: usize;
}

/// The record of type `T` at the start of `data`, after checking that its
/// header names `T`'s kind and size; never panics on bad input.
pub fn read_record<T: PlainRecord>(data: &[u8]) -> Result<T, RecordError> {
    let kind = T::KIND;
    let size = std::mem::size_of::<T>();
    if data.len() < size || data.len() < 4 {
        return Err(RecordError::Short(data.len()));
    }
    let got_kind = u16::from_ne_bytes([data[0], data[1]]);
    let got_len = u16::from_ne_bytes([data[2], data[3]]);
    if got_kind != kind {
        return Err(RecordError::UnknownKind(got_kind));
    }
    if usize::from(got_len) != size {
        return Err(RecordError::BadLen {
            got: got_len,
            want: size,
        });
    }
    // SAFETY: `data` holds at least size_of::<T>() bytes; read_unaligned
    // copes with any alignment; PlainRecord promises any bits are valid.
    Ok(unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) })
}

/// The bytes of a record as a probe writes them into its ring (what the
/// synthetic feed of `crate::synthetic` writes).
pub fn record_as_bytes<T: PlainRecord>(r: &T) -> &[u8] {
    // SAFETY: the skeleton's record types are repr(C) with every padding
    // byte an explicit field (PlainRecord): all size_of::<T>() bytes are
    // initialised integers, borrowed as long as `r`.
    unsafe { std::slice::from_raw_parts((r as *const T).cast::<u8>(), size_of::<T>()) }
}

/// [`record_as_bytes`], owned, for decoder tests.
#[cfg(test)]
pub fn record_bytes<T: PlainRecord>(r: &T) -> Vec<u8> {
    record_as_bytes(r).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::probes::memfd_slots::MemfdSlots;

    /// Where the fake's slots keep their commit word (as record_hdr does).
    const COMMIT: usize = 4;
    /// Bytes per fake slot.
    const SLOT: usize = 16;

    /// A slot array of `ncpu` CPUs, `per_cpu` slots each, without BPF.
    fn fake(ncpu: usize, per_cpu: u32) -> MemfdSlots {
        MemfdSlots::new(ncpu, per_cpu, SLOT, COMMIT).unwrap()
    }

    /// Record `seq` of `cpu`, every byte `payload` but its commit word,
    /// published (`commit`) or still being written.
    fn put(f: &mut MemfdSlots, cpu: usize, seq: u64, payload: u8, commit: bool) {
        f.write(cpu, seq, &[payload; SLOT]);
        if commit {
            f.commit(cpu, seq);
        }
    }

    fn ring(f: &MemfdSlots, per_cpu: u32, heads: &[u64]) -> SlotRing {
        SlotRing::new(f.fd(), SLOT, COMMIT, per_cpu, heads).unwrap()
    }

    #[test]
    fn reads_committed_records_in_order_per_cpu() {
        let mut f = fake(2, 8);
        let mut r = ring(&f, 8, &[0, 0]);
        for s in 0..3 {
            put(&mut f, 0, s, s as u8 + 1, true);
        }
        put(&mut f, 1, 0, 9, true);
        let mut got = Vec::new();
        let d = r.drain(&[3, 1], |b| got.push(b[0]));
        assert_eq!(got, vec![1, 2, 3, 9]);
        assert_eq!((d.records, d.overruns, d.max_backlog), (4, 0, 3));
        // Nothing new: nothing read.
        assert_eq!(r.drain(&[3, 1], |_| panic!("no record")).records, 0);
    }

    #[test]
    fn an_uncommitted_slot_waits_for_the_next_drain() {
        let mut f = fake(1, 8);
        let mut r = ring(&f, 8, &[0]);
        put(&mut f, 0, 0, 1, true);
        put(&mut f, 0, 1, 2, false);
        put(&mut f, 0, 2, 3, true);
        let mut got = Vec::new();
        r.drain(&[3], |b| got.push(b[0]));
        assert_eq!(got, vec![1]);
        f.commit(0, 1);
        r.drain(&[3], |b| got.push(b[0]));
        assert_eq!(got, vec![1, 2, 3]);
    }

    #[test]
    fn a_lapped_reader_counts_what_it_lost() {
        let mut f = fake(1, 4);
        let mut r = ring(&f, 4, &[0]);
        for s in 0..10 {
            put(&mut f, 0, s, s as u8, true);
        }
        let mut got = Vec::new();
        let d = r.drain(&[10], |b| got.push(b[0]));
        assert_eq!(got, vec![6, 7, 8, 9]);
        assert_eq!((d.records, d.overruns), (4, 6));
    }

    #[test]
    fn records_started_before_the_reader_are_skipped() {
        let mut f = fake(1, 8);
        put(&mut f, 0, 0, 1, true);
        let mut r = ring(&f, 8, &[1]);
        put(&mut f, 0, 1, 2, true);
        let mut got = Vec::new();
        r.drain(&[2], |b| got.push(b[0]));
        assert_eq!(got, vec![2]);
    }
}
