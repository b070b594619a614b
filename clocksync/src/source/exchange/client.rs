//! The exchange's client (the agent side): a [`ReferenceClock`] whose
//! reference is the responder's global clock. Each sample is a burst of
//! exchanges; the minimum-delay one becomes the sample.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::bracket::{now_ns, ClockId};
use crate::error::ClockError;
use crate::source::exchange::msg::{Kind, Message, FLAG_SYNCED};
use crate::source::exchange::phcmap::PhcMap;
use crate::source::exchange::socket::{
    admit_only, drain_queued, enable_timestamping, kernel_drops, recv_message, send_stamped,
    StampMode, HARDWARE_FLAGS, SOFTWARE_FLAGS,
};
use crate::source::exchange::stamps::{min_delay, Exchange};
use crate::source::exchange::stats::{ExchangeStats, SharedExchangeStats};
use crate::source::inject::{inject, ErrorInjection};
use crate::source::oscillator::Oscillator;
use crate::source::realtime::RealtimeMonoTracker;
use crate::source::traits::{Clock, OffsetSample, ReferenceClock};

/// Client configuration.
#[derive(Debug, Clone)]
pub struct ExchangeConfig {
    /// Exchanges per sample; the one with the smallest delay is used.
    /// 16, as in the prototype that measured 5 ns p99 idle on veth.
    pub burst: usize,
    /// Pause between the exchanges of a burst (0 = back to back).
    pub burst_gap: Duration,
    /// Give up on one exchange after this long.
    pub timeout: Duration,
    /// Test-only clock error of this host's realtime clock.
    pub injection: Option<ErrorInjection>,
    /// Test-only simulated oscillator of this host: t1 and t4 become what
    /// a machine running on it would have stamped, before the servo sees
    /// them.
    pub oscillator: Option<Oscillator>,
    /// Kernel or user-space stamps.
    pub mode: StampMode,
    /// Accept answers from a responder whose clock is not locked.
    pub accept_unsynced: bool,
    /// Send a throw-away datagram just before each request (see
    /// `Kind::Warmup`).
    pub warmup: bool,
    /// Use the hardware stamps of this interface's NIC (mode becomes
    /// [`StampMode::Hardware`]); the interface must have a PHC.
    pub hw_iface: Option<String>,
    /// Tag requests and take only answers tagged with this key (the
    /// [`tracer_auth::Purpose::ClockExchange`] key of `--key-file`).
    pub auth: Option<tracer_auth::MacKey>,
}

impl Default for ExchangeConfig {
    fn default() -> Self {
        ExchangeConfig {
            burst: 16,
            burst_gap: Duration::ZERO,
            timeout: Duration::from_millis(200),
            injection: None,
            oscillator: None,
            mode: StampMode::Kernel,
            accept_unsynced: false,
            warmup: true,
            hw_iface: None,
            auth: None,
        }
    }
}

/// The agent side: a [`ReferenceClock`] whose reference is the responder's
/// global clock.
#[derive(Debug)]
pub struct ExchangeClient {
    sock: UdpSocket,
    server: SocketAddr,
    cfg: ExchangeConfig,
    seq: u64,
    sent: u32,
    stats: ExchangeStats,
    /// The socket's kernel drop counter when this client took it.
    drops_at_start: u64,
    /// `stats` for readers in other threads, published after each exchange.
    shared: SharedExchangeStats,
    last: Vec<Exchange>,
    rt_map: RealtimeMonoTracker,
    phc_map: Option<PhcMap>,
}

impl ExchangeClient {
    /// Bind an ephemeral port of the right family and connect to `server`.
    pub fn connect(server: SocketAddr, cfg: ExchangeConfig) -> Result<Self, ClockError> {
        let bind: SocketAddr = if server.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(bind).map_err(|e| ClockError::io("bind", e))?;
        Self::from_socket(sock, server, cfg)
    }

