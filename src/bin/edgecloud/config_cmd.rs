//! `edgecloud config show`: the configuration `run`, `serve` and `bench`
//! would use with the same flags: the config file, then `EDGECLOUD_*`
//! variables and flags on top (the same [`HarnessArgs::load_config`] they
//! call), and where each overridden setting came from. TOML by default
//! (valid as a config file: `config show > edgecloud.toml`), one line of
//! JSON with `--json`. Secrets never appear: an inline `api_key` prints as
//! `***`, and the key's variable is shown by name and whether it is set.
//! It starts no lane.

use crate::exit;
use crate::harness_args::{openai_base_url, HarnessArgs};
use crate::output::JsonArgs;
use anyhow::Context as _;
use clap::parser::ValueSource;
use clap::ArgMatches;
use edgecloud::cloud::CloudConfig;
use edgecloud::harness::{HarnessConfig, PoolConfig, ServeFileConfig};
use edgecloud::local::LocalConfig;
use serde_json::{json, Map, Value};
use std::process::ExitCode;

/// What an inline key prints as.
const REDACTED: &str = "***";

/// Subcommands of `edgecloud config`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the effective configuration: --config FILE, environment and
    /// flags merged (flag > EDGECLOUD_* variable > config file > default),
    /// secrets redacted. TOML (a valid config file), or --json.
    Show(ShowArgs),
}

/// Arguments of `edgecloud config show`.
#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    lanes: HarnessArgs,
    #[command(flatten)]
    output: JsonArgs,
}

/// Which flag sets which key (the ids are `HarnessArgs`' field names).
const FLAG_KEYS: &[(&str, &str, &str)] = &[
    ("model", "--model", "local.model"),
    ("threads", "--threads", "local.threads"),
    ("thread_policy", "--thread-policy", "local.thread_policy"),
    ("gpu_layers", "--gpu-layers", "local.gpu_layers"),
    ("context_size", "--context-size", "local.context_size"),
    ("batch_size", "--batch-size", "local.batch_size"),
    ("spec_type", "--spec-type", "local.spec_type"),
    ("model_draft", "--model-draft", "local.model_draft"),
    ("draft_max", "--draft-max", "local.draft_max"),
    ("draft_min", "--draft-min", "local.draft_min"),
    ("spec_exact", "--spec-exact", "local.spec_exact"),
    ("cache_ram", "--cache-ram", "local.cache_ram"),
    ("probe", "--probe", "local.probe"),
    ("base_url", "--base-url", "cloud.base_url"),
    ("cloud_model", "--cloud-model", "cloud.model"),
    ("api_key_env", "--api-key-env", "cloud.api_key_env"),
    ("ca_file", "--ca-file", "cloud.ca_file"),
    ("policy", "--policy", "harness.policy"),
    ("deadline_ms", "--deadline-ms", "harness.deadline_ms"),
];

pub(crate) fn run(cmd: ConfigCommand, matches: Option<&ArgMatches>) -> anyhow::Result<ExitCode> {
    match cmd {
        ConfigCommand::Show(args) => show(&args, matches),
    }
}

fn show(args: &ShowArgs, matches: Option<&ArgMatches>) -> anyhow::Result<ExitCode> {
    let cfg = args
        .lanes
        .load_config_with(crate::modelref::Download::Never)?;
    let sources = sources(args, matches)?;
    let config = config_value(&cfg);
    let key = key_source(cfg.cloud.as_ref());
    if args.output.json {
        args.output.print(&json!({
            "config_file": args.lanes.config.as_ref().map(|p| p.display().to_string()),
            "sources": sources,
            "api_key": key,
            "config": config,
        }))?;
        return Ok(exit::code(exit::OK));
    }
    let mut text = String::from("# edgecloud config show: the effective configuration\n");
    text.push_str(&match &args.lanes.config {
        Some(p) => format!("# config file: {}\n", p.display()),
        None => "# config file: none\n".into(),
    });
    if sources.is_empty() {
        text.push_str("# nothing overridden by flags or the environment\n");
    } else {
        text.push_str("# set by flags or the environment (they win over the file):\n");
        for (k, v) in &sources {
            text.push_str(&format!("#   {k}: {}\n", v.as_str().unwrap_or_default()));
        }
    }
    if let Some(note) = key.get("note").and_then(Value::as_str) {
        text.push_str(&format!("# cloud API key: {note}\n"));
    }
    if cfg.harness.policy.is_none() {
        text.push_str("# harness.policy unset: race (bench: every policy the lanes allow)\n");
    }
    if cfg.harness.deadline_ms.is_none() {
        text.push_str("# harness.deadline_ms unset: 5000\n");
    }
    text.push('\n');
    text.push_str(
        &toml::to_string(&without_nulls(config)).context("writing the configuration as TOML")?,
    );
    print!("{text}");
    Ok(exit::code(exit::OK))
}

