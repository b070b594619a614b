//! A real PTP hardware clock (/dev/ptpN), found directly or from an
//! interface name (ETHTOOL_GET_TS_INFO via SIOCETHTOOL → `phc_index`), read
//! through its dynamic clock id (FD_TO_CLOCKID), with the PHC↔system offset
//! measured by PTP_SYS_OFFSET_PRECISE, else PTP_SYS_OFFSET_EXTENDED, else
//! PTP_SYS_OFFSET, keeping the narrowest bracket of N (as phc2sys does).
//!
//! The PTP structs and ioctl numbers come from `libc`; only what `libc`
//! lacks (ETHTOOL_GET_TS_INFO and its struct, FD_TO_CLOCKID) is defined
//! here. Everything that does not need a device (sample selection) is a
//! pure function tested here; this machine has no PHC.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::error::ClockError;
use crate::source::realtime::RealtimeToMono;
use crate::source::traits::{Clock, OffsetSample, ReferenceClock, DEFAULT_READS};

/// `PTP_MAX_SAMPLES`: most readings one ioctl takes.
pub const PTP_MAX_SAMPLES: usize = libc::PTP_MAX_SAMPLES as usize;

/// A `struct ptp_clock_time` as ns since the epoch (negative times clamp to 0).
pub fn ptp_ns(t: &libc::ptp_clock_time) -> u64 {
    (t.sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.nsec as u64)
}

/// A zeroed `struct ptp_clock_time`.
const PTP_ZERO: libc::ptp_clock_time = libc::ptp_clock_time {
    sec: 0,
    nsec: 0,
    reserved: 0,
};

// --- ETHTOOL_GET_TS_INFO --------------------------------------------------

/// `ETHTOOL_GET_TS_INFO` (linux/ethtool.h; not in `libc`).
pub const ETHTOOL_GET_TS_INFO: u32 = 0x41;

/// `struct ethtool_ts_info` (linux/ethtool.h; not in `libc`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct EthtoolTsInfo {
    /// ETHTOOL_GET_TS_INFO.
    pub cmd: u32,
    /// SOF_TIMESTAMPING_* the device supports.
    pub so_timestamping: u32,
    /// /dev/ptpN index, or -1.
    pub phc_index: i32,
    /// HWTSTAMP_TX_* supported.
    pub tx_types: u32,
    /// Reserved.
    pub tx_reserved: [u32; 3],
    /// HWTSTAMP_FILTER_* supported.
    pub rx_filters: u32,
    /// Reserved.
    pub rx_reserved: [u32; 3],
}

// The kernel copies exactly this many bytes (linux/ethtool.h, stable ABI).
const _: () = assert!(size_of::<EthtoolTsInfo>() == 44);

/// Timestamping capabilities of a network interface (SIOCETHTOOL).
pub fn ts_info(iface: &str) -> Result<EthtoolTsInfo, ClockError> {
    if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.contains('\0') {
        return Err(ClockError::BadInterface(iface.into()));
    }
    let mut info = EthtoolTsInfo {
        cmd: ETHTOOL_GET_TS_INFO,
        ..Default::default()
    };
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(iface.bytes()) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut info as *mut EthtoolTsInfo).cast();
    // SAFETY: plain socket(2); the fd is owned right after.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(ClockError::last_os("socket for SIOCETHTOOL"));
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: req is a valid ifreq whose data points to `info`, both live
    // for the duration of the call; the kernel writes at most
    // size_of::<EthtoolTsInfo>() bytes there.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    if rc < 0 {
        return Err(ClockError::last_os(format!(
            "ETHTOOL_GET_TS_INFO on {iface}"
        )));
    }
    Ok(info)
}

/// The PHC device of an interface (`/dev/ptp<phc_index>`).
pub fn phc_device_of(iface: &str) -> Result<PathBuf, ClockError> {
    let info = ts_info(iface)?;
    if info.phc_index < 0 {
        return Err(ClockError::NoPhc(iface.into()));
    }
    Ok(PathBuf::from(format!("/dev/ptp{}", info.phc_index)))
}

