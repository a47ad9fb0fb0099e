//! Integration tests: a route's cloud side. Each route may name the model
//! the cloud lane asks for (`cloud_model`), and may send
//! `POST /v1/embeddings` to the cloud endpoint's `/v1/embeddings`
//! (`embeddings = "cloud"`). The cloud is a real loopback HTTP server
//! (serving chat in OpenAI's shapes and fixed vectors, or misbehaving on
//! purpose); the front door is a real `Server` (library) or the real
//! binary, on loopback.

use crate::serve::{loopback, metric, metrics_text, post_to, ServeProcess};
use crate::support::cli::bin;
use crate::support::http::{Flavor, Recorded, TestServer};
use crate::support::models::{tiny_model, write_temp};
use edgecloud::cloud::{CloudConfig, CloudLane};
use edgecloud::harness::{Harness, HarnessConfig};
use edgecloud::serve::{CloudEmbedder, Server};
use serde_json::{json, Value};
use std::time::Duration;

/// The vector the stand-in cloud gives input `i`, at `width`.
fn fixed(i: usize, width: usize) -> Vec<f32> {
    (0..width)
        .map(|d| (i + 1) as f32 + d as f32 * 0.25)
        .collect()
}

/// Standard base64 with padding of little-endian f32 values, as OpenAI
/// sends `encoding_format: "base64"`.
fn base64_f32(v: &[f32]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An OpenAI embeddings answer to `req`: one fixed vector per input
/// (`dimensions` wide, else 3), floats or base64 as asked.
fn embeddings_answer(req: &Recorded) -> String {
    let body = req.json();
    let inputs = match &body["input"] {
        Value::Array(items) => items.len(),
        _ => 1,
    };
    let width = body["dimensions"].as_u64().unwrap_or(3) as usize;
    let base64 = body["encoding_format"] == "base64";
    let data: Vec<Value> = (0..inputs)
        .map(|i| {
            let v = fixed(i, width);
            let embedding = if base64 {
                json!(base64_f32(&v))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    json!({"object": "list", "data": data, "model": body["model"],
           "usage": {"prompt_tokens": 7, "total_tokens": 7}})
    .to_string()
}

/// A well-behaved stand-in cloud: chat in OpenAI's shapes (answer "hi"),
/// embeddings as [`embeddings_answer`].
async fn cloud() -> TestServer {
    TestServer::start(|mut conn| async move {
        while let Some(req) = conn.read_request().await {
            let sent = if req.path.ends_with("/embeddings") {
                conn.json(200, &embeddings_answer(&req)).await
            } else {
                conn.answer(Flavor::OpenAi, &req, &["hi"]).await
            };
            if sent.is_err() {
                return;
            }
        }
    })
    .await
}

/// The `model` of each request the cloud received at `path`, in order.
fn models_asked(cloud: &TestServer, path: &str) -> Vec<String> {
    cloud
        .requests()
        .iter()
        .filter(|r| r.path.ends_with(path))
        .map(|r| r.json()["model"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn config(text: &str) -> HarnessConfig {
    HarnessConfig::from_toml_str(text).expect("a valid config")
}

/// A harness with only the cloud lane `cfg` describes, on this runtime.
fn cloud_harness(cfg: &HarnessConfig) -> Harness {
    Harness::builder()
        .config(cfg)
        .unwrap()
        .lanes_from(cfg)
        .unwrap()
        .runtime(tokio::runtime::Handle::current())
        .build()
        .unwrap()
}

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hello"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_route_asks_the_cloud_for_its_own_model() {
    let cloud = cloud().await;
    let cfg = config(&format!(
        "[cloud]\nbase_url = \"{}\"\nmodel = \"house-model\"\n\
         [harness]\npolicy = \"cloud-only\"\n\
         [routes.mini]\ncloud_model = \"gpt-4o-mini\"\n\
         [routes.big]\npolicy = \"cloud-only\"\ncloud_model = \"gpt-4o\"\n\
         [routes.plain]\ndeadline_ms = 20000\n",
        cloud.base_url()
    ));
    let server = Server::bind(cloud_harness(&cfg), loopback())
        .await
        .unwrap()
        .spawn();
    let url = server.base_url();
    for name in ["edgecloud", "mini", "big", "plain", "mini"] {
        let (status, headers, body) = post_to(&url, "/chat/completions", chat(name), &[]).await;
        assert_eq!(status, 200, "{name}: {body}");
        let route = if name == "edgecloud" { "default" } else { name };
        assert_eq!(headers["x-edgecloud-route"], route);
        assert_eq!(headers["x-edgecloud-lane"], "cloud");
    }
    assert_eq!(
        models_asked(&cloud, "/chat/completions"),
        [
            "house-model",
            "gpt-4o-mini",
            "gpt-4o",
            "house-model",
            "gpt-4o-mini"
        ]
    );
    assert!(server.shutdown().await.is_clean());
}

#[test]
fn a_route_naming_a_cloud_model_without_a_cloud_lane_is_refused_by_name() {
    // The library: building the harness.
    let cfg = config(
        "[harness]\npolicy = \"local-only\"\n[routes.mini]\ncloud_model = \"gpt-4o-mini\"\n",
    );
    let Err(err) = cfg.build() else {
        panic!("a route naming a cloud model built without a cloud lane")
    };
    let err = err.to_string();
    assert!(
        err.contains("routes.mini.cloud_model") && err.contains("no cloud lane"),
        "{err}"
    );
    // `cloud_model` is a route's; [harness] has [cloud] model.
    let err = HarnessConfig::from_toml_str("[harness]\ncloud_model = \"m\"\n").unwrap_err();
    assert!(err.to_string().contains("harness.cloud_model"), "{err}");
    let err = HarnessConfig::from_toml_str("[routes.a]\ncloud_model = \" \"\n")
        .map_err(|e| e.to_string())
        .and_then(|c| c.build().map(drop).map_err(|e| e.to_string()))
        .unwrap_err();
    assert!(err.contains("cloud_model"), "{err}");

    // The binary: `serve` refuses to start, naming the route, for
    // `cloud_model` and for embeddings sent to a cloud it does not have.
    let model = tiny_model().to_str().unwrap();
    for (table, named) in [
        (
            "[routes.mini]\ncloud_model = \"gpt-4o-mini\"\n",
            "routes.mini.cloud_model",
        ),
        (
            "[routes.vec]\nembeddings = \"cloud\"\n",
            "routes.vec.embeddings",
        ),
    ] {
        let file = write_temp("routes-no-cloud.toml", table.as_bytes());
        let out = std::process::Command::new(bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--model", model])
            .args(["--policy", "local-only", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(named) && stderr.contains("no cloud lane"),
            "{stderr}"
        );
    }
}

/// A route whose embeddings go to the cloud, as the library sets it up.
fn passed_through(lane: &CloudLane, model: Option<&str>, deadline: Duration) -> CloudEmbedder {
    let e = CloudEmbedder::new(lane.clone()).deadline(deadline);
    match model {
        Some(m) => e.model(m),
        None => e,
    }
}

async fn embed(url: &str, body: Value) -> (u16, Value) {
    let (status, _, text) = post_to(url, "/embeddings", body, &[]).await;
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {text}"));
    (status, v)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("floats")
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// A cloud that misbehaves by the first input's text: too few vectors,
/// a number beyond f32, a body that is not JSON, a body over the cap, or
/// no answer at all.
async fn hostile_cloud() -> TestServer {
    TestServer::start(|mut conn| async move {
        while let Some(req) = conn.read_request().await {
            let first = req.json()["input"][0]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let sent = match first.as_str() {
                "too few" => {
                    conn.json(
                        200,
                        r#"{"object":"list","data":[{"index":0,"embedding":[1.0]}]}"#,
                    )
                    .await
                }
                "infinite" => {
                    conn.json(200, r#"{"data":[{"index":0,"embedding":[0.5,1e39]}]}"#)
                        .await
                }
                "not json" => conn.json(200, "<html>bad gateway</html>").await,
                "huge" => {
                    let big = format!(
                        r#"{{"data":[{{"embedding":[{}1.0]}}]}}"#,
                        "0.5,".repeat(40_000)
                    );
                    conn.json(200, &big).await
                }
                // Holds the request until the client gives up.
                _ => {
                    conn.wait_closed().await;
                    return;
                }
            };
            if sent.is_err() {
                return;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_passes_embeddings_through_to_the_cloud() {
    let good = cloud().await;
    let hostile = hostile_cloud().await;
    let cfg = config(&format!(
        "[cloud]\nbase_url = \"{}\"\nmodel = \"house-model\"\n[harness]\npolicy = \"cloud-only\"\n\
         [routes.vec]\ncloud_model = \"text-embedding-3-small\"\n[routes.bad]\n",
        good.base_url()
    ));
    let good_lane = CloudLane::new(cfg.cloud.clone().unwrap()).unwrap();
    let mut bad_cfg = CloudConfig::new(hostile.base_url(), "bad-model");
    bad_cfg.limits.max_body_bytes = 64 << 10;
    let bad_lane = CloudLane::new(bad_cfg).unwrap();
    let long = Duration::from_secs(60);
    let serve = loopback()
        .cloud_embeddings(
            Some("vec"),
            passed_through(&good_lane, Some("text-embedding-3-small"), long),
        )
        .cloud_embeddings(None, passed_through(&good_lane, None, long))
        .cloud_embeddings(
            Some("bad"),
            passed_through(&bad_lane, None, Duration::from_millis(400)),
        );
    let server = Server::bind(cloud_harness(&cfg), serve)
        .await
        .unwrap()
        .spawn();
    let url = server.base_url();

    // Floats, two inputs: the cloud's vectors in OpenAI's shape, named
    // as the client named the model.
    let (status, out) = embed(&url, json!({"model": "vec", "input": ["a", "b"]})).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["object"], "list");
    assert_eq!(out["model"], "vec");
    assert_eq!(out["data"][1]["index"], 1);
    assert_eq!(floats(&out["data"][0]["embedding"]), fixed(0, 3));
    assert_eq!(floats(&out["data"][1]["embedding"]), fixed(1, 3));
    assert_eq!(out["usage"]["prompt_tokens"], 7);
    // base64 and dimensions pass through; the vectors come back base64.
    let (status, out) = embed(
        &url,
        json!({"model": "vec", "input": [[1, 2, 3]], "encoding_format": "base64", "dimensions": 5}),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["data"][0]["embedding"], base64_f32(&fixed(0, 5)));
    // The default route passes through too, with `[cloud] model`.
    let (status, out) = embed(&url, json!({"model": "edgecloud", "input": "x"})).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["model"], "edgecloud");
    let sent: Vec<Value> = good
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/embeddings")
        .map(Recorded::json)
        .collect();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0]["model"], "text-embedding-3-small");
    assert_eq!(sent[0]["input"], json!(["a", "b"]));
    assert_eq!(sent[0]["encoding_format"], "float");
    assert_eq!(sent[1]["input"], json!([[1, 2, 3]]));
    assert_eq!(sent[1]["encoding_format"], "base64");
    assert_eq!(sent[1]["dimensions"], 5);
    assert_eq!(sent[2]["model"], "house-model");

    // A hostile cloud: each answer a 5xx naming what is wrong, and the
    // server keeps serving.
    for (input, code, status, said) in [
        ("too few", "lanes_failed", 502, "1 vectors for 2 inputs"),
        ("infinite", "lanes_failed", 502, "not a finite number"),
        ("not json", "lanes_failed", 502, "not JSON"),
        ("huge", "lanes_failed", 502, "cap of 65536 bytes"),
        ("silent", "deadline_exceeded", 504, "400 ms deadline"),
    ] {
        // One vector is the right count for all but `too few`.
        let inputs = if input == "too few" {
            json!([input, "second"])
        } else {
            json!([input])
        };
        let (got, err) = embed(&url, json!({"model": "bad", "input": inputs})).await;
        assert_eq!(got, status, "{input}: {err}");
        assert_eq!(err["error"]["code"], code, "{input}: {err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(said), "{input}: {message}");
    }
    let (status, _) = embed(&url, json!({"model": "vec", "input": "still here"})).await;
    assert_eq!(status, 200);

    let text = metrics_text(&url).await;
    assert_eq!(
        metric(&text, "edgecloud_lane_embeddings_total{lane=\"cloud\"}"),
        9.0
    );
    assert_eq!(
        metric(
            &text,
            "edgecloud_lane_embedding_failures_total{lane=\"cloud\"}"
        ),
        5.0
    );
    assert_eq!(
        metric(&text, "edgecloud_lane_embeddings_total{lane=\"local\"}"),
        0.0
    );
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_sends_a_routes_embeddings_to_the_cloud_and_the_rest_to_the_local_model() {
    let cloud = cloud().await;
    let file = write_temp(
        "routes-cloud.toml",
        format!(
            "[cloud]\nbase_url = \"{}\"\nmodel = \"house-model\"\n\
             [routes.vec]\nembeddings = \"cloud\"\ncloud_model = \"text-embedding-3-small\"\n\
             [routes.mini]\npolicy = \"cloud-only\"\ncloud_model = \"gpt-4o-mini\"\n",
            cloud.base_url()
        )
        .as_bytes(),
    );
    let serve = ServeProcess::local_only(
        tiny_model(),
        &["--parallel", "1", "--config", file.to_str().unwrap()],
    );
    let (status, cloud_out) = embed(&serve.url, json!({"model": "vec", "input": ["a", "b"]})).await;
    assert_eq!(status, 200, "{cloud_out}");
    assert_eq!(floats(&cloud_out["data"][1]["embedding"]), fixed(1, 3));
    assert_eq!(cloud_out["model"], "vec");
    // The default route embeds locally (the tiny model's own width).
    let (status, local_out) = embed(&serve.url, json!({"model": "edgecloud", "input": "a"})).await;
    assert_eq!(status, 200, "{local_out}");
    assert_ne!(floats(&local_out["data"][0]["embedding"]).len(), 3);
    // A chat on `mini` asks the cloud for its model.
    let (status, _, body) = post_to(&serve.url, "/chat/completions", chat("mini"), &[]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        models_asked(&cloud, "/embeddings"),
        ["text-embedding-3-small"]
    );
    assert_eq!(models_asked(&cloud, "/chat/completions"), ["gpt-4o-mini"]);
    let text = metrics_text(&serve.url).await;
    assert_eq!(
        metric(&text, "edgecloud_lane_embeddings_total{lane=\"cloud\"}"),
        1.0
    );
    assert_eq!(
        metric(&text, "edgecloud_lane_embeddings_total{lane=\"local\"}"),
        1.0
    );
    // Its startup lines say each route's cloud side.
    let (ok, stderr) = serve.stop("-TERM");
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(
            "cloud lane per route: mini: model gpt-4o-mini; \
             vec: model text-embedding-3-small, embeddings passed through"
        ),
        "{stderr}"
    );

    // `config show` reports each route's cloud side.
    let out = std::process::Command::new(bin())
        .args(["config", "show", "--json", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    let routes = shown.to_string();
    assert!(
        routes.contains("text-embedding-3-small") && routes.contains("\"embeddings\":\"cloud\""),
        "{shown}"
    );
}

/// A diagnostic (`Harness::cloud_only`) runs on the default route: the
/// cloud model that route names is the one asked for and reported.
#[test]
fn a_cloud_diagnostic_asks_for_and_reports_the_default_routes_cloud_model() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cloud = rt.block_on(cloud());
    let cfg = config(&format!(
        "[cloud]\nbase_url = \"{}\"\nmodel = \"house-model\"\n\
         [harness]\ndefault_route = \"mini\"\n[routes.mini]\ncloud_model = \"gpt-4o-mini\"\n",
        cloud.base_url()
    ));
    let harness = cfg.build().unwrap();
    let diag = harness
        .cloud_only(edgecloud::Request::user("hello"))
        .unwrap();
    assert_eq!(diag.backend.model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(models_asked(&cloud, "/chat/completions"), ["gpt-4o-mini"]);
    drop(harness);
    drop(cloud);
}
