//! A bounded fuzz of `edgecloud serve`'s request parsing: thousands of
//! random and mutated bodies, headers and chunkings (seeded, so a failure
//! reproduces), one per connection, against a real server on loopback with
//! two instantly answering scripted backends (fakes, so every case is about
//! parsing, and lanes are never busy: requests go one at a time).
//!
//! Every case must get a response, never a 5xx, and either an OpenAI error
//! object (`{"error": {"message", "type", ...}}`) with its 4xx or a valid
//! answer (a chat completion, or an SSE stream ending in `[DONE]`); and the
//! server must still answer a good request afterwards.
//!
//! What the generator leaves out on purpose: deadlines under a second (a
//! valid 1 ms deadline rightly gets 504 `timeout_error`) and bytes that are
//! not HTTP at all (hyper answers those with a bare 400 before a request
//! exists; the soak script sends them).

use std::time::{Duration, Instant};

use edgecloud::harness::{Harness, Policy};
use edgecloud::serve::{ServeConfig, Server};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::scripted::{Auto, AutoEnd, Scripted};

/// xorshift64*: a fixed, seedable sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn random_string(rng: &mut Rng) -> String {
    let pieces = [
        "",
        "x",
        "hello",
        "ü",
        "日本",
        "\u{0}",
        "\\",
        "\"",
        "\n",
        "🦀",
        "user",
        "system",
        "assistant",
        "tool",
        "race",
        "cascade",
        "best-of",
        "edgecloud",
        "default",
        "null",
    ];
    let mut s = String::new();
    for _ in 0..rng.below(4) {
        let piece: &&str = rng.pick(&pieces);
        s.push_str(piece);
    }
    if rng.chance(5) {
        s.push_str(&"a".repeat(rng.below(5000)));
    }
    s
}

/// Any JSON value; `depth` bounds nesting (deep nesting is its own case).
fn random_value(rng: &mut Rng, depth: u32, key: &str) -> Value {
    if key == "deadline_ms" && rng.chance(70) {
        // Valid deadlines stay long (see the module docs); invalid types
        // and negative values are fair game.
        return json!(1000 + rng.below(100_000));
    }
    match rng.below(if depth == 0 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 => json!(*rng.pick(&[
            0i64,
            1,
            -1,
            7,
            255,
            4096,
            65536,
            i64::MAX,
            i64::MIN,
            1 << 40
        ])),
        3 => json!(*rng.pick(&[0.5f64, -0.0, 1e308, -1e-9, 2.5, 1e20])),
        4 | 5 => json!(random_string(rng)),
        6 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth - 1, ""))
                .collect(),
        ),
        _ => {
            let keys = [
                "role",
                "content",
                "model",
                "messages",
                "stream",
                "max_tokens",
                "x",
                "edgecloud",
                "policy",
                "deadline_ms",
                "name",
                "type",
                "text",
            ];
            let mut map = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                let k = rng.pick(&keys).to_string();
                let v = random_value(rng, depth - 1, &k);
                map.insert(k, v);
            }
            Value::Object(map)
        }
    }
}

fn base_body(rng: &mut Rng) -> Value {
    let mut body = json!({
        "model": rng.pick(&["edgecloud", "edgecloud", "default", "nope"]),
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": random_string(rng)},
        ],
    });
    for (key, value) in [
        ("max_tokens", json!(1 + rng.below(64))),
        ("stream", json!(rng.chance(50))),
        ("temperature", json!(0.7)),
        ("top_p", json!(0.9)),
        ("seed", json!(rng.below(1000))),
        ("stop", json!(["\n\n"])),
        ("stream_options", json!({"include_usage": true})),
        (
            "edgecloud",
            json!({"policy": rng.pick(&["race", "local-only", "cloud-only", "cascade", "best-of"])}),
        ),
    ] {
        if rng.chance(40) {
            body[key] = value;
        }
    }
    body
}

