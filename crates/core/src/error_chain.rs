//! One line of text for an error and all its causes.
//!
//! Every error type in edgecloud names each cause once: its message is in
//! its own words, and the cause (ours or a third party's) is returned from
//! [`std::error::Error::source`], never repeated in the message. So a
//! message alone may be short ("could not start the local lane"); the whole
//! story is the chain. This module renders that chain for places that need
//! one string (JSON `message` fields, HTTP error bodies, lane reports). It
//! owns no error types.

use std::error::Error;

/// The error's message followed by each cause's, joined with `": "`, as
/// `anyhow` prints with `{:#}`. A cause whose text the line already ends
/// with is skipped, so a third-party error that repeats its own source is
/// still printed once.
///
/// ```
/// let err = std::io::Error::new(std::io::ErrorKind::Other, "disk full");
/// assert_eq!(edgecloud_core::error_chain(&err), "disk full");
/// ```
pub fn error_chain(err: &(dyn Error + 'static)) -> String {
    let mut line = String::new();
    let mut cur: Option<&(dyn Error + 'static)> = Some(err);
    while let Some(e) = cur {
        let text = e.to_string();
        if !text.is_empty() && !line.ends_with(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        cur = e.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn joins_each_cause_once() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
