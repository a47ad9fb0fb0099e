//! Integration tests: `edgecloud serve`, the OpenAI-compatible front door,
//! with the harness behind it. A real OpenAI client library
//! (`async-openai`) talks to it; raw HTTP checks what a client library
//! hides (status lines, headers, SSE bytes). Lanes are the real local lane
//! on the generated tiny model, scripted backends released by the test
//! (no sleeps), and, for the edgecloud-behind-edgecloud path, real
//! `edgecloud` processes on loopback ports.

use crate::support::cli::bin;
use crate::support::models::tiny_model;
use crate::support::scripted::{Auto, AutoEnd, Recorder, Scripted, HANG};
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::{
    ChatCompletionRequestUserMessageArgs, ChatCompletionStreamOptions, ChatCompletionTool,
    ChatCompletionToolChoiceOption, ChatCompletionToolType, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs, FinishReason as OaFinish, FunctionObject, Role as OaRole,
};
use edgecloud::harness::{Event, Harness, HarnessBuilder, LaneErrorKind, LocalBackend, Policy};
use edgecloud::local::LocalConfig;
use edgecloud::serve::{ServeConfig, ServeMetrics, Server, ServerHandle};
use edgecloud::Lane;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A long deadline: runs are meant to end by their lanes, not by it.
pub(crate) const LONG: Duration = Duration::from_secs(60);

pub(crate) fn loopback() -> ServeConfig {
    ServeConfig::default().listen("127.0.0.1:0".parse().unwrap())
}

pub(crate) async fn serve(harness: Harness, config: ServeConfig) -> ServerHandle {
    Server::bind(harness, config)
        .await
        .expect("bind a loopback port")
        .spawn()
}

/// A real OpenAI client, without its retries (a retried 503 would hide the
/// busy answer under test).
pub(crate) fn client(base_url: &str, key: &str) -> async_openai::Client<OpenAIConfig> {
    let config = OpenAIConfig::new()
        .with_api_base(base_url)
        .with_api_key(key);
    let no_retry = backoff::ExponentialBackoffBuilder::new()
        .with_max_elapsed_time(Some(Duration::ZERO))
        .build();
    async_openai::Client::with_config(config).with_backoff(no_retry)
}

/// A seeded request: the same text every time on the tiny model (greedy
/// decoding of random weights tends to blank answers, which no policy
/// accepts). `stream` must be
/// set on the request itself: with `byot` on, the library sends it as is.
fn ask(prompt: &str, max_tokens: u32, stream: bool) -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model("edgecloud")
        .max_completion_tokens(max_tokens)
        .temperature(0.9)
        .top_p(0.95)
        .seed(7)
        .stream(stream)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content(prompt)
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap()
}

async fn collect_stream(
    client: &async_openai::Client<OpenAIConfig>,
    req: CreateChatCompletionRequest,
) -> Vec<async_openai::types::CreateChatCompletionStreamResponse> {
    let mut stream = client.chat().create_stream(req).await.unwrap();
    let mut chunks = Vec::new();
    while let Some(c) = tokio::time::timeout(HANG, stream.next())
        .await
        .expect("no hang")
    {
        chunks.push(c.expect("a well-formed chunk"));
    }
    chunks
}

fn text_of(chunks: &[async_openai::types::CreateChatCompletionStreamResponse]) -> String {
    chunks
        .iter()
        .flat_map(|c| &c.choices)
        .filter_map(|c| c.delta.content.clone())
        .collect()
}

async fn post(
    url: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    post_to(url, "/chat/completions", body, headers).await
}

