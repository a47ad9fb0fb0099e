//! A stand-in for the Hugging Face Hub, on loopback: NOT the Hub, a small
//! server that answers the requests `edgecloud`'s downloader makes the way
//! the Hub answers them (shapes taken from the Hub's public API):
//! - `GET /api/models/ORG/REPO`: `{"sha": COMMIT, "gated": false|"manual"}`,
//!   or 401 with `X-Error-Code: RepoNotFound` (what the Hub sends for a
//!   repository that does not exist);
//! - `GET /api/models/ORG/REPO/tree/COMMIT?recursive=true`: the tree API's
//!   entries (`type`, `path`, `oid`, `size`, `lfs.oid` = SHA-256), two per
//!   page with a `Link: <...>; rel="next"` header;
//! - `GET /ORG/REPO/resolve/COMMIT/FILE`: 302 to the second server (the
//!   CDN stand-in, another port) with a signed-looking query, `X-Repo-Commit`
//!   and `ETag`; 401 with `X-Error-Code: GatedRepo` for a gated repository
//!   without the right token; 404 `EntryNotFound` for a missing file;
//! - the CDN: the bytes, honouring `Range: bytes=N-` (206 and
//!   `Content-Range`), with an `ETag`; it can cut a download at half
//!   ([`StandInHub::cut_next_at_half`]) or serve wrong bytes.
//!
//! Every request is recorded on the server that got it, so tests can check
//! where the token went.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::http::{Conn, Recorded, TestServer};

/// A file of a stand-in repository.
#[derive(Clone)]
pub struct HubFile {
    pub path: String,
    pub bytes: Arc<Vec<u8>>,
    pub sha256: String,
}

impl HubFile {
    pub fn new(path: &str, bytes: Vec<u8>) -> Self {
        let sha256 = hex(&Sha256::digest(&bytes));
        HubFile {
            path: path.into(),
            bytes: Arc::new(bytes),
            sha256,
        }
    }
}

/// A stand-in repository.
#[derive(Clone)]
pub struct HubRepo {
    pub commit: String,
    pub gated: bool,
    pub files: Vec<HubFile>,
}

#[derive(Default)]
struct Behaviour {
    cut_at_half: AtomicBool,
    stall_at_half: AtomicBool,
    corrupt: AtomicBool,
    /// Told when a stalled download has sent its half.
    half_sent: tokio::sync::Notify,
}

/// The two servers and what they serve.
pub struct StandInHub {
    pub api: TestServer,
    pub cdn: TestServer,
    behaviour: Arc<Behaviour>,
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The token the stand-in accepts for gated repositories.
pub const TOKEN: &str = "hf_standin_secret_token_123";

impl StandInHub {
    pub async fn start(repos: BTreeMap<String, HubRepo>) -> Self {
        let repos = Arc::new(repos);
        let behaviour = Arc::new(Behaviour::default());
        let blobs: Arc<BTreeMap<String, Arc<Vec<u8>>>> = Arc::new(
            repos
                .values()
                .flat_map(|r| r.files.iter())
                .map(|f| (f.sha256.clone(), Arc::clone(&f.bytes)))
                .collect(),
        );
        let b = Arc::clone(&behaviour);
        let cdn =
            TestServer::start(move |conn| cdn_conn(conn, Arc::clone(&blobs), Arc::clone(&b))).await;
        let cdn_base = format!("http://{}", cdn.addr());
        let api =
            TestServer::start(move |conn| api_conn(conn, Arc::clone(&repos), cdn_base.clone()))
                .await;
        StandInHub {
            api,
            cdn,
            behaviour,
        }
    }

    /// `HF_ENDPOINT` for it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.api.addr())
    }

    /// The next download is cut after half its bytes (the connection
    /// closes with the rest unsent).
    pub fn cut_next_at_half(&self) {
        self.behaviour.cut_at_half.store(true, Ordering::SeqCst);
    }

    /// The next download stops sending after half its bytes and holds the
    /// connection open until the client closes it.
    pub fn stall_next_at_half(&self) {
        self.behaviour.stall_at_half.store(true, Ordering::SeqCst);
    }

    /// Returns once a stalled download has sent its half.
    pub async fn half_sent(&self) {
        self.behaviour.half_sent.notified().await;
    }

    /// Downloads get wrong bytes (right length) until turned off.
    pub fn corrupt(&self, on: bool) {
        self.behaviour.corrupt.store(on, Ordering::SeqCst);
    }

    pub fn cdn_requests(&self) -> Vec<Recorded> {
        self.cdn.requests()
    }

    pub fn api_requests(&self) -> Vec<Recorded> {
        self.api.requests()
    }
}

/// What the Hub answers for a repository that does not exist.
async fn not_found(conn: &mut Conn) -> std::io::Result<()> {
    conn.respond(
        401,
        &[
            ("content-type", "application/json"),
            ("x-error-code", "RepoNotFound"),
        ],
        br#"{"error":"Repository not found"}"#,
    )
    .await
}

fn split_query(path: &str) -> (&str, &str) {
    path.split_once('?').unwrap_or((path, ""))
}

async fn api_conn(mut conn: Conn, repos: Arc<BTreeMap<String, HubRepo>>, cdn: String) {
    while let Some(req) = conn.read_request().await {
        if answer_api(&mut conn, &req, &repos, &cdn).await.is_err() {
            return;
        }
    }
}

