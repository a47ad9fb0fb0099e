//! How a job picks its next token from a row of logits: the argmax
//! (greedy, no grammar), llama.cpp's sampler chain (random sampling), and,
//! when the answer is constrained (a `response_format`, a tool call),
//! llama.cpp's grammar sampler asked about the pick first.
//!
//! Why the grammar is asked about one token and not the whole vocabulary:
//! llama.cpp's grammar sampler decodes and matches every candidate it is
//! given, and over a 49k vocabulary that took about three times as long as
//! the model's own forward pass on SmolLM2 (7.7 tokens/s without, 2.0 with,
//! issue 24's first slice). So, as llama.cpp's own `common_sampler` does,
//! the token is picked without the grammar and the grammar checks that one
//! token; only when it rejects it is the grammar applied to more: the 64
//! best-ranked tokens, and the rest of the vocabulary only when none of
//! those is allowed.
//!
//! Greedy decoding stays exact: the first allowed token in (logit
//! descending, id ascending) order is the token the grammar-first chain's
//! greedy sampler picks (the first largest logit among those allowed), so
//! the answer is the same as with [`GrammarPass::Full`], in a batch or
//! alone. Random sampling with a rejected pick samples again among the
//! allowed tokens only: the best `top_k` allowed ones when they are among
//! the ranked few, else the whole vocabulary under the grammar, which is
//! the distribution of the grammar-first chain.
//!
//! It must not decode, stream or count anything: `batch` does.

use super::accept::{self, Draws};
use super::LocalError;
use edgecloud_core::request::Sampling;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;
use serde::{Deserialize, Serialize};

/// How many of the best-ranked tokens the grammar checks at once when it
/// rejected the pick, before it goes over the whole vocabulary.
const RANKED: usize = 64;

/// How the grammar of a constrained answer is applied (a setting for
/// measuring and checking; the default is the fast one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrammarPass {
    /// Pick first, then ask the grammar about that token; more only when
    /// it is rejected (see the module docs). Greedy answers are the same
    /// as with `Full`.
    #[default]
    Check,
    /// The grammar over the whole vocabulary before every pick, as a
    /// grammar-first llama.cpp sampler chain does: the reference.
    Full,
    /// No grammar: the model writes what it likes, and the lane hands
    /// the answer back as written (tool calls parsed where they parse)
    /// without judging it; the harness still rejects an invalid answer.
    /// To measure what the grammar buys.
    Off,
}

/// What the grammar of a job is, before it becomes a sampler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GrammarSpec {
    /// GBNF text.
    pub(super) text: String,
    /// Its start rule.
    pub(super) root: String,
    /// `Some`: the grammar waits for one of these words (or tokens whose
    /// text is one of them) before it constrains anything.
    pub(super) triggers: Option<Vec<String>>,
}

/// Picks one job's tokens.
pub(super) struct Picker {
    /// llama.cpp's grammar sampler, when the answer is constrained.
    grammar: Option<LlamaSampler>,
    full_pass: bool,
    /// Top-k, top-p, temperature and the seeded draw (random sampling);
    /// `None`: greedy.
    chain: Option<LlamaSampler>,
    /// The chain without its draw (top-k, top-p, temperature): the
    /// distribution a draft is judged against (`pick_against`), with the
    /// rule's own seeded draws.
    shape: Option<(LlamaSampler, Draws)>,
    top_k: usize,
    /// Reused candidate buffer.
    scratch: LlamaTokenDataArray,
    /// Reused token-order buffer for the ranked check.
    order: Vec<u32>,
    /// Reused (token, weight) buffer for judging a draft.
    weights: Vec<(i32, f64)>,
}

impl Picker {
    /// The picker `sampling` asks for, constrained by `grammar` unless the
    /// pass is [`GrammarPass::Off`].
    ///
    /// `sample` numbers the samples of a consensus job: sample `i` seeds
    /// its random choices with the request's seed plus `i`, so each sample
    /// differs from the others and a seeded request gives the same samples
    /// every time.
    pub(super) fn new(
        model: &LlamaModel,
        sampling: &Sampling,
        grammar: Option<&GrammarSpec>,
        pass: GrammarPass,
        sample: u32,
    ) -> Result<Self, LocalError> {
        let grammar = match grammar {
            Some(spec) if pass != GrammarPass::Off => Some(grammar_sampler(model, spec)?),
            _ => None,
        };
        Ok(Self {
            grammar,
            full_pass: pass == GrammarPass::Full,
            chain: random_chain(sampling, sample),
            shape: shape_chain(sampling, sample),
            top_k: sampling.top_k as usize,
            scratch: LlamaTokenDataArray::new(Vec::new(), false),
            order: Vec::new(),
            weights: Vec::new(),
        })
    }

    /// Whether the pick is a function of the logits (and the grammar's
    /// state): greedy, no random draw. Only such a picker's answer may be
    /// drafted (`batch`).
    pub(super) fn is_greedy(&self) -> bool {
        self.chain.is_none()
    }

