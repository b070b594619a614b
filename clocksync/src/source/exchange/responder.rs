//! The exchange's responder (the sink side, the time master): answers each
//! request with its global clock's reading of the kernel RX stamp (t2) and,
//! in a follow-up, of the response's TX stamp (t3), as two-step PTP does.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::error::ClockError;
use crate::global::GlobalClock;
use crate::source::exchange::msg::{Kind, Message, FLAG_SYNCED};
use crate::source::exchange::phcmap::PhcMap;
use crate::source::exchange::socket::{
    admit_requests, enable_timestamping, kernel_drops, recv_message, send_stamped, StampMode,
    HARDWARE_FLAGS, SOFTWARE_FLAGS,
};
use crate::source::exchange::stats::ExchangeStats;
use crate::source::realtime::RealtimeMonoTracker;
use crate::worker::{StopFlag, Worker};

/// The sink side: answers requests with its global clock.
#[derive(Debug)]
pub struct Responder {
    sock: UdpSocket,
    clock: GlobalClock,
    mode: StampMode,
    sent: u32,
    stats: ExchangeStats,
    rt_map: RealtimeMonoTracker,
    phc_map: Option<PhcMap>,
    /// Take only requests tagged with this key and tag every answer.
    auth: Option<tracer_auth::MacKey>,
    /// The socket's kernel drop counter when the responder took it.
    drops_at_start: u64,
}

impl Responder {
    /// Answer only requests tagged with `key` (the
    /// [`tracer_auth::Purpose::ClockExchange`] key of `--key-file`), and tag
    /// every answer with it.
    pub fn with_auth(mut self, key: Option<tracer_auth::MacKey>) -> Self {
        self.auth = key;
        self
    }

    /// Serve on `sock` (already bound) with `clock` as the master's time.
    /// [`StampMode::Hardware`] needs [`Responder::with_hardware`].
    pub fn new(sock: UdpSocket, clock: GlobalClock, mode: StampMode) -> Result<Self, ClockError> {
        match mode {
            StampMode::Kernel => enable_timestamping(&sock, SOFTWARE_FLAGS)?,
            StampMode::Hardware => return Err(ClockError::NeedsPhc),
            StampMode::User => {}
        }
        let drops_at_start = kernel_drops(&sock)?;
        Ok(Responder {
            sock,
            clock,
            mode,
            sent: 0,
            stats: ExchangeStats::default(),
            rt_map: RealtimeMonoTracker::new()?,
            phc_map: None,
            auth: None,
            drops_at_start,
        })
    }

    /// Serve with the hardware stamps of the NIC whose PHC `phc` maps.
    pub fn with_hardware(
        sock: UdpSocket,
        clock: GlobalClock,
        phc: PhcMap,
    ) -> Result<Self, ClockError> {
        enable_timestamping(&sock, HARDWARE_FLAGS)?;
        let drops_at_start = kernel_drops(&sock)?;
        Ok(Responder {
            sock,
            clock,
            mode: StampMode::Hardware,
            sent: 0,
            stats: ExchangeStats::default(),
            rt_map: RealtimeMonoTracker::new()?,
            phc_map: Some(phc),
            auth: None,
            drops_at_start,
        })
    }

    /// The local address served.
    pub fn local_addr(&self) -> Result<SocketAddr, ClockError> {
        self.sock
            .local_addr()
            .map_err(|e| ClockError::io("local_addr", e))
    }

    /// Counters.
    pub fn stats(&self) -> ExchangeStats {
        let mut s = self.stats;
        if let Ok(d) = kernel_drops(&self.sock) {
            s.dropped_by_kernel = d.wrapping_sub(self.drops_at_start);
        }
        s
    }

    /// A realtime stamp on the global axis (None before the clock has a mapping).
    fn global_of(&mut self, stamp_ns: u64) -> Result<Option<u64>, ClockError> {
        let mono = match self.phc_map.as_mut() {
            Some(p) => {
                p.refresh()?;
                p.to_mono(stamp_ns)
            }
            None => {
                self.rt_map.refresh()?;
                self.rt_map.to_mono(stamp_ns)
            }
        };
        Ok(self.clock.to_global_ns(mono))
    }

