//! Everything that can go wrong in the cloud lane, as one typed enum whose
//! variants a caller can act on. Messages are built from our own words plus
//! server text that went through the key scrubber; they never carry the key,
//! a request URL or a query string. Third-party errors stay boxed sources.

use edgecloud_core::request::InvalidRequest;
use std::fmt;
use std::time::Duration;

/// A boxed, opaque cause (a transport error with its URL removed).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a cloud lane call failed.
///
/// Stopping by deadline or cancellation *after* the first token is not an
/// error: [`crate::CloudLane::run`] then returns the partial text with
/// [`edgecloud_core::FinishReason::Deadline`] or [`edgecloud_core::FinishReason::Cancelled`].
/// Before the first token there is no text to return, so it is an error
/// ([`CloudError::DeadlineBeforeHeaders`],
/// [`CloudError::DeadlineBeforeFirstToken`], [`CloudError::Cancelled`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloudError {
    /// The lane's settings are unusable (bad URL, empty model, zero cap...).
    #[error("invalid cloud lane configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The job itself is invalid (no messages, sampling out of range).
    #[error(transparent)]
    InvalidRequest(#[from] InvalidRequest),
    /// The host name did not resolve.
    #[error("DNS lookup failed for {host}")]
    Dns {
        /// The name that did not resolve.
        host: String,
        /// The resolver's error.
        #[source]
        source: BoxError,
    },
    /// Nothing listens at the address (TCP connection refused).
    #[error("connection refused by {addr}")]
    ConnectRefused {
        /// `host:port`.
        addr: String,
        /// The transport error.
        #[source]
        source: BoxError,
    },
    /// Opening the connection took longer than the configured connect
    /// timeout (the deadline was still ahead).
    #[error("connecting to {addr} took longer than the connect timeout ({timeout:?})")]
    ConnectTimeout {
        /// `host:port`.
        addr: String,
        /// The configured connect timeout.
        timeout: Duration,
    },
    /// The TCP connection opened but the TLS handshake failed (bad or
    /// untrusted certificate, a peer that does not speak TLS...).
    #[error("TLS handshake with {addr} failed")]
    Tls {
        /// `host:port`.
        addr: String,
        /// The cause, in words.
        detail: String,
        /// The transport error.
        #[source]
        source: BoxError,
    },
    /// Any other failure to open a connection (unreachable network...).
    #[error("cannot connect to {addr}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// The cause, in words.
        detail: String,
        /// The transport error.
        #[source]
        source: BoxError,
    },
    /// The connection opened but the HTTP exchange failed before response
    /// headers (the server closed the connection, answered with something
    /// that is not HTTP...).
    #[error("HTTP exchange with {addr} failed before a response")]
    Transport {
        /// `host:port`.
        addr: String,
        /// The cause, in words.
        detail: String,
        /// The transport error.
        #[source]
        source: BoxError,
    },
    /// The job's deadline passed before the response headers arrived.
    #[error("deadline reached before the response headers arrived")]
    DeadlineBeforeHeaders,
    /// The job's deadline passed after the headers but before any text.
    #[error(
        "deadline reached after the response headers (HTTP {status}) but before the first token"
    )]
    DeadlineBeforeFirstToken {
        /// The response status.
        status: u16,
    },
    /// The job was cancelled before any text arrived.
    #[error("cancelled before the first token")]
    Cancelled,
    /// HTTP 401 or 403: the key is missing, wrong, or lacks permission.
    #[error("the server refused the credentials (HTTP {status}): {message}")]
    Auth {
        /// 401 or 403.
        status: u16,
        /// The server's message (scrubbed).
        message: String,
    },
    /// HTTP 404: wrong base URL or unknown model.
    #[error("not found (HTTP 404), check the base URL and the model name: {message}")]
    NotFound {
        /// The server's message (scrubbed).
        message: String,
    },
    /// HTTP 429. `retry_after` comes from `retry-after-ms` or `Retry-After`
    /// (seconds or an HTTP date), when the server sent one.
    #[error("rate limited (HTTP 429){}: {message}", retry_hint(*.retry_after))]
    RateLimited {
        /// How long the server asks us to wait, if it said.
        retry_after: Option<Duration>,
        /// The server's message (scrubbed).
        message: String,
    },
    /// HTTP 5xx.
    #[error("server error (HTTP {status}): {message}")]
    Server {
        /// The status (500-599).
        status: u16,
        /// The server's message (scrubbed).
        message: String,
    },
    /// Any other non-success status (400, 422...).
    #[error("request rejected (HTTP {status}): {message}")]
    HttpStatus {
        /// The status.
        status: u16,
        /// The server's message (scrubbed).
        message: String,
        /// The error's `code` (or `type`) in the body, when it has one
        /// (scrubbed): OpenAI's `context_length_exceeded`, ...
        code: Option<String>,
    },
    /// A 3xx answer. Redirects are never followed (they could carry the key
    /// to another host).
    #[error("the server answered with a redirect (HTTP {status}); redirects are not followed, point the base URL at the final address")]
    Redirect {
        /// The status.
        status: u16,
    },
    /// A success status whose body (or one streamed event) is not valid
    /// chat-completion JSON.
    #[error("response is not valid chat-completion JSON: {detail}")]
    MalformedJson {
        /// The parser's complaint (scrubbed).
        detail: String,
    },
    /// A success status whose body is not the embeddings list that was
    /// asked for (not JSON, another shape, a vector too many or too few,
    /// vectors of different widths, a number that is not finite).
    #[error("response is not a valid embeddings list: {detail}")]
    MalformedEmbeddings {
        /// What is wrong (scrubbed).
        detail: String,
    },
    /// A success status whose body (or one streamed event) is an error
    /// object, as vLLM, llama-server and proxies send mid-stream.
    #[error("the provider reported an error inside a successful response: {message}")]
    Provider {
        /// The provider's message (scrubbed).
        message: String,
        /// The provider's error code or type, if any (scrubbed).
        code: Option<String>,
    },
    /// The stream ended (connection closed or cut) before `data: [DONE]`.
    /// The text received so far is kept.
    #[error("the stream ended before [DONE], after {} bytes of text{}", .partial.len(), detail_suffix(.detail))]
    Truncated {
        /// Text received before the cut.
        partial: String,
        /// The transport's complaint, if the cut was an error rather than a
        /// clean close.
        detail: Option<String>,
    },
    /// The response holds bytes that are not UTF-8.
    #[error("the response holds invalid UTF-8")]
    InvalidUtf8,
    /// A complete response with no choice in it.
    #[error("the response holds no choices")]
    EmptyChoices,
    /// The response body grew past [`crate::CloudLimits::max_body_bytes`].
    #[error("the response body exceeds the cap of {limit} bytes")]
    BodyTooLarge {
        /// The cap.
        limit: usize,
    },
    /// The generated text grew past [`crate::CloudLimits::max_content_bytes`].
    #[error("the generated text exceeds the cap of {limit} bytes")]
    ContentTooLarge {
        /// The cap.
        limit: usize,
    },
    /// One server-sent-events line (or one event's data) grew past
    /// [`crate::CloudLimits::max_line_bytes`].
    #[error("a server-sent-events line exceeds the cap of {limit} bytes")]
    LineTooLong {
        /// The cap.
        limit: usize,
    },
    /// The response headers exceed [`crate::CloudLimits::max_header_bytes`]
    /// (or the HTTP stack's own ceiling of 100 fields).
    #[error("the response headers exceed the cap of {limit} bytes (or 100 fields)")]
    HeadersTooLarge {
        /// The cap.
        limit: usize,
    },
    /// After the headers, the server sent nothing for
    /// [`crate::CloudConfig::stall_timeout`] (a slow-loris or hung
    /// server). Text received before the silence is kept.
    #[error("the server went silent for {waited:?} after the response headers")]
    Stalled {
        /// How long it was silent.
        waited: Duration,
        /// Text received before the silence.
        partial: String,
    },
    /// The job's token sink panicked; the request was dropped.
    #[error("the token sink panicked")]
    SinkPanicked,
}

