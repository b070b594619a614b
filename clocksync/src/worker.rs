//! A named background thread with a stop flag, stopped and joined on drop:
//! the one shape of every long-running loop here (the discipline thread,
//! the exchange responder) and in the agent and the sink.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The loop's side of the stop flag.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// True once the owner asked the loop to stop.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Ask the loop to stop.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Sleep `d`, waking every `slice` to check the flag, so a stop is
    /// prompt without frequent wakeups. Returns false if stopped meanwhile.
    pub fn sleep(&self, d: Duration, slice: Duration) -> bool {
        let mut left = d;
        while !left.is_zero() {
            if self.is_set() {
                return false;
            }
            let s = left.min(slice);
            std::thread::sleep(s);
            left -= s;
        }
        !self.is_set()
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
            while stop.sleep(Duration::from_millis(2), Duration::from_millis(1)) {
                n += 1;
            }
            n
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(10));
        assert!(w.finish().is_some());
    }
}
