//! The cloud lane's settings: endpoint, model, where the key comes from,
//! streaming, timeouts and size caps. Plain data plus validation; it opens
//! no connection and reads no environment except in [`CloudConfig::resolve_api_key`].

use super::health::CooldownPolicy;
use super::secret::{is_env_var_name, ApiKey, NOT_A_VAR_NAME};
use super::CloudError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Default name of the environment variable holding the API key.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// Settings of one cloud lane. Deserialisable (so a TOML file can carry it,
/// durations in milliseconds: `connect_timeout_ms`, `stall_timeout_ms`);
/// deliberately not serialisable, because it may hold the key.
///
/// ```
/// use edgecloud_cloud::CloudConfig;
/// let cfg: CloudConfig = toml::from_str(r#"
///     base_url = "http://127.0.0.1:8080/v1"
///     model = "qwen2.5-0.5b"
///     stream = false
///     [limits]
///     max_body_bytes = 1048576
/// "#).unwrap();
/// assert_eq!(cfg.api_key_env, "OPENAI_API_KEY");
/// assert!(!cfg.stream);
/// ```
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CloudConfig {
    /// Base URL of the OpenAI-compatible API, up to and including the
    /// version segment (`https://api.openai.com/v1`,
    /// `http://127.0.0.1:8080/v1`). The lane posts to
    /// `{base_url}/chat/completions`. Must be `http` or `https` and carry no
    /// user name or password.
    pub base_url: String,
    /// Model name sent with every request.
    pub model: String,
    /// Environment variable read for the key when [`CloudConfig::api_key`]
    /// is `None` (default `OPENAI_API_KEY`). Unset or empty means "no key",
    /// which local servers (llama-server, Ollama) accept.
    pub api_key_env: String,
    /// A key given directly (from a config file). Wins over the variable.
    pub api_key: Option<ApiKey>,
    /// Stream the answer (server-sent events). Default `true`.
    pub stream: bool,
    /// Ask for a final usage chunk when streaming
    /// (`stream_options.include_usage`). Default `true`; turn off for
    /// servers that reject the field.
    pub stream_usage: bool,
    /// Send `Sampling::top_k` as `top_k`. Default `false`: OpenAI rejects
    /// the field; vLLM, llama-server and Ollama accept it.
    pub send_top_k: bool,
    /// How the provider is asked to continue an unfinished answer (a
    /// conversation ending with an assistant turn, as the harness sends
    /// when the local lane failed part-way and this lane continues its
    /// answer). Default [`ContinueWith::Prefill`].
    pub continue_with: ContinueWith,
    /// Longest time to open a connection (DNS, TCP, TLS). The job's deadline
    /// still bounds it; this can only make the wait shorter. Default 10 s.
    #[serde(rename = "connect_timeout_ms", with = "millis")]
    pub connect_timeout: Duration,
    /// Longest silence tolerated after the response headers, between two
    /// reads of the body. A server that goes quiet longer is reported as
    /// [`CloudError::Stalled`] even when the deadline is far. Default 60 s.
    #[serde(rename = "stall_timeout_ms", with = "millis")]
    pub stall_timeout: Duration,
    /// Size caps.
    pub limits: CloudLimits,
    /// A PEM file of CA certificates to trust besides the built-in web
    /// roots (a private CA, a self-signed server). Read when the lane is
    /// built; a file that cannot be read or holds no certificate is
    /// [`CloudError::InvalidConfig`].
    pub ca_file: Option<std::path::PathBuf>,
    /// Consecutive connect-level failures (refused, DNS, TLS, no response
    /// headers before the deadline) after which the lane is marked down
    /// and absent from runs for a cooldown (default 3; 0 turns cooldowns
    /// off). See [`CooldownPolicy`].
    pub down_after_failures: u32,
    /// The first cooldown; it doubles with each failed probe. Default 5 s.
    #[serde(rename = "cooldown_ms", with = "millis")]
    pub cooldown: Duration,
    /// The longest cooldown, also the cap on a 429's `Retry-After`.
    /// Default 60 s.
    #[serde(rename = "max_cooldown_ms", with = "millis")]
    pub max_cooldown: Duration,
    /// Random spread of each cooldown, a fraction in `[0, 1)` (default
    /// 0.1: ±10%), so devices that lost the network together do not probe
    /// together.
    pub cooldown_jitter: f64,
}

