//! `hf:ORG/REPO[:QUANT]` and `hf:ORG/REPO/FILE.gguf`: parsing, choosing
//! the file among a repository's files as llama-server does, and the two
//! caches a file may already be in: the Hugging Face hub cache
//! (`models--ORG--REPO/refs/main` names a commit,
//! `snapshots/<commit>/<file>` links to `blobs/<hash>`) and llama.cpp's
//! `-hf` cache (`LLAMA_CACHE/ORG_REPO_FILE`). Reading only; the download
//! (`hub`) writes the hub cache through [`CacheRepo`].

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use super::{is_name, Locations, ModelRefError, Origin, Resolved};

/// The prefix of the form.
pub const SCHEME: &str = "hf:";
/// The quantisation picked when none is named (llama-server's default).
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// Which file of the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// By quantisation (`None`: the default, [`DEFAULT_QUANT`]).
    Quant(Option<String>),
    /// A file by its path in the repository.
    File(String),
}

/// A parsed `hf:` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfRef {
    /// `ORG/REPO`.
    pub repo: String,
    /// Which file.
    pub pick: Pick,
}

impl HfRef {
    /// Parses what follows `hf:`.
    pub fn parse(rest: &str) -> Result<Self, ModelRefError> {
        let bad = |why: &str| {
            ModelRefError::malformed(
                format!("{SCHEME}{rest}"),
                format!(
                    "{why} (expected hf:ORG/REPO[:QUANT] or hf:ORG/REPO/FILE.gguf, \
                     e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)"
                ),
            )
        };
        let (path, quant) = match rest.split_once(':') {
            Some((path, quant)) => (path, Some(quant)),
            None => (rest, None),
        };
        let segments: Vec<&str> = path.split('/').collect();
        if segments.len() < 2 || segments.iter().any(|s| !is_name(s)) {
            return Err(bad(
                "ORG and REPO must both be there, with letters, digits, `-`, `_` or `.`",
            ));
        }
        let repo = format!("{}/{}", segments[0], segments[1]);
        let pick = if segments.len() > 2 {
            if quant.is_some() {
                return Err(bad("name a file or a quantisation, not both"));
            }
            let file = segments[2..].join("/");
            if !file.to_ascii_lowercase().ends_with(".gguf") {
                return Err(bad("the file must be a .gguf file"));
            }
            Pick::File(file)
        } else {
            match quant {
                None => Pick::Quant(None),
                Some(q) if is_name(q) => Pick::Quant(Some(q.to_string())),
                Some(_) => return Err(bad("the quantisation is empty or has odd characters")),
            }
        };
        Ok(HfRef { repo, pick })
    }

    /// `models--ORG--REPO`, the repository's folder in the hub cache.
    pub fn cache_folder(&self) -> String {
        format!("models--{}", self.repo.replace('/', "--"))
    }
}

impl fmt::Display for HfRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pick {
            Pick::Quant(None) => write!(f, "{SCHEME}{}", self.repo),
            Pick::Quant(Some(q)) => write!(f, "{SCHEME}{}:{q}", self.repo),
            Pick::File(file) => write!(f, "{SCHEME}{}/{file}", self.repo),
        }
    }
}

/// `(index, count)` of a split GGUF part (`name-00001-of-00003.gguf`).
pub fn split_of(path: &str) -> Option<(u32, u32)> {
    let stem = strip_gguf(path)?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (_, index) = rest.rsplit_once('-')?;
    let all_digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(index) || !all_digits(count) {
        return None;
    }
    let (index, count) = (index.parse().ok()?, count.parse().ok()?);
    (index >= 1 && index <= count).then_some((index, count))
}

fn strip_gguf(path: &str) -> Option<&str> {
    let n = path.len().checked_sub(5)?;
    path[n..].eq_ignore_ascii_case(".gguf").then(|| &path[..n])
}

