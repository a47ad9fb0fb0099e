//! The harness behind the front door: [`Engine`] for a [`Harness`] (of
//! one instance or many), and the translation of a harness [`Outcome`]
//! into the compact [`Summary`] a response carries. Only translation
//! here: the harness picks the instance and decides everything else.

use super::engine::{
    BoxFuture, Drained, Engine, Health, InstanceState, Job, LaneState, LaneSummary, ModelEntry,
    Param, Run, RunInfo, StartError, Summary, Tokens,
};
use edgecloud_core::harness::{
    BackendError, Harness, HarnessError, Outcome, Policy, RunHandle, RunOptions, Setting,
};
use edgecloud_core::lane::Lane;
use edgecloud_core::reasoning::Piece;
use std::time::{Duration, Instant};

/// The model name that selects the harness's default route.
pub(crate) const DEFAULT_MODEL: &str = "edgecloud";

pub(crate) struct HarnessEngine {
    pub(crate) harness: Harness,
    /// How long a request may wait for a free instance (`None`: refuse at
    /// once when every instance is busy).
    pub(crate) max_queue: Option<Duration>,
    /// Parameters for policies a request names (e.g. the configured
    /// cascade threshold); kinds not listed run with their defaults.
    pub(crate) presets: Vec<Policy>,
}

impl HarnessEngine {
    fn policy(&self, name: &str) -> Result<Policy, StartError> {
        Policy::named(name, &self.presets).map_err(|e| StartError::Invalid {
            param: Some(Param::Policy),
            message: e.to_string(),
        })
    }
}

impl Engine for HarnessEngine {
    fn models(&self) -> Vec<ModelEntry> {
        let mut models = vec![ModelEntry::route(DEFAULT_MODEL, None)];
        let routes = self.harness.routes();
        // A harness without named routes has just `default`, which is what
        // `edgecloud` selects already.
        if routes.len() <= 1 {
            return models;
        }
        models.extend(
            routes
                .into_iter()
                .filter(|r| r != DEFAULT_MODEL)
                .map(|r| ModelEntry::route(r.clone(), Some(r))),
        );
        models
    }

    fn start(&self, job: Job) -> BoxFuture<'_, Result<Box<dyn Run>, StartError>> {
        Box::pin(async move {
            let mut options = RunOptions::new();
            if let Some(route) = job.route {
                options = options.route(route);
            }
            if let Some(name) = &job.policy {
                options = options.policy(self.policy(name)?);
            }
            if job.stream {
                options = options.stream();
            }
            let keyed = job.idempotency_key.is_some();
            if let Some(key) = job.idempotency_key {
                options = options.idempotency_key(key);
            }
            let started = match self.max_queue {
                // A key whose first run is in flight is waited for within
                // the deadline (`start_within`), never refused at once.
                None if !keyed => self.harness.start(job.request, options),
                None => {
                    self.harness
                        .start_within(job.request, options, Duration::ZERO)
                        .await
                }
                Some(wait) => self.harness.start_within(job.request, options, wait).await,
            };
            let run = started.map_err(|e| match e {
                HarnessError::InvalidRequest(r) => StartError::Invalid {
                    param: None,
                    message: r.reason,
                },
                HarnessError::UnknownRoute { .. } => StartError::Invalid {
                    param: Some(Param::Model),
                    message: e.to_string(),
                },
                // A run's only configuration is its policy override; any
                // other setting is the harness's, not the request's fault.
                HarnessError::Config(c) if c.setting() == Some(Setting::Policy) => {
                    StartError::Invalid {
                        param: Some(Param::Policy),
                        message: c.to_string(),
                    }
                }
                HarnessError::ShuttingDown => StartError::ShuttingDown,
                HarnessError::PoolBusy { instances } => StartError::Busy { instances },
                HarnessError::IdempotencyConflict { .. } => StartError::Conflict {
                    code: "idempotency_key_reused",
                    message: e.to_string(),
                },
                HarnessError::IdempotencyInFlight { .. } => StartError::Conflict {
                    code: "idempotency_key_in_flight",
                    message: format!("{e}; retry once it has answered"),
                },
                other => StartError::Internal(edgecloud_core::error_chain(&other)),
            })?;
            let info = RunInfo {
                run_id: run.run_id(),
                // Counted from now, a hair after the run's own start.
                deadline_ms: run
                    .deadline()
                    .saturating_duration_since(Instant::now())
                    .as_secs_f64()
                    * 1e3,
                route: None,
                policy: job.policy,
                replay: run.is_replay(),
            };
            Ok(Box::new(HarnessRun { info, run }) as Box<dyn Run>)
        })
    }

    fn health(&self) -> Health {
        let instances = self.harness.instances();
        let stats = self.harness.stats();
        let pool = self.harness.pool_stats();
        let claimed = self.harness.claimed();
        Health {
            lanes: Lane::ALL
                .into_iter()
                .map(|lane| LaneState {
                    lane,
                    configured: instances[0].lane_info(lane).is_some(),
                    busy: instances.iter().all(|h| h.is_busy(lane)),
                    health: instances[0].lane_health(lane),
                    device: instances[0].lane_info(lane).and_then(|i| i.device),
                })
                .collect(),
            instances: instances
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let s = h.stats();
                    InstanceState {
                        model: None,
                        instance: i,
                        busy: claimed[i],
                        local_busy: h.is_busy(Lane::Local),
                        cloud_busy: h.is_busy(Lane::Cloud),
                        late_workers_running: s.late_workers_running,
                        runs_in_flight: s.runs_in_flight,
                    }
                })
                .collect(),
            queued: pool.waiting,
            rejected: pool.rejected,
            runs_in_flight: stats.runs_in_flight,
            late_workers_running: stats.late_workers_running,
            observer_events_dropped: stats.observer_events_dropped,
            models: Vec::new(),
        }
    }

    fn ledger(&self) -> Option<edgecloud_core::harness::LedgerReport> {
        self.harness.ledger()
    }

    fn shutdown(&self, grace: Duration) -> BoxFuture<'static, Drained> {
        let harness = self.harness.clone();
        Box::pin(async move {
            let r = harness.shutdown(grace).await;
            Drained {
                waited_ms: r.waited_ms,
                runs_in_flight: r.runs_in_flight,
                workers_still_running: r.still_running.len(),
            }
        })
    }
}

