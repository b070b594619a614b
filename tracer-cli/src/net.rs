//! Addresses: where a binary listens (a unicast address of this host) and
//! where it sends (a host and a non-zero port).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use crate::text::name_problem;

/// Why `ip` cannot be listened on, if it cannot: a multicast or broadcast
/// address receives nothing a sender addresses to this host alone (a
/// socket bound there hears only group traffic, and agents send unicast).
fn not_unicast(ip: IpAddr) -> Option<&'static str> {
    let v4 = match ip {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    };
    match v4 {
        Some(a) if a.is_multicast() => Some("a multicast address"),
        Some(a) if a.is_broadcast() => Some("the broadcast address"),
        Some(_) => None,
        None if ip.is_multicast() => Some("a multicast address"),
        None => None,
    }
}

/// A UDP address to listen on, `IP:PORT` or `[IPv6]:PORT`: a unicast
/// address of this host or the unspecified one (`0.0.0.0`, `[::]`).
/// Port 0 asks the kernel for a free port (the binary logs the one bound).
pub fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = s.trim().parse().map_err(|_| {
        format!("`{s}` is not IP:PORT (e.g. 0.0.0.0:7420, 10.0.0.2:7420, [::]:7420)")
    })?;
    if let Some(what) = not_unicast(a.ip()) {
        return Err(format!(
            "{} is {what}: listen on a unicast address of this host or on 0.0.0.0",
            a.ip()
        ));
    }
    Ok(a)
}

/// A destination `IP:PORT`, `[IPv6]:PORT` or `HOST:PORT` with a port from
/// 1 to 65535; a host name is resolved now (the first address it resolves
/// to), after it was checked for control and bidirectional characters.
pub fn host_port(s: &str) -> Result<SocketAddr, String> {
    let a = match s.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => resolve(s)?,
    };
    if a.port() == 0 {
        return Err("port 0 is not a destination: give the port it listens on, 1 to 65535".into());
    }
    Ok(a)
}

fn resolve(s: &str) -> Result<SocketAddr, String> {
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err("expected HOST:PORT, e.g. 10.0.0.2:7420 or sink.lab:7420".to_owned());
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err("expected HOST:PORT with a port from 1 to 65535, e.g. sink.lab:7420".into());
    }
    // The name may end up in logs and traces: refuse one that could hide
    // or reorder text on an operator's screen before asking any resolver.
    if let Some(p) = name_problem(host) {
        return Err(format!("host name {host:?}: {p}"));
    }
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("host name {host:?} resolves to no address")),
        Err(e) => Err(format!("cannot resolve host name {host:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_unicast_and_unspecified_addresses() {
        for ok in [
            "0.0.0.0:7420",
            "127.0.0.1:0",
            "10.0.0.2:1",
            "[::]:7420",
            "[::1]:9",
        ] {
            assert!(listen_addr(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("224.0.0.1:9000", "multicast"),
            ("239.255.255.250:1900", "multicast"),
            ("255.255.255.255:9000", "broadcast"),
            ("[ff02::1]:9000", "multicast"),
            ("[::ffff:224.0.0.1]:9000", "multicast"),
            ("localhost:7420", "not IP:PORT"),
            ("0.0.0.0", "not IP:PORT"),
            ("0.0.0.0:65536", "not IP:PORT"),
        ] {
            let e = listen_addr(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn destinations_need_a_port() {
        assert_eq!(host_port("127.0.0.1:9"), Ok("127.0.0.1:9".parse().unwrap()));
        assert!(host_port("localhost:7420").unwrap().ip().is_loopback());
        for bad in ["127.0.0.1:0", "[::1]:0", "localhost:0"] {
            let e = host_port(bad).unwrap_err();
            assert!(e.contains("port 0"), "{bad}: {e}");
        }
        for bad in ["localhost", ":7420", "localhost:x", "localhost:65536"] {
            assert!(host_port(bad).unwrap_err().contains("HOST:PORT"), "{bad}");
        }
    }

    #[test]
    fn a_host_name_that_hides_text_is_refused_before_resolution() {
        let e = host_port("sink\u{202e}bal.example:7420").unwrap_err();
        assert!(e.contains("U+202E"), "{e}");
        let e = host_port("no-such-host.invalid:7420").unwrap_err();
        assert!(
            e.contains("cannot resolve host name \"no-such-host.invalid\""),
            "{e}"
        );
    }
}
