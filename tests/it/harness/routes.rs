//! Routes, configuration and the outcome's shape.

use super::*;

#[test]
fn routes_carry_their_own_policy_deadline_and_callbacks() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race)
        .route(
            "vehicle_control",
            Route::new(Policy::LocalOnly).deadline(Duration::from_millis(200)),
        )
        .route(
            "general_qa",
            Route::new(Policy::cascade(0.5)).scorer(scorer_by_text(|_| 1.0)),
        )
        .build()
        .unwrap();
    let run = h
        .start(req("heater"), RunOptions::new().route("vehicle_control"))
        .unwrap();
    local.next_task().complete("on");
    let out = run.wait().unwrap();
    assert_eq!(
        (out.route.as_str(), out.deadline_ms),
        ("vehicle_control", 200.0)
    );
    assert_eq!(out.policy, edgecloud::harness::PolicyKind::LocalOnly);

    let run = h
        .start(req("why"), RunOptions::new().route("general_qa"))
        .unwrap();
    local.next_task().complete("because");
    let out = run.wait().unwrap();
    assert_eq!(out.decision.scores[&Lane::Local], Some(1.0));
    assert_eq!(out.deadline_ms, LONG.as_millis() as f64, "inherited");

    match h.start(req("x"), RunOptions::new().route("nope")) {
        Err(HarnessError::UnknownRoute { name, known }) => {
            assert_eq!(name, "nope");
            assert_eq!(known, ["default", "general_qa", "vehicle_control"]);
        }
        other => panic!("{other:?}"),
    }
    // A request's own deadline wins over the route's.
    let run = h
        .start(
            with_deadline("x", Duration::from_millis(1234)),
            RunOptions::new(),
        )
        .unwrap();
    let (lt, ct) = (local.next_task(), cloud.next_task());
    lt.complete("x");
    drop(ct);
    assert_eq!(run.wait().unwrap().deadline_ms, 1234.0);
}

#[test]
fn config_files_define_routes_and_name_registered_callbacks() {
    let local = Scripted::new("l");
    let cfg = HarnessConfig::from_toml_str(
        r#"
        [harness]
        policy = "local-only"
        deadline_ms = 60000
        scorer = "by_len"
        default_route = "chat"

        [routes.chat]
        policy = "local-only"
        deadline_ms = 45000

        [routes.fast]
        policy = "local-only"
        deadline_ms = 150
        scorer = "none"
        "#,
    )
    .unwrap();
    let h = Harness::builder()
        .local(local.clone())
        .register_scorer("by_len", scorer_by_text(|t| t.len() as f64))
        .config(&cfg)
        .unwrap()
        .build()
        .unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    local.next_task().complete("four");
    let out = run.wait().unwrap();
    assert_eq!((out.route.as_str(), out.deadline_ms), ("chat", 45000.0));
    assert_eq!(out.decision.scores[&Lane::Local], Some(4.0));
    let run = h.start(req("q"), RunOptions::new().route("fast")).unwrap();
    local.next_task().complete("four");
    let out = run.wait().unwrap();
    assert_eq!(out.decision.scores[&Lane::Local], None);

    let err = Harness::builder().config(&cfg).unwrap_err();
    assert!(err.to_string().contains("`by_len`"), "{err}");
}

#[test]
fn the_outcome_serialises_with_every_documented_field() {
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::BestOf).build().unwrap();
    let run = h.start(req("q"), RunOptions::new()).unwrap();
    let mut c = Candidate::new("The capital of France is Paris.", FinishReason::Stop)
        .with_logprobs(vec![-0.1, -0.2]);
    c.tokens = TokenCounts {
        local_prompt: Some(12),
        local_completion: Some(2),
        ..TokenCounts::default()
    };
    local.next_task().complete_with(c);
    let mut c = Candidate::new("Paris.", FinishReason::Stop);
    c.tokens.provider_prompt = Some(15);
    c.tokens.provider_completion = Some(3);
    cloud.next_task().complete_with(c);
    let out = run.wait().unwrap();
    let json = serde_json::to_value(&out).unwrap();
    for key in [
        "run_id",
        "policy",
        "status",
        "winner",
        "text",
        "deadline_ms",
        "elapsed_ms",
        "overshoot_ms",
        "decision",
        "lanes",
        "callbacks",
        "late_workers",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["policy"], "best-of");
    assert_eq!(json["status"], "ok");
    assert!(json["decision"]["reason"].is_string());
    assert!(json["decision"]["scores"]["local"].is_number());
    let lanes = json["lanes"].as_array().unwrap();
    for (l, name, prompt) in [(0, "local", 12), (1, "cloud", 15)] {
        assert_eq!(lanes[l]["lane"], name);
        assert_eq!(lanes[l]["status"], "completed");
        assert_eq!(lanes[l]["prompt_tokens"], prompt);
        for key in ["ttft_ms", "total_ms", "completion_tokens", "score", "error"] {
            assert!(lanes[l].get(key).is_some(), "lane {name} missing {key}");
        }
    }
    // Provider and tokenizer counts stay apart.
    assert_eq!(lanes[1]["tokens"]["provider_prompt"], 15);
    assert!(lanes[1]["tokens"]["local_prompt"].is_null());
    let back: Outcome = serde_json::from_value(json).unwrap();
    assert_eq!(back.run_id, out.run_id);
    assert_eq!(back.lanes.len(), 2);
}

