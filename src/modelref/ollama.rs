//! `ollama:NAME[:TAG]`: the GGUF blob of a model `ollama pull` fetched,
//! found through Ollama's own store layout:
//! `manifests/<registry>/<namespace>/<name>/<tag>` (a JSON manifest in the
//! OCI image style), its layer of media type
//! `application/vnd.ollama.image.model`, the blob `blobs/sha256-<hex>`.
//! The manifest's `application/vnd.ollama.image.template` layer (the chat
//! template, in Go template syntax) is read too, for the caller to report
//! and to use when the GGUF has no template of its own.
//!
//! Read-only: nothing here creates, changes or locks a file in the store.
//! It does not hash the blob (Ollama verified it when pulling; hashing
//! gigabytes on every start would make the reference slow): it checks
//! that the blob exists with the manifest's size.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{is_name, Locations, ModelRefError, Origin, Resolved};

/// The prefix of the form.
pub const SCHEME: &str = "ollama:";
/// The registry of a name without one.
pub const DEFAULT_REGISTRY: &str = "registry.ollama.ai";
/// The namespace of a name without one.
pub const DEFAULT_NAMESPACE: &str = "library";
/// The tag of a name without one.
pub const DEFAULT_TAG: &str = "latest";

/// The media type of the GGUF layer.
pub const MODEL_MEDIA_TYPE: &str = "application/vnd.ollama.image.model";
/// The media type of the chat template layer.
pub const TEMPLATE_MEDIA_TYPE: &str = "application/vnd.ollama.image.template";

/// A parsed `ollama:` reference, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OllamaRef {
    /// `registry.ollama.ai`, `hf.co`, ...
    pub registry: String,
    /// `library` for official models, else the user or organisation.
    pub namespace: String,
    /// The model's name.
    pub name: String,
    /// The tag.
    pub tag: String,
    /// As typed (after `ollama:`), for messages.
    typed: String,
}

impl OllamaRef {
    /// Parses what follows `ollama:`: `NAME`, `NAMESPACE/NAME` or
    /// `REGISTRY/NAMESPACE/NAME`, each with an optional `:TAG`.
    pub fn parse(rest: &str) -> Result<Self, ModelRefError> {
        let bad = |why: &str| {
            ModelRefError::malformed(
                format!("{SCHEME}{rest}"),
                format!("{why} (expected ollama:NAME[:TAG], e.g. ollama:qwen2.5:0.5b)"),
            )
        };
        let (path, tag) = match rest.rsplit_once(':') {
            Some((path, tag)) if !tag.contains('/') => (path, Some(tag)),
            _ => (rest, None),
        };
        let tag = match tag {
            Some(t) if !is_name(t) => return Err(bad("the tag is empty or has odd characters")),
            Some(t) => t.to_string(),
            None => DEFAULT_TAG.to_string(),
        };
        let segments: Vec<&str> = path.split('/').collect();
        if segments.iter().any(|s| !is_name(s)) {
            return Err(bad("a name part is empty or has odd characters"));
        }
        let (registry, namespace, name) = match segments.as_slice() {
            [name] => (DEFAULT_REGISTRY, DEFAULT_NAMESPACE, *name),
            [namespace, name] => (DEFAULT_REGISTRY, *namespace, *name),
            [registry, namespace, name] => (*registry, *namespace, *name),
            _ => return Err(bad("too many `/`-separated parts")),
        };
        Ok(OllamaRef {
            registry: registry.into(),
            namespace: namespace.into(),
            name: name.into(),
            tag,
            typed: rest.into(),
        })
    }

    /// The manifest's path inside a store.
    pub fn manifest_in(&self, store: &Path) -> PathBuf {
        store
            .join("manifests")
            .join(&self.registry)
            .join(&self.namespace)
            .join(&self.name)
            .join(&self.tag)
    }

