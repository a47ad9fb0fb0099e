//! The stress test: thousands of randomised runs from several threads
//! (random latencies, deadlines, policies, streaming, aborts, callback
//! panics) against one harness, checked from counters inside the backends
//! and from the observer's view of every run.

use crate::support::scripted::{Auto, AutoEnd, Recorder, Scripted, HANG};
use edgecloud::harness::{
    AbortResult, Candidate, CommitMode, Event, Harness, Outcome, Policy, RunOptions, RunStatus,
    ScoreContext, Scored,
};
use edgecloud::{Lane, Request};
use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

const THREADS: u64 = 4;
const RUNS_PER_THREAD: u64 = 600;

/// splitmix64: a tiny, good-enough PRNG; tests must not depend on a crate.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = mix(self.0);
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn script(seed: u64) -> impl Fn(u64) -> Auto + Send + Sync + 'static {
    move |index| {
        let mut r = Rng(mix(seed ^ index));
        Auto {
            delay: Duration::from_micros(r.below(8_000)),
            tokens: r.below(4) as u32,
            end: match r.below(100) {
                0..=84 => AutoEnd::Complete(format!("answer {index}")),
                85..=94 => AutoEnd::Fail,
                _ => AutoEnd::Panic,
            },
            honour_cancel: r.chance(80),
        }
    }
}

fn policy(r: &mut Rng) -> Policy {
    match r.below(7) {
        0 => Policy::LocalOnly,
        1 => Policy::CloudOnly,
        2 => Policy::Race,
        3 => Policy::Hedge {
            primary: if r.chance(50) {
                Lane::Local
            } else {
                Lane::Cloud
            },
            delay: Some(Duration::from_micros(r.below(5_000))),
        },
        4 => Policy::Cascade {
            threshold: (r.below(100) as f64) / 100.0,
            local_share: (1 + r.below(100)) as f64 / 100.0,
        },
        5 => Policy::Fallback {
            cloud_share: (1 + r.below(100)) as f64 / 100.0,
        },
        _ => Policy::BestOf,
    }
}

/// Checks that hold for every outcome, whatever happened.
fn check_outcome(o: &Outcome) {
    assert_eq!(o.lanes.len(), 2);
    assert_eq!(o.status == RunStatus::Ok, o.winner.is_some(), "{o:#?}");
    assert_eq!(o.winner.is_some(), o.text.is_some());
    if let Some(w) = o.winner {
        let r = o.lane(w);
        assert!(r.started_ms.is_some(), "a winner was admitted");
        assert!(o.completion.as_ref().unwrap().finish_reason.is_complete());
    }
    for r in &o.lanes {
        use edgecloud::harness::LaneStatus::*;
        match r.status {
            NotStarted | Busy | Unavailable | Skipped => assert!(r.started_ms.is_none(), "{r:#?}"),
            Completed | Failed | Cancelled => assert!(r.total_ms.is_some(), "{r:#?}"),
            Late => assert!(r.total_ms.is_none(), "{r:#?}"),
        }
    }
    let late = o
        .lanes
        .iter()
        .filter(|r| r.status == edgecloud::harness::LaneStatus::Late)
        .count();
    assert_eq!(late as u32, o.late_workers);
}

