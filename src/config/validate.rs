//! Checks of a whole file that no single table can make: route
//! references, keys that belong in another table, lane settings, routes
//! that need a cloud lane.

use super::HarnessConfig;
use crate::harness::{ConfigError, Setting};
use crate::lane::Lane;

impl HarnessConfig {
    /// Checks what can be checked without the builder's registered
    /// callbacks: policy names and parameters, ranges, route references.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.harness.resolved_policy("harness")?;
        self.harness.cloud_budget("harness")?;
        for (name, r) in &self.routes {
            r.cloud_budget(&format!("routes.{name}"))?;
        }
        for (name, r) in &self.routes {
            if r.default_route.is_some() {
                return Err(ConfigError::Invalid {
                    key: format!("routes.{name}.default_route"),
                    setting: Setting::Route,
                    detail: "default_route belongs in [harness]".into(),
                });
            }
            r.resolved_policy(&format!("routes.{name}"))?;
        }
        if self.harness.model.is_some() {
            return Err(ConfigError::Invalid {
                key: "harness.model".into(),
                setting: Setting::Route,
                detail: "model belongs in a [routes.NAME] table (the route's local model); \
                         the default model is the first of [[models]]"
                    .into(),
            });
        }
        if self.harness.cloud_model.is_some() {
            return Err(ConfigError::Invalid {
                key: "harness.cloud_model".into(),
                setting: Setting::Route,
                detail: "cloud_model belongs in a [routes.NAME] table (the route's cloud model); \
                         the default is [cloud] model"
                    .into(),
            });
        }
        #[cfg(feature = "local")]
        if let Some(local) = &self.local {
            crate::local::check_spec_settings(local.draft_max, local.draft_min).map_err(|e| {
                ConfigError::Invalid {
                    key: format!("local.{}", e.key),
                    setting: Setting::Lane,
                    detail: e.detail,
                }
            })?;
        }
        if let Some(d) = &self.harness.default_route {
            if !self.routes.contains_key(d) {
                return Err(ConfigError::Invalid {
                    key: "harness.default_route".into(),
                    setting: Setting::Route,
                    detail: format!("names route `{d}`, which is not defined"),
                });
            }
        }
        Ok(())
    }

    /// Checks that every route asking for the cloud lane by name
    /// (`cloud_model`, `embeddings = "cloud"`) has one: call it once the
    /// command line's lane settings are merged in (a `--base-url` makes
    /// the cloud lane the file may lack).
    pub fn check_cloud_routes(&self) -> Result<(), ConfigError> {
        #[cfg(feature = "cloud")]
        if self.cloud.is_some() {
            return Ok(());
        }
        let tables = std::iter::once(("harness".to_string(), &self.harness)).chain(
            self.routes
                .iter()
                .map(|(name, r)| (format!("routes.{name}"), r)),
        );
        for (key, r) in tables {
            let asks = match (&r.cloud_model, r.embeddings) {
                (Some(m), _) => Some(("cloud_model", format!("names the cloud model `{m}`"))),
                (None, Some(Lane::Cloud)) => Some((
                    "embeddings",
                    "sends embeddings to the cloud lane".to_string(),
                )),
                _ => None,
            };
            if let Some((field, what)) = asks {
                return Err(ConfigError::invalid_field(
                    &key,
                    Setting::Route,
                    field,
                    format!(
                        "[{key}] {what}, but no cloud lane is configured \
                         ([cloud] in the config, or --base-url)"
                    ),
                ));
            }
        }
        Ok(())
    }
}
