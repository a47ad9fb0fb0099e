//! The price table (per cloud model: dollars per million input, cached
//! input and output tokens) and what one answer cost ([`Cost`]): the
//! cloud's spend from the provider's counts, the local lane's tokens, and
//! the estimated cost of the same answer from the cloud alone. Pure
//! arithmetic over a settled run's lane reports; it must not read the
//! clock, the store or the network. No price is built in: a model the
//! table does not name is unpriced (`cloud_usd: null`), never guessed.

use crate::harness::error::{ConfigError, Setting};
use crate::harness::outcome::LaneReport;
use crate::lane::Lane;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One cloud model's prices, in dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Prompt (input) tokens.
    pub input: f64,
    /// Completion (output) tokens.
    pub output: f64,
    /// Prompt tokens the provider served from its prompt cache, when it
    /// reports them (`input` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
}

impl Price {
    /// Dollars for `prompt` input tokens (of which `cached` were cached)
    /// and `completion` output tokens.
    pub fn usd(&self, prompt: u64, cached: u64, completion: u64) -> f64 {
        let cached = cached.min(prompt);
        let fresh = (prompt - cached) as f64 * self.input;
        let cached = cached as f64 * self.cached_input.unwrap_or(self.input);
        (fresh + cached + completion as f64 * self.output) / 1e6
    }

