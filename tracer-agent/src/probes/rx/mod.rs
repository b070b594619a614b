//! The RX probe (`ebpf/rx.bpf.c`): tp_btf programs on five
//! receive-path tracepoints, one record per hit; here they are loaded,
//! attached, read, validated and turned into wire events.
//!
//! The kernel stamps received skbs (`skb->tstamp`, CLOCK_REALTIME) only
//! while some socket asks for RX software timestamps, so while attached
//! the probe holds a socket of its own with `SOF_TIMESTAMPING_RX_SOFTWARE`.
//!
//! Every number shared with the BPF side comes from the skeleton's `types`
//! (from `ebpf/include/tracer.h`); compile-time asserts tie them to the codec.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};
use tracer_codec::{RxEvent, RxStage};

use super::interface::{
    Collector, Probe, ProbeConfig, ProbeCounters, ProbeError, ProbeEvent, ProbeSpec,
};
use super::slots::{self, Drained, RecordError, SlotRing};
use crate::preflight::PreflightError;

#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    unused
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/rx.skel.rs"));
}

use skel::types::{record_hdr, record_kind, rx_counter, rx_record, rx_stage};

// SAFETY: rx_record is a skeleton copy of a C struct of integers and arrays
// of integers: every bit pattern is a valid value.
unsafe impl slots::PlainRecord for rx_record {}
use skel::RxSkel;

/// Registry entry of this probe.
pub const SPEC: ProbeSpec = ProbeSpec {
    name: NAME,
    about: "receive path per skb: STACK_ENTRY, TCP_INPUT, DATA_READY, COPY, READ_DONE \
            (tracepoints); holds a SOF_TIMESTAMPING_RX_SOFTWARE socket so skbs get RX stamps",
    check,
    open,
};

const NAME: &str = "rx";

const RECORD_RX: u16 = record_kind::RECORD_RX.0 as u16;
const N_COUNTERS: usize = rx_counter::RX_CTR_MAX.0 as usize;
const COMMIT_OFFSET: usize = std::mem::offset_of!(record_hdr, commit);

const _: () = assert!(record_kind::RECORD_RX.0 <= u16::MAX as u32);

// C `enum rx_stage` and the codec's RxStage carry the same wire values.
const _: () = {
    assert!(rx_stage::RX_STAGE_MAX.0 as usize == RxStage::ALL.len());
    assert!(rx_stage::RX_STACK_ENTRY.0 == RxStage::StackEntry as u32);
    assert!(rx_stage::RX_TCP_INPUT.0 == RxStage::TcpInput as u32);
    assert!(rx_stage::RX_DATA_READY.0 == RxStage::DataReady as u32);
    assert!(rx_stage::RX_COPY.0 == RxStage::Copy as u32);
    assert!(rx_stage::RX_READ_DONE.0 == RxStage::ReadDone as u32);
};

// The wire body is the BPF record without its ring header, plus the two
// global stamps the agent adds.
const _: () = assert!(
    RxEvent::BODY_LEN
        == std::mem::size_of::<rx_record>() - std::mem::size_of::<record_hdr>()
            + 2 * std::mem::size_of::<u64>() // global_ns, rx_stamp_global_ns
);
const _: () = {
    assert!((rx_counter::RX_CTR_LOST.0 as usize) < N_COUNTERS);
    assert!((rx_counter::RX_CTR_READ_ERR.0 as usize) < N_COUNTERS);
};

/// `skb->tstamp_type` of a CLOCK_REALTIME stamp (`SKB_CLOCK_REALTIME`).
const SKB_CLOCK_REALTIME: u8 = 0;
/// `skb->tstamp_type` of a CLOCK_MONOTONIC delivery time (`SKB_CLOCK_MONOTONIC`).
const SKB_CLOCK_MONOTONIC: u8 = 1;