/// The file's name without `.gguf` and a split suffix: what the
/// quantisation is matched in.
fn stem_of(path: &str) -> &str {
    let stem = strip_gguf(path).unwrap_or(path);
    if split_of(path).is_some() {
        // `-00001-of-00003` is 15 bytes.
        &stem[..stem.len() - 15]
    } else {
        stem
    }
}

/// Whether the quantisation `quant` is named in `path`, ignoring case, as a
/// whole token: `Q4_K` does not match `Q4_K_M`, `Q8_0` matches
/// `model.Q8_0.gguf` and `Q8_0/model-00001-of-00002.gguf`.
pub fn names_quant(path: &str, quant: &str) -> bool {
    let hay = stem_of(path).to_ascii_lowercase();
    let needle = quant.to_ascii_lowercase();
    let sep = |c: Option<char>| c.is_none_or(|c| matches!(c, '-' | '.' | '_' | '/'));
    hay.match_indices(&needle).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + needle.len()..].chars().next();
        // `_` may not end the match: `Q4_K` inside `Q4_K_M`.
        sep(before) && after.is_none_or(|c| matches!(c, '-' | '.' | '/'))
    })
}

/// The quantisation a file name carries: its stem's last `-`/`.`
/// separated token (`Qwen2.5-0.5B-Instruct-Q4_K_M.gguf` → `Q4_K_M`).
pub fn quant_label(path: &str) -> String {
    let stem = stem_of(path);
    let name = stem.rsplit('/').next().unwrap_or(stem);
    name.rsplit(['-', '.']).next().unwrap_or(name).to_string()
}

/// The file(s) a reference picks: the first is what llama.cpp loads; the
/// rest are the other parts of a split model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Every file, in part order (one unless split).
    pub files: Vec<String>,
}

/// Picks among a repository's file paths as llama-server does: GGUF files
/// only, vision projectors (`mmproj`) left out; `QUANT` matched
/// case-insensitively as a token of the name; without one, Q4_K_M, else
/// the first GGUF file by name. A split model is picked by its first part
/// and comes with all its parts.
pub fn choose(repo: &str, files: &[String], pick: &Pick) -> Result<Choice, ModelRefError> {
    let mut ggufs: Vec<&String> = files.iter().filter(|f| strip_gguf(f).is_some()).collect();
    ggufs.sort();
    let first = match pick {
        Pick::File(file) => ggufs
            .iter()
            .find(|f| f.as_str() == file)
            .copied()
            .ok_or_else(|| ModelRefError::FileNotFound {
                repo: repo.into(),
                file: file.clone(),
            })?,
        Pick::Quant(quant) => {
            let models: Vec<&String> = ggufs
                .iter()
                .filter(|f| !f.to_ascii_lowercase().contains("mmproj"))
                .filter(|f| split_of(f).is_none_or(|(i, _)| i == 1))
                .copied()
                .collect();
            if models.is_empty() {
                return Err(ModelRefError::NoGguf { repo: repo.into() });
            }
            let wanted = quant.as_deref().unwrap_or(DEFAULT_QUANT);
            match models.iter().find(|f| names_quant(f, wanted)) {
                Some(f) => *f,
                None if quant.is_none() => models[0],
                None => {
                    let mut available: Vec<String> =
                        models.iter().map(|f| quant_label(f)).collect();
                    available.sort();
                    available.dedup();
                    return Err(ModelRefError::QuantNotFound {
                        repo: repo.into(),
                        quant: wanted.into(),
                        available,
                    });
                }
            }
        }
    };
    let files = match split_of(first) {
        None => vec![first.clone()],
        Some((_, count)) => {
            let prefix = &first[..first.len() - "00001-of-00003.gguf".len()];
            (1..=count)
                .map(|i| {
                    let want = format!("{prefix}{i:05}-of-{count:05}");
                    ggufs
                        .iter()
                        .find(|f| strip_gguf(f).is_some_and(|s| s == want))
                        .map(|f| f.to_string())
                        .ok_or_else(|| ModelRefError::FileNotFound {
                            repo: repo.into(),
                            file: format!("{want}.gguf"),
                        })
                })
                .collect::<Result<_, _>>()?
        }
    };
    Ok(Choice { files })
}

