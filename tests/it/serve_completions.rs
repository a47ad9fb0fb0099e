//! Integration tests: `POST /v1/completions`, the legacy text completion,
//! on a real server: the prompt reaches the lane as a raw prompt (no chat
//! template) through the same harness, policy and deadline as chat; the
//! answer has OpenAI's `text_completion` shape whole and streamed, with
//! the same status either way; bad fields are a 400 naming them. A real
//! OpenAI client library (`async-openai`) reads it, on the tiny model.

use crate::serve::{
    client, local_backend, loopback, next_task, post_to, scripted_pair, serve, sse_data, LONG,
};
use crate::support::http::{Flavor, TestServer};
use async_openai::types::{CreateChatCompletionRequestArgs, CreateCompletionRequestArgs};
use edgecloud::harness::{Harness, LaneErrorKind, Policy};
use edgecloud::lane::{TokenLogprob, TopLogprob};
use edgecloud::{ChatMessage, FinishReason};
use edgecloud::{CloudBackend, CloudConfig};
use futures_util::StreamExt;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_is_a_raw_prompt_through_the_harness_whole_and_streamed() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();

    let whole = tokio::spawn({
        let url = url.clone();
        async move {
            post_to(
                &url,
                "/completions",
                json!({"model": "edgecloud", "prompt": "Once upon a time", "max_tokens": 7,
                    "stop": ["\n"], "seed": 3, "temperature": 0.5,
                    "edgecloud": {"deadline_ms": 9000}}),
                &[("x-request-id", "legacy-1")],
            )
            .await
        }
    });
    let task = next_task(&local).await;
    assert_eq!(task.messages, [ChatMessage::user("Once upon a time")]);
    assert!(
        task.sampling.raw_prompt,
        "no chat template for a completion"
    );
    assert_eq!(task.sampling.max_tokens, 7);
    assert_eq!(task.sampling.stop, ["\n"]);
    assert_eq!(task.sampling.seed, Some(3));
    task.complete(" there was");
    let (status, headers, body) = whole.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-edgecloud-lane"], "local");
    assert_eq!(headers["x-request-id"], "legacy-1");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"), "{v}");
    assert_eq!(v["choices"][0]["text"], " there was");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["logprobs"], Value::Null);
    assert_eq!(v["edgecloud"]["lane"], "local");
    assert_eq!(v["edgecloud"]["deadline_ms"].as_f64(), Some(9000.0));
    assert!(v["usage"]["total_tokens"].is_u64(), "{v}");

    // Streamed, with the prompt echoed and the usage chunk.
    let streamed = tokio::spawn({
        let url = url.clone();
        async move {
            post_to(
                &url,
                "/completions",
                json!({"model": "edgecloud", "prompt": ["Once upon a time"], "echo": true,
                    "stream": true, "stream_options": {"include_usage": true}}),
                &[],
            )
            .await
        }
    });
    let task = next_task(&local).await;
    assert!(task.sampling.raw_prompt);
    task.token(" there");
    task.token(" was");
    task.complete(" there was");
    let (status, headers, body) = streamed.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let data = sse_data(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, "Once upon a time there was");
    let finish = chunks
        .iter()
        .find(|c| c["choices"][0]["finish_reason"] == "stop")
        .expect("a finish chunk");
    assert_eq!(finish["edgecloud"]["lane"], "local");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(last["usage"]["total_tokens"].is_u64(), "{last}");
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_gets_the_same_status_whole_and_streamed() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for stream in [false, true] {
        // A failure before any text: 502 either way.
        let failing = tokio::spawn({
            let url = url.clone();
            async move {
                let body = json!({"model": "edgecloud", "prompt": "x", "stream": stream});
                post_to(&url, "/completions", body, &[]).await
            }
        });
        next_task(&local)
            .await
            .fail(LaneErrorKind::Model, "decode failed");
        let (status, _, body) = failing.await.unwrap();
        assert_eq!(status, 502, "stream {stream}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"]["code"], "lanes_failed");
        // A prompt over the context: 400 naming `prompt` either way.
        let long = tokio::spawn({
            let url = url.clone();
            async move {
                let body = json!({"model": "edgecloud", "prompt": "x", "stream": stream});
                post_to(&url, "/completions", body, &[]).await
            }
        });
        next_task(&local).await.fail(
            LaneErrorKind::ContextLengthExceeded,
            "the prompt has 9000 tokens; the context holds 2048",
        );
        let (status, _, body) = long.await.unwrap();
        assert_eq!(status, 400, "stream {stream}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"]["code"], "context_length_exceeded");
        assert_eq!(e["error"]["param"], "prompt");
        // A blank answer from the only lane: 200 either way.
        let blank = tokio::spawn({
            let url = url.clone();
            async move {
                let body = json!({"model": "edgecloud", "prompt": "x", "stream": stream});
                post_to(&url, "/completions", body, &[]).await
            }
        });
        next_task(&local).await.complete("\n\n");
        let (status, _, body) = blank.await.unwrap();
        assert_eq!(status, 200, "stream {stream}: {body}");
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_completion_fields_are_a_400_naming_them_and_the_server_keeps_serving() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for (body, param) in [
        (
            json!({"model": "edgecloud", "prompt": "x", "suffix": "end"}),
            "suffix",
        ),
        (
            json!({"model": "edgecloud", "prompt": ["a", "b"]}),
            "prompt",
        ),
        (json!({"model": "edgecloud", "prompt": [1, 2]}), "prompt"),
        (json!({"model": "edgecloud"}), "prompt"),
        (json!({"model": "edgecloud", "prompt": 5}), "prompt"),
        (
            json!({"model": "edgecloud", "prompt": "x", "echo": true, "logprobs": 1}),
            "echo",
        ),
        (
            json!({"model": "edgecloud", "prompt": "x", "logprobs": 21}),
            "logprobs",
        ),
        (
            json!({"model": "edgecloud", "prompt": "x", "logprobs": "2"}),
            "logprobs",
        ),
        (
            json!({"model": "edgecloud", "prompt": "x", "best_of": 3}),
            "best_of",
        ),
        (
            json!({"model": "edgecloud", "prompt": "x", "top_p": 0}),
            "top_p",
        ),
        (
            json!({"model": "edgecloud", "prompt": "x", "max_tokens": 0}),
            "max_tokens",
        ),
        (
            json!({"model": "edgecloud", "prompt": "x", "edgecloud": {"policy": "fastest"}}),
            "edgecloud.policy",
        ),
        (json!({"model": "nope", "prompt": "x"}), "model"),
    ] {
        let (status, _, text) = post_to(&url, "/completions", body.clone(), &[]).await;
        assert!(status == 400 || status == 404, "{body}: {status} {text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["param"], param, "{body}: {text}");
    }
    let (status, _, text) = post_to(&url, "/completions", json!("x"), &[]).await;
    assert_eq!(status, 400, "{text}");
    // Still serving, and no lane ever saw the bad requests.
    let good = tokio::spawn({
        let url = url.clone();
        async move {
            let body = json!({"model": "edgecloud", "prompt": "x", "logprobs": 1});
            post_to(&url, "/completions", body, &[]).await
        }
    });
    let task = next_task(&local).await;
    assert_eq!(task.index, 0, "the bad requests never reached a lane");
    assert_eq!(task.sampling.logprobs, Some(1));
    let mut answer = edgecloud::harness::Candidate::new("ab", FinishReason::Stop);
    answer.logprobs = Some(
        [("a", -0.25), ("b", -0.5)]
            .into_iter()
            .map(|(t, lp)| TokenLogprob {
                token: t.into(),
                logprob: lp,
                bytes: None,
                top_logprobs: vec![TopLogprob {
                    token: t.into(),
                    logprob: lp,
                    bytes: None,
                }],
            })
            .collect(),
    );
    task.complete_with(answer);
    let (status, _, text) = good.await.unwrap();
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["choices"][0]["logprobs"],
        json!({"text_offset": [0, 1], "token_logprobs": [-0.25, -0.5],
            "tokens": ["a", "b"], "top_logprobs": [{"a": -0.25}, {"b": -0.5}]})
    );
    assert!(server.shutdown().await.is_clean());
}

