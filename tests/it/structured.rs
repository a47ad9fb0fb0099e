//! Structured answers through the public API on the real models (issue
//! 24): tool calls decoded under a grammar of the declared functions on
//! SmolLM2 (a template without tool syntax: the Hermes system prompt) and
//! Qwen2.5-Coder-0.5B (its own template renders tools), the grammar check
//! giving the same greedy answers as the full pass, every sample of a
//! consensus under the schema, log-probabilities from
//! the lane's own pass, and a cascade that escalates an invalid local
//! answer to a scripted cloud. Qwen runs at 20-45 tokens/s on CI
//! machines: its generations are few and short.

use crate::support::http::TestServer;
use crate::support::real_model::{qwen05, smollm2};
use edgecloud::local::{GrammarPass, LocalConfig, LocalLane};
use edgecloud::tools::validate_call;
use edgecloud::{
    ChatMessage, CloudBackend, CloudConfig, Harness, Lane, LaneJob, LocalBackend, Policy, Request,
    Sampling, Tool, ToolCall, ToolChoice,
};
use serde_json::json;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::function(
            "get_weather",
            "Current weather in a city.",
            json!({"type": "object", "additionalProperties": false, "required": ["city"],
                "properties": {"city": {"type": "string"}}}),
        ),
        Tool::function(
            "set_timer",
            "Start a countdown timer.",
            json!({"type": "object", "additionalProperties": false, "required": ["minutes"],
                "properties": {"minutes": {"type": "integer"}}}),
        ),
        Tool::function(
            "convert_currency",
            "Convert money between currencies.",
            json!({"type": "object", "additionalProperties": false,
                "required": ["amount", "from_currency", "to_currency"],
                "properties": {"amount": {"type": "number"},
                    "from_currency": {"enum": ["USD", "EUR", "GBP"]},
                    "to_currency": {"enum": ["USD", "EUR", "GBP"]}}}),
        ),
    ]
}

fn calling(choice: ToolChoice, max_tokens: u32) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 0.0,
        tools: tools(),
        tool_choice: Some(choice),
        ..Sampling::default()
    }
}

fn config(model: &std::path::Path, pass: GrammarPass) -> LocalConfig {
    LocalConfig {
        threads: Some(2),
        context_size: Some(2048),
        grammar_pass: pass,
        ..LocalConfig::new(model)
    }
}

fn smol() -> &'static LocalLane {
    static LANE: OnceLock<LocalLane> = OnceLock::new();
    LANE.get_or_init(|| {
        LocalLane::start(config(smollm2(), GrammarPass::Check)).expect("SmolLM2 loads")
    })
}

/// A job whose streamed text is collected.
fn streamed(messages: Vec<ChatMessage>, sampling: Sampling) -> (LaneJob, Arc<Mutex<String>>) {
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&seen);
    let job = LaneJob::new(messages, sampling, far())
        .with_sink(move |piece: &str| sink.lock().unwrap().push_str(piece));
    (job, seen)
}

#[test]
fn smollm2_calls_a_declared_function_with_valid_arguments_every_time() {
    let lane = smol();
    assert_eq!(lane.info().tool_calls, "hermes (system prompt)");
    let prompts = [
        "What's the weather like in Paris?",
        "Set a timer for 10 minutes.",
        "Convert 100 US dollars to euros.",
        "Tell me a joke.",
    ];
    for prompt in prompts {
        let (job, seen) = streamed(
            vec![ChatMessage::user(prompt)],
            calling(ToolChoice::Required, 64),
        );
        let done = lane
            .generate(job)
            .unwrap_or_else(|e| panic!("{prompt}: {}", edgecloud::error_chain(&e)));
        assert_eq!(done.tool_calls.len(), 1, "{prompt}: {done:?}");
        let call = &done.tool_calls[0];
        validate_call(&tools(), &ToolChoice::Required, call)
            .unwrap_or_else(|e| panic!("{prompt}: {e}: {call:?}"));
        assert!(call.id.starts_with("call_"), "{call:?}");
        assert_eq!(done.text, "", "a forced call has no text before it");
        assert_eq!(*seen.lock().unwrap(), "", "a forced call streams nothing");
    }
    // A named function is the one called.
    let done = lane
        .generate(LaneJob::new(
            vec![ChatMessage::user("What's the weather like in Paris?")],
            calling(ToolChoice::Function("set_timer".into()), 64),
            far(),
        ))
        .unwrap();
    assert_eq!(done.tool_calls[0].function.name, "set_timer");
}

