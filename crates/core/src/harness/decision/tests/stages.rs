//! The rules of each stage that are not a policy or a decision reason:
//! admission answers, the cloud's preparation, streaming, the cancel
//! grace, settlement's reports and events.

use super::*;
use crate::harness::callbacks::{CallbackStatus, Compressed};
use crate::harness::outcome::CancelResult;
use crate::reasoning::Piece;
use crate::request::ChatMessage;

#[test]
fn a_busy_lane_is_absent_and_said_so() {
    let admission = PerLane::new(None, Some(Admission::Busy));
    let mut sim = Sim::begin_with(setup(Policy::Race), admission);
    assert_eq!(sim.started, [Lane::Local]);
    assert_eq!(
        sim.phase(Lane::Cloud),
        lanes::Phase::Absent(LaneStatus::Busy)
    );
    assert!(sim.event_names().contains(&"lane_busy"));
    sim.answer(Lane::Local, "l", 10);
    let out = sim.settle(10);
    assert_eq!(
        out.lane(Lane::Cloud).note.as_deref(),
        Some("another worker holds the lane")
    );
}

#[test]
fn a_down_lane_is_unavailable_with_its_retry() {
    let down = Admission::Down {
        retry_in: Duration::from_millis(1500),
        reason: "3 connect failures".into(),
    };
    let mut sim = Sim::begin_with(setup(Policy::Race), PerLane::new(None, Some(down)));
    sim.answer(Lane::Local, "l", 10);
    let out = sim.settle(10);
    let cloud = out.lane(Lane::Cloud);
    assert_eq!(cloud.status, LaneStatus::Unavailable);
    assert_eq!(cloud.retry_in_ms, Some(1500.0));
    assert_eq!(
        cloud.note.as_deref(),
        Some("down (3 connect failures); next probe in 1500 ms")
    );
}

#[test]
fn no_lane_starts_at_or_after_the_deadline() {
    let mut sim = Sim::begin(setup(Policy::hedge(Duration::from_secs(20))));
    sim.feed(Input::HedgeDue, DEADLINE_MS);
    assert_eq!(sim.started, [Lane::Local]);
    assert_eq!(
        sim.note(Lane::Cloud),
        Some("deadline reached before it started")
    );
}

#[test]
fn an_unconfigured_lane_is_not_started() {
    let mut s = setup(Policy::Race);
    s.lanes.cloud = None;
    let sim = Sim::begin(s);
    assert_eq!(sim.started, [Lane::Local]);
    assert_eq!(sim.note(Lane::Cloud), Some("lane not configured"));
}

#[test]
fn the_pre_score_can_skip_the_cloud_and_local_then_keeps_the_whole_deadline() {
    let mut s = setup(Policy::cascade(0.5));
    s.callbacks.pre_score = true;
    let mut sim = Sim::begin(s);
    assert!(sim.pending(CallbackKind::PreScore));
    assert!(sim.core.timer(TimerKind::Share).is_some());
    sim.reply(
        CallbackKind::PreScore,
        Ok(CbOutput::PreScore(CloudNeed::NotNeeded)),
        3,
    );
    assert_eq!(
        sim.phase(Lane::Cloud),
        lanes::Phase::Absent(LaneStatus::Skipped)
    );
    assert_eq!(sim.core.timer(TimerKind::Share), None);
    assert!(sim.event_names().contains(&"lane_skipped"));
}

#[test]
fn a_cloud_start_waits_for_the_pre_score_and_its_default_is_needed() {
    let mut s = setup(Policy::Race);
    s.callbacks.pre_score = true;
    let mut sim = Sim::begin(s);
    assert_eq!(
        sim.started,
        [Lane::Local],
        "the cloud waits for the pre-score"
    );
    sim.reply(CallbackKind::PreScore, Err("boom"), 3);
    assert_eq!(sim.started, [Lane::Local, Lane::Cloud]);
}

#[test]
fn the_cloud_gets_the_compressed_prompt_and_an_empty_one_is_invalid() {
    let mut s = setup(Policy::fallback());
    s.callbacks.compressor = true;
    let mut sim = Sim::begin(s.clone());
    assert!(sim.started.is_empty(), "the cloud waits for compression");
    let short = vec![ChatMessage::user("short")];
    let c = Compressed {
        messages: short.clone(),
        tokens_before: Some(90),
        tokens_after: Some(10),
    };
    sim.reply(CallbackKind::Compress, Ok(CbOutput::Compress(c)), 1);
    assert_eq!(sim.started, [Lane::Cloud]);
    assert_eq!(sim.messages.cloud, Some(Some(short)));
    sim.answer(Lane::Cloud, "c", 10);
    let out = sim.settle(10);
    assert_eq!(out.lane(Lane::Cloud).tokens.compressor_after, Some(10));

    let mut sim = Sim::begin(s);
    sim.reply(
        CallbackKind::Compress,
        Ok(CbOutput::Compress(Compressed::from(
            Vec::<ChatMessage>::new(),
        ))),
        1,
    );
    assert_eq!(sim.messages.cloud, Some(None), "uncompressed");
    sim.answer(Lane::Cloud, "c", 10);
    let out = sim.settle(10);
    assert_eq!(out.callbacks[0].status, CallbackStatus::Invalid);
}