/// Replaces one random node of `v` by a random value.
fn mutate_value(rng: &mut Rng, v: &mut Value, key: &str) {
    let descend = rng.chance(60);
    match v {
        Value::Object(map) if descend && !map.is_empty() => {
            let k = map.keys().nth(rng.below(map.len())).cloned().unwrap();
            if rng.chance(15) {
                map.remove(&k);
            } else {
                mutate_value(rng, map.get_mut(&k).unwrap(), &k);
            }
        }
        Value::Array(items) if descend && !items.is_empty() => {
            let i = rng.below(items.len());
            mutate_value(rng, &mut items[i], key);
        }
        _ => *v = random_value(rng, 3, key),
    }
}

/// One case: a body and the headers that go with it.
struct Case {
    body: Vec<u8>,
    headers: Vec<(String, String)>,
    chunked: Option<Vec<usize>>,
    /// A transfer framing that does not match the body (the request then
    /// may get no well-formed answer, but never a 5xx or a dead server).
    broken_framing: bool,
}

fn make_case(rng: &mut Rng) -> Case {
    let mut body = base_body(rng);
    for _ in 0..rng.below(4) {
        mutate_value(rng, &mut body, "");
    }
    let mut bytes = serde_json::to_vec(&body).unwrap();
    match rng.below(10) {
        0 => {
            let cut = rng.below(bytes.len() + 1);
            bytes.truncate(cut);
        }
        1 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(bytes.len().max(1));
                if i < bytes.len() {
                    bytes[i] = rng.next() as u8;
                }
            }
        }
        2 => bytes = (0..rng.below(512)).map(|_| rng.next() as u8).collect(),
        3 => {
            let depth = 50 + rng.below(5000);
            bytes = format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
        }
        4 => bytes.extend_from_slice(b" trailing garbage"),
        _ => {}
    }
    let mut headers = Vec::new();
    match rng.below(6) {
        0 => {}
        1 => headers.push(("Content-Type".into(), "text/plain".into())),
        2 => headers.push((
            "Content-Type".into(),
            "application/json; charset=latin1".into(),
        )),
        _ => headers.push(("Content-Type".into(), "application/json".into())),
    }
    if rng.chance(20) {
        headers.push((
            "X-Edgecloud-Policy".into(),
            rng.pick(&["race", "nope", "", "local-only", "CASCADE", "best-of"])
                .to_string(),
        ));
    }
    if rng.chance(20) {
        headers.push((
            "X-Edgecloud-Deadline-Ms".into(),
            rng.pick(&["5000", "-1", "abc", "99999999999999999999", "1e3", "2000"])
                .to_string(),
        ));
    }
    if rng.chance(10) {
        headers.push((
            "X-Request-Id".into(),
            random_string(rng).replace(['\0', '\n'], ""),
        ));
    }
    if rng.chance(10) {
        headers.push(("Authorization".into(), "Bearer whatever".into()));
    }
    let mut broken_framing = false;
    let chunked = if rng.chance(25) {
        let mut sizes = Vec::new();
        let mut left = bytes.len();
        while left > 0 {
            let n = 1 + rng.below(left.min(700));
            sizes.push(n);
            left -= n;
        }
        Some(sizes)
    } else {
        if rng.chance(5) {
            // A Content-Length that lies short: the rest is garbage after
            // the request.
            broken_framing = true;
            headers.push((
                "Content-Length".into(),
                rng.below(bytes.len() + 1).to_string(),
            ));
        } else {
            headers.push(("Content-Length".into(), bytes.len().to_string()));
        }
        None
    };
    Case {
        body: bytes,
        headers,
        chunked,
        broken_framing,
    }
}