/// One repository's folder in the hub cache.
#[derive(Debug, Clone)]
pub struct CacheRepo {
    /// `HUB_CACHE/models--ORG--REPO`.
    pub dir: PathBuf,
}

impl CacheRepo {
    /// The repository's folder under `hub_cache`.
    pub fn new(hub_cache: &Path, r: &HfRef) -> Self {
        CacheRepo {
            dir: hub_cache.join(r.cache_folder()),
        }
    }

    /// The commit `refs/main` names.
    pub fn main_commit(&self) -> Option<String> {
        let text = fs::read_to_string(self.dir.join("refs/main")).ok()?;
        let commit = text.trim();
        is_name(commit).then(|| commit.to_string())
    }

    /// The snapshot folder of a commit.
    pub fn snapshot(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    /// A blob's path.
    pub fn blob(&self, hash: &str) -> PathBuf {
        self.dir.join("blobs").join(hash)
    }
}

/// Every file under `dir` (symlinks followed; dangling ones left out), as
/// `/`-separated paths relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((at, prefix)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&at) else {
            continue;
        };
        for e in entries.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let path = e.path();
            if path.is_dir() {
                stack.push((path, rel));
            } else if path.is_file() {
                out.push(rel);
            }
        }
    }
    out
}

/// The reference's file(s) in the hub cache (the snapshot `refs/main`
/// names), else in llama.cpp's cache; `None` when not all parts are there.
pub(super) fn find_cached(
    r: &HfRef,
    locations: &Locations,
) -> Result<Option<Resolved>, ModelRefError> {
    let repo = CacheRepo::new(&locations.hf_cache, r);
    if let Some(commit) = repo.main_commit() {
        let snapshot = repo.snapshot(&commit);
        let files = files_under(&snapshot);
        if let Some(choice) = cached_choice(r, &files)? {
            let parts: Vec<PathBuf> = choice.files.iter().map(|f| snapshot.join(f)).collect();
            return Ok(Some(Resolved {
                path: parts[0].clone(),
                parts,
                origin: Origin::HfCache { commit },
                ollama_template: None,
            }));
        }
    }
    if let Some(dir) = &locations.llama_cache {
        // llama.cpp saves `ORG/REPO` file `F` as `ORG_REPO_F` (`/` → `_`).
        let prefix = format!("{}_", r.repo.replace('/', "_"));
        let names: Vec<String> = fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().is_file())
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .filter_map(|n| n.strip_prefix(&prefix).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let wanted = match &r.pick {
            Pick::File(f) => HfRef {
                repo: r.repo.clone(),
                pick: Pick::File(f.replace('/', "_")),
            },
            _ => r.clone(),
        };
        if let Some(choice) = cached_choice(&wanted, &names)? {
            let parts: Vec<PathBuf> = choice
                .files
                .iter()
                .map(|f| dir.join(format!("{prefix}{f}")))
                .collect();
            return Ok(Some(Resolved {
                path: parts[0].clone(),
                parts,
                origin: Origin::LlamaCache,
                ollama_template: None,
            }));
        }
    }
    Ok(None)
}