/// The tracepoints the programs attach to (tp_btf), in stage order.
pub const TRACEPOINTS: [&str; 5] = [
    "netif_receive_skb",
    "tcp_probe",
    "sk_data_ready",
    "skb_copy_datagram_iovec",
    "sock_recv_length",
];

/// Preflight: every tracepoint must exist in the kernel's BTF (as the
/// `btf_trace_<name>` type tp_btf attaches through), so an older kernel
/// gets a message naming what it lacks instead of a libbpf attach error.
fn check(cfg: &ProbeConfig) -> Result<(), PreflightError> {
    match btf_missing_tracepoints(&cfg.btf) {
        Ok(missing) if missing.is_empty() => Ok(()),
        Ok(missing) => Err(PreflightError::NoRxTracepoints {
            release: crate::preflight::kernel_release(),
            btf: cfg.btf.clone(),
            missing,
        }),
        Err(error) => Err(PreflightError::NoBtf {
            btf: cfg.btf.clone(),
            error,
        }),
    }
}

/// The [`TRACEPOINTS`] whose `btf_trace_<name>` type `btf` (a kernel BTF
/// blob) does not name. A string search is enough: the names are unique.
pub fn btf_missing_tracepoints(btf: &std::path::Path) -> std::io::Result<Vec<&'static str>> {
    let data = std::fs::read(btf)?;
    Ok(TRACEPOINTS
        .into_iter()
        .filter(|tp| {
            let needle = format!("\0btf_trace_{tp}\0");
            !data.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
        .collect())
}

fn open<'obj>(
    object: &'obj mut MaybeUninit<OpenObject>,
    cfg: &ProbeConfig,
) -> Result<Box<dyn Probe + 'obj>, ProbeError> {
    Ok(Box::new(RxProbe::load(object, cfg)?))
}

fn load_err(source: libbpf_rs::Error) -> ProbeError {
    ProbeError::Load {
        probe: NAME,
        source,
    }
}

fn map_err(map: &'static str) -> impl FnOnce(libbpf_rs::Error) -> ProbeError {
    move |source| ProbeError::Map {
        probe: NAME,
        map,
        source,
    }
}

/// A loaded RX probe. Dropping it detaches the programs and closes the
/// timestamping socket.
pub struct RxProbe<'obj> {
    skel: RxSkel<'obj>,
    links: Vec<Link>,
    /// Keeps the kernel's RX software stamping on while attached.
    stamp_socket: Option<OwnedFd>,
    ring: SlotRing,
}

impl<'obj> RxProbe<'obj> {
    /// Open, configure and load the probe.
    pub fn load(
        object: &'obj mut MaybeUninit<OpenObject>,
        cfg: &ProbeConfig,
    ) -> Result<Self, ProbeError> {
        let mut open = skel::RxSkelBuilder::default()
            .open(object)
            .map_err(load_err)?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.target_netns = cfg.target_netns;
            crate::write_flow_filter!(ro, &cfg.filter);
            crate::write_self_traffic!(ro, &cfg.self_traffic);
            ro.slots_per_cpu = cfg.slots_per_cpu;
            ro.sample_threshold = tracer_codec::sample::threshold(cfg.sample_every);
        }
        let ncpu = libbpf_rs::num_possible_cpus().map_err(load_err)?;
        let entries = (ncpu as u64 * u64::from(cfg.slots_per_cpu)).min(u64::from(u32::MAX)) as u32;
        open.maps.slots.set_max_entries(entries).map_err(load_err)?;
        let skel = open.load().map_err(load_err)?;
        let heads = read_heads(&skel)?;
        let ring = SlotRing::new(
            skel.maps.slots.as_fd(),
            std::mem::size_of::<rx_record>(),
            COMMIT_OFFSET,
            cfg.slots_per_cpu,
            &heads,
        )
        .map_err(|e| map_err("slots")(libbpf_rs::Error::from(e)))?;
        Ok(RxProbe {
            skel,
            links: Vec::new(),
            stamp_socket: None,
            ring,
        })
    }
}

