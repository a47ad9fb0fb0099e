//! Model references: what `-m` takes besides a path. Owns parsing a
//! reference ([`ModelRef`]), finding its file where people already keep
//! models (Ollama's store, the Hugging Face cache, llama.cpp's `-hf`
//! cache) and, for a Hugging Face reference that is not cached, downloading
//! it into the Hugging Face cache ([`resolve`]). The result is a plain GGUF
//! path ([`Resolved::path`]): the lanes never see a reference.
//!
//! The forms:
//! - a path (anything that is not one of the forms below; `./hf:x` is the
//!   file `hf:x`), returned as given, not even looked at;
//! - `ollama:NAME[:TAG]` (`ollama:llama3.2`, `ollama:qwen2.5:0.5b`,
//!   `ollama:user/model:tag`, `ollama:hf.co/org/repo:Q4_K_M`): the model
//!   blob of the manifest in Ollama's store, read-only ([`ollama`]);
//! - `hf:ORG/REPO[:QUANT]` or `hf:ORG/REPO/PATH/FILE.gguf`: a GGUF file of a
//!   Hugging Face repository, the quantisation picked as llama-server picks
//!   it ([`hf::choose`]), from the cache first, else downloaded.
//!
//! What it must not do: write into Ollama's store; print anything (the
//! caller draws progress from [`Progress`]); let the Hugging Face token out
//! of [`ApiKey`](crate::cloud::ApiKey) anywhere but the `Authorization`
//! header sent to the endpoint; leave a partial file under a final name.
//!
//! Features: the module needs `local` (it exists for the local lane and
//! hashes with `sha2`); the download needs `cloud` too (its HTTP client).
//! Without `cloud`, a Hugging Face reference that is not cached is
//! [`ModelRefError::DownloadUnavailable`].

pub mod hf;
#[cfg(feature = "cloud")]
mod hub;
pub mod ollama;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::CancellationToken;

/// A parsed `-m` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A file path, used as given.
    Path(PathBuf),
    /// `ollama:NAME[:TAG]`.
    Ollama(ollama::OllamaRef),
    /// `hf:ORG/REPO[:QUANT]` or `hf:ORG/REPO/FILE.gguf`.
    Hf(hf::HfRef),
}

impl ModelRef {
    /// Parses a `-m` value. Only the `ollama:` and `hf:` forms can be
    /// malformed; anything else is a path.
    pub fn parse(text: &str) -> Result<Self, ModelRefError> {
        if let Some(rest) = text.strip_prefix(ollama::SCHEME) {
            ollama::OllamaRef::parse(rest).map(ModelRef::Ollama)
        } else if let Some(rest) = text.strip_prefix(hf::SCHEME) {
            hf::HfRef::parse(rest).map(ModelRef::Hf)
        } else {
            Ok(ModelRef::Path(PathBuf::from(text)))
        }
    }

    /// Parses a path-typed value (a `PathBuf` from a flag or a config
    /// file). A path that is not Unicode is a path.
    pub fn from_path(path: &Path) -> Result<Self, ModelRefError> {
        match path.to_str() {
            Some(text) => Self::parse(text),
            None => Ok(ModelRef::Path(path.to_path_buf())),
        }
    }

    /// Whether this is one of the reference forms (not a path).
    pub fn is_reference(&self) -> bool {
        !matches!(self, ModelRef::Path(_))
    }
}

impl FromStr for ModelRef {
    type Err = ModelRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelRef::Path(p) => write!(f, "{}", p.display()),
            ModelRef::Ollama(r) => r.fmt(f),
            ModelRef::Hf(r) => r.fmt(f),
        }
    }
}

