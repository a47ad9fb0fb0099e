//! Front-door tests against a scripted engine: the HTTP and OpenAI wire
//! contract, checked with a real OpenAI client library (`async-openai`)
//! and raw HTTP where a client library would hide the detail (status
//! lines, headers, malformed bodies, the SSE bytes). The harness-backed
//! paths are tested in `tests/it/serve.rs`.
//!
//! The script is chosen by the last user message: `busy`, `deadline`,
//! `fail-mid`, `hold` (waits for the test before its first token, or
//! before its whole answer), `slow`
//! (one token, then waits, then many), anything else is echoed back word by
//! word.

use super::engine::{
    BoxFuture, Drained, Engine, Health, Job, LaneState, LaneStatus, LaneSummary, ModelEntry, Param,
    Run, RunInfo, StartError, Status, Summary, Tokens,
};
use super::{BearerToken, ServeConfig, Server, ServerHandle};
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::{
    ChatCompletionRequestUserMessageArgs, ChatCompletionStreamOptions, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs, FinishReason as OaFinish, Role as OaRole,
};
use edgecloud_core::lane::{FinishReason, Lane};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Safety net: a test that would otherwise hang fails after this long.
/// Never used to synchronise.
const HANG: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Gate {
    started: Notify,
    release: Notify,
    aborted: AtomicBool,
    aborted_signal: Notify,
}

#[derive(Default)]
struct Fake {
    next_id: AtomicU64,
    jobs: Mutex<Vec<Job>>,
    gate: Arc<Gate>,
    shutdown_called: AtomicBool,
}

fn lane(lane: Lane, status: LaneStatus) -> LaneSummary {
    LaneSummary::empty(lane, status)
}

impl Fake {
    fn last_job(&self) -> Job {
        self.jobs.lock().unwrap().last().cloned().expect("a job")
    }
}

enum Script {
    Echo,
    Hold,
    Slow,
}

struct FakeRun {
    info: RunInfo,
    stream: bool,
    script: Script,
    tokens: VecDeque<String>,
    summary: Summary,
    gate: Arc<Gate>,
}

impl Run for FakeRun {
    fn info(&self) -> &RunInfo {
        &self.info
    }

    fn next_piece(&mut self) -> BoxFuture<'_, Option<edgecloud_core::reasoning::Piece>> {
        Box::pin(async move {
            if !self.stream {
                return None;
            }
            match self.script {
                Script::Hold => {
                    self.gate.started.notify_one();
                    self.gate.release.notified().await;
                    self.script = Script::Echo;
                }
                Script::Slow if self.tokens.len() == 9_999 => {
                    self.gate.release.notified().await;
                }
                _ => {}
            }
            self.tokens
                .pop_front()
                .map(edgecloud_core::reasoning::Piece::Answer)
        })
    }

    fn finish(self: Box<Self>) -> BoxFuture<'static, Result<Summary, String>> {
        // A whole answer to `hold` waits for the test too.
        let hold = !self.stream && matches!(self.script, Script::Hold);
        Box::pin(async move {
            if hold {
                self.gate.started.notify_one();
                self.gate.release.notified().await;
            }
            let mut s = self.summary;
            if self.gate.aborted.load(Ordering::SeqCst) {
                s.status = Status::Aborted;
            }
            Ok(s)
        })
    }

    fn aborter(&self) -> Box<dyn Fn() + Send + Sync> {
        let gate = self.gate.clone();
        Box::new(move || {
            gate.aborted.store(true, Ordering::SeqCst);
            gate.aborted_signal.notify_one();
        })
    }
}

impl Engine for Fake {
    fn models(&self) -> Vec<ModelEntry> {
        vec![
            ModelEntry::route("edgecloud", None),
            ModelEntry::route("fast", Some("fast".into())),
        ]
    }

    fn start(&self, job: Job) -> BoxFuture<'_, Result<Box<dyn Run>, StartError>> {
        let started = self.start_now(job);
        Box::pin(async move { started })
    }

    fn health(&self) -> Health {
        self.health_now()
    }
    fn shutdown(&self, grace: Duration) -> BoxFuture<'static, Drained> {
        self.shutdown_now(grace)
    }
}

