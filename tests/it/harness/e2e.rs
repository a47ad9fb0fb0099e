//! End-to-end: the harness over the real local lane (llama.cpp on the
//! generated tiny model).

use crate::support::http::{Flavor, TestServer};
use crate::support::models::tiny_model;
use crate::support::scripted::{Recorder, Scripted, HANG};
use edgecloud::cloud::CloudConfig;
use edgecloud::harness::{
    CancelResult, CloudBackend, Event, Harness, KeepRecent, LaneErrorKind, LaneStatus,
    LocalBackend, Outcome, Policy, PromptStage, Route, RunOptions, RunStatus, Signal,
};
use edgecloud::local::LocalConfig;
use edgecloud::{ChatMessage, Lane, Request, Sampling};
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
    // 20 ms: long enough to admit the lane, far too short for the prompt.
    // On a starved machine the deadline may pass before admission (the
    // lane is then `not_started`); try again until a worker was admitted.
    let mut admitted = false;
    for _ in 0..10 {
        let mut r = request(&long, 64);
        r.deadline = Some(Duration::from_millis(20));
        let out = h.run_blocking(r).unwrap();
        assert_eq!(out.status, RunStatus::DeadlineExceeded, "{out:#?}");
        let l = out.lane(Lane::Local);
        match l.status {
            // Still decoding at settlement: it stops inside llama.cpp and
            // hands the lane back later.
            LaneStatus::Late => {
                assert_eq!(l.cancel, Some(CancelResult::StillRunning));
                let id = out.run_id;
                rec.wait_for(
                    |e| matches!(e, Event::LateWorkerFinished { run_id, .. } if *run_id == id),
                );
            }
            LaneStatus::Cancelled => {}
            LaneStatus::NotStarted => continue,
            other => panic!("unexpected {other:?}: {l:#?}"),
        }
        admitted = true;
        break;
    }
    assert!(admitted, "the lane was never admitted within 20 ms");
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

/// The real local lane and a scripted cloud under two named routes.
fn cascade_routes(cloud: &Scripted, routes: [(&str, Route); 2]) -> Harness {
    let mut b = Harness::builder()
        .local(local_backend())
        .cloud(cloud.clone())
        .deadline(Duration::from_secs(60))
        .cancel_grace(HANG);
    for (name, route) in routes {
        b = b.route(name, route);
    }
    b.build().unwrap()
}

/// A long story asked on `route`, which the scripted cloud answers.
fn cloud_answers_a_long_story(h: &Harness, cloud: &Scripted, route: &str) -> Outcome {
    let run = h
        .start(
            request("Tell me a long story", 200),
            RunOptions::new().route(route),
        )
        .unwrap();
    cloud.next_task().complete("the cloud's answer");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud), "{out:#?}");
    out
}

#[test]
fn a_cascade_escalates_early_while_the_real_local_lane_generates() {
    let cloud = Scripted::new("cloud");
    // Every token of the random model is far below log-probability -1e-6:
    // the first one already decides, long before `max_tokens`.
    let h = cascade_routes(
        &cloud,
        [
            (
                "early",
                Route::new(Policy::cascade(-1e-6)).escalate_early(Signal::MinLogprob),
            ),
            (
                "late",
                Route::new(Policy::cascade(-1e-6))
                    .escalate_early(Signal::MinLogprob)
                    .without_early_escalation(),
            ),
        ],
    );
    let out = cloud_answers_a_long_story(&h, &cloud, "early");
    let note = out.lane(Lane::Cloud).note.clone().unwrap_or_default();
    assert!(
        note.starts_with("started early: local's min_logprob fell to")
            && note.contains("after 1 tokens"),
        "{note}"
    );
    // The same cascade without early escalation pays the whole local
    // answer first, then escalates on its score.
    let run = h
        .start(
            request("Tell me a long story", 24),
            RunOptions::new().route("late"),
        )
        .unwrap();
    let task = cloud.next_task();
    task.complete("the cloud's answer");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud), "{out:#?}");
    let l = out.lane(Lane::Local);
    assert_eq!(l.status, LaneStatus::Completed, "{l:#?}");
    assert_eq!(
        out.lane(Lane::Cloud).note.as_deref(),
        Some("started because local scored below the threshold")
    );
}

/// A harness with two two-stage routes on `signal`: "straight" (prompt
/// threshold `straight`, which every prompt is below) and "kept" (`kept`,
/// which none is).
fn two_stage_routes(cloud: &Scripted, signal: Signal, straight: f64, kept: f64) -> Harness {
    let route = |t| Route::new(Policy::cascade(0.0)).prompt_escalate_on(signal, t);
    cascade_routes(
        cloud,
        [("straight", route(straight)), ("kept", route(kept))],
    )
}

