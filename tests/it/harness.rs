//! Integration tests: the harness. Contract points 1-8 of DESIGN.md, each
//! policy, streaming commit points, routes and outcomes, driven by scripted
//! backends the tests release through handles (no sleeps; deadlines that
//! are meant to pass are short, the others are a minute long).

mod cli;
mod e2e;
mod stress;

use crate::support::scripted::{Recorder, Scripted, Task, HANG};
use edgecloud::harness::{
    AbortHandle, AbortResult, Backend, BackendFuture, BackendInfo, CallbackKind, CallbackStatus,
    CancelResult, Candidate, CloudNeed, CommitMode, Compressed, DecidedBy, Event, Harness,
    HarnessBuilder, HarnessConfig, HarnessError, KeepRecent, LaneStatus, Outcome, Policy, Route,
    RunOptions, RunStatus, Score, ScoreContext, Scored, TokenCounts,
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

// ---------------------------------------------------------------- point 1

#[test]
fn p1_deadline_settles_the_run_while_workers_hang() {
    let (local, cloud) = (Scripted::slow_to_cancel("l"), Scripted::slow_to_cancel("c"));
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let run = h
        .start(with_deadline("q", SHORT), RunOptions::new())
        .unwrap();
    let deadline = run.deadline();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    assert_eq!(
        lt.deadline, deadline,
        "the local job carries the run's deadline"
    );
    assert_eq!(
        ct.deadline, deadline,
        "the cloud job carries the run's deadline"
    );
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::DeadlineExceeded);
    assert_eq!(out.winner, None);
    for lane in [Lane::Local, Lane::Cloud] {
        assert_eq!(out.lane(lane).status, LaneStatus::Late);
        assert_eq!(out.lane(lane).cancel, Some(CancelResult::StillRunning));
    }
    assert_eq!(out.late_workers, 2);
    assert!(
        lt.is_cancelled() && ct.is_cancelled(),
        "settlement cancels workers"
    );
    lt.complete("late");
    ct.complete("late");
    local.wait_idle();
    cloud.wait_idle();
}

#[test]
fn p1_escalation_gets_the_remaining_deadline_not_a_new_one() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let policy = Policy::Cascade {
        threshold: 0.5,
        local_share: 0.002, // 120 ms of the minute
    };
    let h = both(&local, &cloud, policy).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let lt = local.next_task();
    // Local never answers; at its share the cloud starts and local is
    // cancelled.
    let ct = cloud.next_task();
    assert_eq!(ct.deadline, run.deadline());
    assert_eq!(lt.deadline, run.deadline());
    ct.complete("from cloud");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(lt.is_cancelled());
    let l = out.lane(Lane::Local);
    assert_eq!(l.status, LaneStatus::Cancelled);
    assert_eq!(l.cancel, Some(CancelResult::StoppedInTime));
    assert!(out
        .lane(Lane::Cloud)
        .note
        .as_deref()
        .unwrap()
        .contains("share"));
}

/// A callback that blocks until the test releases it.
fn gate() -> (mpsc::Sender<()>, Arc<Mutex<mpsc::Receiver<()>>>) {
    let (tx, rx) = mpsc::channel();
    (tx, Arc::new(Mutex::new(rx)))
}

#[test]
fn p1_a_slow_scorer_cannot_hold_the_run_past_its_deadline() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let (release, wait) = gate();
    let h = both(&local, &cloud, Policy::LocalOnly)
        .scorer(move |_: &Candidate, _: &ScoreContext| {
            let _ = wait.lock().unwrap().recv();
            1.0
        })
        .build()
        .unwrap();
    // Long enough for the answer to arrive on a loaded machine; the run
    // then ends at the deadline because the scorer never returns.
    let run = h
        .start(with_deadline("q", ENOUGH), RunOptions::new())
        .unwrap();
    local.next_task().complete("answer");
    let out = run.wait().unwrap();
    // The answer finished in time; only its score is missing.
    assert_eq!(out.status, RunStatus::Ok);
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.lane(Lane::Local).score, None);
    let cb = &out.callbacks[0];
    assert_eq!(
        (cb.kind, cb.status),
        (CallbackKind::Score, CallbackStatus::TimedOut)
    );
    release.send(()).unwrap();
}

#[test]
fn p1_slow_compressor_and_arbiter_are_bounded_too() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let (release, wait) = gate();
    let h = both(&local, &cloud, Policy::CloudOnly)
        .compressor(move |m: &[ChatMessage]| {
            let _ = wait.lock().unwrap().recv();
            m.to_vec()
        })
        .build()
        .unwrap();
    let out = h.run_blocking(with_deadline("q", SHORT)).unwrap();
    assert_eq!(out.status, RunStatus::DeadlineExceeded);
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::NotStarted);
    assert_eq!(out.callbacks[0].status, CallbackStatus::TimedOut);
    assert!(cloud.try_task().is_none(), "the cloud never started");
    release.send(()).unwrap();

    let (release, wait) = gate();
    let h = both(&local, &cloud, Policy::BestOf)
        .arbiter(move |_: &[Scored]| {
            let _ = wait.lock().unwrap().recv();
            Some(0)
        })
        .scorer(scorer_by_text(|t| t.len() as f64))
        .build()
        .unwrap();
    let run = h
        .start(with_deadline("q", ENOUGH), RunOptions::new())
        .unwrap();
    local.next_task().complete("short");
    cloud.next_task().complete("longer answer");
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::Ok);
    assert_eq!(
        out.winner,
        Some(Lane::Cloud),
        "built-in rule: highest score"
    );
    assert_eq!(out.decision.decided_by, DecidedBy::BuiltIn);
    let arb = out
        .callbacks
        .iter()
        .find(|c| c.kind == CallbackKind::Arbitrate)
        .unwrap();
    assert_eq!(arb.status, CallbackStatus::TimedOut);
    release.send(()).unwrap();
}

