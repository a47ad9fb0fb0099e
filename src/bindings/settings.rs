//! A harness's settings as every front end takes them: a configuration
//! (TOML text, a file, or a JSON-like value with the same keys) and
//! [`Overrides`] that win over it, as the CLI's flags win over
//! `--config`. The CLI, the C ABI and the Python package all go through
//! [`Overrides::apply`], so a setting means the same everywhere.
//!
//! What it must not do: start lanes, or print (the CLI says on stderr
//! where a model reference was found; a binding stays quiet).

use crate::cloud::CloudConfig;
use crate::harness::{ConfigError, HarnessConfig, PolicyKind, Setting};
use crate::local::{LocalConfig, ProbeMode, SpecType, ThreadPolicy};
use crate::modelref::{self, ModelRef, ModelRefError, OllamaTemplate, ResolveOptions};
use std::path::PathBuf;

/// Settings that win over the configuration, each `None` when not given.
/// The CLI fills it from its flags (and their `EDGECLOUD_*` variables), a
/// binding from keyword arguments.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Overrides {
    /// The local lane's model: a GGUF path, `ollama:NAME[:TAG]`,
    /// `hf:ORG/REPO[:QUANT]` or `hf:ORG/REPO/FILE.gguf` (a reference is
    /// resolved by [`resolve_model`]). Starts the local lane when the
    /// configuration has none.
    pub model: Option<PathBuf>,
    /// The cloud lane's base URL, up to the version segment.
    pub base_url: Option<String>,
    /// The cloud lane's model name.
    pub cloud_model: Option<String>,
    /// The environment variable holding the cloud API key.
    pub api_key_env: Option<String>,
    /// A PEM file of CA certificates the cloud lane trusts besides the web
    /// roots.
    pub ca_file: Option<PathBuf>,
    /// The policy (its parameters from the configuration are dropped when
    /// they belong to another policy, as `--policy` does).
    pub policy: Option<PolicyKind>,
    /// A run's time budget, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Compute threads of the local lane.
    pub threads: Option<usize>,
    /// How many of those threads each decode step uses.
    pub thread_policy: Option<ThreadPolicy>,
    /// Layers of the local model offloaded to a GPU.
    pub gpu_layers: Option<u32>,
    /// Context size of the local lane, in tokens.
    pub context_size: Option<u32>,
    /// Prompt batch size of the local lane.
    pub batch_size: Option<u32>,
    /// Whether the local model is probed in a child process first.
    pub probe: Option<ProbeMode>,
    /// Speculative decoding of the local lane (`off`, `ngram`, `draft`).
    pub spec_type: Option<SpecType>,
    /// The draft model for `spec_type` `draft`: a smaller GGUF file with
    /// the same vocabulary.
    pub model_draft: Option<PathBuf>,
    /// Most tokens drafted per step.
    pub draft_max: Option<u32>,
    /// Fewest drafts verified.
    pub draft_min: Option<u32>,
    /// Whether drafts keep greedy answers bit-exact (see
    /// [`LocalConfig::spec_exact`]).
    pub spec_exact: Option<bool>,
    /// The prompt cache's budget in MiB (see [`LocalConfig::cache_ram`]).
    pub cache_ram: Option<u64>,
    /// Instances (runs served at once): `[pool] parallel`.
    pub parallel: Option<usize>,
}