fn retry_hint(after: Option<Duration>) -> String {
    match after {
        Some(d) => format!(", retry after {:.3} s", d.as_secs_f64()),
        None => String::new(),
    }
}

fn detail_suffix(detail: &Option<String>) -> String {
    match detail {
        Some(d) => format!(" ({d})"),
        None => String::new(),
    }
}

/// What kind of [`CloudError`] it is, without its data: what tests and
/// callers compare. [`as_str`](Self::as_str) is the stable snake_case name
/// the JSON output and metrics labels carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
#[allow(missing_docs)] // each is the `CloudError` variant of the same name
pub enum CloudErrorKind {
    InvalidConfig,
    InvalidRequest,
    Dns,
    ConnectRefused,
    ConnectTimeout,
    Tls,
    Connect,
    Transport,
    DeadlineBeforeHeaders,
    DeadlineBeforeFirstToken,
    Cancelled,
    Auth,
    NotFound,
    RateLimited,
    Server,
    HttpStatus,
    Redirect,
    MalformedJson,
    MalformedEmbeddings,
    Provider,
    Truncated,
    InvalidUtf8,
    EmptyChoices,
    BodyTooLarge,
    ContentTooLarge,
    LineTooLong,
    HeadersTooLarge,
    Stalled,
    SinkPanicked,
}

