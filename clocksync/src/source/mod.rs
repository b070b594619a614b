//! Clock sources. [`traits`] is the interface alone; one file per source
//! ([`system`], [`phc`], [`sim`], [`exchange`]) with their helpers
//! ([`inject`], [`realtime`]); [`oscillator`] simulates a separate
//! machine's clock for tests; [`spec`] is the one place that knows every
//! source (parse a command-line name, open it).

pub mod exchange;
pub mod inject;
pub mod oscillator;
pub mod phc;
pub mod realtime;
pub mod sim;
pub mod spec;
pub mod system;
pub mod traits;

pub use inject::ErrorInjection;
pub use oscillator::{OnOscillator, Oscillator, OscillatorSpec};
pub use realtime::{RealtimeMonoTracker, RealtimeToMono};
pub use spec::{SourceOptions, SourceSpec};
pub use system::SystemClock;
pub use traits::{Clock, OffsetSample, ReferenceClock, DEFAULT_READS};
