//! Contract point 1: one deadline.

use super::*;

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
    for lane in Lane::ALL {
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
