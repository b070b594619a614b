//! The draining thread's clocks over the measured parts of a run.

use std::time::Instant;

/// Time spent in the measured parts so far.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    /// CPU time of the thread (CLOCK_THREAD_CPUTIME_ID: exact), ns.
    pub(crate) cpu_ns: u64,
    /// User time (getrusage RUSAGE_THREAD: sampled at the tick), ns.
    pub(crate) user_ns: u64,
    /// System time (getrusage), ns.
    pub(crate) sys_ns: u64,
    /// Wall time, ns.
    pub(crate) wall_ns: u64,
}

/// The thread's clocks when a measured part began.
pub(crate) struct Sample {
    cpu_ns: u64,
    user_ns: u64,
    sys_ns: u64,
    wall: Instant,
}

impl Meter {
    /// A measured part begins.
    pub(crate) fn start(&self) -> Sample {
        let (user_ns, sys_ns) = thread_rusage_ns();
        Sample {
            cpu_ns: thread_cpu_ns(),
            user_ns,
            sys_ns,
            wall: Instant::now(),
        }
    }

    /// The measured part that began at `s` ends.
    pub(crate) fn stop(&mut self, s: Sample) {
        let wall = s.wall.elapsed();
        let cpu = thread_cpu_ns();
        let (user, sys) = thread_rusage_ns();
        self.cpu_ns += cpu.saturating_sub(s.cpu_ns);
        self.user_ns += user.saturating_sub(s.user_ns);
        self.sys_ns += sys.saturating_sub(s.sys_ns);
        self.wall_ns += wall.as_nanos() as u64;
    }
}

/// This thread's CPU time, ns (CLOCK_THREAD_CPUTIME_ID: exact).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This thread's user and system time, ns (getrusage RUSAGE_THREAD).
fn thread_rusage_ns() -> (u64, u64) {
    // SAFETY: rusage is plain data; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into `ru`.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return (0, 0);
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}
