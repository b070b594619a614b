//! Reader of a probe's `heads` map (`struct slot_cpu` in slot_ring.h): one
//! entry per possible CPU in an mmapable array, word 0 the CPU's ring head
//! (records ever started on it), the next words the probe's counters.
//! Mapped once, so a drain and a counter update read memory instead of
//! making a BPF system call each.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{fence, Ordering};

use super::mapping::ReadMapping;

/// The mapped `heads` of one probe.
#[derive(Debug)]
pub struct Heads {
    map: ReadMapping,
    /// Bytes between CPUs' entries: the value size rounded up to 8, as a
    /// BPF array lays out its values.
    stride: usize,
    ncpu: usize,
}

impl Heads {
    /// Map `ncpu` entries of `value_size` bytes from the array `fd`.
    pub fn new(fd: BorrowedFd<'_>, value_size: usize, ncpu: usize) -> std::io::Result<Self> {
        if value_size < 8 || ncpu == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "heads: want a value of at least one u64 and one CPU or more",
            ));
        }
        let stride = value_size.div_ceil(8) * 8;
        Ok(Heads {
            map: ReadMapping::new(fd, stride * ncpu)?,
            stride,
            ncpu,
        })
    }

    /// Each CPU's head, into `out` (cleared first). The fence orders the
    /// reads of the slots that follow after these.
    pub fn read(&self, out: &mut Vec<u64>) {
        out.clear();
        out.extend((0..self.ncpu).map(|cpu| self.map.u64_at(cpu * self.stride)));
        fence(Ordering::Acquire);
    }

    /// The heads as a new vector.
    pub fn now(&self) -> Vec<u64> {
        let mut v = Vec::with_capacity(self.ncpu);
        self.read(&mut v);
        v
    }

    /// The counters (the words after each CPU's head, padding included),
    /// each summed over CPUs.
    pub fn counters(&self) -> Vec<u64> {
        let words = self.stride / 8 - 1;
        (1..=words)
            .map(|w| {
                (0..self.ncpu)
                    .map(|cpu| self.map.u64_at(cpu * self.stride + 8 * w))
                    .fold(0u64, u64::wrapping_add)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::{AsFd, FromRawFd};

    /// A memfd holding `words` per CPU, laid out as the BPF array is.
    fn memfd(per_cpu: &[&[u64]]) -> std::fs::File {
        // SAFETY: a valid C string; memfd_create returns a new fd or -1.
        let fd = unsafe { libc::memfd_create(c"heads-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: the fresh fd is owned by nobody else.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        for words in per_cpu {
            for w in *words {
                f.write_all(&w.to_ne_bytes()).unwrap();
            }
        }
        f.set_len(4096).unwrap();
        f
    }

    #[test]
    fn heads_are_word_zero_and_counters_the_rest_summed_over_cpus() {
        // Two CPUs, a 5-word value (head + 4 counters) padded to 8 words as
        // slot_ring.h aligns it: the padding reads as zero counters.
        let cpu0 = [1000, 1, 2, 3, 4, 0, 0, 0];
        let cpu1 = [7, 10, 20, 30, 40, 0, 0, 0];
        let f = memfd(&[&cpu0, &cpu1]);
        let h = Heads::new(f.as_fd(), 64, 2).unwrap();
        assert_eq!(h.now(), vec![1000, 7]);
        assert_eq!(h.counters(), vec![11, 22, 33, 44, 0, 0, 0]);
    }

    #[test]
    fn a_value_stride_is_rounded_up_to_eight_bytes() {
        // A 12-byte value lies at a 16-byte stride.
        let f = memfd(&[&[5, 9], &[6, 11]]);
        let h = Heads::new(f.as_fd(), 12, 2).unwrap();
        assert_eq!(h.now(), vec![5, 6]);
        assert_eq!(h.counters(), vec![20]);
    }

    #[test]
    fn a_value_without_a_head_is_refused() {
        let f = memfd(&[&[1]]);
        assert!(Heads::new(f.as_fd(), 4, 1).is_err());
        assert!(Heads::new(f.as_fd(), 8, 0).is_err());
    }
}
