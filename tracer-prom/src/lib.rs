//! The `/metrics` endpoint the agent and the sink share: a small blocking
//! HTTP/1.1 server on its own thread that encodes a
//! [`prometheus_client::registry::Registry`] at every scrape, so
//! collectors registered in it read their sources (BPF maps, counters)
//! when Prometheus asks and never in between.
//!
//! Deliberately small: one request per connection (`Connection: close`),
//! GET or HEAD only, request heads bounded in size and time, so a stuck or
//! hostile client costs one short-lived connection and never the process
//! it observes.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::registry::Registry;

/// The content type of the OpenMetrics text prometheus-client writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Longest request head read; Prometheus sends a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A label value written with the escapes the exposition formats need
/// (`\\`, `\"`, `\n`): prometheus-client 0.24 writes label values as
/// they are, and a host or interface name may hold a quote or a backslash,
/// which would break the whole scrape.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<S>(pub S);

impl<S: AsRef<str>> EncodeLabelValue for Escaped<S> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        use std::fmt::Write;
        let mut rest = self.0.as_ref();
        while let Some(i) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..i])?;
            encoder.write_str(match rest.as_bytes()[i] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[i + 1..];
        }
        encoder.write_str(rest)
    }
}

/// User plus system CPU time of this process, in seconds (getrusage):
/// the `..._cpu_seconds_total` both the agent and the sink serve.
pub fn process_cpu_seconds() -> Option<f64> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into memory we own and have
    // sized for it; RUSAGE_SELF needs nothing else.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: the struct was zeroed (a valid rusage: plain integers) and
    // getrusage succeeded, so it is initialised.
    let ru = unsafe { ru.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(ru.ru_utime) + secs(ru.ru_stime))
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listening socket could not be bound.
    #[error("listening for Prometheus scrapes on {addr}: choose a free address with --metrics ADDR:PORT")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The server thread could not be started.
    #[error("starting the /metrics thread")]
    Thread(#[source] io::Error),
}

/// A running `/metrics` endpoint; dropping it stops the server.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listen on `addr` (port 0 picks one) and serve `registry` there.
    pub fn start(addr: SocketAddr, registry: Registry) -> Result<Self, ServeError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| ServeError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| ServeError::Bind { addr, source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || serve(&listener, &registry, &flag))
            .map_err(ServeError::Thread)?;
        tracing::info!(addr = %bound, "serving Prometheus metrics at http://{bound}/metrics");
        Ok(MetricsServer {
            addr: bound,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where to connect to reach a listener bound to `addr` (an unspecified
/// address is reached through loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    a
}

fn serve(listener: &TcpListener, registry: &Registry, stop: &AtomicBool) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match conn {
            Ok(stream) => {
                if let Err(e) = answer(stream, registry) {
                    tracing::debug!(error = %e, "a /metrics client went away");
                }
            }
            // Out of fds and the like: say so, keep serving.
            Err(e) => {
                tracing::warn!(error = %e, "accepting a /metrics connection");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// The request line's method and path, once the head is complete.
fn read_request(stream: &mut TcpStream) -> io::Result<Option<(String, String)>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut words = text.lines().next().unwrap_or("").split_whitespace();
    match (words.next(), words.next()) {
        (Some(m), Some(p)) => Ok(Some((m.to_owned(), p.to_owned()))),
        _ => Ok(None),
    }
}

fn answer(mut stream: TcpStream, registry: &Registry) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let Some((method, path)) = read_request(&mut stream)? else {
        return respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            b"bad request\n",
            true,
        );
    };
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"only GET /metrics\n",
            false,
        );
    }
    // Prometheus may add a query string; the path alone decides.
    match path.split('?').next().unwrap_or("") {
        "/metrics" => {
            let mut body = String::with_capacity(16 * 1024);
            if encode(&mut body, registry).is_err() {
                return respond(
                    &mut stream,
                    "500 Internal Server Error",
                    "text/plain",
                    b"encoding the metrics failed\n",
                    head_only,
                );
            }
            respond(
                &mut stream,
                "200 OK",
                CONTENT_TYPE,
                body.as_bytes(),
                head_only,
            )
        }
        "/" => respond(
            &mut stream,
            "200 OK",
            "text/html; charset=utf-8",
            b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n",
            head_only,
        ),
        _ => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"not found: the metrics are at /metrics\n",
            head_only,
        ),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    fn server() -> (MetricsServer, Counter) {
        let mut r = Registry::default();
        let c = Counter::<u64>::default();
        r.register("nettrace_test_events", "Events seen by the test", c.clone());
        let s = MetricsServer::start("127.0.0.1:0".parse().unwrap(), r).unwrap();
        (s, c)
    }

    #[test]
    fn serves_the_registry_as_it_is_at_each_scrape() {
        let (s, c) = server();
        c.inc_by(41);
        let a = get(s.local_addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
        assert!(a.contains(CONTENT_TYPE), "{a}");
        assert!(a.contains("# TYPE nettrace_test_events counter"), "{a}");
        assert!(a.contains("nettrace_test_events_total 41\n"), "{a}");
        assert!(a.ends_with("# EOF\n"), "{a}");
        c.inc();
        let b = get(s.local_addr(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(b.contains("nettrace_test_events_total 42\n"), "{b}");
    }

    #[test]
    fn other_paths_methods_and_garbage_get_errors() {
        let (s, _) = server();
        let a = s.local_addr();
        assert!(get(a, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(a, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(a, "\r\n\r\n").starts_with("HTTP/1.1 400"));
        let head = get(a, "HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200") && !head.contains("# EOF"),
            "{head}"
        );
        // An oversized head is refused, and the server still answers.
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD * 2)
        );
        let mut st = TcpStream::connect(a).unwrap();
        let _ = st.write_all(big.as_bytes());
        let mut out = String::new();
        let _ = st.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        assert!(get(a, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn label_values_are_escaped() {
        use prometheus_client::collector::Collector;
        use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
        use prometheus_client::metrics::counter::ConstCounter;
        #[derive(Debug)]
        struct One;
        impl Collector for One {
            fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
                let mut m = e.encode_descriptor(
                    "x",
                    "X.",
                    None,
                    prometheus_client::metrics::MetricType::Counter,
                )?;
                let labels = [("host", Escaped("a\"b\\c\nd")), ("plain", Escaped("e"))];
                ConstCounter::new(1u64).encode(m.encode_family(&labels)?)
            }
        }
        let mut r = Registry::default();
        r.register_collector(Box::new(One));
        let mut s = String::new();
        encode(&mut s, &r).unwrap();
        assert!(
            s.contains("x_total{host=\"a\\\"b\\\\c\\nd\",plain=\"e\"} 1\n"),
            "{s}"
        );
    }

    #[test]
    fn a_taken_address_is_a_clear_error_and_drop_frees_it() {
        let (s, _) = server();
        let addr = s.local_addr();
        let e = MetricsServer::start(addr, Registry::default()).unwrap_err();
        assert!(e.to_string().contains("--metrics"), "{e}");
        drop(s);
        MetricsServer::start(addr, Registry::default()).unwrap();
    }
}
