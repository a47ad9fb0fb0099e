//! Shapes of real servers: each flavour streamed and whole, what a request carries, keys, pooling, SSE quirks.

use super::*;

#[tokio::test]
async fn every_server_shape_streamed_and_whole() {
    for flavor in Flavor::ALL {
        for stream in [true, false] {
            let server = TestServer::openai(flavor, GOOD).await;
            let lane = lane_with(&server, |c| c.stream = stream);
            let (seen, sink) = collecting_sink();
            let done = lane
                .run(job("hi").with_sink(sink))
                .await
                .unwrap_or_else(|e| panic!("{flavor:?} stream={stream}: {e}"));
            let what = format!("{flavor:?} stream={stream}");
            assert_eq!(done.text, GOOD_TEXT, "{what}");
            assert_eq!(
                *seen.lock().unwrap(),
                GOOD_TEXT,
                "{what}: sink saw every piece"
            );
            assert_eq!(done.finish_reason, FinishReason::Stop, "{what}");
            assert_eq!(
                done.provider_finish_reason.as_deref(),
                Some("stop"),
                "{what}"
            );
            let usage = done.usage.expect("the provider sent usage");
            assert_eq!(
                (
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.total_tokens
                ),
                (9, 3, 12),
                "{what}"
            );
            assert_eq!(done.http_status, 200);
            assert_eq!(done.streamed, stream, "{what}");
            assert!(done.model.is_some(), "{what}: the server echoed its model");
            let t = done.timings;
            let (ttfb, ttft) = (t.ttfb.unwrap(), t.ttft.unwrap());
            assert!(ttfb <= ttft && ttft <= t.total, "{what}: {t:?}");
            assert!(t.connect.is_some(), "{what}: a fresh connection was timed");
        }
    }
}

#[tokio::test]
async fn request_carries_model_messages_sampling_and_the_key() {
    let server = TestServer::openai(Flavor::Vllm, GOOD).await;
    let lane = lane(&server);
    let mut j = LaneJob::new(
        vec![ChatMessage::system("be brief"), ChatMessage::user("hi")],
        Sampling {
            max_tokens: 5,
            temperature: 0.0,
            stop: vec!["END".into()],
            seed: Some(42),
            ..Sampling::default()
        },
        Instant::now() + Duration::from_secs(30),
    );
    j.cancel = CancellationToken::new();
    lane.run(j).await.unwrap();
    let reqs = server.requests();
    let req = &reqs[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("accept"), Some("text/event-stream"));
    let body = req.json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "hi");
    assert_eq!(body["max_tokens"], 5);
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["seed"], 42);
    assert_eq!(body["stop"][0], "END");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert!(body.get("top_k").is_none(), "top_k is off by default");
    assert!(body.get("response_format").is_none(), "text is never sent");
}

/// `response_format` is passed through unchanged in the request body
/// (issue 24): the provider enforces it.
#[tokio::test]
async fn response_format_is_passed_through_unchanged() {
    let server = TestServer::openai(Flavor::Vllm, GOOD).await;
    let lane = lane(&server);
    let schema = serde_json::json!({"type": "object", "required": ["a"],
        "properties": {"a": {"type": "integer"}}});
    let mut j = LaneJob::new(
        vec![ChatMessage::user("hi")],
        Sampling {
            response_format: Some(edgecloud::ResponseFormat::json_schema(
                "thing",
                schema.clone(),
            )),
            ..Sampling::default()
        },
        Instant::now() + Duration::from_secs(30),
    );
    j.cancel = CancellationToken::new();
    lane.run(j).await.unwrap();
    let body = server.requests()[0].json();
    assert_eq!(
        body["response_format"],
        serde_json::json!({"type": "json_schema",
            "json_schema": {"name": "thing", "schema": schema, "strict": true}})
    );
}

