//! Downloading a Hugging Face reference into the hub cache, the way
//! `huggingface_hub` lays it out, so `huggingface-cli`, llama.cpp and the
//! next `-m hf:...` find it.
//!
//! The requests, in order (`{ep}` is `HF_ENDPOINT`):
//! 1. `GET {ep}/api/models/{repo}`: the commit `main` points at (`sha`)
//!    and whether the repository is gated; a missing repository is found
//!    here;
//! 2. `GET {ep}/api/models/{repo}/tree/{commit}?recursive=true` (the Hub's
//!    tree API, pages followed through `Link: rel="next"`): every file
//!    with its size and, for LFS files, its SHA-256 (`lfs.oid`). Pinning
//!    the listing to the commit of step 1 keeps the two consistent;
//! 3. `GET {ep}/{repo}/resolve/{commit}/{file}` per file, following
//!    redirects (the Hub sends LFS files to a CDN on another host), with
//!    `Range: bytes=N-` when `blobs/<hash>.incomplete` already holds N
//!    bytes. `If-Range` is not sent: blobs are named by their hash, so the
//!    bytes cannot change under a name, and the hash is checked at the end
//!    anyway.
//!
//! The token goes in `Authorization` only to the endpoint's own origin:
//! redirects are followed here, not by reqwest, and a redirect to another
//! host (the CDN, whose URL is pre-signed) goes without it. Nothing here
//! prints, logs or formats the token.
//!
//! What lands where: the bytes stream into `blobs/<hash>.incomplete`,
//! hashed as they arrive (no second read); a verified file is renamed to
//! `blobs/<hash>`, then `snapshots/<commit>/<file>` is (re)made as a
//! relative symlink to it and `refs/main` is written (each through a
//! temporary name and a rename). Cancelled or cut off, the `.incomplete`
//! file stays for the next try to resume; a hash mismatch removes it.
//! Two processes downloading the same file at once are not coordinated
//! (no lock file, unlike `huggingface_hub`).

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, LOCATION, RANGE};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::hf::{choose, CacheRepo, HfRef};
use super::{is_name, ModelRefError, Origin, Progress, ResolveOptions, Resolved};

/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

/// Runs the download on a thread of its own with its own runtime, so it
/// works from synchronous code and from inside another runtime alike.
pub(super) fn download(r: &HfRef, options: &ResolveOptions) -> Result<Resolved, ModelRefError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| {
                        ModelRefError::io("starting the download's runtime", Path::new("."), e)
                    })?;
                rt.block_on(run(r, options))
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

#[derive(Deserialize)]
struct RepoInfo {
    sha: Option<String>,
    #[serde(default)]
    gated: serde_json::Value,
}

#[derive(Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    oid: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    oid: String,
    size: u64,
}

struct Hub<'a> {
    client: reqwest::Client,
    endpoint: Url,
    /// `Bearer <token>`, marked sensitive (never printed by `Debug`).
    auth: Option<HeaderValue>,
    repo: &'a str,
}

