//! Continuing an answer on the other lane when its lane fails part-way
//! (`switch`): streamed and whole, the lane the continuation waits for,
//! and the cases that end the run as before.

use super::*;
use crate::harness::outcome::LaneSwitch;

fn prefill(sim: &Sim, lane: Lane) -> Option<(&str, u64)> {
    sim.prefills[lane]
        .as_ref()
        .map(|p| (p.text.as_str(), p.pieces))
}

#[test]
fn a_streamed_answer_whose_committed_lane_fails_is_continued_by_the_other_lane() {
    let mut sim = Sim::begin(streaming(Policy::Race));
    sim.token(Lane::Local, "The sky ", 10);
    sim.token(Lane::Local, "is", 12);
    // Committed to local at its first token: the cloud is cancelled.
    assert_eq!(sim.cancelled, [Lane::Cloud]);
    sim.fail(Lane::Local, 20);
    assert!(!sim.settle_now, "the run goes on");
    // The cloud's cancelled worker is still running: the continuation
    // starts when it returns.
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    sim.finish(Lane::Cloud, "", FinishReason::Cancelled, 25);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud, Lane::Cloud]);
    // Every admitted worker's return is an event, the cancelled one's too.
    let finished = |sim: &Sim| {
        sim.events
            .iter()
            .filter(|e| matches!(e, Event::LaneFinished { .. }))
            .count()
    };
    assert_eq!(finished(&sim), 2);
    assert_eq!(prefill(&sim, Lane::Cloud), Some(("The sky is", 2)));
    sim.token(Lane::Cloud, " blue", 40);
    sim.answer(Lane::Cloud, " blue.", 50);
    assert!(sim.settle_now);
    // The tail the worker returned without streaming goes out at
    // settlement.
    assert_eq!(sim.forwarded, ["The sky ", "is", " blue"]);
    let out = sim.settle(50);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        Reason::Continued {
            from: Lane::Local,
            to: Lane::Cloud,
        },
        DecidedBy::Policy,
    );
    assert_eq!(out.text.as_deref(), Some("The sky is blue."));
    assert_eq!(out.committed, Some(Lane::Cloud));
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Failed);
    assert_eq!(
        out.switch,
        Some(LaneSwitch {
            from: Lane::Local,
            to: Lane::Cloud,
            error_kind: LaneErrorKind::Transport,
            reason: "(transport) connection reset".into(),
            sent_chars: 10,
            sent_reasoning_chars: 0,
            sent_pieces: 2,
            at_ms: 20.0,
            first_token_after_ms: Some(20.0),
        })
    );
}

#[test]
fn a_fallback_whose_cloud_stream_breaks_continues_on_the_idle_local_lane_at_once() {
    let mut sim = Sim::begin(streaming(Policy::fallback()));
    assert_eq!(sim.started, [Lane::Cloud]);
    sim.token(Lane::Cloud, "ab", 10);
    sim.token(Lane::Cloud, "cd", 11);
    sim.fail(Lane::Cloud, 30);
    assert_eq!(sim.started, [Lane::Cloud, Lane::Local]);
    assert_eq!(prefill(&sim, Lane::Local), Some(("abcd", 2)));
    assert_eq!(
        sim.note(Lane::Local),
        Some("continued the answer after cloud failed")
    );
    sim.token(Lane::Local, "ef", 35);
    sim.answer(Lane::Local, "ef", 36);
    assert_eq!(sim.forwarded, ["ab", "cd", "ef"]);
    let out = sim.settle(36);
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.text.as_deref(), Some("abcdef"));
    assert_eq!(out.switch.as_ref().map(|s| s.to), Some(Lane::Local));
}