/// `tools`, `tool_choice`, `logprobs` and `top_logprobs` are passed
/// through (issue 24), and the provider's `tool_calls` and per-token
/// `logprobs` come back on the completion, streamed (as deltas, arguments
/// in pieces) and whole.
#[tokio::test]
async fn tools_and_logprobs_are_passed_through_and_come_back() {
    let lp = r#"{"content": [{"token": "x", "logprob": -0.5, "bytes": [120], "top_logprobs": [{"token": "x", "logprob": -0.5}]}]}"#;
    let server = TestServer::start(move |mut conn| async move {
        while let Some(req) = conn.read_request().await {
            if req.wants_stream() {
                conn.sse_head().await.unwrap();
                let events = [
                    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#.to_string(),
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_9","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#.to_string(),
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}"#.to_string(),
                    format!(r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":"\"Oslo\"}}"}}}}]}},"logprobs":{lp}}}]}}"#),
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#.to_string(),
                ];
                for ev in events {
                    conn.event(&ev).await.unwrap();
                }
                conn.event("[DONE]").await.unwrap();
                conn.end_chunks().await.unwrap();
            } else {
                let body = format!(
                    r#"{{"choices":[{{"index":0,"finish_reason":"tool_calls","logprobs":{lp},
                    "message":{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_9",
                    "type":"function","function":{{"name":"get_weather","arguments":"{{\"city\":\"Oslo\"}}"}}}}]}}}}]}}"#
                );
                conn.json(200, &body).await.unwrap();
            }
        }
    })
    .await;
    let sampling = Sampling {
        tools: vec![edgecloud::Tool::function(
            "get_weather",
            "Weather in a city",
            serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        )],
        tool_choice: Some(edgecloud::ToolChoice::Required),
        logprobs: Some(1),
        ..Sampling::default()
    };
    for stream in [true, false] {
        let lane = lane_with(&server, |c| c.stream = stream);
        let j = LaneJob::new(
            vec![ChatMessage::user("weather in Oslo?")],
            sampling.clone(),
            Instant::now() + Duration::from_secs(30),
        );
        let done = lane.run(j).await.unwrap();
        assert_eq!(done.tool_calls.len(), 1, "stream={stream}");
        let call = &done.tool_calls[0];
        assert_eq!(
            (
                call.id.as_str(),
                call.function.name.as_str(),
                call.function.arguments.as_str()
            ),
            ("call_9", "get_weather", r#"{"city":"Oslo"}"#),
            "stream={stream}"
        );
        assert_eq!(done.provider_finish_reason.as_deref(), Some("tool_calls"));
        let lp = done.logprobs.expect("the provider's log-probabilities");
        assert_eq!((lp[0].token.as_str(), lp[0].logprob), ("x", -0.5));
        assert_eq!(lp[0].top_logprobs.len(), 1);
    }
    let body = server.requests()[0].json();
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["logprobs"], true);
    assert_eq!(body["top_logprobs"], 1);
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let server = TestServer::openai(Flavor::Ollama, GOOD).await;
    let mut cfg = CloudConfig::new(server.base_url(), "m");
    cfg.api_key_env = "EDGECLOUD_TEST_UNSET_KEY_VAR".into();
    CloudLane::new(cfg).unwrap().run(job("hi")).await.unwrap();
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn key_from_the_named_environment_variable() {
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    std::env::set_var("EDGECLOUD_TEST_KEY_FROM_ENV", "sk-from-env-123");
    let mut cfg = CloudConfig::new(server.base_url(), "m");
    cfg.api_key_env = "EDGECLOUD_TEST_KEY_FROM_ENV".into();
    CloudLane::new(cfg).unwrap().run(job("hi")).await.unwrap();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-from-env-123")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn one_pooled_connection_serves_consecutive_requests() {
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    let lane = lane(&server);
    let first = lane.run(job("hi")).await.unwrap();
    // Let the connection task hand the idle connection back to the pool
    // (it runs on this same thread).
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    let second = lane.clone().run(job("hi")).await.unwrap();
    assert_eq!(second.text, GOOD_TEXT);
    assert_eq!(server.accepted(), 1, "keep-alive: one TCP connection");
    assert!(first.timings.connect.is_some());
    assert!(
        second.timings.connect.is_none(),
        "the pooled connection was reused"
    );
}

#[tokio::test]
async fn comments_keepalives_crlf_and_unspaced_data_lines() {
    let server = TestServer::start(|mut conn| async move {
        let Some(_) = conn.read_request().await else { return };
        let mut body = Vec::new();
        body.extend(chunked(b": OPENROUTER PROCESSING\n\n"));
        body.extend(chunked(b"\n\n\n"));
        body.extend(chunked(b"data:{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n"));
        body.extend(chunked(b"event: message\r\nid: 1\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\r\n\r\n"));
        body.extend(chunked(b": keep-alive\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},"));
        body.extend(chunked(b"\"finish_reason\":\"length\"}]}\r\r"));
        body.extend(chunked(b"data: [DONE]\n\n"));
        body.extend(b"0\r\n\r\n");
        let mut out = SSE_HEAD.as_bytes().to_vec();
        out.extend(body);
        let _ = conn.write(&out).await;
        conn.wait_closed().await;
    })
    .await;
    let done = lane(&server).run(job("hi")).await.unwrap();
    assert_eq!(done.text, "Hello");
    assert_eq!(done.finish_reason, FinishReason::Length);
    assert_eq!(done.provider_finish_reason.as_deref(), Some("length"));
    assert!(done.usage.is_none(), "no usage sent, none invented");
    assert!(done.gen_tokens_per_s().is_none());
}

