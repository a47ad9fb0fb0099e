//! Speculative decoding in the decode loop (`LocalConfig::spec_type`,
//! contract point 16): a lone answer's drafts after its pending token,
//! put into the step's batch, and their verification once it is decoded.
//!
//! A greedy lone answer proposes drafts (`draft`: prompt lookup, or a
//! draft model, `draftmodel`; as many as a cost model says pay, from the
//! sequence's acceptance rate and what a draft row costs on this context,
//! `RowCost`, measured from its own steps' times) after its pending token;
//! they go into the same batch at the following positions, each with
//! logits, and `Engine::verify` keeps the longest prefix of them that the
//! picker itself picks, one token at a time through the same `sample`
//! every token goes through. A sampled answer without a grammar drafts
//! too: its drafts are judged by the speculative-sampling rule (`accept`:
//! a draft is kept with its probability under the answer's sampler, else
//! the token is drawn from the rest), so its distribution is unchanged. A
//! sampled answer under a grammar and a consensus's samples do not draft.
//!
//! It owns the settings, the draft model, the drafts' cost model and which
//! lane drafts next. It must not pick tokens or end jobs itself: every
//! pick goes through the loop's `sample` and `advance`, so what follows a
//! draft sees exactly the tokens of a run without drafts.

use super::{Engine, Entry, Next};
use crate::draft::{Drafter, RowCost, Source, SpecType};
use crate::draftmodel::DraftModel;
use crate::governor::StepKind;
use crate::pick::Picker;
use crate::LocalError;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use std::time::Instant;

/// llama.cpp's CPU attention (ggml-cpu `ops.cpp`, flash attention, this
/// release) picks its kernel by the step's rows and the cells in view:
/// one row over 512 cells or more is split across the threads, 64 rows or
/// more are tiled, anything else is summed one row at a time. Each kernel
/// sums in its own order, so a row's logits depend on the kernel its step
/// took. Drafts must not move a row to another kernel than the run without
/// drafts gives it (`add_drafts`): a step of fewer rows than this stays
/// under it with its drafts.
const TILED_ROWS: usize = 64;
/// The cells in view are the cells in use padded to 256 (at least 256): a
/// lone row with more than this many cells in use takes the split kernel,
/// which a verify step (several rows) never does.
const SPLIT_KV_USED: usize = 256;

/// Drafts in the verify step that measures a row's cost before a draft
/// model is filled (`RowCost::wants_probe`): about the count a draft
/// model's first proposal has.
const PROBE_DRAFTS: usize = 4;

/// How greedy sequences draft (see `draft` and `Engine::verify`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Speculation {
    draft_max: u32,
    draft_min: u32,
    /// A draft row's cost, fixed (`LocalConfig::draft_row_cost`), else
    /// measured.
    row_cost: Option<f64>,
    /// Drafts only where every row keeps its attention kernel
    /// (`LocalConfig::spec_exact`; see `Engine::add_drafts`).
    exact: bool,
}

impl Speculation {
    /// The settings in effect: `None` when off.
    pub(crate) fn of(kind: SpecType, draft_max: u32, draft_min: u32) -> Option<Self> {
        match kind {
            SpecType::Off => None,
            SpecType::Ngram | SpecType::Draft => Some(Self {
                draft_max,
                draft_min,
                row_cost: None,
                exact: true,
            }),
        }
    }

    /// With a fixed draft row cost (`None`: measured).
    pub(crate) fn with_row_cost(mut self, cost: Option<f32>) -> Self {
        self.row_cost = cost.map(f64::from);
        self
    }

    /// Bit-exact drafting (`true`) or drafting on every step.
    pub(crate) fn exact(mut self, exact: bool) -> Self {
        self.exact = exact;
        self
    }
}

