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
    /// All of stdout, once it closes.
    stdout_rx: mpsc::Receiver<Vec<u8>>,
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
        let stdout_rx = read_all(child.stdout.take().expect("piped stdout"));
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
            stdout_rx,
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
        // Bounded: a process it started may still hold its stdout.
        let out = self
            .stdout_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| {
                panic!(
                    "{} exited ({status}) but a process it started kept its stdout open",
                    self.name
                )
            });
        self.drain();
        (status, String::from_utf8_lossy(&out).into_owned())
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

/// Run a command to completion, returning (status, stdout, stderr); see
/// [`run_within`] (ten minutes: a hang fails the test instead of CI).
pub fn run(cmd: Command) -> (ExitStatus, String, String) {
    run_within(cmd, Duration::from_secs(600))
}

/// Run a command in its own process group until it exits and its output
/// closes, within `timeout`. On timeout, or when something it started
/// still holds its output, the whole group is killed and the test panics
/// with what it printed so far.
pub fn run_within(mut cmd: Command, timeout: Duration) -> (ExitStatus, String, String) {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("running command");
    let stdout = read_all(child.stdout.take().expect("piped stdout"));
    let stderr = read_all(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + timeout;
    let pgid = child.id() as i32;
    let give_up = |child: &mut Child, what: &str| -> ! {
        // SAFETY: kill on the process group we created for this command.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = child.wait();
        panic!("{cmd:?} {what} within {timeout:?}");
    };
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() > deadline {
            give_up(&mut child, "did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut collect = |rx: mpsc::Receiver<Vec<u8>>| {
        let left = deadline.saturating_duration_since(Instant::now());
        rx.recv_timeout(left.max(Duration::from_secs(2)))
            .unwrap_or_else(|_| {
                give_up(
                    &mut child,
                    &format!("exited ({status}) but a process it started kept its output open"),
                )
            })
    };
    let (out, err) = (collect(stdout), collect(stderr));
    (
        status,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// Everything `r` gives until it closes, read on a thread of its own.
fn read_all(mut r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx
}
