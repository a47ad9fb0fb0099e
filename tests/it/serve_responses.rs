//! Integration tests: `POST /v1/responses` (the Responses API, stateless)
//! on a real server: input items, instructions and function tools reach
//! the lane as the chat request they map onto, through the same harness;
//! the answer is a response object whole, and streamed the event sequence
//! the official clients parse, each event numbered; the same status
//! either way; bad items and stateful fields are a 400 naming them.

use crate::serve::{loopback, next_task, post_to, scripted_pair, serve};
use edgecloud::harness::{Candidate, LaneErrorKind, Policy};
use edgecloud::{ChatMessage, FinishReason, ToolCall, ToolChoice};
use serde_json::{json, Value};

/// The events of an SSE body: (the `event:` name, the data).
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
            (name, data)
        })
        .collect()
}

fn types(events: &[(String, Value)]) -> Vec<&str> {
    events
        .iter()
        .map(|(_, d)| d["type"].as_str().unwrap())
        .collect()
}

/// Every event names its type twice and counts from 0 without a gap.
fn check_numbering(events: &[(String, Value)]) {
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], i, "{data}");
    }
}

fn weather_tool() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_maps_items_onto_the_chat_request_whole_and_streamed() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let body = json!({"model": "edgecloud", "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                "arguments": "{\"city\":\"Oslo\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "12 C"}],
        "tools": weather_tool(), "max_output_tokens": 20, "temperature": 0.2,
        "store": true, "metadata": {"trace": "t1"}});
    let whole = tokio::spawn({
        let (url, body) = (url.clone(), body.clone());
        async move { post_to(&url, "/responses", body, &[]).await }
    });
    let task = next_task(&local).await;
    assert_eq!(task.messages.len(), 4);
    assert_eq!(task.messages[0], ChatMessage::system("Be brief."));
    assert_eq!(task.messages[1], ChatMessage::user("Weather in Oslo?"));
    assert_eq!(task.messages[2].tool_calls[0].id, "call_1");
    assert_eq!(task.messages[3], ChatMessage::tool("call_1", "12 C"));
    assert_eq!(task.sampling.max_tokens, 20);
    assert_eq!(task.sampling.tools[0].function.name, "get_weather");
    assert!(!task.sampling.raw_prompt);
    task.complete("It is 12 C.");
    let (status, headers, text) = whole.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-edgecloud-lane"], "local");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "response");
    assert!(v["id"].as_str().unwrap().starts_with("resp-"));
    assert_eq!(v["status"], "completed");
    assert_eq!(v["instructions"], "Be brief.");
    assert_eq!(v["metadata"], json!({"trace": "t1"}));
    assert_eq!(v["tools"], weather_tool());
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(v["output"][0]["role"], "assistant");
    assert_eq!(v["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(v["output"][0]["content"][0]["text"], "It is 12 C.");
    assert!(v["usage"]["input_tokens"].is_u64() && v["usage"]["output_tokens"].is_u64());
    assert_eq!(v["edgecloud"]["lane"], "local");

    let mut body = body;
    body["stream"] = json!(true);
    let streamed = tokio::spawn({
        let url = url.clone();
        async move { post_to(&url, "/responses", body, &[]).await }
    });
    let task = next_task(&local).await;
    task.token("It is");
    task.token(" 12 C.");
    task.complete("It is 12 C.");
    let (status, headers, text) = streamed.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let ev = events(&text);
    check_numbering(&ev);
    assert_eq!(
        types(&ev),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(ev[0].1["response"]["status"], "in_progress");
    let deltas: String = ev
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "It is 12 C.");
    assert_eq!(ev[6].1["text"], "It is 12 C.");
    let done = &ev.last().unwrap().1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "It is 12 C.");
    assert_eq!(done["edgecloud"]["lane"], "local");
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_calls_come_back_as_items_and_argument_events() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for stream in [false, true] {
        let body = json!({"model": "edgecloud", "input": "Weather in Oslo?",
            "tools": weather_tool(), "tool_choice": "required", "stream": stream});
        let answer = tokio::spawn({
            let url = url.clone();
            async move { post_to(&url, "/responses", body, &[]).await }
        });
        let task = next_task(&local).await;
        assert_eq!(task.sampling.tool_choice, Some(ToolChoice::Required));
        let call = ToolCall::new("call_7", "get_weather", &json!({"city": "Oslo"}));
        task.complete_with(Candidate::new("", FinishReason::Stop).with_tool_calls(vec![call]));
        let (status, _, text) = answer.await.unwrap();
        assert_eq!(status, 200, "{text}");
        let object = if stream {
            let ev = events(&text);
            check_numbering(&ev);
            assert_eq!(
                types(&ev),
                [
                    "response.created",
                    "response.in_progress",
                    "response.output_item.added",
                    "response.function_call_arguments.delta",
                    "response.function_call_arguments.done",
                    "response.output_item.done",
                    "response.completed",
                ]
            );
            assert_eq!(ev[2].1["item"]["type"], "function_call");
            assert_eq!(ev[2].1["item"]["arguments"], "");
            assert_eq!(ev[4].1["arguments"], "{\"city\":\"Oslo\"}");
            ev.last().unwrap().1["response"].clone()
        } else {
            serde_json::from_str(&text).unwrap()
        };
        let output = object["output"].as_array().unwrap();
        assert_eq!(
            output.len(),
            1,
            "no empty message beside the call: {object}"
        );
        assert_eq!(output[0]["type"], "function_call");
        assert_eq!(output[0]["call_id"], "call_7");
        assert_eq!(output[0]["name"], "get_weather");
        assert_eq!(output[0]["arguments"], "{\"city\":\"Oslo\"}");
        assert_eq!(output[0]["status"], "completed");
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_gets_the_same_status_whole_and_streamed_and_says_when_it_is_cut() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for stream in [false, true] {
        let body = json!({"model": "edgecloud", "input": "x", "stream": stream});
        let failing = tokio::spawn({
            let (url, body) = (url.clone(), body.clone());
            async move { post_to(&url, "/responses", body, &[]).await }
        });
        next_task(&local)
            .await
            .fail(LaneErrorKind::Model, "decode failed");
        let (status, _, text) = failing.await.unwrap();
        assert_eq!(status, 502, "stream {stream}: {text}");

        let long = tokio::spawn({
            let (url, body) = (url.clone(), body.clone());
            async move { post_to(&url, "/responses", body, &[]).await }
        });
        next_task(&local).await.fail(
            LaneErrorKind::ContextLengthExceeded,
            "the prompt has 9000 tokens; the context holds 2048",
        );
        let (status, _, text) = long.await.unwrap();
        assert_eq!(status, 400, "stream {stream}: {text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["code"], "context_length_exceeded");
        assert_eq!(e["error"]["param"], "input");

        let cut = tokio::spawn({
            let url = url.clone();
            async move { post_to(&url, "/responses", body, &[]).await }
        });
        next_task(&local)
            .await
            .complete_with(Candidate::new("Once upon", FinishReason::Length));
        let (status, _, text) = cut.await.unwrap();
        assert_eq!(status, 200, "stream {stream}: {text}");
        let object = if stream {
            let ev = events(&text);
            check_numbering(&ev);
            let (name, last) = ev.last().unwrap();
            assert_eq!(name, "response.incomplete");
            last["response"].clone()
        } else {
            serde_json::from_str(&text).unwrap()
        };
        assert_eq!(object["status"], "incomplete");
        assert_eq!(object["incomplete_details"]["reason"], "max_output_tokens");
    }
    // A failure after the first byte: an `error` event, then
    // `response.failed`.
    let streaming = tokio::spawn({
        let url = url.clone();
        async move {
            let body = json!({"model": "edgecloud", "input": "x", "stream": true});
            post_to(&url, "/responses", body, &[]).await
        }
    });
    let task = next_task(&local).await;
    task.token("half an ");
    task.fail(LaneErrorKind::Model, "decode failed");
    let (status, _, text) = streaming.await.unwrap();
    assert_eq!(status, 200);
    let ev = events(&text);
    check_numbering(&ev);
    let names = types(&ev);
    assert_eq!(names[names.len() - 2..], ["error", "response.failed"]);
    assert_eq!(ev[ev.len() - 2].1["code"], "lanes_failed");
    assert_eq!(ev.last().unwrap().1["response"]["status"], "failed");
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_items_and_stateful_fields_are_a_400_naming_them_and_the_server_keeps_serving() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for (body, param) in [
        (
            json!({"model": "edgecloud", "input": "x", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (json!({"model": "edgecloud"}), "input"),
        (json!({"model": "edgecloud", "input": []}), "input"),
        (
            json!({"model": "edgecloud", "input": [{"type": "image"}]}),
            "input[0].type",
        ),
        (
            json!({"model": "edgecloud", "input": [{"role": "user",
                "content": [{"type": "input_image", "image_url": "x"}]}]}),
            "input[0].content[0].type",
        ),
        (
            json!({"model": "edgecloud", "input": [{"type": "function_call_output", "output": "x"}]}),
            "input[0].call_id",
        ),
        (
            json!({"model": "edgecloud", "input": "x", "tools": [{"type": "file_search"}]}),
            "tools[0].type",
        ),
        (
            json!({"model": "edgecloud", "input": "x", "text": {"format": {"type": "json_schema",
                "name": "n", "schema": {"type": "string", "pattern": "a+"}}}}),
            "text.format.schema",
        ),
        (
            json!({"model": "edgecloud", "input": "x", "max_output_tokens": 0}),
            "max_output_tokens",
        ),
        (
            json!({"model": "edgecloud", "input": "x", "top_p": 3}),
            "top_p",
        ),
        (json!({"model": "nope", "input": "x"}), "model"),
    ] {
        let (status, _, text) = post_to(&url, "/responses", body.clone(), &[]).await;
        assert!(status == 400 || status == 404, "{body}: {status} {text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["param"], param, "{body}: {text}");
    }
    let ok = tokio::spawn({
        let url = url.clone();
        async move {
            let body = json!({"model": "edgecloud", "input": "x", "store": false});
            post_to(&url, "/responses", body, &[]).await
        }
    });
    let task = next_task(&local).await;
    assert_eq!(task.index, 0, "the bad requests never reached a lane");
    task.complete("fine");
    let (status, _, text) = ok.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(server.shutdown().await.is_clean());
}
