//! The named policies: race, hedge, cascade, fallback, best-of.

use super::*;

#[test]
fn race_first_acceptable_wins_and_the_loser_is_cancelled() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("   "); // blank: not acceptable
    ct.complete("cloud answer");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert_eq!(out.text.as_deref(), Some("cloud answer"));
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Completed);

    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("local answer");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    assert!(ct.is_cancelled());
    let c = out.lane(Lane::Cloud);
    assert_eq!(
        (c.status, c.cancel),
        (LaneStatus::Cancelled, Some(CancelResult::StoppedInTime))
    );
}

#[test]
fn race_with_both_lanes_failing_fails_and_says_why() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local
        .next_task()
        .fail(LaneErrorKind::Model, "out of memory");
    cloud
        .next_task()
        .fail(LaneErrorKind::Unreachable, "refused");
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::Failed);
    let e = out.error.clone().unwrap();
    assert!(e.contains("out of memory") && e.contains("refused"), "{e}");
    let cloud_error = out.lane(Lane::Cloud).error.clone().unwrap();
    assert_eq!(cloud_error.kind(), LaneErrorKind::Unreachable);
    assert_eq!(cloud_error.message(), "refused");
}

#[test]
fn hedge_waits_for_its_delay_and_skips_it_when_the_primary_fails() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::hedge(Duration::from_secs(3600)))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("quick");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::NotStarted);
    assert!(cloud.try_task().is_none());

    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().fail(LaneErrorKind::Model, "x");
    cloud.next_task().complete("hedged");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(out
        .lane(Lane::Cloud)
        .note
        .as_deref()
        .unwrap()
        .contains("local failed"));

    // A short delay: the hedge starts while the primary still runs.
    let h = both(&local, &cloud, Policy::hedge(Duration::from_millis(1)))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let lt = local.next_task();
    cloud.next_task().complete("hedge won");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(lt.is_cancelled());
}

#[test]
fn hedge_without_a_delay_learns_it_from_the_primarys_latency() {
    // Until the primary has 8 successful jobs the hedge waits half the
    // deadline (30 s here: the test would hang); after 8 quick ones it
    // waits their p95, so the hedge starts while the primary is held.
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(
        &local,
        &cloud,
        Policy::from_kind(edgecloud::harness::PolicyKind::Hedge),
    )
    .build()
    .unwrap();
    for _ in 0..8 {
        let run = h
            .start(req("q"), RunOptions::new().policy(Policy::LocalOnly))
            .unwrap();
        local.next_task().complete("quick");
        run.wait().unwrap();
    }
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let lt = local.next_task();
    cloud.next_task().complete("hedged");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert!(out
        .lane(Lane::Cloud)
        .note
        .as_deref()
        .unwrap()
        .contains("hedge delay"));
    assert!(lt.is_cancelled());
}

#[test]
fn cascade_keeps_a_good_local_answer_and_escalates_a_poor_one() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::cascade(0.5))
        .scorer(scorer_by_text(|t| {
            if t.starts_with("good") {
                0.9
            } else {
                0.1
            }
        }))
        .compressor(KeepRecent::new(8))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("good local");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.decision.scores[&Lane::Local], Some(0.9));
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::NotStarted);
    assert!(cloud.try_task().is_none());

    let mut long = Request::user("the question");
    long.messages
        .insert(0, ChatMessage::user("an old turn ".repeat(50)));
    long.messages.insert(0, ChatMessage::system("be brief"));
    let run = h.start(long, RunOptions::new()).unwrap();
    local.next_task().complete("poor local");
    let ct = cloud.next_task();
    let roles: Vec<&str> = ct.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        roles,
        ["be brief", "the question"],
        "compressed for the cloud"
    );
    ct.complete("good cloud");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    let t = &out.lane(Lane::Cloud).tokens;
    assert!(t.compressor_before.unwrap() > t.compressor_after.unwrap());
    assert_eq!(out.lane(Lane::Local).text.as_deref(), Some("poor local"));
}

#[test]
fn cascade_falls_back_to_a_low_scored_local_answer_when_the_cloud_fails() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::cascade(0.5))
        .scorer(scorer_by_text(|_| 0.1))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("meh");
    cloud.next_task().fail(LaneErrorKind::ServerError, "503");
    let out = run.wait().unwrap();
    assert_eq!(out.status, RunStatus::Ok);
    assert_eq!(out.winner, Some(Lane::Local));
    assert!(
        out.decision.reason.contains("no acceptable"),
        "{}",
        out.decision.reason
    );
}

#[test]
fn fallback_goes_cloud_first_and_local_when_the_cloud_fails() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::fallback()).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    cloud.next_task().complete("cloud");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud));
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::NotStarted);

    let run = h.start(req("q"), RunOptions::new()).unwrap();
    cloud
        .next_task()
        .fail(LaneErrorKind::Unreachable, "offline");
    local.next_task().complete("local");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
}

#[test]
fn best_of_lets_the_arbiter_pick() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::BestOf)
        .scorer(scorer_by_text(|t| t.len() as f64))
        .arbiter(|c: &[Scored]| c.iter().position(|s| s.lane == Lane::Local))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    ct.complete("the longer cloud answer");
    lt.complete("local");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    assert_eq!(out.decision.decided_by, DecidedBy::Arbiter);
    assert_eq!(out.decision.scores[&Lane::Cloud], Some(23.0));

    // Without an arbiter: the built-in rule takes the highest score.
    let h = both(&local, &cloud, Policy::BestOf)
        .scorer(scorer_by_text(|t| t.len() as f64))
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("local");
    ct.complete("the longer cloud answer");
    assert_eq!(run.wait().unwrap().winner, Some(Lane::Cloud));
}

#[test]
fn the_pre_score_can_skip_the_cloud() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let rec = Recorder::new();
    let h = both(&local, &cloud, Policy::Race)
        .observer(rec.clone())
        .pre_score(|r: &Request| {
            if r.messages[0].content.starts_with("heater") {
                CloudNeed::NotNeeded
            } else {
                CloudNeed::Needed
            }
        })
        .build()
        .unwrap();
    let run = h.start(req("heater on"), RunOptions::new()).unwrap();
    rec.wait_for(|e| {
        matches!(
            e,
            Event::LaneSkipped {
                lane: Lane::Cloud,
                ..
            }
        )
    });
    local.next_task().complete("heater is on");
    let out = run.wait().unwrap();
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::Skipped);
    assert!(cloud.try_task().is_none());
}

#[test]
fn a_policy_needing_a_missing_lane_runs_with_what_there_is() {
    let local = Scripted::new("l");
    let h = Harness::builder()
        .local(local.clone())
        .policy(Policy::Race)
        .deadline(LONG)
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("only local");
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
    let c = out.lane(Lane::Cloud);
    assert_eq!(
        (c.status, c.note.as_deref()),
        (LaneStatus::NotStarted, Some("lane not configured"))
    );

    let out = h
        .run_blocking_with(req("q"), RunOptions::new().policy(Policy::CloudOnly))
        .unwrap();
    assert_eq!(out.status, RunStatus::Failed);
}