    /// Use an existing socket (e.g. bound to a given address or interface).
    pub fn from_socket(
        sock: UdpSocket,
        server: SocketAddr,
        cfg: ExchangeConfig,
    ) -> Result<Self, ClockError> {
        sock.connect(server)
            .map_err(|e| ClockError::io(format!("connect {server}"), e))?;
        let mut cfg = cfg;
        let phc_map = match &cfg.hw_iface {
            Some(iface) => {
                cfg.mode = StampMode::Hardware;
                Some(PhcMap::for_interface(iface)?)
            }
            None => None,
        };
        match cfg.mode {
            StampMode::Kernel => enable_timestamping(&sock, SOFTWARE_FLAGS)?,
            StampMode::Hardware => enable_timestamping(&sock, HARDWARE_FLAGS)?,
            StampMode::User => {}
        }
        let drops_at_start = kernel_drops(&sock)?;
        Ok(ExchangeClient {
            sock,
            server,
            cfg,
            seq: random_seq(),
            sent: 0,
            stats: ExchangeStats::default(),
            drops_at_start,
            shared: SharedExchangeStats::default(),
            last: Vec::new(),
            rt_map: RealtimeMonoTracker::new()?,
            phc_map,
        })
    }

    /// The client socket's local address (where answers come to).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Counters.
    pub fn stats(&self) -> ExchangeStats {
        self.stats
    }

    /// The exchanges of the last burst (for clock records / debugging).
    pub fn last_burst(&self) -> &[Exchange] {
        &self.last
    }

    /// One exchange: four stamps, t1/t4 on this host's CLOCK_MONOTONIC (as
    /// its simulated oscillator reads it, if it has one).
    pub fn exchange_once(&mut self) -> Result<Exchange, ClockError> {
        let r = self.try_exchange();
        match &r {
            Ok(_) => self.stats.completed += 1,
            Err(ClockError::Timeout(_)) => self.stats.timeouts += 1,
            Err(_) => {}
        }
        if let Ok(d) = kernel_drops(&self.sock) {
            self.stats.dropped_by_kernel = d.wrapping_sub(self.drops_at_start);
        }
        self.shared.publish(self.stats);
        r
    }

    fn try_exchange(&mut self) -> Result<Exchange, ClockError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        // From now on the kernel queues nothing but answers to this
        // exchange; whatever queued up before is not for it: read it away,
        // so the TX stamps below find room.
        admit_only(&self.sock, seq, self.cfg.auth.is_some())?;
        drain_queued(&self.sock, self.cfg.auth.as_ref(), &mut self.stats)?;
        let inj = self.cfg.injection;
        let deadline = Instant::now() + self.cfg.timeout;
        // Realtime → monotonic for this host. The kernel stamps carry the
        // injected error (as a faulty host's would); so do its realtime
        // readings, so the conversion removes it again.
        self.rt_map.refresh()?;
        let map = self.rt_map;
        if let Some(p) = self.phc_map.as_mut() {
            p.refresh()?;
        }
        let phc_map = self.phc_map.as_ref();
        let osc = self.cfg.oscillator.as_ref();
        let to_mono = |stamp: u64| {
            let mono = match phc_map {
                // A PHC stamp does not depend on this host's realtime clock.
                Some(p) => p.to_mono(stamp),
                None => {
                    let approx_mono = map.to_mono(stamp);
                    map.to_mono_injected(inject(inj.as_ref(), stamp, approx_mono), inj.as_ref())
                }
            };
            // On a simulated oscillator this host's clock reads the stamp's
            // instant as the oscillator does, each stamp with its own noise.
            // Unlike the realtime injection above, nothing here undoes it:
            // the servo must learn it from the exchange.
            osc.map_or(mono, |o| o.local_ns(mono))
        };
        // The reply leaves a stack the request has just warmed, while the
        // request itself would run through cache-cold code after the gap
        // between exchanges: an asymmetry of some 100 ns that no kernel
        // stamp removes. A throw-away datagram first warms the path.
        if self.cfg.warmup {
            let warm = Message {
                kind: Kind::Warmup,
                ..Message::request(seq)
            };
            send_stamped(
                &self.sock,
                warm.seal(self.cfg.auth.as_ref()).as_bytes(),
                None,
                self.cfg.mode,
                &mut self.sent,
                deadline,
            )?;
        }
        let t1 = send_stamped(
            &self.sock,
            Message::request(seq)
                .seal(self.cfg.auth.as_ref())
                .as_bytes(),
            None,
            self.cfg.mode,
            &mut self.sent,
            deadline,
        )?;
        // t2 and t4 come with the response, t3 with the follow-up.
        let (mut response, mut t3) = (None, None);
        loop {
            if let (Some((t2, t4)), Some(t3)) = (response, t3) {
                return Ok(Exchange {
                    seq,
                    t1_ns: to_mono(t1),
                    t2_ns: t2,
                    t3_ns: t3,
                    t4_ns: to_mono(t4),
                });
            }
            let Some((m, t, _)) = recv_message(
                &self.sock,
                self.cfg.mode,
                deadline,
                self.cfg.auth.as_ref(),
                &mut self.stats,
            )?
            else {
                return Err(ClockError::Timeout(if self.cfg.auth.is_some() {
                    "an authenticated answer to an exchange (does the responder use the same key file?)"
                } else {
                    "the answer to an exchange"
                }));
            };
            if m.seq != seq || (!self.cfg.accept_unsynced && m.flags & FLAG_SYNCED == 0) {
                self.stats.ignored += 1;
                continue;
            }
            match m.kind {
                Kind::Response => response = Some((m.t_ns, t)),
                Kind::FollowUp => t3 = Some(m.t_ns),
                Kind::Request | Kind::Warmup => self.stats.ignored += 1,
            }
        }
    }
}