impl CloudErrorKind {
    /// The stable snake_case name, as in JSON output.
    pub fn as_str(self) -> &'static str {
        use CloudErrorKind as K;
        match self {
            K::InvalidConfig => "invalid_config",
            K::InvalidRequest => "invalid_request",
            K::Dns => "dns",
            K::ConnectRefused => "connect_refused",
            K::ConnectTimeout => "connect_timeout",
            K::Tls => "tls",
            K::Connect => "connect",
            K::Transport => "transport",
            K::DeadlineBeforeHeaders => "deadline_before_headers",
            K::DeadlineBeforeFirstToken => "deadline_before_first_token",
            K::Cancelled => "cancelled",
            K::Auth => "auth",
            K::NotFound => "not_found",
            K::RateLimited => "rate_limited",
            K::Server => "server_error",
            K::HttpStatus => "http_status",
            K::Redirect => "redirect",
            K::MalformedJson => "malformed_json",
            K::MalformedEmbeddings => "malformed_embeddings",
            K::Provider => "provider_error",
            K::Truncated => "truncated",
            K::InvalidUtf8 => "invalid_utf8",
            K::EmptyChoices => "empty_choices",
            K::BodyTooLarge => "body_too_large",
            K::ContentTooLarge => "content_too_large",
            K::LineTooLong => "line_too_long",
            K::HeadersTooLarge => "headers_too_large",
            K::Stalled => "stalled",
            K::SinkPanicked => "sink_panicked",
        }
    }
}

impl fmt::Display for CloudErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl CloudError {
    /// What kind of error this is (its [`as_str`](CloudErrorKind::as_str)
    /// is the name in JSON output).
    pub fn kind(&self) -> CloudErrorKind {
        use CloudErrorKind as K;
        match self {
            CloudError::InvalidConfig { .. } => K::InvalidConfig,
            CloudError::InvalidRequest(_) => K::InvalidRequest,
            CloudError::Dns { .. } => K::Dns,
            CloudError::ConnectRefused { .. } => K::ConnectRefused,
            CloudError::ConnectTimeout { .. } => K::ConnectTimeout,
            CloudError::Tls { .. } => K::Tls,
            CloudError::Connect { .. } => K::Connect,
            CloudError::Transport { .. } => K::Transport,
            CloudError::DeadlineBeforeHeaders => K::DeadlineBeforeHeaders,
            CloudError::DeadlineBeforeFirstToken { .. } => K::DeadlineBeforeFirstToken,
            CloudError::Cancelled => K::Cancelled,
            CloudError::Auth { .. } => K::Auth,
            CloudError::NotFound { .. } => K::NotFound,
            CloudError::RateLimited { .. } => K::RateLimited,
            CloudError::Server { .. } => K::Server,
            CloudError::HttpStatus { .. } => K::HttpStatus,
            CloudError::Redirect { .. } => K::Redirect,
            CloudError::MalformedJson { .. } => K::MalformedJson,
            CloudError::MalformedEmbeddings { .. } => K::MalformedEmbeddings,
            CloudError::Provider { .. } => K::Provider,
            CloudError::Truncated { .. } => K::Truncated,
            CloudError::InvalidUtf8 => K::InvalidUtf8,
            CloudError::EmptyChoices => K::EmptyChoices,
            CloudError::BodyTooLarge { .. } => K::BodyTooLarge,
            CloudError::ContentTooLarge { .. } => K::ContentTooLarge,
            CloudError::LineTooLong { .. } => K::LineTooLong,
            CloudError::HeadersTooLarge { .. } => K::HeadersTooLarge,
            CloudError::Stalled { .. } => K::Stalled,
            CloudError::SinkPanicked => K::SinkPanicked,
        }
    }

