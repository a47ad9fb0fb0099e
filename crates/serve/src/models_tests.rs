//! The model set's rules against a scripted loader and engine (fakes: no
//! model is loaded): load on first use and once for concurrent requests,
//! keep-alive, the least recently used idle model unloaded for the
//! budget, never one in flight or with a late worker, load errors named
//! and retried, dispatch by model. The sweeper is not started: each test
//! sweeps at the instant it names, so no test waits for a clock.

use super::*;
use crate::engine::Health;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// A fake engine: answers nothing (its start names its model, so a test
/// sees the dispatch), reports a late worker when told.
struct FakeEngine {
    model: String,
    late_workers: Arc<AtomicU64>,
    shut_down: Arc<AtomicU64>,
}

impl Engine for FakeEngine {
    fn models(&self) -> Vec<ModelEntry> {
        Vec::new()
    }

    fn start(&self, _job: Job) -> BoxFuture<'_, Result<Box<dyn Run>, StartError>> {
        let model = self.model.clone();
        Box::pin(async move { Err(StartError::Internal(format!("engine of {model}"))) })
    }

    fn health(&self) -> Health {
        Health {
            late_workers_running: self.late_workers.load(Ordering::SeqCst),
            ..Health::default()
        }
    }

    fn shutdown(&self, _grace: Duration) -> BoxFuture<'static, Drained> {
        self.shut_down.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Drained {
                waited_ms: 0.0,
                runs_in_flight: 0,
                workers_still_running: 0,
            }
        })
    }
}

/// A scripted loader (a fake): counts loads and releases per model,
/// fails the names in `broken`, and holds loads at `gate` when gated.
#[derive(Default)]
struct Script {
    loads: Mutex<BTreeMap<String, u64>>,
    released: Arc<AtomicU64>,
    shut_down: Arc<AtomicU64>,
    late: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    broken: Mutex<BTreeSet<String>>,
    gated: std::sync::atomic::AtomicBool,
    gate: Arc<Notify>,
}

impl Script {
    fn loads(&self, name: &str) -> u64 {
        self.loads.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    fn late(&self, name: &str) -> Arc<AtomicU64> {
        self.late
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .clone()
    }
}

impl Loader for Arc<Script> {
    fn memory_estimate(&self, name: &str) -> u64 {
        if name == "big" {
            300
        } else {
            100
        }
    }

    fn load(&self, name: &str) -> BoxFuture<'static, Result<Loaded, String>> {
        let script = self.clone();
        let name = name.to_string();
        Box::pin(async move {
            if script.gated.load(Ordering::SeqCst) {
                script.gate.notified().await;
            }
            *script
                .loads
                .lock()
                .unwrap()
                .entry(name.clone())
                .or_default() += 1;
            if script.broken.lock().unwrap().contains(&name) {
                return Err(format!("{name}.gguf: not a GGUF file"));
            }
            let released = script.released.clone();
            Ok(Loaded {
                engine: Arc::new(FakeEngine {
                    model: name.clone(),
                    late_workers: script.late(&name),
                    shut_down: script.shut_down.clone(),
                }),
                embedder: None,
                memory_bytes: script.memory_estimate(&name),
                release: Mutex::new(Some(Box::new(move || {
                    released.fetch_add(1, Ordering::SeqCst);
                }))),
            })
        })
    }
}

fn set(script: &Arc<Script>, keep_alive: KeepAlive, max_loaded: MaxLoaded) -> ModelSet {
    let names = Names {
        models: vec!["a".into(), "b".into(), "c".into(), "big".into()],
        default: "a".into(),
        routes: vec![("fast".into(), Some("b".into()))],
    };
    ModelSet::new(Arc::new(script.clone()), names, keep_alive, max_loaded)
}

fn loaded(set: &ModelSet) -> Vec<String> {
    set.health()
        .models
        .into_iter()
        .filter(|m| m.loaded)
        .map(|m| m.name)
        .collect()
}

fn count(n: usize) -> MaxLoaded {
    MaxLoaded {
        models: Some(n),
        bytes: None,
    }
}

/// Sweeps as the sweeper would, `after` from now.
async fn sweep(set: &ModelSet, after: Duration) {
    set.inner.sweep_once(Instant::now() + after).await;
}

/// Marks `name` last used `ago` before now (an order of use that does not
/// hang on the clock's resolution).
fn used(set: &ModelSet, name: &str, ago: Duration) {
    let mut st = set.inner.lock();
    st.slots.get_mut(name).unwrap().last_used = Some(Instant::now() - ago);
}