// ---------------------------------------------------------------- point 2

#[test]
fn p2_a_busy_lane_is_absent_and_nothing_queues() {
    let local = Scripted::new("l");
    let rec = Recorder::new();
    let h = Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .observer(rec.clone())
        .build()
        .unwrap();
    let a = h.start(req("a"), RunOptions::new()).unwrap();
    let ta = local.next_task();
    let b = h.run_blocking(req("b")).unwrap();
    assert_eq!(b.status, RunStatus::Failed);
    assert_eq!(b.lane(Lane::Local).status, LaneStatus::Busy);
    assert!(b.error.as_deref().unwrap().contains("busy"));
    rec.wait_for(
        |e| matches!(e, Event::LaneBusy { run_id, lane: Lane::Local, .. } if *run_id == b.run_id),
    );
    assert!(!ta.is_cancelled(), "run a is untouched");
    ta.complete("a");
    assert_eq!(a.wait().unwrap().text.as_deref(), Some("a"));
    assert!(local.try_task().is_none(), "b never queued a task");
    assert_eq!(local.counters().max_outstanding, 1);
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

#[test]
fn p2_the_permit_comes_back_on_every_path() {
    let local = Scripted::new("l");
    let h = local_only(&local);
    type Path = fn(&Task, &edgecloud::harness::RunHandle);
    let paths: [(&str, Path, RunStatus); 4] = [
        ("success", |t, _| t.complete("ok"), RunStatus::Ok),
        (
            "error",
            |t, _| t.fail("boom", "scripted"),
            RunStatus::Failed,
        ),
        ("panic", |t, _| t.panic("scripted panic"), RunStatus::Failed),
        (
            "cancel",
            |_, r| assert_eq!(r.abort(), AbortResult::Accepted),
            RunStatus::Aborted,
        ),
    ];
    for (name, path, status) in paths {
        let run = h.start(req(name), RunOptions::new()).unwrap();
        let t = local.next_task();
        path(&t, &run);
        let out = run.wait().unwrap();
        assert_eq!(out.status, status, "{name}");
        assert!(
            !h.is_busy(Lane::Local),
            "{name}: permit released by settlement"
        );
        // The next run is admitted.
        let next = h.start(req("next"), RunOptions::new()).unwrap();
        local.next_task().complete("next");
        assert_eq!(next.wait().unwrap().status, RunStatus::Ok, "{name}");
    }
    let c = local.counters();
    assert_eq!((c.max_outstanding, c.overlaps), (1, 0));
}

struct PanicsInRun;
impl Backend for PanicsInRun {
    fn info(&self) -> BackendInfo {
        BackendInfo::named("panics")
    }
    fn run(&self, _job: LaneJob) -> BackendFuture {
        panic!("run itself panicked")
    }
}

/// Drops its job (and the permit in it) as soon as its future is made:
/// the `async move` block names only `job.cancel`.
struct DropsItsJobEarly;
impl Backend for DropsItsJobEarly {
    fn info(&self) -> BackendInfo {
        BackendInfo::named("drops-job")
    }
    fn run(&self, job: LaneJob) -> BackendFuture {
        Box::pin(async move {
            job.cancel.cancelled().await;
            Ok(Candidate::new("", FinishReason::Cancelled))
        })
    }
}

#[test]
fn p2_the_lane_stays_busy_while_the_backend_future_runs() {
    let rec = Recorder::new();
    let h = Harness::builder()
        .local(DropsItsJobEarly)
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .cancel_grace(HANG)
        .observer(rec.clone())
        .build()
        .unwrap();
    let a = h.start(req("a"), RunOptions::new()).unwrap();
    rec.wait_for(|e| matches!(e, Event::LaneAdmitted { run_id: 1, .. }));
    let b = h.run_blocking(req("b")).unwrap();
    assert_eq!(b.lane(Lane::Local).status, LaneStatus::Busy);
    assert_eq!(a.abort(), AbortResult::Accepted);
    let a = a.wait().unwrap();
    assert_eq!(
        a.lane(Lane::Local).cancel,
        Some(CancelResult::StoppedInTime)
    );
    assert!(!h.is_busy(Lane::Local));
}

#[test]
fn p2_a_backend_panicking_before_its_future_frees_the_lane() {
    let h = Harness::builder()
        .local(PanicsInRun)
        .policy(Policy::LocalOnly)
        .build()
        .unwrap();
    for _ in 0..2 {
        let out = h.run_blocking(req("q")).unwrap();
        assert_eq!(out.status, RunStatus::Failed);
        let l = out.lane(Lane::Local);
        assert_eq!(l.status, LaneStatus::Failed, "admitted, not busy");
        assert!(l.error.as_deref().unwrap().contains("run itself panicked"));
    }
}

// ---------------------------------------------------------------- point 3

#[test]
fn p3_a_late_worker_keeps_its_lane_until_it_returns() {
    let local = Scripted::slow_to_cancel("l");
    let rec = Recorder::new();
    let h = Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .observer(rec.clone())
        .build()
        .unwrap();
    let first = h.run_blocking(with_deadline("1", SHORT)).unwrap();
    let t1 = local.next_task();
    assert_eq!(first.status, RunStatus::DeadlineExceeded);
    assert_eq!(first.lane(Lane::Local).status, LaneStatus::Late);
    assert_eq!(h.stats().late_workers_running, 1);

    let second = h.run_blocking(req("2")).unwrap();
    assert_eq!(second.lane(Lane::Local).status, LaneStatus::Busy);

    t1.complete("too late");
    let ev = rec.wait_for(|e| matches!(e, Event::LateWorkerFinished { .. }));
    let Event::LateWorkerFinished {
        run_id,
        lane,
        returned_ok,
        ..
    } = ev
    else {
        unreachable!()
    };
    assert_eq!(
        (run_id, lane, returned_ok),
        (first.run_id, Lane::Local, true)
    );
    let s = h.stats();
    assert_eq!((s.late_workers_total, s.late_results_discarded), (1, 1));

    let third = h.start(req("3"), RunOptions::new()).unwrap();
    local.next_task().complete("three");
    assert_eq!(third.wait().unwrap().text.as_deref(), Some("three"));
    let c = local.counters();
    assert_eq!((c.max_outstanding, c.admitted_while_late), (1, 0));
}

// ---------------------------------------------------------------- point 4

#[test]
fn p4_dropping_the_harness_never_blocks_and_late_workers_finish() {
    let local = Scripted::ignoring_cancel("l");
    let h = local_only(&local);
    let out = h.run_blocking(with_deadline("q", SHORT)).unwrap();
    let t = local.next_task();
    assert_eq!(
        out.lane(Lane::Local).cancel,
        Some(CancelResult::NotPropagated)
    );
    drop(h); // must return while the worker still runs
    t.complete("after the harness is gone");
    local.wait_idle();
    let c = local.counters();
    assert_eq!(c.finished, 1);
    assert_eq!(c.completed_after_cancel, 1, "never forcibly interrupted");
}

#[test]
fn p4_a_run_in_flight_outlives_the_dropped_harness() {
    let local = Scripted::new("l");
    let h = local_only(&local);
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let t = local.next_task();
    drop(h);
    t.complete("still answered");
    let out = run.wait().unwrap();
    assert_eq!(out.text.as_deref(), Some("still answered"));
}

#[test]
fn p4_shutdown_reports_what_is_left_then_waits_for_it() {
    let local = Scripted::slow_to_cancel("l");
    let h = local_only(&local);
    let out = h.run_blocking(with_deadline("q", SHORT)).unwrap();
    let t = local.next_task();
    let report = h.shutdown_blocking(Duration::from_millis(20)).unwrap();
    assert!(!report.is_clean());
    assert_eq!(report.still_running.len(), 1);
    let w = &report.still_running[0];
    assert_eq!((w.run_id, w.lane, w.late), (out.run_id, Lane::Local, true));
    assert!(matches!(
        h.start(req("x"), RunOptions::new()),
        Err(HarnessError::ShuttingDown)
    ));
    t.complete("done");
    assert!(h.shutdown_blocking(HANG).unwrap().is_clean());
}

// ---------------------------------------------------------------- point 5

#[test]
fn p5_abort_from_another_thread_reports_what_cancellation_achieved() {
    // Local claims to observe the token but stops only when released: the
    // run waits for it (cancel grace), so both aborts land before
    // settlement.
    let (local, cloud) = (
        Scripted::slow_to_cancel("l"),
        Scripted::ignoring_cancel("c"),
    );
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    let handle: AbortHandle = run.abort_handle();
    let results = std::thread::spawn(move || (handle.abort(), handle.abort()))
        .join()
        .unwrap();
    assert_eq!(
        results,
        (AbortResult::Accepted, AbortResult::AlreadyRequested)
    );
    lt.wait_cancelled();
    lt.complete("stopped");
    let stale = run.abort_handle();
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::Aborted);
    assert_eq!(stale.abort(), AbortResult::Stale);
    let (l, c) = (out.lane(Lane::Local), out.lane(Lane::Cloud));
    assert_eq!(l.cancel, Some(CancelResult::StoppedInTime));
    assert_eq!(
        (c.status, c.cancel),
        (LaneStatus::Late, Some(CancelResult::NotPropagated))
    );
    ct.complete("ignored the token");
    cloud.wait_idle();
    assert_eq!(cloud.counters().completed_after_cancel, 1);
}

