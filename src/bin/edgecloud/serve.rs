//! `edgecloud serve`: the OpenAI-compatible front door over the harness,
//! with the same lane flags and `--config` as `edgecloud run`. It builds the
//! harness, binds, prints one line saying where it listens (scripts read
//! it), and serves until SIGINT or SIGTERM.

use crate::exit::{usage, usage_from};
use crate::harness_args::{named_model, HarnessArgs};
use anyhow::Context as _;
use edgecloud::cloud::CloudLane;
use edgecloud::harness::{
    Backend, Harness, HarnessConfig, HarnessError, LocalBackend, ModelConfig, DEFAULT_PARALLEL,
    DEFAULT_ROUTE,
};
use edgecloud::local::{LocalConfig, LocalLane, Pooling};
use edgecloud::serve::{
    BearerToken, CloudEmbedder, CorsOrigins, KeepAlive, LoadError, LoadedModel, LocalEmbedder,
    MaxLoaded, ModelFacts, Models, ServeConfig, ServeMetrics, Server, DEFAULT_PORT,
};

/// The model name of a server of one model (its default route).
const DEFAULT_MODEL_NAME: &str = "edgecloud";
use edgecloud::Lane;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `edgecloud serve`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = serve_help())]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0: any free port; the chosen address is
    /// printed). The default port, 8181, is free of llama-server (8080),
    /// vLLM (8000), LiteLLM (4000) and Ollama (11434).
    #[arg(long, value_name = "ADDR", env = "EDGECLOUD_LISTEN", default_value_t = default_listen())]
    listen: SocketAddr,
    #[command(flatten)]
    lanes: HarnessArgs,
    /// Environment variable holding a bearer token; when given, every
    /// endpoint but /health requires `Authorization: Bearer <token>`.
    #[arg(
        long,
        value_name = "VAR",
        env = "EDGECLOUD_TOKEN_ENV",
        conflicts_with = "token_file"
    )]
    token_env: Option<String>,
    /// File holding the bearer token (a mounted secret; one trailing
    /// newline is ignored), instead of --token-env.
    #[arg(long, value_name = "FILE", env = "EDGECLOUD_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Another model name for the default route (repeatable, or
    /// comma-separated), so a client with a hard-coded model name works:
    /// --served-model-name gpt-4o-mini,llama3.
    #[arg(
        long,
        value_name = "NAME",
        value_delimiter = ',',
        env = "EDGECLOUD_SERVED_MODEL_NAME"
    )]
    served_model_name: Vec<String>,
    /// Any model name this server does not know selects the default route
    /// (instead of 404 model_not_found).
    #[arg(
        long,
        env = "EDGECLOUD_ACCEPT_ANY_MODEL",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    accept_any_model: bool,
    /// Browser origins that may call the server (CORS): `*` for any, or a
    /// comma-separated list (https://app.example,http://localhost:3000).
    /// Off by default; a preflight (OPTIONS) needs no token, every other
    /// request still does. Default: `[serve] cors_origins` of --config.
    #[arg(long, value_name = "ORIGINS", env = "EDGECLOUD_CORS_ORIGINS")]
    cors_origins: Option<String>,
    /// Instances in the pool: requests served at once, each with its own
    /// local and cloud lane (one loaded model and one batched decode loop
    /// for all local lanes, one connection pool for the cloud lanes).
    /// Default: `[pool] parallel` of --config, else 4 (llama-server's
    /// default slot count).
    #[arg(long, short = 'n', value_name = "N", env = "EDGECLOUD_PARALLEL")]
    parallel: Option<usize>,
    /// When every instance is busy, wait up to this long for one (counted
    /// inside the request's deadline) instead of answering 503 at once.
    /// Default: `[pool] max_queue_ms` of --config, else 0 (no queue).
    #[arg(long, value_name = "MS", env = "EDGECLOUD_MAX_QUEUE_MS")]
    max_queue_ms: Option<u64>,
    /// How POST /v1/embeddings pools a text's token vectors into one:
    /// mean, cls, last (none and rank give no vector per input and are
    /// refused per request). Default: the model's own (its GGUF's
    /// pooling_type), or mean for a model that names none (a chat model).
    #[arg(long, value_name = "POOLING", env = "EDGECLOUD_POOLING")]
    pooling: Option<Pooling>,
    /// With several models (--model NAME=MODEL, or [[models]] in --config):
    /// how long an idle model stays loaded: -1 never, 0 unloads it after
    /// each request, seconds (300) or a duration (30s, 5m, 1h). Default:
    /// `[serve] keep_alive` of --config, else 5m, Ollama's.
    #[arg(
        long,
        value_name = "DURATION",
        env = "EDGECLOUD_KEEP_ALIVE",
        value_parser = KeepAlive::parse,
        allow_hyphen_values = true
    )]
    keep_alive: Option<KeepAlive>,
    /// With several models: the most loaded at once, as a count (2) or as
    /// bytes of model files (4GiB, 500MB). Loading one more first unloads
    /// the least recently used idle model; when every loaded model has a
    /// request in flight, the request is refused (503 models_busy).
    /// Default: `[serve] max_loaded` of --config, else 3, Ollama's for a
    /// machine without a GPU.
    #[arg(
        long,
        value_name = "N|SIZE",
        env = "EDGECLOUD_MAX_LOADED",
        value_parser = MaxLoaded::parse
    )]
    max_loaded: Option<MaxLoaded>,
    /// With several models: load every one at start (within --max-loaded)
    /// instead of on its first request; one that fails to load fails the
    /// start. `--preload false` turns off `preload = true` in `[serve]`
    /// of --config.
    #[arg(
        long,
        env = "EDGECLOUD_PRELOAD",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = false,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    preload: Option<bool>,
    /// `max_tokens` for requests that do not set it (Messages requests
    /// always do). Default: no limit of its own, as OpenAI, llama-server
    /// and Ollama do: the answer ends when the model stops or its context
    /// is full, and the request's deadline bounds the run.
    #[arg(long, value_name = "N")]
    max_tokens: Option<u32>,
    /// Largest request body accepted, in bytes.
    #[arg(long, value_name = "N", default_value_t = 1024 * 1024)]
    max_body_bytes: usize,
    /// Most messages in one request.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_messages: usize,
    /// On SIGINT/SIGTERM, how long to wait for in-flight requests and late
    /// workers, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    grace_ms: u64,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT))
}

