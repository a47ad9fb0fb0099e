//! Early escalation: a cascade reading a streamable signal from the local
//! lane's log-probabilities as they come.

use super::*;
use crate::harness::scoring::CONFIDENCE_WINDOW;

fn early(threshold: f64, signal: Signal) -> CoreSetup {
    let mut s = setup(Policy::cascade(threshold));
    s.callbacks.scorer = true;
    s.early = Some(signal);
    s
}

/// The local lane samples tokens of these log-probabilities at `ms`.
fn tokens(sim: &mut Sim, logprobs: &[f32], ms: Ms) {
    for &logprob in logprobs {
        sim.feed(
            Input::Logprob {
                lane: Lane::Local,
                logprob,
            },
            ms,
        );
    }
}

#[test]
fn the_cloud_starts_once_the_window_falls_below_the_threshold_and_local_is_cut() {
    let mut sim = Sim::begin(early(-1.0, Signal::MinWindowLogprob));
    assert!(sim.core.watches_logprobs(Lane::Local));
    assert!(!sim.core.watches_logprobs(Lane::Cloud));
    // Sure tokens, then a dip: before a whole window is in nothing is
    // decided, however low the tokens.
    tokens(&mut sim, &[-3.0; CONFIDENCE_WINDOW - 1], 50);
    assert_eq!(sim.started, [Lane::Local], "no whole window yet");
    // The 16th token completes a window of mean -3: below -1.
    tokens(&mut sim, &[-3.0], 60);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    assert_eq!(sim.cancelled, [Lane::Local]);
    let note = sim.note(Lane::Cloud).unwrap_or_default().to_string();
    assert!(
        note.starts_with(
            "started early: local's min_window_logprob fell to -3.0000 after 16 tokens"
        ),
        "{note}"
    );
    assert!(sim
        .note(Lane::Local)
        .is_some_and(|n| n.ends_with("cancelled to escalate early")));
    // More tokens change nothing (one escalation per run).
    tokens(&mut sim, &[-5.0; 4], 70);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    sim.finish(Lane::Local, "partial", FinishReason::Cancelled, 80);
    sim.answer(Lane::Cloud, "c", 300);
    sim.score(Lane::Cloud, 0.0, 301);
    let out = sim.settle(301);
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Cancelled);
}

#[test]
fn a_confident_answer_is_never_escalated_early() {
    let mut sim = Sim::begin(early(-1.0, Signal::MinWindowLogprob));
    // Windows of mean -0.5 and one odd token: never below -1.
    let mut lp = vec![-0.5f32; 40];
    lp[20] = -6.0;
    tokens(&mut sim, &lp, 50);
    assert_eq!(sim.started, [Lane::Local]);
    sim.answer(Lane::Local, "l", 100);
    // The scorer reads the same signal at the end: at the threshold or
    // above, local wins.
    sim.score(Lane::Local, -0.8, 101);
    assert_eq!(sim.settle(101).winner, Some(Lane::Local));
}

#[test]
fn min_logprob_escalates_at_the_first_low_token() {
    let mut sim = Sim::begin(early(-4.0, Signal::MinLogprob));
    tokens(&mut sim, &[-0.1, -3.9], 10);
    assert_eq!(sim.started, [Lane::Local]);
    tokens(&mut sim, &[-4.5], 20);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
}

#[test]
fn local_keeps_going_when_the_cloud_cannot_take_over() {
    let mut sim = Sim::begin(early(-4.0, Signal::MinLogprob));
    sim.admission.cloud = Some(Admission::Busy);
    tokens(&mut sim, &[-9.0], 10);
    assert!(
        sim.cancelled.is_empty(),
        "cutting local would leave nothing"
    );
    assert!(sim
        .note(Lane::Local)
        .is_some_and(|n| n.ends_with("but cloud could not start; kept running")));
    // Its answer then stands as the only usable one.
    sim.answer(Lane::Local, "l", 100);
    sim.score(Lane::Local, -9.0, 101);
    assert_eq!(sim.settle(101).winner, Some(Lane::Local));
}

#[test]
fn without_early_escalation_or_outside_a_cascade_nothing_is_watched() {
    let sim = Sim::begin(cascade_late());
    assert!(!sim.core.watches_logprobs(Lane::Local));
    let mut race = setup(Policy::Race);
    race.early = Some(Signal::MinLogprob);
    let mut sim = Sim::begin(race);
    assert!(!sim.core.watches_logprobs(Lane::Local));
    tokens(&mut sim, &[-50.0], 10);
    assert_eq!(sim.cancelled, Vec::<Lane>::new());
    // A signal that can rise again is never read early.
    let sim = Sim::begin(early(-1.0, Signal::MeanLogprob));
    assert!(!sim.core.watches_logprobs(Lane::Local));
}

fn cascade_late() -> CoreSetup {
    let mut s = setup(Policy::cascade(-1.0));
    s.callbacks.scorer = true;
    s
}