#[test]
fn p5_abort_reports_already_finished_and_still_running() {
    let (local, cloud) = (Scripted::new("l"), Scripted::slow_to_cancel("c"));
    let rec = Recorder::new();
    let h = both(&local, &cloud, Policy::BestOf)
        .cancel_grace(Duration::from_millis(1))
        .observer(rec.clone())
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("done early");
    rec.wait_for(|e| {
        matches!(
            e,
            Event::LaneFinished {
                lane: Lane::Local,
                ..
            }
        )
    });
    // best-of waits for the cloud; abort now.
    assert_eq!(run.abort(), AbortResult::Accepted);
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::Aborted);
    assert_eq!(
        out.lane(Lane::Local).cancel,
        Some(CancelResult::AlreadyFinished)
    );
    assert_eq!(
        out.lane(Lane::Cloud).cancel,
        Some(CancelResult::StillRunning)
    );
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::Late);
    ct.complete("x");
}

// ---------------------------------------------------------------- point 6

#[test]
fn p6_panicking_callbacks_use_their_defaults_and_lanes_stay_healthy() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::BestOf)
        .pre_score(|_: &Request| -> bool { panic!("pre-score boom") })
        .compressor(|_: &[ChatMessage]| -> Vec<ChatMessage> { panic!("compress boom") })
        .scorer(|_: &Candidate, _: &ScoreContext| -> f64 { panic!("score boom") })
        .arbiter(|_: &[Scored]| -> Option<usize> { panic!("arbiter boom") })
        .build()
        .unwrap();
    for round in 0..2 {
        let run = h.start(req("the question"), RunOptions::new()).unwrap();
        let lt = local.next_task();
        let ct = cloud.next_task(); // pre-score default: the cloud is needed
        assert_eq!(
            ct.prompt(),
            "the question",
            "compressor default: uncompressed"
        );
        lt.complete("local");
        ct.complete("cloud");
        let out = run.wait().unwrap();
        assert_eq!(out.status, RunStatus::Ok, "round {round}");
        // Scorer default: unscored; arbiter default: built-in rule, which
        // takes the first to finish among unscored candidates.
        assert_eq!(out.decision.decided_by, DecidedBy::BuiltIn);
        assert!(out.decision.scores.values().all(Option::is_none));
        let kinds: Vec<(CallbackKind, CallbackStatus)> =
            out.callbacks.iter().map(|c| (c.kind, c.status)).collect();
        for k in [
            CallbackKind::PreScore,
            CallbackKind::Compress,
            CallbackKind::Score,
            CallbackKind::Arbitrate,
        ] {
            assert!(
                kinds.contains(&(k, CallbackStatus::Panicked)),
                "{k:?} in {kinds:?}"
            );
        }
        assert!(out
            .callbacks
            .iter()
            .any(|c| c.detail.as_deref() == Some("score boom")));
    }
}

