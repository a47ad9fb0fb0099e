//! Integration tests: the harness. Contract points 1-8 of docs/DESIGN.md, each
//! policy, streaming commit points, routes and outcomes, driven by scripted
//! backends the tests release through handles (no sleeps; deadlines that
//! are meant to pass are short, the others are a minute long).

mod admission;
mod callbacks;
mod cancellation;
mod cli;
mod deadline;
mod diagnostics;
mod e2e;
mod events;
mod late_workers;
mod ownership;
mod policies;
mod pool;
mod routes;
mod streaming;
mod stress;

use crate::support::scripted::{Recorder, Scripted, Task, HANG};
use edgecloud::harness::{
    AbortHandle, AbortResult, Backend, BackendFuture, BackendInfo, CallbackKind, CallbackStatus,
    CancelResult, Candidate, CloudNeed, CommitMode, Compressed, DecidedBy, Event, Harness,
    HarnessBuilder, HarnessConfig, HarnessError, KeepRecent, LaneErrorKind, LaneStatus, Outcome,
    Policy, Route, RunOptions, RunStatus, Score, ScoreContext, Scored, TokenCounts,
};
use edgecloud::{ChatMessage, FinishReason, Lane, LaneJob, Request};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(100);
/// A deadline that is meant to pass, but only after the test has released
/// its tasks.
const ENOUGH: Duration = Duration::from_millis(1500);

/// Both lanes, a long deadline, and a cancel grace long enough that a
/// cooperative worker always stops "in time".
fn both(local: &Scripted, cloud: &Scripted, policy: Policy) -> HarnessBuilder {
    Harness::builder()
        .local(local.clone())
        .cloud(cloud.clone())
        .policy(policy)
        .deadline(LONG)
        .cancel_grace(HANG)
}

fn req(text: &str) -> Request {
    Request::user(text)
}

fn with_deadline(text: &str, d: Duration) -> Request {
    let mut r = Request::user(text);
    r.deadline = Some(d);
    r
}

fn scorer_by_text(f: fn(&str) -> f64) -> impl Fn(&Candidate, &ScoreContext) -> f64 {
    move |c: &Candidate, _: &ScoreContext| f(&c.text)
}

fn all_tokens(run: &mut edgecloud::harness::RunHandle) -> Vec<String> {
    let mut v = Vec::new();
    while let Some(t) = run.next_token_blocking().expect("not in async") {
        v.push(t);
    }
    v
}

/// A callback that blocks until the test releases it.
fn gate() -> (mpsc::Sender<()>, Arc<Mutex<mpsc::Receiver<()>>>) {
    let (tx, rx) = mpsc::channel();
    (tx, Arc::new(Mutex::new(rx)))
}

fn local_only(local: &Scripted) -> Harness {
    Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .cancel_grace(HANG)
        .build()
        .unwrap()
}
