//! Routes: a name with its own policy, deadline and callbacks. The
//! harness's defaults are a route too; a named route inherits every setting
//! it leaves unset. This module resolves settings; it must not run anything.
//!
//! Defaults (used when neither the route nor the harness sets them):
//! policy `race`, deadline 5 s, commit `first_token`, no `min_score`, the
//! [`DefaultScorer`], the built-in arbitration rule, no pre-score, no
//! compressor, callback budget 10 ms, cancel grace 5 ms.
//!
//! The cancel grace: when a run cancels workers *before* its deadline (an
//! abort, or the losers once a winner is picked) it waits up to this long,
//! never past the deadline, for cooperative workers to return, so their
//! reports say `stopped_in_time` rather than `late`. A run that settles at
//! its deadline never waits.

use super::callbacks::{Arbiter, Compressor, PreScore, Scorer};
use super::compression::KeepRecent;
use super::ledger::CloudBudget;
use super::policy::{CommitMode, Policy};
use super::scoring::{ConfidenceScorer, DefaultScorer, GenericScorer, Signal, SignalScorer};
use std::any::TypeId;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Default run deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);
/// Default callback budget (over it: a `tracing` warning).
pub const DEFAULT_CALLBACK_BUDGET: Duration = Duration::from_millis(10);
/// Default cancel grace (see the module docs).
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_millis(5);
/// Name of the route used when a run names none and no default is set.
pub const DEFAULT_ROUTE: &str = "default";

/// A callback and whether it is one of the built-in, known-cheap ones,
/// which run inline on the run's task instead of on a blocking thread.
pub(crate) struct Cb<T: ?Sized> {
    pub(crate) f: Arc<T>,
    pub(crate) inline: bool,
}

impl<T: ?Sized> Clone for Cb<T> {
    fn clone(&self) -> Self {
        Self {
            f: self.f.clone(),
            inline: self.inline,
        }
    }
}

fn is_builtin<T: 'static>() -> bool {
    let t = TypeId::of::<T>();
    t == TypeId::of::<KeepRecent>()
        || t == TypeId::of::<DefaultScorer>()
        || t == TypeId::of::<GenericScorer>()
        || t == TypeId::of::<ConfidenceScorer>()
        || t == TypeId::of::<SignalScorer>()
}

macro_rules! cb {
    ($v:expr, $t:ty, $tr:ident) => {
        Cb::<dyn $tr> {
            inline: is_builtin::<$t>(),
            f: Arc::new($v),
        }
    };
}

/// Settings for a named kind of request. Unset settings inherit from the
/// harness's defaults.
///
/// ```
/// use edgecloud_core::harness::{Route, Policy};
/// use std::time::Duration;
/// let vehicle = Route::new(Policy::LocalOnly).deadline(Duration::from_millis(200));
/// # let _ = vehicle;
/// ```
#[derive(Clone, Default)]
pub struct Route {
    pub(crate) policy: Option<Policy>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) commit: Option<CommitMode>,
    pub(crate) min_score: Option<Option<f64>>,
    pub(crate) pre_score: Option<Option<Cb<dyn PreScore>>>,
    pub(crate) compressor: Option<Option<Cb<dyn Compressor>>>,
    pub(crate) scorer: Option<Option<Cb<dyn Scorer>>>,
    pub(crate) arbiter: Option<Option<Cb<dyn Arbiter>>>,
    pub(crate) callback_budget: Option<Duration>,
    pub(crate) cancel_grace: Option<Duration>,
    pub(crate) escalate_early: Option<Option<Signal>>,
    pub(crate) prompt_escalate_below: Option<Option<(Signal, f64)>>,
    pub(crate) cloud_model: Option<String>,
    pub(crate) cloud_budget: Option<Option<CloudBudget>>,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("policy", &self.policy)
            .field("deadline", &self.deadline)
            .field("commit", &self.commit)
            .field("min_score", &self.min_score)
            .field("pre_score", &self.pre_score.as_ref().map(Option::is_some))
            .field("compressor", &self.compressor.as_ref().map(Option::is_some))
            .field("scorer", &self.scorer.as_ref().map(Option::is_some))
            .field("arbiter", &self.arbiter.as_ref().map(Option::is_some))
            .field("escalate_early", &self.escalate_early)
            .field("prompt_escalate_below", &self.prompt_escalate_below)
            .field("cloud_model", &self.cloud_model)
            .field("cloud_budget", &self.cloud_budget)
            .finish()
    }
}