#[test]
fn p6_invalid_callback_answers_use_their_defaults() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::BestOf)
        .compressor(|_: &[ChatMessage]| Vec::<ChatMessage>::new())
        .scorer(|c: &Candidate, _: &ScoreContext| if c.text == "local" { f64::NAN } else { 0.5 })
        .arbiter(|_: &[Scored]| Some(7))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    assert_eq!(ct.prompt(), "q");
    lt.complete("local");
    ct.complete("cloud");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud), "scored beats unscored");
    assert_eq!(out.lane(Lane::Local).score, None);
    let invalid: Vec<CallbackKind> = out
        .callbacks
        .iter()
        .filter(|c| c.status == CallbackStatus::Invalid)
        .map(|c| c.kind)
        .collect();
    assert_eq!(invalid.len(), 3, "{invalid:?}");
}

#[test]
fn p6_callbacks_run_outside_every_lock() {
    // A scorer that aborts its own run and reads the harness's stats: with
    // any harness lock held around the callback this would deadlock.
    let local = Scripted::new("l");
    let slot: Arc<OnceLock<AbortHandle>> = Arc::new(OnceLock::new());
    let (seen_tx, seen) = mpsc::channel();
    let (s2, seen_tx) = (slot.clone(), Mutex::new(seen_tx));
    let h = Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .scorer(move |_: &Candidate, _: &ScoreContext| {
            let r = s2.get().map(AbortHandle::abort);
            seen_tx.lock().unwrap().send(r).unwrap();
            1.0
        })
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    slot.set(run.abort_handle()).unwrap();
    local.next_task().complete("answer");
    let out = run.wait().unwrap();
    assert_eq!(
        out.status,
        RunStatus::Aborted,
        "an accepted abort always wins"
    );
    assert_eq!(
        seen.recv_timeout(HANG).unwrap(),
        Some(AbortResult::Accepted)
    );
}