/// Where models are looked for. [`Locations::from_env`] reads the
/// variables the owning tools read; tests build one by hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locations {
    /// Ollama's store candidates, in order: `OLLAMA_MODELS` alone when set,
    /// else `~/.ollama/models`, then the Linux service's
    /// `/usr/share/ollama/.ollama/models`.
    pub ollama_stores: Vec<PathBuf>,
    /// The Hugging Face hub cache: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub` (`XDG_CACHE_HOME` in place of `~/.cache`
    /// when set, as `huggingface_hub` does).
    pub hf_cache: PathBuf,
    /// llama.cpp's `-hf` download folder: `LLAMA_CACHE`, else
    /// `~/.cache/llama.cpp` (or `XDG_CACHE_HOME/llama.cpp`).
    pub llama_cache: Option<PathBuf>,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn home() -> Option<PathBuf> {
    env_path("HOME")
}

fn xdg_cache() -> Option<PathBuf> {
    env_path("XDG_CACHE_HOME").or_else(|| home().map(|h| h.join(".cache")))
}

impl Locations {
    /// From the environment, as Ollama, `huggingface_hub` and llama.cpp
    /// read it.
    pub fn from_env() -> Self {
        let ollama_stores = match env_path("OLLAMA_MODELS") {
            Some(dir) => vec![dir],
            None => home()
                .map(|h| h.join(".ollama/models"))
                .into_iter()
                .chain([PathBuf::from("/usr/share/ollama/.ollama/models")])
                .collect(),
        };
        let hf_cache = env_path("HF_HUB_CACHE")
            .or_else(|| env_path("HF_HOME").map(|h| h.join("hub")))
            .or_else(|| xdg_cache().map(|c| c.join("huggingface/hub")))
            .unwrap_or_else(|| PathBuf::from(".cache/huggingface/hub"));
        let llama_cache =
            env_path("LLAMA_CACHE").or_else(|| xdg_cache().map(|c| c.join("llama.cpp")));
        Locations {
            ollama_stores,
            hf_cache,
            llama_cache,
        }
    }
}

/// The Hugging Face endpoint and how to talk to it.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// `HF_ENDPOINT`, else `https://huggingface.co` (no trailing slash).
    pub endpoint: String,
    /// `HF_HUB_OFFLINE=1` (or `true`, `yes`, `on`): never reach the network.
    pub offline: bool,
    /// `HF_TOKEN`, else the token file `huggingface-cli login` writes
    /// (`HF_HOME/token`, `~/.cache/huggingface/token`). Sent only to the
    /// endpoint, never printed.
    #[cfg(feature = "cloud")]
    pub token: Option<crate::cloud::ApiKey>,
}

/// The Hub's public endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

impl Default for HubSettings {
    fn default() -> Self {
        HubSettings {
            endpoint: DEFAULT_ENDPOINT.into(),
            offline: false,
            #[cfg(feature = "cloud")]
            token: None,
        }
    }
}

impl HubSettings {
    /// From `HF_ENDPOINT`, `HF_HUB_OFFLINE` and `HF_TOKEN` (or the token
    /// file), as `huggingface_hub` reads them.
    pub fn from_env() -> Self {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .map(|e| e.trim().trim_end_matches('/').to_string())
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.into());
        let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        });
        HubSettings {
            endpoint,
            offline,
            #[cfg(feature = "cloud")]
            token: token_from_env(),
        }
    }
}

#[cfg(feature = "cloud")]
fn token_from_env() -> Option<crate::cloud::ApiKey> {
    use crate::cloud::ApiKey;
    if let Ok(Some(key)) = ApiKey::from_env("HF_TOKEN") {
        return Some(key);
    }
    let file = env_path("HF_TOKEN_PATH").or_else(|| {
        env_path("HF_HOME")
            .or_else(|| xdg_cache().map(|c| c.join("huggingface")))
            .map(|h| h.join("token"))
    })?;
    let text = std::fs::read_to_string(file).ok()?;
    let token = text.trim();
    (!token.is_empty()).then(|| ApiKey::new(token))
}

