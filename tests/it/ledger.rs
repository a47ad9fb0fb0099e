//! Integration tests: the ledger (docs/cost.md). Every answer's cost from
//! the price table, a route's cloud budget that holds across restarts and
//! keeps the cloud out once spent, the durable store (corrupt, newer,
//! locked, SIGKILL mid-load) and `Idempotency-Key` replays. The cloud is
//! a real loopback HTTP server speaking OpenAI's shapes (it reports 9
//! prompt tokens and one completion token per piece); the local lane is
//! the real one on the generated tiny model; the front door is a real
//! `Server` or the real binary.

use crate::serve::{loopback, metric, metrics_text, post_to, sse_data, ServeProcess};
use crate::support::cli::bin;
use crate::support::http::{Flavor, TestServer};
use crate::support::models::{fresh_path, tiny_model, write_temp};
use crate::support::scripted::{Recorder, Scripted};
use edgecloud::harness::{
    BudgetState, Candidate, Event, Harness, HarnessConfig, LaneStatus, LedgerStore, Policy,
    PolicyKind, Price, PriceTable, Route, RunOptions,
};
use edgecloud::serve::Server;
use edgecloud::{FinishReason, Lane, Request};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Dollars per million tokens of the stand-in cloud's model `m`.
const PRICES: &str = "[prices.m]\ninput = 2.0\noutput = 8.0\n";

fn config(text: &str) -> HarnessConfig {
    HarnessConfig::from_toml_str(text).unwrap_or_else(|e| panic!("a valid config: {e}\n{text}"))
}

fn cloud_section(cloud: &TestServer) -> String {
    format!(
        "[cloud]\nbase_url = \"{}\"\nmodel = \"m\"\n",
        cloud.base_url()
    )
}

/// A harness from `cfg`, on this runtime.
fn harness(cfg: &HarnessConfig) -> Harness {
    Harness::builder()
        .config(cfg)
        .unwrap()
        .lanes_from(cfg)
        .unwrap()
        .runtime(tokio::runtime::Handle::current())
        .build()
        .unwrap()
}