#[test]
fn p6_callback_time_is_reported_and_checked_against_the_budget() {
    let local = Scripted::new("l");
    let h = Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .callback_budget(Duration::ZERO)
        .scorer(|c: &Candidate, _: &ScoreContext| {
            let mut x = 0u64;
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
            (x % 2) as f64 + c.text.len() as f64
        })
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("a");
    let out = run.wait().unwrap();
    let cb = &out.callbacks[0];
    assert_eq!(cb.status, CallbackStatus::Ok);
    assert!(cb.elapsed_ms > 0.0);
    assert!(cb.over_budget, "a zero budget is always exceeded");
    assert_eq!(out.callback_ms, cb.elapsed_ms);
}

// ---------------------------------------------------------------- point 7

#[test]
fn p7_diagnostics_are_synchronous_and_go_through_admission() {
    let local = Scripted::new("l");
    let h = local_only(&local);
    let held = h.start(req("hold"), RunOptions::new()).unwrap();
    let t = local.next_task();
    assert!(matches!(
        h.local_only(req("q")),
        Err(HarnessError::LaneBusy { lane: Lane::Local })
    ));
    assert!(matches!(
        h.cloud_only(req("q")),
        Err(HarnessError::LaneNotConfigured { lane: Lane::Cloud })
    ));
    t.complete("held");
    held.wait().unwrap();

    let h2 = h.clone();
    let diag = std::thread::spawn(move || h2.local_only(req("q")));
    let mut c = Candidate::new("", FinishReason::Stop);
    c.tokens.local_prompt = Some(3);
    local.next_task().complete_with(c);
    let d = diag.join().unwrap().unwrap();
    assert_eq!(d.backend.name, "l");
    assert_eq!(d.completion.text, "", "a blank answer is still reported");
    assert_eq!(d.report.prompt_tokens, Some(3));
}

// ---------------------------------------------------------------- point 8

#[test]
fn p8_events_come_in_order_and_settlement_once() {
    let local = Scripted::slow_to_cancel("l");
    let rec = Recorder::new();
    let h = Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .observer(rec.clone())
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let t = local.next_task();
    t.token("a");
    t.complete("a");
    let ok = run.wait().unwrap();
    rec.wait_for(|e| matches!(e, Event::RunSettled { run_id, .. } if *run_id == ok.run_id));
    assert_eq!(
        rec.names(ok.run_id),
        [
            "run_started",
            "lane_admitted",
            "first_token",
            "lane_finished",
            "decision",
            "run_settled"
        ]
    );

    let late = h.run_blocking(with_deadline("q", SHORT)).unwrap();
    local.next_task().complete("late");
    rec.wait_for(
        |e| matches!(e, Event::LateWorkerFinished { run_id, .. } if *run_id == late.run_id),
    );
    assert_eq!(
        rec.names(late.run_id),
        [
            "run_started",
            "lane_admitted",
            "deadline_reached",
            "decision",
            "run_settled",
            "late_worker_finished"
        ]
    );
}

#[test]
fn p8_a_slow_or_panicking_observer_cannot_delay_a_run() {
    let local = Scripted::new("l");
    let (release, wait) = gate();
    let rec = Recorder::new();
    let h = Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .observer(move |_: &Event| {
            let _ = wait.lock().unwrap().recv_timeout(HANG);
        })
        .observer(|_: &Event| panic!("observer boom"))
        .observer(rec.clone())
        .build()
        .unwrap();
    for i in 0..3 {
        let run = h.start(req("q"), RunOptions::new()).unwrap();
        local.next_task().complete("fine");
        assert_eq!(run.wait().unwrap().status, RunStatus::Ok, "run {i}");
    }
    // The first observer is still stuck on the first event; nothing has
    // reached the recorder yet, and every run settled anyway.
    for _ in 0..64 {
        let _ = release.send(());
    }
    rec.wait_for(|e| matches!(e, Event::RunSettled { run_id: 3, .. }));
    let settled = rec
        .events()
        .iter()
        .filter(|e| matches!(e, Event::RunSettled { .. }))
        .count();
    assert_eq!(settled, 3);
}

// ---------------------------------------------------------------- policies

#[test]
fn race_first_acceptable_wins_and_the_loser_is_cancelled() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("   "); // blank: not acceptable
    ct.complete("cloud answer");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert_eq!(out.text.as_deref(), Some("cloud answer"));
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Completed);

    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("local answer");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    assert!(ct.is_cancelled());
    let c = out.lane(Lane::Cloud);
    assert_eq!(
        (c.status, c.cancel),
        (LaneStatus::Cancelled, Some(CancelResult::StoppedInTime))
    );
}

#[test]
fn race_with_both_lanes_failing_fails_and_says_why() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().fail("model", "out of memory");
    cloud.next_task().fail("connect", "refused");
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::Failed);
    let e = out.error.clone().unwrap();
    assert!(e.contains("out of memory") && e.contains("refused"), "{e}");
    assert_eq!(
        out.lane(Lane::Cloud).error.as_deref(),
        Some("connect: refused")
    );
}

#[test]
fn hedge_waits_for_its_delay_and_skips_it_when_the_primary_fails() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::hedge(Duration::from_secs(3600)))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("quick");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::NotStarted);
    assert!(cloud.try_task().is_none());

    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().fail("model", "x");
    cloud.next_task().complete("hedged");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(out
        .lane(Lane::Cloud)
        .note
        .as_deref()
        .unwrap()
        .contains("local failed"));

    // A short delay: the hedge starts while the primary still runs.
    let h = both(&local, &cloud, Policy::hedge(Duration::from_millis(1)))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let lt = local.next_task();
    cloud.next_task().complete("hedge won");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(lt.is_cancelled());
}