fn encode(case: &Case) -> Vec<u8> {
    let mut out =
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n".to_vec();
    for (k, v) in &case.headers {
        // Header values are printable: a CR or LF would be a framing case
        // of its own, not a header case.
        let v: String = v.chars().filter(|c| !c.is_control()).collect();
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    match &case.chunked {
        Some(sizes) => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            let mut at = 0;
            for n in sizes {
                out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                out.extend_from_slice(&case.body[at..at + n]);
                out.extend_from_slice(b"\r\n");
                at += n;
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
        None => {
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&case.body);
        }
    }
    out
}

/// Sends one request and reads the whole response (the server closes).
async fn exchange(addr: std::net::SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The server may answer (413, 400) before reading everything.
    let _ = s.write_all(raw).await;
    // No write shutdown: hyper takes a half-closed connection as gone.
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
    out
}

/// The status and the body (de-chunked) of a response, if it is one.
fn parse_response(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
    let rest = &raw[split + 4..];
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    if !chunked {
        return Some((status, rest.to_vec()));
    }
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + rest[at..].windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&rest[at..line_end]).ok()?.trim(), 16)
            .ok()?;
        at = line_end + 2;
        if size == 0 {
            return Some((status, body));
        }
        body.extend_from_slice(rest.get(at..at + size)?);
        at += size + 2;
    }
}

fn is_openai_error(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|v| v["error"]["message"].is_string() && v["error"]["type"].is_string())
}

fn is_valid_answer(body: &[u8]) -> bool {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return v["choices"][0]["message"]["content"].is_string();
    }
    let text = String::from_utf8_lossy(body);
    text.starts_with("data: ") && text.trim_end().ends_with("data: [DONE]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_and_mutated_requests_never_panic_or_get_a_5xx() {
    let instant = |_| Auto {
        delay: Duration::ZERO,
        tokens: 2,
        end: AutoEnd::Complete("ok".into()),
        honour_cancel: true,
    };
    let harness = Harness::builder()
        .local(Scripted::auto("fuzz-local", instant))
        .cloud(Scripted::auto("fuzz-cloud", instant))
        .policy(Policy::Race)
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let config = ServeConfig::default()
        .listen("127.0.0.1:0".parse().unwrap())
        .max_body_bytes(16 * 1024)
        .body_timeout(Duration::from_millis(500));
    let server = Server::bind(harness, config).await.unwrap().spawn();
    let addr = server.local_addr();

    let seed = std::env::var("EDGECLOUD_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_F00D_u64);
    let mut rng = Rng(seed);
    // Bounded by count and by time, whichever comes first.
    let (cases, budget) = (3000, Duration::from_secs(90));
    let started = Instant::now();
    let mut by_status = std::collections::BTreeMap::<u16, u32>::new();
    let mut failures = Vec::new();
    let mut ran = 0;
    for i in 0..cases {
        if started.elapsed() > budget {
            break;
        }
        ran += 1;
        let case = make_case(&mut rng);
        let raw = encode(&case);
        let response = exchange(addr, &raw).await;
        let what = match parse_response(&response) {
            None if case.broken_framing => continue,
            None => Err("no well-formed response".to_string()),
            Some((status, body)) => {
                *by_status.entry(status).or_default() += 1;
                if status >= 500 {
                    Err(format!("status {status}"))
                } else if status >= 400 && !is_openai_error(&body) {
                    Err(format!("status {status} without an OpenAI error object"))
                } else if status == 200 && !is_valid_answer(&body) {
                    Err("200 without a valid answer".to_string())
                } else if !(200..500).contains(&status) || (201..400).contains(&status) {
                    Err(format!("unexpected status {status}"))
                } else {
                    Ok(())
                }
            }
        };
        if let Err(why) = what {
            if failures.len() < 10 {
                failures.push(format!(
                    "case {i} (seed {seed:#x}): {why}\nrequest: {}\nresponse: {}",
                    String::from_utf8_lossy(&raw[..raw.len().min(600)]),
                    String::from_utf8_lossy(&response[..response.len().min(600)])
                ));
            }
        }
    }
    eprintln!(
        "fuzzed {ran} requests in {:.1} s: {by_status:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran >= 300, "only {ran} cases ran within the budget");

    // Still serving.
    let good = br#"{"model": "edgecloud", "messages": [{"role": "user", "content": "hi"}]}"#;
    let raw = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        good.len()
    );
    let mut raw = raw.into_bytes();
    raw.extend_from_slice(good);
    let (status, body) = parse_response(&exchange(addr, &raw).await).unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(server.shutdown().await.is_clean());
}