#[tokio::test]
async fn a_model_loads_on_first_use_once_and_unloads_after_its_keep_alive() {
    let script = Arc::new(Script::default());
    let set = set(&script, KeepAlive::For(Duration::from_secs(300)), count(3));
    assert!(loaded(&set).is_empty());
    let first = set.inner.lease("a", true).await.unwrap();
    let second = set.inner.lease("a", true).await.unwrap();
    assert_eq!(script.loads("a"), 1);
    drop((first, second));
    // Idle, but not for its whole keep-alive yet.
    sweep(&set, Duration::from_secs(299)).await;
    assert_eq!(loaded(&set), ["a"]);
    sweep(&set, Duration::from_secs(301)).await;
    assert!(loaded(&set).is_empty());
    assert_eq!(script.released.load(Ordering::SeqCst), 1);
    let state = &set.health().models[0];
    assert_eq!((state.loads, state.unloads, state.requests), (1, 1, 2));
    // Used again: loaded again.
    drop(set.inner.lease("a", true).await.unwrap());
    assert_eq!(script.loads("a"), 2);
}

#[tokio::test]
async fn keep_alive_zero_unloads_after_the_request_and_minus_one_never() {
    let script = Arc::new(Script::default());
    let now = set(&script, KeepAlive::For(Duration::ZERO), count(3));
    drop(now.inner.lease("a", true).await.unwrap());
    sweep(&now, Duration::ZERO).await;
    assert!(loaded(&now).is_empty());

    let never = set(&script, KeepAlive::Forever, count(3));
    drop(never.inner.lease("b", true).await.unwrap());
    sweep(&never, Duration::from_secs(365 * 24 * 3600)).await;
    assert_eq!(loaded(&never), ["b"]);
}

