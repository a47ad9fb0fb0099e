//! A route's cloud budget ([`CloudBudget`]: dollars or tokens per UTC day
//! or month), read from text (`"5 usd/day"`, `"$20/month"`,
//! `"2000000 tokens/month"`), and what a run finds when it starts
//! ([`BudgetReport`]): under it, leaning local, or spent and until when.
//! It decides only from the figures it is given; the spending itself is
//! kept by the store.

use super::calendar;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetUnit {
    /// Dollars, from the price table (the route's cloud model must be
    /// priced).
    Usd,
    /// Cloud tokens, prompt and completion together, as the provider
    /// reported them.
    Tokens,
}

/// How long a budget lasts before it renews (UTC calendar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    /// Renews at 00:00 UTC.
    Day,
    /// Renews at 00:00 UTC on the first of the month.
    Month,
}

impl BudgetPeriod {
    /// The period's key in the store (`2026-12-06` or `2026-12`).
    pub(crate) fn key(self, unix_s: i64) -> String {
        match self {
            BudgetPeriod::Day => calendar::day_key(unix_s),
            BudgetPeriod::Month => calendar::month_key(unix_s),
        }
    }

    /// When the period holding `unix_s` ends (Unix seconds).
    pub(crate) fn renews_at(self, unix_s: i64) -> i64 {
        match self {
            BudgetPeriod::Day => calendar::next_day(unix_s),
            BudgetPeriod::Month => calendar::next_month(unix_s),
        }
    }
}

/// A route's cloud budget: `limit` `unit`s per `period`. From
/// [`DEFAULT_LEAN_AT`] of it on, a hybrid route leans local; once spent,
/// the cloud lane is absent from the route's runs until the period
/// renews (docs/cost.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CloudBudget {
    /// How much.
    pub limit: f64,
    /// Of what.
    pub unit: BudgetUnit,
    /// Per what.
    pub period: BudgetPeriod,
    /// The share of the budget from which a hybrid route leans local
    /// (0 to 1).
    pub lean_at: f64,
}

/// Default share of a budget from which a hybrid route leans local.
pub const DEFAULT_LEAN_AT: f64 = 0.8;

/// Why a budget's text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a cloud budget: {why} (write e.g. `5 usd/day`, `$20/month` or `2000000 tokens/month`)")]
pub struct BadBudget {
    text: String,
    why: String,
}

impl FromStr for CloudBudget {
    type Err = BadBudget;

    fn from_str(text: &str) -> Result<Self, BadBudget> {
        let bad = |why: &str| BadBudget {
            text: text.to_string(),
            why: why.to_string(),
        };
        let (amount, period) = text
            .rsplit_once('/')
            .ok_or_else(|| bad("it needs a period: `/day` or `/month`"))?;
        let period = match period.trim().to_ascii_lowercase().as_str() {
            "day" | "d" => BudgetPeriod::Day,
            "month" | "mo" => BudgetPeriod::Month,
            other => {
                return Err(bad(&format!(
                    "the period `{other}` is neither `day` nor `month`"
                )))
            }
        };
        let amount = amount.trim();
        let (number, unit) = if let Some(n) = amount.strip_prefix('$') {
            (n.trim(), BudgetUnit::Usd)
        } else {
            // The unit is the trailing word.
            let split = amount
                .rfind(|c: char| !c.is_ascii_alphabetic())
                .map_or(0, |i| i + 1);
            if split == amount.len() {
                return Err(bad("it has no unit: say `usd` (or `$`) or `tokens`"));
            }
            let unit = match amount[split..].to_ascii_lowercase().as_str() {
                "usd" | "dollars" => BudgetUnit::Usd,
                "tokens" | "token" => BudgetUnit::Tokens,
                other => {
                    return Err(bad(&format!(
                        "the unit `{other}` is neither `usd` nor `tokens`"
                    )))
                }
            };
            (amount[..split].trim(), unit)
        };
        let limit: f64 = number
            .parse()
            .map_err(|_| bad(&format!("`{number}` is not a number")))?;
        if !limit.is_finite() || limit < 0.0 {
            return Err(bad("the amount must be a number >= 0"));
        }
        Ok(CloudBudget {
            limit,
            unit,
            period,
            lean_at: DEFAULT_LEAN_AT,
        })
    }
}

