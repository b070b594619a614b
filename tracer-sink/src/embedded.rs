//! A sink inside another program: `tracer-agent --write DIR` traces one
//! host with one program, as `trace-cmd record` does, and its files come
//! from this very sink (receive path, reorder window, writer, rotation,
//! statistics and loss accounting), run on a thread of its own and fed
//! over a loopback UDP port, so that nothing about a file depends on
//! whether a remote sink or the agent itself wrote it.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::config::{prepare_output_dir, SinkConfig};
use crate::error::SinkError;
use crate::socket::{bind_udp, DEFAULT_RCVBUF};
use crate::stats::SinkStats;

/// A running sink on a loopback port; [`EmbeddedSink::finish`] stops it
/// after it has written every event it accepted.
pub struct EmbeddedSink {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<SinkStats, SinkError>>>,
}

impl EmbeddedSink {
    /// Check `config`, prepare its output directory, bind a port on
    /// 127.0.0.1 of this network namespace and start receiving.
    pub fn start(config: SinkConfig) -> Result<Self, SinkError> {
        config.validate()?;
        if config.files {
            prepare_output_dir(&config.output_dir)?;
        }
        let io = |what: &str, source| SinkError::Io {
            what: what.to_owned(),
            source,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| io("cannot start the embedded sink's runtime", e))?;
        let (socket, _) = {
            let _guard = rt.enter();
            bind_udp(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), DEFAULT_RCVBUF)?
        };
        let addr = socket
            .local_addr()
            .map_err(|e| io("cannot read the embedded sink's port", e))?;
        loopback_reaches(addr)?;
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("embedded-sink".into())
            .spawn(move || {
                rt.block_on(crate::service::run(socket, config, async {
                    // A dropped sender stops it too.
                    let _ = stopped.await;
                }))
            })
            .map_err(|e| io("cannot start the embedded sink's thread", e))?;
        Ok(EmbeddedSink {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where to send: the loopback port it receives on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop receiving, write what was accepted, close the file; its final
    /// statistics.
    pub fn finish(mut self) -> Result<SinkStats, SinkError> {
        self.stop_and_join()
            .unwrap_or_else(|| Err(SinkError::Writer("finished twice".into())))
    }

    fn stop_and_join(&mut self) -> Option<Result<SinkStats, SinkError>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let thread = self.thread.take()?;
        Some(thread.join().unwrap_or_else(|_| {
            Err(SinkError::Writer(
                "the embedded sink's thread panicked".into(),
            ))
        }))
    }
}

impl Drop for EmbeddedSink {
    /// An agent that fails after starting it still closes its file.
    fn drop(&mut self) {
        if let Some(Err(e)) = self.stop_and_join() {
            tracing::error!(error = %e, "the embedded sink failed");
        }
    }
}

/// Whether datagrams to `addr` can leave: a network namespace made with
/// `ip netns add` starts with its loopback down, and then every datagram
/// would be lost. Connecting a UDP socket looks the route up.
fn loopback_reaches(addr: SocketAddr) -> Result<(), SinkError> {
    let probe = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|s| s.connect(addr));
    probe.map_err(|source| SinkError::Io {
        what: format!(
            "the embedded sink's loopback port {addr} is unreachable: bring the loopback \
             interface of this network namespace up (`ip link set lo up`)"
        ),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn starts_on_loopback_writes_a_file_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let sink = EmbeddedSink::start(SinkConfig {
            reorder_window: Duration::ZERO,
            ..SinkConfig::new(dir.path())
        })
        .unwrap();
        assert!(sink.addr().ip().is_loopback());
        assert_ne!(sink.addr().port(), 0);
        // Garbage is counted, not fatal.
        let s = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        s.send_to(b"not a nettrace datagram", sink.addr()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let stats = sink.finish().unwrap();
        assert_eq!(stats.datagrams_received, 1, "{stats:?}");
        assert_eq!(stats.events_written, 0);
    }

    #[test]
    fn no_files_and_no_live_output_is_refused() {
        let e = EmbeddedSink::start(SinkConfig {
            files: false,
            ..SinkConfig::new("")
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains("no output"), "{e}");
    }

    #[test]
    fn a_bad_output_directory_is_refused_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = EmbeddedSink::start(SinkConfig::new(&file)).err().unwrap();
        assert!(matches!(e, SinkError::OutputDir { .. }), "{e}");
    }
}