/// `FD_TO_CLOCKID(fd) = (~fd << 3) | CLOCKFD` (CLOCKFD = 3).
pub fn fd_to_clockid(fd: i32) -> libc::clockid_t {
    ((!fd) << 3) | 3
}

// --- sample selection (pure) ---------------------------------------------

/// One reading: system clock before, PHC, system clock after (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triplet {
    /// System time before the PHC read.
    pub sys_before_ns: u64,
    /// PHC time.
    pub phc_ns: u64,
    /// System time after.
    pub sys_after_ns: u64,
}

/// The narrowest-bracket reading as (sys midpoint, phc, width); readings
/// with a negative width (sys clock stepped) are skipped.
pub fn select_narrowest(readings: &[Triplet]) -> Option<(u64, u64, u64)> {
    readings
        .iter()
        .filter(|t| t.sys_after_ns >= t.sys_before_ns)
        .map(|t| {
            let w = t.sys_after_ns - t.sys_before_ns;
            (t.sys_before_ns + w / 2, t.phc_ns, w)
        })
        .min_by_key(|&(_, _, w)| w)
}

/// Triplets of a PTP_SYS_OFFSET answer (sys, phc, sys, phc, ..., sys).
pub fn triplets_from_basic(ts: &[libc::ptp_clock_time], n: usize) -> Vec<Triplet> {
    (0..n)
        .filter(|i| 2 * i + 2 < ts.len())
        .map(|i| Triplet {
            sys_before_ns: ptp_ns(&ts[2 * i]),
            phc_ns: ptp_ns(&ts[2 * i + 1]),
            sys_after_ns: ptp_ns(&ts[2 * i + 2]),
        })
        .collect()
}

/// Triplets of a PTP_SYS_OFFSET_EXTENDED answer.
pub fn triplets_from_extended(ts: &[[libc::ptp_clock_time; 3]], n: usize) -> Vec<Triplet> {
    ts.iter()
        .take(n)
        .map(|t| Triplet {
            sys_before_ns: ptp_ns(&t[0]),
            phc_ns: ptp_ns(&t[1]),
            sys_after_ns: ptp_ns(&t[2]),
        })
        .collect()
}

/// Which ioctl measures the offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetMethod {
    /// PTP_SYS_OFFSET_PRECISE: hardware cross-timestamp.
    Precise,
    /// PTP_SYS_OFFSET_EXTENDED with sys stamps on CLOCK_MONOTONIC (Linux ≥ 6.11).
    ExtendedMono,
    /// PTP_SYS_OFFSET_EXTENDED with CLOCK_REALTIME sys stamps.
    ExtendedRealtime,
    /// PTP_SYS_OFFSET (realtime).
    Basic,
}

/// The order phc2sys tries them in (with our monotonic variant first among
/// the extended ones: no realtime→monotonic conversion needed).
pub const METHOD_ORDER: [OffsetMethod; 4] = [
    OffsetMethod::Precise,
    OffsetMethod::ExtendedMono,
    OffsetMethod::ExtendedRealtime,
    OffsetMethod::Basic,
];

/// A real PHC.
#[derive(Debug)]
pub struct PhcClock {
    path: PathBuf,
    fd: OwnedFd,
    reads: usize,
    method: Option<OffsetMethod>,
}

impl PhcClock {
    /// Open a PHC device (read-only is enough: we never adjust it).
    pub fn open(path: &Path) -> Result<Self, ClockError> {
        let file = std::fs::File::open(path)
            .map_err(|e| ClockError::io(format!("open {}", path.display()), e))?;
        let fd: OwnedFd = file.into();
        // SAFETY: ptp_clock_caps is plain old data; all-zero is valid.
        let mut caps: libc::ptp_clock_caps = unsafe { std::mem::zeroed() };
        // SAFETY: caps is a valid, writable ptp_clock_caps; the request's
        // size field matches it.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::PTP_CLOCK_GETCAPS, &mut caps) };
        if rc < 0 {
            return Err(ClockError::last_os(format!(
                "PTP_CLOCK_GETCAPS on {} (not a PHC?)",
                path.display()
            )));
        }
        Ok(PhcClock {
            path: path.to_path_buf(),
            fd,
            reads: DEFAULT_READS,
            method: None,
        })
    }

