//! One test (or more) per policy: what starts, when the secondary starts,
//! how the winner is picked.

use super::*;

#[test]
fn local_only_runs_local_alone_and_takes_its_answer() {
    let mut sim = Sim::begin(setup(Policy::LocalOnly));
    assert_eq!(sim.started, [Lane::Local]);
    assert_eq!(
        sim.phase(Lane::Cloud),
        lanes::Phase::Absent(LaneStatus::NotStarted)
    );
    assert_eq!(sim.note(Lane::Cloud), Some("not used by local-only"));
    sim.answer(Lane::Local, "hi", 100);
    assert!(sim.settle_now);
    let out = sim.settle(100);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        Reason::FirstAcceptable(Lane::Local),
        DecidedBy::Policy,
    );
    assert_eq!(out.text.as_deref(), Some("hi"));
}

#[test]
fn cloud_only_runs_the_cloud_alone_without_asking_the_pre_score() {
    let mut s = setup(Policy::CloudOnly);
    s.callbacks.pre_score = true;
    let mut sim = Sim::begin(s);
    assert_eq!(sim.started, [Lane::Cloud]);
    assert!(
        sim.calls.is_empty(),
        "cloud-only never consults the pre-score"
    );
    assert_eq!(sim.note(Lane::Local), Some("not used by cloud-only"));
    sim.answer(Lane::Cloud, "c", 40);
    let out = sim.settle(40);
    assert_eq!(out.winner, Some(Lane::Cloud));
}

#[test]
fn race_starts_both_and_the_first_acceptable_answer_cancels_the_other() {
    let mut sim = Sim::begin(setup(Policy::Race));
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    sim.answer(Lane::Cloud, "c", 50);
    assert_eq!(sim.cancelled, [Lane::Local]);
    // Local observes cancellation: the run waits the cancel grace for it.
    assert_eq!(sim.grace_until, Some(sim.at(55)));
    assert!(!sim.settle_now);
    sim.finish(Lane::Local, "par", FinishReason::Cancelled, 52);
    assert!(sim.settle_now, "the cancelled worker returned: settle");
    let out = sim.settle(52);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        Reason::FirstAcceptable(Lane::Cloud),
        DecidedBy::Policy,
    );
    let local = out.lane(Lane::Local);
    assert_eq!(local.cancel, Some(CancelResult::StoppedInTime));
    assert_eq!(local.note.as_deref(), Some("run decided without it"));
}

#[test]
fn hedge_starts_the_secondary_after_its_delay() {
    let mut sim = Sim::begin(setup(Policy::hedge(Duration::from_millis(200))));
    assert_eq!(sim.started, [Lane::Local]);
    assert_eq!(sim.core.timer(TimerKind::Hedge), Some(sim.at(200)));
    assert_eq!(sim.core.timer(TimerKind::Share), None);
    sim.feed(Input::HedgeDue, 200);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    assert_eq!(sim.note(Lane::Cloud), Some("started after the hedge delay"));
    assert_eq!(sim.core.timer(TimerKind::Hedge), None);
    sim.answer(Lane::Cloud, "c", 300);
    assert_eq!(
        sim.settle(300).winner,
        Some(Lane::Cloud),
        "first acceptable"
    );
}

#[test]
fn hedge_without_a_delay_waits_the_primarys_p95_else_half_the_deadline() {
    let hedge = Policy::Hedge {
        primary: Lane::Local,
        delay: None,
    };
    let sim = Sim::begin(setup(hedge.clone()));
    assert_eq!(
        sim.core.timer(TimerKind::Hedge),
        Some(sim.at(DEADLINE_MS / 2))
    );
    let mut s = setup(hedge);
    s.lanes.local.as_mut().unwrap().p95 = Some(Duration::from_millis(300));
    let sim = Sim::begin(s);
    assert_eq!(sim.core.timer(TimerKind::Hedge), Some(sim.at(300)));
}

#[test]
fn hedge_starts_the_secondary_at_once_when_the_primary_is_busy() {
    let admission = PerLane::new(Some(Admission::Busy), None);
    let sim = Sim::begin_with(setup(Policy::hedge(Duration::from_secs(3))), admission);
    assert_eq!(sim.started, [Lane::Cloud]);
    assert_eq!(
        sim.note(Lane::Cloud),
        Some("started because local was busy")
    );
    assert_eq!(
        sim.core.timer(TimerKind::Hedge),
        None,
        "the hedge timer is disarmed"
    );
}