/// The cloud lane has no raw-prompt path: it sends the prompt as one user
/// message of a chat request (docs/serve.md says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_lane_sends_a_completion_as_one_user_message() {
    let upstream = TestServer::openai(Flavor::OpenAi, &["Once", " upon"]).await;
    let harness = Harness::builder()
        .cloud(CloudBackend::start(CloudConfig::new(upstream.base_url(), "upstream")).unwrap())
        .policy(Policy::CloudOnly)
        .deadline(LONG)
        .build()
        .unwrap();
    let server = serve(harness, loopback()).await;
    for stream in [false, true] {
        let body = json!({"model": "edgecloud", "prompt": "Tell me", "max_tokens": 5,
            "stream": stream});
        let (status, _, text) = post_to(&server.base_url(), "/completions", body, &[]).await;
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("Once") && text.contains(" upon"), "{text}");
        assert!(text.contains("text_completion"), "{text}");
    }
    let sent = upstream.requests();
    assert_eq!(sent.len(), 2);
    for r in &sent {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(
            r.json()["messages"],
            json!([{"role": "user", "content": "Tell me"}])
        );
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_client_completes_a_raw_prompt_on_the_real_local_lane() {
    let harness = Harness::builder()
        .local(local_backend())
        .policy(Policy::LocalOnly)
        .deadline(LONG)
        .build()
        .unwrap();
    let server = serve(harness, loopback()).await;
    let client = client(&server.base_url(), "unused");
    let request = |stream: bool| {
        CreateCompletionRequestArgs::default()
            .model("edgecloud")
            .prompt("Hello there")
            .max_tokens(8u32)
            .temperature(0.9)
            .seed(7)
            .logprobs(2u8)
            .stream(stream)
            .build()
            .unwrap()
    };
    let whole = client.completions().create(request(false)).await.unwrap();
    assert_eq!(whole.object, "text_completion");
    let choice = &whole.choices[0];
    let lp = choice.logprobs.as_ref().expect("log-probabilities");
    let n = lp.tokens.len();
    assert!(n > 0);
    assert_eq!(
        (
            lp.token_logprobs.len(),
            lp.top_logprobs.len(),
            lp.text_offset.len()
        ),
        (n, n, n)
    );
    assert!(lp
        .top_logprobs
        .iter()
        .all(|t| t.as_object().is_some_and(|o| !o.is_empty() && o.len() <= 2)));
    assert!(lp.text_offset.windows(2).all(|w| w[0] <= w[1]));
    let usage = whole.usage.clone().unwrap();

    let mut stream = client
        .completions()
        .create_stream(request(true))
        .await
        .unwrap();
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        for c in chunk.expect("a well-formed chunk").choices {
            text.push_str(&c.text);
        }
    }
    assert_eq!(text, choice.text, "seeded: streamed and whole agree");

    // The raw prompt has no template around it: fewer prompt tokens than
    // the same text as a chat message.
    let chat = client
        .chat()
        .create(
            CreateChatCompletionRequestArgs::default()
                .model("edgecloud")
                .max_completion_tokens(1u32)
                .messages([
                    async_openai::types::ChatCompletionRequestUserMessageArgs::default()
                        .content("Hello there")
                        .build()
                        .unwrap()
                        .into(),
                ])
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    let chat_prompt = chat.usage.unwrap().prompt_tokens;
    assert!(
        usage.prompt_tokens < chat_prompt,
        "raw {} vs chat {chat_prompt}",
        usage.prompt_tokens
    );
    assert!(server.shutdown().await.is_clean());
}