/// A UDP socket asking for software RX timestamps: while one exists the
/// kernel stamps every received skb (`net_enable_timestamp`, a global
/// switch, as netstacklat does it).
pub fn rx_timestamping_socket() -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket(2) call; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let flags: libc::c_int =
        (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
    // SAFETY: setsockopt with a valid fd and a c_int option of its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            (&flags as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(owned)
}

/// How long [`wait_until_stamping`] waits for the kernel to turn stamping on.
const STAMPING_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Wait until the kernel really stamps received skbs. Enabling is
/// asynchronous (`net_enable_timestamp` flips a static key from a work
/// queue, which can take tens of ms), so without this the first skbs
/// traced would have no stamp. The probe: `fd` (bound to 127.0.0.1) sends
/// itself datagrams over loopback until one arrives with a software stamp.
/// Returns false if none did (loopback down, or the wait ran out).
pub fn wait_until_stamping(fd: &OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let fd = fd.as_raw_fd();
    // SAFETY: sockaddr_in is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    let alen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: bind/getsockname with a sockaddr_in we own and its size.
    let bound = unsafe {
        libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), alen) == 0 && {
            let mut l = alen;
            libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_in).cast(), &mut l) == 0
        }
    };
    if !bound {
        return false;
    }
    let start = std::time::Instant::now();
    while start.elapsed() < STAMPING_WAIT {
        // SAFETY: sendto of one byte to the address bound above.
        let sent = unsafe {
            libc::sendto(
                fd,
                b"t".as_ptr().cast(),
                1,
                0,
                (&addr as *const libc::sockaddr_in).cast(),
                alen,
            )
        };
        if sent != 1 {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        while let Some(stamped) = recv_stamped(fd) {
            if stamped {
                return true;
            }
        }
    }
    false
}

/// Receive one pending datagram (non-blocking): Some(true) if it carried a
/// software RX stamp, None if nothing was pending.
fn recv_stamped(fd: std::os::fd::RawFd) -> Option<bool> {
    let mut data = [0u8; 16];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // Room for one SCM_TIMESTAMPING (3 timespecs) and then some.
    let mut control = [0u64; 32];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg into buffers that outlive the call.
    if unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) } < 0 {
        return None;
    }
    let mut stamped = false;
    // SAFETY: walking the control buffer recvmsg filled, with the libc
    // CMSG macros, reading a timespec from an SCM_TIMESTAMPING message.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPING {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                stamped |= ts.tv_sec != 0 || ts.tv_nsec != 0;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Some(stamped)
}

impl Probe for RxProbe<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn attach(&mut self) -> Result<(), ProbeError> {
        // Stamping first, so the first skbs traced already carry a stamp.
        // Without it the probe still works, with rx_stamp_ns = 0.
        match rx_timestamping_socket() {
            Ok(fd) => {
                if !wait_until_stamping(&fd) {
                    tracing::warn!("RX software timestamping not confirmed on loopback; the first RX events may lack rx_stamp");
                }
                self.stamp_socket = Some(fd);
            }
            Err(e) => tracing::warn!(error = %e,
                "cannot enable RX software timestamps; RX events will have no rx_stamp"),
        }
        let progs = &self.skel.progs;
        let attach_err = |source| ProbeError::Attach {
            probe: NAME,
            path: "tracepoints".into(),
            source,
        };
        for prog in [
            &progs.rx_stack_entry,
            &progs.rx_tcp_input,
            &progs.rx_data_ready,
            &progs.rx_copy,
            &progs.rx_read_done,
        ] {
            self.links.push(prog.attach().map_err(attach_err)?);
        }
        Ok(())
    }

    fn drain(&mut self, out: &mut dyn Collector) -> Result<Drained, ProbeError> {
        let heads = read_heads(&self.skel)?;
        Ok(self.ring.drain(&heads, |data| deliver(data, out)))
    }

    fn counters(&self) -> Result<ProbeCounters, ProbeError> {
        let c = read_counters(&self.skel)?;
        Ok(ProbeCounters {
            ringbuf_lost: c[rx_counter::RX_CTR_LOST.0 as usize],
            rx_read_errors: c[rx_counter::RX_CTR_READ_ERR.0 as usize],
            ..ProbeCounters::default()
        })
    }

    fn doorbell(&self) -> Result<libbpf_rs::MapHandle, ProbeError> {
        libbpf_rs::MapHandle::try_from(&self.skel.maps.doorbell).map_err(map_err("doorbell"))
    }

    fn programs(&self) -> Vec<BorrowedFd<'_>> {
        let p = &self.skel.progs;
        vec![
            p.rx_stack_entry.as_fd(),
            p.rx_tcp_input.as_fd(),
            p.rx_data_ready.as_fd(),
            p.rx_copy.as_fd(),
            p.rx_read_done.as_fd(),
        ]
    }

    fn detach(&mut self) {
        self.links.clear();
        self.stamp_socket = None;
    }
}