#[test]
fn hedge_without_a_delay_learns_it_from_the_primarys_latency() {
    // Until the primary has 8 successful jobs the hedge waits half the
    // deadline (30 s here: the test would hang); after 8 quick ones it
    // waits their p95, so the hedge starts while the primary is held.
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(
        &local,
        &cloud,
        Policy::from_kind(edgecloud::harness::PolicyKind::Hedge),
    )
    .build()
    .unwrap();
    for _ in 0..8 {
        let run = h
            .start(req("q"), RunOptions::new().policy(Policy::LocalOnly))
            .unwrap();
        local.next_task().complete("quick");
        run.wait().unwrap();
    }
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let lt = local.next_task();
    cloud.next_task().complete("hedged");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(out
        .lane(Lane::Cloud)
        .note
        .as_deref()
        .unwrap()
        .contains("hedge delay"));
    assert!(lt.is_cancelled());
}

#[test]
fn cascade_keeps_a_good_local_answer_and_escalates_a_poor_one() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::cascade(0.5))
        .scorer(scorer_by_text(|t| {
            if t.starts_with("good") {
                0.9
            } else {
                0.1
            }
        }))
        .compressor(KeepRecent::new(8))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("good local");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.decision.scores[&Lane::Local], Some(0.9));
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::NotStarted);
    assert!(cloud.try_task().is_none());

    let mut long = Request::user("the question");
    long.messages
        .insert(0, ChatMessage::user("an old turn ".repeat(50)));
    long.messages.insert(0, ChatMessage::system("be brief"));
    let run = h.start(long, RunOptions::new()).unwrap();
    local.next_task().complete("poor local");
    let ct = cloud.next_task();
    let roles: Vec<&str> = ct.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        roles,
        ["be brief", "the question"],
        "compressed for the cloud"
    );
    ct.complete("good cloud");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    let t = &out.lane(Lane::Cloud).tokens;
    assert!(t.compressor_before.unwrap() > t.compressor_after.unwrap());
    assert_eq!(out.lane(Lane::Local).text.as_deref(), Some("poor local"));
}

#[test]
fn cascade_falls_back_to_a_low_scored_local_answer_when_the_cloud_fails() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::cascade(0.5))
        .scorer(scorer_by_text(|_| 0.1))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("meh");
    cloud.next_task().fail("http_status", "503");
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::Ok);
    assert_eq!(out.winner, Some(Lane::Local));
    assert!(
        out.decision.reason.contains("no acceptable"),
        "{}",
        out.decision.reason
    );
}

#[test]
fn fallback_goes_cloud_first_and_local_when_the_cloud_fails() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::fallback()).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    cloud.next_task().complete("cloud");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::NotStarted);

    let run = h.start(req("q"), RunOptions::new()).unwrap();
    cloud.next_task().fail("connect", "offline");
    local.next_task().complete("local");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
}

#[test]
fn best_of_lets_the_arbiter_pick() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::BestOf)
        .scorer(scorer_by_text(|t| t.len() as f64))
        .arbiter(|c: &[Scored]| c.iter().position(|s| s.lane == Lane::Local))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    ct.complete("the longer cloud answer");
    lt.complete("local");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.decision.decided_by, DecidedBy::Arbiter);
    assert_eq!(out.decision.scores[&Lane::Cloud], Some(23.0));

    // Without an arbiter: the built-in rule takes the highest score.
    let h = both(&local, &cloud, Policy::BestOf)
        .scorer(scorer_by_text(|t| t.len() as f64))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("local");
    ct.complete("the longer cloud answer");
    assert_eq!(run.wait().unwrap().winner, Some(Lane::Cloud));
}

#[test]
fn the_pre_score_can_skip_the_cloud() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let rec = Recorder::new();
    let h = both(&local, &cloud, Policy::Race)
        .observer(rec.clone())
        .pre_score(|r: &Request| {
            if r.messages[0].content.starts_with("heater") {
                CloudNeed::NotNeeded
            } else {
                CloudNeed::Needed
            }
        })
        .build()
        .unwrap();
    let run = h.start(req("heater on"), RunOptions::new()).unwrap();
    rec.wait_for(|e| {
        matches!(
            e,
            Event::LaneSkipped {
                lane: Lane::Cloud,
                ..
            }
        )
    });
    local.next_task().complete("heater is on");
    let out = run.wait().unwrap();
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::Skipped);
    assert!(cloud.try_task().is_none());
}

#[test]
fn a_policy_needing_a_missing_lane_runs_with_what_there_is() {
    let local = Scripted::new("l");
    let h = Harness::builder()
        .local(local.clone())
        .policy(Policy::Race)
        .deadline(LONG)
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("only local");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    let c = out.lane(Lane::Cloud);
    assert_eq!(
        (c.status, c.note.as_deref()),
        (LaneStatus::NotStarted, Some("lane not configured"))
    );

    let out = h
        .run_blocking_with(req("q"), RunOptions::new().policy(Policy::CloudOnly))
        .unwrap();
    assert_eq!(out.status, RunStatus::Failed);
}

