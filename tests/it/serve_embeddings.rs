//! Integration tests: `POST /v1/embeddings` from the real binary on the
//! real SmolLM2 (pooled by `mean`: its GGUF names no pooling), on
//! loopback: OpenAI's request and response shapes (a string, strings,
//! token arrays; float and base64), the bearer token, CORS, metrics per
//! endpoint, the 4xx answers naming what is wrong, and a real OpenAI
//! client library (`async-openai`) reading it.

use crate::serve::{client, metric, ServeProcess};
use crate::support::real_model::smollm2;
use async_openai::types::{CreateEmbeddingRequestArgs, EmbeddingInput};
use edgecloud::local::{LocalConfig, LocalLane};
use serde_json::{json, Value};
use std::time::Duration;

const HANG: Duration = Duration::from_secs(120);
const TOKEN: &str = "emb-secret";

/// A local-only server on SmolLM2 behind a token, CORS for any origin.
fn server(extra: &[&str]) -> ServeProcess {
    let model = smollm2().to_str().unwrap();
    let mut args = vec![
        "--model",
        model,
        "--policy",
        "local-only",
        "--threads",
        "2",
        "--parallel",
        "2",
        "--token-env",
        "EMB_TOKEN",
        "--cors-origins",
        "*",
    ];
    args.extend_from_slice(extra);
    ServeProcess::start(&args, &[("EMB_TOKEN", TOKEN)])
}

/// POSTs to `/v1/embeddings` with the token (and an Origin).
async fn embed(url: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = tokio::time::timeout(
        HANG,
        reqwest::Client::new()
            .post(format!("{url}/embeddings"))
            .bearer_auth(TOKEN)
            .header("origin", "https://app.example")
            .json(&body)
            .send(),
    )
    .await
    .expect("no hang")
    .expect("a response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {text}"));
    (status, headers, v)
}

