//! Adapters from the real lanes to [`Backend`](super::Backend): they
//! translate one lane's completion and error types into
//! [`Candidate`](super::Candidate) and [`BackendError`](super::BackendError),
//! and nothing more (no policy, no retries, no timing of their own). Each
//! lane's adapter is compiled with its cargo feature.

#[cfg(feature = "cloud")]
mod cloud;
#[cfg(feature = "local")]
mod local;

#[cfg(feature = "cloud")]
pub use cloud::{candidate_from_cloud, CloudBackend};
#[cfg(feature = "local")]
pub use local::{candidate_from_local, LocalBackend};