// ---------------------------------------------------------------- streaming

#[test]
fn race_streams_only_the_lane_that_produced_the_first_token() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let mut run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    ct.token("c1 ");
    assert_eq!(run.next_token_blocking().unwrap().as_deref(), Some("c1 "));
    // Committed to the cloud: local text must never reach the caller.
    lt.token("l1 ");
    ct.token("c2");
    ct.complete("c1 c2");
    assert_eq!(all_tokens(&mut run), ["c2"]);
    let out = run.wait().unwrap();
    assert_eq!(
        (out.winner, out.committed),
        (Some(Lane::Cloud), Some(Lane::Cloud))
    );
    assert!(out.ttft_ms.is_some());
    assert!(lt.is_cancelled());
}

#[test]
fn race_committing_on_completion_streams_the_winner_at_the_decision() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let rec = Recorder::new();
    let h = both(&local, &cloud, Policy::Race)
        .commit(CommitMode::Completion)
        .observer(rec.clone())
        .build()
        .unwrap();
    let mut run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    ct.token("cloud was first ");
    rec.wait_for(|e| {
        matches!(
            e,
            Event::FirstToken {
                lane: Lane::Cloud,
                ..
            }
        )
    });
    lt.token("local ");
    lt.token("wins");
    lt.complete("local wins");
    assert_eq!(all_tokens(&mut run), ["local ", "wins"]);
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
}

#[test]
fn cascade_never_streams_a_local_answer_that_failed_its_score() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::cascade(0.5))
        .scorer(scorer_by_text(|t| if t == "cloud" { 1.0 } else { 0.0 }))
        .build()
        .unwrap();
    let mut run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let lt = local.next_task();
    lt.token("lo");
    lt.token("cal");
    lt.complete("local");
    let ct = cloud.next_task();
    ct.token("clo");
    ct.token("ud");
    ct.complete("cloud");
    assert_eq!(all_tokens(&mut run), ["clo", "ud"]);
    assert_eq!(run.wait().unwrap().winner, Some(Lane::Cloud));
}

#[test]
fn best_of_streams_only_the_winner_and_text_that_was_never_streamed() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::BestOf)
        .scorer(scorer_by_text(|t| t.len() as f64))
        .build()
        .unwrap();
    let mut run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.token("short");
    lt.complete("short");
    ct.complete("a longer answer, never streamed");
    assert_eq!(all_tokens(&mut run), ["a longer answer, never streamed"]);
    assert_eq!(run.wait().unwrap().winner, Some(Lane::Cloud));
}

// ---------------------------------------------------------------- routes, config, outcome

#[test]
fn routes_carry_their_own_policy_deadline_and_callbacks() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race)
        .route(
            "vehicle_control",
            Route::new(Policy::LocalOnly).deadline(Duration::from_millis(200)),
        )
        .route(
            "general_qa",
            Route::new(Policy::cascade(0.5)).scorer(scorer_by_text(|_| 1.0)),
        )
        .build()
        .unwrap();
    let run = h
        .start(req("heater"), RunOptions::new().route("vehicle_control"))
        .unwrap();
    local.next_task().complete("on");
    let out = run.wait().unwrap();
    assert_eq!(
        (out.route.as_str(), out.deadline_ms),
        ("vehicle_control", 200.0)
    );
    assert_eq!(out.policy, edgecloud::harness::PolicyKind::LocalOnly);

    let run = h
        .start(req("why"), RunOptions::new().route("general_qa"))
        .unwrap();
    local.next_task().complete("because");
    let out = run.wait().unwrap();
    assert_eq!(out.decision.scores[&Lane::Local], Some(1.0));
    assert_eq!(out.deadline_ms, LONG.as_millis() as f64, "inherited");

    match h.start(req("x"), RunOptions::new().route("nope")) {
        Err(HarnessError::UnknownRoute { name, known }) => {
            assert_eq!(name, "nope");
            assert_eq!(known, ["default", "general_qa", "vehicle_control"]);
        }
        other => panic!("{other:?}"),
    }
    // A request's own deadline wins over the route's.
    let run = h
        .start(
            with_deadline("x", Duration::from_millis(1234)),
            RunOptions::new(),
        )
        .unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("x");
    drop(ct);
    assert_eq!(run.wait().unwrap().deadline_ms, 1234.0);
}

