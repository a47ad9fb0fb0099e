//! Integration tests: Ollama's native API (`/api/*`) on a real server:
//! what apps probe first (`/api/version`, `/api/tags`, `/api/show` with
//! its capabilities, `/api/ps`), `/api/chat` and `/api/generate` through
//! the same harness (NDJSON streaming by default, `stream: false` whole,
//! the final object's timings), tools, options and `format`, embeddings,
//! the model-management calls refused with what to do instead, and every
//! error in Ollama's shape with the server serving on; the real binary
//! on the generated tiny model (one model, and several with per-request
//! `keep_alive`).

use crate::serve::{loopback, next_task, post_to, scripted_pair, serve, ServeProcess};
use crate::support::models::tiny_model;
use edgecloud::harness::{Candidate, LaneErrorKind, Policy};
use edgecloud::serve::ModelFacts;
use edgecloud::{ChatMessage, FinishReason, ResponseFormat, ToolCall};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

/// The server's root (its base URL without `/v1`).
fn root(url: &str) -> String {
    url.trim_end_matches("/v1").to_string()
}

async fn api(url: &str, path: &str, body: Value) -> (u16, String, String) {
    let (status, headers, text) = post_to(&root(url), path, body, &[]).await;
    let kind = headers
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, kind, text)
}

async fn get(url: &str, path: &str) -> (u16, Value) {
    let resp = reqwest::get(format!("{}{path}", root(url))).await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}")),
    )
}

/// The objects of an NDJSON body, one per line.
fn lines(body: &str) -> Vec<Value> {
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("a JSON line: {l}")))
        .collect()
}

/// Ollama's error shape: its message.
fn ollama_error(text: &str) -> String {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("{text}"));
    assert_eq!(
        v.as_object().map(|o| o.len()),
        Some(1),
        "only `error`: {text}"
    );
    v["error"].as_str().unwrap().to_string()
}

