//! What every binding of edgecloud shares (the C ABI, `capi`, and the
//! Python package), so that a binding is a thin skin over the one
//! [`Harness`] (docs/DESIGN.md point 15): the same settings, policies,
//! deadline, late-worker rule and outcome JSON in every language.
//!
//! - Settings ([`settings`]): a configuration from TOML
//!   text or a JSON-like value with the same keys, and [`Overrides`] that
//!   win over it as the CLI's flags do (the CLI goes through them too);
//!   a model given in any form `-m` takes ([`resolve_model`]).
//! - [`Embedded`]: a started harness plus what a binding needs beside it
//!   (its route names and configured policy parameters), built once with
//!   optional user [`Callbacks`].
//! - Requests ([`request_from_json`]): serve's wire JSON
//!   (`POST /v1/chat/completions` bodies, `model` optional, the `edgecloud`
//!   extension object for policy and deadline), through the one validator.
//! - Results: the outcome as the JSON of `edgecloud run --json`
//!   ([`outcome_json`]), a streamed run as the deltas serve streams
//!   ([`DeltaStream`]: text pieces, then the winner's tool calls), and
//!   errors as one small [`ErrorKind`] that C statuses and Python exception
//!   classes both map from.
//!
//! What it must not do: decide anything about a run (the harness does),
//! print, or hold a language's types (the bindings own those).
//!
//! Feature: `embed` needs both lanes (`local` and `cloud`) and `serve`
//! (its request reader).
//!
//! ```no_run
//! use edgecloud::bindings::{self, Callbacks, Embedded, Overrides};
//! # fn main() -> Result<(), edgecloud::bindings::Error> {
//! let mut cfg = bindings::config_from_toml("[harness]\npolicy = \"local-only\"\n")?;
//! let mut overrides = Overrides::default();
//! overrides.model = Some("models/tiny.gguf".into()); // or "hf:..." / "ollama:..."
//! overrides.apply(&mut cfg)?;
//! let embedded = Embedded::start(&cfg, Callbacks::default())?;
//! let outcome = embedded.run(r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":8}"#)?;
//! println!("{}", bindings::outcome_json(&outcome));
//! # Ok(())
//! # }
//! ```

mod error;
mod request;
pub mod settings;
mod stream;

pub use error::{Error, ErrorKind};
pub use request::{request_from_json, Prepared, DEFAULT_MODEL, MAX_DEADLINE};
pub use settings::{
    config_from_toml, config_from_value, openai_base_url, resolve_model, Overrides, SettingsError,
};
pub use stream::{delta_json, tool_call_deltas, DeltaStream};

use crate::harness::{
    Arbiter, Candidate, Compressor, Harness, HarnessConfig, Outcome, Policy, RunHandle,
    ScoreContext, Scored, Scorer,
};
use crate::request::ChatMessage;
use std::sync::Arc;

/// The name user callbacks are registered under, so a configuration can
/// name them (`scorer = "user"`, `arbiter = "user"`, `compressor =
/// "user"`) on a route; they are also the harness's defaults.
pub const USER_CALLBACK: &str = "user";

/// A binding's callbacks (each optional). Called on edgecloud's threads
/// (tokio's blocking pool of the harness's runtime), timed, panics caught,
/// each with the harness's documented default (see
/// [`Scorer`] and
/// [`Arbiter`]).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Callbacks {
    /// Rates each finished candidate.
    pub scorer: Option<Arc<dyn Scorer>>,
    /// Picks the winner among scored candidates.
    pub arbiter: Option<Arc<dyn Arbiter>>,
    /// Shrinks what is sent to the cloud lane.
    pub compressor: Option<Arc<dyn Compressor>>,
}

impl std::fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callbacks")
            .field("scorer", &self.scorer.is_some())
            .field("arbiter", &self.arbiter.is_some())
            .field("compressor", &self.compressor.is_some())
            .finish()
    }
}

/// A started harness, as a binding holds it. Cheap to share behind an
/// `Arc`; usable from any thread.
#[derive(Debug, Clone)]
pub struct Embedded {
    harness: Harness,
    routes: Vec<String>,
    presets: Vec<Policy>,
}