/// A download's progress, for the caller to draw (this module prints
/// nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress<'a> {
    /// The file in the repository.
    pub file: &'a str,
    /// Which file of a split model (1-based) and how many there are.
    pub part: usize,
    /// How many files are being downloaded.
    pub parts: usize,
    /// Bytes of this file on disk so far (resumed bytes included).
    pub done: u64,
    /// The file's size.
    pub total: u64,
    /// Bytes that were already there from an interrupted download.
    pub resumed_from: u64,
}

/// What [`ResolveOptions::progress`] calls.
pub type ProgressFn = Box<dyn Fn(&Progress<'_>) + Send + Sync>;

/// How [`resolve`] may work.
pub struct ResolveOptions {
    /// Where to look.
    pub locations: Locations,
    /// The Hub, for references that are not cached.
    pub hub: HubSettings,
    /// Whether a Hugging Face reference that is not cached may be
    /// downloaded (`config show` says what would be used, and fetches
    /// nothing).
    pub allow_download: bool,
    /// Stops a download; its partial file stays for the next try.
    pub cancel: CancellationToken,
    /// Called as a download makes progress.
    pub progress: Option<ProgressFn>,
}

impl fmt::Debug for ResolveOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolveOptions")
            .field("locations", &self.locations)
            .field("hub", &self.hub)
            .field("allow_download", &self.allow_download)
            .finish_non_exhaustive()
    }
}

impl Default for ResolveOptions {
    fn default() -> Self {
        ResolveOptions {
            locations: Locations::default(),
            hub: HubSettings::default(),
            allow_download: true,
            cancel: CancellationToken::new(),
            progress: None,
        }
    }
}

impl ResolveOptions {
    /// Locations and Hub settings from the environment; downloads allowed.
    pub fn from_env() -> Self {
        ResolveOptions {
            locations: Locations::from_env(),
            hub: HubSettings::from_env(),
            ..ResolveOptions::default()
        }
    }
}

/// Where a resolved file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// A plain path, as given.
    Path,
    /// Ollama's store (the store folder and the manifest read).
    Ollama {
        /// The store.
        store: PathBuf,
        /// The manifest.
        manifest: PathBuf,
    },
    /// The Hugging Face cache (the snapshot's commit).
    HfCache {
        /// The commit of the snapshot.
        commit: String,
    },
    /// llama.cpp's `-hf` cache.
    LlamaCache,
    /// Downloaded just now into the Hugging Face cache.
    Downloaded {
        /// The commit downloaded.
        commit: String,
        /// Bytes transferred (resumed bytes not counted).
        bytes: u64,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Path => f.write_str("path"),
            Origin::Ollama { store, .. } => write!(f, "Ollama's store {}", store.display()),
            Origin::HfCache { commit } => write!(
                f,
                "the Hugging Face cache (commit {})",
                &commit[..commit.len().min(12)]
            ),
            Origin::LlamaCache => f.write_str("llama.cpp's cache"),
            Origin::Downloaded { commit, bytes } => write!(
                f,
                "downloaded {:.1} MB into the Hugging Face cache (commit {})",
                *bytes as f64 / 1e6,
                &commit[..commit.len().min(12)]
            ),
        }
    }
}

/// A reference resolved to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The GGUF file to load (the first part of a split model: llama.cpp
    /// finds the others next to it).
    pub path: PathBuf,
    /// Every part of a split model, in order (just `path` otherwise).
    pub parts: Vec<PathBuf>,
    /// Where it was found.
    pub origin: Origin,
    /// The chat template of an Ollama manifest (its `template` layer), in
    /// Ollama's Go template syntax. llama.cpp cannot run it; see
    /// [`ollama::template_name`] for the built-in it matches.
    pub ollama_template: Option<String>,
}

impl Resolved {
    fn plain(path: PathBuf, origin: Origin) -> Self {
        Resolved {
            parts: vec![path.clone()],
            path,
            origin,
            ollama_template: None,
        }
    }
}