#[tokio::test]
async fn over_the_budget_the_least_recently_used_idle_model_goes_first() {
    let script = Arc::new(Script::default());
    let set = set(&script, KeepAlive::Forever, count(2));
    drop(set.inner.lease("a", true).await.unwrap());
    drop(set.inner.lease("b", true).await.unwrap());
    // `a` used again, after `b`: `b` is now the least recently used.
    used(&set, "b", Duration::from_secs(2));
    used(&set, "a", Duration::from_secs(1));
    drop(set.inner.lease("c", true).await.unwrap());
    assert_eq!(loaded(&set), ["a", "c"]);
    assert_eq!(script.released.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_model_in_flight_is_never_unloaded_and_the_request_gets_models_busy() {
    let script = Arc::new(Script::default());
    let set = set(&script, KeepAlive::For(Duration::ZERO), count(2));
    let a = set.inner.lease("a", true).await.unwrap();
    let b = set.inner.lease("b", true).await.unwrap();
    match set.inner.lease("c", true).await {
        Err(StartError::ModelsBusy { model, message }) => {
            assert_eq!(model, "c");
            assert!(message.contains("2 models"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Held models stay loaded however long their keep-alive is over.
    sweep(&set, Duration::from_secs(60)).await;
    assert_eq!(loaded(&set), ["a", "b"]);
    drop(b);
    drop(set.inner.lease("c", true).await.unwrap());
    assert!(loaded(&set).contains(&"a".to_string()));
    drop(a);
}

#[tokio::test]
async fn a_late_worker_keeps_its_model_loaded_until_it_returns() {
    let script = Arc::new(Script::default());
    let set = set(&script, KeepAlive::For(Duration::from_secs(5)), count(1));
    drop(set.inner.lease("a", true).await.unwrap());
    // The run settled, its worker did not: a late worker.
    script.late("a").store(1, Ordering::SeqCst);
    sweep(&set, Duration::from_secs(10)).await;
    assert_eq!(loaded(&set), ["a"]);
    // Nor does the budget take it for another model.
    assert!(matches!(
        set.inner.lease("b", true).await,
        Err(StartError::ModelsBusy { .. })
    ));
    script.late("a").store(0, Ordering::SeqCst);
    sweep(&set, Duration::from_secs(10)).await;
    assert!(loaded(&set).is_empty());
}

#[tokio::test]
async fn a_load_error_is_named_shared_by_its_waiters_and_retried_later() {
    let script = Arc::new(Script::default());
    script.broken.lock().unwrap().insert("b".into());
    let set = Arc::new(set(&script, KeepAlive::Forever, count(3)));
    script.gated.store(true, Ordering::SeqCst);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let set = set.clone();
            tokio::spawn(async move { set.inner.lease("b", true).await.map(drop) })
        })
        .collect();
    // Every waiter is queued on the one load before it is let go.
    while set.health().models[1].requests < 3 || !set.health().models[1].loading {
        tokio::task::yield_now().await;
    }
    script.gate.notify_one();
    for w in waiters {
        match w.await.unwrap() {
            Err(StartError::ModelLoad { model, message }) => {
                assert_eq!(model, "b");
                assert!(message.contains("not a GGUF"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    // One load for the three requests waiting on it.
    assert_eq!(script.loads("b"), 1);
    script.gated.store(false, Ordering::SeqCst);
    // The others keep serving; the next request for `b` tries again.
    drop(set.inner.lease("a", true).await.unwrap());
    assert!(set.inner.lease("b", true).await.is_err());
    assert_eq!(script.loads("b"), 2);
    let b = &set.health().models[1];
    assert_eq!((b.name.as_str(), b.load_failures), ("b", 2));
    assert!(b.last_error.as_deref().unwrap().contains("not a GGUF"));
}

#[tokio::test]
async fn a_byte_budget_unloads_as_many_idle_models_as_the_new_one_needs() {
    let script = Arc::new(Script::default());
    let budget = MaxLoaded {
        models: None,
        bytes: Some(300),
    };
    let set = set(&script, KeepAlive::Forever, budget);
    for m in ["a", "b", "c"] {
        drop(set.inner.lease(m, true).await.unwrap());
    }
    assert_eq!(loaded(&set), ["a", "b", "c"]);
    // 300 bytes: all three go; a model alone is never refused for size.
    drop(set.inner.lease("big", true).await.unwrap());
    assert_eq!(loaded(&set), ["big"]);
}

#[tokio::test]
async fn jobs_go_to_the_model_they_name_and_routes_to_theirs() {
    let script = Arc::new(Script::default());
    let set = set(&script, KeepAlive::Forever, count(3));
    let job = |model: Option<&str>| Job {
        request: edgecloud_core::request::Request::user("hi"),
        route: None,
        model: model.map(String::from),
        policy: None,
        stream: false,
        idempotency_key: None,
    };
    for (model, engine) in [(None, "engine of a"), (Some("c"), "engine of c")] {
        match set.start(job(model)).await {
            Err(StartError::Internal(m)) => assert_eq!(m, engine),
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("the fake engine answers nothing"),
        }
    }
    let names: Vec<(String, Option<String>)> =
        set.models().into_iter().map(|m| (m.id, m.model)).collect();
    assert_eq!(
        names,
        [
            ("edgecloud".into(), Some("a".into())),
            ("a".into(), Some("a".into())),
            ("b".into(), Some("b".into())),
            ("c".into(), Some("c".into())),
            ("big".into(), Some("big".into())),
            ("fast".into(), Some("b".into())),
        ]
    );
    // Shutdown unloads everything and refuses new runs.
    let drained = set.shutdown(Duration::from_secs(1)).await;
    assert_eq!(drained.workers_still_running, 0);
    assert!(loaded(&set).is_empty());
    assert_eq!(script.released.load(Ordering::SeqCst), 2);
    assert!(matches!(
        set.inner.lease("a", true).await,
        Err(StartError::ShuttingDown)
    ));
}

#[test]
fn keep_alive_and_max_loaded_read_ollamas_forms() {
    let secs = |s| KeepAlive::For(Duration::from_secs(s));
    assert_eq!(KeepAlive::parse("-1"), Ok(KeepAlive::Forever));
    assert_eq!(KeepAlive::parse("0"), Ok(secs(0)));
    assert_eq!(KeepAlive::parse("300"), Ok(secs(300)));
    assert_eq!(KeepAlive::parse("5m"), Ok(secs(300)));
    assert_eq!(KeepAlive::parse("1h30m"), Ok(secs(5400)));
    assert_eq!(
        KeepAlive::parse("500ms"),
        Ok(KeepAlive::For(Duration::from_millis(500)))
    );
    for bad in ["", "5 minutes", "m", "1x"] {
        assert!(KeepAlive::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(MaxLoaded::parse("2"), Ok(count(2)));
    assert_eq!(MaxLoaded::parse("4GiB").unwrap().bytes, Some(4 << 30));
    assert_eq!(MaxLoaded::parse("500MB").unwrap().bytes, Some(500_000_000));
    for bad in ["0", "lots", "4XB", ""] {
        assert!(MaxLoaded::parse(bad).is_err(), "{bad}");
    }
}