/// `auto`: the model may answer in text; a call it starts is constrained
/// and its markup is never streamed as content.
#[test]
fn smollm2_auto_never_streams_call_markup() {
    for prompt in ["What's the weather like in Oslo?", "Hello! Who are you?"] {
        let (job, seen) = streamed(
            vec![ChatMessage::user(prompt)],
            calling(ToolChoice::Auto, 64),
        );
        let done = smol().generate(job).unwrap();
        let streamed = seen.lock().unwrap().clone();
        assert!(!streamed.contains("<tool_call>"), "{prompt}: {streamed}");
        assert_eq!(
            streamed, done.text,
            "{prompt}: the content is what streamed"
        );
        for call in &done.tool_calls {
            validate_call(&tools(), &ToolChoice::Auto, call).unwrap();
        }
    }
}

/// A call's answer (`role: "tool"`) goes back to the model and it answers
/// in text; with `tool_choice` none the tools are not offered.
#[test]
fn tool_results_round_trip_on_smollm2() {
    let call = ToolCall::new("call_1", "get_weather", &json!({"city": "Oslo"}));
    let messages = vec![
        ChatMessage::user("What's the weather like in Oslo?"),
        ChatMessage::tool_calls(vec![call]),
        ChatMessage::tool("call_1", "Sunny, 21 degrees Celsius."),
    ];
    let done = smol()
        .generate(LaneJob::new(messages, calling(ToolChoice::None, 32), far()))
        .unwrap();
    assert!(done.tool_calls.is_empty());
    assert!(!done.text.trim().is_empty(), "{done:?}");
}