impl Embedded {
    /// Resolves the local model reference, starts the configured lanes
    /// (`[pool] parallel` instances, default 1; loading the model blocks)
    /// and builds the harness with `callbacks`.
    pub fn start(cfg: &HarnessConfig, callbacks: Callbacks) -> Result<Self, Error> {
        let mut cfg = cfg.clone();
        if cfg.local.is_none() && cfg.cloud.is_none() {
            return Err(Error::new(
                ErrorKind::Config,
                "no lane configured: give a local model ([local] model) or a cloud lane \
                 ([cloud] base_url and model)",
            ));
        }
        if let Some(local) = cfg.local.as_mut() {
            resolve_model(local)?;
        }
        let mut builder = Harness::builder();
        if let Some(s) = callbacks.scorer {
            let named = s.clone();
            builder = builder
                .scorer(move |c: &Candidate, ctx: &ScoreContext| s.score(c, ctx))
                .register_scorer(USER_CALLBACK, move |c: &Candidate, ctx: &ScoreContext| {
                    named.score(c, ctx)
                });
        }
        if let Some(a) = callbacks.arbiter {
            let named = a.clone();
            builder = builder
                .arbiter(move |c: &[Scored]| a.pick(c))
                .register_arbiter(USER_CALLBACK, move |c: &[Scored]| named.pick(c));
        }
        if let Some(c) = callbacks.compressor {
            let named = c.clone();
            builder = builder
                .compressor(move |m: &[ChatMessage]| c.compress(m))
                .register_compressor(USER_CALLBACK, move |m: &[ChatMessage]| named.compress(m));
        }
        let presets = cfg
            .harness
            .resolved_policy("harness")?
            .into_iter()
            .collect();
        let harness = builder
            .config(&cfg)?
            .instances(cfg.pool.parallel.unwrap_or(1))
            .lanes_from(&cfg)?
            .build()?;
        Ok(Self {
            routes: harness.routes(),
            harness,
            presets,
        })
    }

    /// A harness built in Rust (with backends of its own: a custom lane,
    /// a scripted stand-in) behind the JSON layer, for a binding to hand
    /// out as it hands out a configured one. Its requests use its routes;
    /// a policy named in a request is one of the named presets.
    pub fn from_harness(harness: Harness) -> Self {
        Self {
            routes: harness.routes(),
            harness,
            presets: Vec::new(),
        }
    }

    /// The harness itself, for everything else it offers.
    pub fn harness(&self) -> &Harness {
        &self.harness
    }

    /// Reads a request ([`request_from_json`]) against this harness's
    /// routes and configured policies.
    pub fn prepare(&self, json: &str) -> Result<Prepared, Error> {
        request_from_json(json, &self.routes, &self.presets)
    }

    /// Runs a JSON request and blocks until its outcome. A run that starts
    /// always gives an outcome, failed or not ([`ErrorKind::of_outcome`]
    /// classes it); the error is for a run that could not start.
    pub fn run(&self, json: &str) -> Result<Outcome, Error> {
        let p = self.prepare(json)?;
        Ok(self.harness.run_blocking_with(p.request, p.options)?)
    }

    /// Starts a JSON request and returns at once; with `stream`, the
    /// committed lane's text comes through
    /// [`RunHandle::next_token`](crate::harness::RunHandle::next_token).
    pub fn start_run(&self, json: &str, stream: bool) -> Result<RunHandle, Error> {
        let p = self.prepare(json)?;
        let options = if stream {
            p.options.stream()
        } else {
            p.options
        };
        Ok(self.harness.start(p.request, options)?)
    }
}

/// The outcome as one line of JSON: exactly what `edgecloud run --json`
/// prints (`status`, `winner`, `text`, `decision`, one report per lane,
/// the callbacks' reports, timings).
pub fn outcome_json(outcome: &Outcome) -> String {
    serde_json::to_string(outcome).expect("an outcome always serializes (plain data)")
}
