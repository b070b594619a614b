//! Which datagrams reach an exchange socket: classic BPF socket filters
//! (a request's or the awaited answer's length, magic and sequence number)
//! that make the kernel drop everything else before it is queued, and the
//! socket's count of what it dropped.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use crate::error::ClockError;
use crate::source::exchange::msg::Message;

/// A classic BPF socket filter that accepts a datagram when every test
/// passes and drops it otherwise (the socket counts the drop).
struct FilterBuilder {
    prog: Vec<libc::sock_filter>,
}

/// Jump target placeholder: the final "drop" instruction.
const TO_DROP: u8 = u8::MAX;

impl FilterBuilder {
    const LD_LEN: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_LEN;
    const LD_WORD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const LD_BYTE: u32 = libc::BPF_LD | libc::BPF_B | libc::BPF_ABS;
    const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    const RET: u32 = libc::BPF_RET | libc::BPF_K;

    fn insn(&mut self, code: u32, k: u32, jt: u8, jf: u8) {
        self.prog.push(libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        });
    }

    /// Pass when the loaded value is one of `values` (at least one).
    fn one_of(&mut self, load: u32, at: u32, values: &[u32]) -> &mut Self {
        self.insn(load, at, 0, 0);
        let n = values.len();
        for (i, &v) in values.iter().enumerate() {
            let last = i + 1 == n;
            // A match skips the remaining tests of the group.
            let jt = (n - 1 - i) as u8;
            self.insn(Self::JEQ, v, jt, if last { TO_DROP } else { 0 });
        }
        self
    }

    /// The datagram's length (UDP header included) is a message's: with a
    /// key only a tagged one; without, either (a keyless side cannot check
    /// a tag, and reads a tagged message as an untagged one).
    fn message_len(&mut self, keyed: bool) -> &mut Self {
        use crate::source::exchange::msg::{MSG_LEN, TAGGED_LEN};
        let tagged = UDP_HDR + TAGGED_LEN as u32;
        if keyed {
            self.one_of(Self::LD_LEN, 0, &[tagged])
        } else {
            self.one_of(Self::LD_LEN, 0, &[UDP_HDR + MSG_LEN as u32, tagged])
        }
    }

    /// The 4 message bytes at `at` are `bytes` (BPF_ABS loads read network
    /// byte order).
    fn word(&mut self, at: usize, bytes: &[u8; MSG_LEN_OF_FILTER]) -> &mut Self {
        let w = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        self.one_of(Self::LD_WORD, UDP_HDR + at as u32, &[w])
    }

    /// The message byte at `at` is one of `values`.
    fn byte(&mut self, at: usize, values: &[u8]) -> &mut Self {
        let v: Vec<u32> = values.iter().map(|&b| u32::from(b)).collect();
        self.one_of(Self::LD_BYTE, UDP_HDR + at as u32, &v)
    }

    fn build(&mut self) -> Vec<libc::sock_filter> {
        self.insn(Self::RET, u32::MAX, 0, 0);
        self.insn(Self::RET, 0, 0, 0);
        let drop = self.prog.len() - 1;
        for (i, ins) in self.prog.iter_mut().enumerate() {
            if ins.jf == TO_DROP {
                ins.jf = (drop - i - 1) as u8;
            }
        }
        std::mem::take(&mut self.prog)
    }
}

/// Bytes of an encoded message the filters look into.
const MSG_LEN_OF_FILTER: usize = crate::source::exchange::msg::MSG_LEN;

/// UDP header length: a socket filter sees the datagram from there.
const UDP_HDR: u32 = 8;

/// The filter of [`admit_only`]: a message's length and magic, carrying
/// sequence number `seq`.
fn answer_filter(seq: u64, keyed: bool) -> Vec<libc::sock_filter> {
    let bytes = Message::request(seq).encode();
    FilterBuilder { prog: Vec::new() }
        .message_len(keyed)
        .word(0, &bytes)
        .word(8, &bytes)
        .word(12, &bytes)
        .build()
}

/// The filter of [`admit_requests`]: a message's length, magic and
/// version, of a kind a client sends.
fn request_filter(keyed: bool) -> Vec<libc::sock_filter> {
    use crate::source::exchange::msg::{Kind, VERSION};
    let bytes = Message::request(0).encode();
    FilterBuilder { prog: Vec::new() }
        .message_len(keyed)
        .word(0, &bytes)
        .byte(4, &[VERSION])
        .byte(5, &[Kind::Request as u8, Kind::Warmup as u8])
        .build()
}

/// Attach a classic BPF program to `sock`'s receive path (replacing any).
fn attach_filter(sock: &UdpSocket, mut prog: Vec<libc::sock_filter>) -> Result<(), ClockError> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: setsockopt with a valid sock_fprog pointing at `prog`, which
    // outlives the call (the kernel copies the program).
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(ClockError::last_os("setsockopt(SO_ATTACH_FILTER)"));
    }
    Ok(())
}

/// Let only what can be a request reach the responder's `sock`: junk that
/// is no message at all is dropped by the kernel before it is queued, so
/// it cannot fill the queue the responder's TX stamps need. Well-formed
/// forged requests still reach it (they are refused there by the tag with
/// a key; without one they are answered).
pub(crate) fn admit_requests(sock: &UdpSocket, keyed: bool) -> Result<(), ClockError> {
    attach_filter(sock, request_filter(keyed))
}

/// Let only what can be an answer to exchange `seq` reach `sock`: the
/// kernel drops everything else before it is queued (counted in the
/// socket's drops, [`kernel_drops`]), so no flood, at any rate, can fill
/// the receive queue that TX timestamps and the answers share. Replaces
/// the filter of the previous exchange. A sender must know the sequence
/// number of the request in flight (random start, one per exchange) to
/// get a datagram queued at all: an attacker on the path can, one who
/// only spoofs the responder's address cannot.
pub(crate) fn admit_only(sock: &UdpSocket, seq: u64, keyed: bool) -> Result<(), ClockError> {
    attach_filter(sock, answer_filter(seq, keyed))
}

/// Datagrams the kernel dropped before they reached `sock` (refused by
/// its filter, or its receive queue was full): SO_MEMINFO's drop counter.
pub(crate) fn kernel_drops(sock: &UdpSocket) -> Result<u64, ClockError> {
    let mut info = [0u32; 16];
    let mut len = size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(ClockError::last_os("getsockopt(SO_MEMINFO)"));
    }
    Ok(u64::from(info[libc::SK_MEMINFO_DROPS as usize]))
}
