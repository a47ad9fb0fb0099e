//! Loopback HTTP/1.1 servers for tests, written on raw tokio sockets so a
//! test can make them misbehave at will (drip bytes, stall, cut streams,
//! send huge headers, speak garbage). Each server listens on 127.0.0.1:0,
//! records what it receives, and stops when its handle is dropped.
//!
//! [`Flavor`] renders the response shapes real servers send (OpenAI, vLLM,
//! llama-server, Ollama `/v1`), streamed and whole; [`TestServer::openai`]
//! serves them.

use serde_json::{json, Value};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// A header's value (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The content of the last chat message: tests use it to pick a script.
    pub fn prompt(&self) -> String {
        self.json()["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    }

    /// Whether the client asked for a stream.
    pub fn wants_stream(&self) -> bool {
        self.json()["stream"].as_bool().unwrap_or(false)
    }
}

/// A running loopback server.
pub struct TestServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// Starts a server; `handler` owns each accepted connection.
    pub async fn start<F, Fut>(handler: F) -> Self
    where
        F: Fn(Conn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        Self::on_listener(listener, handler)
    }

    /// Starts a server on a listener the test already bound.
    pub fn on_listener<F, Fut>(listener: TcpListener, handler: F) -> Self
    where
        F: Fn(Conn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let addr = listener.local_addr().expect("listener has an address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler = Arc::new(handler);
        let (acc, reqs) = (Arc::clone(&accepted), Arc::clone(&requests));
        let task = tokio::spawn(async move {
            // Connection tasks are aborted with the accept loop.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                acc.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_nodelay(true);
                let conn = Conn {
                    stream,
                    buf: Vec::new(),
                    requests: Arc::clone(&reqs),
                };
                conns.spawn(handler(conn));
            }
        });
        Self {
            addr,
            accepted,
            requests,
            task,
        }
    }

    /// A well-behaved server of the given flavour: every request gets
    /// `pieces` as the answer (streamed when the request asks for it), on a
    /// keep-alive connection.
    pub async fn openai(flavor: Flavor, pieces: &'static [&'static str]) -> Self {
        Self::start(move |mut conn| async move {
            while let Some(req) = conn.read_request().await {
                if conn.answer(flavor, &req, pieces).await.is_err() {
                    return;
                }
            }
        })
        .await
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Requests read so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// One accepted connection.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Conn {
    /// Reads one HTTP/1.1 request (head and `Content-Length` body). `None`
    /// when the client closed the connection or sent something unreadable.
    pub async fn read_request(&mut self) -> Option<Recorded> {
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            if !self.fill().await {
                return None;
            }
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec()).ok()?;
        self.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let mut first = lines.next()?.split(' ');
        let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while self.buf.len() < len {
            if !self.fill().await {
                return None;
            }
        }
        let body: Vec<u8> = self.buf.drain(..len).collect();
        let req = Recorded {
            method,
            path,
            headers,
            body,
        };
        self.requests.lock().unwrap().push(req.clone());
        Some(req)
    }

    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Waits until the client closes the connection (EOF or reset).
    pub async fn wait_closed(&mut self) {
        while self.fill().await {}
    }

    /// Writes raw bytes and flushes them.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Writes the bytes one at a time, yielding between writes.
    pub async fn drip(&mut self, bytes: &[u8]) -> io::Result<()> {
        for b in bytes {
            self.write(std::slice::from_ref(b)).await?;
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// A complete response with a `Content-Length` body.
    pub async fn respond(
        &mut self,
        status: u16,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<()> {
        let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
        for (n, v) in headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(body);
        self.write(&bytes).await
    }

    /// A 200 JSON response.
    pub async fn json(&mut self, status: u16, body: &str) -> io::Result<()> {
        self.respond(
            status,
            &[("content-type", "application/json")],
            body.as_bytes(),
        )
        .await
    }

    /// The head of a chunked event stream (200).
    pub async fn sse_head(&mut self) -> io::Result<()> {
        self.write(SSE_HEAD.as_bytes()).await
    }

    /// One chunk of a chunked body.
    pub async fn chunk(&mut self, data: &[u8]) -> io::Result<()> {
        self.write(&chunked(data)).await
    }

    /// One `data:` event as one chunk.
    pub async fn event(&mut self, data: &str) -> io::Result<()> {
        self.chunk(format!("data: {data}\n\n").as_bytes()).await
    }

    /// The last chunk of a chunked body.
    pub async fn end_chunks(&mut self) -> io::Result<()> {
        self.write(b"0\r\n\r\n").await
    }

    /// Answers `req` the way `flavor` would, streamed or whole as asked.
    pub async fn answer(
        &mut self,
        flavor: Flavor,
        req: &Recorded,
        pieces: &[&str],
    ) -> io::Result<()> {
        if req.wants_stream() {
            self.sse_head().await?;
            for ev in flavor.stream_events(pieces, "stop", Some((9, pieces.len() as u64))) {
                self.event(&ev).await?;
            }
            self.event("[DONE]").await?;
            self.end_chunks().await
        } else {
            let body = flavor.whole_body(&pieces.concat(), "stop", Some((9, pieces.len() as u64)));
            self.json(200, &body).await
        }
    }
}

/// The head of a chunked `text/event-stream` 200 response.
pub const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";

/// `data` framed as one HTTP/1.1 chunk.
pub fn chunked(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

/// Response shapes of the servers the cloud lane must understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// api.openai.com: role-only first delta with empty content and
    /// `refusal`, `usage: null` on every chunk, a finish-only chunk, a usage
    /// chunk with empty `choices`.
    OpenAi,
    /// vLLM: role-only first delta, the finish reason on a chunk with empty
    /// content and `stop_reason`, a usage chunk with empty `choices`.
    Vllm,
    /// llama.cpp's llama-server: first delta with `content: null`, usage and
    /// the non-standard `timings` object on the finish chunk.
    LlamaServer,
    /// Ollama `/v1`: the role repeated on every delta, no role-only chunk,
    /// a usage chunk with empty `choices`.
    Ollama,
}

impl Flavor {
    pub const ALL: [Flavor; 4] = [
        Flavor::OpenAi,
        Flavor::Vllm,
        Flavor::LlamaServer,
        Flavor::Ollama,
    ];

    fn model(self) -> &'static str {
        match self {
            Flavor::OpenAi => "gpt-4o-mini-2024-07-18",
            Flavor::Vllm => "Qwen/Qwen2.5-0.5B-Instruct",
            Flavor::LlamaServer => "qwen2.5-0.5b-instruct-q4_k_m.gguf",
            Flavor::Ollama => "qwen2.5:0.5b",
        }
    }

    fn usage(prompt: u64, completion: u64) -> Value {
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
    }

    fn chunk(self, choices: Value, usage: Option<Value>) -> String {
        let mut c = json!({
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1_733_000_000,
            "model": self.model(),
            "choices": choices,
        });
        match self {
            Flavor::OpenAi => {
                c["system_fingerprint"] = json!("fp_0ba0d124f1");
                c["usage"] = usage.unwrap_or(Value::Null);
            }
            Flavor::Ollama => {
                c["system_fingerprint"] = json!("fp_ollama");
                if let Some(u) = usage {
                    c["usage"] = u;
                }
            }
            _ => {
                if let Some(u) = usage {
                    c["usage"] = u;
                }
            }
        }
        c.to_string()
    }

    /// The `data:` payloads of a streamed answer, without `[DONE]`.
    pub fn stream_events(
        self,
        pieces: &[&str],
        finish: &str,
        usage: Option<(u64, u64)>,
    ) -> Vec<String> {
        let usage = usage.map(|(p, c)| Self::usage(p, c));
        let mut out = Vec::new();
        match self {
            Flavor::OpenAi => {
                out.push(self.chunk(
                    json!([{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": null}, "logprobs": null, "finish_reason": null}]),
                    None,
                ));
                for p in pieces {
                    out.push(self.chunk(
                        json!([{"index": 0, "delta": {"content": p}, "logprobs": null, "finish_reason": null}]),
                        None,
                    ));
                }
                out.push(self.chunk(
                    json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish}]),
                    None,
                ));
                if let Some(u) = usage {
                    out.push(self.chunk(json!([]), Some(u)));
                }
            }
            Flavor::Vllm => {
                out.push(self.chunk(
                    json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]),
                    None,
                ));
                for p in pieces {
                    out.push(self.chunk(
                        json!([{"index": 0, "delta": {"content": p}, "logprobs": null, "finish_reason": null}]),
                        None,
                    ));
                }
                out.push(self.chunk(
                    json!([{"index": 0, "delta": {"content": ""}, "logprobs": null, "finish_reason": finish, "stop_reason": null}]),
                    None,
                ));
                if let Some(u) = usage {
                    out.push(self.chunk(json!([]), Some(u)));
                }
            }
            Flavor::LlamaServer => {
                out.push(self.chunk(
                    json!([{"finish_reason": null, "index": 0, "delta": {"role": "assistant", "content": null}}]),
                    None,
                ));
                for p in pieces {
                    out.push(self.chunk(
                        json!([{"finish_reason": null, "index": 0, "delta": {"content": p}}]),
                        None,
                    ));
                }
                let mut last: Value = serde_json::from_str(&self.chunk(
                    json!([{"finish_reason": finish, "index": 0, "delta": {}}]),
                    usage,
                ))
                .unwrap();
                last["timings"] = json!({"prompt_n": 9, "prompt_ms": 12.5, "predicted_n": pieces.len(), "predicted_ms": 40.0, "predicted_per_second": 75.0});
                out.push(last.to_string());
            }
            Flavor::Ollama => {
                for p in pieces {
                    out.push(self.chunk(
                        json!([{"index": 0, "delta": {"role": "assistant", "content": p}, "finish_reason": null}]),
                        None,
                    ));
                }
                out.push(self.chunk(
                    json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": finish}]),
                    None,
                ));
                if let Some(u) = usage {
                    out.push(self.chunk(json!([]), Some(u)));
                }
            }
        }
        out
    }

    /// A whole (non-streamed) answer.
    pub fn whole_body(self, text: &str, finish: &str, usage: Option<(u64, u64)>) -> String {
        let mut b = json!({
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1_733_000_000,
            "model": self.model(),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        });
        if let Some((p, c)) = usage {
            b["usage"] = Self::usage(p, c);
        }
        match self {
            Flavor::OpenAi => {
                b["choices"][0]["logprobs"] = Value::Null;
                b["choices"][0]["message"]["refusal"] = Value::Null;
                b["system_fingerprint"] = json!("fp_0ba0d124f1");
            }
            Flavor::LlamaServer => {
                b["timings"] = json!({"prompt_n": 9, "prompt_ms": 12.5, "predicted_n": 3, "predicted_ms": 40.0, "predicted_per_second": 75.0});
            }
            Flavor::Vllm => b["choices"][0]["stop_reason"] = Value::Null,
            Flavor::Ollama => b["system_fingerprint"] = json!("fp_ollama"),
        }
        b.to_string()
    }
}
