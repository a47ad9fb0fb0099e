//! Turns a non-success HTTP answer into the matching [`CloudError`]
//! variant: picks the server's message out of whatever error body shape it
//! sent (scrubbed of the key), and parses `retry-after-ms` / `Retry-After`
//! (seconds or an HTTP date). Pure functions; the body was read elsewhere.

use super::error::CloudError;
use super::secret::Scrubber;
use reqwest::header::HeaderMap;
use std::time::{Duration, SystemTime};

/// Longest server message kept in an error.
pub(crate) const MAX_MESSAGE_CHARS: usize = 500;

/// The error for a response whose status is not 2xx.
pub(crate) fn error_for(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    scrubber: &Scrubber,
    now: SystemTime,
) -> CloudError {
    let message = scrubber.scrub(&server_message(body), MAX_MESSAGE_CHARS);
    match status {
        300..=399 => CloudError::Redirect { status },
        401 | 403 => CloudError::Auth { status, message },
        404 => CloudError::NotFound { message },
        429 => CloudError::RateLimited {
            retry_after: retry_after(headers, now),
            message,
        },
        500..=599 => CloudError::Server { status, message },
        _ => CloudError::HttpStatus {
            status,
            message,
            code: server_code(body).map(|c| scrubber.scrub(&c, MAX_MESSAGE_CHARS)),
        },
    }
}

/// The message inside an error body: the JSON error's message if any, else
/// the start of the body as text.
fn server_message(body: &[u8]) -> String {
    if let Some(m) = edgecloud_wire::openai::error_message(body) {
        return m;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        "(empty body)".to_owned()
    } else {
        text.to_owned()
    }
}

/// The error code inside a JSON error body, if any.
fn server_code(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    edgecloud_wire::openai::provider_error(&value)?.1
}

/// How long a 429 asks us to wait: `retry-after-ms` (milliseconds, as
/// OpenAI and Azure send) first, then `Retry-After` as delay-seconds or as
/// an HTTP date (a date in the past means "now").
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = header_str(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = header_str(headers, "retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date = parse_http_date(value)?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

/// Parses an HTTP date in any of the three forms RFC 9110 section 5.6.7
/// says a recipient must accept: IMF-fixdate, RFC 850 and asctime.
pub(crate) fn parse_http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CloudErrorKind;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn http_dates() {
        let t = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            784_111_777
        );
        let t = parse_http_date("Thu, 29 Feb 2024 23:59:59 GMT").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_709_251_199
        );
        for bad in [
            "",
            "Sun 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
        ] {
            assert!(parse_http_date(bad).is_none(), "{bad}");
        }
        // The obsolete forms a recipient must still accept.
        let fixdate = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), fixdate);
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), fixdate);
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_700);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]),
                now
            ),
            Some(Duration::from_secs(77))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]),
                now
            ),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]),
                now
            ),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn statuses_map_to_variants() {
        let s = Scrubber::new(Some(super::super::ApiKey::new("sk-K")));
        let now = SystemTime::now();
        let h = HeaderMap::new();
        let kind = |status: u16, body: &[u8]| error_for(status, &h, body, &s, now);
        assert_eq!(kind(401, b"").kind(), CloudErrorKind::Auth);
        assert_eq!(kind(403, b"").kind(), CloudErrorKind::Auth);
        assert_eq!(kind(404, b"").kind(), CloudErrorKind::NotFound);
        assert_eq!(kind(429, b"").kind(), CloudErrorKind::RateLimited);
        assert_eq!(kind(502, b"").kind(), CloudErrorKind::Server);
        assert_eq!(kind(400, b"").kind(), CloudErrorKind::HttpStatus);
        assert_eq!(kind(308, b"").kind(), CloudErrorKind::Redirect);
        let e = kind(
            401,
            br#"{"error":{"message":"Incorrect API key provided: sk-K","type":"invalid_request_error"}}"#,
        );
        assert_eq!(
            e.to_string(),
            "the server refused the credentials (HTTP 401): Incorrect API key provided: ***"
        );
        assert!(kind(500, b"<html>boom</html>")
            .to_string()
            .ends_with("<html>boom</html>"));
    }
}
