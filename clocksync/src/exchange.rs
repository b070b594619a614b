//! Two-way exchange (stub).
use crate::clock::{ErrorInjection, OffsetSample, ReferenceClock};
use crate::error::ClockError;
/// Config.
#[derive(Debug, Clone, Default)]
pub struct ExchangeConfig {
    /// inj
    pub injection: Option<ErrorInjection>,
    /// burst
    pub burst: usize,
}
/// Client.
#[derive(Debug)]
pub struct ExchangeClient;
impl ExchangeClient {
    /// connect
    pub fn connect(_a: std::net::SocketAddr, _c: ExchangeConfig) -> Result<Self, ClockError> {
        Ok(ExchangeClient)
    }
}
impl ReferenceClock for ExchangeClient {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        Err(ClockError::Timeout("x".into()))
    }
}
impl crate::clock::Clock for ExchangeClient {
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        Ok(0)
    }
    fn name(&self) -> String {
        "x".into()
    }
}