    /// Whether a drafted token can be judged by the speculative-sampling
    /// rule (`pick_against`): a random pick without a grammar (a grammar's
    /// distribution over the whole vocabulary would cost a grammar pass
    /// per draft; such answers do not draft).
    pub(super) fn judges_drafts(&self) -> bool {
        self.chain.is_some() && self.grammar.is_none() && self.shape.is_some()
    }

    /// The next token from batch row `row` when `draft` was drafted
    /// there: greedy (and a grammar's) pick as [`Picker::pick`] (the draft
    /// is kept when it is the pick); a random pick keeps `draft` with its
    /// probability under the sampler's distribution and otherwise draws
    /// from the rest (`accept`), so the token's distribution is the
    /// sampler's.
    pub(super) fn pick_against(
        &mut self,
        ctx: &LlamaContext<'_>,
        row: i32,
        logits: &[f32],
        argmax: usize,
        draft: LlamaToken,
    ) -> Result<LlamaToken, LocalError> {
        if !self.judges_drafts() {
            return self.pick(ctx, row, logits, argmax);
        }
        let Some((shape, draws)) = self.shape.as_mut() else {
            return self.pick(ctx, row, logits, argmax);
        };
        run_on_row(&mut self.scratch, logits, shape);
        let max = self
            .scratch
            .data
            .iter()
            .map(LlamaTokenData::logit)
            .fold(f32::NEG_INFINITY, f32::max);
        self.weights.clear();
        self.weights.extend(
            self.scratch
                .data
                .iter()
                .map(|d| (d.id().0, f64::from((d.logit() - max).exp()))),
        );
        accept::accept_or_resample(&self.weights, draft.0, draws)
            .map(LlamaToken)
            .ok_or_else(|| LocalError::Decode {
                detail: "the sampler's distribution is empty".into(),
            })
    }

    /// The next token from batch row `row` (`logits` is that row,
    /// `argmax` its first largest logit). The grammar, if any, has
    /// accepted it.
    pub(super) fn pick(
        &mut self,
        ctx: &LlamaContext<'_>,
        row: i32,
        logits: &[f32],
        argmax: usize,
    ) -> Result<LlamaToken, LocalError> {
        let Some(mut grammar) = self.grammar.take() else {
            return Ok(match self.chain.as_mut() {
                None => LlamaToken(argmax as i32),
                // The chain copies the row and accepts its own token.
                Some(chain) => chain.sample(ctx, row),
            });
        };
        let picked = if self.full_pass {
            self.pick_full(&mut grammar, logits)
        } else {
            self.pick_checked(&mut grammar, logits, argmax)
        };
        if let Ok(token) = picked {
            // Only ever a token the grammar allowed: accepting one it does
            // not (an end of generation above all) aborts in llama.cpp.
            grammar.accept(token);
        }
        self.grammar = Some(grammar);
        picked
    }

    /// The grammar first, over the whole vocabulary, then the pick.
    fn pick_full(
        &mut self,
        grammar: &mut LlamaSampler,
        logits: &[f32],
    ) -> Result<LlamaToken, LocalError> {
        self.fill(logits, 0..logits.len() as u32);
        self.scratch.apply_sampler(grammar);
        self.choose_in_scratch()
    }

    fn pick_checked(
        &mut self,
        grammar: &mut LlamaSampler,
        logits: &[f32],
        argmax: usize,
    ) -> Result<LlamaToken, LocalError> {
        let first = match self.chain.as_mut() {
            None => LlamaToken(argmax as i32),
            Some(chain) => {
                run_on_row(&mut self.scratch, logits, chain);
                self.scratch
                    .selected_token()
                    .unwrap_or(LlamaToken(argmax as i32))
            }
        };
        self.fill(logits, [first.0 as u32]);
        self.scratch.apply_sampler(grammar);
        if self.scratch.data.first().is_some_and(allowed) {
            return Ok(first);
        }
        // Rejected: the best-ranked few, in order.
        self.rank(logits, RANKED);
        let order = std::mem::take(&mut self.order);
        self.fill(logits, order.iter().copied());
        self.order = order;
        self.scratch.apply_sampler(grammar);
        self.scratch.data.retain(allowed);
        match self.chain {
            // Ranked order: the first allowed one is greedy's pick.
            None => {
                if let Some(best) = self.scratch.data.first() {
                    return Ok(best.id());
                }
            }
            Some(_) if self.top_k > 0 && self.scratch.data.len() >= self.top_k => {
                self.scratch.data.truncate(self.top_k);
                self.scratch.sorted = true;
                return self.choose_in_scratch();
            }
            Some(_) => {}
        }
        self.pick_full(grammar, logits)
    }