/// A long story on the "straight" route: the first stage sent it to the
/// cloud and cancelled local before it generated. Returns the stage.
fn went_straight(h: &Harness, cloud: &Scripted) -> PromptStage {
    let out = cloud_answers_a_long_story(h, cloud, "straight");
    let stage = out.prompt_stage.clone().expect("a two-stage run");
    assert!(stage.straight_to_cloud, "{stage:?}");
    let local = out.lane(Lane::Local);
    assert_eq!(local.status, LaneStatus::Cancelled, "{local:#?}");
    assert!(
        local
            .note
            .as_deref()
            .is_some_and(|n| n.ends_with("cancelled before generating")),
        "{local:#?}"
    );
    stage
}

/// A short request on the "kept" route: local answers, the stage kept it.
fn kept_local(h: &Harness) -> (Outcome, PromptStage) {
    let out = h
        .run_blocking_with(
            request("Tell me a long story", 6),
            RunOptions::new().route("kept"),
        )
        .unwrap();
    assert_eq!(out.winner, Some(Lane::Local), "{out:#?}");
    let stage = out.prompt_stage.clone().expect("a two-stage run");
    assert!(!stage.straight_to_cloud);
    (out, stage)
}

#[test]
fn a_two_stage_cascade_reads_the_real_prompt_score_before_local_generates() {
    let cloud = Scripted::new("cloud");
    // The random model finds every prompt unlikely (mean log-probability
    // far below 0): a prompt threshold of 0 sends every prompt to the
    // cloud, one of -1000 none.
    let h = two_stage_routes(&cloud, Signal::PromptLogprob, 0.0, -1000.0);
    let score = went_straight(&h, &cloud)
        .score
        .expect("the local lane scored the prompt");
    assert!(score < 0.0, "{score}");
    // Above the prompt threshold the cascade runs as configured, and the
    // stage's score is the one the local answer carries.
    let (out, stage) = kept_local(&h);
    let signal = out
        .completion
        .as_ref()
        .and_then(|c| c.signals.as_ref())
        .and_then(|s| s.prompt_logprob);
    assert!(signal.is_some(), "{out:#?}");
    assert_eq!(stage.score.map(|s| s as f32), signal);
}

#[test]
fn a_two_stage_cascade_on_the_prompt_length_reads_the_real_token_count() {
    let cloud = Scripted::new("cloud");
    // `prompt_brevity` is minus the prompt's tokens: below -1 is any
    // prompt of two tokens or more, below -100000 none.
    let h = two_stage_routes(&cloud, Signal::PromptBrevity, -1.0, -100_000.0);
    let stage = went_straight(&h, &cloud);
    assert_eq!(stage.signal, Signal::PromptBrevity);
    let score = stage.score.expect("the local lane counted the prompt");
    assert!(score < -1.0 && score.fract() == 0.0, "{score}");
    // Kept local: the stage's score is minus the prompt tokens the local
    // answer reports, and the prompt pass was not scored for it.
    let (out, stage) = kept_local(&h);
    let c = out.completion.as_ref().expect("the local answer");
    let tokens = c.tokens.local_prompt.expect("the local prompt's tokens");
    assert_eq!(stage.score, Some(-(tokens as f64)), "{out:#?}");
    assert_eq!(score, -(tokens as f64), "the same prompt both times");
    let signals = c.signals.as_ref().expect("the local answer's signals");
    assert_eq!(signals.prompt_logprob, None, "no scored prompt pass");
    assert_eq!(
        Signal::PromptBrevity.of_signals(signals),
        Some(-(tokens as f64))
    );
}

/// A runtime for loopback servers (they run on its threads while the test
/// drives the harness through the blocking API).
pub(super) fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for the test server")
}

fn cloud_backend(base_url: &str) -> CloudBackend {
    let mut cfg = CloudConfig::new(base_url, "test-model");
    cfg.api_key_env = "EDGECLOUD_HARNESS_TEST_NO_KEY".into();
    CloudBackend::start(cfg).expect("loopback settings are valid")
}

const CLOUD_TEXT: &[&str] = &["Paris", " is the capital."];

