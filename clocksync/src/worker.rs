//! A named background thread with a stop flag, stopped and joined on drop:
//! the one shape of every long-running loop here (the discipline thread,
//! the exchange responder) and in the agent and the sink.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The loop's side of the stop flag.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<StopInner>);

#[derive(Debug, Default)]
struct StopInner {
    set: AtomicBool,
    /// What [`StopFlag::wait`] sleeps on: a stop wakes it at once, so a
    /// loop that waits long between rounds wakes once per round (a wakeup
    /// costs the host tens of microseconds, more than the round's work).
    lock: Mutex<()>,
    woken: Condvar,
}

impl StopFlag {
    /// True once the owner asked the loop to stop.
    pub fn is_set(&self) -> bool {
        self.0.set.load(Ordering::Acquire)
    }

    /// Ask the loop to stop, waking it if it waits.
    pub fn set(&self) {
        self.0.set.store(true, Ordering::Release);
        // Under the lock: a waiter between its check of the flag and its
        // sleep holds it, so the notification cannot fall in between.
        let _g = self.0.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.0.woken.notify_all();
    }

    /// Sleep `d`, or less if the flag is set meanwhile: one wakeup, however
    /// long `d`. Returns false if stopped.
    pub fn wait(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut g = self.0.lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.is_set() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            g = match self.0.woken.wait_timeout(g, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

/// A running thread that returns a `T`. Dropping it stops and joins it.
#[derive(Debug)]
pub struct Worker<T> {
    stop: StopFlag,
    handle: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Worker<T> {
    /// Start `body` on a thread named `name`; it should return soon after
    /// its [`StopFlag`] is set.
    pub fn spawn(
        name: &str,
        body: impl FnOnce(StopFlag) -> T + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = StopFlag::default();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(flag))?;
        Ok(Worker {
            stop,
            handle: Some(handle),
        })
    }

    /// The stop flag (to stop several workers at once before joining).
    pub fn stop_flag(&self) -> &StopFlag {
        &self.stop
    }

    /// Stop the thread and wait for its result (`None` if it panicked).
    pub fn finish(mut self) -> Option<T> {
        self.stop.set();
        self.handle.take().and_then(|h| h.join().ok())
    }
}

impl<T> Drop for Worker<T> {
    fn drop(&mut self) {
        self.stop.set();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_stops_and_joins() {
        let seen = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&seen);
        let w = Worker::spawn("t", move |stop| {
            while !stop.is_set() {
                std::thread::sleep(Duration::from_millis(1));
            }
            s.store(true, Ordering::Relaxed);
        })
        .unwrap();
        drop(w);
        // Joined: the body has finished by now.
        assert!(seen.load(Ordering::Relaxed));
    }

    #[test]
    fn finish_returns_the_result() {
        let w = Worker::spawn("t", |stop| {
            let mut n = 0u32;
            while stop.wait(Duration::from_millis(2)) {
                n += 1;
            }
            n
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(10));
        assert!(w.finish().is_some());
    }

    #[test]
    fn a_stop_ends_a_long_wait() {
        // A loop waiting an hour between rounds still stops when asked:
        // the stop wakes it rather than a periodic check. (The channel's
        // timeout makes a broken wake fail the test instead of hanging it.)
        let stop = StopFlag::default();
        let flag = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || tx.send(flag.wait(Duration::from_secs(3600))));
        std::thread::sleep(Duration::from_millis(20));
        stop.set();
        let finished = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the stop woke the waiting thread");
        assert!(!finished, "the wait reports the stop");
        t.join().unwrap().unwrap();
        // Set before the wait starts: it returns at once.
        assert!(!stop.wait(Duration::from_secs(3600)));
        // Not set: the whole wait, then true.
        assert!(StopFlag::default().wait(Duration::from_millis(1)));
    }
}