/// Size caps that keep a hostile or broken server from growing memory.
/// Exceeding one is a typed error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CloudLimits {
    /// Most bytes read from one response body, streamed or not
    /// (default 8 MiB).
    pub max_body_bytes: usize,
    /// Most bytes of generated text kept from one response (default 1 MiB).
    pub max_content_bytes: usize,
    /// Longest server-sent-events line, and longest data of one event
    /// (default 256 KiB).
    pub max_line_bytes: usize,
    /// Most bytes of response headers (default 64 KiB). The HTTP stack
    /// also refuses more than 100 header fields or about 400 KiB in HTTP/1.
    pub max_header_bytes: usize,
}

impl Default for CloudLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 << 20,
            max_content_bytes: 1 << 20,
            max_line_bytes: 256 << 10,
            max_header_bytes: 64 << 10,
        }
    }
}

/// How a provider is asked to continue an unfinished answer (the request
/// ends with an assistant turn: `ChatMessage::split_prefill`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContinueWith {
    /// The unfinished turn as the last message, nothing else: llama-server
    /// continues it (`--prefill-assistant`, on by default), as do
    /// edgecloud's own `serve` and Anthropic-style providers.
    #[default]
    Prefill,
    /// The same, with vLLM's `continue_final_message: true` and
    /// `add_generation_prompt: false` (vLLM otherwise answers the turn
    /// with a new one).
    Vllm,
    /// For providers that honour neither (OpenAI's own API answers a
    /// trailing assistant message with a new turn): the unfinished turn,
    /// then a user message asking for the rest of it and nothing else.
    /// The model's wording may not join seamlessly.
    Instruction,
}

impl Default for CloudConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: String::new(),
            api_key_env: DEFAULT_API_KEY_ENV.to_owned(),
            api_key: None,
            stream: true,
            stream_usage: true,
            send_top_k: false,
            continue_with: ContinueWith::Prefill,
            connect_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(60),
            limits: CloudLimits::default(),
            ca_file: None,
            down_after_failures: CooldownPolicy::default().down_after_failures,
            cooldown: CooldownPolicy::default().cooldown,
            max_cooldown: CooldownPolicy::default().max_cooldown,
            cooldown_jitter: CooldownPolicy::default().jitter,
        }
    }
}

impl CloudConfig {
    /// Default settings for the given endpoint and model.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            ..Self::default()
        }
    }

    /// The cooldown rules these settings describe.
    pub fn cooldown_policy(&self) -> CooldownPolicy {
        CooldownPolicy {
            down_after_failures: self.down_after_failures,
            cooldown: self.cooldown,
            max_cooldown: self.max_cooldown,
            jitter: self.cooldown_jitter,
        }
    }

    /// Uses this key instead of the environment variable.
    pub fn with_api_key(mut self, key: ApiKey) -> Self {
        self.api_key = Some(key);
        self
    }

    /// The key the lane will send: [`CloudConfig::api_key`] if set, else the
    /// variable named by [`CloudConfig::api_key_env`], else none.
    pub fn resolve_api_key(&self) -> Result<Option<ApiKey>, CloudError> {
        let key = match &self.api_key {
            Some(key) => Some(key.clone()),
            None => ApiKey::from_env(&self.api_key_env)?,
        };
        match key {
            Some(key) if !key.is_header_safe() => Err(CloudError::InvalidConfig {
                reason: "the API key holds characters an HTTP header cannot carry \
                         (only visible ASCII is allowed)"
                    .to_owned(),
            }),
            key => Ok(key),
        }
    }

    /// Checks every field except the key, naming the first that is wrong.
    pub fn validate(&self) -> Result<(), CloudError> {
        let bad = |reason: &str| {
            Err(CloudError::InvalidConfig {
                reason: reason.to_owned(),
            })
        };
        if self.model.trim().is_empty() {
            return bad("model must not be empty");
        }
        if self.api_key.is_none() && !is_env_var_name(&self.api_key_env) {
            return bad(NOT_A_VAR_NAME);
        }
        if self.connect_timeout.is_zero() {
            return bad("connect timeout must be above zero");
        }
        if self.stall_timeout.is_zero() {
            return bad("stall timeout must be above zero");
        }
        if self.down_after_failures > 0 {
            if self.cooldown.is_zero() {
                return bad("cooldown_ms must be above zero (set down_after_failures = 0 to turn cooldowns off)");
            }
            if self.max_cooldown < self.cooldown {
                return bad("max_cooldown_ms must be at least cooldown_ms");
            }
        }
        if !(0.0..1.0).contains(&self.cooldown_jitter) {
            return bad("cooldown_jitter must be in [0, 1)");
        }
        let l = &self.limits;
        if l.max_body_bytes == 0
            || l.max_content_bytes == 0
            || l.max_line_bytes == 0
            || l.max_header_bytes == 0
        {
            return bad("size limits must be above zero");
        }
        super::endpoint::Endpoint::parse(&self.base_url).map(|_| ())
    }
}

