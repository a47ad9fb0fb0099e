//! One test per decision reason ([`Reason`]): the state that leads to it,
//! and the status, winner and decider that go with it.

use super::*;

fn scored(policy: Policy, min_score: Option<f64>) -> CoreSetup {
    let mut s = setup(policy);
    s.callbacks.scorer = true;
    s.min_score = min_score;
    s
}

fn arbitrated() -> Sim {
    let mut s = setup(Policy::BestOf);
    s.callbacks.arbiter = true;
    let mut sim = Sim::begin(s);
    sim.answer(Lane::Cloud, "c", 100);
    sim.answer(Lane::Local, "l", 200);
    let cands = match &sim.calls[..] {
        [(_, Call::Arbitrate(c))] => c.iter().map(|c| c.lane).collect::<Vec<_>>(),
        other => panic!("expected one arbiter call, got {other:?}"),
    };
    assert_eq!(cands, [Lane::Cloud, Lane::Local], "in finishing order");
    sim
}

#[test]
fn first_acceptable_takes_the_first_whole_answer_at_once() {
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.finish(Lane::Local, "   ", FinishReason::Stop, 10);
    assert!(!sim.settle_now, "a blank answer is not acceptable");
    sim.answer(Lane::Cloud, "c", 20);
    assert!(sim.settle_now);
    let out = sim.settle(20);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        Reason::FirstAcceptable(Lane::Cloud),
        DecidedBy::Policy,
    );
}

#[test]
fn only_candidate_from_the_acceptable_pool() {
    let mut sim = Sim::begin(setup(Policy::BestOf));
    sim.fail(Lane::Local, 10);
    sim.answer(Lane::Cloud, "c", 20);
    let out = sim.settle(20);
    let reason = Reason::OnlyCandidate {
        pool: Pool::Acceptable,
        lane: Lane::Cloud,
    };
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        reason,
        DecidedBy::Policy,
    );
}

#[test]
fn only_candidate_from_the_usable_pool_when_none_is_acceptable() {
    let mut sim = Sim::begin(scored(Policy::Race, Some(0.8)));
    sim.answer(Lane::Local, "l", 10);
    sim.score(Lane::Local, 0.5, 11);
    assert!(!sim.settle_now, "below min_score: not acceptable");
    sim.fail(Lane::Cloud, 20);
    let out = sim.settle(20);
    let reason = Reason::OnlyCandidate {
        pool: Pool::Usable,
        lane: Lane::Local,
    };
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        reason,
        DecidedBy::Policy,
    );
}

#[test]
fn highest_score_among_acceptable_answers() {
    let mut sim = Sim::begin(scored(Policy::BestOf, None));
    sim.answer(Lane::Local, "l", 10);
    sim.score(Lane::Local, 0.7, 11);
    sim.answer(Lane::Cloud, "c", 20);
    sim.score(Lane::Cloud, 0.6, 21);
    let out = sim.settle(21);
    let reason = Reason::HighestScore {
        pool: Pool::Acceptable,
        lane: Lane::Local,
    };
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        reason,
        DecidedBy::BuiltIn,
    );
}

#[test]
fn highest_score_among_usable_answers_when_none_is_acceptable() {
    let mut sim = Sim::begin(scored(Policy::Race, Some(0.9)));
    sim.answer(Lane::Local, "l", 10);
    sim.score(Lane::Local, 0.5, 11);
    sim.answer(Lane::Cloud, "c", 20);
    sim.score(Lane::Cloud, 0.7, 21);
    let out = sim.settle(21);
    let reason = Reason::HighestScore {
        pool: Pool::Usable,
        lane: Lane::Cloud,
    };
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        reason,
        DecidedBy::BuiltIn,
    );
    assert_eq!(
        out.decision.reason,
        "no acceptable answer; best usable one; built-in rule: highest score: cloud"
    );
}

#[test]
fn arbiter_picked() {
    let mut sim = arbitrated();
    sim.reply(
        CallbackKind::Arbitrate,
        Ok(CbOutput::Arbitrate(Some(1))),
        201,
    );
    let out = sim.settle(201);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        Reason::ArbiterPicked(Lane::Local),
        DecidedBy::Arbiter,
    );
}

#[test]
fn arbiter_failed_falls_back_to_the_built_in_rule() {
    let mut sim = arbitrated();
    sim.reply(
        CallbackKind::Arbitrate,
        Ok(CbOutput::Arbitrate(Some(2))),
        201,
    );
    let out = sim.settle(201);
    // Unscored candidates: the built-in rule takes the first to finish.
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        Reason::ArbiterFailed(Lane::Cloud),
        DecidedBy::BuiltIn,
    );
    assert_eq!(
        out.callbacks[0].status,
        crate::harness::CallbackStatus::Invalid
    );
    assert_eq!(
        out.callbacks[0].detail.as_deref(),
        Some("index 2 out of range (2 candidates)")
    );

    let mut sim = arbitrated();
    sim.reply(CallbackKind::Arbitrate, Err("boom"), 201);
    let out = sim.settle(201);
    assert_eq!(
        out.decision.reason,
        Reason::ArbiterFailed(Lane::Cloud).to_string()
    );
    assert_eq!(
        out.callbacks[0].status,
        crate::harness::CallbackStatus::Panicked
    );
}

