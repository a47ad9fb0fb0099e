//! Admission and workers: trying a lane's slot (busy? down?), and the one
//! task per admitted lane that runs its backend with every panic caught
//! and reports back. The permit travels with the work: it is moved into
//! the [`LaneJob`]; the backend drops it when the work ends, and the
//! worker drops the backend's future (panicked or not) before it reports.
//! This module must not know what the run decides.

use super::shared::{RunShared, WorkerMsg};
use crate::harness::availability::Availability;
use crate::harness::backend::{Backend, BackendError, Candidate, LaneErrorKind};
use crate::harness::decision::Admission;
use crate::harness::registry::Registry;
use crate::harness::slot::LaneSlot;
use crate::lane::{CancellationToken, Lane, LaneJob};
use crate::panic_payload::message;
use crate::reasoning::Piece;
use futures_util::FutureExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

/// What a worker needs besides its lane's slot.
pub(super) struct Spawn<'a> {
    pub(super) shared: &'a Arc<RunShared>,
    pub(super) registry: &'a Arc<Registry>,
    pub(super) handle: &'a tokio::runtime::Handle,
}

/// Tries `slot` and, when admitted, spawns the worker on `job`'s parts.
/// Returns the admission and, when started, the worker's registry id.
pub(super) fn admit(
    lane: Lane,
    slot: &Arc<LaneSlot>,
    make_job: impl FnOnce() -> LaneJob,
    cancel: &CancellationToken,
    ctx: Spawn<'_>,
) -> (Admission, Option<u64>) {
    let Some(permit) = slot.try_admit() else {
        return (Admission::Busy, None);
    };
    // Asked while holding the slot, so at most one probe runs.
    if let Availability::Down { retry_in, reason } = slot.backend.availability() {
        drop(permit);
        return (Admission::Down { retry_in, reason }, None);
    }
    let (tx, tx_reasoning) = (ctx.shared.tx.clone(), ctx.shared.tx.clone());
    let mut job = make_job()
        .with_cancel(cancel.clone())
        .with_sink(move |piece: &str| {
            let _ = tx.send(WorkerMsg::Token {
                lane,
                piece: Piece::Answer(piece.to_string()),
            });
        })
        .with_reasoning_sink(move |piece: &str| {
            let _ = tx_reasoning.send(WorkerMsg::Token {
                lane,
                piece: Piece::Reasoning(piece.to_string()),
            });
        });
    // The slot frees when both halves are gone: the job's (which the
    // backend drops when its work really ends, wherever that runs) and
    // the worker's (held until the backend's future has returned). The
    // second half keeps the promise for a backend that drops its job
    // early: an `async move` block naming only `job.cancel` captures
    // just that field (edition 2021) and drops the rest at once.
    let hold = Arc::new(permit);
    job.permit = Some(Box::new(hold.clone()));
    let guard = ctx.registry.worker_started(ctx.shared.run_id, lane);
    let worker_id = guard.id();
    let at = Instant::now();
    let shared = ctx.shared.clone();
    let slot = slot.clone();
    ctx.handle.spawn(async move {
        let cancel = job.cancel.clone();
        let started = Instant::now();
        let result = call_backend(&*slot.backend, job).await;
        drop(hold);
        let at = Instant::now();
        if matches!(&result, Ok(c) if c.finish_reason.is_complete()) {
            slot.record_latency(at - started);
        }
        shared.worker_finished(lane, result, at, cancel.is_cancelled());
        drop(guard);
    });
    (Admission::Started { at }, Some(worker_id))
}

/// Runs a backend on one job with every panic caught. The backend's future
/// (and with it the job and its permit) is dropped before this returns, so
/// the lane is free by the time the result is reported.
async fn call_backend(backend: &dyn Backend, job: LaneJob) -> Result<Candidate, BackendError> {
    let fut = match catch_unwind(AssertUnwindSafe(|| backend.run(job))) {
        Ok(f) => f,
        Err(p) => {
            return Err(BackendError::new(
                LaneErrorKind::Panicked,
                format!("backend panicked: {}", message(&*p)),
            ))
        }
    };
    let mut fut = AssertUnwindSafe(fut).catch_unwind();
    let res = (&mut fut).await;
    drop(fut);
    match res {
        Ok(r) => r,
        Err(p) => Err(BackendError::new(
            LaneErrorKind::Panicked,
            format!("backend panicked: {}", message(&*p)),
        )),
    }
}