/// What is wrong with a configuration and its overrides together.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// A local-lane setting was given but there is no local lane.
    #[error("`{setting}` needs a local model (`model`, or [local] in the configuration)")]
    NeedsLocal {
        /// The setting, by its key (`threads`, `gpu_layers`, ...).
        setting: &'static str,
    },
    /// The cloud lane lacks a base URL or a model.
    #[error(
        "the cloud lane needs both a base URL (`base_url`, [cloud] base_url in the \
         configuration, or OPENAI_BASE_URL) and a model (`cloud_model`, or [cloud] model)"
    )]
    CloudIncomplete,
    /// The configuration (with the overrides applied) is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl Overrides {
    /// Applies these settings on top of `cfg`, then validates the result.
    /// `OPENAI_BASE_URL` (the OpenAI SDKs' variable) fills a cloud lane's
    /// base URL when neither the configuration nor the overrides set one.
    /// A model reference is left as given: [`resolve_model`] turns it into
    /// its file.
    pub fn apply(&self, cfg: &mut HarnessConfig) -> Result<(), SettingsError> {
        if let Some(model) = &self.model {
            cfg.local.get_or_insert_with(LocalConfig::default).model = model.clone();
        }
        let local_settings: [(&'static str, bool); 12] = [
            ("probe", self.probe.is_some()),
            ("threads", self.threads.is_some()),
            ("thread_policy", self.thread_policy.is_some()),
            ("gpu_layers", self.gpu_layers.is_some()),
            ("context_size", self.context_size.is_some()),
            ("batch_size", self.batch_size.is_some()),
            ("spec_type", self.spec_type.is_some()),
            ("model_draft", self.model_draft.is_some()),
            ("draft_max", self.draft_max.is_some()),
            ("draft_min", self.draft_min.is_some()),
            ("spec_exact", self.spec_exact.is_some()),
            ("cache_ram", self.cache_ram.is_some()),
        ];
        match cfg.local.as_mut() {
            Some(local) => {
                if let Some(mode) = self.probe {
                    local.probe = mode;
                }
                if let Some(threads) = self.threads {
                    local.threads = Some(threads);
                }
                if let Some(policy) = self.thread_policy {
                    local.thread_policy = policy;
                }
                if let Some(n) = self.gpu_layers {
                    local.gpu_layers = n;
                }
                if let Some(n) = self.context_size {
                    local.context_size = Some(n);
                }
                if let Some(n) = self.batch_size {
                    local.batch_size = n;
                }
                if let Some(kind) = self.spec_type {
                    local.spec_type = kind;
                }
                if let Some(file) = &self.model_draft {
                    local.model_draft = Some(file.clone());
                }
                if let Some(n) = self.draft_max {
                    local.draft_max = n;
                }
                if let Some(n) = self.draft_min {
                    local.draft_min = n;
                }
                if let Some(exact) = self.spec_exact {
                    local.spec_exact = exact;
                }
                if let Some(mib) = self.cache_ram {
                    local.cache_ram = mib;
                }
            }
            None => {
                if let Some((setting, _)) = local_settings.iter().find(|(_, given)| *given) {
                    return Err(SettingsError::NeedsLocal { setting });
                }
            }
        }
        if self.base_url.is_some()
            || self.cloud_model.is_some()
            || self.api_key_env.is_some()
            || self.ca_file.is_some()
        {
            let cloud = cfg.cloud.get_or_insert_with(CloudConfig::default);
            if let Some(url) = &self.base_url {
                cloud.base_url = url.clone();
            }
            if let Some(model) = &self.cloud_model {
                cloud.model = model.clone();
            }
            if let Some(var) = &self.api_key_env {
                cloud.api_key_env = var.clone();
            }
            if let Some(file) = &self.ca_file {
                cloud.ca_file = Some(file.clone());
            }
        }
        if let Some(cloud) = cfg.cloud.as_mut() {
            if cloud.base_url.is_empty() {
                if let Some(url) = openai_base_url() {
                    cloud.base_url = url;
                }
            }
            if cloud.base_url.is_empty() || cloud.model.is_empty() {
                return Err(SettingsError::CloudIncomplete);
            }
        }
        if let Some(kind) = self.policy {
            cfg.harness.set_policy(kind);
        }
        if let Some(ms) = self.deadline_ms {
            cfg.harness.deadline_ms = Some(ms);
        }
        if let Some(n) = self.parallel {
            if n == 0 {
                return Err(ConfigError::Invalid {
                    key: "parallel".into(),
                    setting: Setting::Instances,
                    detail: "must be at least 1".into(),
                }
                .into());
            }
            cfg.pool.parallel = Some(n);
        }
        cfg.validate()?;
        Ok(())
    }
}