async fn run(r: &HfRef, options: &ResolveOptions) -> Result<Resolved, ModelRefError> {
    let hub = Hub::new(options, &r.repo)?;
    let info_url = hub.api(&[])?;
    let info: RepoInfo = hub.json(info_url.clone()).await?;
    let gated = !matches!(
        info.gated,
        serde_json::Value::Null | serde_json::Value::Bool(false)
    );
    if gated && hub.auth.is_none() {
        return Err(ModelRefError::Gated {
            repo: r.repo.clone(),
            token_set: false,
        });
    }
    let commit = info
        .sha
        .filter(|s| is_name(s))
        .ok_or_else(|| ModelRefError::Http {
            url: info_url.to_string(),
            detail: "the answer names no commit (`sha`)".into(),
        })?;
    let tree = hub.tree(&commit).await?;
    let files: Vec<String> = tree
        .iter()
        .filter(|e| e.kind == "file")
        .map(|e| e.path.clone())
        .collect();
    let choice = choose(&r.repo, &files, &r.pick)?;
    let cache = CacheRepo::new(&options.locations.hf_cache, r);
    let snapshot = cache.snapshot(&commit);
    let mut transferred = 0;
    let mut parts = Vec::new();
    for (i, file) in choice.files.iter().enumerate() {
        let entry = tree
            .iter()
            .find(|e| &e.path == file)
            .expect("choose picks among the tree's files");
        let (hash, size, sha256) = match &entry.lfs {
            Some(lfs) => (lfs.oid.clone(), lfs.size, Some(lfs.oid.as_str())),
            None => (entry.oid.clone(), entry.size, None),
        };
        if !is_name(&hash) {
            return Err(ModelRefError::Http {
                url: hub.api(&["tree", &commit])?.to_string(),
                detail: format!("{file} has no usable object id"),
            });
        }
        let blob = cache.blob(&hash);
        let present = fs::metadata(&blob).is_ok_and(|m| m.len() == size);
        if !present {
            let url = hub.resolve_url(&commit, file)?;
            let part = Part {
                file,
                index: i + 1,
                count: choice.files.len(),
                size,
                sha256,
            };
            transferred += hub.fetch_blob(&url, &blob, &part, options).await?;
        }
        let link = snapshot.join(file);
        link_blob(&link, &blob, file)?;
        parts.push(link);
    }
    write_atomically(&cache.dir.join("refs/main"), commit.as_bytes())?;
    Ok(Resolved {
        path: parts[0].clone(),
        parts,
        origin: Origin::Downloaded {
            commit,
            bytes: transferred,
        },
        ollama_template: None,
    })
}

struct Part<'a> {
    file: &'a str,
    index: usize,
    count: usize,
    size: u64,
    sha256: Option<&'a str>,
}

impl<'a> Hub<'a> {
    fn new(options: &ResolveOptions, repo: &'a str) -> Result<Self, ModelRefError> {
        let endpoint = Url::parse(&options.hub.endpoint).map_err(|e| ModelRefError::Http {
            url: options.hub.endpoint.clone(),
            detail: format!("HF_ENDPOINT is not a URL ({e})"),
        })?;
        let client = reqwest::Client::builder()
            .user_agent(concat!("edgecloud/", env!("CARGO_PKG_VERSION")))
            // Followed by hand, to keep the token on the endpoint's origin.
            .redirect(reqwest::redirect::Policy::none())
            .use_rustls_tls()
            .connect_timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| ModelRefError::Http {
                url: endpoint.to_string(),
                detail: format!("cannot build the HTTP client: {e}"),
            })?;
        let auth = match &options.hub.token {
            Some(token) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {}", token.expose_secret()))
                    .map_err(|_| ModelRefError::Http {
                        url: endpoint.to_string(),
                        detail: "HF_TOKEN holds characters an HTTP header cannot carry".into(),
                    })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        Ok(Hub {
            client,
            endpoint,
            auth,
            repo,
        })
    }

    /// `{ep}/{segments...}`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> Result<Url, ModelRefError> {
        let mut url = self.endpoint.clone();
        url.path_segments_mut()
            .map_err(|()| ModelRefError::Http {
                url: self.endpoint.to_string(),
                detail: "HF_ENDPOINT cannot take a path".into(),
            })?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    fn repo_segments(&self) -> impl Iterator<Item = &str> {
        self.repo.split('/')
    }

    /// `{ep}/api/models/{repo}/{more...}`.
    fn api(&self, more: &[&str]) -> Result<Url, ModelRefError> {
        let segments: Vec<&str> = ["api", "models"]
            .into_iter()
            .chain(self.repo_segments())
            .chain(more.iter().copied())
            .collect();
        self.url(&segments)
    }

    fn resolve_url(&self, commit: &str, file: &str) -> Result<Url, ModelRefError> {
        let segments: Vec<&str> = self
            .repo_segments()
            .chain(["resolve", commit])
            .chain(file.split('/'))
            .collect();
        self.url(&segments)
    }

