//! Integration tests: what a browser meets on a real server: `GET /`
//! (the server's name, version, models and endpoints) and the
//! cross-origin rules (CORS). CORS is off by default (no `Access-Control-*`
//! header anywhere, a preflight is the 405 it always was); with origins
//! allowed, a preflight is a 204 with the allowed origin, methods, headers
//! and max age and needs no token, while every other response (errors
//! and event streams too) carries the allowed origin and the token is
//! still required. The binary takes `--cors-origins`, its variable and
//! the config file's `[serve] cors_origins`.

use crate::serve::{loopback, next_task, scripted_pair, serve, ServeProcess};
use crate::support::models::{tiny_model, write_temp};
use crate::support::scripted::HANG;
use edgecloud::harness::Policy;
use edgecloud::serve::{BearerToken, CorsOrigins};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const PAGE: &str = "https://app.example";

async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> reqwest::Response {
    let mut req = reqwest::Client::new().request(method, url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    tokio::time::timeout(HANG, req.send())
        .await
        .expect("no hang")
        .expect("a response")
}

/// A browser's preflight for a POST with a bearer token and JSON.
async fn preflight(url: &str, origin: &str) -> reqwest::Response {
    send(
        Method::OPTIONS,
        url,
        &[
            ("origin", origin),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization, content-type, x-stainless-os",
            ),
        ],
        None,
    )
    .await
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_is_off_by_default() {
    let (_local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(builder.build().unwrap(), loopback()).await;
    let chat = format!("{}/chat/completions", server.base_url());
    let r = preflight(&chat, PAGE).await;
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(r
        .headers()
        .keys()
        .all(|k| !k.as_str().starts_with("access-control-")));
    let r = send(
        Method::GET,
        &format!("{}/models", server.base_url()),
        &[("origin", PAGE)],
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_origin_answers_preflights_without_the_token_and_marks_every_response() {
    let (local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let config = loopback()
        .cors(CorsOrigins::Any)
        .token(BearerToken::new("s3cret").unwrap());
    let server = serve(builder.build().unwrap(), config).await;
    let base = server.base_url();
    let chat = format!("{base}/chat/completions");

    let r = preflight(&chat, PAGE).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT, "no token needed");
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
    let methods = header(&r, "access-control-allow-methods").unwrap();
    assert!(
        methods.contains("POST") && methods.contains("GET"),
        "{methods}"
    );
    let allowed = header(&r, "access-control-allow-headers").unwrap();
    for h in ["authorization", "content-type", "x-stainless-os"] {
        assert!(allowed.contains(h), "{allowed}");
    }
    assert!(header(&r, "access-control-max-age").is_some());

    // The token is still required, and the refusal carries the origin.
    let body = json!({"model": "edgecloud", "messages": [{"role": "user", "content": "x"}]});
    let r = send(Method::POST, &chat, &[("origin", PAGE)], Some(body.clone())).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));

    // A whole answer and a stream carry it too.
    for stream in [false, true] {
        let mut body = body.clone();
        body["stream"] = json!(stream);
        let answer = tokio::spawn({
            let chat = chat.clone();
            async move {
                let r = send(
                    Method::POST,
                    &chat,
                    &[("origin", PAGE), ("authorization", "Bearer s3cret")],
                    Some(body),
                )
                .await;
                let origin = header(&r, "access-control-allow-origin").map(str::to_string);
                let exposed = header(&r, "access-control-expose-headers").map(str::to_string);
                (r.status(), origin, exposed, r.text().await.unwrap())
            }
        });
        next_task(&local).await.complete("hello");
        let (status, origin, exposed, text) = answer.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(origin.as_deref(), Some("*"), "stream {stream}");
        assert!(exposed.unwrap().contains("x-edgecloud-lane"));
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_origins_echoes_the_listed_one_and_refuses_the_others() {
    let (_local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let config =
        loopback().cors(CorsOrigins::parse("https://app.example, http://localhost:3000").unwrap());
    let server = serve(builder.build().unwrap(), config).await;
    let base = server.base_url();
    let r = preflight(&format!("{base}/completions"), "http://localhost:3000").await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    assert_eq!(header(&r, "vary"), Some("Origin"));
    let r = preflight(&format!("{base}/completions"), "https://evil.example").await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "cors_origin_not_allowed");

    let models = format!("{base}/models");
    let r = send(Method::GET, &models, &[("origin", PAGE)], None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "access-control-allow-origin"), Some(PAGE));
    assert_eq!(header(&r, "vary"), Some("Origin"));
    let r = send(
        Method::GET,
        &models,
        &[("origin", "https://evil.example")],
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK, "served; the browser hides it");
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    assert_eq!(header(&r, "vary"), Some("Origin"));
    // A 404 carries it as well.
    let r = send(
        Method::GET,
        &format!("{base}/nope"),
        &[("origin", PAGE)],
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(header(&r, "access-control-allow-origin"), Some(PAGE));
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_names_the_server_its_version_models_and_endpoints() {
    let (_local, _cloud, builder) = scripted_pair(Policy::LocalOnly);
    let server = serve(
        builder.build().unwrap(),
        loopback().model_alias("gpt-4o-mini"),
    )
    .await;
    let root = format!("http://{}/", server.local_addr());
    let r = send(Method::GET, &root, &[], None).await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["name"], "edgecloud");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["models"], json!(["edgecloud", "gpt-4o-mini"]));
    let endpoints: Vec<&str> = v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    for e in [
        "POST /v1/chat/completions",
        "POST /v1/completions",
        "GET /v1/models",
        "GET /health",
        "GET /metrics",
    ] {
        assert!(endpoints.contains(&e), "{endpoints:?}");
    }
    let r = send(Method::POST, &root, &[], Some(json!({}))).await;
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_takes_cors_origins_from_its_flag_variable_and_config_file() {
    let model = tiny_model().to_str().unwrap().to_string();
    let base = [
        "--model",
        model.as_str(),
        "--policy",
        "local-only",
        "--threads",
        "2",
    ];
    let config = write_temp(
        "cors.toml",
        b"[serve]\ncors_origins = [\"https://from-file.example\"]\n",
    );
    let config = config.to_str().unwrap().to_string();
    for (extra, env, origin) in [
        (
            vec!["--cors-origins", "https://flag.example"],
            vec![],
            "https://flag.example",
        ),
        (vec![], vec![("EDGECLOUD_CORS_ORIGINS", "*")], "*"),
        (
            vec!["--config", config.as_str()],
            vec![],
            "https://from-file.example",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(extra.iter().copied());
        let p = ServeProcess::start(&args, &env);
        let asked = if origin == "*" { PAGE } else { origin };
        let r = preflight(&format!("{}/chat/completions", p.url), asked).await;
        assert_eq!(r.status(), StatusCode::NO_CONTENT, "{args:?} {env:?}");
        assert_eq!(header(&r, "access-control-allow-origin"), Some(origin));
        let (ok, err) = p.stop("-TERM");
        assert!(ok, "{err}");
    }
    let out = std::process::Command::new(crate::support::cli::bin())
        .args([
            "serve",
            "--model",
            model.as_str(),
            "--cors-origins",
            "app.example",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("app.example") && err.contains("origin"),
        "{err}"
    );
}
