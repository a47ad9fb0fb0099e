//! Integration tests: the request's own faults and odd answers on the real
//! binary and the real SmolLM2 (local-only, on loopback), whole and
//! streamed: a `json_schema` llama.cpp's grammar cannot take is a 400
//! naming the keyword (never a 502), and a greedy answer that is only
//! newlines is returned (200) both ways, its decision saying why.

use crate::serve::{post_to, sse_data, ServeProcess};
use crate::support::real_model::smollm2;
use serde_json::{json, Value};

fn server() -> ServeProcess {
    ServeProcess::local_only(smollm2(), &["--parallel", "1"])
}

/// The `data:` payloads of an SSE body, parsed, `[DONE]` left out.
fn events(body: &str) -> Vec<Value> {
    sse_data(body)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_llama_cpp_cannot_compile_is_a_400_naming_the_keyword_whole_and_streamed() {
    let serve = server();
    for stream in [false, true] {
        let (status, _, text) = post_to(
            &serve.url,
            "/chat/completions",
            json!({"model": "edgecloud", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8, "stream": stream,
                "response_format": {"type": "json_schema", "json_schema": {"name": "s",
                    "schema": {"type": "string", "minLength": 100000}}}}),
            &[],
        )
        .await;
        assert_eq!(status, 400, "stream {stream}: {text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("`minLength` 100000") && message.contains("response_format"),
            "{message}"
        );
    }
    // The server goes on answering.
    let (status, _, text) = post_to(
        &serve.url,
        "/chat/completions",
        json!({"model": "edgecloud", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_answer_of_only_newlines_is_200_whole_and_streamed() {
    let serve = server();
    // SmolLM2 continues a run of newlines with newlines (greedy).
    let body = |stream: bool| {
        json!({"model": "edgecloud", "prompt": "List:\n\n\n\n\n\n\n\n\n\n\n\n",
            "max_tokens": 2, "temperature": 0, "stream": stream})
    };
    let (status, _, text) = post_to(&serve.url, "/completions", body(false), &[]).await;
    assert_eq!(status, 200, "{text}");
    let whole: Value = serde_json::from_str(&text).unwrap();
    let answer = whole["choices"][0]["text"].as_str().unwrap().to_string();
    assert!(
        !answer.is_empty() && answer.trim().is_empty(),
        "the premise: a blank answer, got {answer:?}"
    );
    let decision = whole["edgecloud"]["decision"].as_str().unwrap();
    assert!(decision.contains("blank"), "{decision}");

    let (status, _, text) = post_to(&serve.url, "/completions", body(true), &[]).await;
    assert_eq!(status, 200, "{text}");
    let events = events(&text);
    let streamed: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, answer);
    let last = events.last().unwrap();
    assert_eq!(last["edgecloud"]["status"], "ok", "{last}");
}