fn cascade(threshold: f64) -> CoreSetup {
    let mut s = setup(Policy::cascade(threshold));
    s.callbacks.scorer = true;
    s
}

#[test]
fn cascade_escalates_when_the_local_score_is_below_its_threshold() {
    let mut sim = Sim::begin(cascade(0.5));
    assert_eq!(sim.started, [Lane::Local]);
    sim.answer(Lane::Local, "l", 100);
    assert!(sim.pending(CallbackKind::Score));
    sim.score(Lane::Local, 0.49, 101);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    assert_eq!(
        sim.note(Lane::Cloud),
        Some("started because local scored below the threshold")
    );
    sim.answer(Lane::Cloud, "c", 300);
    // The threshold is the primary's: any cloud score is acceptable.
    sim.score(Lane::Cloud, 0.1, 301);
    let out = sim.settle(301);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Cloud),
        Reason::FirstAcceptable(Lane::Cloud),
        DecidedBy::Policy,
    );
}

#[test]
fn cascade_keeps_a_local_answer_scored_at_its_threshold() {
    let mut sim = Sim::begin(cascade(0.5));
    sim.answer(Lane::Local, "l", 100);
    sim.score(Lane::Local, 0.5, 101);
    assert_eq!(sim.started, [Lane::Local], "the cloud never starts");
    let out = sim.settle(101);
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(
        out.lane(Lane::Cloud).note.as_deref(),
        Some("run decided without it")
    );
}

#[test]
fn cascade_escalates_when_local_overruns_its_share_and_cancels_local() {
    let mut sim = Sim::begin(cascade(0.5));
    assert_eq!(
        sim.core.timer(TimerKind::Share),
        Some(sim.at(DEADLINE_MS / 2))
    );
    sim.feed(Input::ShareDue, 5_000);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    assert_eq!(
        sim.note(Lane::Cloud),
        Some("local overran its share of the deadline")
    );
    assert_eq!(sim.cancelled, [Lane::Local]);
    assert_eq!(
        sim.note(Lane::Local),
        Some("overran its share of the deadline; cancelled to escalate")
    );
}

#[test]
fn cascade_keeps_local_running_when_the_cloud_cannot_take_over() {
    let mut sim = Sim::begin(cascade(0.5));
    sim.admission.cloud = Some(Admission::Busy);
    sim.feed(Input::ShareDue, 5_000);
    assert!(
        sim.cancelled.is_empty(),
        "cutting local would leave nothing"
    );
    assert_eq!(
        sim.note(Lane::Local),
        Some("overran its share, but cloud could not start; kept running")
    );
    sim.answer(Lane::Local, "l", 6_000);
    sim.score(Lane::Local, 0.9, 6_001);
    assert_eq!(sim.settle(6_001).winner, Some(Lane::Local));
}

#[test]
fn fallback_starts_the_cloud_and_falls_back_to_local_when_it_fails() {
    let mut sim = Sim::begin(setup(Policy::fallback()));
    assert_eq!(sim.started, [Lane::Cloud]);
    assert_eq!(
        sim.core.timer(TimerKind::Share),
        Some(sim.at(DEADLINE_MS / 2))
    );
    sim.fail(Lane::Cloud, 80);
    assert_eq!(sim.started, [Lane::Cloud, Lane::Local]);
    assert_eq!(sim.note(Lane::Local), Some("started because cloud failed"));
    sim.answer(Lane::Local, "l", 200);
    let out = sim.settle(200);
    assert_decision(
        &out,
        RunStatus::Ok,
        Some(Lane::Local),
        Reason::FirstAcceptable(Lane::Local),
        DecidedBy::Policy,
    );
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::Failed);
}

#[test]
fn best_of_waits_for_both_and_takes_the_higher_score() {
    let mut s = setup(Policy::BestOf);
    s.callbacks.scorer = true;
    let mut sim = Sim::begin(s);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
    sim.answer(Lane::Local, "l", 100);
    sim.score(Lane::Local, 0.4, 101);
    assert!(
        !sim.settle_now,
        "best-of does not take the first acceptable answer"
    );
    assert!(sim.cancelled.is_empty());
    sim.answer(Lane::Cloud, "c", 200);
    sim.score(Lane::Cloud, 0.9, 201);
    let out = sim.settle(201);
    let reason = Reason::HighestScore {
        pool: Pool::Acceptable,
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
        out.lane(Lane::Local).text.as_deref(),
        Some("l"),
        "the loser's text is reported"
    );
}

use crate::harness::outcome::CancelResult;
