//! Contract point 4: shared ownership; dropping and shutting down.

use super::*;

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
