//! Contract point 6: callbacks are thread-safe, timed, and panics are caught.

use super::*;

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
