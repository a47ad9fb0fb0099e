//! Contract point 8: settles exactly once; events in order.

use super::*;

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
