//! Checks run before loading anything, so a missing privilege, cgroup or
//! kernel feature ends the agent with a message that says what to do.

use std::path::{Path, PathBuf};

/// Linux capability numbers (include/uapi/linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
/// statfs f_type of a cgroup v2 mount.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// A failed precondition, worded for the operator.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// Missing privileges.
    #[error(
        "insufficient privileges: loading BPF programs needs CAP_BPF and CAP_PERFMON \
         (or CAP_SYS_ADMIN) and attaching to a cgroup needs CAP_NET_ADMIN; \
         missing: {}. Run tracer-agent as root (sudo) or grant those capabilities",
        .missing.join(", ")
    )]
    Privileges {
        /// Names of the missing capabilities.
        missing: Vec<&'static str>,
    },
    /// The cgroup directory is missing or not cgroup v2.
    #[error(
        "cgroup {path} {why}: pass --cgroup with a cgroup v2 directory (e.g. the cgroup2 \
         mount point; `mount -t cgroup2` lists them), or mount one with \
         `mount -t cgroup2 none /sys/fs/cgroup/unified`. Inside `ip netns exec`, /sys is \
         remounted without it: use `nsenter --net=/run/netns/NAME` instead"
    )]
    Cgroup {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        why: CgroupProblem,
    },
    /// The kernel lacks BPF TX timestamping.
    #[error(
        "this kernel ({release}) lacks BPF TX timestamping (kfunc \
         bpf_sock_ops_enable_tx_tstamp not in {btf}): the tx probe needs Linux >= 6.15 \
         with BTF. Upgrade the kernel, or run without --probes tx"
    )]
    NoTxTimestamping {
        /// uname release.
        release: String,
        /// BTF file searched.
        btf: PathBuf,
    },
    /// The kernel lacks tracepoints the rx probe attaches to.
    #[error(
        "this kernel ({release}) lacks the tracepoint(s) {} the rx probe attaches to \
         (no btf_trace_* type in {btf}); run without --probes rx",
        .missing.join(", ")
    )]
    NoRxTracepoints {
        /// uname release.
        release: String,
        /// BTF file searched.
        btf: PathBuf,
        /// The missing tracepoints.
        missing: Vec<&'static str>,
    },
    /// No kernel BTF to check or to relocate against.
    #[error("cannot read kernel BTF {btf} ({error}); the kernel needs CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf {
        /// BTF file.
        btf: PathBuf,
        /// The OS error (in the message, where the operator reads it).
        error: std::io::Error,
    },
}

/// What is wrong with a `--cgroup` path (completes "cgroup PATH ...").
#[derive(Debug, thiserror::Error)]
pub enum CgroupProblem {
    /// The path cannot be passed to the kernel.
    #[error("contains a NUL byte")]
    Nul,
    /// statfs failed (missing, or no permission).
    #[error("is not accessible ({0})")]
    NotAccessible(std::io::Error),
    /// Some other file system.
    #[error("is not on a cgroup v2 file system")]
    NotCgroup2,
    /// A file on cgroup2, not a cgroup.
    #[error("is not a directory")]
    NotDirectory,
}

/// Effective capability mask of this process.
fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// True when this process has capability `cap` in effect.
fn has_capability(cap: u32) -> bool {
    effective_caps() & (1u64 << cap) != 0
}

/// The capabilities loading and attaching tracing BPF programs needs that
/// this process lacks: CAP_BPF and CAP_PERFMON, each implied by
/// CAP_SYS_ADMIN.
pub fn missing_bpf_capabilities() -> Vec<&'static str> {
    let admin = has_capability(CAP_SYS_ADMIN);
    let mut missing = Vec::new();
    if !(admin || has_capability(CAP_BPF)) {
        missing.push("CAP_BPF");
    }
    if !(admin || has_capability(CAP_PERFMON)) {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// Check the capabilities the agent needs.
pub fn check_privileges() -> Result<(), PreflightError> {
    let mut missing = missing_bpf_capabilities();
    if !has_capability(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PreflightError::Privileges { missing })
    }
}