    fn check(&self, key: &str) -> Result<(), ConfigError> {
        let fields = [
            ("input", Some(self.input)),
            ("output", Some(self.output)),
            ("cached_input", self.cached_input),
        ];
        for (field, v) in fields {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return Err(ConfigError::invalid_field(
                        key,
                        Setting::Ledger,
                        field,
                        format!("must be a number of dollars per million tokens >= 0, not {v}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Prices by cloud model name (the `[prices."MODEL"]` tables of the
/// configuration file, or [`HarnessBuilder::prices`](crate::harness::HarnessBuilder::prices)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable(pub BTreeMap<String, Price>);

impl PriceTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) one model's prices.
    pub fn with(mut self, model: impl Into<String>, price: Price) -> Self {
        self.0.insert(model.into(), price);
        self
    }

    /// The prices of `model`, when the table names it.
    pub fn get(&self, model: &str) -> Option<&Price> {
        self.0.get(model)
    }

    /// Whether the table names no model.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks every price (finite, >= 0) and that every model is one the
    /// harness can ask for (`known`: the cloud lane's model and the routes'
    /// `cloud_model`s); errors name the key (`prices.MODEL.input`).
    pub fn check(&self, known: &[String]) -> Result<(), ConfigError> {
        for (model, price) in &self.0 {
            let key = format!("prices.{model}");
            price.check(&key)?;
            if !known.iter().any(|k| k == model) {
                return Err(ConfigError::Invalid {
                    key,
                    setting: Setting::Ledger,
                    detail: format!(
                        "no cloud lane or route uses the model `{model}` (the models in use: {}); \
                         a price for a model never asked for is a typo waiting to cost money",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known
                                .iter()
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ),
                });
            }
        }
        Ok(())
    }
}

/// What one answer cost and saved (docs/cost.md). Token counts keep
/// their sources apart (docs/DESIGN.md points 9 and 19): the cloud's are
/// the provider's, the local lane's its tokenizer's, and the cloud-only
/// cost from local counts is labelled an estimate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Cost {
    /// The model the run's cloud lane asks for (the route's `cloud_model`,
    /// else the lane's own), when there is a cloud lane.
    pub cloud_model: Option<String>,
    /// Whether the price table names that model (else every `_usd`
    /// figure is `null`).
    pub priced: bool,
    /// Prompt tokens the cloud billed for this run, as the provider
    /// reported them (0 when the cloud lane did not run).
    pub cloud_prompt_tokens: u64,
    /// Of those, the ones the provider served from its prompt cache.
    pub cloud_cached_prompt_tokens: u64,
    /// Completion tokens the cloud billed, as the provider reported them.
    pub cloud_completion_tokens: u64,
    /// Dollars spent on the cloud for this run: the provider's counts
    /// times the configured price, whether or not its answer won.
    pub cloud_usd: Option<f64>,
    /// The cloud lane ran but its provider reported no usage (a stream
    /// cut or cancelled before its usage chunk): the provider may still
    /// bill it, and `cloud_usd` does not include it.
    pub cloud_usage_unknown: bool,
    /// Prompt tokens of the local lane (its tokenizer).
    pub local_prompt_tokens: u64,
    /// Completion tokens of the local lane (its tokenizer).
    pub local_completion_tokens: u64,
    /// What this answer would have cost from the cloud alone: the cloud
    /// answer's own cost when the cloud answered, else an estimate from
    /// the local lane's token counts at the cloud model's price (the
    /// tokenizers differ).
    pub cloud_only_usd_estimate: Option<f64>,
    /// `cloud_only_usd_estimate - cloud_usd`: what the local lane saved
    /// (an estimate; negative when both lanes ran and the cloud's answer
    /// was not used).
    pub saved_usd_estimate: Option<f64>,
    /// The route's cloud budget as this run found it, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::BudgetReport>,
}

impl Cost {
    /// The cost of a settled run from its lane reports.
    pub(crate) fn of(
        lanes: &[LaneReport],
        winner: Option<Lane>,
        model: Option<String>,
        price: Option<&Price>,
    ) -> Cost {
        let mut c = Cost {
            priced: price.is_some(),
            cloud_model: model,
            ..Cost::default()
        };
        for r in lanes {
            match r.lane {
                Lane::Cloud if r.status.ran() => {
                    let t = &r.tokens;
                    match (t.provider_prompt, t.provider_completion) {
                        (None, None) => c.cloud_usage_unknown = true,
                        (p, q) => {
                            c.cloud_prompt_tokens = p.unwrap_or(0);
                            c.cloud_completion_tokens = q.unwrap_or(0);
                            c.cloud_cached_prompt_tokens = t.provider_cached_prompt.unwrap_or(0);
                        }
                    }
                }
                Lane::Local => {
                    c.local_prompt_tokens = r.tokens.local_prompt.unwrap_or(0);
                    c.local_completion_tokens = r.tokens.local_completion.unwrap_or(0);
                }
                Lane::Cloud => {}
            }
        }
        let Some(p) = price else {
            return c;
        };
        let spent = p.usd(
            c.cloud_prompt_tokens,
            c.cloud_cached_prompt_tokens,
            c.cloud_completion_tokens,
        );
        c.cloud_usd = Some(spent);
        let local_ran = c.local_prompt_tokens + c.local_completion_tokens > 0;
        c.cloud_only_usd_estimate = match winner {
            Some(Lane::Cloud) if !c.cloud_usage_unknown => Some(spent),
            _ if local_ran => Some(p.usd(c.local_prompt_tokens, 0, c.local_completion_tokens)),
            _ => None,
        };
        c.saved_usd_estimate = c.cloud_only_usd_estimate.map(|e| e - spent);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::outcome::LaneStatus;

    fn report(lane: Lane, status: LaneStatus) -> LaneReport {
        LaneReport::new(lane, status)
    }

    #[test]
    fn the_cloud_is_billed_by_provider_counts_and_local_counts_only_estimate() {
        let price = Price {
            input: 2.0,
            output: 8.0,
            cached_input: Some(0.5),
        };
        // 1000 prompt tokens (400 cached) and 500 completion tokens.
        assert!(
            (price.usd(1000, 400, 500) - (600.0 * 2.0 + 400.0 * 0.5 + 4000.0) / 1e6).abs() < 1e-15
        );
        let mut local = report(Lane::Local, LaneStatus::Completed);
        local.tokens.local_prompt = Some(100);
        local.tokens.local_completion = Some(50);
        let mut cloud = report(Lane::Cloud, LaneStatus::Cancelled);
        cloud.tokens.provider_prompt = Some(120);
        cloud.tokens.provider_completion = Some(10);
        // A race the local lane won: the cloud's tokens are still paid.
        let c = Cost::of(
            &[local.clone(), cloud.clone()],
            Some(Lane::Local),
            Some("m".into()),
            Some(&price),
        );
        let spent = (120.0 * 2.0 + 10.0 * 8.0) / 1e6;
        assert_eq!(c.cloud_usd, Some(spent));
        let est = (100.0 * 2.0 + 50.0 * 8.0) / 1e6;
        assert_eq!(c.cloud_only_usd_estimate, Some(est));
        assert_eq!(c.saved_usd_estimate, Some(est - spent));
        assert!(!c.cloud_usage_unknown);
        // The cloud ran without reporting usage: unknown, not zero.
        let cut = report(Lane::Cloud, LaneStatus::Failed);
        let c = Cost::of(
            &[local, cut],
            Some(Lane::Local),
            Some("m".into()),
            Some(&price),
        );
        assert!(c.cloud_usage_unknown);
        // Unpriced: tokens, no dollars.
        let c = Cost::of(&[cloud], Some(Lane::Cloud), Some("m".into()), None);
        assert_eq!(
            (c.cloud_prompt_tokens, c.cloud_usd, c.priced),
            (120, None, false)
        );
    }

    #[test]
    fn bad_prices_and_unknown_models_name_their_key() {
        let bad = PriceTable::new().with(
            "m",
            Price {
                input: -1.0,
                output: 1.0,
                cached_input: None,
            },
        );
        let e = bad.check(&["m".into()]).unwrap_err().to_string();
        assert!(e.contains("prices.m.input") && e.contains(">= 0"), "{e}");
        let unknown = PriceTable::new().with(
            "gpt-typo",
            Price {
                input: 1.0,
                output: 1.0,
                cached_input: None,
            },
        );
        let e = unknown.check(&["gpt-4o".into()]).unwrap_err().to_string();
        assert!(e.contains("prices.gpt-typo") && e.contains("gpt-4o"), "{e}");
        let nan = PriceTable::new().with(
            "m",
            Price {
                input: 1.0,
                output: f64::NAN,
                cached_input: None,
            },
        );
        assert!(nan
            .check(&["m".into()])
            .unwrap_err()
            .to_string()
            .contains("prices.m.output"));
    }
}
