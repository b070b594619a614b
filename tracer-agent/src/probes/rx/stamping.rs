//! The socket the rx probe holds while attached: the kernel stamps
//! received skbs (`skb->tstamp`, CLOCK_REALTIME) only while some socket
//! asks for software RX timestamps.

use std::os::fd::OwnedFd;

/// The socket that keeps RX software stamping on, once stamping is
/// confirmed; None, with a warning, if it cannot be had. Without it the
/// probe still works, with rx_stamp_ns = 0.
pub fn hold() -> Option<OwnedFd> {
    match rx_timestamping_socket() {
        Ok(fd) => {
            if !wait_until_stamping(&fd) {
                tracing::warn!("RX software timestamping not confirmed on loopback; the first RX events may lack rx_stamp");
            }
            Some(fd)
        }
        Err(e) => {
            tracing::warn!(error = %e,
                "cannot enable RX software timestamps; RX events will have no rx_stamp");
            None
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamping_socket_turns_stamping_on() {
        let fd = rx_timestamping_socket().unwrap();
        assert!(wait_until_stamping(&fd), "no stamped loopback datagram");
    }
}