/// Check that `path` is a cgroup v2 directory.
pub fn check_cgroup(path: &Path) -> Result<(), PreflightError> {
    let err = |why: CgroupProblem| PreflightError::Cgroup {
        path: path.to_path_buf(),
        why,
    };
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| err(CgroupProblem::Nul))?;
    // SAFETY: zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st a valid, writable statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(err(CgroupProblem::NotAccessible(
            std::io::Error::last_os_error(),
        )));
    }
    if st.f_type as i64 != CGROUP2_SUPER_MAGIC {
        return Err(err(CgroupProblem::NotCgroup2));
    }
    if !path.is_dir() {
        return Err(err(CgroupProblem::NotDirectory));
    }
    Ok(())
}

/// Check that the kernel whose BTF is `btf` offers BPF TX timestamping.
pub fn check_tx_timestamping(btf: &Path) -> Result<(), PreflightError> {
    match btf_has_tx_timestamping(btf) {
        Ok(true) => Ok(()),
        Ok(false) => Err(PreflightError::NoTxTimestamping {
            release: kernel_release(),
            btf: btf.to_path_buf(),
        }),
        Err(error) => Err(PreflightError::NoBtf {
            btf: btf.to_path_buf(),
            error,
        }),
    }
}

/// True when `btf` (a kernel BTF blob) names the kfunc BPF TX timestamping
/// needs (Linux >= 6.15). A string search is enough: the name is unique.
pub fn btf_has_tx_timestamping(btf: &Path) -> std::io::Result<bool> {
    let data = std::fs::read(btf)?;
    let needle = b"\0bpf_sock_ops_enable_tx_tstamp\0";
    Ok(data.windows(needle.len()).any(|w| w == needle))
}

