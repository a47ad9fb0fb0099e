//! End-to-end: the harness over the real local lane (llama.cpp on the
//! generated tiny model).

use crate::support::models::tiny_model;
use crate::support::scripted::{Recorder, Scripted, HANG};
use edgecloud::harness::{
    CancelResult, Event, Harness, LaneStatus, LocalBackend, Policy, RunOptions, RunStatus,
};
use edgecloud::local::LocalConfig;
use edgecloud::{Lane, Request, Sampling};
use std::time::Duration;

pub(super) fn local_backend() -> LocalBackend {
    LocalBackend::start(LocalConfig {
        threads: Some(2),
        ..LocalConfig::new(tiny_model())
    })
    .expect("the tiny model loads")
}

pub(super) fn request(text: &str, max_tokens: u32) -> Request {
    let mut r = Request::user(text);
    r.sampling = Sampling {
        max_tokens,
        seed: Some(7),
        ..Sampling::default()
    };
    r
}

#[test]
fn local_lane_under_the_harness_reports_tokens_signals_and_score() {
    let h = Harness::builder()
        .local(local_backend())
        .policy(Policy::LocalOnly)
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut run = h
        .start(request("Hello there", 8), RunOptions::new().stream())
        .unwrap();
    let mut streamed = String::new();
    while let Some(p) = run.next_token_blocking().unwrap() {
        streamed.push_str(&p);
    }
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::Ok, "{out:#?}");
    assert_eq!(out.text.as_deref(), Some(streamed.as_str()));
    let l = out.lane(Lane::Local);
    assert_eq!(l.backend.as_deref(), Some("llama.cpp"));
    assert!(l.prompt_tokens.unwrap() > 0);
    assert!(l.completion_tokens.unwrap() >= 1);
    assert!(
        l.tokens.provider_prompt.is_none(),
        "no provider on this lane"
    );
    assert!(l.score.is_some() && l.signals.contains_key("mean_logprob"));
    let c = out.completion.clone().unwrap();
    assert!(c.signals.unwrap().token_logprobs.len() as u64 == l.completion_tokens.unwrap());
    assert!(c.timings.prompt_eval.is_some());
}

#[test]
fn local_diagnostic_goes_through_the_harness() {
    let h = Harness::builder().local(local_backend()).build().unwrap();
    let d = h.local_only(request("Hi", 4)).unwrap();
    assert_eq!(d.lane, Lane::Local);
    assert!(d.backend.load_time.is_some());
    assert!(d.completion.tokens.local_prompt.unwrap() > 0);
    assert!(d.completion.timings.total.is_some());
}

#[test]
fn the_deadline_stops_a_long_prompt_and_the_lane_recovers() {
    let rec = Recorder::new();
    let h = Harness::builder()
        .local(local_backend())
        .policy(Policy::LocalOnly)
        .deadline(Duration::from_secs(60))
        .observer(rec.clone())
        .build()
        .unwrap();
    let long: String = (0..400).map(|i| format!("word{} ", i % 97)).collect();
    let mut r = request(&long, 64);
    r.deadline = Some(Duration::from_millis(1));
    let out = h.run_blocking(r).unwrap();
    assert_eq!(out.status, RunStatus::DeadlineExceeded, "{out:#?}");
    let l = out.lane(Lane::Local);
    match l.status {
        // Still decoding at settlement: it stops inside llama.cpp and
        // hands the lane back later.
        LaneStatus::Late => {
            assert_eq!(l.cancel, Some(CancelResult::StillRunning));
            rec.wait_for(|e| matches!(e, Event::LateWorkerFinished { .. }));
        }
        LaneStatus::Cancelled => {}
        other => panic!("unexpected {other:?}: {l:#?}"),
    }
    let again = h.run_blocking(request("again", 4)).unwrap();
    assert_eq!(again.status, RunStatus::Ok, "{again:#?}");
}

#[test]
fn real_local_lane_races_a_cloud_that_never_answers() {
    let cloud = Scripted::new("silent-cloud");
    let h = Harness::builder()
        .local(local_backend())
        .cloud(cloud.clone())
        .policy(Policy::Race)
        .deadline(Duration::from_secs(60))
        .cancel_grace(HANG)
        .build()
        .unwrap();
    let run = h.start(request("Hello", 6), RunOptions::new()).unwrap();
    let ct = cloud.next_task();
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local), "{out:#?}");
    assert!(ct.is_cancelled());
    assert_eq!(
        out.lane(Lane::Cloud).cancel,
        Some(CancelResult::StoppedInTime)
    );
}
