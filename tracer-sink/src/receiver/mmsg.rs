//! Reading many datagrams per system call (`recvmmsg`), each with its
//! source address, into buffers allocated once. With `UDP_GRO` on the
//! socket (socket.rs), one message may hold several datagrams of one
//! sender end to end, each `segment` bytes but the last (an agent's UDP
//! GSO batch delivered whole, or datagrams GRO merged): [`segments`] cuts
//! them apart.

use std::net::SocketAddr;

use clocksync::exchange::sockaddr_to_std;

/// Receive buffer: larger than any UDP payload, so an oversized datagram
/// is seen whole and rejected as `too_large` rather than cut.
const RECV_BUF: usize = 65_536;

/// Datagrams read per `recvmmsg` call.
pub(super) const RECV_BATCH: usize = 32;

/// Buffers and headers for `recvmmsg`. The kernel writes into `bufs` and
/// `addrs` through the pointers in `hdrs`/`iovs`, which are set up anew
/// before every call (so moving this struct is harmless).
pub(super) struct MultiRecv {
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    /// Per message: room for one `UDP_GRO` cmsg (an int), 8-byte aligned.
    controls: Vec<[u64; CONTROL_WORDS]>,
    hdrs: Vec<libc::mmsghdr>,
}

/// u64 words of control buffer per message: CMSG_SPACE(4) is 24 bytes.
const CONTROL_WORDS: usize = 4;

// SAFETY: the raw pointers in `iovs`/`hdrs` only ever point into this
// struct's own vectors and are rebuilt before each use.
unsafe impl Send for MultiRecv {}

impl MultiRecv {
    pub(super) fn new() -> Self {
        MultiRecv {
            bufs: vec![0u8; RECV_BUF * RECV_BATCH],
            // SAFETY: all-zero is a valid value of these plain C structs.
            iovs: vec![unsafe { std::mem::zeroed() }; RECV_BATCH],
            // SAFETY: as above.
            addrs: vec![unsafe { std::mem::zeroed() }; RECV_BATCH],
            controls: vec![[0; CONTROL_WORDS]; RECV_BATCH],
            // SAFETY: as above.
            hdrs: vec![unsafe { std::mem::zeroed() }; RECV_BATCH],
        }
    }

    /// One `recvmmsg(MSG_DONTWAIT)`: the number of datagrams read.
    pub(super) fn recv(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<usize> {
        for i in 0..RECV_BATCH {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i * RECV_BUF..].as_mut_ptr().cast(),
                iov_len: RECV_BUF,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.controls[i].as_mut_ptr().cast();
            h.msg_controllen = std::mem::size_of::<[u64; CONTROL_WORDS]>();
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: `hdrs` holds RECV_BATCH initialised headers whose name and
        // iovec pointers point into `addrs` and `bufs` (RECV_BUF bytes
        // each), all live and unaliased for the duration of the call.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Message `i` of the last call, its source, and the size of the
    /// datagrams it holds end to end when the kernel says so (`UDP_GRO`).
    pub(super) fn get(&self, i: usize) -> (&[u8], SocketAddr, Option<usize>) {
        let len = (self.hdrs[i].msg_len as usize).min(RECV_BUF);
        let src = sockaddr_to_std(&self.addrs[i], self.hdrs[i].msg_hdr.msg_namelen)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let bytes = &self.bufs[i * RECV_BUF..i * RECV_BUF + len];
        (bytes, src, gro_segment(&self.hdrs[i].msg_hdr))
    }
}

/// The `UDP_GRO` segment size in a received message's control data.
fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    let mut seg = None;
    // SAFETY: walking the control buffer recvmmsg filled (msg_controllen
    // is what it wrote), with the libc CMSG macros; the int is read
    // unaligned from inside the cmsg the macros bound.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                seg = usize::try_from(v).ok().filter(|&v| v > 0);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    seg
}

/// The datagrams of one received message: `bytes` cut every `segment`
/// bytes (the last may be shorter), or whole (an empty datagram too)
/// without a segment size.
pub(super) fn segments(bytes: &[u8], segment: Option<usize>) -> impl Iterator<Item = &[u8]> {
    let size = segment
        .filter(|&s| s > 0 && s < bytes.len())
        .unwrap_or(bytes.len());
    let count = if size == 0 {
        1
    } else {
        bytes.len().div_ceil(size)
    };
    (0..count).map(move |i| &bytes[(i * size).min(bytes.len())..((i + 1) * size).min(bytes.len())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_cut_into_its_segments() {
        let b: Vec<u8> = (0..10).collect();
        let cut = |s| segments(&b, s).map(<[u8]>::len).collect::<Vec<_>>();
        assert_eq!(cut(None), [10]);
        assert_eq!(cut(Some(4)), [4, 4, 2]);
        assert_eq!(cut(Some(5)), [5, 5]);
        assert_eq!(cut(Some(10)), [10]);
        assert_eq!(cut(Some(64)), [10]);
        // An empty datagram is one datagram (rejected as too short).
        assert_eq!(
            segments(&[], Some(4)).map(<[u8]>::len).collect::<Vec<_>>(),
            [0]
        );
        assert_eq!(segments(&[], None).count(), 1);
    }

    #[test]
    fn source_addresses_convert_like_std() {
        for s in [
            "127.0.0.1:7420",
            "10.1.2.3:1",
            "[::1]:65535",
            "[fe80::1%7]:5201",
            "[2001:db8::ff]:0",
        ] {
            let want: SocketAddr = s.parse().unwrap();
            let sa = socket2::SockAddr::from(want);
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            // SAFETY: copies `len` (<= size of sockaddr_storage) bytes from
            // a live SockAddr into a live, distinct sockaddr_storage.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    sa.as_ptr().cast::<u8>(),
                    (&mut st as *mut libc::sockaddr_storage).cast::<u8>(),
                    sa.len() as usize,
                );
            }
            assert_eq!(sockaddr_to_std(&st, sa.len()), Some(want), "{s}");
            assert_eq!(sockaddr_to_std(&st, 2), None);
        }
    }
}