/// Decode and validate one ring record, and hand its event to `out`.
fn deliver(data: &[u8], out: &mut dyn Collector) {
    match RxRecord::decode(data) {
        Ok(rec) => {
            let r = &rec.0;
            let mono_ns = out.local_mono(r.mono_ns);
            let global = out.global_ns(mono_ns);
            // Each stamp read by its own clock and through its mapping. A
            // MONOTONIC stamp is a delivery time the sender's TCP set (EDT)
            // that crossed a veth within this kernel: still an instant of
            // this host, so it converts exactly. TAI stamps are left as
            // they are and not converted (no TAI offset is assumed).
            let (rx_stamp_ns, rx_global) = match (r.rx_stamp_ns, r.tstamp_type) {
                (0, _) => (0, 0),
                (ns, SKB_CLOCK_REALTIME) => {
                    let local = out.local_realtime(ns);
                    (local, out.realtime_to_global_ns(local))
                }
                (ns, SKB_CLOCK_MONOTONIC) => {
                    let local = out.local_mono(ns);
                    (local, out.global_ns(local))
                }
                (ns, _) => (ns, 0),
            };
            let ev = RxEvent {
                mono_ns,
                rx_stamp_ns,
                ..rec.to_event(global, rx_global)
            };
            out.event(ProbeEvent::Rx(&ev));
        }
        Err(e) => out.bad_record(NAME, e),
    }
}

fn read_counters(skel: &RxSkel<'_>) -> Result<[u64; N_COUNTERS], ProbeError> {
    slots::sum_percpu(&skel.maps.counters).map_err(map_err("counters"))
}

fn read_heads(skel: &RxSkel<'_>) -> Result<Vec<u64>, ProbeError> {
    slots::read_heads(&skel.maps.heads).map_err(map_err("heads"))
}

/// A record the probe wrote, decoded and validated.
#[derive(Debug, Clone, Copy)]
pub struct RxRecord(rx_record);

impl RxRecord {
    /// Decode a probe record and check kind, length, stage and family;
    /// never panics on bad input.
    pub fn decode(data: &[u8]) -> Result<Self, RecordError> {
        let rec: rx_record = slots::read_record(data, RECORD_RX)?;
        if RxStage::from_u8(rec.stage).is_none() {
            return Err(RecordError::UnknownStage(rec.stage));
        }
        if !matches!(rec.family, 4 | 6) {
            return Err(RecordError::BadFamily(rec.family));
        }
        Ok(RxRecord(rec))
    }