/// A random first sequence number, so the answers to an earlier run's
/// requests (replayed by someone who recorded them) never match this run's.
fn random_seq() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into the buffer we own.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        u64::from_ne_bytes(b)
    } else {
        // No entropy source: still differ between runs.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t ^ (u64::from(std::process::id()) << 32)
    }
}

impl Clock for ExchangeClient {
    /// The responder's global time now, estimated from one fresh sample.
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        let s = self.sample()?;
        let mono = now_ns(ClockId::Monotonic)?;
        let mono = self
            .cfg
            .oscillator
            .as_ref()
            .map_or(mono, |o| o.local_ns(mono));
        Ok(s.ref_ns.wrapping_add(mono.wrapping_sub(s.mono_ns)))
    }
    fn name(&self) -> String {
        format!("sink:{}", self.server)
    }
}

impl ReferenceClock for ExchangeClient {
    /// A burst of exchanges; the minimum-delay one becomes the sample.
    /// Fails only if every exchange of the burst failed.
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        self.last.clear();
        let mut last_err = None;
        for i in 0..self.cfg.burst.max(1) {
            if i > 0 && !self.cfg.burst_gap.is_zero() {
                std::thread::sleep(self.cfg.burst_gap);
            }
            match self.exchange_once() {
                Ok(x) => self.last.push(x),
                Err(e) => last_err = Some(e),
            }
        }
        match min_delay(&self.last) {
            Some(x) => Ok(x.to_sample()),
            None => Err(last_err.unwrap_or(ClockError::Timeout("an exchange"))),
        }
    }
    /// Software stamps, but in-kernel and minimum-delay filtered: on veth
    /// their error is nanoseconds, so phc2sys' hardware gains fit. Set
    /// `ServoConfig::hardware_timestamps = false` for ptp4l's software gains.
    fn hardware_stamped(&self) -> bool {
        true
    }
    fn exchange_stats(&self) -> Option<SharedExchangeStats> {
        Some(self.shared.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_mode_on_an_interface_without_a_phc_says_so() {
        let cfg = ExchangeConfig {
            hw_iface: Some("lo".into()),
            ..Default::default()
        };
        let e = ExchangeClient::connect("127.0.0.1:9".parse().unwrap(), cfg).unwrap_err();
        assert!(e.to_string().contains("lo"), "{e}");
    }
}