fn serve_help() -> String {
    format!(
        "Endpoints: POST /v1/chat/completions (whole or streamed), POST /v1/completions \
(a raw prompt, no chat template), POST /v1/responses (stateless), POST /v1/embeddings (the local \
model's, or the cloud's on a route with embeddings = \"cloud\"), GET /v1/models, GET /health, GET /metrics (Prometheus), \
GET / (name, version, models, endpoints). Anthropic's Messages API: POST /v1/messages (whole or streamed), \
POST /v1/messages/count_tokens (x-api-key works as the token). Ollama's native API: GET /api/version, /api/tags, \
/api/ps, POST /api/show, /api/chat, /api/generate (NDJSON streaming by default), /api/embed, /api/embeddings.

Models: `edgecloud` runs the default route; so does each --served-model-name \
(and any name with --accept-any-model); each route of --config is also a \
model name. Several models: --model NAME=MODEL, repeated (or [[models]] \
tables in --config), each a model name, loaded on its first request (or at \
start with --preload), unloaded after --keep-alive idle (default 5m; -1 \
never) and, under --max-loaded, the least recently used idle one first. \
A request may choose the policy and deadline with the body field \
\"edgecloud\": {{\"policy\": \"race\", \"deadline_ms\": 1500}} or the headers \
X-Edgecloud-Policy and X-Edgecloud-Deadline-Ms. Responses say which lane \
answered (X-Edgecloud-Lane, and the \"edgecloud\" field).

Browsers: --cors-origins '*' (or a list of origins) answers CORS preflights \
and adds Access-Control-Allow-Origin to every response; off by default.

Startup: one line per lane on stderr as it loads (model, size, load time), \
then one line on stdout: `edgecloud serve: listening on http://ADDR/v1 ...`.

Example: edgecloud serve -m models/tiny.gguf --policy local-only \
--served-model-name gpt-4o-mini --listen 127.0.0.1:0

{}",
        crate::harness_args::example_help()
    )
}

pub(crate) fn run(mut args: ServeArgs) -> anyhow::Result<ExitCode> {
    let Some(models) = several_models(&mut args)? else {
        let cfg = args.lanes.load_config()?;
        return serve(args, cfg, None);
    };
    // The settings every model shares: `[local]` and the flags, over the
    // first model (resolved per model below).
    args.lanes.model = vec![models[0].model.clone()];
    let cfg = args.lanes.load_config_as_given()?;
    serve(args, cfg, Some(models))
}