    /// Greedy: the first largest allowed logit; random: the chain's draw.
    fn choose_in_scratch(&mut self) -> Result<LlamaToken, LocalError> {
        match self.chain.as_mut() {
            None => {
                let mut best: Option<LlamaTokenData> = None;
                for d in self.scratch.data.iter().filter(|d| allowed(d)) {
                    let better = best.is_none_or(|b| {
                        d.logit() > b.logit() || (d.logit() == b.logit() && d.id().0 < b.id().0)
                    });
                    if better {
                        best = Some(*d);
                    }
                }
                best.map(|d| d.id())
            }
            Some(chain) => {
                self.scratch.selected = None;
                self.scratch.apply_sampler(chain);
                self.scratch
                    .selected_token()
                    .filter(|t| self.scratch.data.iter().any(|d| d.id() == *t && allowed(d)))
            }
        }
        .ok_or_else(|| LocalError::Grammar {
            detail: "the grammar allows no token here".into(),
        })
    }

    /// Puts the `ids` tokens with their logits in the scratch buffer.
    fn fill(&mut self, logits: &[f32], ids: impl IntoIterator<Item = u32>) {
        self.scratch.data.clear();
        self.scratch.data.extend(
            ids.into_iter()
                .map(|i| LlamaTokenData::new(LlamaToken(i as i32), logits[i as usize], 0.0)),
        );
        self.scratch.selected = None;
        self.scratch.sorted = false;
    }

    /// The `n` best tokens into `order`, by logit descending then id
    /// ascending (greedy's tie rule).
    fn rank(&mut self, logits: &[f32], n: usize) {
        let by_rank = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        self.order.clear();
        self.order.extend(0..logits.len() as u32);
        let n = n.min(self.order.len());
        if n < self.order.len() {
            self.order.select_nth_unstable_by(n, by_rank);
            self.order.truncate(n);
        }
        self.order.sort_unstable_by(by_rank);
    }
}

fn allowed(d: &LlamaTokenData) -> bool {
    d.logit() != f32::NEG_INFINITY
}

/// The seed of sample `sample`'s draws: the request's, else the clock's.
fn seed_of(sampling: &Sampling, sample: u32) -> u32 {
    sampling
        .seed
        .map_or_else(
            || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos())
            },
            |s| (s ^ (s >> 32)) as u32,
        )
        .wrapping_add(sample)
}

/// Top-k, top-p, temperature and a seeded draw; `None` for greedy.
fn random_chain(sampling: &Sampling, sample: u32) -> Option<LlamaSampler> {
    if sampling.temperature <= 0.0 {
        return None;
    }
    let mut chain = shaping(sampling);
    chain.push(LlamaSampler::dist(seed_of(sampling, sample)));
    Some(LlamaSampler::chain_simple(chain))
}

/// [`random_chain`] without its draw, and the acceptance rule's own draws
/// (seeded like the chain); `None` for greedy.
fn shape_chain(sampling: &Sampling, sample: u32) -> Option<(LlamaSampler, Draws)> {
    if sampling.temperature <= 0.0 {
        return None;
    }
    Some((
        LlamaSampler::chain_simple(shaping(sampling)),
        Draws::new(u64::from(seed_of(sampling, sample))),
    ))
}

/// The samplers that shape the distribution a random pick draws from, in
/// the chain's order: top-k, top-p, temperature.
fn shaping(sampling: &Sampling) -> Vec<LlamaSampler> {
    let mut chain = Vec::new();
    if sampling.top_k > 0 {
        chain.push(LlamaSampler::top_k(
            sampling.top_k.min(i32::MAX as u32) as i32
        ));
    }
    if sampling.top_p < 1.0 {
        chain.push(LlamaSampler::top_p(sampling.top_p, 1));
    }
    chain.push(LlamaSampler::temp(sampling.temperature));
    chain
}

/// llama.cpp's grammar sampler for `spec` (lazy when it has triggers).
fn grammar_sampler(model: &LlamaModel, spec: &GrammarSpec) -> Result<LlamaSampler, LocalError> {
    let made = match &spec.triggers {
        None => LlamaSampler::grammar(model, &spec.text, &spec.root),
        Some(words) => {
            // A trigger word that is one token of its own (Qwen's
            // `<tool_call>`) is also a trigger token: special tokens may
            // not reach the word matcher as text.
            let vocab = model.vocab();
            let tokens: Vec<LlamaToken> = words
                .iter()
                .filter_map(
                    |w| match vocab.tokenize(w.as_bytes(), false, true).as_slice() {
                        [one] => Some(*one),
                        _ => None,
                    },
                )
                .collect();
            LlamaSampler::grammar_lazy(model, &spec.text, &spec.root, words, &tokens)
        }
    };
    made.map_err(|e| LocalError::Grammar {
        detail: e.to_string(),
    })
}
/// Runs `sampler` over a whole row of `logits`, in `scratch` (its buffer
/// reused): what a sampled pick and a judged draft both start from.
fn run_on_row(scratch: &mut LlamaTokenDataArray, logits: &[f32], sampler: &mut LlamaSampler) {
    scratch.data.clear();
    scratch.data.extend(
        logits
            .iter()
            .enumerate()
            .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
    );
    scratch.selected = None;
    scratch.sorted = false;
    scratch.apply_sampler(sampler);
}
