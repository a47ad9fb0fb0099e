//! The ledger: what each answer cost and saved, a cloud budget per route
//! that holds across restarts, and idempotency keys whose retries do not
//! pay twice (docs/DESIGN.md point 19, docs/cost.md). `price` prices a
//! settled run, `budget` says where a route stands, `store` keeps the
//! spending and the recorded answers on disk, `idempotency` replays
//! them, `calendar` counts UTC days and months. The harness asks it at a
//! run's start (budget, replay) and tells it at settlement (spending,
//! answer); it must not run or decide anything else.

mod budget;
#[doc(hidden)]
pub mod calendar;
mod idempotency;
mod price;
mod store;

pub use budget::{
    BadBudget, BudgetPeriod, BudgetReport, BudgetState, BudgetUnit, CloudBudget, DEFAULT_LEAN_AT,
};
pub use idempotency::Replay;
pub(crate) use idempotency::{Begin, Idempotency, Ticket};
pub use price::{Cost, Price, PriceTable};
pub use store::{LedgerStore, Spent, StoreError, STORE_VERSION};

use super::route::RouteSettings;
use std::sync::Arc;

/// The ledger of one harness, shared by its instances.
#[derive(Default)]
pub(crate) struct Ledger {
    pub(crate) prices: PriceTable,
    pub(crate) store: Option<LedgerStore>,
    pub(crate) idempotency: Option<Arc<Idempotency>>,
}

impl Ledger {
    /// A route's budget as a run starting at `now_ms` finds it.
    pub(crate) fn budget(
        &self,
        route: &RouteSettings,
        now_ms: i64,
    ) -> Option<(CloudBudget, BudgetReport)> {
        let budget = route.cloud_budget?;
        let store = self.store.as_ref()?;
        let key = budget.period.key(now_ms.div_euclid(1000));
        let spent = store.spent(&route.name, &key);
        let spent = match budget.unit {
            BudgetUnit::Usd => spent.usd,
            BudgetUnit::Tokens => spent.tokens as f64,
        };
        Some((budget, budget.report(spent, now_ms)))
    }
}

/// What the ledger knows of one run: decided at its start, used at its
/// settlement.
pub(crate) struct RunLedger {
    pub(crate) ledger: Arc<Ledger>,
    /// The model the run's cloud lane asks for.
    pub(crate) cloud_model: Option<String>,
    /// The route's budget as the run found it.
    pub(crate) budget: Option<BudgetReport>,
    /// The key's first run records its answer.
    pub(crate) ticket: Option<Ticket>,
}

impl RunLedger {
    /// The budget, when it is spent: how long until it renews, and the
    /// note the cloud lane's report carries.
    pub(crate) fn cloud_refused(&self) -> Option<(std::time::Duration, String)> {
        let b = self
            .budget
            .as_ref()
            .filter(|b| b.state == BudgetState::Spent)?;
        Some((
            std::time::Duration::from_secs_f64(b.renews_in_ms / 1e3),
            format!(
                "cloud budget spent ({} of {}); renews at {}",
                spent_text(b),
                b.budget,
                b.renews_at
            ),
        ))
    }

    /// What a late cloud worker of this run adds to `route`'s spending
    /// when it returns after settlement (`None` without a store).
    pub(crate) fn late_spend(&self, route: &str) -> Option<LateSpend> {
        Some(LateSpend {
            store: self.ledger.store.clone()?,
            route: route.to_string(),
            price: self
                .cloud_model
                .as_deref()
                .and_then(|m| self.ledger.prices.get(m))
                .cloned(),
        })
    }

    /// Prices the settled `outcome`, adds its cloud spending to the store
    /// (when the cloud lane ran) and records its answer for its key.
    pub(crate) fn settle(self, route: &str, outcome: &mut super::Outcome) {
        let price = self
            .cloud_model
            .as_deref()
            .and_then(|m| self.ledger.prices.get(m));
        let mut cost = Cost::of(
            &outcome.lanes,
            outcome.winner,
            self.cloud_model.clone(),
            price,
        );
        cost.budget = self.budget;
        let cloud_ran = outcome
            .lanes
            .iter()
            .any(|r| r.lane == crate::lane::Lane::Cloud && r.status.ran());
        if let (Some(store), true) = (&self.ledger.store, cloud_ran) {
            store.record_spend(
                route,
                calendar::now_unix_ms().div_euclid(1000),
                Spent {
                    usd: cost.cloud_usd.unwrap_or(0.0),
                    tokens: cost.cloud_prompt_tokens + cost.cloud_completion_tokens,
                    runs: 1,
                },
            );
        }
        outcome.cost = cost;
        if let Some(t) = self.ticket {
            t.settle(outcome);
        }
    }
}

/// A late cloud worker's spending: its run settled before the provider
/// reported usage (the outcome counts it in `cloud_usage_unknown`); when
/// the worker returns with the provider's counts, they are priced and
/// added to the route's spending, so the budget sees what the provider
/// bills. The settled outcome and `/metrics` do not change.
pub(crate) struct LateSpend {
    store: LedgerStore,
    route: String,
    price: Option<Price>,
}

impl LateSpend {
    /// Adds what `late` (the cloud worker's candidate) says it used.
    pub(crate) fn record(&self, late: &crate::harness::backend::Candidate) {
        let t = &late.tokens;
        let (Some(prompt), Some(completion)) = (t.provider_prompt, t.provider_completion) else {
            return;
        };
        let cached = t.provider_cached_prompt.unwrap_or(0);
        self.store.record_spend(
            &self.route,
            calendar::now_unix_ms().div_euclid(1000),
            Spent {
                usd: self
                    .price
                    .as_ref()
                    .map_or(0.0, |p| p.usd(prompt, cached, completion)),
                tokens: prompt + completion,
                runs: 0,
            },
        );
    }
}

/// A budget's spending in its unit, for notes.
fn spent_text(b: &BudgetReport) -> String {
    if b.budget.contains("usd") {
        format!("${:.4}", b.spent)
    } else {
        format!("{} tokens", b.spent)
    }
}

/// The ledger at a glance (serve's `/health`): each route's cloud
/// spending today and this month, and its budget.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct LedgerReport {
    /// The store's directory.
    pub store: std::path::PathBuf,
    /// By route name.
    pub routes: std::collections::BTreeMap<String, RouteLedger>,
}

/// One route's spending and budget.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct RouteLedger {
    /// Today (UTC).
    pub today: Spent,
    /// This month (UTC).
    pub month: Spent,
    /// Its budget now, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetReport>,
}

impl Ledger {
    /// The report over `routes`; `None` without a store.
    pub(crate) fn report<'a>(
        &self,
        routes: impl Iterator<Item = &'a RouteSettings>,
    ) -> Option<LedgerReport> {
        let store = self.store.as_ref()?;
        let now_ms = calendar::now_unix_ms();
        let now_s = now_ms.div_euclid(1000);
        let (day, month) = (calendar::day_key(now_s), calendar::month_key(now_s));
        let routes = routes
            .map(|r| {
                (
                    r.name.clone(),
                    RouteLedger {
                        today: store.spent(&r.name, &day),
                        month: store.spent(&r.name, &month),
                        budget: self.budget(r, now_ms).map(|(_, b)| b),
                    },
                )
            })
            .collect();
        Some(LedgerReport {
            store: store.dir().to_path_buf(),
            routes,
        })
    }
}