/// The OpenAI SDKs' base URL variable, when set and not empty.
pub fn openai_base_url() -> Option<String> {
    std::env::var("OPENAI_BASE_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// Parses a configuration from TOML text (the keys of `--config`).
pub fn config_from_toml(text: &str) -> Result<HarnessConfig, ConfigError> {
    HarnessConfig::from_toml_str(text)
}

/// Parses a configuration from a JSON-like value with the same keys as
/// the TOML file (`{"local": {"model": "m.gguf"}, "harness": {"policy":
/// "race"}}`), as a Python dict gives it. `null` means absent. It goes
/// through the TOML parser, so both forms are checked by one set of rules
/// and their errors name the same keys.
pub fn config_from_value(value: &serde_json::Value) -> Result<HarnessConfig, ConfigError> {
    let invalid = |detail: String| ConfigError::Parse { path: None, detail };
    let value = without_nulls(value);
    if !value.is_object() {
        return Err(invalid(
            "the configuration must be an object (a table)".into(),
        ));
    }
    let text = toml::to_string(&value).map_err(|e| invalid(e.to_string()))?;
    HarnessConfig::from_toml_str(&text)
}

fn without_nulls(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Resolves the local lane's model reference in place (a plain path is
/// left as it is, not even looked at), as `-m` does but quietly: from
/// Ollama's store or the Hugging Face cache, else downloaded into it
/// (`HF_HUB_OFFLINE` forbids that). Says what became of an Ollama
/// manifest's chat template, when there was one.
pub fn resolve_model(local: &mut LocalConfig) -> Result<Option<OllamaTemplate>, ModelRefError> {
    let reference = ModelRef::from_path(&local.model)?;
    if !reference.is_reference() {
        return Ok(None);
    }
    let mut options = ResolveOptions::from_env();
    options.allow_download = !options.hub.offline;
    let found = modelref::resolve(&reference, &options)?;
    Ok(found.apply_to(local))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_over_the_configuration() {
        let mut cfg = config_from_toml(
            "[local]\nmodel = \"a.gguf\"\nthreads = 2\n[harness]\npolicy = \"cascade\"\ncascade_threshold = 0.3\ndeadline_ms = 100\n",
        )
        .expect("valid");
        let o = Overrides {
            model: Some("b.gguf".into()),
            threads: Some(3),
            policy: Some(PolicyKind::Race),
            deadline_ms: Some(250),
            parallel: Some(2),
            ..Overrides::default()
        };
        o.apply(&mut cfg).expect("valid");
        let local = cfg.local.as_ref().expect("a local lane");
        assert_eq!(local.model, PathBuf::from("b.gguf"));
        assert_eq!(local.threads, Some(3));
        assert_eq!(cfg.harness.policy.as_deref(), Some("race"));
        assert_eq!(
            cfg.harness.cascade_threshold, None,
            "cascade's parameter is dropped"
        );
        assert_eq!(cfg.harness.deadline_ms, Some(250));
        assert_eq!(cfg.pool.parallel, Some(2));
    }

    #[test]
    fn mistakes_name_the_setting() {
        let mut cfg = HarnessConfig::default();
        let o = Overrides {
            gpu_layers: Some(1),
            ..Overrides::default()
        };
        let e = o.apply(&mut cfg).unwrap_err();
        assert!(
            matches!(
                e,
                SettingsError::NeedsLocal {
                    setting: "gpu_layers"
                }
            ),
            "{e}"
        );
        let o = Overrides {
            cloud_model: Some("m".into()),
            base_url: Some(String::new()),
            ..Overrides::default()
        };
        assert!(matches!(
            o.apply(&mut HarnessConfig::default()),
            Err(SettingsError::CloudIncomplete)
        ));
        let o = Overrides {
            parallel: Some(0),
            ..Overrides::default()
        };
        let e = o.apply(&mut HarnessConfig::default()).unwrap_err();
        assert!(e.to_string().contains("parallel"), "{e}");
    }

    #[test]
    fn a_json_like_value_is_the_toml_file_by_another_name() {
        let v = serde_json::json!({
            "local": {"model": "m.gguf", "threads": 2, "chat_template": null},
            "harness": {"policy": "race", "deadline_ms": 1500},
        });
        let cfg = config_from_value(&v).expect("valid");
        assert_eq!(cfg.local.expect("local").threads, Some(2));
        assert_eq!(cfg.harness.deadline_ms, Some(1500));
        let e = config_from_value(&serde_json::json!({"harness": {"policy": "racer"}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("racer"), "{e}");
        let e = config_from_value(&serde_json::json!({"harness": {"deadlin_ms": 3}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("deadlin_ms"), "{e}");
        assert!(config_from_value(&serde_json::json!([1])).is_err());
    }
}
