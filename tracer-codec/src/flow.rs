//! A TCP flow as typed addresses, what the TX and RX events' address
//! fields (in the wire convention) read back as.

use std::net::IpAddr;

/// A TCP flow as the local host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// Local address.
    pub saddr: IpAddr,
    /// Remote address.
    pub daddr: IpAddr,
    /// Local port (host order).
    pub sport: u16,
    /// Remote port (host order).
    pub dport: u16,
}