/// `key -> "flag --x"` or `"env VAR"` for every setting the flags or the
/// environment gave; `OPENAI_BASE_URL` when it was the base URL's source.
fn sources(args: &ShowArgs, matches: Option<&ArgMatches>) -> anyhow::Result<Map<String, Value>> {
    let mut out = Map::new();
    let Some(m) = matches else {
        return Ok(out);
    };
    let env_of = |id: &str| -> String {
        let cmd = <HarnessArgs as clap::Args>::augment_args(clap::Command::new("show"));
        let var = cmd
            .get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        var
    };
    for (id, flag, key) in FLAG_KEYS {
        match m.value_source(id) {
            Some(ValueSource::CommandLine) => {
                out.insert((*key).into(), format!("flag {flag}").into());
            }
            Some(ValueSource::EnvVariable) => {
                out.insert((*key).into(), format!("env {}", env_of(id)).into());
            }
            _ => {}
        }
    }
    if args.lanes.base_url.is_none() {
        let file_has_url = match &args.lanes.config {
            Some(p) => HarnessConfig::from_file(p)
                .map_err(|e| exit::usage_from(&e))?
                .cloud
                .is_some_and(|c| !c.base_url.is_empty()),
            None => false,
        };
        if !file_has_url && openai_base_url().is_some() {
            out.insert("cloud.base_url".into(), "env OPENAI_BASE_URL".into());
        }
    }
    Ok(out)
}

/// Where the cloud key comes from, never the key.
fn key_source(cloud: Option<&CloudConfig>) -> Value {
    let Some(c) = cloud else {
        return Value::Null;
    };
    if c.api_key.is_some() {
        return json!({"source": "config file (api_key)", "set": true,
            "note": "given in the config file (value redacted)"});
    }
    let set = std::env::var_os(&c.api_key_env).is_some_and(|v| !v.is_empty());
    json!({
        "source": format!("env {}", c.api_key_env),
        "set": set,
        "note": if set {
            format!("from {} (set; value redacted)", c.api_key_env)
        } else {
            format!("from {} (not set: no key is sent)", c.api_key_env)
        },
    })
}

/// The configuration as a config file would spell it.
fn config_value(cfg: &HarnessConfig) -> Value {
    let mut root = Map::new();
    if let Some(l) = &cfg.local {
        root.insert("local".into(), local_value(l));
    }
    if let Some(c) = &cfg.cloud {
        root.insert("cloud".into(), cloud_value(c));
    }
    root.insert(
        "harness".into(),
        serde_json::to_value(&cfg.harness).unwrap_or(Value::Null),
    );
    if !cfg.routes.is_empty() {
        root.insert(
            "routes".into(),
            serde_json::to_value(&cfg.routes).unwrap_or(Value::Null),
        );
    }
    // `[pool]`, `[serve]` and `[[models]]` when the file sets them (what
    // `serve` reads besides the lanes).
    if cfg.pool != PoolConfig::default() {
        root.insert(
            "pool".into(),
            serde_json::to_value(&cfg.pool).unwrap_or(Value::Null),
        );
    }
    if cfg.serve != ServeFileConfig::default() {
        root.insert(
            "serve".into(),
            serde_json::to_value(&cfg.serve).unwrap_or(Value::Null),
        );
    }
    if !cfg.models.is_empty() {
        root.insert(
            "models".into(),
            serde_json::to_value(&cfg.models).unwrap_or(Value::Null),
        );
    }
    Value::Object(root)
}

fn local_value(l: &LocalConfig) -> Value {
    json!({
        "model": l.model.display().to_string(),
        "threads": l.threads,
        "thread_policy": l.thread_policy,
        "context_size": l.context_size,
        "batch_size": l.batch_size,
        "gpu_layers": l.gpu_layers,
        "chat_template": l.chat_template,
        "nice": l.nice,
        "probe": l.probe,
        "probe_program": l.probe_program.as_ref().map(|p| p.display().to_string()),
        "probe_timeout_ms": l.probe_timeout_ms,
        "probe_cache": l.probe_cache,
        "probe_cache_dir": l.probe_cache_dir.as_ref().map(|p| p.display().to_string()),
        "grammar_pass": l.grammar_pass,
        "spec_type": l.spec_type,
        "model_draft": l.model_draft.as_ref().map(|p| p.display().to_string()),
        "draft_max": l.draft_max,
        "draft_min": l.draft_min,
        "spec_exact": l.spec_exact,
        "cache_ram": l.cache_ram,
    })
}

fn cloud_value(c: &CloudConfig) -> Value {
    let ms = |d: std::time::Duration| d.as_millis() as u64;
    json!({
        "base_url": c.base_url,
        "model": c.model,
        "api_key_env": c.api_key_env,
        "api_key": c.api_key.as_ref().map(|_| REDACTED),
        "stream": c.stream,
        "stream_usage": c.stream_usage,
        "send_top_k": c.send_top_k,
        "continue_with": c.continue_with,
        "connect_timeout_ms": ms(c.connect_timeout),
        "stall_timeout_ms": ms(c.stall_timeout),
        "ca_file": c.ca_file.as_ref().map(|p| p.display().to_string()),
        "down_after_failures": c.down_after_failures,
        "cooldown_ms": ms(c.cooldown),
        "max_cooldown_ms": ms(c.max_cooldown),
        "cooldown_jitter": c.cooldown_jitter,
        "limits": {
            "max_body_bytes": c.limits.max_body_bytes,
            "max_content_bytes": c.limits.max_content_bytes,
            "max_line_bytes": c.limits.max_line_bytes,
            "max_header_bytes": c.limits.max_header_bytes,
        },
    })
}

/// TOML has no null: an unset key is simply absent.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}
