//! The API key as a redacting type. Owns the only way to read the key's
//! value ([`ApiKey::expose_secret`]) and the scrubbing of server-sent text
//! that might echo it back. It must never implement `Serialize`, and its
//! `Debug`/`Display` must never print the value.

use serde::{Deserialize, Deserializer};
use std::fmt;

/// Whether `name` can name an environment variable (letters, digits and
/// `_`, not starting with a digit): a key pasted where its variable's name
/// belongs is refused before it can be echoed anywhere.
pub(crate) fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The complaint about a variable name that is not one (maybe a key).
pub(crate) const NOT_A_VAR_NAME: &str = "the API key variable must be an environment variable \
     name (letters, digits and underscores), not a key";

/// What `Debug` and `Display` print instead of the key.
const REDACTED: &str = "ApiKey(***)";

/// An API key. `Debug` and `Display` print `ApiKey(***)`; the value leaves
/// this type only through [`ApiKey::expose_secret`], which the cloud lane
/// calls once, to build the (sensitive) `Authorization` header.
///
/// It deserialises from a plain string (so a config file can carry it) and
/// deliberately cannot be serialised.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Box<str>);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into().into_boxed_str())
    }

    /// Reads the key from the environment variable `var`. An unset or empty
    /// variable is `Ok(None)` (local servers need no key); a value that is
    /// not Unicode is an error that names the variable, never the value.
    pub fn from_env(var: &str) -> Result<Option<Self>, super::CloudError> {
        if !is_env_var_name(var) {
            // Never echo it: a key pasted where the name belongs is common.
            return Err(super::CloudError::InvalidConfig {
                reason: NOT_A_VAR_NAME.to_owned(),
            });
        }
        match std::env::var(var) {
            Ok(value) if value.is_empty() => Ok(None),
            Ok(value) => Ok(Some(Self::new(value))),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(super::CloudError::InvalidConfig {
                reason: format!("environment variable {var} does not hold valid Unicode"),
            }),
        }
    }

    /// The key itself. Call it only to put the key where it must go.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }

    /// Whether the key can travel in an HTTP header (visible ASCII only).
    pub(crate) fn is_header_safe(&self) -> bool {
        !self.0.is_empty() && self.0.bytes().all(|b| (0x21..0x7f).contains(&b))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for ApiKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::new)
    }
}

/// Removes the key from text that came from the server (error messages,
/// parser details) before that text is stored in an error or logged: a
/// hostile or careless server may echo the `Authorization` header back.
#[derive(Clone, Default)]
pub(crate) struct Scrubber {
    key: Option<ApiKey>,
}

impl Scrubber {
    pub(crate) fn new(key: Option<ApiKey>) -> Self {
        Self { key }
    }

    /// The text with every occurrence of the key replaced by `***`, cut to
    /// `max_chars` characters and with control characters turned to spaces
    /// (so a message cannot forge extra log lines).
    pub(crate) fn scrub(&self, text: &str, max_chars: usize) -> String {
        let replaced = match &self.key {
            Some(key) if !key.0.is_empty() => text.replace(&*key.0, "***"),
            _ => text.to_owned(),
        };
        let mut out: String = replaced
            .chars()
            .take(max_chars)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if replaced.chars().nth(max_chars).is_some() {
            out.push('…');
        }
        out
    }
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubber")
            .field("has_key", &self.key.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_redact() {
        let key = ApiKey::new("sk-very-secret");
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        assert_eq!(format!("{key}"), "ApiKey(***)");
        assert_eq!(format!("{:?}", Some(key.clone())), "Some(ApiKey(***))");
        assert_eq!(key.expose_secret(), "sk-very-secret");
    }

    #[test]
    fn deserialises_from_a_string() {
        #[derive(Deserialize)]
        struct Holder {
            key: ApiKey,
        }
        let h: Holder = toml::from_str("key = \"sk-from-file\"").unwrap();
        assert_eq!(h.key.expose_secret(), "sk-from-file");
    }

    #[test]
    fn from_env_refuses_a_key_as_the_name_without_echo() {
        let err = ApiKey::from_env("sk-proj-SECRET").unwrap_err();
        assert!(!format!("{err} {err:?}").contains("SECRET"));
        assert!(ApiKey::from_env("EDGECLOUD_SURELY_UNSET_VAR_42")
            .unwrap()
            .is_none());
    }

    #[test]
    fn header_safety() {
        assert!(ApiKey::new("sk-abc_123").is_header_safe());
        assert!(!ApiKey::new("sk abc").is_header_safe());
        assert!(!ApiKey::new("sk\nabc").is_header_safe());
        assert!(!ApiKey::new("").is_header_safe());
    }

    #[test]
    fn scrubber_removes_key_and_controls() {
        let s = Scrubber::new(Some(ApiKey::new("sk-XYZ")));
        assert_eq!(s.scrub("bad key sk-XYZ\nsk-XYZ", 100), "bad key *** ***");
        assert_eq!(s.scrub("abcdef", 3), "abc…");
        assert_eq!(Scrubber::new(None).scrub("sk-XYZ", 100), "sk-XYZ");
    }
}
