//! edgecloud's core: the vocabulary every lane and every wire format
//! shares, and the harness that runs both lanes under one deadline.
//!
//! It owns:
//! - [`request`] and [`lane`]: a request, its messages and sampling; what a
//!   lane is handed ([`lane::LaneJob`]: the deadline, the cancellation
//!   token, the lane's permit) and what it may stream back;
//! - [`reasoning`]: a reasoning model's thinking kept apart from its answer;
//! - [`answer`], [`structured`], [`tools`]: reading an answer (number,
//!   choice, vote), what an answer must be (JSON, a schema, a tool call);
//! - [`harness`]: admission, policies, the decision core, scoring,
//!   arbitration, outcomes and observers, over lanes seen only as the
//!   [`harness::Backend`] trait;
//! - small shared helpers ([`millis`], [`error_chain`](error_chain::error_chain)),
//!   and, hidden, the ones the lane crates share (`rng`, `sched`, `cores`,
//!   `panic_payload`).
//!
//! It must not know llama.cpp, an HTTP client or an HTTP server: the local
//! lane (`edgecloud-local`), the cloud lane (`edgecloud-cloud`) and the
//! front door (`edgecloud-serve`) depend on it, never the reverse
//! (`tests/it/crate_graph.rs` fails when a crate gains a dependency the
//! layering forbids). Applications use it through the `edgecloud` crate,
//! which re-exports it.

pub mod answer;
#[doc(hidden)]
pub mod cores;
#[doc(hidden)]
pub mod devices;
pub mod error_chain;
pub mod harness;
pub mod lane;
pub mod millis;
#[doc(hidden)]
pub mod panic_payload;
pub mod reasoning;
pub mod request;
#[doc(hidden)]
pub mod rng;
#[doc(hidden)]
pub mod sched;
pub mod structured;
pub mod tools;

pub use error_chain::error_chain;
pub use harness::{
    Backend, BackendError, Candidate, Event, Harness, HarnessBuilder, HarnessError, LaneErrorKind,
    LaneReport, LaneStatus, Observer, Outcome, Policy, Route, RunOptions, RunStatus,
};
pub use lane::{CancellationToken, FinishReason, Lane, LaneJob, PerLane, TokenSink};
pub use request::{ChatMessage, Consensus, InvalidRequest, Request, Role, Sampling};
pub use structured::ResponseFormat;
pub use tools::{Tool, ToolCall, ToolChoice};