impl fmt::Display for CloudBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.unit {
            BudgetUnit::Usd => "usd",
            BudgetUnit::Tokens => "tokens",
        };
        let period = match self.period {
            BudgetPeriod::Day => "day",
            BudgetPeriod::Month => "month",
        };
        write!(f, "{} {unit}/{period}", self.limit)
    }
}

/// Where a route stands against its budget when a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetState {
    /// Below the lean share: the route runs as configured.
    Ok,
    /// At or over the lean share: a hybrid route leans local.
    Lean,
    /// Spent: the cloud lane is absent until the period renews.
    Spent,
}

/// A route's budget as one run found it (in the outcome's
/// [`Cost`](super::Cost), serve's `/health`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BudgetReport {
    /// The budget, as text (`5 usd/day`).
    pub budget: String,
    /// Spent in this period before the run started, in the budget's unit.
    pub spent: f64,
    /// The limit, in the budget's unit.
    pub limit: f64,
    /// `ok`, `lean` or `spent`.
    pub state: BudgetState,
    /// The period's key (`2026-12-06`, `2026-12`).
    pub period: String,
    /// When the budget renews (RFC 3339, UTC).
    pub renews_at: String,
    /// Milliseconds until it renews.
    pub renews_in_ms: f64,
    /// What the budget changed in this run, in words (`None`: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl CloudBudget {
    /// The state of this budget having `spent` (in its unit) at `now_ms`
    /// (Unix milliseconds).
    pub(crate) fn report(&self, spent: f64, now_ms: i64) -> BudgetReport {
        let now_s = now_ms.div_euclid(1000);
        let renews = self.period.renews_at(now_s);
        let state = if spent >= self.limit {
            BudgetState::Spent
        } else if spent >= self.limit * self.lean_at {
            BudgetState::Lean
        } else {
            BudgetState::Ok
        };
        BudgetReport {
            budget: self.to_string(),
            spent,
            limit: self.limit,
            state,
            period: self.period.key(now_s),
            renews_at: calendar::rfc3339(renews),
            renews_in_ms: (renews * 1000 - now_ms).max(0) as f64,
            note: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_read_with_their_unit_and_period() {
        let b: CloudBudget = "5 usd/day".parse().unwrap();
        assert_eq!(
            (b.limit, b.unit, b.period),
            (5.0, BudgetUnit::Usd, BudgetPeriod::Day)
        );
        let b: CloudBudget = "$20/month".parse().unwrap();
        assert_eq!(
            (b.limit, b.unit, b.period),
            (20.0, BudgetUnit::Usd, BudgetPeriod::Month)
        );
        let b: CloudBudget = "2000000 tokens/month".parse().unwrap();
        assert_eq!(b.unit, BudgetUnit::Tokens);
        for (text, says) in [
            ("5/day", "no unit"),
            ("5 usd", "period"),
            ("five usd/day", "not a number"),
            ("-1 usd/day", ">= 0"),
            ("5 eur/day", "`eur`"),
            ("5 usd/week", "`week`"),
        ] {
            let e = text.parse::<CloudBudget>().unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(text), "{text}: {e}");
        }
    }

    #[test]
    fn a_budget_leans_then_is_spent_and_says_when_it_renews() {
        let b: CloudBudget = "10 usd/day".parse().unwrap();
        let now_ms = 1_796_584_968_000; // 2026-12-06T19:22:48Z
        assert_eq!(b.report(1.0, now_ms).state, BudgetState::Ok);
        assert_eq!(b.report(8.0, now_ms).state, BudgetState::Lean);
        let r = b.report(10.0, now_ms);
        assert_eq!(r.state, BudgetState::Spent);
        assert_eq!(r.renews_at, "2026-12-07T00:00:00Z");
        assert_eq!(r.renews_in_ms, ((4 * 3600 + 37 * 60 + 12) * 1000) as f64);
        assert_eq!(r.period, "2026-12-06");
    }
}
