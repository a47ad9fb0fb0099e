//! The two-stage cascade's first stage: the local lane's score of the
//! prompt, read before it generates.

use super::*;
use crate::lane::PromptScore;

fn two_stage_on(signal: Signal, prompt_threshold: f64) -> CoreSetup {
    let mut s = setup(Policy::cascade(-3.0));
    s.callbacks.scorer = true;
    s.prompt_threshold = Some((signal, prompt_threshold));
    s
}

fn two_stage(prompt_threshold: f64) -> CoreSetup {
    two_stage_on(Signal::PromptLogprob, prompt_threshold)
}

/// The report after the prompt pass of a prompt of 30 tokens.
fn prompt_score(sim: &mut Sim, score: f32, ms: Ms) {
    report(sim, 30, Some(score), ms);
}

fn report(sim: &mut Sim, tokens: u32, logprob: Option<f32>, ms: Ms) {
    sim.feed(
        Input::PromptScore {
            lane: Lane::Local,
            score: PromptScore { tokens, logprob },
        },
        ms,
    );
}

#[test]
fn a_prompt_scored_below_the_threshold_goes_to_the_cloud_before_local_generates() {
    let mut sim = Sim::begin(two_stage(-2.0));
    assert!(sim.core.watches_prompt(Lane::Local));
    assert!(!sim.core.watches_prompt(Lane::Cloud));
    assert_eq!(sim.started, [Lane::Local]);
    prompt_score(&mut sim, -2.5, 40);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    assert_eq!(sim.cancelled, [Lane::Local]);
    let note = sim.note(Lane::Cloud).unwrap_or_default().to_string();
    assert!(
        note.starts_with(
            "started before generation: local's prompt_logprob -2.5000, below the prompt threshold -2"
        ),
        "{note}"
    );
    assert!(sim
        .note(Lane::Local)
        .is_some_and(|n| n.ends_with("cancelled before generating")));
    // A second score changes nothing.
    prompt_score(&mut sim, -9.0, 41);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    sim.finish(Lane::Local, "", FinishReason::Cancelled, 50);
    sim.answer(Lane::Cloud, "c", 300);
    sim.score(Lane::Cloud, 0.0, 301);
    let out = sim.settle(301);
    assert_eq!(out.winner, Some(Lane::Cloud));
    let stage = out.prompt_stage.expect("a two-stage run reports its stage");
    assert_eq!(stage.signal, Signal::PromptLogprob);
    assert_eq!(stage.threshold, -2.0);
    assert_eq!(stage.score, Some(-2.5));
    assert!(stage.straight_to_cloud);
}

#[test]
fn a_prompt_at_or_above_the_threshold_runs_the_cascade_on_the_answer() {
    let mut sim = Sim::begin(two_stage(-2.0));
    prompt_score(&mut sim, -2.0, 40);
    assert_eq!(sim.started, [Lane::Local], "at the threshold local goes on");
    sim.answer(Lane::Local, "l", 100);
    // The answer stage still judges the answer: below its threshold the
    // cloud is called after all.
    sim.score(Lane::Local, -4.0, 101);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    sim.answer(Lane::Cloud, "c", 300);
    sim.score(Lane::Cloud, 0.0, 301);
    let out = sim.settle(301);
    assert_eq!(out.winner, Some(Lane::Cloud));
    let stage = out.prompt_stage.expect("reported");
    assert_eq!(stage.score, Some(-2.0));
    assert!(!stage.straight_to_cloud);
}

#[test]
fn local_keeps_going_when_the_cloud_cannot_take_the_prompt() {
    let mut sim = Sim::begin(two_stage(-2.0));
    sim.admission.cloud = Some(Admission::Busy);
    prompt_score(&mut sim, -8.0, 10);
    assert!(
        sim.cancelled.is_empty(),
        "cutting local would leave nothing"
    );
    assert!(sim
        .note(Lane::Local)
        .is_some_and(|n| n.ends_with("but cloud could not start; kept running")));
    sim.answer(Lane::Local, "l", 100);
    sim.score(Lane::Local, -1.0, 101);
    let out = sim.settle(101);
    assert_eq!(out.winner, Some(Lane::Local));
    assert!(!out.prompt_stage.expect("reported").straight_to_cloud);
}

#[test]
fn no_score_means_no_first_stage_decision_and_other_policies_have_none() {
    // No score came (a one-token prompt, a lane that does not score):
    // the cascade decides on the answer alone and the stage says so.
    let mut sim = Sim::begin(two_stage(-2.0));
    sim.answer(Lane::Local, "l", 100);
    sim.score(Lane::Local, -1.0, 101);
    let out = sim.settle(101);
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.prompt_stage.expect("reported").score, None);
    let mut race = setup(Policy::Race);
    race.prompt_threshold = Some((Signal::PromptLogprob, -2.0));
    let mut sim = Sim::begin(race);
    assert!(!sim.core.watches_prompt(Lane::Local));
    prompt_score(&mut sim, -50.0, 10);
    assert!(sim.cancelled.is_empty());
    sim.answer(Lane::Local, "l", 100);
    sim.answer(Lane::Cloud, "c", 100);
    assert_eq!(sim.settle(101).prompt_stage, None);
    // Without a prompt threshold a cascade reads no prompt.
    let sim = Sim::begin(setup(Policy::cascade(-3.0)));
    assert!(!sim.core.watches_prompt(Lane::Local));
}

#[test]
fn a_prompt_longer_than_the_brevity_threshold_goes_to_the_cloud_before_it_is_decoded() {
    let mut sim = Sim::begin(two_stage_on(Signal::PromptBrevity, -120.0));
    assert!(sim.core.watches_prompt(Lane::Local));
    assert!(
        !sim.core.scores_prompt(Lane::Local),
        "the length needs no prompt pass scored"
    );
    // Reported at tokenization, with no log-probability: 150 tokens.
    report(&mut sim, 150, None, 5);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    assert_eq!(sim.cancelled, [Lane::Local]);
    let note = sim.note(Lane::Cloud).unwrap_or_default().to_string();
    assert!(
        note.starts_with(
            "started before generation: local's prompt_brevity -150.0000, below the prompt threshold -120"
        ),
        "{note}"
    );
    sim.finish(Lane::Local, "", FinishReason::Cancelled, 6);
    sim.answer(Lane::Cloud, "c", 300);
    sim.score(Lane::Cloud, 0.0, 301);
    let stage = sim.settle(301).prompt_stage.expect("reported");
    assert_eq!(stage.signal, Signal::PromptBrevity);
    assert_eq!(stage.score, Some(-150.0));
    assert!(stage.straight_to_cloud);

    // 120 tokens: not longer than the threshold; the cascade goes on.
    let mut sim = Sim::begin(two_stage_on(Signal::PromptBrevity, -120.0));
    report(&mut sim, 120, None, 5);
    assert_eq!(sim.started, [Lane::Local]);
    sim.answer(Lane::Local, "l", 100);
    sim.score(Lane::Local, -1.0, 101);
    let out = sim.settle(101);
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.prompt_stage.expect("reported").score, Some(-120.0));
}

#[test]
fn a_log_probability_stage_waits_for_the_scored_prompt_pass() {
    let mut sim = Sim::begin(two_stage(-2.0));
    assert!(sim.core.scores_prompt(Lane::Local));
    // A report without a log-probability decides nothing on this signal.
    report(&mut sim, 500, None, 5);
    assert_eq!(sim.started, [Lane::Local]);
    prompt_score(&mut sim, -2.5, 40);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
}