impl fmt::Debug for CloudConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudConfig")
            .field("base_url", &super::endpoint::display_url(&self.base_url))
            .field("model", &self.model)
            .field(
                "api_key_env",
                // A key pasted in place of the name must not print either.
                &if is_env_var_name(&self.api_key_env) {
                    self.api_key_env.as_str()
                } else {
                    "<not a variable name>"
                },
            )
            .field("api_key", &self.api_key)
            .field("stream", &self.stream)
            .field("stream_usage", &self.stream_usage)
            .field("send_top_k", &self.send_top_k)
            .field("continue_with", &self.continue_with)
            .field("connect_timeout", &self.connect_timeout)
            .field("stall_timeout", &self.stall_timeout)
            .field("limits", &self.limits)
            .field("ca_file", &self.ca_file)
            .field("down_after_failures", &self.down_after_failures)
            .field("cooldown", &self.cooldown)
            .field("max_cooldown", &self.max_cooldown)
            .field("cooldown_jitter", &self.cooldown_jitter)
            .finish()
    }
}

mod millis {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_round_trip_keeps_key_secret() {
        let cfg: CloudConfig = toml::from_str(
            r#"
            base_url = "https://api.example.com/v1"
            model = "m"
            api_key = "sk-in-file"
            connect_timeout_ms = 1500
            "#,
        )
        .unwrap();
        assert_eq!(cfg.connect_timeout, Duration::from_millis(1500));
        assert_eq!(cfg.stall_timeout, Duration::from_secs(60));
        assert_eq!(cfg.cooldown_policy(), CooldownPolicy::default());
        assert_eq!(
            cfg.resolve_api_key().unwrap().unwrap().expose_secret(),
            "sk-in-file"
        );
        assert!(!format!("{cfg:?}").contains("sk-in-file"));
        cfg.validate().unwrap();
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(toml::from_str::<CloudConfig>("modle = \"x\"").is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let reason = |cfg: CloudConfig| match cfg.validate() {
            Err(CloudError::InvalidConfig { reason }) => reason,
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        assert!(reason(CloudConfig::new("http://h/v1", " ")).contains("model"));
        let mut cfg = CloudConfig::new("http://h/v1", "m");
        cfg.limits.max_line_bytes = 0;
        assert!(reason(cfg).contains("limits"));
        assert!(reason(CloudConfig::new("ftp://h/v1", "m")).contains("http"));
        let mut cfg = CloudConfig::new("http://h/v1", "m");
        cfg.max_cooldown = Duration::from_secs(1);
        assert!(reason(cfg).contains("max_cooldown_ms"));
        let mut cfg = CloudConfig::new("http://h/v1", "m");
        cfg.cooldown_jitter = 1.5;
        assert!(reason(cfg).contains("cooldown_jitter"));
    }

    #[test]
    fn a_key_in_place_of_the_variable_name_is_refused_unechoed() {
        let mut cfg = CloudConfig::new("http://h/v1", "m");
        cfg.api_key_env = "sk-proj-SECRET".into();
        let err = cfg.validate().unwrap_err();
        assert!(!format!("{err} {err:?} {cfg:?}").contains("SECRET"));
        cfg.api_key_env = "_MY_KEY2".into();
        cfg.validate().unwrap();
    }

    #[test]
    fn unset_env_var_means_no_key() {
        let mut cfg = CloudConfig::new("http://h/v1", "m");
        cfg.api_key_env = "EDGECLOUD_TEST_SURELY_UNSET_VAR".into();
        assert!(cfg.resolve_api_key().unwrap().is_none());
    }

    #[test]
    fn key_with_newline_is_refused_without_echo() {
        let cfg = CloudConfig::new("http://h/v1", "m").with_api_key(ApiKey::new("sk\nEVIL"));
        let err = cfg.resolve_api_key().unwrap_err();
        assert!(!err.to_string().contains("EVIL"));
    }
}