#[test]
fn config_files_define_routes_and_name_registered_callbacks() {
    let local = Scripted::new("l");
    let cfg = HarnessConfig::from_toml_str(
        r#"
        [harness]
        policy = "local-only"
        deadline_ms = 60000
        scorer = "by_len"
        default_route = "chat"

        [routes.chat]
        policy = "local-only"
        deadline_ms = 45000

        [routes.fast]
        policy = "local-only"
        deadline_ms = 150
        scorer = "none"
        "#,
    )
    .unwrap();
    let h = Harness::builder()
        .local(local.clone())
        .register_scorer("by_len", scorer_by_text(|t| t.len() as f64))
        .config(&cfg)
        .unwrap()
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("four");
    let out = run.wait().unwrap();
    assert_eq!((out.route.as_str(), out.deadline_ms), ("chat", 45000.0));
    assert_eq!(out.decision.scores[&Lane::Local], Some(4.0));
    let run = h.start(req("q"), RunOptions::new().route("fast")).unwrap();
    local.next_task().complete("four");
    let out = run.wait().unwrap();
    assert_eq!(out.decision.scores[&Lane::Local], None);

    let err = Harness::builder().config(&cfg).unwrap_err();
    assert!(err.to_string().contains("`by_len`"), "{err}");
}

#[test]
fn the_outcome_serialises_with_every_documented_field() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::BestOf).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let mut c = Candidate::new("The capital of France is Paris.", FinishReason::Stop)
        .with_logprobs(vec![-0.1, -0.2]);
    c.tokens = TokenCounts {
        local_prompt: Some(12),
        local_completion: Some(2),
        ..TokenCounts::default()
    };
    local.next_task().complete_with(c);
    let mut c = Candidate::new("Paris.", FinishReason::Stop);
    c.tokens.provider_prompt = Some(15);
    c.tokens.provider_completion = Some(3);
    cloud.next_task().complete_with(c);
    let out = run.wait().unwrap();
    let json = serde_json::to_value(&out).unwrap();
    for key in [
        "run_id",
        "policy",
        "status",
        "winner",
        "text",
        "deadline_ms",
        "elapsed_ms",
        "overshoot_ms",
        "decision",
        "lanes",
        "callbacks",
        "late_workers",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["policy"], "best-of");
    assert_eq!(json["status"], "ok");
    assert!(json["decision"]["reason"].is_string());
    assert!(json["decision"]["scores"]["local"].is_number());
    let lanes = json["lanes"].as_array().unwrap();
    for (l, name, prompt) in [(0, "local", 12), (1, "cloud", 15)] {
        assert_eq!(lanes[l]["lane"], name);
        assert_eq!(lanes[l]["status"], "completed");
        assert_eq!(lanes[l]["prompt_tokens"], prompt);
        for key in ["ttft_ms", "total_ms", "completion_tokens", "score", "error"] {
            assert!(lanes[l].get(key).is_some(), "lane {name} missing {key}");
        }
    }
    // Provider and tokenizer counts stay apart.
    assert_eq!(lanes[1]["tokens"]["provider_prompt"], 15);
    assert!(lanes[1]["tokens"]["local_prompt"].is_null());
    let back: Outcome = serde_json::from_value(json).unwrap();
    assert_eq!(back.run_id, out.run_id);
    assert_eq!(back.lanes.len(), 2);
}

#[tokio::test]
async fn the_async_api_works_inside_tokio_and_blocking_calls_refuse() {
    let local = Scripted::new("l");
    let h = local_only(&local);
    let l2 = local.clone();
    let answer = tokio::task::spawn_blocking(move || l2.next_task().complete("async"));
    let out = h.run(req("q")).await.unwrap();
    answer.await.unwrap();
    assert_eq!(out.text.as_deref(), Some("async"));
    assert!(matches!(
        h.run_blocking(req("q")),
        Err(HarnessError::BlockingInAsync)
    ));
    assert!(h.shutdown(HANG).await.is_clean());
}

#[test]
fn invalid_requests_are_refused_before_a_run_starts() {
    let h = Harness::builder().build().unwrap();
    let mut r = Request::user("q");
    r.sampling.max_tokens = 0;
    assert!(matches!(
        h.start(r, RunOptions::new()),
        Err(HarnessError::InvalidRequest(_))
    ));
    assert_eq!(h.stats().runs_started, 0);
}

#[test]
fn compressed_prompts_report_estimates_apart_from_real_counts() {
    let cloud = Scripted::new("c");
    let h = Harness::builder()
        .cloud(cloud.clone())
        .policy(Policy::CloudOnly)
        .deadline(LONG)
        .compressor(|m: &[ChatMessage]| Compressed {
            messages: m[m.len() - 1..].to_vec(),
            tokens_before: Some(100),
            tokens_after: Some(10),
        })
        .build()
        .unwrap();
    let mut r = Request::user("new");
    r.messages.insert(0, ChatMessage::user("old"));
    let run = h.start(r, RunOptions::new()).unwrap();
    let t = cloud.next_task();
    assert_eq!(t.messages.len(), 1);
    let mut c = Candidate::new("ok", FinishReason::Stop);
    c.tokens.provider_prompt = Some(9);
    t.complete_with(c);
    let out = run.wait().unwrap();
    let tk = &out.lane(Lane::Cloud).tokens;
    assert_eq!(
        (
            tk.compressor_before,
            tk.compressor_after,
            tk.provider_prompt
        ),
        (Some(100), Some(10), Some(9))
    );
    assert_eq!(out.lane(Lane::Cloud).prompt_tokens, Some(9));
    let _ = Score::new(0.0);
}