    /// What `ollama pull` takes for this model.
    fn pull_name(&self) -> String {
        let base = self
            .typed
            .rsplit_once(':')
            .map_or(self.typed.as_str(), |(p, t)| {
                if t.contains('/') {
                    self.typed.as_str()
                } else {
                    p
                }
            });
        format!("{base}:{}", self.tag)
    }
}

impl fmt::Display for OllamaRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.typed)
    }
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Deserialize)]
struct Layer {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    #[serde(default)]
    size: Option<u64>,
}

/// The blob file of a digest (`sha256:HEX` is stored as `sha256-HEX`).
fn blob_path(store: &Path, digest: &str) -> Option<PathBuf> {
    let (algo, hex) = digest.split_once(':')?;
    if algo != "sha256" || hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(store.join("blobs").join(format!("{algo}-{hex}")))
}

/// `dir/name`, or the entry of `dir` whose name matches `name` ignoring
/// case (Ollama treats model names case-insensitively).
fn child_ignoring_case(dir: &Path, name: &str) -> Option<PathBuf> {
    let exact = dir.join(name);
    if exact.exists() {
        return Some(exact);
    }
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().eq_ignore_ascii_case(name))
        .map(|e| e.path())
}

fn find_manifest(r: &OllamaRef, store: &Path) -> Option<PathBuf> {
    let mut at = store.join("manifests");
    for part in [&r.registry, &r.namespace, &r.name, &r.tag] {
        at = child_ignoring_case(&at, part)?;
    }
    at.is_file().then_some(at)
}

/// Finds the model blob; see the module docs.
pub(super) fn resolve(r: &OllamaRef, locations: &Locations) -> Result<Resolved, ModelRefError> {
    let stores: Vec<PathBuf> = locations
        .ollama_stores
        .iter()
        .filter(|s| s.is_dir())
        .cloned()
        .collect();
    if stores.is_empty() {
        return Err(ModelRefError::OllamaStoreNotFound {
            tried: locations.ollama_stores.clone(),
        });
    }
    let Some((store, manifest)) = stores
        .iter()
        .find_map(|s| find_manifest(r, s).map(|m| (s.clone(), m)))
    else {
        return Err(ModelRefError::OllamaNotPulled {
            reference: r.to_string(),
            pull: r.pull_name(),
            stores,
        });
    };
    let unusable = |detail: String| ModelRefError::OllamaManifest {
        reference: r.to_string(),
        manifest: manifest.clone(),
        detail,
    };
    let text = fs::read(&manifest).map_err(|e| ModelRefError::io("reading", &manifest, e))?;
    let parsed: Manifest =
        serde_json::from_slice(&text).map_err(|e| unusable(format!("not a manifest ({e})")))?;
    let model = parsed
        .layers
        .iter()
        .find(|l| l.media_type == MODEL_MEDIA_TYPE)
        .ok_or_else(|| unusable(format!("no layer of type {MODEL_MEDIA_TYPE}")))?;
    let blob = blob_path(&store, &model.digest).ok_or_else(|| {
        unusable(format!(
            "the model layer's digest {} is not sha256:HEX",
            model.digest
        ))
    })?;
    let len = fs::metadata(&blob)
        .map_err(|e| {
            unusable(format!(
                "its model blob {} is missing ({e})",
                blob.display()
            ))
        })?
        .len();
    if let Some(size) = model.size {
        if size != len {
            return Err(unusable(format!(
                "its model blob {} has {len} bytes, the manifest says {size} (a pull in progress?)",
                blob.display()
            )));
        }
    }
    // The template is small text; one that cannot be read is reported as
    // absent rather than failing a model that loads without it.
    let template = parsed
        .layers
        .iter()
        .find(|l| l.media_type == TEMPLATE_MEDIA_TYPE)
        .and_then(|l| blob_path(&store, &l.digest))
        .and_then(|p| fs::read_to_string(p).ok())
        .filter(|t| !t.trim().is_empty());
    Ok(Resolved {
        parts: vec![blob.clone()],
        path: blob,
        origin: Origin::Ollama { store, manifest },
        ollama_template: template,
    })
}