/// What became of an Ollama manifest's chat template when a resolved
/// model was put on a lane ([`Resolved::apply_to`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OllamaTemplate {
    /// Used through the llama.cpp built-in it matches: the GGUF has no
    /// template of its own and the configuration names none.
    Used(&'static str),
    /// Not used: the GGUF has its own (`like` the built-in it matches).
    GgufHasOne(Option<&'static str>),
    /// Not used: the configuration names a template.
    Configured(Option<&'static str>),
    /// Not used: it matches no llama.cpp built-in.
    Unknown,
}

impl OllamaTemplate {
    /// The llama.cpp built-in the manifest's template matches, if any.
    pub fn like(self) -> Option<&'static str> {
        match self {
            OllamaTemplate::Used(n) => Some(n),
            OllamaTemplate::GgufHasOne(n) | OllamaTemplate::Configured(n) => n,
            OllamaTemplate::Unknown => None,
        }
    }
}

impl Resolved {
    /// Puts the resolved file on a local lane's settings: the path becomes
    /// the file, and an Ollama manifest's chat template is used when the
    /// GGUF has none and the configuration names none (the one rule every
    /// front end applies: CLI flags, config files, bindings). Says what
    /// became of such a template; `None` when there was none.
    pub fn apply_to(&self, local: &mut crate::local::LocalConfig) -> Option<OllamaTemplate> {
        let choice = self.ollama_template.as_deref().map(|template| {
            let name = ollama::template_name(template);
            let own = crate::gguf::inspect(&self.path)
                .map(|i| i.info.chat_template)
                .unwrap_or(true);
            match (name, own, &local.chat_template) {
                (Some(name), false, None) => {
                    local.chat_template = Some(name.to_string());
                    OllamaTemplate::Used(name)
                }
                (_, true, _) => OllamaTemplate::GgufHasOne(name),
                (_, _, Some(_)) => OllamaTemplate::Configured(name),
                (None, false, None) => OllamaTemplate::Unknown,
            }
        });
        local.model = self.path.clone();
        choice
    }
}

/// Finds (or downloads) the file `reference` names. A path is returned as
/// it is; see the module docs for the rest.
pub fn resolve(reference: &ModelRef, options: &ResolveOptions) -> Result<Resolved, ModelRefError> {
    match reference {
        ModelRef::Path(p) => Ok(Resolved::plain(p.clone(), Origin::Path)),
        ModelRef::Ollama(r) => ollama::resolve(r, &options.locations),
        ModelRef::Hf(r) => {
            if let Some(found) = hf::find_cached(r, &options.locations)? {
                return Ok(found);
            }
            if options.hub.offline {
                return Err(ModelRefError::NotCached {
                    reference: r.to_string(),
                    cache: options.locations.hf_cache.clone(),
                    why: "HF_HUB_OFFLINE is set",
                });
            }
            if !options.allow_download {
                return Err(ModelRefError::NotCached {
                    reference: r.to_string(),
                    cache: options.locations.hf_cache.clone(),
                    why: "this command does not download",
                });
            }
            download(r, options)
        }
    }
}

#[cfg(feature = "cloud")]
fn download(r: &hf::HfRef, options: &ResolveOptions) -> Result<Resolved, ModelRefError> {
    hub::download(r, options)
}

#[cfg(not(feature = "cloud"))]
fn download(r: &hf::HfRef, _options: &ResolveOptions) -> Result<Resolved, ModelRefError> {
    Err(ModelRefError::DownloadUnavailable {
        reference: r.to_string(),
    })
}

/// Why a reference could not be resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelRefError {
    /// Not a valid reference (a usage error).
    #[error("`{reference}` is not a valid model reference: {reason}")]
    Malformed {
        /// What was given.
        reference: String,
        /// What is wrong, and the expected form.
        reason: String,
    },
    /// None of the Ollama store folders exists.
    #[error(
        "no Ollama store found (looked in {}); set OLLAMA_MODELS to the folder `ollama pull` writes to",
        list_paths(tried)
    )]
    OllamaStoreNotFound {
        /// The folders looked in.
        tried: Vec<PathBuf>,
    },
    /// The store has no manifest for that name and tag.
    #[error(
        "{reference} is not in Ollama's store ({}): run `ollama pull {pull}` first",
        list_paths(stores)
    )]
    OllamaNotPulled {
        /// The reference.
        reference: String,
        /// What to pull.
        pull: String,
        /// The stores looked in.
        stores: Vec<PathBuf>,
    },
    /// The manifest cannot be used (unreadable JSON, no model layer, a
    /// missing blob).
    #[error("{reference}: the Ollama manifest {} cannot be used: {detail}", manifest.display())]
    OllamaManifest {
        /// The reference.
        reference: String,
        /// The manifest.
        manifest: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Not cached, and downloading is not possible now.
    #[error("{reference} is not in the Hugging Face cache ({}) or llama.cpp's, and {why}", cache.display())]
    NotCached {
        /// The reference.
        reference: String,
        /// The cache looked in.
        cache: PathBuf,
        /// Why there is no download (`HF_HUB_OFFLINE is set`).
        why: &'static str,
    },
    /// This build has no HTTP client (feature `cloud`).
    #[error("{reference} is not cached, and this build cannot download it (built without the `cloud` feature)")]
    DownloadUnavailable {
        /// The reference.
        reference: String,
    },
    /// The repository does not exist (or is private and the token does
    /// not reach it).
    #[error("there is no repository {repo} on {endpoint}{hint}")]
    RepoNotFound {
        /// `ORG/REPO`.
        repo: String,
        /// The endpoint asked.
        endpoint: String,
        /// A hint about the token.
        hint: &'static str,
    },
    /// The repository is gated and the token is missing or lacks access.
    #[error("{repo} is gated: {}", if *token_set {
        "the token in HF_TOKEN has no access to it; accept its terms on its Hub page with that account"
    } else {
        "accept its terms on its Hub page, then set HF_TOKEN to a token of that account"
    })]
    Gated {
        /// `ORG/REPO`.
        repo: String,
        /// Whether a token was sent.
        token_set: bool,
    },
    /// The token was refused.
    #[error("{endpoint} refused the token in HF_TOKEN (HTTP {status}); check that it is valid")]
    TokenRefused {
        /// The endpoint.
        endpoint: String,
        /// The status.
        status: u16,
    },
    /// No GGUF file of the quantisation asked for.
    #[error("{repo} has no {quant} GGUF file{}", available_list(available))]
    QuantNotFound {
        /// `ORG/REPO`.
        repo: String,
        /// The quantisation asked for.
        quant: String,
        /// The quantisations there are.
        available: Vec<String>,
    },
    /// No such file in the repository.
    #[error("{repo} has no file {file}")]
    FileNotFound {
        /// `ORG/REPO`.
        repo: String,
        /// The file asked for.
        file: String,
    },
    /// The repository holds no GGUF file at all.
    #[error("{repo} has no GGUF file (llama.cpp loads GGUF only)")]
    NoGguf {
        /// `ORG/REPO`.
        repo: String,
    },
    /// The endpoint answered with an unexpected status or body.
    #[error("{url}: {detail}")]
    Http {
        /// The URL (never with the token).
        url: String,
        /// What came back.
        detail: String,
    },
    /// A downloaded file does not hash to what the Hub says.
    #[error("{file}: the download hashes to {found}, the Hub says {expected}; the partial file was removed, try again")]
    HashMismatch {
        /// The file.
        file: String,
        /// The Hub's SHA-256.
        expected: String,
        /// What the bytes hashed to.
        found: String,
    },
    /// A file or folder could not be read or written.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// Stopped (Ctrl-C); a partial download stays as `.incomplete` and the
    /// next try resumes it.
    #[error("the download was cancelled; the next try resumes it")]
    Cancelled,
}