struct HarnessRun {
    info: RunInfo,
    /// The run and its claim on the instance (released at `finish`).
    run: RunHandle,
}

impl Run for HarnessRun {
    fn info(&self) -> &RunInfo {
        &self.info
    }

    fn next_piece(&mut self) -> BoxFuture<'_, Option<Piece>> {
        Box::pin(self.run.next_piece())
    }

    fn finish(self: Box<Self>) -> BoxFuture<'static, Result<Summary, String>> {
        Box::pin(async move {
            self.run
                .outcome()
                .await
                .map(|o| summarize(&o))
                .map_err(|e| edgecloud_core::error_chain(&e))
        })
    }

    fn aborter(&self) -> Box<dyn Fn() + Send + Sync> {
        let abort = self.run.abort_handle();
        Box::new(move || {
            abort.abort();
        })
    }
}

/// The compact summary of an outcome.
pub(crate) fn summarize(o: &Outcome) -> Summary {
    let status = o.status;
    let lanes = o
        .lanes
        .iter()
        .map(|r| LaneSummary {
            lane: r.lane,
            status: r.status,
            ttft_ms: r.ttft_ms,
            total_ms: r.total_ms,
            finish_reason: r.finish_reason,
            score: r.score,
            error: r.error.as_ref().map(|e| edgecloud_core::error_chain(e)),
            error_kind: r.error.as_ref().map(BackendError::kind),
            tokens: Tokens {
                provider_prompt: r.tokens.provider_prompt,
                provider_completion: r.tokens.provider_completion,
                local_prompt: r.tokens.local_prompt,
                local_completion: r.tokens.local_completion,
                local_reused_prompt: r.tokens.local_reused_prompt,
            },
            note: r.note.clone(),
            rejected: r.rejected.clone(),
            retry_in_ms: r.retry_in_ms,
            draft_n: r.draft_n,
            draft_n_accepted: r.draft_n_accepted,
        })
        .collect();
    Summary {
        run_id: o.run_id,
        route: o.route.clone(),
        policy: o.policy.as_str().to_string(),
        status,
        lane: o.winner,
        committed: o.committed,
        deadline_ms: o.deadline_ms,
        elapsed_ms: o.elapsed_ms,
        overshoot_ms: o.overshoot_ms,
        ttft_ms: o.ttft_ms,
        late_workers: o.late_workers,
        decision: o.decision.reason.clone(),
        error: o.error.clone(),
        lanes,
        text: o.text.clone(),
        reasoning: o.completion.as_ref().and_then(|c| c.reasoning.clone()),
        reasoning_tokens: o
            .completion
            .as_ref()
            .and_then(|c| c.tokens.local_reasoning.or(c.tokens.provider_reasoning)),
        finish_reason: o.completion.as_ref().map(|c| c.finish_reason),
        tool_calls: o
            .completion
            .as_ref()
            .map(|c| c.tool_calls.clone())
            .unwrap_or_default(),
        logprobs: o.completion.as_ref().and_then(|c| c.logprobs.clone()),
        logprobs_from: o
            .completion
            .as_ref()
            .filter(|c| c.logprobs.is_some())
            .and(o.winner),
        stop_sequence: o.completion.as_ref().and_then(|c| c.stop_sequence.clone()),
        timings: o.completion.as_ref().map(|c| c.timings.clone()),
        prompt_stage: o.prompt_stage.clone(),
        cost: Some(o.cost.clone()),
        replay: o.replay.clone(),
        switch: o.switch.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecloud_core::harness::PolicyKind;

    #[test]
    fn named_policies_use_the_presets_else_their_defaults() {
        let engine = HarnessEngine {
            harness: edgecloud_core::harness::Harness::builder().build().unwrap(),
            max_queue: None,
            presets: vec![Policy::cascade(0.9)],
        };
        assert_eq!(engine.policy("cascade"), Ok(Policy::cascade(0.9)));
        assert_eq!(engine.policy("best_of"), Ok(Policy::BestOf));
        assert_eq!(
            engine.policy("hedge"),
            Ok(Policy::from_kind(PolicyKind::Hedge))
        );
        match engine.policy("fastest") {
            Err(StartError::Invalid { param, message }) => {
                assert_eq!(param, Some(Param::Policy));
                assert!(message.contains("`fastest`"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let models: Vec<String> = engine.models().into_iter().map(|m| m.id).collect();
        assert_eq!(models, ["edgecloud"]);
    }
}
