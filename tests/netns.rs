//! Network namespaces joined by a veth pair: two "hosts" on one kernel.
//! Creation removes leftovers of an earlier killed run; Drop removes
//! everything, also when the test fails.

use std::path::PathBuf;
use std::process::Command;

/// True when running as root (namespaces and BPF need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn ip(args: &[&str]) -> std::io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Two namespaces `<tag>-a` and `<tag>-b`, linked by veth, addressed
/// 10.<subnet>.0.1/24 (a) and 10.<subnet>.0.2/24 (b).
#[derive(Debug)]
pub struct NetnsPair {
    /// Name of namespace a.
    pub a: String,
    /// Name of namespace b.
    pub b: String,
    /// Address of a.
    pub addr_a: std::net::Ipv4Addr,
    /// Address of b.
    pub addr_b: std::net::Ipv4Addr,
}

impl NetnsPair {
    /// Create the pair. `tag` must be short (veth names have 15 bytes).
    pub fn create(tag: &str, subnet: u8) -> std::io::Result<Self> {
        let pair = NetnsPair {
            a: format!("{tag}-a"),
            b: format!("{tag}-b"),
            addr_a: std::net::Ipv4Addr::new(10, subnet, 0, 1),
            addr_b: std::net::Ipv4Addr::new(10, subnet, 0, 2),
        };
        pair.remove();
        let (va, vb) = (format!("{tag}va"), format!("{tag}vb"));
        ip(&["netns", "add", &pair.a])?;
        ip(&["netns", "add", &pair.b])?;
        ip(&[
            "link", "add", &va, "netns", &pair.a, "type", "veth", "peer", "name", &vb, "netns",
            &pair.b,
        ])?;
        for (ns, dev, addr) in [(&pair.a, &va, pair.addr_a), (&pair.b, &vb, pair.addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }

    /// Path of a namespace's bind mount.
    pub fn path(ns: &str) -> PathBuf {
        PathBuf::from("/run/netns").join(ns)
    }

    /// `<program>` run in namespace `ns`. nsenter switches only the network
    /// namespace; `ip netns exec` would also remount /sys and hide the
    /// cgroup v2 mount the agent attaches to.
    pub fn exec(ns: &str, program: &std::path::Path) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", Self::path(ns).display()))
            .arg("--")
            .arg(program);
        c
    }

    fn remove(&self) {
        // Deleting a namespace deletes its end of the veth, and so the pair.
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Run `f` on a new thread that has joined the network namespace at
/// `path`; sockets it creates stay in that namespace.
pub fn in_netns<T: Send + 'static>(
    path: PathBuf,
    thread_name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(&path)?;
    std::thread::Builder::new()
        .name(thread_name.to_owned())
        .spawn(move || {
            // SAFETY: file is an open netns file; setns affects only this thread.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
}
