//! Starting what a file describes: its lanes (`[local]`, `[cloud]`) on a
//! builder, and a whole harness from the file alone. It lives apart from
//! the reading because it loads models and opens clients.

use super::HarnessConfig;
#[cfg(feature = "cloud")]
use crate::harness::CloudBackend;
#[cfg(feature = "local")]
use crate::harness::LocalBackend;
use crate::harness::PriceTable;
use crate::harness::{Harness, HarnessBuilder, HarnessError, RouteConfig, RouteTables, StartLanes};
#[cfg(any(feature = "local", feature = "cloud"))]
use crate::lane::Lane;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

impl HarnessConfig {
    /// Starts the configured lanes and builds a harness with these settings
    /// (for callbacks registered by name, use
    /// [`HarnessBuilder::config`] and [`HarnessBuilder::lanes_from`]).
    pub fn build(&self) -> Result<Harness, HarnessError> {
        HarnessBuilder::new()
            .config(self)?
            .lanes_from(self)?
            .build()
    }
}

impl RouteTables for HarnessConfig {
    fn defaults(&self) -> &RouteConfig {
        &self.harness
    }

    fn routes(&self) -> &BTreeMap<String, RouteConfig> {
        &self.routes
    }

    fn prices(&self) -> Option<&PriceTable> {
        self.prices.as_ref()
    }

    fn ledger_store(&self) -> Option<(&Path, Duration)> {
        self.ledger.as_ref().map(|l| {
            (
                l.store.as_path(),
                Duration::from_secs(
                    l.idempotency_window_s
                        .unwrap_or(super::DEFAULT_IDEMPOTENCY_WINDOW_S),
                ),
            )
        })
    }
}

impl StartLanes for HarnessConfig {
    /// `[local]`: loads the model (blocking), one lane per instance over
    /// one shared model; `[cloud]`: checks the settings and reads the key.
    /// A build without a lane's cargo feature has no such section (parsing
    /// rejects it).
    #[cfg_attr(
        not(any(feature = "local", feature = "cloud")),
        allow(unused_mut, clippy::needless_return)
    )]
    fn start_lanes(&self, builder: HarnessBuilder) -> Result<HarnessBuilder, HarnessError> {
        let mut builder = builder;
        #[cfg(feature = "local")]
        if let Some(local) = &self.local {
            let backends = LocalBackend::start_shared(local.clone(), builder.instance_count())
                .map_err(|e| HarnessError::LaneStart {
                    lane: Lane::Local,
                    source: Box::new(e),
                })?;
            builder = builder.local_per_instance(
                backends
                    .into_iter()
                    .map(|b| std::sync::Arc::new(b) as std::sync::Arc<dyn crate::Backend>)
                    .collect(),
            );
        }
        #[cfg(feature = "cloud")]
        if let Some(cloud) = &self.cloud {
            let backend =
                CloudBackend::start(cloud.clone()).map_err(|e| HarnessError::LaneStart {
                    lane: Lane::Cloud,
                    source: Box::new(e),
                })?;
            builder = builder.cloud(backend);
        }
        Ok(builder)
    }
}