/// POSTs `body` to `url` + `path` (`/completions`), with `headers`.
pub(crate) async fn post_to(
    url: &str,
    path: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = tokio::time::timeout(HANG, req.send())
        .await
        .expect("no hang")
        .expect("a response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap())
}

pub(crate) async fn metrics_text(url: &str) -> String {
    let base = url.trim_end_matches("/v1");
    reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The `data:` payloads of an SSE body, in order.
pub(crate) fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

pub(crate) fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no series {series}"))
        .parse()
        .unwrap()
}

fn user(prompt: &str) -> Value {
    json!([{"role": "user", "content": prompt}])
}

pub(crate) fn local_backend() -> LocalBackend {
    LocalBackend::start(LocalConfig {
        threads: Some(2),
        ..LocalConfig::new(tiny_model())
    })
    .expect("the tiny model loads")
}

/// Waits for a scripted task off the runtime's threads.
pub(crate) async fn next_task(b: &Scripted) -> crate::support::scripted::Task {
    let b = b.clone();
    tokio::task::spawn_blocking(move || b.next_task())
        .await
        .unwrap()
}

async fn wait_idle(b: &Scripted) {
    let b = b.clone();
    tokio::task::spawn_blocking(move || b.wait_idle())
        .await
        .unwrap()
}

pub(crate) fn scripted_pair(policy: Policy) -> (Scripted, Scripted, HarnessBuilder) {
    let local = Scripted::new("scripted-local");
    let cloud = Scripted::new("scripted-cloud");
    let builder = Harness::builder()
        .local(local.clone())
        .cloud(cloud.clone())
        .policy(policy)
        .deadline(LONG);
    (local, cloud, builder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_client_talks_to_the_real_local_lane() {
    let harness = Harness::builder()
        .local(local_backend())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .build()
        .unwrap();
    let server = serve(harness, loopback()).await;
    let client = client(&server.base_url(), "unused");

    let models = client.models().list().await.unwrap();
    let ids: Vec<&str> = models.data.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["edgecloud"]);

    let whole = client
        .chat()
        .create(ask("Hello there", 12, false))
        .await
        .unwrap();
    let answer = whole.choices[0].message.content.clone().unwrap();
    assert!(!answer.trim().is_empty());
    assert_eq!(whole.choices[0].message.role, OaRole::Assistant);
    assert!(matches!(
        whole.choices[0].finish_reason,
        Some(OaFinish::Stop | OaFinish::Length)
    ));
    let usage = whole.usage.unwrap();
    assert!(usage.prompt_tokens > 0 && usage.completion_tokens > 0);
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );

    let mut req = ask("Hello there", 12, true);
    req.stream_options = Some(ChatCompletionStreamOptions {
        include_usage: true,
    });
    let chunks = collect_stream(&client, req).await;
    assert_eq!(chunks[0].choices[0].delta.role, Some(OaRole::Assistant));
    assert_eq!(
        text_of(&chunks),
        answer,
        "seeded: streamed and whole answers agree"
    );
    let streamed_usage = chunks.last().unwrap().usage.clone().expect("a usage chunk");
    assert_eq!(streamed_usage.completion_tokens, usage.completion_tokens);

    // The outcome rides along, in the body and in the headers.
    let (status, headers, body) = post(
        &server.base_url(),
        json!({"model": "edgecloud", "messages": user("Hi"), "max_tokens": 4, "seed": 7}),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-edgecloud-lane"], "local");
    assert_eq!(headers["x-edgecloud-policy"], "local-only");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["edgecloud"]["lane"], "local");
    assert!(
        v["edgecloud"]["lanes"][0]["tokens"]["local_prompt"]
            .as_u64()
            .unwrap()
            > 0
    );
    let reused_last = v["edgecloud"]["lanes"][0]["tokens"]["local_reused_prompt"]
        .as_u64()
        .expect("the local lane says how much of its prompt was cached");

    let m = metrics_text(&server.base_url()).await;
    assert_eq!(
        metric(&m, "edgecloud_lane_completions_total{lane=\"local\"}"),
        3.0
    );
    // The streamed request repeated the first one's prompt: all of it but
    // its last token came from cached cells, and the counter has it.
    assert!(
        metric(
            &m,
            "edgecloud_lane_reused_prompt_tokens_total{lane=\"local\"}"
        ) > reused_last as f64
    );
    assert!(
        metric(
            &m,
            "edgecloud_lane_prompt_tokens_total{lane=\"local\",source=\"local\"}"
        ) > 0.0
    );
    assert_eq!(
        metric(
            &m,
            "edgecloud_lane_prompt_tokens_total{lane=\"local\",source=\"provider\"}"
        ),
        0.0
    );
    assert_eq!(
        metric(&m, "edgecloud_lane_ttft_seconds_count{lane=\"local\"}"),
        3.0
    );
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_requests_than_lanes_get_busy_answers_and_no_lane_has_two_tasks() {
    let (local, cloud, builder) = scripted_pair(Policy::Race);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();

    // The first request takes both lanes (race) and holds them.
    let first = tokio::spawn({
        let url = url.clone();
        async move {
            client(&url, "k")
                .chat()
                .create(ask("first", 8, false))
                .await
        }
    });
    let local_task = next_task(&local).await;
    let cloud_task = next_task(&cloud).await;

    // Every request now finds its lanes busy, whatever its policy, and is
    // answered at once: no queue.
    let mut busy = Vec::new();
    for (i, policy) in [
        "race",
        "local-only",
        "cloud-only",
        "cascade",
        "best-of",
        "race",
    ]
    .into_iter()
    .enumerate()
    {
        let url = url.clone();
        busy.push(tokio::spawn(async move {
            let body =
                json!({"model": "edgecloud", "messages": user("more"), "stream": i % 2 == 0});
            post(&url, body, &[("x-edgecloud-policy", policy)]).await
        }));
    }
    for b in busy {
        let (status, headers, body) = b.await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert_eq!(headers["retry-after"], "1");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"]["code"], "lanes_busy");
    }
    match client(&url, "k")
        .chat()
        .create(ask("one more", 8, false))
        .await
    {
        Err(OpenAIError::ApiError(e)) => assert!(e.message.contains("lanes_busy"), "{}", e.message),
        other => panic!("expected a busy answer, got {other:?}"),
    }

    local_task.complete("done");
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.choices[0].message.content.as_deref(), Some("done"));
    drop(cloud_task);
    wait_idle(&local).await;
    wait_idle(&cloud).await;
    for b in [&local, &cloud] {
        let c = b.counters();
        assert_eq!(
            (c.started, c.max_outstanding, c.overlaps),
            (1, 1, 0),
            "{c:?}"
        );
    }

    // Free again: the next request runs.
    let next = tokio::spawn({
        let url = url.clone();
        async move {
            post(
                &url,
                json!({"model": "edgecloud", "messages": user("again")}),
                &[("x-edgecloud-policy", "local-only")],
            )
            .await
        }
    });
    next_task(&local).await.complete("again");
    let (status, headers, _) = next.await.unwrap();
    assert_eq!(
        (status, headers["x-edgecloud-lane"].to_str().unwrap()),
        (200, "local")
    );

    let m = metrics_text(&url).await;
    assert_eq!(metric(&m, "edgecloud_busy_rejections_total"), 7.0);
    assert_eq!(
        metric(&m, "edgecloud_lane_busy_rejections_total{lane=\"local\"}"),
        6.0
    );
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_never_puts_two_tasks_on_a_lane() {
    // Backends that answer by themselves after a little simulated work;
    // sixteen simultaneous requests on two lanes.
    let answer = |_| Auto {
        delay: Duration::from_millis(20),
        tokens: 3,
        end: AutoEnd::Complete("ok".into()),
        honour_cancel: true,
    };
    let local = Scripted::auto("auto-local", answer);
    let cloud = Scripted::auto("auto-cloud", answer);
    let harness = Harness::builder()
        .local(local.clone())
        .cloud(cloud.clone())
        .policy(Policy::Race)
        .deadline(LONG)
        .build()
        .unwrap();
    let server = serve(harness, loopback()).await;
    let url = server.base_url();
    let policies = ["race", "local-only", "cloud-only", "best-of"];
    let burst: Vec<_> = (0..16)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                let body =
                    json!({"model": "edgecloud", "messages": user("burst"), "stream": i % 3 == 0});
                post(&url, body, &[("x-edgecloud-policy", policies[i % 4])])
                    .await
                    .0
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for b in burst {
        statuses.push(b.await.unwrap());
    }
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200), "{statuses:?}");
    wait_idle(&local).await;
    wait_idle(&cloud).await;
    for b in [&local, &cloud] {
        let c = b.counters();
        assert_eq!((c.max_outstanding, c.overlaps), (1, 0), "{c:?}");
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_worker_keeps_its_lane_busy_for_the_next_request() {
    let local = Scripted::slow_to_cancel("late-local");
    let metrics = ServeMetrics::new();
    let events = Recorder::new();
    let harness = Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        // The metrics observer first: when the recorder sees an event, the
        // metrics already have it.
        .observer(metrics.observer())
        .observer(events.clone())
        .build()
        .unwrap();
    let server = serve(harness, loopback().metrics(metrics)).await;
    let url = server.base_url();

    // A 100 ms deadline the worker overruns: 504 at the deadline, and the
    // worker stays late.
    let over = tokio::spawn({
        let url = url.clone();
        async move {
            post(
                &url,
                json!({"model": "edgecloud", "messages": user("slow")}),
                &[("x-edgecloud-deadline-ms", "100")],
            )
            .await
        }
    });
    let task = next_task(&local).await;
    let (status, headers, body) = over.await.unwrap();
    assert_eq!(status, 504, "{body}");
    assert_eq!(headers["x-edgecloud-late-workers"], "1");
    assert_eq!(headers["x-edgecloud-lanes"], "local=late,cloud=not_started");

    // The late worker still holds the lane: the next request is busy.
    let (status, _, body) = post(
        &url,
        json!({"model": "edgecloud", "messages": user("next")}),
        &[],
    )
    .await;
    assert_eq!(status, 503, "{body}");
    let health: Value = reqwest::get(format!("http://{}/health", server.local_addr()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["late_workers_running"], 1);
    assert_eq!(health["lanes"][0]["busy"], true);

    // Once it returns, the lane is free again.
    task.complete("too late");
    events.wait_for(|e| {
        matches!(
            e,
            Event::LateWorkerFinished {
                lane: Lane::Local,
                ..
            }
        )
    });
    wait_idle(&local).await;
    let again = tokio::spawn({
        let url = url.clone();
        async move {
            post(
                &url,
                json!({"model": "edgecloud", "messages": user("again")}),
                &[],
            )
            .await
        }
    });
    next_task(&local).await.complete("in time");
    assert_eq!(again.await.unwrap().0, 200);

    let m = metrics_text(&url).await;
    assert_eq!(
        metric(&m, "edgecloud_lane_late_workers_total{lane=\"local\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "edgecloud_lane_deadline_misses_total{lane=\"local\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "edgecloud_lane_late_overrun_seconds_count{lane=\"local\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "edgecloud_runs_total{policy=\"local-only\",status=\"deadline_exceeded\"}"
        ),
        1.0
    );
    assert_eq!(metric(&m, "edgecloud_busy_rejections_total"), 1.0);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_refusing_the_request_as_invalid_is_a_400_not_a_gateway_error() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let whole = tokio::spawn({
        let url = url.clone();
        async move {
            post(
                &url,
                json!({"model": "edgecloud", "messages": user("x")}),
                &[],
            )
            .await
        }
    });
    next_task(&local).await.fail(
        LaneErrorKind::InvalidRequest,
        "response_format: no grammar for this schema: `minLength` 100000",
    );
    let (status, _, text) = whole.await.unwrap();
    assert_eq!(status, 400, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`minLength`"),
        "{text}"
    );
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_answer_from_the_only_lane_is_200_whole_and_streamed() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for stream in [false, true] {
        let answer = tokio::spawn({
            let url = url.clone();
            async move {
                post(
                    &url,
                    json!({"model": "edgecloud", "messages": user("x"), "stream": stream}),
                    &[],
                )
                .await
            }
        });
        next_task(&local).await.complete("\n\n");
        let (status, _, text) = answer.await.unwrap();
        assert_eq!(status, 200, "stream {stream}: {text}");
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_lane_failing_mid_stream_ends_with_an_error_event() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let streaming = tokio::spawn({
        let url = url.clone();
        async move {
            post(
                &url,
                json!({"model": "edgecloud", "messages": user("x"), "stream": true}),
                &[],
            )
            .await
        }
    });
    let task = next_task(&local).await;
    task.token("half an ");
    task.fail(LaneErrorKind::Model, "decode failed");
    let (status, _, text) = streaming.await.unwrap();
    assert_eq!(status, 200);
    assert!(text.contains("half an "), "{text}");
    assert!(
        !text.contains("[DONE]"),
        "never a clean end after a failure: {text}"
    );
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    let e: Value = serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(e["error"]["code"], "lanes_failed");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("decode failed"));
    let m = metrics_text(&url).await;
    assert_eq!(
        metric(
            &m,
            "edgecloud_lane_failures_total{lane=\"local\",kind=\"model\"}"
        ),
        1.0
    );
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_become_model_names() {
    let cfg = edgecloud::harness::HarnessConfig::from_toml_str(
        "[harness]\npolicy = \"race\"\n[routes.quick]\npolicy = \"local-only\"\ndeadline_ms = 5000\n",
    )
    .unwrap();
    let (local, _cloud, builder) = scripted_pair(Policy::Race);
    let harness = builder.config(&cfg).unwrap().build().unwrap();
    let server = Server::bind(harness, loopback()).await.unwrap();
    assert_eq!(server.models(), ["edgecloud", "default", "quick"]);
    let server = server.spawn();
    let url = server.base_url();
    let quick = tokio::spawn({
        let url = url.clone();
        async move { post(&url, json!({"model": "quick", "messages": user("q")}), &[]).await }
    });
    next_task(&local).await.complete("fast");
    let (status, headers, _) = quick.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(headers["x-edgecloud-route"], "quick");
    assert_eq!(headers["x-edgecloud-policy"], "local-only");
    assert_eq!(headers["x-edgecloud-deadline-ms"], "5000");
    assert!(server.shutdown().await.is_clean());
}

// ---- edgecloud behind edgecloud, through the real binary ----------------

/// An `edgecloud serve` process; killed if the test ends without stopping
/// it.
pub(crate) struct ServeProcess {
    child: Option<Child>,
    pub(crate) url: String,
}

impl ServeProcess {
    pub(crate) fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start edgecloud serve");
        // The first stdout line says where it listens.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| {
                let mut err = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                panic!("no address in {line:?}; stderr: {err}")
            })
            .to_string();
        Self {
            child: Some(child),
            url,
        }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// A local-only server on `model` with 2 threads, plus `extra` flags.
    pub(crate) fn local_only(model: &Path, extra: &[&str]) -> Self {
        let model = model.to_str().unwrap();
        let mut args = vec!["--model", model, "--policy", "local-only", "--threads", "2"];
        args.extend_from_slice(extra);
        Self::start(&args, &[])
    }

    /// Sends `signal` and waits; returns whether it exited with success,
    /// and its stderr.
    pub(crate) fn stop(mut self, signal: &str) -> (bool, String) {
        let mut child = self.child.take().unwrap();
        // The shell's own `kill`: a minimal system may have no kill binary.
        let ok = Command::new("sh")
            .args(["-c", &format!("kill {signal} {}", child.id())])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal}");
        let status = child.wait().unwrap();
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        (status.success(), err)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edgecloud_is_the_cloud_lane_of_another_edgecloud() {
    let model = tiny_model().to_str().unwrap().to_string();
    // The stand-in cloud: local-only on the tiny model, behind a token.
    let inner = ServeProcess::start(
        &[
            "--model",
            &model,
            "--policy",
            "local-only",
            "--threads",
            "2",
            "--token-env",
            "INNER_TOKEN",
        ],
        &[("INNER_TOKEN", "inner-secret")],
    );
    let direct = client(&inner.url, "inner-secret")
        .chat()
        .create(ask("Tell me about edges", 10, false))
        .await
        .unwrap();
    let direct_text = direct.choices[0].message.content.clone().unwrap();

    // `edgecloud run` with the inner server as its cloud lane.
    let out = tokio::task::spawn_blocking({
        let url = inner.url.clone();
        move || {
            Command::new(bin())
                .args([
                    "run",
                    "--base-url",
                    &url,
                    "--cloud-model",
                    "edgecloud",
                    "--api-key-env",
                    "OUTER_KEY",
                ])
                .args([
                    "--policy",
                    "cloud-only",
                    "--prompt",
                    "Tell me about edges",
                    "--max-tokens",
                    "10",
                ])
                .args(["--temperature", "0.9", "--seed", "7", "--json"])
                .env("OUTER_KEY", "inner-secret")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["winner"], "cloud");
    assert_eq!(
        outcome["text"],
        direct_text.as_str(),
        "the text crosses the hop unchanged"
    );
    let cloud = outcome["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lane"] == "cloud")
        .unwrap();
    assert!(
        cloud["tokens"]["provider_prompt"].as_u64().unwrap() > 0,
        "the inner usage is the provider count"
    );

    // An outer server whose cloud lane is the inner one, spoken to by the
    // OpenAI client: two front doors, two harnesses, one answer.
    let outer = ServeProcess::start(
        &[
            "--base-url",
            &inner.url,
            "--cloud-model",
            "edgecloud",
            "--api-key-env",
            "OUTER_KEY",
            "--policy",
            "cloud-only",
        ],
        &[("OUTER_KEY", "inner-secret")],
    );
    let outer_client = client(&outer.url, "unused");
    let mut req = ask("Tell me about edges", 10, true);
    req.stream_options = Some(ChatCompletionStreamOptions {
        include_usage: true,
    });
    let chunks = collect_stream(&outer_client, req).await;
    assert_eq!(text_of(&chunks), direct_text);
    let usage = chunks.last().unwrap().usage.clone().expect("usage chunk");
    assert_eq!(
        usage.completion_tokens,
        direct.usage.unwrap().completion_tokens
    );
    // Seeded like the requests above: unseeded, the tiny random model
    // sometimes ends at once (end-of-turn first), and an empty answer is
    // unusable, which made this check fail now and then.
    let (status, headers, body) = post(
        &outer.url,
        json!({
            "model": "edgecloud",
            "messages": user("Tell me about edges"),
            "max_tokens": 10,
            "temperature": 0.9,
            "top_p": 0.95,
            "seed": 7,
        }),
        &[],
    )
    .await;
    assert_eq!(
        (
            status,
            headers
                .get("x-edgecloud-lane")
                .and_then(|v| v.to_str().ok())
        ),
        (200, Some("cloud")),
        "{body}"
    );

    // A wrong key at the inner door is the outer's cloud failure.
    let wrong = ServeProcess::start(
        &[
            "--base-url",
            &inner.url,
            "--cloud-model",
            "edgecloud",
            "--api-key-env",
            "OUTER_KEY",
            "--policy",
            "cloud-only",
        ],
        &[("OUTER_KEY", "not-the-secret")],
    );
    let (status, _, body) = post(
        &wrong.url,
        json!({"model": "edgecloud", "messages": user("hi")}),
        &[],
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("auth"), "{body}");

    for p in [wrong, outer, inner] {
        let (ok, err) = p.stop("-TERM");
        assert!(ok && err.contains("stopped cleanly"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_stops_cleanly_on_sigint_and_refuses_bad_setups() {
    let model = tiny_model().to_str().unwrap().to_string();
    let p = ServeProcess::start(
        &[
            "--model",
            &model,
            "--policy",
            "local-only",
            "--threads",
            "2",
        ],
        &[],
    );
    let (status, _, _) = post(
        &p.url,
        json!({"model": "edgecloud", "messages": user("hi"), "max_tokens": 2, "seed": 7}),
        &[],
    )
    .await;
    assert_eq!(status, 200);
    let (ok, err) = p.stop("-INT");
    assert!(ok && err.contains("stopped cleanly"), "{err}");

    for (args, expect) in [
        (vec![], "no lane configured"),
        (
            vec![
                "--model",
                model.as_str(),
                "--token-env",
                "EDGECLOUD_TEST_UNSET_TOKEN",
            ],
            "EDGECLOUD_TEST_UNSET_TOKEN is not set",
        ),
        (
            vec!["--model", model.as_str(), "--listen", "256.0.0.1:80"],
            "invalid value",
        ),
    ] {
        let out = Command::new(bin())
            .arg("serve")
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

// ---- a pool of instances behind one server (contract point 13) ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_serves_one_request_per_instance_and_refuses_the_rest_with_503() {
    let locals: Vec<Scripted> = (0..2)
        .map(|i| Scripted::new(&format!("pool-local-{i}")))
        .collect();
    let pool = Harness::builder()
        .local_per_instance(
            locals
                .iter()
                .map(|s| {
                    std::sync::Arc::new(s.clone())
                        as std::sync::Arc<dyn edgecloud::harness::Backend>
                })
                .collect(),
        )
        .instances(2)
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .build()
        .unwrap();
    let server = Server::bind(pool, loopback())
        .await
        .expect("bind a loopback port")
        .spawn();
    let url = server.base_url();
    let running: Vec<_> = (0..2)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                post(
                    &url,
                    json!({"model": "edgecloud", "messages": user(&format!("q{i}"))}),
                    &[],
                )
                .await
            })
        })
        .collect();
    let tasks = [next_task(&locals[0]).await, next_task(&locals[1]).await];
    // Both instances hold a request: the third is refused at once.
    let (status, headers, body) = post(
        &url,
        json!({"model": "edgecloud", "messages": user("third")}),
        &[],
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(headers["retry-after"], "1");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["error"]["code"], "lanes_busy");
    assert!(body.contains("all 2 instances are busy"), "{body}");

    let base = format!("http://{}", server.local_addr());
    let health: Value = reqwest::get(format!("{base}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["instances"].as_array().unwrap().len(), 2, "{health}");
    assert_eq!(health["instances"][0]["busy"], true, "{health}");
    assert_eq!(health["instances"][1]["local_busy"], true, "{health}");
    assert_eq!(health["rejected"], 1, "{health}");
    let text = metrics_text(&url).await;
    assert_eq!(metric(&text, "edgecloud_pool_instances"), 2.0);
    assert_eq!(metric(&text, "edgecloud_pool_rejected_total"), 1.0);
    assert_eq!(
        metric(&text, "edgecloud_instance_busy{instance=\"1\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "edgecloud_instance_lane_busy{instance=\"0\",lane=\"local\"}"
        ),
        1.0
    );

    for (i, t) in tasks.iter().enumerate() {
        t.complete(&format!("answer {i}"));
    }
    for r in running {
        let (status, _, body) = r.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    for l in &locals {
        let c = l.counters();
        assert_eq!((c.max_outstanding, c.overlaps), (1, 0), "{c:?}");
    }
    assert!(server.shutdown().await.is_clean());
}

#[test]
fn serve_parallel_runs_that_many_instances_over_one_model_and_says_so() {
    let model = tiny_model().to_str().unwrap().to_string();
    let server = ServeProcess::start(
        &[
            "--model",
            &model,
            "--policy",
            "local-only",
            "--threads",
            "2",
        ],
        &[("EDGECLOUD_PARALLEL", "3")],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let base = server.url.trim_end_matches("/v1").to_string();
    let health: Value = rt.block_on(async {
        reqwest::get(format!("{base}/health"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(health["instances"].as_array().unwrap().len(), 3, "{health}");
    // Three requests at once, seeded: every one answered.
    let statuses: Vec<u16> = rt.block_on(async {
        let asks: Vec<_> = (0..3)
            .map(|i| {
                let url = server.url.clone();
                tokio::spawn(async move {
                    post(
                        &url,
                        json!({"model": "edgecloud", "messages": user(&format!("hello {i}")),
                               "max_tokens": 4, "seed": 7}),
                        &[],
                    )
                    .await
                    .0
                })
            })
            .collect();
        let mut v = Vec::new();
        for a in asks {
            v.push(a.await.unwrap());
        }
        v
    });
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 502),
        "{statuses:?}"
    );
    let (ok, err) = server.stop("-TERM");
    assert!(ok, "{err}");
    assert!(err.contains("3 instances (--parallel)"), "{err}");
}

/// `response_format` through the real binary on the real SmolLM2 (issue
/// 24): every answer is JSON meeting the schema, sampled or greedy; a
/// schema keyword outside the supported subset is a 400 naming it.
#[test]
fn serve_answers_json_meeting_the_response_format_schema() {
    let server = ServeProcess::local_only(crate::support::real_model::smollm2(), &[]);
    let schema = json!({"type": "object", "additionalProperties": false,
        "required": ["city", "country"],
        "properties": {"city": {"type": "string", "maxLength": 40},
            "country": {"type": "string", "maxLength": 40}}});
    let format = json!({"type": "json_schema",
        "json_schema": {"name": "place", "schema": schema, "strict": true}});
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (i, (prompt, temperature)) in [
        ("Name a big city in France, as JSON.", 0.0),
        ("Where is the Colosseum? Answer in JSON.", 0.8),
        ("Tell me about Tokyo.", 0.0),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, _, body) = rt.block_on(post(
            &server.url,
            json!({"model": "edgecloud", "messages": user(prompt), "max_tokens": 48,
                "temperature": temperature, "seed": i, "response_format": format,
                // A busy test machine: the 5 s default is not the point here.
                "edgecloud": {"deadline_ms": 120000}}),
            &[],
        ));
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let f: edgecloud::ResponseFormat = serde_json::from_value(format.clone()).unwrap();
        assert_eq!(f.accepts(text), Ok(()), "{prompt}: {text}");
    }
    let (status, _, body) = rt.block_on(post(
        &server.url,
        json!({"model": "edgecloud", "messages": user("hi"), "response_format":
            {"type": "json_schema", "json_schema": {"name": "x",
                "schema": {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}}}}}),
        &[],
    ));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("`format`"), "{body}");
}

/// A tool-calling request as the official client builds it: two
/// functions, `tool_choice` as given, greedy, a long deadline (a busy test
/// machine).
fn tool_request(
    prompt: &str,
    choice: ChatCompletionToolChoiceOption,
    stream: bool,
) -> CreateChatCompletionRequest {
    let function = |name: &str, description: &str, parameters: Value| ChatCompletionTool {
        r#type: ChatCompletionToolType::Function,
        function: FunctionObject {
            name: name.into(),
            description: Some(description.into()),
            parameters: Some(parameters),
            strict: None,
        },
    };
    let mut req = CreateChatCompletionRequestArgs::default()
        .model("edgecloud")
        .max_completion_tokens(64u32)
        .temperature(0.0)
        .stream(stream)
        .tools(vec![
            function(
                "get_weather",
                "Current weather in a city.",
                json!({"type": "object", "additionalProperties": false, "required": ["city"],
                    "properties": {"city": {"type": "string"}}}),
            ),
            function(
                "set_timer",
                "Start a countdown timer.",
                json!({"type": "object", "additionalProperties": false, "required": ["minutes"],
                    "properties": {"minutes": {"type": "integer"}}}),
            ),
        ])
        .tool_choice(choice)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content(prompt)
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap();
    if stream {
        req.stream_options = Some(ChatCompletionStreamOptions {
            include_usage: true,
        });
    }
    req
}

/// A whole (not streamed) answer that must be one tool call as OpenAI
/// sends it: finish reason `tool_calls`, null content, one call whose
/// arguments are JSON. Returns the function's name and arguments.
fn whole_tool_call(
    rt: &tokio::runtime::Runtime,
    c: &async_openai::Client<OpenAIConfig>,
    prompt: &str,
    choice: ChatCompletionToolChoiceOption,
) -> (String, Value) {
    let whole = rt
        .block_on(c.chat().create(tool_request(prompt, choice, false)))
        .unwrap();
    let choice = &whole.choices[0];
    assert_eq!(choice.finish_reason, Some(OaFinish::ToolCalls), "{whole:?}");
    assert_eq!(choice.message.content, None);
    let calls = choice.message.tool_calls.as_ref().expect("tool calls");
    assert_eq!(calls.len(), 1);
    let args = serde_json::from_str(&calls[0].function.arguments).unwrap();
    (calls[0].function.name.clone(), args)
}

/// Tool calls through the real binary on the real SmolLM2, read by the
/// official client (issue 24): a whole answer has `tool_calls`, null
/// content and finish reason `tool_calls`; a stream sends the call as
/// deltas (id and name first, then the arguments) and never the model's
/// call markup as content; log-probabilities come back, from the local
/// lane, and the response says so.
#[test]
fn serve_answers_tool_calls_and_logprobs_as_openai_does() {
    let server = ServeProcess::local_only(
        crate::support::real_model::smollm2(),
        &["--deadline-ms", "120000"],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client(&server.url, "unused");
    let (name, args) = whole_tool_call(
        &rt,
        &c,
        "What's the weather like in Paris?",
        ChatCompletionToolChoiceOption::Required,
    );
    assert!(["get_weather", "set_timer"].contains(&name.as_str()));
    assert!(args.is_object(), "{args}");

    // Streamed, `required`: the call comes as deltas (id and name first,
    // then the arguments), never as content.
    let chunks = rt.block_on(collect_stream(
        &c,
        tool_request(
            "Set a timer for 5 minutes.",
            ChatCompletionToolChoiceOption::Required,
            true,
        ),
    ));
    assert_eq!(text_of(&chunks), "", "{chunks:?}");
    let deltas: Vec<_> = chunks
        .iter()
        .flat_map(|c| &c.choices)
        .filter_map(|c| c.delta.tool_calls.clone())
        .flatten()
        .collect();
    let finish = chunks
        .iter()
        .flat_map(|c| &c.choices)
        .find_map(|c| c.finish_reason);
    assert_eq!(finish, Some(OaFinish::ToolCalls));
    let first = deltas.first().expect("tool-call deltas");
    assert_eq!(first.index, 0);
    assert!(first
        .id
        .as_deref()
        .is_some_and(|id| id.starts_with("call_")));
    let name = first.function.as_ref().and_then(|f| f.name.clone());
    assert!(name.is_some(), "{first:?}");
    let arguments: String = deltas
        .iter()
        .filter_map(|d| d.function.as_ref().and_then(|f| f.arguments.clone()))
        .collect();
    serde_json::from_str::<Value>(&arguments).expect("the streamed arguments are JSON");

    // Streamed, `auto`: the model may answer in text (SmolLM2 does here,
    // up to max_tokens) or call; its call markup is never content.
    let chunks = rt.block_on(collect_stream(
        &c,
        tool_request(
            "Set a timer for 5 minutes.",
            ChatCompletionToolChoiceOption::Auto,
            true,
        ),
    ));
    assert!(!text_of(&chunks).contains("<tool_call>"), "{chunks:?}");
    let called = chunks
        .iter()
        .flat_map(|c| &c.choices)
        .any(|c| c.delta.tool_calls.is_some());
    let finish = chunks
        .iter()
        .flat_map(|c| &c.choices)
        .find_map(|c| c.finish_reason);
    if called {
        assert_eq!(finish, Some(OaFinish::ToolCalls));
    } else {
        assert!(
            matches!(finish, Some(OaFinish::Stop | OaFinish::Length)),
            "{finish:?}"
        );
    }

    // Log-probabilities, from the local lane's own pass.
    let (status, _, body) = rt.block_on(post(
        &server.url,
        json!({"model": "edgecloud", "messages": user("What is the capital of France?"),
            "max_tokens": 6, "temperature": 0, "logprobs": true, "top_logprobs": 2}),
        &[],
    ));
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let content = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("logprobs");
    assert!(!content.is_empty());
    for t in content {
        assert_eq!(t["top_logprobs"].as_array().map(Vec::len), Some(2), "{t}");
        assert!(t["logprob"].as_f64().is_some_and(|l| l <= 0.0));
    }
    assert_eq!(v["edgecloud"]["logprobs_from"], "local");
}

/// Qwen2.5-Coder-0.5B through the real binary (issue 24): its own chat
/// template renders the tools, its `<tool_call>` syntax is parsed, and the
/// official client reads the call (`auto`: the model chooses to call).
#[test]
fn serve_answers_qwen_tool_calls_through_its_own_template() {
    let server = ServeProcess::local_only(
        crate::support::real_model::qwen05(),
        &["--deadline-ms", "120000"],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client(&server.url, "unused");
    let (name, args) = whole_tool_call(
        &rt,
        &c,
        "What's the weather like in Paris right now?",
        ChatCompletionToolChoiceOption::Auto,
    );
    assert_eq!(name, "get_weather");
    assert_eq!(
        args["city"].as_str().map(str::to_lowercase).as_deref(),
        Some("paris"),
        "{args}"
    );
}

/// A prompt longer than every lane's context is a 400
/// `context_length_exceeded` naming the limit (OpenAI's answer), not a
/// 502; with a cloud lane in the route, the cloud takes it and the
/// outcome says why.
#[test]
fn a_prompt_over_the_local_context_is_a_400_or_goes_to_the_cloud() {
    let model = crate::support::real_model::smollm2()
        .to_str()
        .unwrap()
        .to_string();
    let long = "Tell me about the history of the city of Rome. ".repeat(40);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let local_only = ServeProcess::local_only(Path::new(&model), &["--context-size", "128"]);
    let (status, _, body) = rt.block_on(post(
        &local_only.url,
        json!({"model": "edgecloud", "messages": user(&long), "max_tokens": 4}),
        &[],
    ));
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{body}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("context of 128 tokens")),
        "{body}"
    );
    drop(local_only);

    let cloud = rt.block_on(crate::support::http::TestServer::openai(
        crate::support::http::Flavor::OpenAi,
        &["Rome ", "is ", "old."],
    ));
    let hybrid = ServeProcess::start(
        &[
            "--model",
            &model,
            "--base-url",
            &cloud.base_url(),
            "--cloud-model",
            "scripted",
            "--policy",
            "cascade",
            "--threads",
            "2",
            "--context-size",
            "128",
        ],
        &[],
    );
    let (status, _, body) = rt.block_on(post(
        &hybrid.url,
        json!({"model": "edgecloud", "messages": user(&long), "max_tokens": 4}),
        &[],
    ));
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Rome is old.");
    assert_eq!(v["edgecloud"]["lane"], "cloud");
    let lanes = v["edgecloud"]["lanes"].as_array().unwrap();
    let cloud_lane = lanes.iter().find(|l| l["lane"] == "cloud").unwrap();
    assert!(
        cloud_lane["note"]
            .as_str()
            .is_some_and(|n| n.contains("local could not take the prompt")),
        "{body}"
    );
}