impl Fake {
    fn start_now(&self, job: Job) -> Result<Box<dyn Run>, StartError> {
        if job.policy.as_deref() == Some("nope") {
            return Err(StartError::Invalid {
                param: Some(Param::Policy),
                message: "unknown policy `nope`".into(),
            });
        }
        self.jobs.lock().unwrap().push(job.clone());
        let run_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let prompt = job
            .request
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        let info = RunInfo {
            run_id,
            route: job.route.clone(),
            policy: job.policy.clone(),
            deadline_ms: job
                .request
                .deadline
                .map_or(1000.0, |d| d.as_millis() as f64),
            replay: false,
        };
        let mut summary = Summary {
            run_id,
            route: job.route.clone().unwrap_or_else(|| "default".into()),
            policy: job.policy.clone().unwrap_or_else(|| "race".into()),
            status: Status::Ok,
            lane: Some(Lane::Local),
            committed: job.stream.then_some(Lane::Local),
            deadline_ms: info.deadline_ms,
            elapsed_ms: 3.0,
            overshoot_ms: 0.0,
            ttft_ms: None,
            late_workers: 0,
            decision: "first acceptable: local".into(),
            error: None,
            lanes: vec![
                lane(Lane::Local, LaneStatus::Completed),
                lane(Lane::Cloud, LaneStatus::Cancelled),
            ],
            text: Some(prompt.clone()),
            finish_reason: Some(FinishReason::Stop),
            tool_calls: Vec::new(),
            logprobs: None,
            logprobs_from: None,
            stop_sequence: None,
            reasoning: None,
            reasoning_tokens: None,
            timings: None,
            prompt_stage: None,
            cost: None,
            replay: None,
            switch: None,
        };
        let words: Vec<String> = prompt.split_inclusive(' ').map(str::to_string).collect();
        summary.lanes[0].tokens = Tokens {
            local_prompt: Some(11),
            local_completion: Some(words.len() as u64),
            ..Tokens::default()
        };
        let mut tokens: VecDeque<String> = words.into();
        let mut script = Script::Echo;
        match prompt.as_str() {
            "busy" => {
                summary.status = Status::Failed;
                summary.lane = None;
                summary.text = None;
                summary.error = Some("every lane was busy".into());
                summary.lanes = vec![
                    lane(Lane::Local, LaneStatus::Busy),
                    lane(Lane::Cloud, LaneStatus::Busy),
                ];
                tokens.clear();
            }
            "deadline" => {
                summary.status = Status::DeadlineExceeded;
                summary.lane = None;
                summary.text = None;
                summary.late_workers = 1;
                summary.lanes = vec![
                    lane(Lane::Local, LaneStatus::Late),
                    lane(Lane::Cloud, LaneStatus::NotStarted),
                ];
                tokens.clear();
            }
            "fail-mid" => {
                summary.status = Status::Failed;
                summary.lane = None;
                summary.text = None;
                summary.error = Some("the committed lane failed".into());
                let mut failed = lane(Lane::Local, LaneStatus::Failed);
                failed.error = Some("model: decode failed".into());
                failed.error_kind = Some(edgecloud_core::harness::LaneErrorKind::Model);
                summary.lanes = vec![failed, lane(Lane::Cloud, LaneStatus::Cancelled)];
                tokens = VecDeque::from(["partial ".to_string()]);
            }
            "hold" => script = Script::Hold,
            "slow" => {
                script = Script::Slow;
                // Far more than the frames in flight: the pump must wait on the
                // socket, where it sees the client is gone.
                tokens = (0..10_000)
                    .map(|i| format!("t{i} {} ", "x".repeat(1024)))
                    .collect();
            }
            _ => {}
        }
        Ok(Box::new(FakeRun {
            info,
            stream: job.stream,
            script,
            tokens,
            summary,
            gate: self.gate.clone(),
        }))
    }

    fn health_now(&self) -> Health {
        Health {
            lanes: vec![
                LaneState {
                    lane: Lane::Local,
                    configured: true,
                    busy: false,
                    health: None,
                    device: None,
                },
                LaneState {
                    lane: Lane::Cloud,
                    configured: true,
                    busy: false,
                    health: None,
                    device: None,
                },
            ],
            ..Health::default()
        }
    }

    fn shutdown_now(&self, _grace: Duration) -> BoxFuture<'static, Drained> {
        self.shutdown_called.store(true, Ordering::SeqCst);
        Box::pin(async {
            Drained {
                waited_ms: 0.0,
                runs_in_flight: 0,
                workers_still_running: 0,
            }
        })
    }
}