fn list_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn available_list(available: &[String]) -> String {
    if available.is_empty() {
        String::new()
    } else {
        format!(" (it has: {})", available.join(", "))
    }
}

impl ModelRefError {
    /// A stable snake_case name for the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelRefError::Malformed { .. } => "malformed",
            ModelRefError::OllamaStoreNotFound { .. } => "ollama_store_not_found",
            ModelRefError::OllamaNotPulled { .. } => "ollama_not_pulled",
            ModelRefError::OllamaManifest { .. } => "ollama_manifest",
            ModelRefError::NotCached { .. } => "not_cached",
            ModelRefError::DownloadUnavailable { .. } => "download_unavailable",
            ModelRefError::RepoNotFound { .. } => "repo_not_found",
            ModelRefError::Gated { .. } => "gated",
            ModelRefError::TokenRefused { .. } => "token_refused",
            ModelRefError::QuantNotFound { .. } => "quant_not_found",
            ModelRefError::FileNotFound { .. } => "file_not_found",
            ModelRefError::NoGguf { .. } => "no_gguf",
            ModelRefError::Http { .. } => "http",
            ModelRefError::HashMismatch { .. } => "hash_mismatch",
            ModelRefError::Io { .. } => "io",
            ModelRefError::Cancelled => "cancelled",
        }
    }

    /// Whether the reference itself is wrong (a usage error, exit 2), as
    /// opposed to a failure to find or fetch what it names (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, ModelRefError::Malformed { .. })
    }

    fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        ModelRefError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    fn malformed(reference: String, reason: impl Into<String>) -> Self {
        ModelRefError::Malformed {
            reference,
            reason: reason.into(),
        }
    }
}