fn timed_fields(last: &Value) {
    for k in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ] {
        assert!(last[k].is_u64(), "{k} in {last}");
    }
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather in a city", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_streams_ndjson_by_default_and_answers_whole_when_asked() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let body = json!({"model": "edgecloud", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
            {"role": "tool", "tool_name": "get_weather", "content": "12 C"}],
        "tools": weather_tool(), "format": "json", "keep_alive": "10m",
        "options": {"num_predict": 30, "temperature": 0.2, "top_k": 4, "seed": 9,
            "stop": ["\n\n"], "num_ctx": 8192, "repeat_penalty": 1.0}});
    // Streamed: Ollama's default.
    let streamed = tokio::spawn({
        let (url, body) = (url.clone(), body.clone());
        async move { api(&url, "/api/chat", body).await }
    });
    let task = next_task(&local).await;
    assert_eq!(task.messages[0], ChatMessage::system("Be brief."));
    let call_id = task.messages[2].tool_calls[0].id.clone();
    assert_eq!(task.messages[3], ChatMessage::tool(call_id, "12 C"));
    let s = &task.sampling;
    assert_eq!(
        (s.max_tokens, s.temperature, s.top_k, s.seed),
        (30, 0.2, 4, Some(9))
    );
    assert_eq!(s.stop, ["\n\n"]);
    assert_eq!(s.response_format, Some(ResponseFormat::JsonObject));
    assert_eq!(s.tools[0].function.name, "get_weather");
    task.token("{\"t\":");
    task.token(" 12}");
    task.complete("{\"t\": 12}");
    let (status, kind, text) = streamed.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(kind, "application/x-ndjson");
    let objects = lines(&text);
    let pieces: String = objects
        .iter()
        .filter(|o| o["done"] == false)
        .map(|o| {
            assert_eq!(o["model"], "edgecloud");
            assert!(o["created_at"].as_str().unwrap().ends_with('Z'));
            o["message"]["content"].as_str().unwrap()
        })
        .collect();
    assert_eq!(pieces, "{\"t\": 12}");
    let last = objects.last().unwrap();
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "stop");
    assert_eq!(last["message"]["content"], "");
    timed_fields(last);
    assert_eq!(last["edgecloud"]["lane"], "local");

    // Whole, and cut by num_predict.
    let mut body = body;
    body["stream"] = json!(false);
    let whole = tokio::spawn({
        let url = url.clone();
        async move { api(&url, "/api/chat", body).await }
    });
    next_task(&local)
        .await
        .complete_with(Candidate::new("{\"t\": 1", FinishReason::Length));
    let (status, kind, text) = whole.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert_eq!(kind, "application/json");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["message"],
        json!({"role": "assistant", "content": "{\"t\": 1"})
    );
    assert_eq!(
        (v["done"].clone(), v["done_reason"].clone()),
        (json!(true), json!("length"))
    );
    timed_fields(&v);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_come_back_as_ollama_writes_them_whole_and_streamed() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    for stream in [false, true] {
        let body = json!({"model": "edgecloud:latest", "stream": stream, "tools": weather_tool(),
            "messages": [{"role": "user", "content": "Weather in Oslo?"}]});
        let answer = tokio::spawn({
            let url = url.clone();
            async move { api(&url, "/api/chat", body).await }
        });
        let call = ToolCall::new("call_7", "get_weather", &json!({"city": "Oslo"}));
        next_task(&local)
            .await
            .complete_with(Candidate::new("", FinishReason::Stop).with_tool_calls(vec![call]));
        let (status, _, text) = answer.await.unwrap();
        assert_eq!(status, 200, "{text}");
        let objects = if stream {
            lines(&text)
        } else {
            vec![serde_json::from_str(&text).unwrap()]
        };
        let with_calls: Vec<&Value> = objects
            .iter()
            .filter(|o| o["message"].get("tool_calls").is_some())
            .collect();
        assert_eq!(with_calls.len(), 1, "{text}");
        let call = &with_calls[0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather");
        assert_eq!(call["function"]["arguments"], json!({"city": "Oslo"}));
        assert_eq!(objects.last().unwrap()["done_reason"], "stop");
        assert_eq!(
            objects.last().unwrap()["model"],
            "edgecloud",
            "the name as known"
        );
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_takes_system_and_prompt_or_the_raw_prompt_and_loads_on_an_empty_one() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    // Nothing to answer: Ollama's "load the model", no run.
    let (status, _, text) = api(&url, "/api/generate", json!({"model": "edgecloud"})).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (v["done"].clone(), v["done_reason"].clone()),
        (json!(true), json!("load"))
    );
    assert_eq!(v["response"], "");
    for (body, raw) in [
        (
            json!({"model": "edgecloud", "prompt": "Why is the sky blue?", "system": "Be brief.",
                "stream": false}),
            false,
        ),
        (
            json!({"model": "edgecloud", "prompt": "<|im_start|>user\nHi", "raw": true}),
            true,
        ),
    ] {
        let answer = tokio::spawn({
            let url = url.clone();
            async move { api(&url, "/api/generate", body).await }
        });
        let task = next_task(&local).await;
        assert_eq!(task.index, u64::from(raw), "the load request ran nothing");
        assert_eq!(task.sampling.raw_prompt, raw);
        if raw {
            assert_eq!(task.messages, [ChatMessage::user("<|im_start|>user\nHi")]);
            task.token("Hello");
            task.complete("Hello");
        } else {
            assert_eq!(
                task.messages,
                [
                    ChatMessage::system("Be brief."),
                    ChatMessage::user("Why is the sky blue?")
                ]
            );
            task.complete("Scattering.");
        }
        let (status, kind, text) = answer.await.unwrap();
        assert_eq!(status, 200, "{text}");
        let last = if raw {
            assert_eq!(kind, "application/x-ndjson");
            let objects = lines(&text);
            assert_eq!(objects[0]["response"], "Hello");
            objects.last().unwrap().clone()
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["response"], "Scattering.");
            v
        };
        assert_eq!(last["done"], true);
        timed_fields(&last);
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_in_ollamas_shape_and_the_server_keeps_serving() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let url = server.base_url();
    let user = json!([{"role": "user", "content": "x"}]);
    let with = |k: &str, v: Value| {
        let mut b = json!({"model": "edgecloud", "messages": user});
        b[k] = v;
        b
    };
    for (path, body, status, field) in [
        (
            "/api/chat",
            with("options", json!({"temperature": "hot"})),
            400,
            "options.temperature",
        ),
        (
            "/api/chat",
            with("options", json!({"num_predict": "many"})),
            400,
            "options.num_predict",
        ),
        (
            "/api/chat",
            with("options", json!({"repeat_penalty": 1.3})),
            400,
            "options.repeat_penalty",
        ),
        (
            "/api/chat",
            with("format", json!({"type": "string", "pattern": "a+"})),
            400,
            "format",
        ),
        (
            "/api/chat",
            with("keep_alive", json!("soon")),
            400,
            "keep_alive",
        ),
        (
            "/api/chat",
            with(
                "messages",
                json!([{"role": "user", "content": "x", "images": ["aGk="]}]),
            ),
            400,
            "messages[0].images",
        ),
        ("/api/chat", with("model", json!("nope")), 404, "nope"),
        (
            "/api/generate",
            json!({"model": "edgecloud", "prompt": "x", "suffix": "y"}),
            400,
            "suffix",
        ),
        (
            "/api/generate",
            json!({"model": "edgecloud", "prompt": "x", "context": [1, 2, 3]}),
            400,
            "context",
        ),
        ("/api/show", json!({"model": "nope"}), 404, "nope"),
        (
            "/api/embed",
            json!({"model": "edgecloud", "input": 3}),
            400,
            "input",
        ),
    ] {
        let (got, _, text) = api(&url, path, body.clone()).await;
        assert_eq!(got, status, "{path} {body}: {text}");
        let message = ollama_error(&text);
        assert!(message.contains(field), "{path} {body}: {message}");
    }
    // Model management is not offered: 501, saying how models come here.
    for (method, path) in [
        ("POST", "/api/pull"),
        ("POST", "/api/create"),
        ("POST", "/api/copy"),
        ("DELETE", "/api/delete"),
        ("POST", "/api/push"),
        ("HEAD", "/api/blobs/sha256:00"),
    ] {
        let resp = reqwest::Client::new()
            .request(method.parse().unwrap(), format!("{}{path}", root(&url)))
            .json(&json!({"model": "smollm2"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 501, "{method} {path}");
        if method != "HEAD" {
            let message = ollama_error(&resp.text().await.unwrap());
            assert!(
                message.contains("edgecloud model fetch") && message.contains("ollama:NAME"),
                "{message}"
            );
        }
    }
    // An endpoint of this API we do not have; the wrong method.
    let (status, _, text) = api(&url, "/api/nothing", json!({})).await;
    assert_eq!(status, 404);
    ollama_error(&text);
    let (status, v) = get(&url, "/api/chat").await;
    assert_eq!(status, 405, "{v}");

    // A failure after the first line: an error line, no `done`.
    let streaming = tokio::spawn({
        let url = url.clone();
        async move {
            api(
                &url,
                "/api/chat",
                json!({"model": "edgecloud", "messages": user}),
            )
            .await
        }
    });
    let task = next_task(&local).await;
    assert_eq!(task.index, 0, "no bad request reached a lane");
    task.token("half an ");
    task.fail(LaneErrorKind::Model, "decode failed");
    let (status, _, text) = streaming.await.unwrap();
    assert_eq!(status, 200);
    let objects = lines(&text);
    assert!(objects.last().unwrap()["error"].is_string(), "{text}");
    assert!(objects.iter().all(|o| o["done"] != true));

    let ok = tokio::spawn({
        let url = url.clone();
        async move {
            let body = json!({"model": "edgecloud", "prompt": "x", "stream": false});
            api(&url, "/api/generate", body).await
        }
    });
    next_task(&local).await.complete("fine");
    assert_eq!(ok.await.unwrap().0, 200);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_tags_show_and_ps_describe_the_served_models() {
    let (_local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let mut facts = ModelFacts::generative().digest_with(|| Some("sha256:0123".into()));
    facts.size = 98_362_432;
    facts.architecture = Some("llama".into());
    facts.parameters = Some(134_515_008);
    facts.quantization = Some("Q4_1".into());
    facts.context_length = Some(8192);
    facts.serving_context = Some(4096);
    facts.chat_template = Some("{{ messages }}".into());
    facts.memory_bytes = Some(400_000_000);
    facts.modified = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let config = loopback()
        .model_facts("edgecloud", facts)
        .model_alias("smollm2");
    let server = serve(builder.build().unwrap(), config).await;
    let url = server.base_url();

    let (status, v) = get(&url, "/api/version").await;
    assert_eq!(status, 200);
    assert!(v["version"].as_str().unwrap().starts_with("0."), "{v}");

    let (status, v) = get(&url, "/api/tags").await;
    assert_eq!(status, 200);
    let models = v["models"].as_array().unwrap();
    let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["edgecloud", "smollm2"]);
    let m = &models[0];
    assert_eq!(m["model"], "edgecloud");
    assert_eq!(m["size"], 98_362_432);
    assert_eq!(m["digest"], "sha256:0123");
    assert_eq!(m["modified_at"], "2023-11-14T22:13:20.000000000Z");
    assert_eq!(
        m["details"],
        json!({"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
            "parameter_size": "134.52M", "quantization_level": "Q4_1"})
    );
    assert_eq!(
        models[1]["digest"], "sha256:0123",
        "an alias is the same model"
    );

    for name in ["edgecloud", "smollm2:latest"] {
        let (status, _, text) = api(&url, "/api/show", json!({"model": name})).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["capabilities"], json!(["completion", "tools"]));
        assert_eq!(v["template"], "{{ messages }}");
        assert_eq!(v["model_info"]["general.architecture"], "llama");
        assert_eq!(v["model_info"]["llama.context_length"], 8192);
        assert_eq!(v["model_info"]["general.parameter_count"], 134_515_008);
        assert!(v["parameters"].as_str().unwrap().contains("num_ctx"), "{v}");
        assert_eq!(v["details"]["quantization_level"], "Q4_1");
    }
    // The older spelling of the model field.
    let (status, _, _) = api(&url, "/api/show", json!({"name": "edgecloud"})).await;
    assert_eq!(status, 200);

    let (status, v) = get(&url, "/api/ps").await;
    assert_eq!(status, 200);
    let loaded = v["models"].as_array().unwrap();
    assert_eq!(loaded.len(), 1, "{v}");
    assert_eq!(loaded[0]["name"], "edgecloud");
    assert_eq!(loaded[0]["size"], 400_000_000);
    assert_eq!(loaded[0]["context_length"], 4096);
    assert_eq!(
        loaded[0]["expires_at"], "9999-12-31T23:59:59Z",
        "a server of one model never unloads it"
    );
    assert!(server.shutdown().await.is_clean());
}

/// The real binary on the generated tiny model: what it says about the
/// model comes from the file; chat, generate and embeddings answer with
/// real timings; embeddings are one vector per input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_binary_describes_its_model_and_answers_ollamas_calls() {
    let server = ServeProcess::local_only(tiny_model(), &["--deadline-ms", "60000"]);
    let url = server.url.clone();
    let file_size = std::fs::metadata(tiny_model()).unwrap().len();

    let (_, tags) = get(&url, "/api/tags").await;
    let m = &tags["models"][0];
    assert_eq!(m["name"], "edgecloud");
    assert_eq!(m["size"], file_size);
    assert_eq!(m["details"]["family"], "llama");
    assert_eq!(m["details"]["format"], "gguf");
    assert!(!m["details"]["quantization_level"]
        .as_str()
        .unwrap()
        .is_empty());
    let digest = m["digest"].as_str().unwrap();
    assert!(
        digest.len() == 71 && digest.starts_with("sha256:"),
        "{digest}"
    );
    let (status, _, text) = api(&url, "/api/show", json!({"model": "edgecloud"})).await;
    assert_eq!(status, 200, "{text}");
    let show: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(show["capabilities"], json!(["completion", "tools"]));
    assert!(
        show["model_info"]["llama.context_length"].is_u64(),
        "{show}"
    );
    let (_, ps) = get(&url, "/api/ps").await;
    assert!(
        ps["models"][0]["size"].as_u64().unwrap() > file_size,
        "weights and KV cache: {ps}"
    );

    let (status, _, text) = api(
        &url,
        "/api/chat",
        json!({"model": "edgecloud", "stream": false, "options": {"num_predict": 6, "seed": 3},
            "messages": [{"role": "user", "content": "Say hello."}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    timed_fields(&v);
    assert!(v["prompt_eval_count"].as_u64().unwrap() > 0, "{v}");
    assert!(v["total_duration"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["total_duration"].as_u64().unwrap() >= v["prompt_eval_duration"].as_u64().unwrap(),
        "{v}"
    );
    // The same chat again: the prompt's cells are reused (the instance
    // that answered it takes it), and Ollama's `prompt_eval_cached_count`
    // says how many; `prompt_eval_count` stays the whole prompt's.
    let chat = json!({"model": "edgecloud", "stream": false, "options": {"num_predict": 6, "seed": 3},
        "messages": [{"role": "user", "content": "Say hello."}]});
    let (status, _, text) = api(&url, "/api/chat", chat).await;
    assert_eq!(status, 200, "{text}");
    let again: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        again["prompt_eval_count"], v["prompt_eval_count"],
        "{again}"
    );
    let cached = again["prompt_eval_cached_count"].as_u64().unwrap();
    assert!(
        cached > 0 && cached < again["prompt_eval_count"].as_u64().unwrap(),
        "{again}"
    );

    let (status, kind, text) = api(
        &url,
        "/api/generate",
        json!({"model": "edgecloud", "prompt": "Once upon a time", "raw": true,
            "options": {"num_predict": 6, "seed": 3}}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(kind, "application/x-ndjson");
    let last = lines(&text).pop().unwrap();
    assert_eq!(last["done"], true);
    timed_fields(&last);

    let (status, _, text) = api(
        &url,
        "/api/embed",
        json!({"model": "edgecloud", "input": ["The cat sat.", "A dog ran."]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let vectors = v["embeddings"].as_array().unwrap();
    assert_eq!(vectors.len(), 2);
    assert!(v["prompt_eval_count"].as_u64().unwrap() > 0);
    let (status, _, text) = api(
        &url,
        "/api/embeddings",
        json!({"model": "edgecloud", "prompt": "The cat sat."}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let old: Value = serde_json::from_str(&text).unwrap();
    // The same vector either way (batched with another input or alone:
    // equal but for float rounding).
    let dot: f64 = old["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .zip(vectors[0].as_array().unwrap())
        .map(|(a, b)| a.as_f64().unwrap() * b.as_f64().unwrap())
        .sum();
    assert!(dot > 0.9999, "cosine {dot}");
    let (ok, err) = server.stop("-TERM");
    assert!(ok, "{err}");
}

/// Several models: `/api/ps` lists the loaded ones with when their
/// keep-alive unloads them, and a request's `keep_alive` changes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_keep_alive_sets_when_its_model_unloads() {
    let tiny = tiny_model().display().to_string();
    let server = ServeProcess::start(
        &[
            "--model",
            &format!("a={tiny}"),
            "--model",
            &format!("b={tiny}"),
            "--policy",
            "local-only",
            "--threads",
            "2",
            "--parallel",
            "1",
            "--keep-alive",
            "5m",
            "--deadline-ms",
            "60000",
        ],
        &[],
    );
    let url = server.url.clone();
    let (_, tags) = get(&url, "/api/tags").await;
    let names: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["edgecloud", "a", "b"]);
    assert_eq!(
        tags["models"][1]["details"]["family"], "llama",
        "read before loading"
    );
    let (_, ps) = get(&url, "/api/ps").await;
    assert_eq!(ps["models"], json!([]), "nothing loaded yet");

    // Loaded by an empty generate (Ollama's preload), kept for an hour.
    let (status, _, text) = api(
        &url,
        "/api/generate",
        json!({"model": "a", "keep_alive": "1h"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (_, ps) = get(&url, "/api/ps").await;
    let loaded = ps["models"].as_array().unwrap();
    assert_eq!(loaded.len(), 1, "{ps}");
    assert_eq!(loaded[0]["name"], "a");
    let expires = loaded[0]["expires_at"].as_str().unwrap();
    let in_an_hour = edgecloud_wire::ollama::rfc3339(SystemTime::now() + Duration::from_secs(3000));
    assert!(
        expires > in_an_hour.as_str(),
        "{expires} after {in_an_hour}"
    );

    let (status, _, text) = api(
        &url,
        "/api/chat",
        json!({"model": "a", "keep_alive": -1, "stream": false,
            "options": {"num_predict": 2}, "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (_, ps) = get(&url, "/api/ps").await;
    assert_eq!(
        ps["models"][0]["expires_at"], "9999-12-31T23:59:59Z",
        "{ps}"
    );
    let (ok, err) = server.stop("-TERM");
    assert!(ok, "{err}");
}