    fn same_origin(&self, url: &Url) -> bool {
        url.origin() == self.endpoint.origin()
    }

    /// GET, following redirects; the token only to the endpoint's origin.
    async fn get(&self, url: &Url, from: u64) -> Result<reqwest::Response, ModelRefError> {
        let mut url = url.clone();
        for _ in 0..=MAX_REDIRECTS {
            let mut req = self.client.get(url.clone());
            if let (Some(auth), true) = (&self.auth, self.same_origin(&url)) {
                req = req.header(AUTHORIZATION, auth.clone());
            }
            if from > 0 {
                req = req.header(RANGE, format!("bytes={from}-"));
            }
            let resp = req.send().await.map_err(|e| ModelRefError::Http {
                url: strip_query(&url),
                detail: format!("cannot reach it ({})", crate::error_chain(&e)),
            })?;
            if !resp.status().is_redirection() {
                return Ok(resp);
            }
            let next = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| url.join(l).ok())
                .ok_or_else(|| ModelRefError::Http {
                    url: strip_query(&url),
                    detail: format!("HTTP {} without a usable Location", resp.status()),
                })?;
            url = next;
        }
        Err(ModelRefError::Http {
            url: strip_query(&url),
            detail: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }

    /// The error for a refusal of `url` (`file`: the resolve of that file).
    fn refusal(
        &self,
        url: &Url,
        status: StatusCode,
        headers: &HeaderMap,
        file: Option<&str>,
    ) -> ModelRefError {
        let code = headers
            .get("x-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let repo = self.repo.to_string();
        let token_set = self.auth.is_some();
        let not_found = || ModelRefError::RepoNotFound {
            repo: repo.clone(),
            endpoint: self.endpoint.as_str().trim_end_matches('/').to_string(),
            hint: if token_set {
                ""
            } else {
                " (if it is private, set HF_TOKEN)"
            },
        };
        match (code, status.as_u16(), file) {
            ("GatedRepo", _, _) => ModelRefError::Gated { repo, token_set },
            ("RepoNotFound", _, _) => not_found(),
            ("EntryNotFound", _, Some(f)) | (_, 404, Some(f)) => ModelRefError::FileNotFound {
                repo,
                file: f.to_string(),
            },
            (_, 404, None) => not_found(),
            // A file of the repository refused: the repository exists, so
            // the refusal is its gate.
            (_, 401 | 403, Some(_)) => ModelRefError::Gated { repo, token_set },
            (_, 401, None) if !token_set => not_found(),
            (_, 401 | 403, None) => ModelRefError::TokenRefused {
                endpoint: self.endpoint.as_str().trim_end_matches('/').to_string(),
                status: status.as_u16(),
            },
            _ => ModelRefError::Http {
                url: strip_query(url),
                detail: format!("HTTP {status}"),
            },
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(&self, url: Url) -> Result<T, ModelRefError> {
        Ok(self.json_page(url).await?.0)
    }

    /// One JSON answer and the URL of the next page, if any.
    async fn json_page<T: serde::de::DeserializeOwned>(
        &self,
        url: Url,
    ) -> Result<(T, Option<Url>), ModelRefError> {
        let resp = self.get(&url, 0).await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(self.refusal(&url, status, resp.headers(), None));
        }
        let next = next_link(resp.headers()).and_then(|l| url.join(&l).ok());
        let body = resp.bytes().await.map_err(|e| ModelRefError::Http {
            url: strip_query(&url),
            detail: format!("the answer broke off ({})", crate::error_chain(&e)),
        })?;
        let value = serde_json::from_slice(&body).map_err(|e| ModelRefError::Http {
            url: strip_query(&url),
            detail: format!("not the JSON the Hub sends ({e})"),
        })?;
        Ok((value, next))
    }

    async fn tree(&self, commit: &str) -> Result<Vec<TreeEntry>, ModelRefError> {
        let mut url = self.api(&["tree", commit])?;
        url.set_query(Some("recursive=true"));
        let mut all = Vec::new();
        let mut next = Some(url);
        let mut pages = 0;
        while let Some(url) = next.take() {
            let (page, more): (Vec<TreeEntry>, _) = self.json_page(url).await?;
            all.extend(page);
            pages += 1;
            // A bound, against a server that links a page to itself.
            if pages < 1000 {
                next = more;
            }
        }
        Ok(all)
    }

    /// Downloads one file to `blob` (see the module docs); returns the
    /// bytes transferred.
    async fn fetch_blob(
        &self,
        url: &Url,
        blob: &Path,
        part: &Part<'_>,
        options: &ResolveOptions,
    ) -> Result<u64, ModelRefError> {
        let dir = blob.parent().expect("a blob is inside blobs/");
        fs::create_dir_all(dir).map_err(|e| ModelRefError::io("creating", dir, e))?;
        let partial = PathBuf::from(format!("{}.incomplete", blob.display()));
        let mut have = fs::metadata(&partial).map_or(0, |m| m.len());
        if have > part.size {
            have = 0;
        }
        let mut hasher = Sha256::new();
        if have > 0 && part.sha256.is_some() {
            hash_prefix(&partial, have, &mut hasher)?;
        }
        let resumed_from = have;
        let report = |done: u64| {
            if let Some(progress) = &options.progress {
                progress(&Progress {
                    file: part.file,
                    part: part.index,
                    parts: part.count,
                    done,
                    total: part.size,
                    resumed_from,
                });
            }
        };
        let mut transferred = 0;
        if have < part.size {
            let mut resp = self.get(url, have).await?;
            let status = resp.status();
            match status {
                StatusCode::PARTIAL_CONTENT
                    if have > 0 && range_start(resp.headers()) == Some(have) => {}
                // The server sent the whole file (it ignored the range).
                StatusCode::OK => {
                    have = 0;
                    hasher = Sha256::new();
                }
                s if s.is_success() => {
                    return Err(ModelRefError::Http {
                        url: strip_query(url),
                        detail: format!("HTTP {s} to a request from byte {have}"),
                    })
                }
                s => return Err(self.refusal(url, s, resp.headers(), Some(part.file))),
            }
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .append(have > 0)
                .truncate(have == 0)
                .open(&partial)
                .map_err(|e| ModelRefError::io("creating", &partial, e))?;
            let mut out = BufWriter::with_capacity(1 << 20, file);
            report(have);
            loop {
                let chunk = tokio::select! {
                    biased;
                    () = options.cancel.cancelled() => {
                        let _ = out.flush();
                        return Err(ModelRefError::Cancelled);
                    }
                    chunk = resp.chunk() => chunk,
                };
                let chunk = match chunk {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(e) => {
                        let _ = out.flush();
                        return Err(ModelRefError::Http {
                            url: strip_query(url),
                            detail: format!(
                                "the download broke off at {have} of {} bytes ({}); the next try resumes it",
                                part.size,
                                crate::error_chain(&e)
                            ),
                        });
                    }
                };
                have += chunk.len() as u64;
                transferred += chunk.len() as u64;
                if have > part.size {
                    drop(out);
                    let _ = fs::remove_file(&partial);
                    return Err(ModelRefError::Http {
                        url: strip_query(url),
                        detail: format!("more bytes than the {} the Hub listed", part.size),
                    });
                }
                if part.sha256.is_some() {
                    hasher.update(&chunk);
                }
                out.write_all(&chunk)
                    .map_err(|e| ModelRefError::io("writing", &partial, e))?;
                report(have);
            }
            let file = out
                .into_inner()
                .map_err(|e| ModelRefError::io("writing", &partial, e.into_error()))?;
            file.sync_all()
                .map_err(|e| ModelRefError::io("writing", &partial, e))?;
            if have < part.size {
                return Err(ModelRefError::Http {
                    url: strip_query(url),
                    detail: format!(
                        "the download ended at {have} of {} bytes; the next try resumes it",
                        part.size
                    ),
                });
            }
        } else {
            report(have);
        }
        if let Some(expected) = part.sha256 {
            let found = hex(&hasher.finalize());
            if !found.eq_ignore_ascii_case(expected) {
                let _ = fs::remove_file(&partial);
                return Err(ModelRefError::HashMismatch {
                    file: part.file.to_string(),
                    expected: expected.to_string(),
                    found,
                });
            }
        }
        fs::rename(&partial, blob).map_err(|e| ModelRefError::io("moving into place", blob, e))?;
        Ok(transferred)
    }
}

/// Feeds the first `len` bytes of `path` to `hasher` (a resumed download's
/// bytes on disk).
fn hash_prefix(path: &Path, len: u64, hasher: &mut Sha256) -> Result<(), ModelRefError> {
    let file = File::open(path).map_err(|e| ModelRefError::io("reading", path, e))?;
    let mut limited = file.take(len);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = limited
            .read(&mut buf)
            .map_err(|e| ModelRefError::io("reading", path, e))?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buf[..n]);
    }
}

/// The first byte of a `Content-Range: bytes START-END/TOTAL`.
fn range_start(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get(reqwest::header::CONTENT_RANGE)?.to_str().ok()?;
    let (start, _) = v.strip_prefix("bytes ")?.split_once('-')?;
    start.trim().parse().ok()
}

/// The `rel="next"` target of a `Link` header.
fn next_link(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    v.split(',').find_map(|item| {
        let (target, params) = item.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim().eq_ignore_ascii_case("rel=\"next\""))
            .then(|| {
                target
                    .trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

/// A URL for messages: no query (a pre-signed CDN URL carries credentials
/// there).
fn strip_query(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `snapshots/<commit>/<file>` → `../../blobs/<hash>` (one more `..` per
/// folder in `file`), made under a temporary name and renamed over.
fn link_blob(link: &Path, blob: &Path, file: &str) -> Result<(), ModelRefError> {
    let dir = link.parent().expect("a snapshot file is inside a folder");
    fs::create_dir_all(dir).map_err(|e| ModelRefError::io("creating", dir, e))?;
    let tmp = dir.join(format!(
        ".{}.edgecloud-{}",
        link.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    #[cfg(unix)]
    {
        let ups = 2 + file.matches('/').count();
        let mut target = PathBuf::new();
        for _ in 0..ups {
            target.push("..");
        }
        target.push("blobs");
        target.push(blob.file_name().expect("a blob has a name"));
        std::os::unix::fs::symlink(&target, &tmp)
            .map_err(|e| ModelRefError::io("linking", &tmp, e))?;
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        fs::copy(blob, &tmp).map_err(|e| ModelRefError::io("copying", &tmp, e))?;
    }
    fs::rename(&tmp, link).map_err(|e| ModelRefError::io("linking", link, e))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ModelRefError> {
    let dir = path.parent().expect("refs/main is inside a folder");
    fs::create_dir_all(dir).map_err(|e| ModelRefError::io("creating", dir, e))?;
    let tmp = dir.join(format!(".main.edgecloud-{}", std::process::id()));
    fs::write(&tmp, bytes).map_err(|e| ModelRefError::io("writing", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| ModelRefError::io("writing", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers_and_content_ranges_parse() {
        let mut h = HeaderMap::new();
        h.insert(
            reqwest::header::LINK,
            HeaderValue::from_static("<https://h/api?cursor=x>; rel=\"next\""),
        );
        assert_eq!(next_link(&h).as_deref(), Some("https://h/api?cursor=x"));
        h.insert(
            reqwest::header::CONTENT_RANGE,
            HeaderValue::from_static("bytes 100-199/200"),
        );
        assert_eq!(range_start(&h), Some(100));
        assert_eq!(next_link(&HeaderMap::new()), None);
    }

    #[test]
    fn messages_never_show_a_query() {
        let u = Url::parse("https://cdn.example/x?X-Amz-Signature=secret").unwrap();
        assert_eq!(strip_query(&u), "https://cdn.example/x");
    }
}
