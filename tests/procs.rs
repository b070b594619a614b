//! Child processes that are stopped when the test ends, pass or fail.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A spawned program whose stderr lines are collected; killed on drop.
pub struct Proc {
    name: String,
    child: Option<Child>,
    stderr_rx: mpsc::Receiver<String>,
    /// stderr lines read so far.
    pub stderr: Vec<String>,
}

impl Proc {
    /// Spawn `cmd` with piped stdout/stderr.
    pub fn spawn(name: &str, mut cmd: Command) -> Self {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        let err = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            name: name.to_owned(),
            child: Some(child),
            stderr_rx: rx,
            stderr: Vec::new(),
        }
    }

    /// Wait until a stderr line contains `needle`; panics with the stderr
    /// seen so far on timeout or exit.
    pub fn wait_stderr(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        if self.stderr.iter().any(|l| l.contains(needle)) {
            return;
        }
        loop {
            while let Ok(l) = self.stderr_rx.try_recv() {
                let hit = l.contains(needle);
                self.stderr.push(l);
                if hit {
                    return;
                }
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.drain();
                    panic!(
                        "{} exited ({st}) before printing {needle:?}:\n{}",
                        self.name,
                        self.stderr.join("\n")
                    );
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "{} did not print {needle:?} within {timeout:?}:\n{}",
                    self.name,
                    self.stderr.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn drain(&mut self) {
        std::thread::sleep(Duration::from_millis(50));
        while let Ok(l) = self.stderr_rx.try_recv() {
            self.stderr.push(l);
        }
    }

    /// Send `sig`, wait for exit, return status and stdout.
    pub fn stop(&mut self, sig: i32, timeout: Duration) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(child.id() as i32, sig) };
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "{} did not exit within {timeout:?} after signal {sig}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        if let Some(mut o) = child.stdout.take() {
            use std::io::Read;
            let _ = o.read_to_string(&mut out);
        }
        self.drain();
        (status, out)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run a command to completion, returning (status, stdout, stderr).
pub fn run(mut cmd: Command) -> (ExitStatus, String, String) {
    let out = cmd.output().expect("running command");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
