//! The harness: both lanes under one deadline. It admits workers to lanes,
//! runs a policy, scores and arbitrates candidates, and settles every run
//! exactly once into an [`Outcome`]. Only this module orchestrates; it does
//! not know llama.cpp or HTTP (backends do, behind [`Backend`]).
//!
//! ```text
//!  start(request)                       deadline = start + budget (fixed once)
//!      |                                                         |
//!      v                                                         v
//!  [route + plan] --try_acquire--> local slot --permit--> local worker ---+
//!      |   \                        (busy? absent, reported `busy`)        |
//!      |    +-- pre-score --> compress --try_acquire--> cloud slot         |
//!      |                                   --permit--> cloud worker ---+   |
//!      |                                                               |   |
//!      |   run task: select! { deadline | abort | worker msg |        <-+---+
//!      |                          callback done | hedge/share timer }
//!      |        each input --> decision core (pure; decides) --> effects
//!      |        tokens --(committed lane only)--> caller stream
//!      |        candidate --> scorer --> accept? / arbiter
//!      v
//!  settle (once, under the run lock): cancel the rest, report each lane,
//!  emit `run_settled`, hand back the Outcome.
//!      :
//!      :  late worker returns later -> permit dropped (lane free again),
//!      :  result discarded, `late_worker_finished` emitted (run id, overrun)
//! ```
//!
//! # The contract, and where it lives
//! 1. **One deadline**: [`Harness::start`] fixes it; every wait in a run is
//!    a `select!` against that instant (`run`).
//! 2. **One task per lane**: one-permit semaphores, `try_acquire` only; the
//!    permit is moved into the [`LaneJob`](crate::lane::LaneJob) (`slot`,
//!    `run`).
//! 3. **Late workers keep their lane**: the permit is released only when
//!    the backend's work ends; late results are counted and discarded
//!    ([`HarnessStats`], [`Event::LateWorkerFinished`]).
//! 4. **Shared ownership**: backends are `Arc`s held by their workers;
//!    dropping a [`Harness`] never blocks (its own runtime is handed to a
//!    reaper thread until late workers end); [`Harness::shutdown`] waits.
//! 5. **Cooperative cancellation**: each worker gets a token; backends are
//!    never forcibly interrupted ([`Backend`]).
//! 6. **Callbacks**: `Send + Sync + 'static` closures, off the run's task,
//!    timed, panics caught, each with a documented default (`callbacks`).
//! 7. **Diagnostics**: [`Harness::local_only`], [`Harness::cloud_only`]
//!    block and go through the same admission.
//! 8. **Settles exactly once**: [`Event::RunSettled`] once per run, after
//!    its earlier events; late-worker events after it (`observer`).
//!
//! Policies and their streaming commit points are described in
//! [`policy`](Policy); defaults in `route` ([`Route`]); scoring in
//! [`scoring`]; configuration keys in [`RouteConfig`] (the whole file:
//! `edgecloud_core::harness::HarnessConfig`).
//!
//! # Example
//! ```
//! use edgecloud_core::harness::{Backend, BackendFuture, BackendInfo, Candidate, Harness, Policy};
//! use edgecloud_core::{FinishReason, Lane, LaneJob, Request};
//!
//! /// A backend that answers at once (a stand-in for a real lane).
//! struct Echo;
//! impl Backend for Echo {
//!     fn info(&self) -> BackendInfo { BackendInfo::named("echo") }
//!     fn run(&self, job: LaneJob) -> BackendFuture {
//!         let text = job.messages.last().map(|m| m.content.clone()).unwrap_or_default();
//!         Box::pin(async move { Ok(Candidate::new(text, FinishReason::Stop)) })
//!     }
//! }
//!
//! let harness = Harness::builder().local(Echo).policy(Policy::LocalOnly).build()?;
//! let outcome = harness.run_blocking(Request::user("hello"))?;
//! assert_eq!(outcome.winner, Some(Lane::Local));
//! assert_eq!(outcome.text.as_deref(), Some("hello"));
//! # Ok::<(), edgecloud_core::harness::HarnessError>(())
//! ```

mod affinity;
mod api;
mod arbitration;
mod availability;
mod backend;
mod builder;
mod callbacks;
mod claim;
pub mod compression;
mod decision;
mod error;
mod handle;
mod instance;
mod instant;
pub mod ledger;
mod observer;
mod outcome;
mod policy;
mod queue;
mod reaper;
mod registry;
mod route;
mod route_config;
mod run;
pub mod scoring;
mod slot;
mod timer;

pub use api::{Diagnostic, Harness, PoolStats};
pub use arbitration::pick_highest;
pub use availability::{Availability, LaneHealth};
pub use backend::{
    Backend, BackendError, BackendFuture, BackendInfo, Candidate, LaneErrorKind, Timings,
    TokenCounts, TokenSignals,
};
pub use builder::{HarnessBuilder, RouteTables, StartLanes};
pub use callbacks::{
    Arbiter, CallbackKind, CallbackReport, CallbackStatus, CloudNeed, Compressed, Compressor,
    PreScore, Score, ScoreContext, Scored, Scorer,
};
pub use compression::KeepRecent;
pub use error::{ConfigError, HarnessError, Setting};
pub use handle::{AbortHandle, RunHandle, RunOptions};
pub use instance::Instance;
pub use instant::InstantBackend;
pub use ledger::{
    BudgetReport, BudgetState, CloudBudget, Cost, LedgerReport, LedgerStore, Price, PriceTable,
    Replay, RouteLedger, Spent, StoreError,
};
pub use observer::{Event, Observer};
pub use outcome::{
    CancelResult, DecidedBy, Decision, LaneReport, LaneStatus, LaneSwitch, Outcome, PromptStage,
    RunStatus,
};
pub use policy::{
    CommitMode, Policy, PolicyKind, UnknownPolicy, DEFAULT_CASCADE_THRESHOLD, DEFAULT_PRIMARY_SHARE,
};
pub use registry::{HarnessStats, RunningWorker, ShutdownReport};
pub use route::{
    Route, DEFAULT_CALLBACK_BUDGET, DEFAULT_CANCEL_GRACE, DEFAULT_DEADLINE, DEFAULT_ROUTE,
};
pub use route_config::{EscalateBelow, RouteConfig};
pub use run::AbortResult;
pub use scoring::{
    ConfidenceScorer, DefaultScorer, GenericScorer, Signal, SignalScorer, UnknownSignal,
};