    /// Whether the same request may succeed if sent again later (with a new
    /// deadline): transient network trouble, rate limits, 5xx, cut or
    /// stalled streams. Configuration, credential, protocol and cap errors
    /// are not retryable; neither are deadline and cancellation.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CloudError::ConnectRefused { .. }
                | CloudError::ConnectTimeout { .. }
                | CloudError::Connect { .. }
                | CloudError::Transport { .. }
                | CloudError::RateLimited { .. }
                | CloudError::Server { .. }
                | CloudError::Truncated { .. }
                | CloudError::Stalled { .. }
        )
    }

    /// Whether the job's deadline ended the call.
    pub fn is_deadline(&self) -> bool {
        matches!(
            self,
            CloudError::DeadlineBeforeHeaders | CloudError::DeadlineBeforeFirstToken { .. }
        )
    }

    /// Whether the job's cancellation ended the call.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, CloudError::Cancelled)
    }

    /// Whether the connection could not be opened at all.
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            CloudError::Dns { .. }
                | CloudError::ConnectRefused { .. }
                | CloudError::ConnectTimeout { .. }
                | CloudError::Tls { .. }
                | CloudError::Connect { .. }
        )
    }

    /// How long the server asked us to wait (HTTP 429 with a retry header).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            CloudError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The HTTP status the server answered with, when the failure came
    /// after response headers.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            CloudError::Auth { status, .. }
            | CloudError::Server { status, .. }
            | CloudError::HttpStatus { status, .. }
            | CloudError::Redirect { status }
            | CloudError::DeadlineBeforeFirstToken { status } => Some(*status),
            CloudError::NotFound { .. } => Some(404),
            CloudError::RateLimited { .. } => Some(429),
            _ => None,
        }
    }

    /// Text that arrived before the failure (truncated or stalled streams).
    pub fn partial_text(&self) -> Option<&str> {
        match self {
            CloudError::Truncated { partial, .. } | CloudError::Stalled { partial, .. } => {
                Some(partial)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_distinct_and_snake_case() {
        let errors = [
            CloudError::DeadlineBeforeHeaders,
            CloudError::DeadlineBeforeFirstToken { status: 200 },
            CloudError::Cancelled,
            CloudError::InvalidUtf8,
            CloudError::EmptyChoices,
            CloudError::SinkPanicked,
            CloudError::Redirect { status: 302 },
        ];
        let mut kinds: Vec<_> = errors.iter().map(|e| e.kind().as_str()).collect();
        assert!(kinds.iter().all(|k| k
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')));
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), errors.len());
    }

    #[test]
    fn rate_limit_display_and_predicates() {
        let e = CloudError::RateLimited {
            retry_after: Some(Duration::from_secs(7)),
            message: "slow down".into(),
        };
        assert_eq!(
            e.to_string(),
            "rate limited (HTTP 429), retry after 7.000 s: slow down"
        );
        assert!(e.is_retryable());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(e.http_status(), Some(429));
        let t = CloudError::Truncated {
            partial: "abc".into(),
            detail: None,
        };
        assert_eq!(t.partial_text(), Some("abc"));
        assert!(!CloudError::DeadlineBeforeHeaders.is_retryable());
        assert!(CloudError::DeadlineBeforeHeaders.is_deadline());
    }
}
