//! Contract point 2: one outstanding task per lane.

use super::*;

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

#[test]
fn p2_the_permit_comes_back_on_every_path() {
    let local = Scripted::new("l");
    let h = local_only(&local);
    type Path = fn(&Task, &edgecloud::harness::RunHandle);
    let paths: [(&str, Path, RunStatus); 4] = [
        ("success", |t, _| t.complete("ok"), RunStatus::Ok),
        (
            "error",
            |t, _| t.fail(LaneErrorKind::Other, "scripted"),
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
        let e = l.error.as_ref().unwrap();
        assert_eq!(e.kind(), LaneErrorKind::Panicked);
        assert!(e.message().contains("run itself panicked"));
    }
}