#[test]
fn with_completion_commit_nothing_streams_before_the_decision() {
    let mut s = setup(Policy::Race);
    s.streaming = true;
    s.commit = CommitMode::Completion;
    let mut sim = Sim::begin(s);
    sim.token(Lane::Local, "lo", 5);
    sim.token(Lane::Cloud, "cl", 6);
    assert!(sim.forwarded.is_empty());
    sim.answer(Lane::Cloud, "cloud", 10);
    let (out, effects) = sim
        .core
        .settle(sim.start + Duration::from_millis(10), false);
    let forwarded: Vec<String> = effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Forward(p) => Some(p.text().to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        forwarded,
        ["cl", "oud"],
        "the winner's buffer, then its tail"
    );
    assert_eq!(out.committed, Some(Lane::Cloud));
    assert_eq!(out.ttft_ms, Some(10.0));
}

/// A reasoning model's thinking streams as its own kind, buffered and
/// flushed with the winner like its answer, and the winner's tails of
/// both kinds (what the lane returned without streaming) follow.
#[test]
fn thinking_streams_apart_and_its_tail_is_flushed() {
    let mut s = setup(Policy::Race);
    s.streaming = true;
    s.commit = CommitMode::Completion;
    let mut sim = Sim::begin(s);
    sim.thinking(Lane::Local, "Sum", 4);
    sim.token(Lane::Cloud, "cl", 5);
    let mut c = Candidate::new("FOUR", FinishReason::Stop);
    c.reasoning = Some("Sum it.".into());
    sim.returned(Lane::Local, Ok(c), 10);
    let (_, effects) = sim
        .core
        .settle(sim.start + Duration::from_millis(10), false);
    let forwarded: Vec<Piece> = effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Forward(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(
        forwarded,
        [
            Piece::Reasoning("Sum".into()),
            Piece::Reasoning(" it.".into()),
            Piece::Answer("FOUR".into()),
        ],
        "the buffered thinking, its tail, then the answer; nothing of the loser"
    );
}

#[test]
fn cascade_does_not_commit_to_local_before_its_score() {
    let mut s = setup(Policy::cascade(0.5));
    s.streaming = true;
    let mut sim = Sim::begin(s);
    sim.token(Lane::Local, "lo", 5);
    assert!(sim.forwarded.is_empty());
    assert_eq!(sim.core.stream.committed, None);
}

#[test]
fn the_cancel_grace_never_passes_the_deadline() {
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.answer(Lane::Cloud, "c", DEADLINE_MS - 2);
    assert_eq!(sim.grace_until, Some(sim.at(DEADLINE_MS)));
    sim.feed(Input::GraceOver, DEADLINE_MS);
    assert!(sim.settle_now);
    let out = sim.settle(DEADLINE_MS);
    assert_eq!(
        out.lane(Lane::Local).cancel,
        Some(CancelResult::StillRunning)
    );
}

#[test]
fn a_worker_that_ignores_cancellation_is_not_waited_for() {
    let mut s = setup(Policy::Race);
    s.lanes.local.as_mut().unwrap().observes_cancellation = false;
    let mut sim = Sim::begin(s);
    sim.answer(Lane::Cloud, "c", 10);
    assert!(sim.settle_now);
    assert_eq!(sim.grace_until, None);
    let out = sim.settle(10);
    assert_eq!(
        out.lane(Lane::Local).cancel,
        Some(CancelResult::NotPropagated)
    );
}

#[test]
fn answers_after_the_decision_are_recorded_but_never_scored() {
    let mut s = setup(Policy::Race);
    s.callbacks.scorer = true;
    let mut sim = Sim::begin(s);
    sim.answer(Lane::Cloud, "c", 10);
    sim.score(Lane::Cloud, 0.9, 11);
    assert!(sim.calls.is_empty());
    sim.answer(Lane::Local, "l", 12);
    assert!(sim.calls.is_empty(), "no score call once decided");
    let out = sim.settle(12);
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Completed);
    assert_eq!(
        out.lane(Lane::Local).cancel,
        Some(CancelResult::StoppedInTime)
    );
}

#[test]
fn a_callback_pending_at_settlement_is_reported_timed_out() {
    let mut s = setup(Policy::Race);
    s.callbacks.pre_score = true;
    let mut sim = Sim::begin(s);
    sim.answer(Lane::Local, "l", 40);
    let out = sim.settle(40);
    let cb = &out.callbacks[0];
    assert_eq!(
        (cb.kind, cb.status),
        (CallbackKind::PreScore, CallbackStatus::TimedOut)
    );
    assert_eq!(cb.elapsed_ms, 40.0);
    assert!(cb.over_budget);
    assert_eq!(cb.detail.as_deref(), Some("abandoned at settlement"));
}

#[test]
fn events_come_in_run_order_and_settlement_ends_them() {
    let mut sim = Sim::begin(setup(Policy::Race));
    sim.token(Lane::Local, "x", 5);
    sim.answer(Lane::Local, "x", 10);
    sim.finish(Lane::Cloud, "", FinishReason::Cancelled, 11);
    let mut names = sim.event_names();
    let (_, effects) = sim
        .core
        .settle(sim.start + Duration::from_millis(11), false);
    names.extend(effects.iter().filter_map(|e| match e {
        Effect::Emit(ev) => Some(ev.name()),
        _ => None,
    }));
    assert_eq!(
        names,
        [
            "run_started",
            "lane_admitted",
            "lane_admitted",
            "first_token",
            "lane_finished",
            "lane_finished",
            "decision",
            "run_settled"
        ]
    );
}
