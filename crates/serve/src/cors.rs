//! Cross-origin requests from browsers (CORS): which origins may call the
//! server ([`CorsOrigins`], off by default), the answer to a preflight
//! (`OPTIONS` with `Origin` and `Access-Control-Request-Method`: 204 with
//! the allowed origin, methods, headers and max age; 403 for an origin
//! not allowed), and the `Access-Control-*` headers every other response
//! gets, errors and event streams included. A preflight never needs the
//! bearer token (browsers send none); every other request still does. It
//! must not route requests or look at bodies.

use super::respond::{error_response, Body};
use super::wire::{ApiError, INVALID_REQUEST};
use super::ServeError;
use hyper::header::{
    HeaderMap, HeaderValue, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use hyper::{Method, Response, StatusCode};

/// Which browser origins may call the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorsOrigins {
    /// No CORS headers at all (the default): browsers refuse cross-origin
    /// calls; other clients are not affected.
    #[default]
    Off,
    /// Any origin (`Access-Control-Allow-Origin: *`).
    Any,
    /// These origins exactly (`https://app.example:8443`), each echoed
    /// back when it calls, with `Vary: Origin`.
    List(Vec<String>),
}

impl CorsOrigins {
    /// Reads `*` or a comma-separated list of origins
    /// (`scheme://host[:port]`, no path); empty is [`Off`](Self::Off).
    pub fn parse(spec: &str) -> Result<Self, ServeError> {
        Self::from_list(spec.split(','))
    }

    /// The same from separate entries (a config file's list): `*` alone
    /// allows any origin.
    pub fn from_list<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, ServeError> {
        let entries: Vec<&str> = entries
            .into_iter()
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if entries.is_empty() {
            return Ok(Self::Off);
        }
        if entries.contains(&"*") {
            if entries.len() > 1 {
                return Err(ServeError::Cors {
                    reason: "`*` allows every origin; give it alone, not in a list".into(),
                });
            }
            return Ok(Self::Any);
        }
        let mut origins = Vec::with_capacity(entries.len());
        for e in entries {
            let rest = e
                .strip_prefix("http://")
                .or_else(|| e.strip_prefix("https://"));
            let ok = rest.is_some_and(|host| {
                !host.is_empty()
                    && !host.contains('/')
                    && host.bytes().all(|b| b.is_ascii_graphic())
            });
            if !ok {
                return Err(ServeError::Cors {
                    reason: format!(
                        "`{e}` is not an origin: write scheme://host[:port] \
                         (http or https, no path or trailing slash), or `*`"
                    ),
                });
            }
            origins.push(e.to_ascii_lowercase());
        }
        Ok(Self::List(origins))
    }

    /// The `Access-Control-Allow-Origin` value for a request from
    /// `origin`, when that origin may call.
    fn allow(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        match self {
            Self::Off => None,
            Self::Any => Some(HeaderValue::from_static("*")),
            Self::List(list) => {
                let origin = origin?;
                let text = origin.to_str().ok()?.to_ascii_lowercase();
                list.contains(&text).then(|| origin.clone())
            }
        }
    }

    fn is_list(&self) -> bool {
        matches!(self, Self::List(_))
    }
}

/// The methods the endpoints take.
const METHODS: &str = "GET, POST, OPTIONS";
/// Request headers always allowed; a preflight's own list is added.
const HEADERS: &str =
    "authorization, content-type, x-edgecloud-policy, x-edgecloud-deadline-ms, x-request-id, \
idempotency-key";
/// Response headers a page may read.
const EXPOSED: &str = "x-edgecloud-run-id, x-edgecloud-route, x-edgecloud-policy, \
x-edgecloud-deadline-ms, x-edgecloud-status, x-edgecloud-lane, x-edgecloud-elapsed-ms, \
x-edgecloud-late-workers, x-edgecloud-lanes, x-edgecloud-replay, x-edgecloud-switch, x-request-id, retry-after";
/// How long a browser may reuse a preflight's answer, in seconds
/// (Chromium caps it at 2 hours).
const MAX_AGE: &str = "7200";

