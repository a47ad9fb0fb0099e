//! Contract point 3: late workers keep their lane.

use super::*;

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