fn vector(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("an array of floats")
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

/// Standard base64 (with padding), decoded.
fn unbase64(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let mut out = Vec::new();
    for chunk in s.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let n = chunk
            .iter()
            .map(|&c| if c == b'=' { 0 } else { value(c) })
            .fold(0u32, |a, v| (a << 6) | v);
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_from_the_real_binary_in_openais_shapes() {
    let serve = server(&[]);
    let url = serve.url.clone();

    // The token is required, as on every other endpoint.
    let status = reqwest::Client::new()
        .post(format!("{url}/embeddings"))
        .json(&json!({"model": "edgecloud", "input": "hi"}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 401);

    // One string: one unit vector of the model's width, CORS marked.
    let text = "The lighthouse keeper climbed the stairs at dusk.";
    let (status, headers, one) = embed(
        &url,
        json!({"model": "edgecloud", "input": text, "user": "ignored"}),
    )
    .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(headers["access-control-allow-origin"], "*");
    assert_eq!(one["object"], "list");
    assert_eq!(one["model"], "edgecloud");
    assert_eq!(one["data"][0]["object"], "embedding");
    assert_eq!(one["data"][0]["index"], 0);
    let v = vector(&one["data"][0]["embedding"]);
    assert_eq!(v.len(), 576);
    assert!((cosine(&v, &v) - 1.0).abs() < 1e-4);
    let tokens = one["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(tokens > 5, "{one}");
    assert_eq!(one["usage"]["total_tokens"].as_u64(), Some(tokens));

    // The same text as token ids (as the lane tokenises it) gives the
    // same vector; base64 carries the float vector's bytes.
    let ids = LocalLane::start(LocalConfig {
        threads: Some(1),
        context_size: Some(256),
        ..LocalConfig::new(smollm2())
    })
    .unwrap()
    .embedding_tokens(text);
    assert_eq!(ids.len() as u64, tokens);
    let (status, _, by_ids) = embed(&url, json!({"model": "edgecloud", "input": ids})).await;
    assert_eq!(status, 200, "{by_ids}");
    assert!(cosine(&vector(&by_ids["data"][0]["embedding"]), &v) > 0.99999);
    let (status, _, b64) = embed(
        &url,
        json!({"model": "edgecloud", "input": text, "encoding_format": "base64"}),
    )
    .await;
    assert_eq!(status, 200, "{b64}");
    let bytes = unbase64(b64["data"][0]["embedding"].as_str().unwrap());
    let decoded: Vec<f32> = bytes
        .chunks(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(decoded.len(), 576);
    assert!(cosine(&decoded, &v) > 0.99999);

    // Several strings and token arrays, in order; `dimensions` as the
    // model's width is accepted.
    let (status, _, many) = embed(
        &url,
        json!({"model": "edgecloud", "input": [[1, 2, 3], [4, 5]], "dimensions": 576}),
    )
    .await;
    assert_eq!(status, 200, "{many}");
    assert_eq!(many["data"].as_array().unwrap().len(), 2);
    assert_eq!(many["data"][1]["index"], 1);
    assert_eq!(many["usage"]["prompt_tokens"], 5);
    let (status, _, three) = embed(
        &url,
        json!({"model": "edgecloud", "input": ["The cat sat on the mat.", "A cat was sitting on the mat.", "Quarterly revenue grew by eight percent."]}),
    )
    .await;
    assert_eq!(status, 200, "{three}");
    let [a, b, c] = [0, 1, 2].map(|i| vector(&three["data"][i]["embedding"]));
    assert!(cosine(&a, &b) > cosine(&a, &c));

    // Mistakes: 4xx naming the field; the server keeps serving.
    let long: String = (0..400).map(|i| format!("word{} ", i % 37)).collect();
    for (body, status, param, code) in [
        (
            json!({"model": "edgecloud", "input": "x", "dimensions": 256}),
            400,
            "dimensions",
            "unsupported_value",
        ),
        (
            json!({"model": "edgecloud", "input": ""}),
            400,
            "input",
            "invalid_value",
        ),
        (
            json!({"model": "edgecloud", "input": []}),
            400,
            "input",
            "invalid_value",
        ),
        (
            json!({"model": "edgecloud", "input": ["fine", long]}),
            400,
            "input",
            "context_length_exceeded",
        ),
        (
            json!({"model": "edgecloud", "input": [[1, 4000000]]}),
            400,
            "input",
            "invalid_value",
        ),
        (
            json!({"model": "no-such-model", "input": "x"}),
            404,
            "model",
            "model_not_found",
        ),
    ] {
        let (got, _, err) = embed(&url, body.clone()).await;
        assert_eq!(got, status, "{body}: {err}");
        assert_eq!(err["error"]["param"], param, "{body}: {err}");
        assert_eq!(err["error"]["code"], code, "{body}: {err}");
    }
    let (_, _, err) = embed(&url, json!({"model": "edgecloud", "input": ["fine", long]})).await;
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("input 1"),
        "{err}"
    );

    // Counted per endpoint, as the others are.
    let resp = reqwest::Client::new()
        .get(format!("{}/metrics", url.trim_end_matches("/v1")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metric(
            &resp,
            "edgecloud_http_requests_total{endpoint=\"/v1/embeddings\",status=\"200\"}"
        ) >= 5.0,
        "{resp}"
    );

    // A real OpenAI client reads it.
    let answer = client(&url, TOKEN)
        .embeddings()
        .create(
            CreateEmbeddingRequestArgs::default()
                .model("edgecloud")
                .input(EmbeddingInput::StringArray(vec![
                    text.to_string(),
                    "another".to_string(),
                ]))
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(answer.data.len(), 2);
    assert_eq!(answer.data[0].embedding.len(), 576);
    assert!(cosine(&answer.data[0].embedding, &v) > 0.9999);

    // Generation still answers.
    let chat = client(&url, TOKEN)
        .chat()
        .create(
            async_openai::types::CreateChatCompletionRequestArgs::default()
                .model("edgecloud")
                .max_completion_tokens(8u32)
                .messages([
                    async_openai::types::ChatCompletionRequestUserMessageArgs::default()
                        .content("Hello")
                        .build()
                        .unwrap()
                        .into(),
                ])
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(!chat.choices.is_empty());
    let (clean, _) = serve.stop("-TERM");
    assert!(clean);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooling_that_gives_no_vector_per_input_is_a_400_naming_the_model() {
    let serve = server(&["--pooling", "none"]);
    let (status, _, err) = embed(&serve.url, json!({"model": "edgecloud", "input": "x"})).await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "model_cannot_embed");
    assert_eq!(err["error"]["param"], "model");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("none"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bert_model_serves_embeddings_and_refuses_every_generating_endpoint() {
    // A generated random-weight GGUF of llama.cpp's `bert` architecture
    // (`cls` pooling named in the file): an embedding model served alone.
    let path = crate::support::models::fresh_path("serve-tiny-bert.gguf");
    edgecloud::gguf::write_model(&path, edgecloud::gguf::Preset::TinyBert, 3).unwrap();
    let serve = ServeProcess::start(
        &[
            "--model",
            path.to_str().unwrap(),
            "--policy",
            "local-only",
            "--threads",
            "2",
            "--token-env",
            "EMB_TOKEN",
        ],
        &[("EMB_TOKEN", TOKEN)],
    );
    let url = serve.url.clone();
    let (status, _, out) = embed(
        &url,
        json!({"model": "edgecloud", "input": ["a harbour at dawn", "revenue grew"]}),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    let a = vector(&out["data"][0]["embedding"]);
    let b = vector(&out["data"][1]["embedding"]);
    assert_eq!(a.len(), 64);
    assert!((cosine(&a, &a) - 1.0).abs() < 1e-4);
    assert_ne!(a, b);

    // Every generating endpoint, whole and streamed: a 400 naming the
    // cause, not a gateway error.
    for (path, body) in [
        (
            "/chat/completions",
            json!({"model": "edgecloud", "messages": [{"role": "user", "content": "Hi"}]}),
        ),
        (
            "/completions",
            json!({"model": "edgecloud", "prompt": "Hi"}),
        ),
        ("/responses", json!({"model": "edgecloud", "input": "Hi"})),
    ] {
        for stream in [false, true] {
            let mut body = body.clone();
            body["stream"] = json!(stream);
            let resp = tokio::time::timeout(
                HANG,
                reqwest::Client::new()
                    .post(format!("{url}{path}"))
                    .bearer_auth(TOKEN)
                    .json(&body)
                    .send(),
            )
            .await
            .expect("no hang")
            .expect("a response");
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            assert_eq!(status, 400, "{path} (stream {stream}): {text}");
            let err: Value = serde_json::from_str(&text).expect("an error object");
            assert_eq!(
                err["error"]["type"], "invalid_request_error",
                "{path}: {text}"
            );
            let message = err["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("embedding model") && message.contains("cannot generate"),
                "{path} (stream {stream}): {text}"
            );
        }
    }
    // The server still embeds afterwards.
    let (status, _, _) = embed(&url, json!({"model": "edgecloud", "input": "still"})).await;
    assert_eq!(status, 200);
}