#[test]
fn thousands_of_random_runs_keep_every_promise() {
    let local = Scripted::auto("stress-local", script(1));
    let cloud = Scripted::auto("stress-cloud", script(2));
    let rec = Recorder::new();
    let h = Harness::builder()
        .local(local.clone())
        .cloud(cloud.clone())
        .observer(rec.clone())
        .worker_threads(2)
        .scorer(|c: &Candidate, _: &ScoreContext| {
            let h =
                mix(c.text.len() as u64 ^ c.text.as_bytes().first().copied().unwrap_or(0) as u64);
            if h.is_multiple_of(20) {
                panic!("scorer panic");
            }
            (h % 100) as f64 / 100.0
        })
        .pre_score(|r: &Request| {
            let h = mix(r.messages[0].content.len() as u64);
            assert!(!h.is_multiple_of(25), "pre-score panic");
            !h.is_multiple_of(5)
        })
        .arbiter(|c: &[Scored]| {
            let h = mix(c.len() as u64 ^ c[0].candidate.text.len() as u64);
            assert!(!h.is_multiple_of(10), "arbiter panic");
            Some((h % c.len() as u64) as usize)
        })
        .build()
        .unwrap();

    // Aborts come from a thread of their own, at random moments.
    let (abort_tx, abort_rx) = mpsc::channel::<(edgecloud::harness::AbortHandle, u64)>();
    let aborter = std::thread::spawn(move || {
        let mut results = HashMap::new();
        for (handle, spin) in abort_rx {
            for _ in 0..spin {
                std::hint::spin_loop();
            }
            results.insert(handle.run_id(), handle.abort());
        }
        results
    });

    let drivers: Vec<_> = (0..THREADS)
        .map(|t| {
            let h = h.clone();
            let abort_tx = abort_tx.clone();
            std::thread::spawn(move || {
                let mut r = Rng(mix(100 + t));
                let mut outcomes = Vec::new();
                for i in 0..RUNS_PER_THREAD {
                    let mut req = Request::user("x".repeat(1 + r.below(40) as usize));
                    req.deadline = Some(Duration::from_micros(500 + r.below(15_000)));
                    let mut opts = RunOptions::new().policy(policy(&mut r));
                    if r.chance(30) {
                        opts = opts.stream();
                        if r.chance(50) {
                            opts = opts.commit(CommitMode::Completion);
                        }
                    }
                    let mut run = h.start(req, opts).unwrap();
                    if r.chance(20) {
                        abort_tx
                            .send((run.abort_handle(), r.below(200_000)))
                            .unwrap();
                    }
                    let mut streamed = String::new();
                    while let Some(piece) = run.next_token_blocking().unwrap() {
                        streamed.push_str(&piece);
                    }
                    let o = run.wait().unwrap();
                    check_outcome(&o);
                    // Back off while both lanes are held, so that most runs
                    // get a lane instead of failing fast in a tight loop.
                    let since = std::time::Instant::now();
                    while h.is_busy(Lane::Local) && h.is_busy(Lane::Cloud) {
                        assert!(since.elapsed() < HANG, "lanes never freed");
                        std::thread::yield_now();
                    }
                    if o.status == RunStatus::Ok && o.committed.is_some() {
                        assert_eq!(Some(streamed.as_str()), o.text.as_deref(), "run {t}/{i}");
                    }
                    outcomes.push(o);
                }
                outcomes
            })
        })
        .collect();
    drop(abort_tx);
    let outcomes: Vec<Outcome> = drivers
        .into_iter()
        .flat_map(|d| d.join().expect("driver thread"))
        .collect();
    let aborts = aborter.join().unwrap();

    let total = THREADS * RUNS_PER_THREAD;
    assert_eq!(outcomes.len() as u64, total);

    // An accepted abort always ends the run `aborted`; a stale one never
    // touched it.
    for o in &outcomes {
        match aborts.get(&o.run_id) {
            Some(AbortResult::Accepted) => assert_eq!(o.status, RunStatus::Aborted),
            _ => assert_ne!(o.status, RunStatus::Aborted),
        }
    }

    // Late workers all come back; then the books balance.
    let report = h.shutdown_blocking(HANG).unwrap();
    assert!(report.is_clean(), "{report:?}");
    let s = h.stats();
    assert_eq!((s.runs_started, s.runs_settled), (total, total));
    assert_eq!(s.late_workers_total, s.late_results_discarded);

    // From inside the backends: never two tasks on one lane, never a task
    // admitted while a late one held the lane.
    for b in [&local, &cloud] {
        let c = b.counters();
        assert_eq!(c.max_outstanding, 1, "{c:?}");
        assert_eq!((c.overlaps, c.admitted_while_late), (0, 0), "{c:?}");
        assert_eq!(c.started, c.finished);
    }

    // Observers: every run settled exactly once, after its earlier events,
    // with late-worker events after it.
    let late_total = s.late_workers_total as usize;
    let events = rec.wait_all(|ev| {
        let settled = ev
            .iter()
            .filter(|e| matches!(e, Event::RunSettled { .. }))
            .count();
        let late = ev
            .iter()
            .filter(|e| matches!(e, Event::LateWorkerFinished { .. }))
            .count();
        settled as u64 == total && late == late_total
    });
    let mut per_run: HashMap<u64, Vec<&'static str>> = HashMap::new();
    for e in &events {
        per_run.entry(e.run_id()).or_default().push(e.name());
    }
    assert_eq!(per_run.len() as u64, total);
    for (run, names) in per_run {
        assert_eq!(names[0], "run_started", "run {run}: {names:?}");
        let settled: Vec<usize> = names
            .iter()
            .enumerate()
            .filter(|(_, n)| **n == "run_settled")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(settled.len(), 1, "run {run}: {names:?}");
        for (i, n) in names.iter().enumerate() {
            let after = i > settled[0];
            assert_eq!(after, *n == "late_worker_finished", "run {run}: {names:?}");
        }
    }
}