#[test]
fn arbiter_rejected_every_candidate() {
    let mut sim = arbitrated();
    sim.reply(CallbackKind::Arbitrate, Ok(CbOutput::Arbitrate(None)), 201);
    let out = sim.settle(201);
    assert_decision(
        &out,
        RunStatus::Failed,
        None,
        Reason::ArbiterRejectedAll,
        DecidedBy::Nobody,
    );
    let error = out.error.unwrap();
    assert!(
        error.starts_with("arbiter rejected every candidate (local: answered; cloud: answered)"),
        "{error}"
    );
}

#[test]
fn no_candidate_when_the_built_in_rule_has_nothing() {
    // The arbiter is only asked about two candidates or more; the built-in
    // rule's empty case is its documented floor.
    let mut sim = Sim::begin(setup(Policy::BestOf));
    assert_eq!(sim.core.on_arbitrated(None), None);
    sim.feed(Input::HedgeDue, 5);
    let out = sim.settle(5);
    assert_decision(
        &out,
        RunStatus::Failed,
        None,
        Reason::NoCandidate,
        DecidedBy::Nobody,
    );
}

#[test]
fn no_usable_answer_when_every_lane_failed() {
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.fail(Lane::Local, 10);
    assert!(!sim.settle_now);
    sim.finish(Lane::Cloud, "half", FinishReason::Cancelled, 20);
    let out = sim.settle(20);
    assert_decision(
        &out,
        RunStatus::Failed,
        None,
        Reason::NoUsableAnswer,
        DecidedBy::Nobody,
    );
    let error = out.error.unwrap();
    assert!(
        error.contains("local: failed (transport): connection reset"),
        "{error}"
    );
    assert!(
        error.contains("cloud: unusable answer (cancelled)"),
        "{error}"
    );
}

#[test]
fn committed_lane_completed() {
    let mut sim = Sim::begin(streaming(Policy::Race));
    sim.token(Lane::Cloud, "he", 10);
    assert_eq!(sim.forwarded, ["he"]);
    assert_eq!(
        sim.cancelled,
        [Lane::Local],
        "committing cancels the other lane"
    );
    sim.token(Lane::Local, "xx", 11);
    sim.answer(Lane::Cloud, "hello", 20);
    let out = sim.settle(20);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        Reason::CommittedCompleted(Lane::Cloud),
        DecidedBy::Policy,
    );
    assert_eq!(out.committed, Some(Lane::Cloud));
}

#[test]
fn committed_lane_stopped_early() {
    for (reason, status) in [
        (FinishReason::Cancelled, RunStatus::Failed),
        (FinishReason::Deadline, RunStatus::DeadlineExceeded),
    ] {
        let mut sim = Sim::begin(streaming(Policy::LocalOnly));
        sim.token(Lane::Local, "he", 10);
        sim.finish(Lane::Local, "he", reason, 20);
        let out = sim.settle(20);
        assert_decision(
            &out,
            status,
            None,
            Reason::CommittedStoppedEarly(Lane::Local),
            DecidedBy::Nobody,
        );
        assert_eq!(
            out.error.unwrap(),
            format!("committed lane local stopped early ({})", reason.as_str())
        );
    }
}

#[test]
fn committed_lane_failed() {
    // A single-lane plan has no other lane to continue the answer.
    let mut sim = Sim::begin(streaming(Policy::LocalOnly));
    sim.token(Lane::Local, "he", 10);
    sim.fail(Lane::Local, 20);
    let out = sim.settle(20);
    assert_decision(
        &out,
        RunStatus::Failed,
        None,
        Reason::CommittedFailed(Lane::Local),
        DecidedBy::Nobody,
    );
    assert!(out
        .error
        .unwrap()
        .starts_with("committed lane local failed: (transport) connection reset"));
}

#[test]
fn aborted_and_an_accepted_abort_always_wins() {
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.feed(Input::Abort, 10);
    assert_eq!(sim.cancelled, [Lane::Local, Lane::Cloud]);
    let out = sim.settle(11);
    assert_decision(
        &out,
        RunStatus::Aborted,
        None,
        Reason::Aborted,
        DecidedBy::Nobody,
    );
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Late);

    let mut sim = Sim::begin(setup(Policy::LocalOnly));
    sim.answer(Lane::Local, "l", 10);
    let out = sim.settle_aborted(10, true);
    assert_decision(
        &out,
        RunStatus::Aborted,
        None,
        Reason::Aborted,
        DecidedBy::Nobody,
    );
}

