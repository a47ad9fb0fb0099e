//! Contract point 5: cooperative cancellation and abort.

use super::*;

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