#[test]
fn the_thinking_already_sent_is_continued_with_its_tags() {
    let mut sim = Sim::begin(streaming(Policy::fallback()));
    sim.thinking(Lane::Cloud, "hmm", 10);
    sim.token(Lane::Cloud, "A", 11);
    sim.fail(Lane::Cloud, 30);
    assert_eq!(
        prefill(&sim, Lane::Local),
        Some(("<think>\nhmm\n</think>\n\nA", 2))
    );
    sim.answer(Lane::Local, "B", 40);
    let out = sim.settle(40);
    let c = out.completion.unwrap();
    assert_eq!(
        (c.text.as_str(), c.reasoning.as_deref()),
        ("AB", Some("hmm"))
    );
    assert_eq!(
        super::super::switch::prefill_text("hmm", ""),
        "<think>\nhmm"
    );
}

#[test]
fn a_whole_answer_whose_lane_failed_part_way_is_continued_not_restarted() {
    let mut sim = Sim::begin(setup(Policy::fallback()));
    sim.token(Lane::Cloud, "ab", 10);
    sim.fail(Lane::Cloud, 30);
    assert_eq!(sim.started, [Lane::Cloud, Lane::Local]);
    assert_eq!(prefill(&sim, Lane::Local), Some(("ab", 1)));
    sim.answer(Lane::Local, "cd", 40);
    let out = sim.settle(40);
    assert_eq!(out.text.as_deref(), Some("abcd"));
    assert!(out.switch.is_some());
    assert!(out.ttft_ms.is_none(), "nothing was streamed");
}

#[test]
fn an_uncommitted_stream_gets_the_whole_continued_answer_at_the_decision() {
    let mut s = streaming(Policy::fallback());
    s.commit = CommitMode::Completion;
    let mut sim = Sim::begin(s);
    sim.token(Lane::Cloud, "ab", 10);
    sim.fail(Lane::Cloud, 30);
    assert!(sim.forwarded.is_empty());
    sim.token(Lane::Local, "cd", 35);
    sim.answer(Lane::Local, "cd", 40);
    let out = sim.settle(40);
    assert_eq!(out.text.as_deref(), Some("abcd"));
}

#[test]
fn no_switch_for_a_failure_before_any_text_nor_a_constrained_answer_nor_past_the_deadline() {
    // No text: the fallback restarts the answer as before.
    let mut sim = Sim::begin(setup(Policy::fallback()));
    sim.fail(Lane::Cloud, 30);
    assert_eq!(prefill(&sim, Lane::Local), None);
    sim.answer(Lane::Local, "l", 40);
    assert!(sim.settle(40).switch.is_none());

    // A schema or tool call: the answer's grammar starts at its start.
    let mut s = streaming(Policy::fallback());
    s.answer_rules = Some(crate::request::Sampling::default());
    let mut sim = Sim::begin(s);
    sim.token(Lane::Cloud, "{", 10);
    sim.fail(Lane::Cloud, 30);
    let out = sim.settle(30);
    assert_eq!(
        out.decision.reason,
        Reason::CommittedFailed(Lane::Cloud).to_string()
    );

    // Past the deadline there is no time to continue.
    let mut sim = Sim::begin(streaming(Policy::fallback()));
    sim.token(Lane::Cloud, "ab", 10);
    sim.fail(Lane::Cloud, DEADLINE_MS);
    assert_eq!(sim.started, [Lane::Cloud]);
}

#[test]
fn a_continuing_lane_that_is_not_admitted_leaves_the_failure_as_it_was() {
    let mut sim = Sim::begin_with(
        streaming(Policy::fallback()),
        PerLane::new(Some(Admission::Busy), None),
    );
    sim.token(Lane::Cloud, "ab", 10);
    sim.fail(Lane::Cloud, 30);
    assert!(sim.settle_now);
    let out = sim.settle(30);
    assert_decision(
        &out,
        RunStatus::Failed,
        None,
        Reason::CommittedFailed(Lane::Cloud),
        DecidedBy::Nobody,
    );
    assert_eq!(out.committed, Some(Lane::Cloud));
    assert!(out.switch.is_none());
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Busy);
}
