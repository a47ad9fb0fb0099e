//! What a run on a route resolves to when it names nothing itself: the
//! route's table, else `[harness]`'s, else the harness's default.

use super::HarnessConfig;
use crate::harness::{RouteConfig, DEFAULT_ROUTE};
use crate::lane::Lane;
use std::time::Duration;

impl HarnessConfig {
    /// The `[routes.NAME]` table a run on `route` reads (`None`: the
    /// default route, `[harness] default_route`); `None` for the
    /// `[harness]` table alone.
    fn route_table(&self, route: Option<&str>) -> Option<&RouteConfig> {
        route
            .or(self.harness.default_route.as_deref())
            .and_then(|r| self.routes.get(r))
    }

    /// Where `POST /v1/embeddings` goes on `route` (`None`: the default
    /// route): the route's `embeddings`, else `[harness]`'s, else the
    /// local lane. Never the cloud by default, whatever the policy:
    /// vectors of two models are not comparable, so switching an index
    /// to another model must be a decision written down.
    pub fn embeddings_lane(&self, route: Option<&str>) -> Lane {
        self.route_table(route)
            .and_then(|r| r.embeddings)
            .or(self.harness.embeddings)
            .unwrap_or(Lane::Local)
    }

    /// The cloud model a run on `route` asks for (`None`: the default
    /// route), when the route names one (else the lane's `[cloud] model`).
    pub fn route_cloud_model(&self, route: Option<&str>) -> Option<&str> {
        self.route_table(route)
            .and_then(|r| r.cloud_model.as_deref())
    }

    /// The deadline of a run on `route` (`None`: the default route) that
    /// names none of its own: the route's `deadline_ms`, else
    /// `[harness]`'s, else the default (5 s), as the harness resolves it.
    pub fn route_deadline(&self, route: Option<&str>) -> Duration {
        RouteConfig::deadline_of(
            &self.harness,
            self.route_table(route),
            route.unwrap_or(DEFAULT_ROUTE),
        )
    }
}
