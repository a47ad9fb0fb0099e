//! The HTTP client underneath the lane: builds the one pooled
//! `reqwest::Client` (rustls with verified certificates, no redirects,
//! keep-alive), times new connections, resolves names with a typed failure,
//! and turns transport errors into [`CloudError`] variants. It never sees
//! the key (the lane sets it per request, as a sensitive header) and never
//! lets a `reqwest::Error` out with its URL.

use super::config::CloudConfig;
use super::endpoint::Endpoint;
use super::error::{BoxError, CloudError};
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Builds the lane's client.
pub(crate) fn build_client(config: &CloudConfig) -> Result<reqwest::Client, CloudError> {
    let header_cap = u32::try_from(config.limits.max_header_bytes).unwrap_or(u32::MAX);
    let mut builder = reqwest::Client::builder();
    if let Some(path) = &config.ca_file {
        for cert in read_ca_file(path)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .user_agent(concat!("edgecloud/", env!("CARGO_PKG_VERSION")))
        // Never follow: a redirect could carry the Authorization header
        // elsewhere, and an API endpoint that redirects is misconfigured.
        .redirect(reqwest::redirect::Policy::none())
        .use_rustls_tls()
        .https_only(false)
        .tcp_nodelay(true)
        .connect_timeout(config.connect_timeout)
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(4)
        .http2_max_header_list_size(header_cap)
        .dns_resolver(Arc::new(SystemResolver))
        .connector_layer(ConnectTimerLayer)
        .build()
        .map_err(|e| CloudError::InvalidConfig {
            reason: format!(
                "cannot build the HTTP client: {}",
                chain_text(&e.without_url())
            ),
        })
}

/// The certificates of a PEM bundle, each trusted as a root.
fn read_ca_file(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, CloudError> {
    let invalid = |why: String| CloudError::InvalidConfig {
        reason: format!("ca_file {}: {why}", path.display()),
    };
    let pem = std::fs::read(path).map_err(|e| invalid(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| invalid(format!("not a PEM certificate bundle ({})", chain_text(&e))))?;
    if certs.is_empty() {
        return Err(invalid("holds no certificate".into()));
    }
    Ok(certs)
}

tokio::task_local! {
    /// Where the connector reports how long opening a connection took, for
    /// the request being polled on this task.
    static CONNECT_PROBE: Arc<ConnectProbe>;
}

/// The connect time of one request, if it opened a new connection.
#[derive(Debug, Default)]
pub(crate) struct ConnectProbe {
    elapsed: Mutex<Option<Duration>>,
}

impl ConnectProbe {
    /// How long the new connection took to open (DNS, TCP, TLS); `None`
    /// when the request reused a pooled connection.
    pub(crate) fn elapsed(&self) -> Option<Duration> {
        *self
            .elapsed
            .lock()
            .expect("the probe lock is never held across a panic")
    }
}

/// Runs `fut` with `probe` receiving the connect time of any connection
/// that `fut` opens. The connector is called while `fut` is polled, so the
/// task-local is in scope there.
pub(crate) async fn with_connect_probe<F: Future>(probe: Arc<ConnectProbe>, fut: F) -> F::Output {
    CONNECT_PROBE.scope(probe, fut).await
}

/// A tower layer that times the connector (DNS + TCP + TLS).
#[derive(Debug, Clone, Copy)]
struct ConnectTimerLayer;

impl<S> tower::Layer<S> for ConnectTimerLayer {
    type Service = ConnectTimer<S>;
    fn layer(&self, inner: S) -> ConnectTimer<S> {
        ConnectTimer { inner }
    }
}

#[derive(Debug, Clone)]
struct ConnectTimer<S> {
    inner: S,
}

impl<S, R> tower::Service<R> for ConnectTimer<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
    S::Response: 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let probe = CONNECT_PROBE.try_with(Arc::clone).ok();
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            if let (Some(probe), true) = (probe, result.is_ok()) {
                *probe
                    .elapsed
                    .lock()
                    .expect("the probe lock is never held across a panic") =
                    Some(started.elapsed());
            }
            result
        })
    }
}