impl Route {
    /// A route with the given policy; everything else inherited.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy: Some(policy),
            ..Self::default()
        }
    }

    /// Sets the policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Sets the run deadline (a request's own deadline still wins).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Sets when streaming runs commit to a lane.
    pub fn commit(mut self, commit: CommitMode) -> Self {
        self.commit = Some(commit);
        self
    }

    /// Requires every candidate to score at least `min` to be acceptable.
    pub fn min_score(mut self, min: f64) -> Self {
        self.min_score = Some(Some(min));
        self
    }

    /// Sets the pre-score callback.
    pub fn pre_score<P: PreScore>(mut self, p: P) -> Self {
        self.pre_score = Some(Some(cb!(p, P, PreScore)));
        self
    }

    /// Uses no pre-score callback on this route.
    pub fn without_pre_score(mut self) -> Self {
        self.pre_score = Some(None);
        self
    }

    /// Sets the compressor for what is sent to the cloud.
    pub fn compressor<C: Compressor>(mut self, c: C) -> Self {
        self.compressor = Some(Some(cb!(c, C, Compressor)));
        self
    }

    /// Sends the cloud the request uncompressed on this route.
    pub fn without_compressor(mut self) -> Self {
        self.compressor = Some(None);
        self
    }

    /// Sets the scorer.
    pub fn scorer<S: Scorer>(mut self, s: S) -> Self {
        self.scorer = Some(Some(cb!(s, S, Scorer)));
        self
    }

    /// Leaves candidates unscored on this route (thresholds then never
    /// pass; see [`Scorer`]).
    pub fn without_scorer(mut self) -> Self {
        self.scorer = Some(None);
        self
    }

    /// Sets the arbiter.
    pub fn arbiter<A: Arbiter>(mut self, a: A) -> Self {
        self.arbiter = Some(Some(cb!(a, A, Arbiter)));
        self
    }

    /// Uses the built-in arbitration rule on this route.
    pub fn builtin_arbiter(mut self) -> Self {
        self.arbiter = Some(None);
        self
    }

    /// Sets the time a callback may take before a `tracing` warning.
    pub fn callback_budget(mut self, budget: Duration) -> Self {
        self.callback_budget = Some(budget);
        self
    }

    /// Sets the cancel grace (see the module docs).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = Some(grace);
        self
    }

    /// A cascade on this route judges the local answer by `signal` (the
    /// scorer becomes [`SignalScorer`]`(signal)`, so the cascade's
    /// threshold is in the signal's units) and escalates *while the local
    /// lane is still generating*: as soon as the signal read from the
    /// tokens so far is below the threshold, the cloud starts and the local
    /// lane is cancelled once the cloud is admitted. `signal` must be
    /// streamable ([`Signal::is_streamable`]: `min_logprob`,
    /// `min_window_logprob`), which only falls as tokens come, so every
    /// decision is the one the cascade would make at the end, sooner.
    /// The price: an escalated run keeps no local answer to fall back on
    /// if the cloud then fails. Other policies ignore it.
    pub fn escalate_early(mut self, signal: Signal) -> Self {
        self.escalate_early = Some(Some(signal));
        self.scorer = Some(Some(cb!(SignalScorer(signal), SignalScorer, Scorer)));
        self
    }

    /// Decisions on this route wait for the whole local answer.
    pub fn without_early_escalation(mut self) -> Self {
        self.escalate_early = Some(None);
        self
    }

    /// A cascade on this route becomes two-stage: the local lane scores
    /// the prompt in its prompt pass ([`Signal::PromptLogprob`]: the mean
    /// log-probability of the prompt's own tokens) and, when that is below
    /// `value`, the cloud starts at once and the local lane is cancelled
    /// when the cloud is admitted, before it generates its answer; above
    /// it, the cascade goes on as configured (its answer threshold, early
    /// escalation). The cost: the prompt pass reuses no cached prefix
    /// (every prompt token is scored). Other policies, and a cascade whose
    /// primary is the cloud lane, ignore it.
    pub fn prompt_escalate_below(self, value: f64) -> Self {
        self.prompt_escalate_on(Signal::PromptLogprob, value)
    }

    /// A cascade on this route becomes two-stage on `signal`, a
    /// prompt-only signal the local lane reports before it generates
    /// ([`Signal::is_read_before_generation`]): `prompt_logprob` as
    /// [`Route::prompt_escalate_below`] says, or `prompt_brevity` (minus
    /// the prompt's tokens), known as soon as the local lane has
    /// tokenized the prompt, so that a prompt sent to the cloud costs the
    /// local lane no decoding at all. Another signal is refused when the
    /// route is resolved.
    pub fn prompt_escalate_on(mut self, signal: Signal, value: f64) -> Self {
        self.prompt_escalate_below = Some(Some((signal, value)));
        self
    }

    /// Decisions on this route do not read the prompt first.
    pub fn without_prompt_stage(mut self) -> Self {
        self.prompt_escalate_below = Some(None);
        self
    }

    /// Runs on this route ask the cloud lane for `model` (the request's
    /// `model` field the endpoint receives) instead of the lane's
    /// configured model; the local lane is unaffected. Building a harness
    /// with such a route and no cloud lane is an error naming the route.
    pub fn cloud_model(mut self, model: impl Into<String>) -> Self {
        self.cloud_model = Some(model.into());
        self
    }

    /// Caps this route's cloud spending (docs/cost.md): from the budget's
    /// lean share on, a hybrid policy runs as a cascade (local first);
    /// once spent, the cloud lane is absent from the route's runs until
    /// the period renews. Needs a ledger store
    /// ([`HarnessBuilder::ledger`](super::HarnessBuilder::ledger)), and a
    /// price for the route's cloud model when it counts dollars.
    pub fn cloud_budget(mut self, budget: CloudBudget) -> Self {
        self.cloud_budget = Some(Some(budget));
        self
    }

    /// This route has no cloud budget (whatever the defaults say).
    pub fn without_cloud_budget(mut self) -> Self {
        self.cloud_budget = Some(None);
        self
    }

    pub(crate) fn set_arc_pre_score(&mut self, p: Option<Arc<dyn PreScore>>) {
        self.pre_score = Some(p.map(|f| Cb { f, inline: false }));
    }

    pub(crate) fn set_arc_compressor(&mut self, c: Option<Arc<dyn Compressor>>, inline: bool) {
        self.compressor = Some(c.map(|f| Cb { f, inline }));
    }

    pub(crate) fn set_arc_scorer(&mut self, s: Option<Arc<dyn Scorer>>, inline: bool) {
        self.scorer = Some(s.map(|f| Cb { f, inline }));
    }

    pub(crate) fn set_arc_arbiter(&mut self, a: Option<Arc<dyn Arbiter>>) {
        self.arbiter = Some(a.map(|f| Cb { f, inline: false }));
    }

    /// `self`'s settings, with unset ones taken from `base`.
    pub(crate) fn over(&self, base: &Route) -> Route {
        Route {
            policy: self.policy.clone().or_else(|| base.policy.clone()),
            deadline: self.deadline.or(base.deadline),
            commit: self.commit.or(base.commit),
            min_score: self.min_score.or(base.min_score),
            pre_score: self.pre_score.clone().or_else(|| base.pre_score.clone()),
            compressor: self.compressor.clone().or_else(|| base.compressor.clone()),
            scorer: self.scorer.clone().or_else(|| base.scorer.clone()),
            arbiter: self.arbiter.clone().or_else(|| base.arbiter.clone()),
            callback_budget: self.callback_budget.or(base.callback_budget),
            cancel_grace: self.cancel_grace.or(base.cancel_grace),
            escalate_early: self.escalate_early.or(base.escalate_early),
            prompt_escalate_below: self.prompt_escalate_below.or(base.prompt_escalate_below),
            cloud_model: self
                .cloud_model
                .clone()
                .or_else(|| base.cloud_model.clone()),
            cloud_budget: self.cloud_budget.or(base.cloud_budget),
        }
    }

    /// Resolves every setting, filling gaps with the documented defaults.
    pub(crate) fn resolve(&self, name: &str) -> Result<RouteSettings, String> {
        let policy = self.policy.clone().unwrap_or_default();
        policy.validate()?;
        if let Some(Some(m)) = self.min_score {
            if !m.is_finite() {
                return Err("min_score must be a finite number".into());
            }
        }
        if let Some(Some(s)) = self.escalate_early {
            if !s.is_streamable() {
                return Err(format!(
                    "escalate_early needs a signal that only falls as tokens come \
                     (min_logprob or min_window_logprob), not {s}"
                ));
            }
        }
        if let Some(Some((signal, v))) = self.prompt_escalate_below {
            if !signal.is_read_before_generation() {
                return Err(format!(
                    "a route reads prompt_logprob or prompt_brevity before generation, not {signal}"
                ));
            }
            if !v.is_finite() {
                return Err("prompt_escalate_below must be a finite number".into());
            }
        }
        if let Some(m) = &self.cloud_model {
            if m.trim().is_empty() {
                return Err("cloud_model cannot be empty".into());
            }
        }
        Ok(RouteSettings {
            name: name.to_string(),
            policy,
            deadline: self.deadline.unwrap_or(DEFAULT_DEADLINE),
            commit: self.commit.unwrap_or_default(),
            min_score: self.min_score.flatten(),
            pre_score: self.pre_score.clone().flatten(),
            compressor: self.compressor.clone().flatten(),
            scorer: match &self.scorer {
                Some(s) => s.clone(),
                None => Some(cb!(DefaultScorer, DefaultScorer, Scorer)),
            },
            arbiter: self.arbiter.clone().flatten(),
            callback_budget: self.callback_budget.unwrap_or(DEFAULT_CALLBACK_BUDGET),
            cancel_grace: self.cancel_grace.unwrap_or(DEFAULT_CANCEL_GRACE),
            escalate_early: self.escalate_early.flatten(),
            prompt_escalate_below: self.prompt_escalate_below.flatten(),
            cloud_model: self.cloud_model.clone(),
            cloud_budget: self.cloud_budget.flatten(),
        })
    }
}

