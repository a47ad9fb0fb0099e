//! Integration tests: `POST /v1/messages` and `/v1/messages/count_tokens`
//! (Anthropic's Messages API) on a real server: `system`, text,
//! `tool_use` and `tool_result` blocks reach the lane as the chat request
//! they map onto, through the same harness; the answer is a `message`
//! whole, and streamed Anthropic's event sequence; the stop reasons; every
//! error in Anthropic's shape and statuses, the server serving on; the
//! real binary on the generated tiny model for the local tokenizer's
//! count.

use crate::serve::{loopback, next_task, post_to, scripted_pair, serve, ServeProcess};
use crate::support::models::tiny_model;
use edgecloud::harness::{Candidate, LaneErrorKind, Policy};
use edgecloud::serve::BearerToken;
use edgecloud::{ChatMessage, FinishReason, Role, ToolCall, ToolChoice};
use serde_json::{json, Value};

/// The events of an SSE body: (the `event:` name, the data), each data's
/// `type` checked against its name.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap_or_else(|_| panic!("{d}"));
                }
            }
            assert_eq!(data["type"], name.as_str(), "{e}");
            (name, data)
        })
        .collect()
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

fn weather_tool() -> Value {
    json!([{"name": "get_weather", "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}])
}

/// Anthropic's error shape, its `type` and message.
fn anthropic_error(text: &str) -> (String, String) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("{text}"));
    assert_eq!(v["type"], "error", "{text}");
    (
        v["error"]["type"].as_str().unwrap().to_string(),
        v["error"]["message"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_maps_blocks_onto_the_chat_request_whole_and_streamed() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let body = json!({"model": "edgecloud", "max_tokens": 20, "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 C"}]}],
        "tools": weather_tool(), "temperature": 0.2, "top_k": 5,
        "stop_sequences": ["\n\nHuman:"], "metadata": {"user_id": "u1"}});
    let whole = tokio::spawn({
        let (url, body) = (url.clone(), body.clone());
        async move {
            post_to(
                &url,
                "/messages",
                body,
                &[("anthropic-version", "2023-06-01")],
            )
            .await
        }
    });
    let task = next_task(&local).await;
    assert_eq!(task.messages.len(), 4);
    assert_eq!(task.messages[0], ChatMessage::system("Be brief."));
    assert_eq!(task.messages[1], ChatMessage::user("Weather in Oslo?"));
    assert_eq!(task.messages[2].role, Role::Assistant);
    assert_eq!(task.messages[2].tool_calls[0].id, "toolu_1");
    assert_eq!(task.messages[3], ChatMessage::tool("toolu_1", "12 C"));
    assert_eq!(task.sampling.max_tokens, 20);
    assert_eq!(task.sampling.top_k, 5);
    assert_eq!(task.sampling.stop, ["\n\nHuman:"]);
    assert_eq!(task.sampling.tools[0].function.name, "get_weather");
    task.complete("It is 12 C.");
    let (status, headers, text) = whole.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-edgecloud-lane"], "local");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert!(v["id"].as_str().unwrap().starts_with("msg-"));
    assert_eq!(v["model"], "edgecloud");
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "It is 12 C."}])
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["stop_sequence"], Value::Null);
    assert!(v["usage"]["input_tokens"].is_u64() && v["usage"]["output_tokens"].is_u64());
    assert_eq!(v["edgecloud"]["lane"], "local");

    let mut body = body;
    body["stream"] = json!(true);
    let streamed = tokio::spawn({
        let url = url.clone();
        async move { post_to(&url, "/messages", body, &[]).await }
    });
    let task = next_task(&local).await;
    task.token("It is");
    task.token(" 12 C.");
    task.complete("It is 12 C.");
    let (status, headers, text) = streamed.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let ev = events(&text);
    assert_eq!(
        names(&ev),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    assert_eq!(ev[0].1["message"]["content"], json!([]));
    assert_eq!(ev[0].1["message"]["stop_reason"], Value::Null);
    assert_eq!(
        ev[2].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let deltas: String = ev
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(deltas, "It is 12 C.");
    assert_eq!(ev[6].1["delta"]["stop_reason"], "end_turn");
    assert!(ev[6].1["usage"]["output_tokens"].is_u64());
    assert_eq!(ev[6].1["edgecloud"]["lane"], "local");
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_length_and_stop_sequences_have_their_stop_reasons() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for stream in [false, true] {
        // A call: a tool_use block, streamed as one input_json_delta.
        let body = json!({"model": "edgecloud", "max_tokens": 64, "stream": stream,
            "messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "tools": weather_tool(), "tool_choice": {"type": "tool", "name": "get_weather"}});
        let answer = tokio::spawn({
            let url = url.clone();
            async move { post_to(&url, "/messages", body, &[]).await }
        });
        let task = next_task(&local).await;
        assert_eq!(
            task.sampling.tool_choice,
            Some(ToolChoice::Function("get_weather".into()))
        );
        let call = ToolCall::new("toolu_7", "get_weather", &json!({"city": "Oslo"}));
        task.complete_with(Candidate::new("", FinishReason::Stop).with_tool_calls(vec![call]));
        let (status, _, text) = answer.await.unwrap();
        assert_eq!(status, 200, "{text}");
        let (content, stop_reason) = if stream {
            let ev = events(&text);
            assert_eq!(
                names(&ev),
                [
                    "message_start",
                    "ping",
                    "content_block_start",
                    "content_block_delta",
                    "content_block_stop",
                    "message_delta",
                    "message_stop",
                ]
            );
            let block = &ev[2].1["content_block"];
            assert_eq!(block["type"], "tool_use");
            assert_eq!(block["input"], json!({}));
            assert_eq!(ev[3].1["delta"]["type"], "input_json_delta");
            let input: Value =
                serde_json::from_str(ev[3].1["delta"]["partial_json"].as_str().unwrap()).unwrap();
            let mut block = block.clone();
            block["input"] = input;
            (json!([block]), ev[5].1["delta"]["stop_reason"].clone())
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            (v["content"].clone(), v["stop_reason"].clone())
        };
        assert_eq!(
            content,
            json!([{"type": "tool_use", "id": "toolu_7", "name": "get_weather",
                "input": {"city": "Oslo"}}]),
            "stream {stream}"
        );
        assert_eq!(stop_reason, "tool_use");

        // Cut by max_tokens, then ended by a stop sequence.
        for (candidate, reason, sequence) in [
            (
                Candidate::new("Once upon", FinishReason::Length),
                "max_tokens",
                Value::Null,
            ),
            (
                {
                    let mut c = Candidate::new("Once upon", FinishReason::Stop);
                    c.stop_sequence = Some("###".into());
                    c
                },
                "stop_sequence",
                json!("###"),
            ),
        ] {
            let body = json!({"model": "edgecloud", "max_tokens": 2, "stream": stream,
                "stop_sequences": ["###"], "messages": [{"role": "user", "content": "Tell"}]});
            let answer = tokio::spawn({
                let url = url.clone();
                async move { post_to(&url, "/messages", body, &[]).await }
            });
            next_task(&local).await.complete_with(candidate);
            let (status, _, text) = answer.await.unwrap();
            assert_eq!(status, 200, "{text}");
            let (got_reason, got_sequence) = if stream {
                let ev = events(&text);
                let delta = &ev[ev.len() - 2].1["delta"];
                (delta["stop_reason"].clone(), delta["stop_sequence"].clone())
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["content"][0]["text"], "Once upon");
                (v["stop_reason"].clone(), v["stop_sequence"].clone())
            };
            assert_eq!((got_reason, got_sequence), (json!(reason), sequence));
        }
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_anthropics_shape_and_statuses_whole_and_streamed() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for stream in [false, true] {
        let body = json!({"model": "edgecloud", "max_tokens": 8, "stream": stream,
            "messages": [{"role": "user", "content": "x"}]});
        // Every lane failed: Anthropic has no 502; its 500 `api_error`.
        let failing = tokio::spawn({
            let (url, body) = (url.clone(), body.clone());
            async move { post_to(&url, "/messages", body, &[]).await }
        });
        next_task(&local)
            .await
            .fail(LaneErrorKind::Model, "decode failed");
        let (status, _, text) = failing.await.unwrap();
        assert_eq!(status, 500, "stream {stream}: {text}");
        assert_eq!(anthropic_error(&text).0, "api_error");

        // The prompt fits no lane: a 400 naming `messages`.
        let long = tokio::spawn({
            let (url, body) = (url.clone(), body.clone());
            async move { post_to(&url, "/messages", body, &[]).await }
        });
        next_task(&local).await.fail(
            LaneErrorKind::ContextLengthExceeded,
            "the prompt has 9000 tokens; the context holds 2048",
        );
        let (status, _, text) = long.await.unwrap();
        assert_eq!(status, 400, "stream {stream}: {text}");
        let (kind, message) = anthropic_error(&text);
        assert_eq!(kind, "invalid_request_error");
        assert!(message.starts_with("messages: "), "{message}");

        // Busy: Anthropic's 529 `overloaded_error`, with Retry-After.
        let held = tokio::spawn({
            let (url, body) = (url.clone(), body.clone());
            async move { post_to(&url, "/messages", body, &[]).await }
        });
        let task = next_task(&local).await;
        let (status, headers, text) = post_to(&url, "/messages", body.clone(), &[]).await;
        assert_eq!(status, 529, "{text}");
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(anthropic_error(&text).0, "overloaded_error");
        task.complete("done");
        assert_eq!(held.await.unwrap().0, 200);
    }
    // A failure after the first byte: an `error` event, no message_stop.
    let streaming = tokio::spawn({
        let url = url.clone();
        async move {
            let body = json!({"model": "edgecloud", "max_tokens": 8, "stream": true,
                "messages": [{"role": "user", "content": "x"}]});
            post_to(&url, "/messages", body, &[]).await
        }
    });
    let task = next_task(&local).await;
    task.token("half an ");
    task.fail(LaneErrorKind::Model, "decode failed");
    let (status, _, text) = streaming.await.unwrap();
    assert_eq!(status, 200);
    let ev = events(&text);
    let (name, last) = ev.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(last["error"]["type"], "api_error");
    assert!(!names(&ev).contains(&"message_stop"));
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_a_4xx_naming_the_field_and_the_server_keeps_serving() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let user = json!([{"role": "user", "content": "x"}]);
    let with = |k: &str, v: Value| {
        let mut b = json!({"model": "edgecloud", "max_tokens": 5, "messages": user});
        b[k] = v;
        b
    };
    for (body, status, field) in [
        (
            json!({"model": "edgecloud", "messages": user}),
            400,
            "max_tokens",
        ),
        (with("max_tokens", json!(0)), 400, "max_tokens"),
        (
            with(
                "messages",
                json!([{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]),
            ),
            400,
            "messages.0.content.0.tool_use_id",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": [{"type": "audio"}]}]),
            ),
            400,
            "messages.0.content.0.type",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": [{"type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}}]}]),
            ),
            400,
            "messages.0.content.0.type",
        ),
        (with("temperature", json!(1.5)), 400, "temperature"),
        (
            with("stop_sequences", json!(["a", ""])),
            400,
            "stop_sequences.1",
        ),
        (
            with(
                "tools",
                json!([{"name": "f", "input_schema": {"type": "object",
                "properties": {"x": {"type": "string", "pattern": "a+"}}}}]),
            ),
            400,
            "tools.0.input_schema",
        ),
        (with("model", json!("nope")), 404, "nope"),
    ] {
        let (got, _, text) = post_to(&url, "/messages", body.clone(), &[]).await;
        assert_eq!(got, status, "{body}: {text}");
        let (kind, message) = anthropic_error(&text);
        let expected = if status == 404 {
            "not_found_error"
        } else {
            "invalid_request_error"
        };
        assert_eq!(kind, expected, "{text}");
        assert!(message.contains(field), "{body}: {message}");
    }
    // Not JSON; the wrong method; an endpoint of this API we do not have.
    let resp = reqwest::Client::new()
        .post(format!("{url}/messages"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        anthropic_error(&resp.text().await.unwrap()).0,
        "invalid_request_error"
    );
    let resp = reqwest::get(format!("{url}/messages")).await.unwrap();
    assert_eq!(resp.status(), 405);
    let (status, _, text) = post_to(&url, "/messages/batches", json!({}), &[]).await;
    assert_eq!(status, 404);
    assert_eq!(anthropic_error(&text).0, "not_found_error");

    let ok = tokio::spawn({
        let url = url.clone();
        async move {
            let body = json!({"model": "edgecloud", "max_tokens": 5, "messages": [
                {"role": "user", "content": "x"}]});
            post_to(&url, "/messages", body, &[]).await
        }
    });
    let task = next_task(&local).await;
    assert_eq!(task.index, 0, "no bad request reached a lane");
    task.complete("fine");
    let (status, _, text) = ok.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_api_key_is_the_bearer_token_and_a_missing_one_is_anthropics_401() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let config = loopback().token(BearerToken::new("s3cret").unwrap());
    let server = serve(builder.build().unwrap(), config).await;
    let url = server.base_url();
    let body = json!({"model": "edgecloud", "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}]});
    for headers in [vec![], vec![("x-api-key", "wrong")]] {
        let (status, _, text) = post_to(&url, "/messages", body.clone(), &headers).await;
        assert_eq!(status, 401, "{text}");
        assert_eq!(anthropic_error(&text).0, "authentication_error");
    }
    let ok = tokio::spawn({
        let url = url.clone();
        async move { post_to(&url, "/messages", body, &[("x-api-key", "s3cret")]).await }
    });
    next_task(&local).await.complete("fine");
    assert_eq!(ok.await.unwrap().0, 200);
    // The OpenAI endpoints take it too.
    let (status, _, _) = post_to(&url, "/models", json!({}), &[("x-api-key", "s3cret")]).await;
    assert_eq!(status, 405, "past the token check: GET only");
    assert!(server.shutdown().await.is_clean());
}

/// The real binary on the generated tiny model: a whole and a streamed
/// message, and `count_tokens` counting with the local tokenizer exactly
/// the prompt tokens the run took; an image is refused and the server
/// keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_binary_answers_messages_and_counts_their_tokens_locally() {
    let server = ServeProcess::local_only(tiny_model(), &["--deadline-ms", "60000"]);
    let url = &server.url;
    let body = json!({"model": "edgecloud", "max_tokens": 8, "temperature": 0.9,
        "system": "You are brief.",
        "messages": [{"role": "user", "content": "Say hello."}]});
    let (status, _, text) = post_to(url, "/messages", body.clone(), &[]).await;
    assert_eq!(status, 200, "{text}");
    let whole: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(whole["type"], "message");
    assert!(
        ["end_turn", "max_tokens"].contains(&whole["stop_reason"].as_str().unwrap()),
        "{whole}"
    );
    let input_tokens = whole["usage"]["input_tokens"].as_u64().unwrap();
    assert!(input_tokens > 0, "{whole}");

    let (status, _, text) = post_to(url, "/messages/count_tokens", body.clone(), &[]).await;
    assert_eq!(status, 200, "{text}");
    let count: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(count["input_tokens"], input_tokens, "{count}");
    assert_eq!(count["edgecloud"]["source"], "local_tokenizer");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, _, text) = post_to(url, "/messages", streamed, &[]).await;
    assert_eq!(status, 200, "{text}");
    let ev = events(&text);
    assert_eq!(ev[0].0, "message_start");
    assert_eq!(ev.last().unwrap().0, "message_stop");
    assert_eq!(
        ev[ev.len() - 2].1["usage"]["input_tokens"],
        input_tokens,
        "{text}"
    );

    let mut image = body;
    image["messages"] = json!([{"role": "user", "content": [{"type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}}]}]);
    let (status, _, text) = post_to(url, "/messages", image, &[]).await;
    assert_eq!(status, 400, "{text}");
    assert!(
        anthropic_error(&text).1.contains("not supported yet"),
        "{text}"
    );
    let (status, _, _) = post_to(
        url,
        "/messages",
        json!({"model": "edgecloud", "max_tokens": 2,
            "messages": [{"role": "user", "content": "Still there?"}]}),
        &[],
    )
    .await;
    assert_eq!(status, 200);
    let (ok, err) = server.stop("-TERM");
    assert!(ok, "{err}");
}