#[tokio::test]
async fn the_async_api_works_inside_tokio_and_blocking_calls_refuse() {
    let local = Scripted::new("l");
    let h = local_only(&local);
    let l2 = local.clone();
    let answer = tokio::task::spawn_blocking(move || l2.next_task().complete("async"));
    let out = h.run(req("q")).await.unwrap();
    answer.await.unwrap();
    assert_eq!(out.text.as_deref(), Some("async"));
    assert!(matches!(
        h.run_blocking(req("q")),
        Err(HarnessError::BlockingInAsync)
    ));
    assert!(h.shutdown(HANG).await.is_clean());
}

#[test]
fn invalid_requests_are_refused_before_a_run_starts() {
    let h = Harness::builder().build().unwrap();
    let mut r = Request::user("q");
    r.sampling.max_tokens = 0;
    assert!(matches!(
        h.start(r, RunOptions::new()),
        Err(HarnessError::InvalidRequest(_))
    ));
    assert_eq!(h.stats().runs_started, 0);
}

/// Sampling is checked once, by `Request::validate` when the run starts:
/// a request built in Rust with a bad field is refused naming it, and no
/// lane sees it.
#[test]
fn a_bad_sampling_field_is_refused_at_the_request_before_any_lane() {
    use edgecloud::request::RequestField;
    let (local, cloud) = (Scripted::new("l"), Scripted::new("c"));
    let h = both(&local, &cloud, Policy::Race).build().unwrap();
    let bad = [
        (RequestField::TopP, {
            let mut r = Request::user("q");
            r.sampling.top_p = 2.0;
            r
        }),
        (RequestField::Temperature, {
            let mut r = Request::user("q");
            r.sampling.temperature = f32::NAN;
            r
        }),
        (RequestField::Stop(1), {
            let mut r = Request::user("q");
            r.sampling.stop = vec!["a".into(), String::new()];
            r
        }),
        (RequestField::Messages, {
            let mut r = Request::user("q");
            r.messages.clear();
            r
        }),
    ];
    for (field, r) in bad {
        match h.start(r, RunOptions::new()) {
            Err(HarnessError::InvalidRequest(e)) => assert_eq!(e.field, Some(field), "{e}"),
            other => panic!(
                "{field:?}: expected an invalid request, got {:?}",
                other.err()
            ),
        }
    }
    assert_eq!(h.stats().runs_started, 0);
    assert_eq!((local.counters().started, cloud.counters().started), (0, 0));
}

#[test]
fn compressed_prompts_report_estimates_apart_from_real_counts() {
    let cloud = Scripted::new("c");
    let h = Harness::builder()
        .cloud(cloud.clone())
        .policy(Policy::CloudOnly)
        .deadline(LONG)
        .compressor(|m: &[ChatMessage]| Compressed {
            messages: m[m.len() - 1..].to_vec(),
            tokens_before: Some(100),
            tokens_after: Some(10),
        })
        .build()
        .unwrap();
    let mut r = Request::user("new");
    r.messages.insert(0, ChatMessage::user("old"));
    let run = h.start(r, RunOptions::new()).unwrap();
    let t = cloud.next_task();
    assert_eq!(t.messages.len(), 1);
    let mut c = Candidate::new("ok", FinishReason::Stop);
    c.tokens.provider_prompt = Some(9);
    t.complete_with(c);
    let out = run.wait().unwrap();
    let tk = &out.lane(Lane::Cloud).tokens;
    assert_eq!(
        (
            tk.compressor_before,
            tk.compressor_after,
            tk.provider_prompt
        ),
        (Some(100), Some(10), Some(9))
    );
    assert_eq!(out.lane(Lane::Cloud).prompt_tokens, Some(9));
    let _ = Score::new(0.0);
}
