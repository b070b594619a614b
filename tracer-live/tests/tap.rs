//! The TAP interface for real (root): frames written arrive whole, in
//! order, as a packet socket on the interface captures them; the name is
//! refused while in use; the interface is gone once closed; a stale
//! persistent TAP of the name is taken over and goes too; a non-TAP
//! interface of the name is refused with its own error. Each test runs in
//! a network namespace of its own thread, which the kernel tears down
//! (with whatever it holds) when the thread ends, also after a failure.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use tracer_e2e::skip::require_root;
use tracer_live::tap::exists;
use tracer_live::{LiveError, LiveIface, Tap};

/// Run `f` on a thread in a fresh network namespace.
fn in_new_netns(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        // SAFETY: unshare has no memory preconditions; CLONE_NEWNET applies to this thread.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "unshare: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("test thread");
}

fn wait_gone(name: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while exists(name) {
        assert!(Instant::now() < deadline, "{name} still exists after close");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A non-blocking packet socket receiving every frame of `name`.
fn capture_socket(name: &str) -> OwnedFd {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket() has no memory preconditions.
    let s = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK,
            i32::from(proto),
        )
    };
    assert!(s >= 0, "packet socket: {}", std::io::Error::last_os_error());
    // SAFETY: s was just opened and is owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(s) };
    // Room for every frame of the test: it reads only after writing all.
    let size: libc::c_int = 8 << 20;
    // SAFETY: passes a c_int that outlives the call, with its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: plain old data, zero is valid; if_nametoindex reads a C string.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    // SAFETY: as above.
    sll.sll_ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) } as i32;
    // SAFETY: binds to a sockaddr_ll that outlives the call, with its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
    fd
}

fn read_frames(fd: &OwnedFd, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = vec![0u8; 65536];
    while got.len() < want && Instant::now() < deadline {
        // SAFETY: reads at most buf.len() bytes into a live buffer.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        got.push(buf[..n as usize].to_vec());
    }
    got
}

#[test]
fn frames_arrive_in_order_and_the_interface_goes_with_its_owner() {
    if !require_root() {
        return;
    }
    in_new_netns(|| {
        let mut live = LiveIface::create("ntlive0").expect("creating the TAP");
        assert!(exists("ntlive0"));
        let cap = capture_socket("ntlive0");
        // The name is taken while open.
        match Tap::create("ntlive0") {
            Err(LiveError::InUse { .. }) => {}
            other => panic!("second open of the name: {other:?}"),
        }
        let n = 300usize;
        for i in 0..n {
            let head = [0u8; 4];
            let data = vec![0x5a; i % 200];
            live.push(&head, &data, |h| {
                h.copy_from_slice(&(i as u32).to_le_bytes())
            });
            if i % 50 == 49 {
                live.flush();
            }
        }
        live.flush();
        let frames = read_frames(&cap, n);
        // Only our frames (IPv6 is off on the interface: no neighbour
        // discovery of the host's own), whole and in order.
        assert_eq!(frames.len(), n, "frames captured");
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(&f[12..14], &[0x88, 0xB5], "frame {i}: EtherType");
            assert_eq!(&f[14..18], &(i as u32).to_le_bytes(), "frame {i}: order");
            assert_eq!(f.len(), 18 + i % 200, "frame {i}: length");
        }
        let counters = live.counters();
        live.close();
        let c = counters.get();
        assert_eq!(c.frames_sent, n as u64);
        assert_eq!(c.dropped(), 0);
        wait_gone("ntlive0");
        // The name is free again.
        drop(LiveIface::create("ntlive0").expect("re-creating the TAP"));
        wait_gone("ntlive0");
    });
}

#[test]
fn a_stale_persistent_tap_is_taken_over_and_removed() {
    if !require_root() {
        return;
    }
    in_new_netns(|| {
        ip(&["tuntap", "add", "dev", "ntstale0", "mode", "tap"]);
        let tap = Tap::create("ntstale0").expect("taking over the stale TAP");
        assert!(tap.took_over());
        drop(tap);
        wait_gone("ntstale0");
    });
}

#[test]
fn a_name_held_by_another_kind_of_interface_is_refused() {
    if !require_root() {
        return;
    }
    in_new_netns(|| {
        ip(&[
            "link", "add", "ntveth0", "type", "veth", "peer", "name", "ntveth1",
        ]);
        match Tap::create("ntveth0") {
            Err(e @ LiveError::NotTap { .. }) => {
                assert!(e.to_string().contains("not a TAP device"), "{e}")
            }
            other => panic!("a veth's name: {other:?}"),
        }
        // A TUN (not TAP) device of the name is another kind too.
        ip(&["tuntap", "add", "dev", "nttun0", "mode", "tun"]);
        assert!(matches!(
            Tap::create("nttun0"),
            Err(LiveError::NotTap { .. })
        ));
    });
}

#[test]
fn without_cap_net_admin_the_error_says_so() {
    if !require_root() {
        return;
    }
    in_new_netns(|| {
        // Only this thread becomes nobody (the raw syscall, unlike libc's
        // setresuid, does not change the other threads), and losing uid 0
        // clears its capabilities.
        // SAFETY: setresuid takes three integers; it affects this thread only.
        let rc = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        assert_eq!(rc, 0, "setresuid: {}", std::io::Error::last_os_error());
        match Tap::create("ntlive0") {
            Err(e @ LiveError::NeedsNetAdmin { .. }) => {
                assert!(e.to_string().contains("CAP_NET_ADMIN"), "{e}")
            }
            other => panic!("unprivileged create: {other:?}"),
        }
    });
}

#[test]
fn a_bad_name_is_refused_before_any_syscall() {
    let e = Tap::create("bad/name").unwrap_err();
    assert!(matches!(e, LiveError::BadName { .. }));
    assert!(e.to_string().contains("nettrace0"), "{e}");
}