#[tokio::test]
async fn a_response_dripped_one_byte_per_write_parses() {
    for stream in [true, false] {
        let server = TestServer::start(move |mut conn| async move {
            let Some(req) = conn.read_request().await else { return };
            let bytes = if stream {
                let mut out = SSE_HEAD.as_bytes().to_vec();
                for ev in Flavor::LlamaServer.stream_events(&["Hé", "llo ", "wörld"], "stop", Some((4, 3))) {
                    out.extend(chunked(format!("data: {ev}\n\n").as_bytes()));
                }
                out.extend(chunked(b"data: [DONE]\n\n"));
                out.extend(b"0\r\n\r\n");
                out
            } else {
                let body = Flavor::LlamaServer.whole_body("Héllo wörld", "stop", Some((4, 3)));
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            };
            assert_eq!(req.wants_stream(), stream);
            let _ = conn.drip(&bytes).await;
            conn.wait_closed().await;
        })
        .await;
        let (seen, sink) = collecting_sink();
        let done = lane_with(&server, |c| c.stream = stream)
            .run(job("hi").with_sink(sink))
            .await
            .unwrap();
        assert_eq!(done.text, "Héllo wörld");
        assert_eq!(*seen.lock().unwrap(), "Héllo wörld");
        assert_eq!(done.usage.unwrap().completion_tokens, 3);
    }
}

#[tokio::test]
async fn a_server_ignoring_stream_true_still_answers() {
    let server = TestServer::start(|mut conn| async move {
        while let Some(_req) = conn.read_request().await {
            let body = Flavor::Ollama.whole_body(GOOD_TEXT, "stop", None);
            if conn.json(200, &body).await.is_err() {
                return;
            }
        }
    })
    .await;
    let done = lane(&server).run(job("hi")).await.unwrap();
    assert_eq!(done.text, GOOD_TEXT);
    assert!(!done.streamed);
    assert!(done.usage.is_none());
}

/// A reasoning model's thinking arrives apart from the answer, whether the
/// provider splits it off (`reasoning_content`, as llama-server, vLLM and
/// DeepSeek send it; `reasoning` in newer vLLM and OpenRouter) or leaves
/// a `<think>` block in the content (split here, even when a tag is cut
/// across deltas); the answer's sink sees only the answer, the reasoning
/// sink the thinking, and the provider's reasoning-token count is kept.
#[tokio::test]
async fn thinking_arrives_apart_from_the_answer_streamed_and_whole() {
    fn chunk(delta: serde_json::Value) -> String {
        serde_json::json!({"choices": [{"index": 0, "delta": delta}]}).to_string()
    }
    const SPLIT: [&str; 2] = ["reasoning_content", "reasoning"];
    for (case, field) in [(0, SPLIT[0]), (1, SPLIT[1]), (2, "content")] {
        let server = TestServer::start(move |mut conn| async move {
            while let Some(req) = conn.read_request().await {
                let usage = serde_json::json!({"prompt_tokens": 9, "completion_tokens": 7,
                    "total_tokens": 16, "completion_tokens_details": {"reasoning_tokens": 4}});
                if req.wants_stream() {
                    if conn.sse_head().await.is_err() {
                        return;
                    }
                    let mut events: Vec<String> = if case < 2 {
                        ["Sum", " it."]
                            .iter()
                            .map(|p| chunk(serde_json::json!({field: p})))
                            .chain([chunk(serde_json::json!({"content": "FOUR"}))])
                            .collect()
                    } else {
                        ["<thi", "nk>\nSum", " it.</th", "ink>\n\nFO", "UR"]
                            .iter()
                            .map(|p| chunk(serde_json::json!({"content": p})))
                            .collect()
                    };
                    events.push(
                        serde_json::json!({"choices": [{"index": 0, "delta": {},
                            "finish_reason": "stop"}], "usage": usage})
                        .to_string(),
                    );
                    events.push("[DONE]".into());
                    for ev in &events {
                        if conn.event(ev).await.is_err() {
                            return;
                        }
                    }
                    if conn.end_chunks().await.is_err() {
                        return;
                    }
                } else {
                    let message = if case < 2 {
                        serde_json::json!({"role": "assistant", "content": "FOUR", field: "Sum it."})
                    } else {
                        serde_json::json!({"role": "assistant",
                            "content": "<think>\nSum it.</think>\n\nFOUR"})
                    };
                    let body = serde_json::json!({"choices": [{"index": 0, "message": message,
                        "finish_reason": "stop"}], "usage": usage});
                    if conn.json(200, &body.to_string()).await.is_err() {
                        return;
                    }
                }
            }
        })
        .await;
        for stream in [true, false] {
            let what = format!("{field} stream={stream}");
            let lane = lane_with(&server, |c| c.stream = stream);
            let (answer, sink) = collecting_sink();
            let (thinking, reasoning_sink) = collecting_sink();
            let done = lane
                .run(
                    job("2+2?")
                        .with_sink(sink)
                        .with_reasoning_sink(reasoning_sink),
                )
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(done.text, "FOUR", "{what}");
            assert_eq!(done.reasoning.as_deref(), Some("Sum it."), "{what}");
            assert_eq!(*answer.lock().unwrap(), "FOUR", "{what}");
            assert_eq!(*thinking.lock().unwrap(), "Sum it.", "{what}");
            assert_eq!(done.usage.unwrap().reasoning_tokens, Some(4), "{what}");
        }
    }
}