#[test]
fn committed_lane_completed_at_the_deadline() {
    let mut s = streaming(Policy::Race);
    s.callbacks.scorer = true;
    let mut sim = Sim::begin(s);
    sim.token(Lane::Local, "he", 10);
    sim.answer(Lane::Local, "hello", 9_000);
    assert!(
        sim.pending(CallbackKind::Score),
        "still scoring at the deadline"
    );
    sim.feed(Input::Deadline, DEADLINE_MS);
    assert!(sim.settle_now, "the deadline never waits the cancel grace");
    let out = sim.settle(DEADLINE_MS);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        Reason::CommittedAtDeadline(Lane::Local),
        DecidedBy::Policy,
    );
}

#[test]
fn deadline_while_the_committed_lane_runs() {
    let mut sim = Sim::begin(streaming(Policy::Race));
    sim.token(Lane::Local, "he", 10);
    sim.feed(Input::Deadline, DEADLINE_MS);
    let out = sim.settle(DEADLINE_MS);
    assert_decision(
        &out,
        RunStatus::DeadlineExceeded,
        None,
        Reason::DeadlineWhileCommitted(Lane::Local),
        DecidedBy::Nobody,
    );
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Late);
    assert_eq!(
        out.lane(Lane::Local).cancel,
        Some(CancelResult::StillRunning)
    );
}

#[test]
fn deadline_takes_the_best_answer_finished_by_then() {
    // One finished candidate: the policy's own pick.
    let mut sim = Sim::begin(scored(Policy::hedge(Duration::from_secs(5)), Some(0.9)));
    sim.answer(Lane::Local, "l", 10);
    sim.score(Lane::Local, 0.5, 11);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud], "escalated");
    sim.feed(Input::Deadline, DEADLINE_MS);
    let out = sim.settle(DEADLINE_MS);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        Reason::DeadlineBestFinished(Lane::Local),
        DecidedBy::Policy,
    );
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::Late);

    // Two, with the arbiter still thinking: the built-in rule.
    let mut sim = arbitrated();
    sim.feed(Input::Deadline, DEADLINE_MS);
    let out = sim.settle(DEADLINE_MS);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        Reason::DeadlineBestFinished(Lane::Cloud),
        DecidedBy::BuiltIn,
    );
    assert_eq!(
        out.callbacks[0].status,
        crate::harness::CallbackStatus::TimedOut
    );
}

#[test]
fn deadline_with_no_usable_answer() {
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.feed(Input::Deadline, DEADLINE_MS);
    assert!(sim.event_names().contains(&"deadline_reached"));
    let out = sim.settle(DEADLINE_MS + 1);
    assert_decision(
        &out,
        RunStatus::DeadlineExceeded,
        None,
        Reason::DeadlineNoUsableAnswer,
        DecidedBy::Nobody,
    );
    assert_eq!(out.late_workers, 2);
    assert_eq!(out.overshoot_ms, 1.0);

    // Lanes cut by the deadline can return before the run's own timer.
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.finish(Lane::Local, "pa", FinishReason::Deadline, DEADLINE_MS);
    sim.finish(Lane::Cloud, "pa", FinishReason::Deadline, DEADLINE_MS);
    assert!(sim.settle_now);
    let out = sim.settle(DEADLINE_MS);
    assert_decision(
        &out,
        RunStatus::DeadlineExceeded,
        None,
        Reason::DeadlineNoUsableAnswer,
        DecidedBy::Nobody,
    );
}

use crate::harness::outcome::CancelResult;

#[test]
fn a_blank_whole_answer_from_the_only_lane_is_returned() {
    let mut sim = Sim::begin(setup(Policy::LocalOnly));
    sim.finish(Lane::Local, "\n\n\n", FinishReason::Length, 10);
    let out = sim.settle(10);
    let reason = Reason::OnlyCandidate {
        pool: Pool::Blank,
        lane: Lane::Local,
    };
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        reason,
        DecidedBy::Policy,
    );
    assert_eq!(out.text.as_deref(), Some("\n\n\n"));
}

#[test]
fn a_hybrid_policy_prefers_the_other_lane_to_a_blank_answer_and_keeps_it_when_that_fails() {
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.finish(Lane::Local, "  ", FinishReason::Stop, 10);
    assert!(!sim.settle_now, "a blank answer is not acceptable");
    sim.fail(Lane::Cloud, 20);
    let out = sim.settle(20);
    let reason = Reason::OnlyCandidate {
        pool: Pool::Blank,
        lane: Lane::Local,
    };
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        reason,
        DecidedBy::Policy,
    );
}

#[test]
fn a_cut_answer_is_named_by_its_finish_reason_not_as_blank() {
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.finish(Lane::Local, " ", FinishReason::Cancelled, 10);
    sim.fail(Lane::Cloud, 20);
    let out = sim.settle(20);
    let error = out.error.unwrap();
    assert!(
        error.contains("local: unusable answer (cancelled)"),
        "{error}"
    );
}