/// A route with every setting decided.
#[derive(Clone)]
pub(crate) struct RouteSettings {
    pub(crate) name: String,
    pub(crate) policy: Policy,
    pub(crate) deadline: Duration,
    pub(crate) commit: CommitMode,
    pub(crate) min_score: Option<f64>,
    pub(crate) pre_score: Option<Cb<dyn PreScore>>,
    pub(crate) compressor: Option<Cb<dyn Compressor>>,
    pub(crate) scorer: Option<Cb<dyn Scorer>>,
    pub(crate) arbiter: Option<Cb<dyn Arbiter>>,
    pub(crate) callback_budget: Duration,
    pub(crate) cancel_grace: Duration,
    /// The signal a cascade reads early (see [`Route::escalate_early`]).
    pub(crate) escalate_early: Option<Signal>,
    /// A two-stage cascade's prompt signal and threshold (see
    /// [`Route::prompt_escalate_on`]).
    pub(crate) prompt_escalate_below: Option<(Signal, f64)>,
    /// The model the cloud lane is asked for (see [`Route::cloud_model`];
    /// `None`: the lane's own).
    pub(crate) cloud_model: Option<String>,
    /// The route's cloud budget (see [`Route::cloud_budget`]).
    pub(crate) cloud_budget: Option<CloudBudget>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::backend::Candidate;
    use crate::harness::callbacks::ScoreContext;

