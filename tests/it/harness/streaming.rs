//! Streaming: commit points and what reaches the caller.

use super::*;

#[test]
fn race_streams_only_the_lane_that_produced_the_first_token() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let mut run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    ct.token("c1 ");
    assert_eq!(run.next_token_blocking().unwrap().as_deref(), Some("c1 "));
    // Committed to the cloud: local text must never reach the caller.
    lt.token("l1 ");
    ct.token("c2");
    ct.complete("c1 c2");
    assert_eq!(all_tokens(&mut run), ["c2"]);
    let out = run.wait().unwrap();
    assert_eq!(
        (out.winner, out.committed),
        (Some(Lane::Cloud), Some(Lane::Cloud))
    );
    assert!(out.ttft_ms.is_some());
    assert!(lt.is_cancelled());
}

#[test]
fn race_committing_on_completion_streams_the_winner_at_the_decision() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let rec = Recorder::new();
    let h = both(&local, &cloud, Policy::Race)
        .commit(CommitMode::Completion)
        .observer(rec.clone())
        .build()
        .unwrap();
    let mut run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    ct.token("cloud was first ");
    rec.wait_for(|e| {
        matches!(
            e,
            Event::FirstToken {
                lane: Lane::Cloud,
                ..
            }
        )
    });
    lt.token("local ");
    lt.token("wins");
    lt.complete("local wins");
    assert_eq!(all_tokens(&mut run), ["local ", "wins"]);
    let out = run.wait().unwrap();
    assert_eq!(out.winner, Some(Lane::Local));
}

#[test]
fn cascade_never_streams_a_local_answer_that_failed_its_score() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::cascade(0.5))
        .scorer(scorer_by_text(|t| if t == "cloud" { 1.0 } else { 0.0 }))
        .build()
        .unwrap();
    let mut run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let lt = local.next_task();
    lt.token("lo");
    lt.token("cal");
    lt.complete("local");
    let ct = cloud.next_task();
    ct.token("clo");
    ct.token("ud");
    ct.complete("cloud");
    assert_eq!(all_tokens(&mut run), ["clo", "ud"]);
    assert_eq!(run.wait().unwrap().winner, Some(Lane::Cloud));
}

#[test]
fn best_of_streams_only_the_winner_and_text_that_was_never_streamed() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::BestOf)
        .scorer(scorer_by_text(|t| t.len() as f64))
        .build()
        .unwrap();
    let mut run = h.start(req("q"), RunOptions::new().stream()).unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.token("short");
    lt.complete("short");
    ct.complete("a longer answer, never streamed");
    assert_eq!(all_tokens(&mut run), ["a longer answer, never streamed"]);
    assert_eq!(run.wait().unwrap().winner, Some(Lane::Cloud));
}
