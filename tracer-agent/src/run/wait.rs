//! Between drains: how long to sleep, the probes' doorbells that cut the
//! sleep short, and the drain loop's scheduling policy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Shortest wait between drains.
const MIN_POLL: Duration = Duration::from_millis(1);

/// How long to sleep before the next drain: long enough to batch, short
/// enough that the fullest CPU's ring, filling as fast as it did since the
/// last drain (`backlog` records in `elapsed`), reaches only a quarter of
/// its `slots` by then; `poll` (--poll-ms) while it fills slower. A burst
/// that starts while the agent sleeps can still fill the rest of the ring.
pub(super) fn next_poll(backlog: u64, elapsed: Duration, slots: u32, poll: Duration) -> Duration {
    let room = u128::from(slots / 4).max(1);
    let backlog = u128::from(backlog);
    if backlog == 0 {
        return poll;
    }
    // room / (backlog / elapsed), in ns, without floats.
    let ns = room * elapsed.as_nanos() / backlog;
    let wait = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
    wait.clamp(MIN_POLL.min(poll), poll)
}

/// Make this thread (the drain loop; the clock's threads keep their
/// policy) SCHED_FIFO at `prio`; a refusal is a warning, not an error.
pub(super) fn set_realtime(prio: u32) {
    let param = libc::sched_param {
        sched_priority: prio as libc::c_int,
    };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), prio,
            "cannot run the drain loop as SCHED_FIFO (--realtime needs CAP_SYS_NICE): going on at normal priority");
    } else {
        tracing::info!(prio, "drain loop runs as SCHED_FIFO");
    }
}

/// One epoll set over the probes' doorbells; None (the agent then only
/// sleeps) if libbpf cannot build it.
pub(super) fn doorbell_ring(maps: &[libbpf_rs::MapHandle]) -> Option<libbpf_rs::RingBuffer<'_>> {
    let mut b = libbpf_rs::RingBufferBuilder::new();
    for m in maps {
        // The record only says "drain now".
        if let Err(e) = b.add(m, |_| 0) {
            tracing::warn!(error = %e, "cannot wait on the probes' doorbells: draining on the timer only");
            return None;
        }
    }
    b.build()
        .map_err(|e| tracing::warn!(error = %e, "cannot wait on the probes' doorbells: draining on the timer only"))
        .ok()
}

/// Wait `d`, returning early when a probe rings its doorbell (a quarter
/// ring filled on some CPU) or `stop` is set.
pub(super) fn wait_or_doorbell(
    rb: Option<&libbpf_rs::RingBuffer<'_>>,
    d: Duration,
    stop: &AtomicBool,
) {
    let Some(rb) = rb else {
        return sleep_unless_stopped(d, stop);
    };
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        // Slices, so that `stop` is seen within 100 ms; whole milliseconds,
        // rounded up: epoll counts in them, and a remainder under 1 ms
        // rounded down to 0 would spin until `end`.
        let rang = rb.poll_raw(poll_slice(end - now));
        if rang > 0 {
            return;
        }
        if rang < 0 && rang != -libc::EINTR {
            // Not expected; never spin on it.
            return sleep_unless_stopped(end.saturating_duration_since(Instant::now()), stop);
        }
    }
}

/// The next epoll wait of [`wait_or_doorbell`]: `left` in whole
/// milliseconds rounded up, at most 100 ms.
fn poll_slice(left: Duration) -> Duration {
    let ms = left.as_nanos().div_ceil(1_000_000).min(100);
    Duration::from_millis(ms as u64)
}

/// Sleep `d`, in slices, returning early once `stop` is set.
fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_under_a_millisecond_is_one_millisecond_not_a_spin() {
        let us = Duration::from_micros;
        assert_eq!(poll_slice(us(1)), Duration::from_millis(1));
        assert_eq!(poll_slice(us(999)), Duration::from_millis(1));
        assert_eq!(poll_slice(us(1000)), Duration::from_millis(1));
        assert_eq!(poll_slice(us(1001)), Duration::from_millis(2));
        assert_eq!(
            poll_slice(Duration::from_secs(3)),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn the_drain_period_follows_the_fill_rate() {
        let poll = Duration::from_millis(100);
        let ms = Duration::from_millis;
        // Idle or slow: the configured period.
        assert_eq!(next_poll(0, ms(100), 32768, poll), poll);
        assert_eq!(next_poll(100, ms(100), 32768, poll), poll);
        // 8192 records (a quarter) in 100 ms: come back in 100 ms.
        assert_eq!(next_poll(8192, ms(100), 32768, poll), poll);
        // 32768 in 100 ms (327 k/s on one CPU): a quarter takes 25 ms.
        assert_eq!(next_poll(32768, ms(100), 32768, poll), ms(25));
        // 1 M/s: 8 ms; faster still: never below 1 ms.
        assert_eq!(
            next_poll(10_000, ms(10), 32768, poll),
            Duration::from_micros(8192)
        );
        assert_eq!(next_poll(1 << 20, ms(1), 32768, poll), MIN_POLL);
        // A --poll-ms under the floor is kept.
        assert_eq!(next_poll(1 << 20, ms(1), 64, ms(1) / 2), ms(1) / 2);
    }
}