/// The answer to a preflight, when CORS is on and `method` and `headers`
/// are one; `None`: an ordinary request.
pub(crate) fn preflight(
    cors: &CorsOrigins,
    method: &Method,
    headers: &HeaderMap,
) -> Option<Response<Body>> {
    if *cors == CorsOrigins::Off
        || method != Method::OPTIONS
        || !headers.contains_key(ORIGIN)
        || !headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
    {
        return None;
    }
    let Some(allow) = cors.allow(headers.get(ORIGIN)) else {
        let e = ApiError::new(
            403,
            INVALID_REQUEST,
            "this origin may not call this server (see --cors-origins)",
        )
        .code("cors_origin_not_allowed");
        let mut r = error_response(&e);
        r.headers_mut()
            .insert(VARY, HeaderValue::from_static("Origin"));
        return Some(r);
    };
    let mut r = Response::new(super::respond::full(""));
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    if cors.is_list() {
        h.insert(VARY, HeaderValue::from_static("Origin"));
    }
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(METHODS),
    );
    // The headers a client library adds of its own (the openai package's
    // `x-stainless-*`) are allowed too: what it asks for is echoed.
    let asked = headers
        .get(ACCESS_CONTROL_REQUEST_HEADERS)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let allowed = match asked {
        Some(asked) => HeaderValue::from_str(&format!("{HEADERS}, {asked}"))
            .unwrap_or(HeaderValue::from_static(HEADERS)),
        None => HeaderValue::from_static(HEADERS),
    };
    h.insert(ACCESS_CONTROL_ALLOW_HEADERS, allowed);
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(MAX_AGE));
    Some(r)
}

/// Adds the CORS headers of a response to a request from `origin`.
pub(crate) fn decorate(cors: &CorsOrigins, origin: Option<&HeaderValue>, h: &mut HeaderMap) {
    if cors.is_list() {
        // A cache must not give one origin's answer to another.
        h.append(VARY, HeaderValue::from_static("Origin"));
    }
    if let Some(allow) = cors.allow(origin) {
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow);
        h.insert(
            ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_as_any_a_list_or_off_and_bad_ones_are_named() {
        assert_eq!(CorsOrigins::parse("").unwrap(), CorsOrigins::Off);
        assert_eq!(CorsOrigins::parse(" * ").unwrap(), CorsOrigins::Any);
        assert_eq!(
            CorsOrigins::parse("https://A.example:8443, http://localhost:3000").unwrap(),
            CorsOrigins::List(vec![
                "https://a.example:8443".into(),
                "http://localhost:3000".into()
            ])
        );
        for bad in [
            "a.example",
            "https://a.example/",
            "ftp://x",
            "*,https://a.example",
        ] {
            let e = CorsOrigins::parse(bad).unwrap_err().to_string();
            assert!(e.contains("origin") || e.contains('*'), "{bad}: {e}");
        }
    }

    #[test]
    fn a_listed_origin_is_echoed_an_unlisted_one_gets_nothing() {
        let cors = CorsOrigins::parse("https://a.example").unwrap();
        let listed = HeaderValue::from_static("https://A.example");
        assert_eq!(cors.allow(Some(&listed)), Some(listed.clone()));
        let other = HeaderValue::from_static("https://b.example");
        assert_eq!(cors.allow(Some(&other)), None);
        assert_eq!(cors.allow(None), None);
        let mut h = HeaderMap::new();
        decorate(&cors, Some(&other), &mut h);
        assert_eq!(h[VARY], "Origin");
        assert!(!h.contains_key(ACCESS_CONTROL_ALLOW_ORIGIN));
        let mut h = HeaderMap::new();
        decorate(&CorsOrigins::Off, Some(&listed), &mut h);
        assert!(h.is_empty());
    }
}