async fn start(config: ServeConfig) -> (ServerHandle, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    let config = config.listen("127.0.0.1:0".parse().unwrap());
    let server = Server::bind_engine(fake.clone(), config)
        .await
        .expect("bind a loopback port");
    (server.spawn(), fake)
}

/// A real OpenAI client pointed at the server, without its retries (a
/// retried 503 would hide the busy answer under test).
fn client(handle: &ServerHandle, key: &str) -> async_openai::Client<OpenAIConfig> {
    let config = OpenAIConfig::new()
        .with_api_base(handle.base_url())
        .with_api_key(key);
    let no_retry = backoff::ExponentialBackoffBuilder::new()
        .with_max_elapsed_time(Some(Duration::ZERO))
        .build();
    async_openai::Client::with_config(config).with_backoff(no_retry)
}

fn ask(prompt: &str, model: &str) -> CreateChatCompletionRequest {
    ask_with(prompt, model, false)
}

/// With the `byot` feature on, `create_stream` sends the request as it is:
/// the request itself must say `stream: true`.
fn ask_stream(prompt: &str, model: &str) -> CreateChatCompletionRequest {
    ask_with(prompt, model, true)
}

fn ask_with(prompt: &str, model: &str, stream: bool) -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model(model)
        .max_completion_tokens(32u32)
        .stream(stream)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content(prompt)
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap()
}