fn store_dir() -> String {
    fresh_path("ledger").to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_its_cost_from_provider_counts_and_its_local_estimate() {
    let cloud = TestServer::openai(Flavor::OpenAi, &["hi", " there"]).await;
    let model = tiny_model().to_str().unwrap();
    let cfg = config(&format!(
        "{}[local]\nmodel = \"{model}\"\nthreads = 2\n{PRICES}[harness]\npolicy = \"cloud-only\"\n",
        cloud_section(&cloud)
    ));
    let h = harness(&cfg);
    // The cloud answered: billed by the provider's counts (9 prompt, 2
    // completion tokens) at $2 and $8 per million.
    let o = h.run(Request::user("hello")).await.unwrap();
    assert_eq!(o.winner, Some(Lane::Cloud), "{o:?}");
    let c = &o.cost;
    assert_eq!(c.cloud_model.as_deref(), Some("m"));
    assert!(c.priced);
    assert_eq!((c.cloud_prompt_tokens, c.cloud_completion_tokens), (9, 2));
    let spent = (9.0 * 2.0 + 2.0 * 8.0) / 1e6;
    assert_eq!(c.cloud_usd, Some(spent));
    assert_eq!(c.cloud_only_usd_estimate, Some(spent));
    assert_eq!(c.saved_usd_estimate, Some(0.0));
    // The local lane answered: nothing spent, the cloud-only cost is an
    // estimate from the local tokenizer's counts.
    let mut req = Request::user("hello");
    req.sampling.max_tokens = 4;
    let o = h
        .run_with(req, RunOptions::new().policy(edgecloud::Policy::LocalOnly))
        .await
        .unwrap();
    assert_eq!(o.winner, Some(Lane::Local), "{o:?}");
    let c = &o.cost;
    assert_eq!(c.cloud_usd, Some(0.0));
    assert!(
        c.local_prompt_tokens > 0 && c.local_completion_tokens > 0,
        "{c:?}"
    );
    let est = (c.local_prompt_tokens as f64 * 2.0 + c.local_completion_tokens as f64 * 8.0) / 1e6;
    assert_eq!(c.cloud_only_usd_estimate, Some(est));
    assert_eq!(c.saved_usd_estimate, Some(est));
    // In the outcome JSON, the fields are apart and labelled.
    let v = serde_json::to_value(&o).unwrap();
    assert!(v["cost"]["cloud_only_usd_estimate"].is_number(), "{v}");
    assert!(v["cost"]["saved_usd_estimate"].is_number(), "{v}");
    // Unpriced model: tokens, no dollars (no price is built in).
    let bare = config(&format!(
        "{}[harness]\npolicy = \"cloud-only\"\n",
        cloud_section(&cloud)
    ));
    let o = harness(&bare).run(Request::user("hello")).await.unwrap();
    assert_eq!((o.cost.priced, o.cost.cloud_usd), (false, None));
    assert_eq!(o.cost.cloud_prompt_tokens, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_keeps_the_cloud_out_says_when_it_renews_and_survives_a_restart() {
    let cloud = TestServer::openai(Flavor::OpenAi, &["hi"]).await;
    let dir = store_dir();
    // 10 tokens a run (9 prompt + 1 completion): three runs spend 30.
    let text = format!(
        "{}{PRICES}[ledger]\nstore = \"{dir}\"\n[harness]\npolicy = \"cloud-only\"\n\
         cloud_budget = \"30 tokens/day\"\n",
        cloud_section(&cloud)
    );
    let cfg = config(&text);
    let h = harness(&cfg);
    for _ in 0..3 {
        let o = h.run(Request::user("hello")).await.unwrap();
        assert!(o.is_ok(), "{o:?}");
    }
    let o = h.run(Request::user("hello")).await.unwrap();
    assert!(!o.is_ok());
    let r = o.lane(Lane::Cloud);
    assert_eq!(r.status, LaneStatus::Unavailable, "{r:?}");
    let note = r.note.clone().unwrap();
    assert!(
        note.contains("cloud budget spent") && note.contains("renews at"),
        "{note}"
    );
    assert!(r.retry_in_ms.unwrap() > 0.0);
    let b = o.cost.budget.as_ref().unwrap();
    assert_eq!(
        (b.state, b.spent, b.limit),
        (BudgetState::Spent, 30.0, 30.0)
    );
    assert!(b.renews_at.ends_with("T00:00:00Z"), "{}", b.renews_at);
    assert_eq!(cloud.requests().len(), 3, "no fourth cloud call");
    h.shutdown(Duration::from_secs(5)).await;
    drop(h);
    // A restart on the same store: still spent.
    let h = harness(&config(&text));
    let o = h.run(Request::user("hello")).await.unwrap();
    assert_eq!(o.lane(Lane::Cloud).status, LaneStatus::Unavailable);
    assert_eq!(cloud.requests().len(), 3);
    let report = h.ledger().unwrap();
    assert_eq!(report.routes["default"].today.tokens, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nearly_spent_budget_makes_a_hybrid_route_lean_local() {
    let cloud = TestServer::openai(Flavor::OpenAi, &["hi"]).await;
    let dir = store_dir();
    let model = tiny_model().to_str().unwrap();
    let cfg = config(&format!(
        "{}[local]\nmodel = \"{model}\"\nthreads = 2\n{PRICES}[ledger]\nstore = \"{dir}\"\n\
         [harness]\npolicy = \"race\"\ncloud_budget = \"1000 tokens/month\"\n\
         cloud_budget_lean_at = 0.001\n",
        cloud_section(&cloud)
    ));
    let h = harness(&cfg);
    let mut req = Request::user("hello");
    req.sampling.max_tokens = 2;
    // Nothing spent: the race runs as configured (both lanes start).
    let o = h.run(req.clone()).await.unwrap();
    assert_eq!(o.policy, PolicyKind::Race);
    assert!(o.lane(Lane::Cloud).status.ran(), "{o:?}");
    // Spent over 0.1% of the budget: the race runs as a cascade, and says so.
    let o = h.run(req).await.unwrap();
    assert_eq!(o.policy, PolicyKind::Cascade, "{o:?}");
    let b = o.cost.budget.as_ref().unwrap();
    assert_eq!(b.state, BudgetState::Lean);
    let note = b.note.as_deref().unwrap();
    assert!(
        note.contains("leaning local") && note.contains("race"),
        "{note}"
    );
}

#[test]
fn bad_prices_budgets_and_stores_are_start_up_errors_naming_the_key_or_file() {
    let cloud = "[cloud]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
    let build = |text: &str| -> String {
        match HarnessConfig::from_toml_str(text) {
            Err(e) => e.to_string(),
            Ok(cfg) => match Harness::builder()
                .config(&cfg)
                .map_err(|e| e.to_string())
                .and_then(|b| b.lanes_from(&cfg).map_err(|e| e.to_string()))
                .and_then(|b| b.build().map_err(|e| e.to_string()))
            {
                Err(e) => e,
                Ok(_) => panic!("built: {text}"),
            },
        }
    };
    let dir = store_dir();
    for (text, says) in [
        (
            format!("{cloud}[prices.m]\ninput = -1.0\noutput = 1.0\n"),
            vec!["prices.m.input", ">= 0"],
        ),
        (
            format!("{cloud}[prices.m]\ninput = \"cheap\"\noutput = 1.0\n"),
            vec!["input", "cheap"],
        ),
        (
            format!("{cloud}[prices.gpt-typo]\ninput = 1.0\noutput = 1.0\n"),
            vec!["prices.gpt-typo", "`m`"],
        ),
        (
            format!("{cloud}[ledger]\nstore = \"{dir}\"\n[harness]\ncloud_budget = \"5/day\"\n"),
            vec!["harness.cloud_budget", "no unit"],
        ),
        (
            format!("{cloud}[routes.a]\ncloud_budget = \"5 usd/day\"\n"),
            vec!["routes.a.cloud_budget", "ledger store"],
        ),
        (
            format!(
                "{cloud}[ledger]\nstore = \"{dir}\"\n[routes.a]\ncloud_budget = \"5 usd/day\"\n"
            ),
            vec!["routes.a.cloud_budget", "no price"],
        ),
    ] {
        let e = build(&text);
        for s in says {
            assert!(e.contains(s), "{s:?} not in: {e}\n{text}");
        }
    }
    // A corrupt store is an error naming the file, and is left as it was.
    let bad = store_dir();
    std::fs::create_dir_all(&bad).unwrap();
    let file = format!("{bad}/ledger.json");
    std::fs::write(
        &file,
        "{\"format\":\"edgecloud-ledger\",\"version\":1,\"routes\":{\"a\":",
    )
    .unwrap();
    let e = build(&format!("{cloud}[ledger]\nstore = \"{bad}\"\n"));
    assert!(e.contains("ledger.json") && e.contains("corrupt"), "{e}");
    assert!(std::fs::read_to_string(&file).unwrap().ends_with("{\"a\":"));
    // A newer version.
    std::fs::write(
        &file,
        r#"{"format":"edgecloud-ledger","version":99,"routes":{}}"#,
    )
    .unwrap();
    let e = build(&format!("{cloud}[ledger]\nstore = \"{bad}\"\n"));
    assert!(e.contains("version 99") && e.contains("ledger.json"), "{e}");

    // The binary: `serve` refuses to start, naming the flag or the file.
    let model = tiny_model().to_str().unwrap();
    let out = std::process::Command::new(bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--model", model])
        .args(["--cloud-budget", "5/day"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--cloud-budget") && stderr.contains("no unit"),
        "{stderr}"
    );
    let out = std::process::Command::new(bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--model", model])
        .args(["--policy", "local-only", "--ledger", &bad])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("ledger.json") && stderr.contains("version 99"),
        "{stderr}"
    );
}

/// A cloud that answers "hi" once `release` is notified, after telling
/// `arrived`; counts its requests.
async fn held_cloud(arrived: Arc<Notify>, release: Arc<Notify>) -> TestServer {
    TestServer::start(move |mut conn| {
        let (arrived, release) = (arrived.clone(), release.clone());
        async move {
            while let Some(req) = conn.read_request().await {
                arrived.notify_one();
                release.notified().await;
                if conn.answer(Flavor::OpenAi, &req, &["hi"]).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

fn chat(prompt: &str) -> Value {
    json!({"model": "edgecloud", "messages": [{"role": "user", "content": prompt}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_idempotency_key_replays_its_answer_without_paying_again() {
    let cloud = TestServer::openai(Flavor::OpenAi, &["hi", " there"]).await;
    let dir = store_dir();
    let text = format!(
        "{}{PRICES}[ledger]\nstore = \"{dir}\"\n[harness]\npolicy = \"cloud-only\"\n",
        cloud_section(&cloud)
    );
    let server = Server::bind(harness(&config(&text)), loopback())
        .await
        .unwrap()
        .spawn();
    let url = server.base_url();
    let key = [("idempotency-key", "order-17")];
    let (status, h1, first) = post_to(&url, "/chat/completions", chat("hello"), &key).await;
    assert_eq!(status, 200, "{first}");
    assert!(h1.get("x-edgecloud-replay").is_none());
    let first: Value = serde_json::from_str(&first).unwrap();
    let spent = first["edgecloud"]["cost"]["cloud_usd"].as_f64().unwrap();
    assert_eq!(spent, (9.0 * 2.0 + 2.0 * 8.0) / 1e6);
    // The retry: the same answer, marked, and no second cloud call.
    let (status, h2, again) = post_to(&url, "/chat/completions", chat("hello"), &key).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(h2["x-edgecloud-replay"], "true");
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(
        again["choices"][0]["message"]["content"],
        first["choices"][0]["message"]["content"]
    );
    assert_eq!(again["edgecloud"]["replay"]["key"], "order-17");
    assert_eq!(
        again["edgecloud"]["replay"]["of_run_id"],
        first["edgecloud"]["run_id"]
    );
    // Streamed, the retry is the same answer too.
    let mut streamed = chat("hello");
    streamed["stream"] = json!(true);
    let (status, h3, body) = post_to(&url, "/chat/completions", streamed, &key).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h3["x-edgecloud-replay"], "true");
    let streamed_text: String = sse_data(&body)
        .iter()
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| {
            serde_json::from_str::<Value>(d).ok()?["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(streamed_text, "hi there");
    assert_eq!(
        cloud.requests().len(),
        1,
        "one cloud call for three requests"
    );
    // The same key with another body: 409 naming the key; nothing ran.
    let (status, _, body) = post_to(&url, "/chat/completions", chat("goodbye"), &key).await;
    assert_eq!(status, 409, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["error"]["code"], "idempotency_key_reused");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("order-17"),
        "{e}"
    );
    assert_eq!(e["error"]["param"], "idempotency-key");
    assert_eq!(cloud.requests().len(), 1);
    // /metrics: the spend once, the replays apart; /health: the ledger.
    let m = metrics_text(&url).await;
    assert_eq!(metric(&m, "edgecloud_replays_total"), 2.0);
    assert_eq!(
        metric(
            &m,
            "edgecloud_cloud_spend_usd_total{route=\"default\",model=\"m\"}"
        ),
        spent
    );
    let base = url.trim_end_matches("/v1");
    let health: Value = reqwest::get(format!("{base}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["ledger"]["routes"]["default"]["today"]["runs"], 1);
    assert!(server.shutdown().await.is_clean());
    // The record outlives the server: a new one on the same store replays.
    let server = Server::bind(harness(&config(&text)), loopback())
        .await
        .unwrap()
        .spawn();
    let (status, h4, _) =
        post_to(&server.base_url(), "/chat/completions", chat("hello"), &key).await;
    assert_eq!(status, 200);
    assert_eq!(h4["x-edgecloud-replay"], "true");
    assert_eq!(cloud.requests().len(), 1);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_flight_is_waited_for_within_the_deadline_else_409() {
    let (arrived, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let cloud = held_cloud(arrived.clone(), release.clone()).await;
    let dir = store_dir();
    let text = format!(
        "{}{PRICES}[ledger]\nstore = \"{dir}\"\n[harness]\npolicy = \"cloud-only\"\n\
         deadline_ms = 20000\n",
        cloud_section(&cloud)
    );
    let server = Server::bind(harness(&config(&text)), loopback())
        .await
        .unwrap()
        .spawn();
    let url = server.base_url();
    let first = tokio::spawn({
        let url = url.clone();
        async move {
            post_to(
                &url,
                "/chat/completions",
                chat("hello"),
                &[("idempotency-key", "k")],
            )
            .await
        }
    });
    arrived.notified().await;
    // The first run is held at the cloud: a retry with a short deadline
    // waits for it, then is told it is in flight.
    let (status, _, body) = post_to(
        &url,
        "/chat/completions",
        chat("hello"),
        &[("idempotency-key", "k"), ("x-edgecloud-deadline-ms", "300")],
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("idempotency_key_in_flight") && body.contains("`k`"),
        "{body}"
    );
    // A retry that can wait gets the first run's answer when it lands.
    let waiter = tokio::spawn({
        let url = url.clone();
        async move {
            post_to(
                &url,
                "/chat/completions",
                chat("hello"),
                &[("idempotency-key", "k")],
            )
            .await
        }
    });
    release.notify_one();
    let (status, _, body) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, headers, again) = waiter.await.unwrap();
    assert_eq!(status, 200, "{again}");
    assert_eq!(headers["x-edgecloud-replay"], "true");
    assert_eq!(cloud.requests().len(), 1);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_load_never_corrupts_the_store() {
    let cloud = TestServer::openai(Flavor::OpenAi, &["hi"]).await;
    let dir = store_dir();
    let prices = write_temp("prices.toml", PRICES.as_bytes());
    let args = [
        "--base-url",
        &cloud.base_url(),
        "--cloud-model",
        "m",
        "--policy",
        "cloud-only",
        "--ledger",
        &dir,
        "--cloud-budget",
        "100usd/day",
        "--config",
        prices.to_str().unwrap(),
    ];
    let server = ServeProcess::start(&args, &[]);
    let url = server.url.clone();
    let answered = Arc::new(AtomicUsize::new(0));
    let under_way = Arc::new(Notify::new());
    // Four clients, each writing spending and an idempotency record per
    // request, until the server dies under them.
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (url, answered, under_way) = (url.clone(), answered.clone(), under_way.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for i in 0.. {
                    let sent = http
                        .post(format!("{url}/chat/completions"))
                        .header("idempotency-key", format!("c{c}-{i}"))
                        .json(&chat(&format!("q{c}-{i}")))
                        .send()
                        .await;
                    match sent {
                        Ok(r) if r.status() == 200 => {
                            if answered.fetch_add(1, Ordering::SeqCst) + 1 == 40 {
                                under_way.notify_one();
                            }
                        }
                        _ => return,
                    }
                }
            })
        })
        .collect();
    // Kill once the load is well under way (each answer is one write).
    tokio::time::timeout(Duration::from_secs(60), under_way.notified())
        .await
        .expect("the server answers");
    // ... and once a first write is on disk (the writer fsyncs; on a
    // loaded machine that can take longer than 40 answers: CI once
    // killed the server before any write and found nothing spent).
    // `ledger.json` appears by an atomic rename, so whole.
    let written = std::path::Path::new(&dir).join("ledger.json");
    tokio::time::timeout(Duration::from_secs(60), async {
        while !written.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the store is written while the load runs");
    let (_, _) = server.stop("-KILL");
    for c in clients {
        c.await.unwrap();
    }
    // The store opens: whole files only, never a torn one.
    let store = LedgerStore::open(&dir, Duration::from_secs(3600)).expect("an intact store");
    let (spent, _) = store.spent_now("default");
    let cloud_calls = cloud.requests().len() as u64;
    assert!(
        spent.runs >= 1 && spent.runs <= cloud_calls,
        "{spent:?} of {cloud_calls}"
    );
    assert_eq!(spent.tokens, spent.runs * 10);
    drop(store);
    // And the server starts on it again, its spending still there.
    let server = ServeProcess::start(&args, &[]);
    let base = server.url.trim_end_matches("/v1").to_string();
    let health: Value = reqwest::get(format!("{base}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        health["ledger"]["routes"]["default"]["today"]["runs"],
        spent.runs
    );
    let (ok, stderr) = server.stop("-TERM");
    assert!(ok, "{stderr}");
}

#[test]
fn a_late_cloud_workers_reported_usage_is_added_to_the_spending_when_it_returns() {
    // The cloud is a scripted stand-in that ignores cancellation (a real
    // provider's stream is dropped at the deadline, so its usage is never
    // known); it returns after the run settled, with provider counts.
    let cloud = Scripted::ignoring_cancel("cloud");
    let rec = Recorder::new();
    let store = LedgerStore::open(store_dir(), Duration::from_secs(60)).unwrap();
    let h = Harness::builder()
        .cloud(cloud.clone())
        .route(
            "default",
            Route::new(Policy::CloudOnly)
                .cloud_model("m")
                .deadline(Duration::from_millis(50)),
        )
        .prices(PriceTable::new().with(
            "m",
            Price {
                input: 2.0,
                output: 8.0,
                cached_input: None,
            },
        ))
        .ledger(store.clone())
        .observer(rec.clone())
        .build()
        .unwrap();
    let out = h.run_blocking(Request::user("hello")).unwrap();
    assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::Late, "{out:?}");
    assert!(out.cost.cloud_usage_unknown, "{:?}", out.cost);
    let (today, _) = store.spent_now("default");
    assert_eq!((today.runs, today.tokens), (1, 0), "settled: usage unknown");
    let mut late = Candidate::new("late answer", FinishReason::Stop);
    late.tokens.provider_prompt = Some(1_000);
    late.tokens.provider_completion = Some(500);
    cloud.next_task().complete_with(late);
    rec.wait_for(|e| matches!(e, Event::LateWorkerFinished { .. }));
    let (today, month) = store.spent_now("default");
    assert_eq!((today.runs, today.tokens), (1, 1_500));
    // 1,000 x $2 + 500 x $8 per million.
    assert!((today.usd - 0.006).abs() < 1e-12, "{today:?}");
    assert_eq!(month, today);
}