/// The system resolver (getaddrinfo on a blocking thread, as reqwest's
/// default), whose failures carry a type we can recognise.
#[derive(Debug)]
struct SystemResolver;

/// A name that did not resolve.
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve {host}")]
struct DnsFailure {
    host: String,
    #[source]
    source: Option<io::Error>,
}

impl reqwest::dns::Resolve for SystemResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let looked_up = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map(|addrs| addrs.collect::<Vec<SocketAddr>>());
            match looked_up {
                Ok(addrs) => {
                    if addrs.is_empty() {
                        Err(Box::new(DnsFailure { host, source: None }) as BoxError)
                    } else {
                        Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
                    }
                }
                Err(e) => Err(Box::new(DnsFailure {
                    host,
                    source: Some(e),
                }) as BoxError),
            }
        })
    }
}

/// Every cause in the chain, each as its `Display`, joined with ": ".
/// reqwest errors passed here have had their URL removed.
pub(crate) fn chain_text(err: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        let text = e.to_string();
        if parts.last() != Some(&text) && !text.is_empty() {
            parts.push(text);
        }
        cur = e.source();
    }
    parts.join(": ")
}

fn find_in_chain<'a, T: StdError + 'static>(err: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(t) = e.downcast_ref::<T>() {
            return Some(t);
        }
        cur = e.source();
    }
    None
}

/// Whether hyper refused the response head as too large (over its buffer
/// ceiling or over 100 header fields). hyper's error type is not one of our
/// dependencies; its message is stable and a test pins it.
fn is_head_too_large(err: &(dyn StdError + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.to_string().contains("message head is too large") {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Kinds an `io::Error` takes when the TCP connection itself fails; any
/// other failure while connecting to an `https` URL happened in the TLS
/// handshake (tokio-rustls reports rustls errors as `InvalidData`, a peer
/// closing mid-handshake as `UnexpectedEof`).
fn is_tcp_failure(kind: io::ErrorKind) -> bool {
    use io::ErrorKind::*;
    matches!(
        kind,
        ConnectionRefused
            | TimedOut
            | AddrNotAvailable
            | AddrInUse
            | PermissionDenied
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
            | Interrupted
    )
}

/// Maps a failure of sending the request (before response headers).
pub(crate) fn classify_send_error(
    err: reqwest::Error,
    endpoint: &Endpoint,
    config: &CloudConfig,
) -> CloudError {
    let err = err.without_url();
    let addr = endpoint.authority.clone();
    let detail = chain_text(&err);
    let dyn_err: &(dyn StdError + 'static) = &err;
    if let Some(dns) = find_in_chain::<DnsFailure>(dyn_err) {
        let host = dns.host.clone();
        return CloudError::Dns {
            host,
            source: Box::new(err),
        };
    }
    if is_head_too_large(dyn_err) {
        return CloudError::HeadersTooLarge {
            limit: config.limits.max_header_bytes,
        };
    }
    if err.is_connect() {
        if err.is_timeout() {
            return CloudError::ConnectTimeout {
                addr,
                timeout: config.connect_timeout,
            };
        }
        let io_kind = find_in_chain::<io::Error>(dyn_err).map(io::Error::kind);
        if io_kind == Some(io::ErrorKind::ConnectionRefused) {
            return CloudError::ConnectRefused {
                addr,
                source: Box::new(err),
            };
        }
        let tcp = io_kind.is_some_and(is_tcp_failure);
        if endpoint.url.scheme() == "https" && !tcp {
            return CloudError::Tls {
                addr,
                detail,
                source: Box::new(err),
            };
        }
        return CloudError::Connect {
            addr,
            detail,
            source: Box::new(err),
        };
    }
    CloudError::Transport {
        addr,
        detail,
        source: Box::new(err),
    }
}

/// Text of a body read error, URL removed.
pub(crate) fn body_error_text(err: reqwest::Error) -> String {
    chain_text(&err.without_url())
}