    /// The wire event, with both global stamps filled in by the caller.
    pub fn to_event(&self, global_ns: u64, rx_stamp_global_ns: u64) -> RxEvent {
        let r = &self.0;
        let mut comm = [0u8; 16];
        for (d, s) in comm.iter_mut().zip(r.comm.iter()) {
            *d = *s as u8;
        }
        RxEvent {
            mono_ns: r.mono_ns,
            global_ns,
            rx_stamp_ns: r.rx_stamp_ns,
            rx_stamp_global_ns,
            hw_ns: r.hw_ns,
            cookie: r.cookie,
            seq: r.seq,
            end_seq: r.end_seq,
            len: r.len,
            netns: r.netns,
            ifindex: r.ifindex,
            cpu: r.cpu,
            pid: r.pid,
            tid: r.tid,
            stage: r.stage,
            family: r.family,
            protocol: r.protocol,
            tstamp_type: r.tstamp_type,
            sport: r.sport,
            dport: r.dport,
            saddr: r.saddr,
            daddr: r.daddr,
            comm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> rx_record {
        rx_record {
            hdr: record_hdr {
                kind: RECORD_RX,
                len: std::mem::size_of::<rx_record>() as u16,
                commit: 1,
            },
            mono_ns: 100_000,
            rx_stamp_ns: 50_000,
            stage: rx_stage::RX_COPY.0 as u8,
            family: 4,
            seq: 10,
            end_seq: 20,
            ..Default::default()
        }
    }

    fn bytes(r: &rx_record) -> Vec<u8> {
        // SAFETY: rx_record is repr(C) plain data; we view its bytes.
        unsafe {
            std::slice::from_raw_parts((r as *const rx_record).cast::<u8>(), size_of::<rx_record>())
        }
        .to_vec()
    }

    #[derive(Default)]
    struct Seen {
        events: Vec<RxEvent>,
        bad: Vec<RecordError>,
    }

    impl Collector for Seen {
        fn global_ns(&self, mono_ns: u64) -> u64 {
            mono_ns + 1_000_000
        }
        /// REALTIME = MONOTONIC + 40_000 in this fake.
        fn realtime_to_global_ns(&self, realtime_ns: u64) -> u64 {
            self.global_ns(realtime_ns - 40_000)
        }
        fn event(&mut self, ev: ProbeEvent<'_>) {
            match ev {
                ProbeEvent::Rx(ev) => self.events.push(*ev),
                other => panic!("the rx probe delivered {other:?}"),
            }
        }
        fn bad_record(&mut self, probe: &'static str, err: RecordError) {
            assert_eq!(probe, "rx");
            self.bad.push(err);
        }
    }

    #[test]
    fn stamps_are_converted_and_bad_records_dropped_alone() {
        let mut tai = sample();
        tai.tstamp_type = 2;
        let mut mono = sample();
        mono.tstamp_type = 1;
        let mut none = sample();
        none.rx_stamp_ns = 0;
        let mut bad = sample();
        bad.stage = rx_stage::RX_STAGE_MAX.0 as u8;
        let mut bad_family = sample();
        bad_family.family = 2;
        let mut seen = Seen::default();
        for r in [sample(), bad, tai, bad_family, none, mono] {
            deliver(&bytes(&r), &mut seen);
        }
        assert_eq!(
            seen.bad,
            [
                RecordError::UnknownStage(RxStage::ALL.len() as u8),
                RecordError::BadFamily(2)
            ]
        );
        let e = &seen.events;
        assert_eq!(e.len(), 4);
        // REALTIME 50_000 is MONOTONIC 10_000: 90 us before the stage.
        assert_eq!(
            (e[0].global_ns, e[0].rx_stamp_global_ns),
            (1_100_000, 1_010_000)
        );
        assert_eq!(e[0].since_rx_stamp_ns(), Some(90_000));
        // A TAI stamp (no offset assumed), or none: no global stamp.
        assert_eq!(e[1].rx_stamp_global_ns, 0);
        assert_eq!(e[2].rx_stamp_global_ns, 0);
        // A MONOTONIC delivery time maps like any mono stamp.
        assert_eq!(e[3].rx_stamp_global_ns, 1_050_000);
        assert_eq!(
            (e[0].seq, e[0].end_seq, e[0].stage),
            (10, 20, RxStage::Copy as u8)
        );
        let mut b = tracer_codec::DatagramBuilder::new("h", 65000);
        for ev in e {
            assert!(b.push(ev));
        }
    }

    /// A host whose clock reads 3 µs ahead of the kernel's.
    struct Ahead(Seen);

    impl Collector for Ahead {
        fn local_mono(&mut self, raw_ns: u64) -> u64 {
            raw_ns + 3_000
        }
        fn local_realtime(&mut self, raw_ns: u64) -> u64 {
            raw_ns + 3_000
        }
        fn global_ns(&self, mono_ns: u64) -> u64 {
            self.0.global_ns(mono_ns)
        }
        fn realtime_to_global_ns(&self, realtime_ns: u64) -> u64 {
            self.0.realtime_to_global_ns(realtime_ns)
        }
        fn event(&mut self, ev: ProbeEvent<'_>) {
            self.0.event(ev)
        }
        fn bad_record(&mut self, probe: &'static str, err: RecordError) {
            self.0.bad_record(probe, err)
        }
    }

    #[test]
    fn events_carry_and_convert_the_stamps_as_the_host_clock_reads_them() {
        let mut mono = sample();
        mono.tstamp_type = 1;
        let mut tai = sample();
        tai.tstamp_type = 2;
        let mut seen = Ahead(Seen::default());
        for r in [sample(), mono, tai] {
            deliver(&bytes(&r), &mut seen);
        }
        let e = &seen.0.events;
        // Both the raw stamps on the wire and their conversions are local.
        assert_eq!((e[0].mono_ns, e[0].global_ns), (103_000, 1_103_000));
        assert_eq!(
            (e[0].rx_stamp_ns, e[0].rx_stamp_global_ns),
            (53_000, 1_013_000)
        );
        assert_eq!(
            (e[1].rx_stamp_ns, e[1].rx_stamp_global_ns),
            (53_000, 1_053_000)
        );
        // A TAI stamp is neither read through the host clock nor converted.
        assert_eq!((e[2].rx_stamp_ns, e[2].rx_stamp_global_ns), (50_000, 0));
    }

    #[test]
    fn short_wrong_kind_and_length_are_refused() {
        let b = bytes(&sample());
        assert_eq!(
            RxRecord::decode(&b[..9]).unwrap_err(),
            RecordError::Short(9)
        );
        let mut s = sample();
        s.hdr.kind = 1;
        assert_eq!(
            RxRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownKind(1)
        );
        let mut s = sample();
        s.hdr.len = 8;
        assert!(matches!(
            RxRecord::decode(&bytes(&s)),
            Err(RecordError::BadLen { got: 8, .. })
        ));
    }

    #[test]
    fn preflight_names_missing_tracepoints() {
        let dir = tempfile::tempdir().unwrap();
        let btf = dir.path().join("btf");
        std::fs::write(
            &btf,
            b"\0btf_trace_netif_receive_skb\0btf_trace_tcp_probe\0btf_trace_sock_recv_length\0",
        )
        .unwrap();
        assert_eq!(
            btf_missing_tracepoints(&btf).unwrap(),
            ["sk_data_ready", "skb_copy_datagram_iovec"]
        );
        let cfg = ProbeConfig {
            cgroup: "/x".into(),
            target_netns: 0,
            sample_every: 1,
            slots_per_cpu: 8,
            btf,
            filter: Default::default(),
            self_traffic: Default::default(),
        };
        let msg = check(&cfg).unwrap_err().to_string();
        assert!(
            msg.contains("sk_data_ready, skb_copy_datagram_iovec"),
            "{msg}"
        );
        // This kernel has them all.
        let real = std::path::Path::new("/sys/kernel/btf/vmlinux");
        if real.exists() {
            assert_eq!(btf_missing_tracepoints(real).unwrap(), Vec::<&str>::new());
        }
    }

    #[test]
    fn timestamping_socket_turns_stamping_on() {
        let fd = rx_timestamping_socket().unwrap();
        assert!(wait_until_stamping(&fd), "no stamped loopback datagram");
    }
}
