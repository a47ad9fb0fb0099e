//! edgecloud answers one LLM request with two engines under one deadline: a
//! **local lane** running a GGUF model in-process through llama.cpp, and a
//! **cloud lane** calling any OpenAI-compatible HTTP endpoint.
//!
//! Modules:
//! - [`gguf`]: validate, inspect and generate GGUF model files.
//! - [`fetch`]: fetch real models from a package registry, verified.
//! - [`local`]: the local lane (a dedicated llama.cpp worker thread).
//! - [`cloud`]: the cloud lane (OpenAI-compatible streaming client).
//! - [`harness`]: both lanes under one deadline: admission, policies,
//!   scoring, arbitration, outcomes.
//! - [`bench`](mod@bench): benchmark runs, reports and their comparison.
//! - [`serve`]: the OpenAI-compatible HTTP front door (`edgecloud serve`).
//! - [`request`] and [`lane`]: the vocabulary every lane shares.
//! - [`millis`]: durations as milliseconds, the unit of every report.

pub mod bench;
pub mod cloud;
mod cores;
mod error_chain;
pub mod fetch;
pub mod gguf;
pub mod harness;
pub mod lane;
pub mod local;
pub mod millis;
mod panic_payload;
pub mod request;
pub mod serve;

pub use error_chain::error_chain;
pub use harness::{
    Backend, Candidate, Event, Harness, HarnessBuilder, HarnessConfig, HarnessError, Outcome,
    Policy, Route, RunOptions, RunStatus,
};
pub use lane::{CancellationToken, FinishReason, Lane, LaneJob, PerLane, TokenSink};
pub use request::{ChatMessage, InvalidRequest, Request, Role, Sampling};
