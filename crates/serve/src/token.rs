//! The bearer token ([`BearerToken`]): checked when built, compared in
//! constant time, never printed. It must not decide which endpoints need
//! it (the router does).

use super::ServeError;
use std::fmt;

/// A bearer token. `Debug` and `Display` print `BearerToken(***)`.
#[derive(Clone)]
pub struct BearerToken(Box<str>);

impl BearerToken {
    /// Wraps a token (visible ASCII, at least 1 character).
    pub fn new(token: impl Into<String>) -> Result<Self, ServeError> {
        let token: String = token.into();
        if token.is_empty() || !token.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(ServeError::Token {
                reason: "a token must be non-empty visible ASCII without spaces".into(),
            });
        }
        Ok(Self(token.into_boxed_str()))
    }

    /// Reads the token from the environment variable `var`, which must be
    /// set (naming a variable asks for a token).
    pub fn from_env(var: &str) -> Result<Self, ServeError> {
        match std::env::var(var) {
            Ok(v) => Self::new(v).map_err(|_| ServeError::Token {
                reason: format!(
                    "environment variable {var} must hold visible ASCII without spaces"
                ),
            }),
            Err(_) => Err(ServeError::Token {
                reason: format!("environment variable {var} is not set (or not Unicode)"),
            }),
        }
    }

    /// Compares in time independent of where the first difference is.
    pub(crate) fn matches(&self, given: &str) -> bool {
        use subtle::ConstantTimeEq;
        // Constant time in the content; the length may leak, as it does
        // for every bearer token on the wire.
        bool::from(self.0.as_bytes().ct_eq(given.as_bytes()))
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(***)")
    }
}

impl fmt::Display for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(***)")
    }
}