/// The loop's speculation: its settings and what it keeps between steps.
pub(super) struct Speculator<'m> {
    /// The settings (`None`: off).
    settings: Option<Speculation>,
    /// Reused buffer: a drafting sequence's tokens and its pending one.
    history: Vec<LlamaToken>,
    /// The lane whose drafts go first into the next step (one lane's a
    /// step: `add_drafts`).
    turn: usize,
    /// What a draft row costs here, measured on this context's steps.
    row_cost: RowCost,
    /// The draft model, when drafts come from one (`draftmodel`); else
    /// prompt lookup.
    model: Option<DraftModel<'m>>,
    /// The most rows an exact verify step may have (`with_exact_rows`).
    exact_rows: usize,
}

impl Speculator<'_> {
    /// No speculation.
    pub(super) fn off() -> Self {
        Self {
            settings: None,
            history: Vec::new(),
            turn: 0,
            row_cost: RowCost::default(),
            model: None,
            exact_rows: usize::MAX,
        }
    }

    /// The drafting of a job's answer, when it drafts. An answer alone
    /// drafts when its picks can judge a draft: greedy ones (a function of
    /// the logits and the grammar's state: a draft is kept exactly when it
    /// is the pick) and random ones without a grammar (the
    /// speculative-sampling rule, `accept`). A consensus's samples do not
    /// (one lane's drafts a step).
    pub(super) fn drafter(&self, samples: usize, picker: &Picker) -> Option<Drafter> {
        self.settings
            .filter(|_| samples == 1 && (picker.is_greedy() || picker.judges_drafts()))
            .map(|s| Drafter::new(s.draft_max, s.draft_min))
    }

    /// A step was decoded in `took` seconds with `drafted` drafts: what a
    /// draft row costs learns from it (a plain generation step is the
    /// baseline).
    pub(super) fn timed(&mut self, kind: StepKind, took: f64, drafted: usize) {
        if drafted > 0 {
            self.row_cost.verified(took, drafted);
        } else if kind == StepKind::Generate {
            self.row_cost.plain(took);
        }
    }
}

impl<'m> Engine<'m> {
    /// Turns speculative decoding on (`None` leaves it off). The context's
    /// `n_batch` must hold `draft_max` more tokens (`worker`): one lane
    /// drafts per step (`add_drafts`).
    pub(crate) fn with_speculation(mut self, spec: Option<Speculation>) -> Self {
        if let Some(spec) = spec {
            let lanes = self.seqs.len();
            self.batch = LlamaBatch::new(
                self.batch_size + lanes * self.max_samples + spec.draft_max as usize,
                1,
            );
        }
        self.spec.row_cost = RowCost::new(spec.and_then(|s| s.row_cost));
        self.spec.settings = spec;
        self
    }

    /// Drafts from a draft model instead of prompt lookup (`None`: prompt
    /// lookup). `size_share`: its weights' size over the model's, what a
    /// draft is taken to cost until one is measured (`RowCost`).
    pub(crate) fn with_draft_model(
        mut self,
        draft: Option<DraftModel<'m>>,
        size_share: f64,
    ) -> Self {
        if draft.is_some() {
            self.spec.row_cost.set_model_prior(size_share);
        }
        self.spec.model = draft;
        self
    }

    /// Bounds exact verify steps to `rows` rows (`add_drafts`): on
    /// weights llama.cpp multiplies with another kernel from some row
    /// count on, a step's rows keep the one-row kernel only below it
    /// (`worker` tells from the model's load: `ffi::take_exact_rows`).
    pub(crate) fn with_exact_rows(mut self, rows: Option<usize>) -> Self {
        self.spec.exact_rows = rows.unwrap_or(usize::MAX);
        self
    }