/// The models of a server of several: `[[models]]` of --config, then each
/// --model NAME=MODEL (replacing a table of the same name). `None`: one
/// model as before (a plain --model, or `[local]`), left in `args`.
fn several_models(args: &mut ServeArgs) -> anyhow::Result<Option<Vec<ModelConfig>>> {
    let given = std::mem::take(&mut args.lanes.model);
    let (named, plain): (Vec<_>, Vec<_>) = given.iter().partition(|m| named_model(m).is_some());
    let in_file = match &args.lanes.config {
        // Errors in the file are reported by the full load.
        Some(path) => HarnessConfig::from_file(path)
            .map(|c| c.models)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    if named.is_empty() && in_file.is_empty() {
        args.lanes.model = given;
        return Ok(None);
    }
    if let Some(p) = plain.first() {
        return Err(usage(format!(
            "--model {} has no name: with several models give each as --model NAME=MODEL",
            p.display()
        )));
    }
    let mut models = in_file;
    for arg in named {
        let (name, model) = named_model(arg).expect("partitioned as named");
        match models.iter_mut().find(|m| m.name == name) {
            Some(m) => m.model = model,
            None => models.push(ModelConfig {
                name,
                model,
                context_size: None,
                gpu_layers: None,
                threads: None,
                pooling: None,
            }),
        }
    }
    Ok(Some(models))
}

/// One model's local settings: the shared ones, its own on top, its
/// reference resolved to a file.
fn local_of(shared: &LocalConfig, m: &ModelConfig) -> anyhow::Result<LocalConfig> {
    let mut local = shared.clone();
    local.model = m.model.clone();
    if let Some(n) = m.context_size {
        local.context_size = Some(n);
    }
    if let Some(n) = m.gpu_layers {
        local.gpu_layers = n;
    }
    if let Some(n) = m.threads {
        local.threads = Some(n);
    }
    if m.pooling.is_some() {
        local.pooling = m.pooling;
    }
    crate::modelref::apply(&mut local, crate::modelref::Download::Allowed)
        .with_context(|| format!("model `{}`", m.name))?;
    Ok(local)
}

/// Starts the local lanes of `cfg` (sharing one worker) and builds the
/// harness over them and the cloud lane; returns one local lane too, to
/// answer /v1/embeddings.
fn build_harness(
    cfg: &HarnessConfig,
    parallel: usize,
    metrics: &ServeMetrics,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<(Harness, Option<LocalLane>)> {
    let mut others = cfg.clone();
    let mut builder = Harness::builder().config(cfg)?.instances(parallel);
    let mut embedder = None;
    if let Some(local) = others.local.take() {
        let backends =
            LocalBackend::start_shared(local, parallel).map_err(|e| HarnessError::LaneStart {
                lane: Lane::Local,
                source: Box::new(e),
            })?;
        embedder = backends.first().map(|b| b.lane().clone());
        builder = builder.local_per_instance(
            backends
                .into_iter()
                .map(|b| Arc::new(b) as Arc<dyn Backend>)
                .collect(),
        );
    }
    let harness = builder
        .lanes_from(&others)?
        .observer(metrics.observer())
        .runtime(runtime.clone())
        .build()?;
    Ok((harness, embedder))
}

fn serve(
    args: ServeArgs,
    mut cfg: HarnessConfig,
    several: Option<Vec<ModelConfig>>,
) -> anyhow::Result<ExitCode> {
    crate::harness_args::require_a_lane(&cfg)?;
    cfg.check_cloud_routes()?;
    if let Some(pooling) = args.pooling {
        match cfg.local.as_mut() {
            Some(local) => local.pooling = Some(pooling),
            None => {
                return Err(usage(
                    "--pooling needs a local model (--model, or [local] in --config)",
                ))
            }
        }
    }
    let token = match (&args.token_env, &args.token_file) {
        (Some(var), _) => Some(BearerToken::from_env(var).map_err(|e| usage_from(&e))?),
        (None, Some(file)) => Some(token_from_file(file)?),
        (None, None) => None,
    };
    if let Some(name) = args.served_model_name.iter().find(|n| n.trim().is_empty()) {
        return Err(usage(format!("--served-model-name `{name}` is empty")));
    }
    let cors = match (&args.cors_origins, &cfg.serve.cors_origins) {
        (Some(spec), _) => {
            CorsOrigins::parse(spec).map_err(|e| usage(format!("--cors-origins: {e}")))?
        }
        (None, Some(list)) => CorsOrigins::from_list(list.iter().map(String::as_str))
            .map_err(|e| usage(format!("[serve] cors_origins: {e}")))?,
        (None, None) => CorsOrigins::Off,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("edgecloud-serve")
        .build()
        .context("could not start the server's runtime")?;
    let metrics = ServeMetrics::new();
    let (parallel, chosen) = match (args.parallel, cfg.pool.parallel) {
        (Some(n), _) => (n, "--parallel"),
        (None, Some(n)) => (n, "[pool] parallel"),
        (None, None) => (DEFAULT_PARALLEL, "default"),
    };
    if parallel == 0 {
        return Err(usage("--parallel must be at least 1"));
    }
    let max_queue_ms = args.max_queue_ms.or(cfg.pool.max_queue_ms).unwrap_or(0);
    let mut config = ServeConfig::default()
        .listen(args.listen)
        .max_body_bytes(args.max_body_bytes)
        .max_messages(args.max_messages)
        .default_max_tokens(
            args.max_tokens
                .unwrap_or(edgecloud::request::MAX_TOKENS_UNBOUNDED),
        )
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .metrics(metrics.clone())
        .max_queue((max_queue_ms > 0).then(|| Duration::from_millis(max_queue_ms)))
        .accept_any_model(args.accept_any_model)
        .cors(cors);
    for name in &args.served_model_name {
        config = config.model_alias(name.trim());
    }
    if let Some(token) = token {
        config = config.token(token);
    }
    if let Some(policy) = cfg.harness.resolved_policy("harness")? {
        config = config.policy_preset(policy);
    }
    config = cloud_embeddings(&cfg, config)?;
    let queue = if max_queue_ms == 0 {
        "busy requests get 503 at once".to_string()
    } else {
        format!("busy requests wait up to {max_queue_ms} ms")
    };
    let pool_line = format!(
        "edgecloud serve: {parallel} instance{} ({chosen}){}, {queue}",
        if parallel == 1 { "" } else { "s" },
        if several.is_some() { " per model" } else { "" }
    );
    let bound = match several {
        None => {
            // Loads the model here, before the first request (blocking).
            let loading = Instant::now();
            let (harness, embedder) = build_harness(&cfg, parallel, &metrics, runtime.handle())?;
            if !crate::quiet() {
                for line in lane_lines(&harness, &cfg, embedder.as_ref(), loading.elapsed()) {
                    eprintln!("{line}");
                }
                eprintln!("{pool_line}");
            }
            if let (Some(lane), Some(local)) = (&embedder, &cfg.local) {
                config = config.model_facts(
                    DEFAULT_MODEL_NAME,
                    crate::serve_facts::from_lane(&local.model, lane),
                );
            }
            if let Some(lane) = embedder {
                config = config.embeddings(LocalEmbedder::new(lane));
            }
            runtime.block_on(Server::bind(harness, config))?
        }
        Some(list) => {
            let (models, facts) =
                models_of(&args, &cfg, list, parallel, &metrics, runtime.handle())?;
            for (name, f) in facts {
                config = config.model_facts(name, f);
            }
            if !crate::quiet() {
                eprintln!("{pool_line}");
            }
            runtime
                .block_on(Server::bind_models(models, config))
                .map_err(|e| match e {
                    edgecloud::serve::ServeError::Models { .. } => usage_from(&e),
                    e => anyhow::Error::new(e),
                })?
        }
    };
    let report = runtime.block_on(async move {
        let addr = bound.local_addr();
        let models = bound.models();
        {
            // One line on stdout, flushed: scripts wait for it.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "edgecloud serve: listening on http://{addr}/v1 (models: {})",
                models.join(", ")
            );
            let _ = out.flush();
        }
        bound.run_until(crate::interrupt::shutdown_signal()).await
    });
    if report.is_clean() {
        if !crate::quiet() {
            eprintln!(
                "edgecloud serve: stopped cleanly after {:.0} ms",
                report.waited_ms
            );
        }
    } else {
        eprintln!(
            "edgecloud serve: grace period over with {} connection(s), {} run(s) and {} worker(s) still running",
            report.connections_left, report.runs_in_flight, report.workers_still_running
        );
    }
    // Late workers still running hold only this process's resources.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(ExitCode::SUCCESS)
}

/// The model set: each model's local settings resolved now (so a bad
/// reference is a start-up error and the byte budget knows each file's
/// size), loaded later by name through `build_harness`.
fn models_of(
    args: &ServeArgs,
    cfg: &HarnessConfig,
    list: Vec<ModelConfig>,
    parallel: usize,
    metrics: &ServeMetrics,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<(Models, Vec<(String, ModelFacts)>)> {
    let shared = cfg
        .local
        .clone()
        .expect("the first model's reference makes a local lane");
    let mut locals = std::collections::BTreeMap::new();
    let mut sized = Vec::new();
    let mut facts = Vec::new();
    for m in &list {
        let local = local_of(&shared, m)?;
        // The header only (milliseconds): what the model listings say
        // before the model is loaded.
        if let Some(f) = crate::serve_facts::from_file(&local.model) {
            facts.push((m.name.clone(), f));
        }
        let size = std::fs::metadata(&local.model)
            .map(|md| md.len())
            .unwrap_or(0);
        sized.push((m.name.clone(), size));
        locals.insert(m.name.clone(), local);
    }
    // The flags (and their variables) win over `[serve]` of the file.
    let keep_alive = match (args.keep_alive, &cfg.serve.keep_alive) {
        (Some(k), _) => k,
        (None, Some(k)) => KeepAlive::parse(&k.to_string())
            .map_err(|e| usage(format!("[serve] keep_alive: {e}")))?,
        (None, None) => KeepAlive::DEFAULT,
    };
    let max_loaded = match (args.max_loaded, &cfg.serve.max_loaded) {
        (Some(m), _) => m,
        (None, Some(m)) => MaxLoaded::parse(&m.to_string())
            .map_err(|e| usage(format!("[serve] max_loaded: {e}")))?,
        (None, None) => MaxLoaded::DEFAULT,
    };
    let preload = args.preload.or(cfg.serve.preload).unwrap_or(false);
    if !crate::quiet() {
        let names: Vec<&str> = list.iter().map(|m| m.name.as_str()).collect();
        eprintln!(
            "edgecloud serve: {} models ({}), {}; keep-alive {keep_alive}, at most {}",
            names.len(),
            names.join(", "),
            if preload {
                "loading them now"
            } else {
                "each loaded on its first request"
            },
            match (max_loaded.models, max_loaded.bytes) {
                (Some(n), _) => format!("{n} loaded"),
                (None, Some(b)) => format!("{:.1} MB of models loaded", b as f64 / 1e6),
                (None, None) => "any number loaded".into(),
            }
        );
    }
    let base = cfg.clone();
    let metrics = metrics.clone();
    let runtime = runtime.clone();
    let load = move |name: &str| -> Result<LoadedModel, LoadError> {
        let mut cfg = base.clone();
        let local = locals.get(name).cloned().ok_or("no such model")?;
        let size = std::fs::metadata(&local.model)
            .map(|md| md.len())
            .unwrap_or(0);
        let file = local.model.display().to_string();
        cfg.local = Some(local);
        let loading = Instant::now();
        let (harness, embedder) = build_harness(&cfg, parallel, &metrics, &runtime)
            .map_err(|e| format!("{file}: {e:#}"))?;
        if !crate::quiet() {
            for line in lane_lines(&harness, &cfg, embedder.as_ref(), loading.elapsed()) {
                if line.contains("local lane") {
                    eprintln!(
                        "{}",
                        line.replace("local lane loaded", &format!("model `{name}` loaded"))
                    );
                }
            }
        }
        // Weights and KV cache once loaded (the file's size before).
        let memory = embedder
            .as_ref()
            .map(|lane| lane.info().memory_bytes)
            .filter(|&b| b > 0)
            .unwrap_or(size);
        let mut model = LoadedModel::new(harness).memory_bytes(memory);
        if let Some(lane) = embedder {
            model = model.embeddings(LocalEmbedder::new(lane));
        }
        Ok(model)
    };
    let mut models = Models::new(load)
        .keep_alive(keep_alive)
        .max_loaded(max_loaded)
        .preload(preload);
    for (name, size) in sized {
        models = models.model(name, size);
    }
    for (route, r) in &cfg.routes {
        models = models.route(route.clone(), r.model.clone());
    }
    let default_model = cfg
        .harness
        .default_route
        .as_ref()
        .and_then(|d| cfg.routes.get(d))
        .and_then(|r| r.model.clone());
    if let Some(m) = default_model {
        models = models.default_model(m);
    }
    Ok((models, facts))
}

/// Each route whose embeddings go to the cloud lane (`embeddings =
/// "cloud"`), the default route included, passed through with the route's
/// cloud model and deadline. One cloud client serves them all.
fn cloud_embeddings(cfg: &HarnessConfig, mut config: ServeConfig) -> anyhow::Result<ServeConfig> {
    let routes = std::iter::once(None)
        .chain(std::iter::once(Some(DEFAULT_ROUTE)))
        .chain(cfg.routes.keys().map(|r| Some(r.as_str())))
        .filter(|r| cfg.embeddings_lane(*r) == Lane::Cloud)
        .collect::<Vec<_>>();
    if routes.is_empty() {
        return Ok(config);
    }
    let cloud = cfg
        .cloud
        .clone()
        .expect("check_cloud_routes: a route sending embeddings to the cloud has a cloud lane");
    let lane = CloudLane::new(cloud).context("the cloud lane for embeddings")?;
    for route in routes {
        let mut embedder = CloudEmbedder::new(lane.clone()).deadline(cfg.route_deadline(route));
        if let Some(model) = cfg.route_cloud_model(route) {
            embedder = embedder.model(model);
        }
        config = config.cloud_embeddings(route, embedder);
    }
    Ok(config)
}

/// The bearer token from a file: the whole file, less one trailing
/// newline (what `echo` and editors leave).
fn token_from_file(path: &Path) -> anyhow::Result<BearerToken> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("cannot read --token-file {}: {e}", path.display())))?;
    let token = text.strip_suffix('\n').unwrap_or(&text);
    let token = token.strip_suffix('\r').unwrap_or(token);
    BearerToken::new(token).map_err(|_| {
        usage(format!(
            "--token-file {} must hold one token: visible ASCII without spaces",
            path.display()
        ))
    })
}