    #[test]
    fn routes_inherit_unset_settings() {
        let base = Route::new(Policy::Race)
            .deadline(Duration::from_secs(3))
            .compressor(KeepRecent::new(100));
        let r = Route::new(Policy::LocalOnly)
            .deadline(Duration::from_millis(200))
            .over(&base)
            .resolve("vehicle")
            .expect("valid");
        assert_eq!(r.policy, Policy::LocalOnly);
        assert_eq!(r.deadline, Duration::from_millis(200));
        assert!(r.compressor.as_ref().is_some_and(|c| c.inline));
        let r = Route::default()
            .without_compressor()
            .over(&base)
            .resolve("x")
            .expect("valid");
        assert!(r.compressor.is_none());
        assert_eq!(r.deadline, Duration::from_secs(3));
        assert!(
            r.scorer.as_ref().is_some_and(|s| s.inline),
            "default scorer"
        );
    }

    #[test]
    fn user_callbacks_are_not_inline() {
        let r = Route::default()
            .scorer(|_: &Candidate, _: &ScoreContext| 1.0)
            .resolve("x")
            .expect("valid");
        assert!(r.scorer.as_ref().is_some_and(|s| !s.inline));
        assert!(Route::default().min_score(f64::NAN).resolve("x").is_err());
    }
}