    /// The drafts to decode after a lane's pending token this step (see
    /// `draft`): none unless its answer drafts. At most as many as could
    /// be kept: the answer's remaining `max_tokens` after the pending
    /// token's own pick, and the sequence's cells (a pick at the last
    /// cells ends the answer, as `sample` says).
    fn draft(&mut self, seq: usize, most: usize) -> Vec<LlamaToken> {
        let mut drafts = Vec::new();
        // No drafts on a step that measures what a plain step costs (the
        // baseline a draft row's cost is a share of).
        if most == 0 || self.spec.row_cost.wants_plain() {
            return drafts;
        }
        let s = &mut self.seqs[seq];
        let Some(a) = s.active.as_mut().filter(|a| a.prompt_done) else {
            return drafts;
        };
        let max_tokens = a.job.sampling.max_tokens as usize;
        let Some(br) = a.branches.first_mut() else {
            return drafts;
        };
        let (Some(token), Some(drafter)) = (br.pending, br.drafter.as_mut()) else {
            return drafts;
        };
        let room = max_tokens
            .saturating_sub(br.out.completion_tokens + 1)
            .min(self.seq_context.saturating_sub(br.len + 3))
            .min(most);
        // A paused sequence looks nothing up.
        let most = drafter.room(room);
        if most == 0 {
            return drafts;
        }
        let spec = &mut self.spec;
        spec.history.clear();
        spec.history.extend_from_slice(&s.cached);
        spec.history.push(token);
        match spec.model.as_mut() {
            // Before the draft model is filled with the prompt: what a row
            // costs here, measured with drafts that are free to find.
            Some(_) if spec.row_cost.wants_probe() => {
                let k = most.min(PROBE_DRAFTS.max(drafter.draft_min()));
                drafter.probe(&spec.history, k, &mut drafts);
            }
            Some(model) => {
                // The cost model first: the draft model's proposals cost
                // its own steps besides their rows.
                let k = drafter.count(Source::Model, most, &spec.row_cost);
                if k == 0 {
                    return drafts;
                }
                let started = Instant::now();
                let first = drafter.first_proposal();
                let fill = model.propose(&spec.history, k, &mut drafts, first);
                spec.row_cost.proposed_by_model(
                    started.elapsed().saturating_sub(fill).as_secs_f64(),
                    drafts.len(),
                );
            }
            None => drafter.lookup(&spec.history, most, &spec.row_cost, &mut drafts),
        }
        if drafts.len() < drafter.draft_min().max(1) {
            drafts.clear();
        }
        drafts
    }

    /// The cells the context's sequences hold before this step (a bound
    /// from above: a consensus's samples count their shared prompt each).
    fn cells_in_use(&self) -> usize {
        self.seqs
            .iter()
            .map(|s| {
                s.cached.len()
                    + s.active.as_ref().map_or(0, |a| {
                        a.branches.iter().skip(1).map(|b| b.len).sum::<usize>()
                    })
            })
            .sum()
    }

    /// Verifies a lane's drafts, decoded this step after its pending token
    /// (batch row `row`; the drafts' rows from `draft_row` on). The picker picks at
    /// the token's row as always; while its pick is the next draft, that
    /// draft is the token the lane would have decoded next (its cell is in
    /// the cache, its row holds the logits that step would have given), so
    /// it is kept and the picker picks again at the draft's row. Every pick
    /// goes through `sample`, the one per-token path (grammar, signals,
    /// log-probs, stop strings, streaming, max_tokens), in order, so all
    /// that follows sees exactly the tokens of a run without drafts. The
    /// cells of the drafts not kept are cut; the last pick is pending, as
    /// after any step.
    pub(super) fn verify(
        &mut self,
        seq: usize,
        branch: usize,
        row: i32,
        drafts: &[LlamaToken],
        draft_row: i32,
    ) -> Result<(), LocalError> {
        let mut next = self.sample(seq, branch, row, drafts.first().copied());
        let mut accepted = 0;
        for (i, &draft) in drafts.iter().enumerate() {
            if !matches!(next, Next::Continue(token) if token == draft) {
                break;
            }
            let s = &mut self.seqs[seq];
            let Some(a) = s.active.as_mut() else {
                break;
            };
            // A job stopped (its sink cancelled it, its deadline passed)
            // ends before its next step: here, before its next draft.
            if a.job.stop_reason().is_some() {
                break;
            }
            a.branches[branch].len += 1;
            s.cached.push(draft);
            accepted += 1;
            next = self.sample(
                seq,
                branch,
                draft_row + accepted as i32 - 1,
                drafts.get(i + 1).copied(),
            );
        }
        if let Some(br) = self.seqs[seq]
            .active
            .as_mut()
            .and_then(|a| a.branches.get_mut(branch))
        {
            br.out.drafts_verified(drafts.len(), accepted);
            if let Some(drafter) = br.drafter.as_mut() {
                let row_cost = self
                    .spec
                    .row_cost
                    .per_draft(drafts.len(), drafter.by_model());
                tracing::trace!(
                    target: "edgecloud::local::draft",
                    class = drafter.last_class(),
                    drafted = drafts.len(),
                    accepted,
                    row_cost,
                    "drafts verified"
                );
                drafter.verified(drafts.len(), accepted, row_cost);
            }
        }
        if accepted < drafts.len() {
            let from = self.seqs[seq].cached.len();
            if !self.cut(seq, from) {
                return Err(LocalError::Decode {
                    detail: "the cells of rejected drafts could not be removed".into(),
                });
            }
        }
        self.advance(seq, branch, next);
        Ok(())
    }