/// Whether `s` is a name segment Ollama and the Hub accept: letters,
/// digits, `-`, `_`, `.`, not empty, not `.` or `..`.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anything_without_a_scheme_is_a_path() {
        for p in ["models/x.gguf", "/abs/x.gguf", "./hf:x", "C:\\m.gguf", "x"] {
            assert_eq!(ModelRef::parse(p).unwrap(), ModelRef::Path(p.into()), "{p}");
        }
        assert!(!ModelRef::parse("a.gguf").unwrap().is_reference());
        assert!(ModelRef::parse("ollama:llama3.2").unwrap().is_reference());
    }

    #[test]
    fn references_print_as_typed_in_canonical_form() {
        for (text, shown) in [
            ("ollama:llama3.2", "ollama:llama3.2"),
            ("ollama:qwen2.5:0.5b", "ollama:qwen2.5:0.5b"),
            ("hf:org/repo", "hf:org/repo"),
            ("hf:org/repo:q8_0", "hf:org/repo:q8_0"),
            ("hf:org/repo/sub/x.gguf", "hf:org/repo/sub/x.gguf"),
        ] {
            assert_eq!(ModelRef::parse(text).unwrap().to_string(), shown);
        }
    }

    #[test]
    fn malformed_references_are_usage_errors() {
        for bad in [
            "hf:",
            "hf:org",
            "hf:org/",
            "hf:/repo",
            "hf:org/repo:",
            "hf:org/repo/readme.md",
            "hf:org/re po",
            "ollama:",
            "ollama:a/b/c/d",
            "ollama:x:",
            "ollama:../x",
        ] {
            let err = ModelRef::parse(bad).unwrap_err();
            assert!(err.is_usage(), "{bad}: {err}");
            assert_eq!(err.kind(), "malformed");
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn origins_read_well() {
        let commit = "0123456789abcdef0123".to_string();
        assert_eq!(
            Origin::HfCache {
                commit: commit.clone()
            }
            .to_string(),
            "the Hugging Face cache (commit 0123456789ab)"
        );
        assert_eq!(
            Origin::Downloaded {
                commit,
                bytes: 2_500_000
            }
            .to_string(),
            "downloaded 2.5 MB into the Hugging Face cache (commit 0123456789ab)"
        );
    }
}