/// [`choose`] over what a cache holds: a cache that lacks the file (or a
/// part, or the quantisation, or any GGUF) is a miss, not an error; the
/// Hub has the last word.
fn cached_choice(r: &HfRef, files: &[String]) -> Result<Option<Choice>, ModelRefError> {
    if files.is_empty() {
        return Ok(None);
    }
    match choose(&r.repo, files, &r.pick) {
        Ok(choice) => Ok(Some(choice)),
        Err(
            ModelRefError::FileNotFound { .. }
            | ModelRefError::QuantNotFound { .. }
            | ModelRefError::NoGguf { .. },
        ) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> HfRef {
        HfRef::parse(s).unwrap()
    }

    #[test]
    fn references_parse() {
        assert_eq!(
            parse("Qwen/Qwen2.5-0.5B-Instruct-GGUF"),
            HfRef {
                repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF".into(),
                pick: Pick::Quant(None)
            }
        );
        assert_eq!(parse("a/b:q8_0").pick, Pick::Quant(Some("q8_0".into())));
        assert_eq!(
            parse("a/b/sub/x.GGUF").pick,
            Pick::File("sub/x.GGUF".into())
        );
        assert_eq!(parse("a/b").cache_folder(), "models--a--b");
        assert!(HfRef::parse("a/b/x.gguf:Q8_0").is_err());
    }

    #[test]
    fn split_parts_are_recognised() {
        assert_eq!(split_of("m-Q4_K_M-00001-of-00003.gguf"), Some((1, 3)));
        assert_eq!(split_of("d/m-00003-of-00003.gguf"), Some((3, 3)));
        assert_eq!(split_of("m-00004-of-00003.gguf"), None);
        assert_eq!(split_of("m-1-of-3.gguf"), None);
        assert_eq!(split_of("m.gguf"), None);
    }

    #[test]
    fn quantisations_match_whole_tokens_ignoring_case() {
        assert!(names_quant("qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"));
        assert!(names_quant("Model.Q8_0.gguf", "q8_0"));
        assert!(!names_quant("model-Q4_K_M.gguf", "Q4_K"));
        assert!(!names_quant("model-IQ4_XS.gguf", "Q4_XS"));
        assert!(names_quant("Q8_0/model-Q8_0-00001-of-00002.gguf", "Q8_0"));
        assert!(names_quant("model-bf16.gguf", "BF16"));
        assert_eq!(quant_label("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf"), "Q4_K_M");
        assert_eq!(quant_label("SmolLM2.Q4_1.gguf"), "Q4_1");
        assert_eq!(quant_label("d/m-Q8_0-00001-of-00002.gguf"), "Q8_0");
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn choosing_is_like_llama_server() {
        let files = names(&[
            "README.md",
            "m-Q8_0.gguf",
            "m-q4_k_m.gguf",
            "mmproj-m-f16.gguf",
            "big/m-Q6_K-00002-of-00002.gguf",
            "big/m-Q6_K-00001-of-00002.gguf",
        ]);
        let pick = |q: Option<&str>| choose("o/r", &files, &Pick::Quant(q.map(Into::into)));
        assert_eq!(pick(None).unwrap().files, ["m-q4_k_m.gguf"]);
        assert_eq!(pick(Some("q8_0")).unwrap().files, ["m-Q8_0.gguf"]);
        assert_eq!(
            pick(Some("Q6_K")).unwrap().files,
            [
                "big/m-Q6_K-00001-of-00002.gguf",
                "big/m-Q6_K-00002-of-00002.gguf"
            ]
        );
        let err = pick(Some("Q2_K")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "o/r has no Q2_K GGUF file (it has: Q6_K, Q8_0, q4_k_m)"
        );
        assert_eq!(err.kind(), "quant_not_found");
        // No Q4_K_M: the first GGUF by name.
        let only = names(&["x-Q8_0.gguf", "x-F16.gguf"]);
        assert_eq!(
            choose("o/r", &only, &Pick::Quant(None)).unwrap().files,
            ["x-F16.gguf"]
        );
        assert_eq!(
            choose("o/r", &names(&["a.txt"]), &Pick::Quant(None))
                .unwrap_err()
                .kind(),
            "no_gguf"
        );
        assert_eq!(
            choose("o/r", &files, &Pick::File("m-Q8_0.gguf".into()))
                .unwrap()
                .files,
            ["m-Q8_0.gguf"]
        );
        assert_eq!(
            choose("o/r", &files, &Pick::File("nope.gguf".into()))
                .unwrap_err()
                .to_string(),
            "o/r has no file nope.gguf"
        );
        // A missing part is a missing file.
        let torn = names(&["m-Q6_K-00001-of-00002.gguf"]);
        assert_eq!(
            choose("o/r", &torn, &Pick::Quant(Some("Q6_K".into())))
                .unwrap_err()
                .kind(),
            "file_not_found"
        );
    }
}