/// The grammar checked against the model's pick gives the same greedy
/// answers as the grammar over the whole vocabulary every token. Both
/// lanes are fresh and run the same jobs in the same order with a fixed
/// thread count, so their prompts are decoded alike (a lane that reused an
/// earlier job's cached prefix decodes fewer tokens per batch, and that
/// moves the log-probabilities in the third digit).
#[test]
fn the_checked_grammar_answers_as_the_full_pass_does() {
    let fixed = |pass| LocalConfig {
        thread_policy: edgecloud::local::ThreadPolicy::Fixed,
        ..config(smollm2(), pass)
    };
    let checked = LocalLane::start(fixed(GrammarPass::Check)).unwrap();
    let full = LocalLane::start(fixed(GrammarPass::Full)).unwrap();
    let schema = edgecloud::ResponseFormat::json_schema(
        "answer",
        json!({"type": "object", "additionalProperties": false,
            "required": ["answer", "sure"],
            "properties": {"answer": {"type": "string", "maxLength": 40},
                "sure": {"type": "boolean"}}}),
    );
    let jobs = [
        (
            "Set a timer for 3 minutes.",
            calling(ToolChoice::Required, 48),
        ),
        (
            "What is the capital of Italy?",
            Sampling {
                max_tokens: 48,
                temperature: 0.0,
                response_format: Some(schema),
                ..Sampling::default()
            },
        ),
    ];
    for (prompt, sampling) in jobs {
        let ask = |lane: &LocalLane| {
            lane.generate(LaneJob::new(
                vec![ChatMessage::user(prompt)],
                sampling.clone(),
                far(),
            ))
            .unwrap()
        };
        let (a, b) = (ask(&checked), ask(&full));
        assert_eq!(a.text, b.text, "{prompt}");
        let args = |c: &edgecloud::local::LocalCompletion| {
            c.tool_calls
                .iter()
                .map(|t| (t.function.name.clone(), t.function.arguments.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(args(&a), args(&b), "{prompt}");
        assert_eq!(a.token_logprobs, b.token_logprobs, "{prompt}");
    }
    checked.shutdown(Duration::from_secs(5));
    full.shutdown(Duration::from_secs(5));
}

/// A consensus of sampled answers under a schema: every sample decodes
/// under the grammar (each with its own seed), so each one is JSON meeting
/// the schema, and the seeded request gives the same samples twice.
#[test]
fn every_sample_of_a_consensus_meets_the_schema() {
    let lane = LocalLane::start(LocalConfig {
        max_samples: 3,
        ..config(smollm2(), GrammarPass::Check)
    })
    .unwrap();
    let schema = json!({"type": "object", "additionalProperties": false,
        "required": ["answer", "sure"],
        "properties": {"answer": {"type": "string", "maxLength": 16},
            "sure": {"type": "boolean"}}});
    let sampling = Sampling {
        max_tokens: 48,
        temperature: 0.9,
        seed: Some(7),
        response_format: Some(edgecloud::ResponseFormat::json_schema(
            "answer",
            schema.clone(),
        )),
        consensus: Some(edgecloud::Consensus::new(
            3,
            edgecloud::answer::AnswerKind::Text,
        )),
        ..Sampling::default()
    };
    let ask = || {
        lane.generate(LaneJob::new(
            vec![ChatMessage::user("What is the capital of Italy?")],
            sampling.clone(),
            far(),
        ))
        .unwrap()
    };
    let first = ask();
    assert_eq!(first.samples.len(), 3, "{first:?}");
    for sample in &first.samples {
        let value: serde_json::Value =
            serde_json::from_str(&sample.text).unwrap_or_else(|e| panic!("{e}: {:?}", sample.text));
        edgecloud::structured::validate(&schema, &value)
            .unwrap_or_else(|e| panic!("{e}: {:?}", sample.text));
    }
    let texts = |c: &edgecloud::local::LocalCompletion| {
        c.samples.iter().map(|s| s.text.clone()).collect::<Vec<_>>()
    };
    assert_eq!(texts(&first), texts(&ask()), "seeded samples repeat");
    lane.shutdown(Duration::from_secs(5));
}

/// Log-probabilities come from the lane's own pass: one entry per
/// generated token (the end-of-generation token has a signal but no entry:
/// OpenAI lists the answer's tokens), the sampled token's log-probability
/// the signal's, its alternatives most likely first (the greedy token
/// among them).
#[test]
fn logprobs_come_from_the_lanes_own_pass() {
    let done = smol()
        .generate(LaneJob::new(
            vec![ChatMessage::user("What is the capital of France?")],
            Sampling {
                max_tokens: 8,
                temperature: 0.0,
                logprobs: Some(3),
                ..Sampling::default()
            },
            far(),
        ))
        .unwrap();
    let lp = done.logprobs.expect("asked for");
    let ended_by_eog = usize::from(done.finish_reason == edgecloud::FinishReason::Stop);
    assert_eq!(lp.len() + ended_by_eog, done.token_logprobs.len());
    for (entry, signal) in lp.iter().zip(&done.token_logprobs) {
        assert_eq!(entry.logprob, *signal);
        assert_eq!(entry.top_logprobs.len(), 3);
        assert!(entry
            .top_logprobs
            .windows(2)
            .all(|w| w[0].logprob >= w[1].logprob));
        // Greedy: the token is the most likely one.
        assert_eq!(entry.top_logprobs[0].token, entry.token);
        assert_eq!(entry.bytes.as_deref(), Some(entry.token.as_bytes()));
    }
    let text: String = lp.iter().map(|e| e.token.as_str()).collect();
    assert!(
        text.starts_with(done.text.trim_end()),
        "{text:?} {:?}",
        done.text
    );
}

/// Qwen2.5's own template renders the tools and `<tool_call>`: the call
/// is parsed from its own syntax, and its tool answer round-trips.
#[test]
fn qwen_calls_tools_through_its_own_template() {
    let lane = LocalLane::start(config(qwen05(), GrammarPass::Check)).expect("Qwen loads");
    assert_eq!(lane.info().tool_calls, "hermes (template)");
    let (job, seen) = streamed(
        vec![ChatMessage::user(
            "What's the weather like in Paris right now?",
        )],
        calling(ToolChoice::Auto, 48),
    );
    let done = lane.generate(job).unwrap();
    assert_eq!(done.tool_calls.len(), 1, "{done:?}");
    let args = validate_call(&tools(), &ToolChoice::Auto, &done.tool_calls[0]).unwrap();
    assert_eq!(done.tool_calls[0].function.name, "get_weather");
    assert_eq!(
        args["city"].as_str().map(str::to_lowercase).as_deref(),
        Some("paris")
    );
    assert!(!seen.lock().unwrap().contains("<tool_call>"));

    let messages = vec![
        ChatMessage::user("What's the weather like in Paris right now?"),
        ChatMessage::tool_calls(done.tool_calls.clone()),
        ChatMessage::tool(done.tool_calls[0].id.clone(), "Rain, 12 degrees Celsius."),
    ];
    let answer = lane
        .generate(LaneJob::new(messages, calling(ToolChoice::Auto, 24), far()))
        .unwrap();
    assert!(
        answer.tool_calls.is_empty() && !answer.text.trim().is_empty(),
        "{answer:?}"
    );
    lane.shutdown(Duration::from_secs(5));
}

/// A loopback cloud that answers every request with one call of
/// `get_weather` for Oslo (a scripted stand-in, not a model).
async fn calling_cloud() -> TestServer {
    TestServer::start(|mut conn| async move {
        while let Some(req) = conn.read_request().await {
            assert!(!req.wants_stream() || req.json()["tools"].is_array());
            let body = r#"{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
                "tool_calls":[{"id":"call_c","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}}],
                "usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#;
            if req.wants_stream() {
                conn.sse_head().await.unwrap();
                for ev in [
                    r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_c","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}}]}"#,
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
                ] {
                    conn.event(ev).await.unwrap();
                }
                conn.event("[DONE]").await.unwrap();
                conn.end_chunks().await.unwrap();
            } else {
                conn.json(200, body).await.unwrap();
            }
        }
    })
    .await
}

/// Validity as acceptance, end to end: a local lane without a grammar
/// (`GrammarPass::Off`) cannot write a whole call in six tokens, the
/// cascade rejects its answer as invalid, says why, and escalates to the
/// (scripted) cloud, whose call wins.
#[test]
fn a_cascade_escalates_an_invalid_local_answer_to_the_cloud() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cloud = rt.block_on(calling_cloud());
    let harness = Harness::builder()
        .local(LocalBackend::start(config(smollm2(), GrammarPass::Off)).unwrap())
        .cloud(CloudBackend::start(CloudConfig::new(cloud.base_url(), "scripted")).unwrap())
        .policy(Policy::cascade(-100.0))
        .deadline(Duration::from_secs(120))
        .build()
        .unwrap();
    let mut request = Request::user("What's the weather like in Oslo?");
    request.sampling = calling(ToolChoice::Required, 6);
    // The loopback cloud runs on `rt`'s threads; the harness has its own.
    let out = harness.run_blocking(request).unwrap();
    assert_eq!(out.winner, Some(Lane::Cloud), "{out:#?}");
    let local = out.lane(Lane::Local);
    assert!(
        local
            .rejected
            .as_deref()
            .is_some_and(|r| r.starts_with("invalid answer")),
        "{local:?}"
    );
    assert!(
        out.lane(Lane::Cloud)
            .note
            .as_deref()
            .is_some_and(|n| n.contains("gave an invalid answer")),
        "{out:#?}"
    );
    let calls = &out.completion.as_ref().unwrap().tool_calls;
    assert_eq!(calls[0].function.name, "get_weather");
    // The cloud got the tools.
    let sent = cloud.requests()[0].json();
    assert_eq!(sent["tools"].as_array().map(Vec::len), Some(3));
    assert_eq!(sent["tool_choice"], "required");
    assert!(
        local.text.is_some(),
        "the rejected answer is kept: {local:?}"
    );
    drop(rt);
}
