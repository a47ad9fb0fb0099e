//! Integration tests: what the OpenAI-family clients found (issue 51).
//! A request that names no `max_tokens` is not cut at a limit of serve's
//! own (the lanes get no limit but the context's and the deadline; the
//! cloud lane sends none, so the provider's applies); and a tool call or
//! schema answer cut short by its length is the model's answer, a 200
//! with finish reason `length` in every API, whole and streamed, on
//! scripted lanes and on the real SmolLM2 through the real binary.

use crate::serve::{loopback, next_task, post_to, scripted_pair, serve, ServeProcess};
use crate::support::http::{Flavor, TestServer};
use crate::support::real_model::smollm2;
use edgecloud::harness::{Candidate, Policy};
use edgecloud::request::MAX_TOKENS_UNBOUNDED;
use edgecloud::{FinishReason, ToolCall};
use serde_json::{json, Value};

fn user() -> Value {
    json!([{"role": "user", "content": "Write an 800-word essay on rivers."}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_max_tokens_has_no_limit_of_serves_own() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let root = url.trim_end_matches("/v1").to_string();
    for (base, path, body, limit) in [
        (
            &url,
            "/chat/completions",
            json!({"model": "edgecloud", "messages": user()}),
            MAX_TOKENS_UNBOUNDED,
        ),
        (
            &url,
            "/chat/completions",
            json!({"model": "edgecloud", "messages": user(), "max_tokens": 7}),
            7,
        ),
        (
            &url,
            "/completions",
            json!({"model": "edgecloud", "prompt": "Once"}),
            MAX_TOKENS_UNBOUNDED,
        ),
        (
            &url,
            "/responses",
            json!({"model": "edgecloud", "input": "Rivers?"}),
            MAX_TOKENS_UNBOUNDED,
        ),
        (
            &root,
            "/api/chat",
            json!({"model": "edgecloud", "messages": user(), "stream": false}),
            MAX_TOKENS_UNBOUNDED,
        ),
        (
            &root,
            "/api/chat",
            json!({"model": "edgecloud", "messages": user(), "stream": false,
                "options": {"num_predict": -1}}),
            MAX_TOKENS_UNBOUNDED,
        ),
    ] {
        let answer = tokio::spawn({
            let (base, body) = (base.clone(), body.clone());
            async move { post_to(&base, path, body, &[]).await }
        });
        let task = next_task(&local).await;
        assert_eq!(task.sampling.max_tokens, limit, "{path} {body}");
        task.complete("A river.");
        let (status, _, text) = answer.await.unwrap();
        assert_eq!(status, 200, "{text}");
    }
    assert!(server.shutdown().await.is_clean());
}

/// Through the real binary without `--max-tokens`: the cloud lane sends
/// no `max_tokens` for a request that named none (the provider's own
/// limit applies), and the request's own when it names one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_lane_sends_no_max_tokens_for_a_request_that_named_none() {
    let cloud = TestServer::openai(Flavor::OpenAi, &["A", " river."]).await;
    let server = ServeProcess::start(
        &[
            "--base-url",
            &cloud.base_url(),
            "--cloud-model",
            "m",
            "--policy",
            "cloud-only",
        ],
        &[],
    );
    for (body, sent) in [
        (json!({"model": "edgecloud", "messages": user()}), None),
        (
            json!({"model": "edgecloud", "messages": user(), "max_tokens": 9}),
            Some(9),
        ),
        (
            json!({"model": "edgecloud", "messages": user(), "stream": true}),
            None,
        ),
    ] {
        let (status, _, text) = post_to(&server.url, "/chat/completions", body.clone(), &[]).await;
        assert_eq!(status, 200, "{text}");
        let request = cloud.requests().pop().expect("the cloud lane asked").json();
        assert_eq!(
            request.get("max_tokens").and_then(Value::as_u64),
            sent,
            "{body} sent {request}"
        );
    }
    let (ok, err) = server.stop("-TERM");
    assert!(ok, "{err}");
}

/// A call cut short: its name whole, its arguments partial JSON.
fn cut_call() -> Candidate {
    let mut call = ToolCall::new("call_1", "get_weather", &json!({}));
    call.function.arguments = "{\"city\": \"Os".into();
    Candidate::new("", FinishReason::Length).with_tool_calls(vec![call])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_cut_by_its_length_is_a_200_with_a_length_finish_in_every_api() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let root = url.trim_end_matches("/v1").to_string();
    let openai_tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}]);
    for stream in [false, true] {
        let cases = [
            (
                url.clone(),
                "/chat/completions",
                json!({"model": "edgecloud", "messages": user(), "max_tokens": 4,
                    "tools": openai_tools, "tool_choice": "required", "stream": stream}),
            ),
            (
                url.clone(),
                "/messages",
                json!({"model": "edgecloud", "messages": user(), "max_tokens": 4,
                    "stream": stream, "tool_choice": {"type": "any"},
                    "tools": [{"name": "get_weather", "input_schema": {"type": "object",
                        "properties": {"city": {"type": "string"}}, "required": ["city"]}}]}),
            ),
            (
                root.clone(),
                "/api/chat",
                json!({"model": "edgecloud", "messages": user(), "stream": stream,
                    "tools": openai_tools, "options": {"num_predict": 4}}),
            ),
            (
                url.clone(),
                "/responses",
                json!({"model": "edgecloud", "input": "Weather?", "max_output_tokens": 4,
                    "stream": stream, "tool_choice": "required",
                    "tools": [{"type": "function", "name": "get_weather", "parameters":
                        {"type": "object", "properties": {"city": {"type": "string"}}}}]}),
            ),
        ];
        for (base, path, body) in cases {
            let answer = tokio::spawn(async move { post_to(&base, path, body, &[]).await });
            next_task(&local).await.complete_with(cut_call());
            let (status, _, text) = answer.await.unwrap();
            assert_eq!(status, 200, "{path} stream {stream}: {text}");
            let said = |needle: &str| assert!(text.contains(needle), "{path}: {needle} in {text}");
            match path {
                "/chat/completions" => {
                    said(r#""finish_reason":"length""#);
                    said(r#""arguments":"{\"city\": \"Os""#);
                }
                "/messages" => said(r#""stop_reason":"max_tokens""#),
                "/api/chat" => said(r#""done_reason":"length""#),
                _ => said(r#""status":"incomplete""#),
            }
        }
    }
    assert!(server.shutdown().await.is_clean());
}

/// On the real SmolLM2, local-only (langchain's
/// `with_structured_output(method="function_calling")` with a small
/// limit): a call or a schema answer the limit cuts is a 200 with finish
/// reason `length`, whole and streamed, never a 502 a client retries.
#[test]
fn smollm2_answers_a_call_or_schema_cut_by_max_tokens_with_a_length_finish() {
    let server = ServeProcess::local_only(smollm2(), &["--deadline-ms", "120000"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tools = json!([{"type": "function", "function": {"name": "Person",
        "description": "A person's name and age.",
        "parameters": {"type": "object", "additionalProperties": false,
            "required": ["name", "age"],
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}}}]);
    let schema = json!({"type": "json_schema", "json_schema": {"name": "person",
        "schema": {"type": "object", "required": ["name", "age"],
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}}});
    for stream in [false, true] {
        for body in [
            json!({"model": "edgecloud", "max_tokens": 5, "temperature": 0, "stream": stream,
                "messages": [{"role": "user", "content": "Anna is 31 years old."}],
                "tools": tools, "tool_choice": {"type": "function", "function": {"name": "Person"}}}),
            json!({"model": "edgecloud", "max_tokens": 3, "temperature": 0, "stream": stream,
                "messages": [{"role": "user", "content": "Anna is 31 years old."}],
                "response_format": schema}),
        ] {
            let (status, _, text) =
                rt.block_on(post_to(&server.url, "/chat/completions", body.clone(), &[]));
            assert_eq!(status, 200, "{body}: {text}");
            assert!(text.contains(r#""finish_reason":"length""#), "{text}");
        }
    }
    let (ok, err) = server.stop("-TERM");
    assert!(ok, "{err}");
}