#[test]
fn every_policy_end_to_end_with_the_real_local_lane_and_a_loopback_cloud() {
    let rt = server_runtime();
    let server = rt.block_on(TestServer::openai(Flavor::OpenAi, CLOUD_TEXT));
    let local = local_backend();
    let cloud = cloud_backend(&server.base_url());
    // (policy, expected winner, whether the cloud is asked). The tiny
    // model's answers are noise (score near 0), the cloud carries no
    // log-probs (neutral confidence): best-of and a demanding cascade pick
    // the cloud; a lenient cascade keeps the local answer.
    //
    // Race comes last: when its local lane wins, the cancelled cloud
    // request may reach the server after the run has settled, and the next
    // case would count it as its own (a flake seen once in 12 runs).
    let cases: [(Policy, Option<Lane>, Option<bool>); 8] = [
        (Policy::LocalOnly, Some(Lane::Local), Some(false)),
        (Policy::CloudOnly, Some(Lane::Cloud), Some(true)),
        (
            Policy::hedge(Duration::from_secs(3600)),
            Some(Lane::Local),
            Some(false),
        ),
        (Policy::cascade(0.99), Some(Lane::Cloud), Some(true)),
        (Policy::cascade(0.0), Some(Lane::Local), Some(false)),
        (Policy::fallback(), Some(Lane::Cloud), Some(true)),
        (Policy::BestOf, Some(Lane::Cloud), Some(true)),
        (Policy::Race, None, None),
    ];
    for (policy, winner, cloud_asked) in cases {
        let h = Harness::builder()
            .local(local.clone())
            .cloud(cloud.clone())
            .policy(policy.clone())
            .deadline(Duration::from_secs(60))
            .cancel_grace(HANG)
            .build()
            .unwrap();
        let before = server.requests().len();
        let mut run = h
            .start(
                request("What is the capital of France?", 6),
                RunOptions::new().stream(),
            )
            .unwrap();
        let mut streamed = String::new();
        while let Some(p) = run.next_token_blocking().unwrap() {
            streamed.push_str(&p);
        }
        let out = run.wait().unwrap();
        assert_eq!(out.status, RunStatus::Ok, "{policy:?}: {out:#?}");
        assert_eq!(out.text.as_deref(), Some(streamed.as_str()), "{policy:?}");
        if let Some(w) = winner {
            assert_eq!(out.winner, Some(w), "{policy:?}: {out:#?}");
        }
        if out.winner == Some(Lane::Cloud) {
            assert_eq!(out.text.as_deref(), Some("Paris is the capital."));
            let c = out.lane(Lane::Cloud);
            assert_eq!(c.backend.as_deref(), Some("openai-compatible"));
            assert_eq!(c.prompt_tokens, Some(9), "provider usage");
            assert!(c.tokens.local_prompt.is_none());
        }
        if let Some(asked) = cloud_asked {
            assert_eq!(server.requests().len() > before, asked, "{policy:?}");
        }
        // Both lanes are free for the next policy.
        assert!(h.shutdown_blocking(HANG).unwrap().is_clean(), "{policy:?}");
    }
}

#[test]
fn fallback_survives_a_failing_cloud_with_the_real_local_lane() {
    let rt = server_runtime();
    let server = rt.block_on(TestServer::start(|mut conn| async move {
        while conn.read_request().await.is_some() {
            if conn
                .json(503, r#"{"error":{"message":"overloaded"}}"#)
                .await
                .is_err()
            {
                return;
            }
        }
    }));
    let h = Harness::builder()
        .local(local_backend())
        .cloud(cloud_backend(&server.base_url()))
        .policy(Policy::fallback())
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let out = h.run_blocking(request("Hi", 4)).unwrap();
    assert_eq!(out.winner, Some(Lane::Local), "{out:#?}");
    let c = out.lane(Lane::Cloud);
    assert_eq!(c.status, LaneStatus::Failed);
    assert!(
        c.error.as_ref().unwrap().kind() == LaneErrorKind::ServerError,
        "{c:#?}"
    );
}

#[test]
fn the_cloud_receives_the_compressed_prompt() {
    let rt = server_runtime();
    let server = rt.block_on(TestServer::openai(Flavor::Vllm, CLOUD_TEXT));
    let h = Harness::builder()
        .cloud(cloud_backend(&server.base_url()))
        .policy(Policy::CloudOnly)
        .compressor(KeepRecent::new(20))
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut r = request("the question", 8);
    r.messages
        .insert(0, ChatMessage::assistant("an old answer ".repeat(20)));
    r.messages
        .insert(0, ChatMessage::user("an old question ".repeat(20)));
    r.messages.insert(0, ChatMessage::system("be brief"));
    let out = h.run_blocking(r).unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    let sent = server.requests()[0].json();
    let contents: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["be brief", "the question"]);
    let t = &out.lane(Lane::Cloud).tokens;
    assert!(t.compressor_before > t.compressor_after);
    assert_eq!(t.provider_prompt, Some(9));
}