    /// Answer at most one request, waiting up to `timeout`. Returns whether
    /// one was answered. Errors of one exchange (a client gone) are counted,
    /// not returned, so the responder keeps serving.
    pub fn serve_one(&mut self, timeout: Duration) -> Result<bool, ClockError> {
        let deadline = Instant::now() + timeout;
        let Some((m, t2_rt, from)) = recv_message(
            &self.sock,
            self.mode,
            deadline,
            self.auth.as_ref(),
            &mut self.stats,
        )?
        else {
            return Ok(false);
        };
        let (Kind::Request, Some(from)) = (m.kind, from) else {
            self.stats.ignored += 1;
            return Ok(false);
        };
        let snap = self.clock.snapshot();
        // In HOLDOVER the clock still defines this host's time axis: agents
        // following it must keep doing so, not lose their reference.
        let flags = if snap.serves_time() { FLAG_SYNCED } else { 0 };
        let state = snap.state.map_or(255, |s| s.code() as u32);
        let err = snap.error_estimate_ns.min(u32::MAX as u64) as u32;
        let Some(t2) = self.global_of(t2_rt)? else {
            self.stats.ignored += 1;
            return Ok(false);
        };
        let mut reply = Message {
            kind: Kind::Response,
            flags,
            seq: m.seq,
            t_ns: t2,
            state,
            error_estimate_ns: err,
        };
        let deadline = Instant::now() + timeout.max(Duration::from_millis(100));
        let t3_rt = match send_stamped(
            &self.sock,
            reply.seal(self.auth.as_ref()).as_bytes(),
            Some(from),
            self.mode,
            &mut self.sent,
            deadline,
        ) {
            Ok(t) => t,
            Err(_) => {
                self.stats.timeouts += 1;
                return Ok(false);
            }
        };
        reply.kind = Kind::FollowUp;
        reply.t_ns = self.global_of(t3_rt)?.unwrap_or(0);
        // The follow-up's own TX stamp is not needed; drain it so the error
        // queue does not grow.
        if self.mode != StampMode::User {
            let _ = send_stamped(
                &self.sock,
                reply.seal(self.auth.as_ref()).as_bytes(),
                Some(from),
                self.mode,
                &mut self.sent,
                deadline,
            );
        } else if let Err(e) = self
            .sock
            .send_to(reply.seal(self.auth.as_ref()).as_bytes(), from)
        {
            return Err(ClockError::io("send follow-up", e));
        }
        self.stats.completed += 1;
        Ok(true)
    }

    /// Serve until `stop` is set (checked every 100 ms).
    pub fn run(&mut self, stop: &StopFlag) -> Result<ExchangeStats, ClockError> {
        admit_requests(&self.sock, self.auth.is_some())?;
        while !stop.is_set() {
            self.serve_one(Duration::from_millis(100))?;
        }
        Ok(self.stats())
    }

    /// Run on its own thread until the worker is stopped or dropped.
    pub fn spawn(mut self) -> Result<Worker<Result<ExchangeStats, ClockError>>, ClockError> {
        Worker::spawn("clocksync-responder", move |stop| self.run(&stop))
            .map_err(|e| ClockError::io("spawn responder", e))
    }
}

/// Run a responder on its own thread until the worker is stopped or dropped.
pub fn spawn_responder(
    sock: UdpSocket,
    clock: GlobalClock,
    mode: StampMode,
) -> Result<Worker<Result<ExchangeStats, ClockError>>, ClockError> {
    Responder::new(sock, clock, mode)?.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_mode_without_a_phc_map_is_refused() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let r = Responder::new(sock, GlobalClock::fixed(0), StampMode::Hardware);
        assert!(matches!(r, Err(ClockError::NeedsPhc)), "{r:?}");
    }
}