async fn answer_api(
    conn: &mut Conn,
    req: &Recorded,
    repos: &BTreeMap<String, HubRepo>,
    cdn: &str,
) -> std::io::Result<()> {
    let (path, query) = split_query(&req.path);
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let authorized = req.header("authorization") == Some(&format!("Bearer {TOKEN}"));
    match parts.as_slice() {
        ["api", "models", org, name, rest @ ..] => {
            let Some(repo) = repos.get(&format!("{org}/{name}")) else {
                return not_found(conn).await;
            };
            match rest {
                [] => {
                    let gated = if repo.gated {
                        json!("manual")
                    } else {
                        json!(false)
                    };
                    let body = json!({ "id": format!("{org}/{name}"), "sha": repo.commit, "gated": gated });
                    conn.json(200, &body.to_string()).await
                }
                ["tree", commit] if *commit == repo.commit => {
                    let from: usize = query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("cursor="))
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0);
                    let entries: Vec<_> = repo
                        .files
                        .iter()
                        .skip(from)
                        .take(2)
                        .map(|f| {
                            json!({
                                "type": "file",
                                "oid": "0123456789abcdef0123456789abcdef01234567",
                                "size": f.bytes.len(),
                                "path": f.path,
                                "lfs": { "oid": f.sha256, "size": f.bytes.len(), "pointerSize": 134 },
                            })
                        })
                        .chain((from == 0).then(|| json!({"type": "directory", "oid": "x", "size": 0, "path": "sub"})))
                        .collect();
                    let body = serde_json::Value::Array(entries).to_string();
                    if from + 2 < repo.files.len() {
                        let link =
                            format!("<{path}?recursive=true&cursor={}>; rel=\"next\"", from + 2);
                        conn.respond(
                            200,
                            &[("content-type", "application/json"), ("link", &link)],
                            body.as_bytes(),
                        )
                        .await
                    } else {
                        conn.json(200, &body).await
                    }
                }
                _ => {
                    conn.respond(404, &[("x-error-code", "RevisionNotFound")], b"{}")
                        .await
                }
            }
        }
        [org, name, "resolve", commit, file @ ..] => {
            let Some(repo) = repos.get(&format!("{org}/{name}")) else {
                return not_found(conn).await;
            };
            if repo.gated && !authorized {
                return conn
                    .respond(
                        401,
                        &[("x-error-code", "GatedRepo")],
                        b"Access to model is restricted.",
                    )
                    .await;
            }
            let file = file.join("/");
            let Some(f) = repo
                .files
                .iter()
                .find(|f| f.path == file)
                .filter(|_| *commit == repo.commit)
            else {
                return conn
                    .respond(404, &[("x-error-code", "EntryNotFound")], b"{}")
                    .await;
            };
            let location = format!(
                "{cdn}/blobs/{}?X-Amz-Signature=signed-{}",
                f.sha256,
                f.sha256.len()
            );
            let etag = format!("\"{}\"", f.sha256);
            conn.respond(
                302,
                &[
                    ("location", &location),
                    ("x-repo-commit", &repo.commit),
                    ("x-linked-etag", &etag),
                    ("x-linked-size", &f.bytes.len().to_string()),
                ],
                b"",
            )
            .await
        }
        _ => conn.respond(404, &[], b"not a Hub path").await,
    }
}

async fn cdn_conn(
    mut conn: Conn,
    blobs: Arc<BTreeMap<String, Arc<Vec<u8>>>>,
    behaviour: Arc<Behaviour>,
) {
    while let Some(req) = conn.read_request().await {
        let (path, _) = split_query(&req.path);
        let Some(bytes) = path.strip_prefix("/blobs/").and_then(|h| blobs.get(h)) else {
            if conn.respond(404, &[], b"no such blob").await.is_err() {
                return;
            }
            continue;
        };
        let mut body: Vec<u8> = bytes.to_vec();
        if behaviour.corrupt.load(Ordering::SeqCst) {
            for b in body.iter_mut().step_by(97) {
                *b ^= 0x5a;
            }
        }
        let etag = format!("\"{}\"", hex(&Sha256::digest(bytes.as_slice())));
        let from: usize = req
            .header("range")
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let total = body.len();
        let (status, slice) = if from > 0 && from < total {
            (206, &body[from..])
        } else {
            (200, &body[..])
        };
        let mut head = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: application/octet-stream\r\netag: {etag}\r\naccept-ranges: bytes\r\ncontent-length: {}\r\n",
            if status == 206 { "Partial Content" } else { "OK" },
            slice.len()
        );
        if status == 206 {
            head.push_str(&format!(
                "content-range: bytes {from}-{}/{total}\r\n",
                total - 1
            ));
        }
        head.push_str("\r\n");
        if conn.write(head.as_bytes()).await.is_err() {
            return;
        }
        if behaviour.stall_at_half.swap(false, Ordering::SeqCst) {
            let _ = conn.write(&slice[..total / 2 - from.min(total / 2)]).await;
            // `notify_one` keeps the permit if the test is not waiting yet.
            behaviour.half_sent.notify_one();
            conn.wait_closed().await;
            return;
        }
        if behaviour.cut_at_half.swap(false, Ordering::SeqCst) {
            let _ = conn.write(&slice[..total / 2 - from.min(total / 2)]).await;
            // Dropping the connection: the client sees the body end early.
            return;
        }
        if conn.write(slice).await.is_err() {
            return;
        }
    }
}