/// The tracepoints of `tracepoints` whose `btf_trace_<name>` type (what a
/// tp_btf program attaches through) `btf`, a kernel BTF blob, does not
/// name. A string search is enough: the names are unique.
pub fn btf_missing_tracepoints(
    btf: &Path,
    tracepoints: &[&'static str],
) -> std::io::Result<Vec<&'static str>> {
    let data = std::fs::read(btf)?;
    Ok(tracepoints
        .iter()
        .copied()
        .filter(|tp| {
            let needle = format!("\0btf_trace_{tp}\0");
            !data.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
        .collect())
}

/// `uname -r`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The default cgroup v2 root: the first cgroup2 mount in
/// /proc/self/mountinfo (/sys/fs/cgroup on a unified layout,
/// /sys/fs/cgroup/unified on a hybrid one), else /sys/fs/cgroup/unified so
/// the error names the usual place.
pub fn default_cgroup() -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    cgroup2_mount(&info).unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup/unified"))
}

/// Mount point of the first cgroup2 file system in a mountinfo text.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        // "<id> <parent> <maj:min> <root> <mount point> <opts> ... - <fstype> ..."
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

/// `NS_GET_NSTYPE` (`_IO(0xb7, 0x3)`, linux/nsfs.h, Linux >= 4.11): the
/// `CLONE_NEW*` type of the namespace an nsfs file descriptor refers to.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// Why a `--netns` file cannot be traced, worded for the operator.
#[derive(Debug, thiserror::Error)]
pub enum NetnsFileError {
    /// The file cannot be opened.
    #[error("cannot open {path}: {source}; pass a network namespace such as /run/netns/NAME or /proc/PID/ns/net")]
    Open {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is no namespace at all.
    #[error("{path} is not a namespace file ({what}); pass a network namespace such as /run/netns/NAME or /proc/PID/ns/net")]
    NotNamespace {
        /// The file.
        path: PathBuf,
        /// What it is instead ("a character device", ...).
        what: &'static str,
    },
    /// The file is a namespace of another kind.
    #[error("{path} is a {kind} namespace, not a network namespace; pass /run/netns/NAME or /proc/PID/ns/net")]
    OtherNamespace {
        /// The file.
        path: PathBuf,
        /// Its kind ("mount", "UTS", ...).
        kind: &'static str,
    },
    /// The kernel would not say what the file is.
    #[error("cannot tell what kind of namespace {path} is: {source}")]
    Query {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Name of a `CLONE_NEW*` namespace type.
fn namespace_kind(nstype: libc::c_int) -> &'static str {
    match nstype {
        libc::CLONE_NEWNS => "mount",
        libc::CLONE_NEWUTS => "UTS",
        libc::CLONE_NEWIPC => "IPC",
        libc::CLONE_NEWUSER => "user",
        libc::CLONE_NEWPID => "PID",
        libc::CLONE_NEWCGROUP => "cgroup",
        libc::CLONE_NEWTIME => "time",
        _ => "unknown",
    }
}

/// What a file that is not on nsfs is, for the error.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a regular file"
    }
}

/// Check that `path` is a network namespace file (as /run/netns/NAME or
/// /proc/PID/ns/net are) and return its inode, which the probes filter
/// on. Any other file has an inode too, which no socket's namespace ever
/// matches: the agent would run and trace nothing, so it is refused here.
pub fn netns_inode(path: &Path) -> Result<u32, NetnsFileError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    // O_NONBLOCK: opening a FIFO given by mistake must not wait for a writer.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|source| NetnsFileError::Open {
            path: path.to_owned(),
            source,
        })?;
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd, which
    // `f` owns and keeps open for the call.
    let nstype = unsafe { libc::ioctl(f.as_raw_fd(), NS_GET_NSTYPE) };
    let meta = f.metadata().map_err(|source| NetnsFileError::Open {
        path: path.to_owned(),
        source,
    })?;
    if nstype < 0 {
        let e = std::io::Error::last_os_error();
        // Files outside nsfs do not know the ioctl.
        return Err(match e.raw_os_error() {
            Some(libc::ENOTTY) | Some(libc::EINVAL) => NetnsFileError::NotNamespace {
                path: path.to_owned(),
                what: file_kind(&meta),
            },
            _ => NetnsFileError::Query {
                path: path.to_owned(),
                source: e,
            },
        });
    }
    if nstype != libc::CLONE_NEWNET {
        return Err(NetnsFileError::OtherNamespace {
            path: path.to_owned(),
            kind: namespace_kind(nstype),
        });
    }
    Ok(meta.ino() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_cgroup_paths_are_refused_with_advice() {
        let e = check_cgroup(Path::new("/tmp")).unwrap_err().to_string();
        assert!(e.contains("not on a cgroup v2"), "{e}");
        assert!(e.contains("--cgroup"), "{e}");
        let e = check_cgroup(Path::new("/nonexistent/cg"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not accessible"), "{e}");
    }

    #[test]
    fn kernel_without_kfunc_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("vmlinux");
        std::fs::write(&f, b"\0tcp_sendmsg\0").unwrap();
        let e = check_tx_timestamping(&f).unwrap_err().to_string();
        assert!(e.contains("6.15"), "{e}");
        let e = check_tx_timestamping(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("BTF"), "{e}");
    }

    #[test]
    fn cgroup2_mount_is_found_in_mountinfo() {
        let info = "24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n\
                    35 24 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(info),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            cgroup2_mount("24 30 0:22 / /sys rw - sysfs sysfs rw\n"),
            None
        );
    }

    #[test]
    fn own_netns_inode_is_readable() {
        use std::os::unix::fs::MetadataExt;
        let own = Path::new("/proc/self/ns/net");
        let ino = std::fs::metadata(own).unwrap().ino() as u32;
        assert_eq!(netns_inode(own).unwrap(), ino);
    }

    #[test]
    fn files_that_are_not_network_namespaces_are_named() {
        let e = |p: &str| netns_inode(Path::new(p)).unwrap_err().to_string();
        let zero = e("/dev/zero");
        assert!(
            zero.contains("/dev/zero is not a namespace file (a character device)"),
            "{zero}"
        );
        let mnt = e("/proc/self/ns/mnt");
        assert!(
            mnt.contains("is a mount namespace, not a network namespace"),
            "{mnt}"
        );
        assert!(e("/proc/self/ns/uts").contains("a UTS namespace"));
        assert!(e("/tmp").contains("(a directory)"));
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path that lives for the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(
            e(fifo.to_str().unwrap()).contains("(a FIFO)"),
            "opened without blocking"
        );
        assert!(e("/no/such/ns").contains("cannot open /no/such/ns"));
    }

    #[test]
    fn btf_check_finds_kfunc_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let without = dir.path().join("old");
        std::fs::write(&without, b"\0bpf_sock_ops_cb_flags_set\0").unwrap();
        assert!(!btf_has_tx_timestamping(&without).unwrap());
        let with = dir.path().join("new");
        std::fs::write(&with, b"x\0bpf_sock_ops_enable_tx_tstamp\0y").unwrap();
        assert!(btf_has_tx_timestamping(&with).unwrap());
    }
}