/// One line per configured lane, as llama-server and Ollama report what
/// they loaded: the local model's name, file size and load time; the cloud
/// model and its endpoint (scheme, host and port only: a URL may hold a
/// secret).
fn lane_lines(
    harness: &Harness,
    cfg: &HarnessConfig,
    lane: Option<&LocalLane>,
    total: Duration,
) -> Vec<String> {
    let mut lines = Vec::new();
    if let (Some(info), Some(local)) = (harness.lane_info(Lane::Local), &cfg.local) {
        // The GGUF header's name and quantisation, as the lane's start
        // validated it (not read again: that read is a tenth of a small
        // model's load).
        let header = lane.and_then(|l| l.info().file.as_ref());
        let name = header
            .and_then(|i| i.name.clone())
            .unwrap_or_else(|| local.model.display().to_string());
        let size = header
            .map(|i| i.file_size)
            .or_else(|| std::fs::metadata(&local.model).ok().map(|m| m.len()))
            .map_or_else(
                || "size unknown".into(),
                |b| format!("{:.1} MB", b as f64 / 1e6),
            );
        let quant = header
            .map(|i| format!(", {}", i.quantization))
            .unwrap_or_default();
        let load = info.load_time.unwrap_or(total);
        lines.push(format!(
            "edgecloud serve: local lane loaded {name} ({size}{quant}, {}) in {:.0} ms",
            local.model.display(),
            load.as_secs_f64() * 1e3
        ));
    }
    if let (Some(info), Some(cloud)) = (harness.lane_info(Lane::Cloud), &cfg.cloud) {
        lines.push(format!(
            "edgecloud serve: cloud lane ready: {} at {} (nothing to load; reachability is tracked per request)",
            info.model.as_deref().unwrap_or(&cloud.model),
            edgecloud::cloud::display_origin(&cloud.base_url)
        ));
        // Each route's own cloud side, where it has one.
        let routes: Vec<String> = cfg
            .routes
            .iter()
            .filter_map(|(name, r)| {
                let model = r.cloud_model.as_deref().map(|m| format!("model {m}"));
                let embeds = (cfg.embeddings_lane(Some(name)) == Lane::Cloud)
                    .then(|| "embeddings passed through".to_string());
                let said: Vec<String> = model.into_iter().chain(embeds).collect();
                (!said.is_empty()).then(|| format!("{name}: {}", said.join(", ")))
            })
            .collect();
        if !routes.is_empty() {
            lines.push(format!(
                "edgecloud serve: cloud lane per route: {}",
                routes.join("; ")
            ));
        }
    }
    lines
}