    /// The PHC of a network interface.
    pub fn for_interface(iface: &str) -> Result<Self, ClockError> {
        Self::open(&phc_device_of(iface)?)
    }

    /// Readings per sample (capped at [`PTP_MAX_SAMPLES`]).
    pub fn with_reads(mut self, reads: usize) -> Self {
        self.reads = reads.clamp(1, PTP_MAX_SAMPLES);
        self
    }

    /// The method in use (after the first sample).
    pub fn method(&self) -> Option<OffsetMethod> {
        self.method
    }

    fn ioctl<T>(&self, req: libc::Ioctl, arg: &mut T, what: &str) -> Result<(), ClockError> {
        // SAFETY: every caller passes the repr(C) struct whose size is encoded
        // in `req`; it is valid and writable for the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), req, arg as *mut T) };
        if rc < 0 {
            Err(ClockError::last_os(format!(
                "{what} on {}",
                self.path.display()
            )))
        } else {
            Ok(())
        }
    }

    /// (mono ns, phc ns, bracket width ns) with one method.
    fn measure(&self, m: OffsetMethod) -> Result<(u64, u64, u64), ClockError> {
        let n = self.reads;
        match m {
            OffsetMethod::Precise => {
                let mut p = libc::ptp_sys_offset_precise {
                    device: PTP_ZERO,
                    sys_realtime: PTP_ZERO,
                    sys_monoraw: PTP_ZERO,
                    rsv: [0; 4],
                };
                self.ioctl(
                    libc::PTP_SYS_OFFSET_PRECISE,
                    &mut p,
                    "PTP_SYS_OFFSET_PRECISE",
                )?;
                // The cross-stamp is exact; only the realtime→mono map adds error.
                let map = RealtimeToMono::measure(None, DEFAULT_READS)?;
                Ok((
                    map.to_mono(ptp_ns(&p.sys_realtime)),
                    ptp_ns(&p.device),
                    map.width_ns,
                ))
            }
            OffsetMethod::ExtendedMono | OffsetMethod::ExtendedRealtime => {
                let mono = m == OffsetMethod::ExtendedMono;
                let mut e = libc::ptp_sys_offset_extended {
                    n_samples: n as u32,
                    clockid: if mono { libc::CLOCK_MONOTONIC } else { 0 },
                    rsv: [0; 2],
                    ts: [[PTP_ZERO; 3]; PTP_MAX_SAMPLES],
                };
                self.ioctl(
                    libc::PTP_SYS_OFFSET_EXTENDED,
                    &mut e,
                    "PTP_SYS_OFFSET_EXTENDED",
                )?;
                let t = triplets_from_extended(&e.ts, n);
                self.to_mono(select_narrowest(&t), !mono)
            }
            OffsetMethod::Basic => {
                let mut b = libc::ptp_sys_offset {
                    n_samples: n as u32,
                    rsv: [0; 3],
                    ts: [PTP_ZERO; 2 * PTP_MAX_SAMPLES + 1],
                };
                self.ioctl(libc::PTP_SYS_OFFSET, &mut b, "PTP_SYS_OFFSET")?;
                let t = triplets_from_basic(&b.ts, n);
                self.to_mono(select_narrowest(&t), true)
            }
        }
    }

    fn to_mono(
        &self,
        best: Option<(u64, u64, u64)>,
        realtime: bool,
    ) -> Result<(u64, u64, u64), ClockError> {
        let (sys, phc, w) =
            best.ok_or_else(|| ClockError::NoReading(self.path.display().to_string()))?;
        if !realtime {
            return Ok((sys, phc, w));
        }
        let map = RealtimeToMono::measure(None, DEFAULT_READS)?;
        Ok((map.to_mono(sys), phc, w + map.width_ns))
    }
}