    /// Adds one lane's drafts, the next in turn that has any, as the
    /// batch's last rows.
    ///
    /// Why one lane and last: llama.cpp puts a step's tokens into free
    /// cells in row order and, when cells are removed, fills the lowest
    /// free ones first; attention then sums over a sequence's cells in
    /// cell order. Rejected drafts in the last rows leave free cells only
    /// above every cell in use, so every sequence's later tokens still go
    /// into cells above its earlier ones, in the order a run without
    /// drafts gives them, and its sums are the same to the last bit.
    /// Drafts of two lanes in one step would leave the first one's
    /// rejected cells below the second one's kept ones.
    ///
    /// And, when exact (`LocalConfig::spec_exact`, the default), no more
    /// drafts than keep every row on the attention kernel it takes without
    /// them (see [`TILED_ROWS`]): a step under 64 rows stays under 64; a
    /// lone row (the lane decoding alone, as a run without drafts decodes
    /// every token) drafts only while its tokens and the drafts' stay
    /// within the cells where a lone row is not split, unless every step
    /// runs on one thread: the split kernel's one chunk is then summed in
    /// the order of the other (its partials are combined with a factor of
    /// exactly 1). So on several threads a lone lane drafts in its first
    /// 256 cells only: past them llama.cpp would sum the run without
    /// drafts in another order. And on weights whose matrix products take
    /// another kernel from some row count on (`exact_rows`: repacked Q4_K
    /// and Q4_0 from 4 rows), no more drafts than keep the step under that
    /// count. Not exact: drafts on every step.
    pub(super) fn add_drafts(&mut self, entries: &mut [Entry]) {
        let Some(spec) = self.spec.settings else {
            return;
        };
        let rows = usize::try_from(self.batch.n_tokens()).unwrap_or(usize::MAX);
        let mut most = if rows < TILED_ROWS && spec.exact {
            TILED_ROWS - 1 - rows
        } else {
            usize::MAX
        };
        if rows == 1 && spec.exact && self.threads.max() > 1 {
            most = most.min(SPLIT_KV_USED.saturating_sub(self.cells_in_use() + rows));
        }
        if spec.exact {
            most = most.min(self.spec.exact_rows.saturating_sub(rows));
        }
        let n = self.seqs.len();
        for turn in 0..n {
            let seq = (self.spec.turn + turn) % n;
            let drafts = self.draft(seq, most);
            if drafts.is_empty() {
                continue;
            }
            let Some(entry) = entries
                .iter_mut()
                .find(|e| e.seq == seq && e.branch == 0 && e.logits.is_some())
            else {
                continue;
            };
            let (len, id) = match self.seqs[seq].active.as_ref() {
                Some(a) => (a.branches[0].len, a.branches[0].seq_id),
                None => continue,
            };
            entry.draft_row = self.batch.n_tokens();
            for (j, &draft) in drafts.iter().enumerate() {
                self.batch
                    .add(draft, (len + 1 + j) as i32, &[id], true)
                    .expect("the batch has draft_max rows for one lane's drafts");
            }
            entry.drafts = drafts;
            self.spec.turn = (seq + 1) % n;
            return;
        }
    }
}
