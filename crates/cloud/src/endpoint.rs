//! Turns a base URL into the chat-completions URL, and into a form that is
//! safe to print (no user info, no query, no fragment: those may carry
//! credentials). Nothing here sends anything.

use super::CloudError;
use reqwest::Url;

/// The parsed endpoint of a lane.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// Where requests go (may carry a query the user put in the base URL).
    pub(crate) url: Url,
    /// Where embeddings requests go: the same base, `/embeddings`.
    pub(crate) embeddings: Url,
    /// Printable form: scheme, host, port and path only.
    pub(crate) display: String,
    /// `host:port`, for error messages.
    pub(crate) authority: String,
}

impl Endpoint {
    pub(crate) fn parse(base_url: &str) -> Result<Self, CloudError> {
        let invalid = |reason: String| CloudError::InvalidConfig { reason };
        let base_url = base_url.trim();
        if base_url.is_empty() {
            return Err(invalid("base URL must not be empty".to_owned()));
        }
        let mut url = Url::parse(base_url).map_err(|e| {
            invalid(format!(
                "base URL {} is not a valid URL: {e}",
                display_url(base_url)
            ))
        })?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(invalid(format!(
                "base URL must start with http:// or https://, not {}://",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "base URL must not carry a user name or password; \
                 give the key through the API key setting"
                    .to_owned(),
            ));
        }
        let Some(host) = url.host_str().map(str::to_owned) else {
            return Err(invalid("base URL has no host".to_owned()));
        };
        url.set_fragment(None);
        let base = url.path().trim_end_matches('/').to_owned();
        let mut embeddings = url.clone();
        embeddings.set_path(&format!("{base}/embeddings"));
        url.set_path(&format!("{base}/chat/completions"));
        let port = url.port_or_known_default().unwrap_or(0);
        let authority = format!("{host}:{port}");
        let display = printable(&url);
        Ok(Self {
            url,
            embeddings,
            display,
            authority,
        })
    }
}

/// Printable form of any URL string; unparsable input prints as a
/// placeholder rather than as itself (it might hold a secret).
pub(crate) fn display_url(raw: &str) -> String {
    match Url::parse(raw.trim()) {
        Ok(url) => printable(&url),
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

/// The scheme, host and port of a base URL, and nothing else (no path,
/// query or user info, which may hold secrets): how reports and startup
/// lines name a cloud endpoint. Input without a host prints as a
/// placeholder, as in the lane's own error messages.
pub fn display_origin(raw: &str) -> String {
    match Url::parse(raw.trim()) {
        Ok(url) if url.has_host() => origin(&url),
        _ => "<unparsable URL>".to_owned(),
    }
}

fn origin(url: &Url) -> String {
    let mut out = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        out.push_str(&format!(":{port}"));
    }
    out
}

fn printable(url: &Url) -> String {
    let mut out = origin(url);
    out.push_str(url.path());
    if url.query().is_some() {
        out.push_str("?…");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CloudErrorKind;

    #[test]
    fn appends_chat_completions() {
        for base in [
            "http://127.0.0.1:8080/v1",
            "http://127.0.0.1:8080/v1/",
            " http://127.0.0.1:8080/v1#frag ",
        ] {
            let ep = Endpoint::parse(base).unwrap();
            assert_eq!(ep.url.as_str(), "http://127.0.0.1:8080/v1/chat/completions");
            assert_eq!(ep.authority, "127.0.0.1:8080");
        }
        let ep = Endpoint::parse("https://api.example.com").unwrap();
        assert_eq!(ep.url.as_str(), "https://api.example.com/chat/completions");
        assert_eq!(ep.authority, "api.example.com:443");
    }

    #[test]
    fn query_is_kept_for_sending_but_hidden_when_printed() {
        let ep = Endpoint::parse("https://h.example/v1?api-key=SECRET").unwrap();
        assert_eq!(
            ep.url.as_str(),
            "https://h.example/v1/chat/completions?api-key=SECRET"
        );
        assert_eq!(ep.display, "https://h.example/v1/chat/completions?…");
        assert!(!display_url("https://h.example/?k=SECRET").contains("SECRET"));
    }

    #[test]
    fn refuses_credentials_and_other_schemes() {
        for bad in [
            "",
            "not a url",
            "ftp://h/v1",
            "http://user:SECRET@h/v1",
            "file:///tmp",
        ] {
            let err = Endpoint::parse(bad).unwrap_err();
            assert_eq!(err.kind(), CloudErrorKind::InvalidConfig, "{bad}");
            assert!(!err.to_string().contains("SECRET"));
        }
    }

    #[test]
    fn origins_keep_no_secrets() {
        assert_eq!(
            display_origin("https://user:key@api.example.com:8443/v1?key=x"),
            "https://api.example.com:8443"
        );
        assert_eq!(
            display_origin("http://127.0.0.1:9/v1"),
            "http://127.0.0.1:9"
        );
        // Without a scheme there is no host to show (a lane refuses such a
        // base URL anyway).
        assert_eq!(display_origin("localhost:8080/v1"), "<unparsable URL>");
    }
}
