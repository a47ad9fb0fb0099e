//! The state every request handler shares: the engine, metrics, limits and
//! the server's shutdown flags. Data only; it must not handle requests.

use super::engine::Engine;
use super::metrics::Metrics;
use super::wire::Limits;
use super::BearerToken;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

/// Everything a request handler needs, shared by all connections.
pub(crate) struct App {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) token: Option<BearerToken>,
    pub(crate) max_body_bytes: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) limits: Limits,
    pub(crate) retry_after_secs: u64,
    pub(crate) created: u64,
    pub(crate) shutting_down: AtomicBool,
    pub(crate) connections: AtomicUsize,
}