/// The llama.cpp built-in template an Ollama template (Go syntax) writes,
/// recognised by the control tokens it emits; `None` when it is none of
/// those. llama.cpp renders Jinja templates and its built-ins only, so an
/// Ollama template is used through the built-in it matches.
pub fn template_name(ollama_template: &str) -> Option<&'static str> {
    let has = |s: &str| ollama_template.contains(s);
    Some(if has("<|im_start|>") {
        if has("<|im_sep|>") {
            "phi4"
        } else {
            "chatml"
        }
    } else if has("<|start_header_id|>") {
        "llama3"
    } else if has("<start_of_turn>") {
        "gemma"
    } else if has("<<SYS>>") {
        "llama2-sys"
    } else if has("[SYSTEM_PROMPT]") {
        "mistral-v7"
    } else if has("[INST]") {
        "mistral-v3"
    } else if has("<|user|>") && has("<|end|>") {
        "phi3"
    } else if has("<|user|>") && has("</s>") {
        "zephyr"
    } else if has("<｜User｜>") {
        "deepseek3"
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> OllamaRef {
        OllamaRef::parse(s).unwrap()
    }

    #[test]
    fn names_fill_in_registry_namespace_and_tag() {
        let r = parse("llama3.2");
        assert_eq!(
            (
                r.registry.as_str(),
                r.namespace.as_str(),
                r.name.as_str(),
                r.tag.as_str()
            ),
            ("registry.ollama.ai", "library", "llama3.2", "latest")
        );
        let r = parse("qwen2.5:0.5b");
        assert_eq!((r.name.as_str(), r.tag.as_str()), ("qwen2.5", "0.5b"));
        let r = parse("user/model:tag");
        assert_eq!(
            (r.namespace.as_str(), r.name.as_str(), r.tag.as_str()),
            ("user", "model", "tag")
        );
        let r = parse("hf.co/org/repo:Q4_K_M");
        assert_eq!(
            (
                r.registry.as_str(),
                r.namespace.as_str(),
                r.name.as_str(),
                r.tag.as_str()
            ),
            ("hf.co", "org", "repo", "Q4_K_M")
        );
        assert_eq!(
            r.manifest_in(Path::new("/s")),
            Path::new("/s/manifests/hf.co/org/repo/Q4_K_M")
        );
        assert_eq!(r.to_string(), "ollama:hf.co/org/repo:Q4_K_M");
        assert_eq!(parse("llama3.2").pull_name(), "llama3.2:latest");
        assert_eq!(
            parse("hf.co/org/repo:Q8_0").pull_name(),
            "hf.co/org/repo:Q8_0"
        );
    }

    #[test]
    fn digests_map_to_blob_files() {
        let hex = "a".repeat(64);
        assert_eq!(
            blob_path(Path::new("/s"), &format!("sha256:{hex}")),
            Some(PathBuf::from(format!("/s/blobs/sha256-{hex}")))
        );
        assert_eq!(blob_path(Path::new("/s"), "sha256:../../etc/passwd"), None);
        assert_eq!(blob_path(Path::new("/s"), "md5:abc"), None);
    }

    #[test]
    fn ollama_templates_map_to_llama_cpp_built_ins() {
        let qwen = "{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}";
        assert_eq!(template_name(qwen), Some("chatml"));
        let llama3 = "<|start_header_id|>user<|end_header_id|>\n\n{{ .Prompt }}<|eot_id|>";
        assert_eq!(template_name(llama3), Some("llama3"));
        assert_eq!(
            template_name("<start_of_turn>user\n{{ .Prompt }}"),
            Some("gemma")
        );
        assert_eq!(
            template_name("[INST] {{ .Prompt }} [/INST]"),
            Some("mistral-v3")
        );
        assert_eq!(template_name("{{ .Prompt }}"), None);
    }
}