async fn raw(
    handle: &ServerHandle,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req =
        reqwest::Client::new().request(method, format!("http://{}{path}", handle.local_addr()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    let resp = tokio::time::timeout(HANG, req.send())
        .await
        .expect("no hang")
        .expect("a response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("a body");
    (status, headers, text)
}

async fn post(
    handle: &ServerHandle,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    raw(
        handle,
        reqwest::Method::POST,
        "/v1/chat/completions",
        headers,
        Some(body.to_string().into_bytes()),
    )
    .await
}

fn user(prompt: &str) -> Value {
    json!([{"role": "user", "content": prompt}])
}

fn error_of(text: &str) -> Value {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    v["error"].clone()
}

/// `data:` payloads of an SSE body.
fn events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_client_gets_whole_and_streamed_answers() {
    let (server, _fake) = start(ServeConfig::default()).await;
    let client = client(&server, "unused");

    let r = client
        .chat()
        .create(ask("hello there world", "edgecloud"))
        .await
        .unwrap();
    assert_eq!(r.object, "chat.completion");
    assert_eq!(r.model, "edgecloud");
    assert_eq!(
        r.choices[0].message.content.as_deref(),
        Some("hello there world")
    );
    assert_eq!(r.choices[0].message.role, OaRole::Assistant);
    assert_eq!(r.choices[0].finish_reason, Some(OaFinish::Stop));
    let usage = r.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (11, 3, 14)
    );

    let mut req = ask_stream("one two three four", "fast");
    req.stream_options = Some(ChatCompletionStreamOptions {
        include_usage: true,
    });
    let mut stream = client.chat().create_stream(req).await.unwrap();
    let mut chunks = Vec::new();
    while let Some(c) = tokio::time::timeout(HANG, stream.next()).await.unwrap() {
        chunks.push(c.expect("a well-formed chunk"));
    }
    assert_eq!(chunks[0].choices[0].delta.role, Some(OaRole::Assistant));
    let text: String = chunks
        .iter()
        .flat_map(|c| c.choices.iter())
        .filter_map(|c| c.delta.content.clone())
        .collect();
    assert_eq!(text, "one two three four");
    let finishes: Vec<_> = chunks
        .iter()
        .flat_map(|c| &c.choices)
        .filter_map(|c| c.finish_reason)
        .collect();
    assert_eq!(finishes, [OaFinish::Stop]);
    let last = chunks.last().unwrap();
    assert!(
        last.choices.is_empty(),
        "the usage chunk comes last, with no choices"
    );
    assert_eq!(last.usage.as_ref().unwrap().completion_tokens, 4);
    assert!(chunks
        .iter()
        .all(|c| c.id == chunks[0].id && c.object == "chat.completion.chunk"));

    // Without include_usage there is no usage chunk.
    let mut stream = client
        .chat()
        .create_stream(ask_stream("a b", "edgecloud"))
        .await
        .unwrap();
    let mut n_usage = 0;
    while let Some(c) = stream.next().await {
        n_usage += usize::from(c.unwrap().usage.is_some());
    }
    assert_eq!(n_usage, 0);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_bytes_have_the_openai_shape() {
    let (server, _fake) = start(ServeConfig::default()).await;
    let body = json!({"model": "edgecloud", "messages": user("x y"), "stream": true, "stream_options": {"include_usage": true}});
    let (status, headers, text) = post(&server, body, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(headers.contains_key("x-edgecloud-run-id"));
    assert_eq!(headers["x-edgecloud-deadline-ms"], "1000");
    // Route and policy are in the finish chunk; the headers have them only
    // when the request named them.
    assert!(!headers.contains_key("x-edgecloud-policy"));
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let ev = events(&text);
    let parsed: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(
        parsed[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(parsed[1]["choices"][0]["delta"]["content"], "x ");
    assert_eq!(parsed[2]["choices"][0]["delta"]["content"], "y");
    let finish = &parsed[3];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["edgecloud"]["lane"], "local");
    assert_eq!(finish["edgecloud"]["status"], "ok");
    assert_eq!(parsed[4]["choices"], json!([]));
    assert_eq!(parsed[4]["usage"]["total_tokens"], 13);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_list_and_retrieve() {
    let (server, _fake) = start(ServeConfig::default()).await;
    let client = client(&server, "unused");
    let list = client.models().list().await.unwrap();
    let ids: Vec<&str> = list.data.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["edgecloud", "fast"]);
    assert!(list
        .data
        .iter()
        .all(|m| m.object == "model" && m.owned_by == "edgecloud"));
    assert_eq!(client.models().retrieve("fast").await.unwrap().id, "fast");
    match client.models().retrieve("gpt-9").await {
        Err(OpenAIError::ApiError(e)) => assert_eq!(e.code.as_deref(), Some("model_not_found")),
        other => panic!("expected model_not_found, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliases_select_the_default_route_and_any_model_is_optional() {
    // `fast` is a route already: its own name wins over the alias.
    let config = ServeConfig::default()
        .model_alias("gpt-4o-mini")
        .model_alias("fast");
    let (server, fake) = start(config).await;
    let openai = client(&server, "unused");
    let list = openai.models().list().await.unwrap();
    let ids: Vec<&str> = list.data.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["edgecloud", "gpt-4o-mini", "fast"]);
    assert_eq!(
        openai.models().retrieve("gpt-4o-mini").await.unwrap().id,
        "gpt-4o-mini"
    );
    let (status, _, body) = post(
        &server,
        json!({"model": "gpt-4o-mini", "messages": user("hi")}),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        fake.last_job().route,
        None,
        "an alias runs the default route"
    );
    let (status, _, _) = post(
        &server,
        json!({"model": "fast", "messages": user("hi")}),
        &[],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(fake.last_job().route.as_deref(), Some("fast"));
    let (status, _, body) = post(
        &server,
        json!({"model": "llama3", "messages": user("hi")}),
        &[],
    )
    .await;
    assert_eq!(status, 404, "{body}");
    server.shutdown().await;

    let (server, fake) = start(ServeConfig::default().accept_any_model(true)).await;
    let (status, _, body) = post(
        &server,
        json!({"model": "llama3", "messages": user("hi")}),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(error_of(&body).is_null(), "{body}");
    assert_eq!(fake.last_job().route, None);
    let client = client(&server, "unused");
    assert_eq!(
        client.models().retrieve("anything").await.unwrap().id,
        "anything"
    );
    let list = client.models().list().await.unwrap();
    assert_eq!(list.data.len(), 2, "the list holds the known names only");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_their_status_and_error_object_and_the_server_keeps_serving() {
    let config = ServeConfig::default().max_messages(3).max_body_bytes(2048);
    let (server, _fake) = start(config).await;
    let ok = json!({"model": "edgecloud", "messages": user("still here")});
    // (what, body, status, type, param, code)
    type Case = (&'static str, Vec<u8>, u16, &'static str, Value, Value);
    let cases: Vec<Case> = vec![
        ("malformed JSON", b"{\"model\": ".to_vec(), 400, "invalid_request_error", Value::Null, json!("invalid_json")),
        ("wrong type", json!({"model": "edgecloud", "messages": user("x"), "temperature": "warm"}).to_string().into_bytes(), 400, "invalid_request_error", json!("temperature"), json!("invalid_type")),
        ("out of range", json!({"model": "edgecloud", "messages": user("x"), "top_p": 2.0}).to_string().into_bytes(), 400, "invalid_request_error", json!("top_p"), Value::Null),
        ("wrong message type", json!({"model": "edgecloud", "messages": [{"role": "user", "content": 7}]}).to_string().into_bytes(), 400, "invalid_request_error", json!("messages[0].content"), json!("invalid_type")),
        ("unknown model", json!({"model": "gpt-9", "messages": user("x")}).to_string().into_bytes(), 404, "invalid_request_error", json!("model"), json!("model_not_found")),
        ("oversized body", json!({"model": "edgecloud", "messages": user(&"x".repeat(4096))}).to_string().into_bytes(), 413, "invalid_request_error", Value::Null, json!("request_too_large")),
        ("too many messages", json!({"model": "edgecloud", "messages": vec![json!({"role": "user", "content": "x"}); 4]}).to_string().into_bytes(), 400, "invalid_request_error", json!("messages"), json!("too_many_messages")),
        ("bad policy", json!({"model": "edgecloud", "messages": user("x"), "edgecloud": {"policy": "nope"}}).to_string().into_bytes(), 400, "invalid_request_error", json!("edgecloud.policy"), Value::Null),
    ];
    for (what, body, status, kind, param, code) in cases {
        let (got, _, text) = raw(
            &server,
            reqwest::Method::POST,
            "/v1/chat/completions",
            &[],
            Some(body),
        )
        .await;
        assert_eq!(got, status, "{what}: {text}");
        let e = error_of(&text);
        assert_eq!(e["type"], kind, "{what}");
        assert_eq!(e["param"], param, "{what}");
        assert_eq!(e["code"], code, "{what}");
        assert!(!e["message"].as_str().unwrap().is_empty(), "{what}");
        let (s, _, t) = post(&server, ok.clone(), &[]).await;
        assert_eq!(s, 200, "after {what}: {t}");
    }
    // A chunked body (no Content-Length) over the cap is refused too.
    let chunks =
        futures_util::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b' '; 512])));
    let resp = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);

    let (s, h, t) = raw(
        &server,
        reqwest::Method::GET,
        "/v1/chat/completions",
        &[],
        None,
    )
    .await;
    assert_eq!((s, h["allow"].to_str().unwrap()), (405, "POST"), "{t}");
    let (s, _, t) = raw(&server, reqwest::Method::GET, "/v2/nothing", &[], None).await;
    assert_eq!(
        (s, error_of(&t)["code"].clone()),
        (404, json!("unknown_url"))
    );

    // The client library surfaces the same errors as typed API errors.
    let client = client(&server, "unused");
    match client.chat().create(ask("x", "gpt-9")).await {
        Err(OpenAIError::ApiError(e)) => {
            assert_eq!(e.code.as_deref(), Some("model_not_found"));
            assert_eq!(e.param.as_deref(), Some("model"));
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    let bad: Result<Value, _> = client
        .chat()
        .create_byot(json!({"model": "edgecloud", "messages": user("x"), "max_tokens": "many"}))
        .await;
    match bad {
        Err(OpenAIError::ApiError(e)) => assert_eq!(e.param.as_deref(), Some("max_tokens")),
        other => panic!("expected an API error, got {other:?}"),
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_guards_every_endpoint_but_health() {
    let token = BearerToken::new("s3cret-token").unwrap();
    assert_eq!(
        format!("{token:?} {token}"),
        "BearerToken(***) BearerToken(***)"
    );
    let (server, _fake) = start(ServeConfig::default().token(token)).await;
    let body = json!({"model": "edgecloud", "messages": user("x")});
    for (path, method) in [
        ("/v1/chat/completions", reqwest::Method::POST),
        ("/v1/models", reqwest::Method::GET),
        ("/metrics", reqwest::Method::GET),
    ] {
        let b = (method == reqwest::Method::POST).then(|| body.to_string().into_bytes());
        let (s, _, t) = raw(&server, method.clone(), path, &[], b.clone()).await;
        assert_eq!(
            (s, error_of(&t)["code"].clone()),
            (401, json!("missing_api_key")),
            "{path}"
        );
        let (s, _, t) = raw(
            &server,
            method.clone(),
            path,
            &[("authorization", "Bearer wrong")],
            b.clone(),
        )
        .await;
        assert_eq!(
            (s, error_of(&t)["code"].clone()),
            (401, json!("invalid_api_key")),
            "{path}"
        );
        assert!(!t.contains("s3cret"));
        let (s, _, _) = raw(
            &server,
            method,
            path,
            &[("authorization", "Bearer s3cret-token")],
            b,
        )
        .await;
        assert_eq!(s, 200, "{path}");
    }
    let (s, _, t) = raw(&server, reqwest::Method::GET, "/health", &[], None).await;
    assert_eq!(s, 200);
    assert_eq!(serde_json::from_str::<Value>(&t).unwrap()["status"], "ok");

    match client(&server, "wrong").models().list().await {
        Err(OpenAIError::ApiError(e)) => assert_eq!(e.code.as_deref(), Some("invalid_api_key")),
        other => panic!("expected 401, got {other:?}"),
    }
    let ok = client(&server, "s3cret-token")
        .chat()
        .create(ask("fine", "edgecloud"))
        .await
        .unwrap();
    assert_eq!(ok.choices[0].message.content.as_deref(), Some("fine"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_lanes_get_503_with_retry_after_and_deadline_gets_504() {
    let (server, _fake) = start(ServeConfig::default()).await;
    for stream in [false, true] {
        let (s, h, t) = post(
            &server,
            json!({"model": "edgecloud", "messages": user("busy"), "stream": stream}),
            &[],
        )
        .await;
        assert_eq!(s, 503, "{t}");
        assert_eq!(h["retry-after"], "1");
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["x-edgecloud-lanes"], "local=busy,cloud=busy");
        let e = error_of(&t);
        assert_eq!(
            (e["type"].as_str(), e["code"].as_str()),
            (Some("overloaded_error"), Some("lanes_busy"))
        );
    }
    let (s, h, t) = post(
        &server,
        json!({"model": "edgecloud", "messages": user("deadline")}),
        &[],
    )
    .await;
    assert_eq!(s, 504, "{t}");
    assert_eq!(error_of(&t)["code"], "deadline_exceeded");
    assert_eq!(h["x-edgecloud-late-workers"], "1");
    match client(&server, "k")
        .chat()
        .create(ask("busy", "edgecloud"))
        .await
    {
        Err(OpenAIError::ApiError(e)) => assert!(e.message.contains("lanes_busy"), "{}", e.message),
        other => panic!("expected 503, got {other:?}"),
    }
    let (_, _, metrics) = raw(&server, reqwest::Method::GET, "/metrics", &[], None).await;
    assert!(
        metrics.contains("edgecloud_busy_rejections_total 3\n"),
        "{metrics}"
    );
    assert!(metrics.contains(
        "edgecloud_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"503\"} 3\n"
    ));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_after_the_first_byte_ends_the_stream_with_an_error_event() {
    let (server, _fake) = start(ServeConfig::default()).await;
    let (s, _, text) = post(
        &server,
        json!({"model": "edgecloud", "messages": user("fail-mid"), "stream": true}),
        &[],
    )
    .await;
    assert_eq!(s, 200);
    let ev = events(&text);
    assert!(
        !ev.iter().any(|e| e == "[DONE]"),
        "no clean end after a failure: {text}"
    );
    let last: Value = serde_json::from_str(ev.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "lanes_failed");
    assert!(text.contains("partial "));

    let mut stream = client(&server, "k")
        .chat()
        .create_stream(ask_stream("fail-mid", "edgecloud"))
        .await
        .unwrap();
    // The library keeps reconnecting after an error; a caller stops at the
    // first one, as we do.
    let mut items = Vec::new();
    while let Some(item) = tokio::time::timeout(HANG, stream.next()).await.unwrap() {
        let failed = item.is_err();
        items.push(item);
        if failed {
            break;
        }
    }
    assert!(items[0].is_ok());
    assert!(
        items.last().unwrap().is_err(),
        "the client library sees an error, not a clean end"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_and_deadline_travel_as_headers_or_body_and_the_outcome_comes_back() {
    let (server, fake) = start(ServeConfig::default()).await;
    let headers = [
        ("x-edgecloud-policy", "cascade"),
        ("x-edgecloud-deadline-ms", "700"),
        ("x-request-id", "req-42"),
    ];
    let (s, h, t) = post(
        &server,
        json!({"model": "fast", "messages": user("hi")}),
        &headers,
    )
    .await;
    assert_eq!(s, 200, "{t}");
    let job = fake.last_job();
    assert_eq!(job.policy.as_deref(), Some("cascade"));
    assert_eq!(job.request.deadline, Some(Duration::from_millis(700)));
    assert_eq!(job.request.id.as_deref(), Some("req-42"));
    assert_eq!(job.route.as_deref(), Some("fast"));
    assert!(!job.stream);
    for (name, value) in [
        ("x-edgecloud-policy", "cascade"),
        ("x-edgecloud-route", "fast"),
        ("x-edgecloud-deadline-ms", "700"),
        ("x-edgecloud-lane", "local"),
        ("x-edgecloud-status", "ok"),
        ("x-edgecloud-late-workers", "0"),
        ("x-edgecloud-lanes", "local=completed,cloud=cancelled"),
        ("x-request-id", "req-42"),
    ] {
        assert_eq!(h[name], value, "{name}");
    }
    let body: Value = serde_json::from_str(&t).unwrap();
    let ext = &body["edgecloud"];
    assert_eq!(ext["lane"], "local");
    assert_eq!(ext["policy"], "cascade");
    assert_eq!(ext["lanes"][0]["tokens"]["local_prompt"], 11);
    assert!(ext["lanes"][0]["tokens"].get("provider_prompt").is_none());

    // The body field wins over the header.
    let body = json!({"model": "edgecloud", "messages": user("hi"), "edgecloud": {"policy": "race", "deadline_ms": 900}});
    post(&server, body, &headers).await;
    let job = fake.last_job();
    assert_eq!(
        (job.policy.as_deref(), job.request.deadline),
        (Some("race"), Some(Duration::from_millis(900)))
    );

    let (s, _, t) = post(
        &server,
        json!({"model": "edgecloud", "messages": user("hi")}),
        &[("x-edgecloud-deadline-ms", "soon")],
    )
    .await;
    assert_eq!(
        (s, error_of(&t)["param"].clone()),
        (400, json!("x-edgecloud-deadline-ms"))
    );
    let (s, _, t) = post(
        &server,
        json!({"model": "edgecloud", "messages": user("hi")}),
        &[("x-edgecloud-policy", "nope")],
    )
    .await;
    assert_eq!(
        (s, error_of(&t)["param"].clone()),
        (400, json!("x-edgecloud-policy"))
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_aborts_its_run() {
    let (server, fake) = start(ServeConfig::default()).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&json!({"model": "edgecloud", "messages": user("slow"), "stream": true}))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "));
    drop(body);
    fake.gate.release.notify_one();
    tokio::time::timeout(HANG, fake.gate.aborted_signal.notified())
        .await
        .expect("the run is aborted once the client is gone");
    server.shutdown().await;
}

/// The same before a whole answer: hyper drops the request's future when
/// the connection closes, through the router and the edge middleware, and
/// the run's guard aborts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_before_a_whole_answer_aborts_its_run() {
    use tokio::io::AsyncWriteExt as _;
    let (server, fake) = start(ServeConfig::default()).await;
    let body = json!({"model": "edgecloud", "messages": user("hold")}).to_string();
    let mut conn = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(format!("{head}{body}").as_bytes())
        .await
        .unwrap();
    tokio::time::timeout(HANG, fake.gate.started.notified())
        .await
        .expect("the run started");
    drop(conn);
    tokio::time::timeout(HANG, fake.gate.aborted_signal.notified())
        .await
        .expect("the run is aborted once the client is gone");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_lets_the_in_flight_stream_finish() {
    let (server, fake) = start(ServeConfig::default()).await;
    let addr = server.local_addr();
    let url = format!("{}/chat/completions", server.base_url());
    let in_flight = tokio::spawn(async move {
        let resp = reqwest::Client::new()
            .post(url)
            .json(&json!({"model": "edgecloud", "messages": user("hold"), "stream": true}))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    });
    tokio::time::timeout(HANG, fake.gate.started.notified())
        .await
        .expect("the run started");
    let stopping = tokio::spawn(server.shutdown());
    // Stopped accepting: a new connection is refused (the listener is
    // closed); checked by connecting, not by waiting a while.
    tokio::time::timeout(HANG, async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the listener closes");
    assert!(
        !fake.shutdown_called.load(Ordering::SeqCst),
        "the engine waits for the in-flight request"
    );
    fake.gate.release.notify_one();
    let (status, text) = tokio::time::timeout(HANG, in_flight)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains("hold") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    let report = tokio::time::timeout(HANG, stopping).await.unwrap().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(fake.shutdown_called.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_arriving_gets_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = ServeConfig::default().body_timeout(Duration::from_millis(50));
    let (server, _fake) = start(config).await;
    let mut conn = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    conn.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":",
    )
    .await
    .unwrap();
    // The rest never comes; the server's own timer answers.
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            let n = conn.read(&mut buf).await.unwrap();
            response.extend_from_slice(&buf[..n]);
            if n == 0 || response.windows(4).any(|w| w == b"}}") {
                break;
            }
        }
    };
    tokio::time::timeout(HANG, read).await.expect("an answer");
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    let (s, _, _) = post(
        &server,
        json!({"model": "edgecloud", "messages": user("fine")}),
        &[],
    )
    .await;
    assert_eq!(s, 200);
    server.shutdown().await;
}

/// Sends `GET /health` on a raw keep-alive connection and reads the whole
/// answer (headers, then `Content-Length` bytes); its status line.
async fn health_on(conn: &mut tokio::net::TcpStream) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    conn.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "closed before the answer: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            let Some(end) = text.find("\r\n\r\n") else {
                continue;
            };
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().unwrap())
                })
                .expect("a content-length");
            if got.len() >= end + 4 + length {
                return text.lines().next().unwrap().to_string();
            }
        }
    };
    tokio::time::timeout(HANG, read).await.expect("an answer")
}

/// At the connection cap a new client is served at once: the connection
/// idle the longest between requests is closed to make room. Without
/// that, idle keep-alive connections hold every slot until the 30 s
/// header-read timeout closes them, so the new client waits 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_the_longest_idle_connection_makes_room() {
    use tokio::io::AsyncReadExt;
    let config = ServeConfig {
        max_connections: 2,
        ..ServeConfig::default()
    };
    let (server, _fake) = start(config).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut conn = tokio::net::TcpStream::connect(server.local_addr())
            .await
            .unwrap();
        assert_eq!(health_on(&mut conn).await, "HTTP/1.1 200 OK");
        idle.push(conn);
    }
    // Well under the header-read timeout the idle slots would take.
    let third = raw(&server, reqwest::Method::GET, "/health", &[], None);
    let (status, _, _) = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("served without waiting for an idle connection to time out");
    assert_eq!(status, 200);
    // The first one (idle the longest) was closed; the second still serves.
    let mut buf = [0u8; 64];
    let eof = tokio::time::timeout(HANG, idle[0].read(&mut buf))
        .await
        .expect("the oldest idle connection is closed");
    assert_eq!(eof.unwrap(), 0);
    assert_eq!(health_on(&mut idle[1]).await, "HTTP/1.1 200 OK");
    server.shutdown().await;
}

/// What serve writes, whole and streamed, reads back through the cloud
/// lane's own parser unchanged: the same text, finish reason, usage and
/// model name either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_lane_reads_what_serve_writes() {
    use edgecloud_cloud::{CloudConfig, CloudLane};
    use edgecloud_core::request::{ChatMessage, Sampling};
    use std::time::Instant;

    let (server, _fake) = start(ServeConfig::default()).await;
    let mut answers = Vec::new();
    for stream in [false, true] {
        let mut config = CloudConfig::new(server.base_url(), "edgecloud");
        config.stream = stream;
        config.api_key = Some(edgecloud_cloud::ApiKey::new("unused"));
        let lane = CloudLane::new(config).unwrap();
        let job = edgecloud_core::lane::LaneJob::new(
            vec![ChatMessage::user("one two three")],
            Sampling::default(),
            Instant::now() + HANG,
        );
        let c = lane.run(job).await.unwrap();
        assert_eq!(c.streamed, stream);
        assert_eq!(c.text, "one two three", "stream={stream}");
        assert_eq!(c.finish_reason, FinishReason::Stop);
        assert_eq!(c.provider_finish_reason.as_deref(), Some("stop"));
        assert_eq!(c.model.as_deref(), Some("edgecloud"));
        let usage = c.usage.expect("serve always reports usage");
        answers.push((
            c.text,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
        ));
    }
    assert_eq!(answers[0], answers[1], "whole and streamed read back alike");
    server.shutdown().await;
}