impl Clock for PhcClock {
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        let id = fd_to_clockid(self.fd.as_raw_fd());
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is valid and writable; id is the dynamic clock of our fd.
        let rc = unsafe { libc::clock_gettime(id, &mut ts) };
        if rc != 0 {
            return Err(ClockError::last_os(format!(
                "clock_gettime({})",
                self.path.display()
            )));
        }
        Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

impl ReferenceClock for PhcClock {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        let (mono, phc, width) = match self.method {
            Some(m) => self.measure(m)?,
            None => {
                let mut found = None;
                for m in METHOD_ORDER {
                    if let Ok(r) = self.measure(m) {
                        found = Some((m, r));
                        break;
                    }
                }
                let (m, r) = found.ok_or_else(|| ClockError::NoOffsetMethod(self.name()))?;
                self.method = Some(m);
                r
            }
        };
        Ok(OffsetSample {
            mono_ns: mono,
            ref_ns: phc,
            uncertainty_ns: width / 2,
            delay_ns: width,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_to_clockid_matches_the_kernel_macro() {
        // (~3 << 3) | 3 = -29
        assert_eq!(fd_to_clockid(3), -29);
        assert_eq!(fd_to_clockid(0), -5);
    }

    fn t(sec: i64, nsec: u32) -> libc::ptp_clock_time {
        libc::ptp_clock_time {
            sec,
            nsec,
            reserved: 0,
        }
    }

    #[test]
    fn narrowest_reading_wins() {
        let r = [
            Triplet {
                sys_before_ns: 1000,
                phc_ns: 50_000,
                sys_after_ns: 1600,
            },
            Triplet {
                sys_before_ns: 2000,
                phc_ns: 51_150,
                sys_after_ns: 2300,
            },
            // Stepped backwards: ignored even though "narrowest".
            Triplet {
                sys_before_ns: 3000,
                phc_ns: 52_000,
                sys_after_ns: 2900,
            },
            Triplet {
                sys_before_ns: 4000,
                phc_ns: 53_000,
                sys_after_ns: 4900,
            },
        ];
        assert_eq!(select_narrowest(&r), Some((2150, 51_150, 300)));
        assert_eq!(select_narrowest(&[]), None);
    }

    #[test]
    fn basic_layout_is_interleaved() {
        let ts = [t(1, 0), t(5, 10), t(1, 400), t(5, 600), t(1, 500)];
        let tr = triplets_from_basic(&ts, 2);
        assert_eq!(tr.len(), 2);
        assert_eq!(tr[1].sys_before_ns, 1_000_000_400);
        assert_eq!(tr[1].phc_ns, 5_000_000_600);
        assert_eq!(tr[1].sys_after_ns, 1_000_000_500);
        // Narrowest: the second (100 ns).
        assert_eq!(
            select_narrowest(&tr),
            Some((1_000_000_450, 5_000_000_600, 100))
        );
        // Asking for more than the kernel filled cannot read past the array.
        assert_eq!(triplets_from_basic(&ts, 10).len(), 2);
    }

    #[test]
    fn extended_layout_is_triplets() {
        let ts = [
            [t(0, 10), t(9, 0), t(0, 30)],
            [t(0, 40), t(9, 35), t(0, 50)],
        ];
        let tr = triplets_from_extended(&ts, 2);
        assert_eq!(select_narrowest(&tr), Some((45, 9_000_000_035, 10)));
    }

    #[test]
    fn loopback_has_no_phc() {
        match phc_device_of("lo") {
            Err(ClockError::NoPhc(_)) => {}
            // Some kernels refuse the ioctl on lo altogether.
            Err(ClockError::Io { .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn opening_a_missing_device_fails_cleanly() {
        assert!(PhcClock::open(Path::new("/dev/ptp-does-not-exist")).is_err());
        assert!(matches!(ts_info(""), Err(ClockError::BadInterface(_))));
        assert!(matches!(
            ts_info("name-much-too-long-for-ifnamsiz"),
            Err(ClockError::BadInterface(_))
        ));
    }
}
