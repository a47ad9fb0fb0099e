//! Reading the file: TOML text or a path into a [`HarnessConfig`],
//! checked (`validate`) before it is handed out. A `[local]` or `[cloud]`
//! section this build has no lane for is refused by name.

use super::HarnessConfig;
use crate::harness::{ConfigError, Setting};
use std::path::{Path, PathBuf};

/// Refuses a `[local]` or `[cloud]` section that this build has no lane for
/// (its cargo feature is off), in those words rather than serde's "unknown
/// field".
pub(super) fn lanes_built(text: &str) -> Result<(), ConfigError> {
    let missing: Vec<&str> = [
        ("local", cfg!(not(feature = "local"))),
        ("cloud", cfg!(not(feature = "cloud"))),
    ]
    .into_iter()
    .filter_map(|(lane, missing)| missing.then_some(lane))
    .collect();
    refuse_sections(text, &missing)
}

/// The first of `lanes` that `text` has a section for, as an error. Text
/// that is not TOML is left to the real parse to report.
pub(super) fn refuse_sections(text: &str, lanes: &[&str]) -> Result<(), ConfigError> {
    if lanes.is_empty() {
        return Ok(());
    }
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(());
    };
    match lanes.iter().find(|lane| table.contains_key(**lane)) {
        Some(lane) => Err(ConfigError::Invalid {
            key: (*lane).into(),
            setting: Setting::Lane,
            detail: format!(
                "this build of edgecloud has no {lane} lane (built without the `{lane}` cargo feature)"
            ),
        }),
        None => Ok(()),
    }
}

impl HarnessConfig {
    /// Parses TOML text.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::parse(text, None)
    }

    /// Reads and parses a file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, Some(path.to_path_buf()))
    }

    fn parse(text: &str, path: Option<PathBuf>) -> Result<Self, ConfigError> {
        lanes_built(text)?;
        let cfg: HarnessConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path,
            detail: e.to_string().trim_end().to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }
}
